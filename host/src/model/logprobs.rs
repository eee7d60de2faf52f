//! The training forward: log-probs (and entropy) of response tokens given their prompts,
//! with grad, for one micro-batch; and the planner that cuts a batch into micro-batches
//! under a token budget.

use super::{
    decoder::{Decoder, positions_from_mask, prefill_mask},
    error::{ModelError, Result},
};
use tch::{Kind, Tensor};

/// One (prompt, response) pair.
#[derive(Debug, Clone, Copy)]
pub struct SequencePair<'a> {
    pub prompt: &'a [i64],
    pub response: &'a [i64],
}

/// Per-token values of a micro-batch, [N, R] with R the longest response. Responses are
/// right-aligned: row i's token j is at column R − len_i + j; `mask` is 1 there.
pub struct ResponseLogprobs {
    pub logprobs: Tensor,
    pub entropy: Option<Tensor>,
    pub mask: Tensor,
}

impl ResponseLogprobs {
    /// Row `i`'s values, in response order (for tests and inspection).
    pub fn row(&self, i: i64, len: usize) -> Vec<f32> {
        let r = self.logprobs.size()[1];
        let row = self.logprobs.get(i).narrow(0, r - len as i64, len as i64);
        Vec::<f32>::try_from(row.to_kind(Kind::Float)).unwrap_or_default()
    }
}

/// The final hidden states at the positions that predict each response token, for a
/// micro-batch: `hidden` [N, R, H] (with grad when grad is on), the predicted `targets`
/// [N, R] and `mask` [N, R] (1 at real tokens). Rows are right-aligned as in
/// [`ResponseLogprobs`]. Logits are not computed here: the caller turns chunks of rows
/// into log-probs ([`token_logprobs`]) so float32 logits over the vocabulary never exist
/// for the whole micro-batch at once.
pub struct ResponseHidden {
    pub hidden: Tensor,
    pub targets: Tensor,
    pub mask: Tensor,
}

/// One input of a training pass: token `ids` [B, T], their `positions` [B, T] and the
/// boolean attention `mask` [B, 1, T, S] (see [`Decoder::forward`]).
pub struct PassInput {
    pub ids: Tensor,
    pub positions: Tensor,
    pub mask: Tensor,
}

/// A micro-batch's training pass, laid out: what the decoder runs, and where the
/// states that predict each response token are in its output. [`response_hidden`] and
/// [`packed_hidden`] run it whole; sharded training runs it layer by layer
/// (ARCHITECTURE.md, "update").
pub struct PassPlan {
    /// The rows the response states are read from: left-padded (prompt, response)
    /// rows, or the lanes of packed continuations.
    pub rows: PassInput,
    /// Packed: the shared prefixes the lanes continue (a left-padded batch [K, P]) and,
    /// for prefix k, the lanes (first, count) that continue it.
    pub prefixes: Option<(PassInput, Vec<(i64, i64)>)>,
    readout: Readout,
    targets: Tensor,
    mask: Tensor,
}

/// Where a pass's response states are in its final hidden states.
enum Readout {
    /// Padded rows: columns `start .. start + len` of every row.
    Columns { start: i64, len: i64 },
    /// Packed lanes [L, C]: the flat lane positions `at` [N·R], read as [N, R].
    Positions { at: Tensor, n: i64, r: i64 },
}

impl PassPlan {
    /// The response states out of the pass's final hidden states (after the final
    /// norm) of [`PassPlan::rows`].
    pub fn read(&self, hidden: &Tensor) -> ResponseHidden {
        let hidden = match &self.readout {
            // Hidden states at width-R-1 .. width-2 predict the last R tokens.
            Readout::Columns { start, len } => hidden.narrow(1, *start, *len),
            Readout::Positions { at, n, r } => {
                let (l, c, width) = hidden.size3().expect("lanes' states are [L, C, H]");
                hidden
                    .reshape([l * c, width])
                    .index_select(0, at)
                    .view([*n, *r, width])
            }
        };
        ResponseHidden {
            hidden,
            targets: self.targets.shallow_clone(),
            mask: self.mask.shallow_clone(),
        }
    }

    /// The whole pass through `model`'s forward.
    pub fn run(&self, model: &Decoder) -> ResponseHidden {
        let rows = &self.rows;
        let hidden = match &self.prefixes {
            None => model.forward(&rows.ids, &rows.positions, &rows.mask, None),
            Some((prefix, spans)) => {
                let (_, prefix_kv) =
                    model.forward_prefixes(&prefix.ids, &prefix.positions, &prefix.mask);
                model.forward_continuations(
                    &rows.ids,
                    &rows.positions,
                    &rows.mask,
                    &prefix_kv,
                    spans,
                )
            }
        };
        self.read(&hidden)
    }
}

/// Runs the decoder over left-padded (prompt, response) rows; see [`ResponseHidden`].
pub fn response_hidden(model: &Decoder, pairs: &[SequencePair]) -> Result<ResponseHidden> {
    Ok(padded_plan(model, pairs)?.run(model))
}

/// The pass of [`response_hidden`], laid out.
pub fn padded_plan(model: &Decoder, pairs: &[SequencePair]) -> Result<PassPlan> {
    if pairs.is_empty()
        || pairs
            .iter()
            .any(|p| p.prompt.is_empty() || p.response.is_empty())
    {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: "no rows, or a prompt or response is empty".into(),
        });
    }
    let device = model.device();
    let n = pairs.len() as i64;
    let width = pairs
        .iter()
        .map(|p| p.prompt.len() + p.response.len())
        .max()
        .unwrap_or(0) as i64;
    let r = pairs.iter().map(|p| p.response.len()).max().unwrap_or(0) as i64;
    model.check_context(
        || "training forward: the longest prompt + response".to_string(),
        width as u64,
    )?;
    let mut ids = Vec::with_capacity((n * width) as usize);
    let mut valid = Vec::with_capacity((n * width) as usize);
    let mut mask = Vec::with_capacity((n * r) as usize);
    for p in pairs {
        let len = p.prompt.len() + p.response.len();
        let pad = width as usize - len;
        ids.extend(
            std::iter::repeat_n(0i64, pad)
                .chain(p.prompt.iter().copied())
                .chain(p.response.iter().copied()),
        );
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, len)));
        let rpad = r as usize - p.response.len();
        mask.extend(
            std::iter::repeat_n(0f32, rpad).chain(std::iter::repeat_n(1f32, p.response.len())),
        );
    }
    let ids = Tensor::from_slice(&ids).view([n, width]).to_device(device);
    let valid = Tensor::from_slice(&valid)
        .view([n, width])
        .to_device(device);
    let mask = Tensor::from_slice(&mask).view([n, r]).to_device(device);
    Ok(PassPlan {
        targets: ids.narrow(1, width - r, r),
        rows: PassInput {
            positions: positions_from_mask(&valid),
            mask: prefill_mask(&valid),
            ids,
        },
        prefixes: None,
        readout: Readout::Columns {
            start: width - r - 1,
            len: r,
        },
        mask,
    })
}

/// [`ResponseHidden`] of rows that share one prompt: the prompt (but its last token)
/// runs once and its keys and values, with grad, are attended by every row — a
/// [`packed_hidden`] of one group.
pub fn shared_prompt_hidden(
    model: &Decoder,
    prompt: &[i64],
    responses: &[&[i64]],
) -> Result<ResponseHidden> {
    if prompt.len() < 2 || responses.is_empty() || responses.iter().any(|r| r.is_empty()) {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: "no rows, a prompt shorter than 2 tokens, or an empty response".into(),
        });
    }
    let r = responses.iter().map(|x| x.len()).max().unwrap_or(0);
    model.check_context(
        || {
            format!(
                "training forward: a prompt of {} + the longest response of {r}",
                prompt.len()
            )
        },
        (prompt.len() + r) as u64,
    )?;
    packed_hidden(
        model,
        &[PrefixGroup {
            prefix: prompt.len() - 1,
            rows: responses
                .iter()
                .map(|response| SequencePair { prompt, response })
                .collect(),
        }],
    )
}

/// Rows whose prompts begin with the same `prefix` tokens (at least one token short of
/// the shortest of them, so each row continues with at least one prompt token of its
/// own).
#[derive(Debug, Clone)]
pub struct PrefixGroup<'a> {
    pub prefix: usize,
    pub rows: Vec<SequencePair<'a>>,
}

/// One row of a packed micro-batch's continuations: continuations of one group, end to
/// end.
struct Lane {
    group: usize,
    /// (row index in the output, start column within the used part).
    members: Vec<(usize, usize)>,
    used: usize,
}

/// [`ResponseHidden`] of several groups of rows in one pass, each group's shared prefix
/// computed once: the prefixes run as one left-padded batch [K, P] whose keys and
/// values (with grad) every row of the group attends; each row's continuation (the rest
/// of its prompt, then its response) is packed with the group's others, without
/// padding between them, into lanes as wide as the longest continuation, attention
/// kept within each continuation. Rows come out in the groups' order, laid out as
/// [`response_hidden`] lays them out, and give its values up to summation order
/// (tests/it/train_prefix.rs).
pub fn packed_hidden(model: &Decoder, groups: &[PrefixGroup]) -> Result<ResponseHidden> {
    Ok(packed_plan(model, groups)?.run(model))
}

/// The pass of [`packed_hidden`], laid out.
pub fn packed_plan(model: &Decoder, groups: &[PrefixGroup]) -> Result<PassPlan> {
    let bad = groups.is_empty()
        || groups.iter().any(|g| {
            g.rows.is_empty()
                || g.prefix == 0
                || g.rows.iter().any(|r| {
                    r.response.is_empty()
                        || r.prompt.len() <= g.prefix
                        || r.prompt[..g.prefix] != g.rows[0].prompt[..g.prefix]
                })
        });
    if bad {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: "a packed micro-batch needs groups of rows whose prompts share a \
                      non-empty prefix shorter than each prompt, and non-empty responses"
                .into(),
        });
    }
    let longest = groups
        .iter()
        .flat_map(|g| &g.rows)
        .map(|r| r.prompt.len() + r.response.len())
        .max()
        .unwrap_or(0);
    model.check_context(
        || "training forward: the longest prompt + response".to_string(),
        longest as u64,
    )?;
    let device = model.device();
    let k = groups.len() as i64;
    let p = groups.iter().map(|g| g.prefix).max().unwrap_or(0) as i64;
    let mut prefix_ids = Vec::with_capacity((k * p) as usize);
    let mut prefix_valid = Vec::with_capacity((k * p) as usize);
    for g in groups {
        let pad = p as usize - g.prefix;
        prefix_ids.extend(
            std::iter::repeat_n(0i64, pad).chain(g.rows[0].prompt[..g.prefix].iter().copied()),
        );
        prefix_valid
            .extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, g.prefix)));
    }
    let prefix_ids = Tensor::from_slice(&prefix_ids)
        .view([k, p])
        .to_device(device);
    let prefix_valid = Tensor::from_slice(&prefix_valid)
        .view([k, p])
        .to_device(device);
    let prefix = PassInput {
        positions: positions_from_mask(&prefix_valid),
        mask: prefill_mask(&prefix_valid),
        ids: prefix_ids,
    };

    // Each row's continuation: the rest of its prompt, then its response. They are
    // packed without padding into lanes as wide as the longest one, a lane holding
    // continuations of one group only (it attends to that group's prefix), each
    // continuation attending to its own tokens only.
    let rest = |g: &PrefixGroup, r: &SequencePair| r.prompt.len() - g.prefix + r.response.len();
    let c = groups
        .iter()
        .flat_map(|g| g.rows.iter().map(move |r| rest(g, r)))
        .max()
        .unwrap_or(0);
    let r = groups
        .iter()
        .flat_map(|g| g.rows.iter().map(|x| x.response.len()))
        .max()
        .unwrap_or(0);
    let mut lanes: Vec<Lane> = Vec::new();
    let mut spans = Vec::with_capacity(groups.len());
    let mut out_row = 0;
    for (gi, g) in groups.iter().enumerate() {
        let first_lane = lanes.len();
        // Longest first, each into the first lane of the group with room (first fit
        // decreasing).
        let mut order: Vec<usize> = (0..g.rows.len()).collect();
        order.sort_by_key(|&j| (std::cmp::Reverse(rest(g, &g.rows[j])), j));
        for j in order {
            let len = rest(g, &g.rows[j]);
            match lanes[first_lane..].iter_mut().find(|l| l.used + len <= c) {
                Some(lane) => {
                    lane.members.push((out_row + j, lane.used));
                    lane.used += len;
                }
                None => lanes.push(Lane {
                    group: gi,
                    members: vec![(out_row + j, 0)],
                    used: len,
                }),
            }
        }
        spans.push((first_lane as i64, (lanes.len() - first_lane) as i64));
        out_row += g.rows.len();
    }
    let n = out_row;
    let pairs: Vec<(usize, &SequencePair)> = groups
        .iter()
        .flat_map(|g| g.rows.iter().map(move |x| (g.prefix, x)))
        .collect();
    let l = lanes.len();
    // A lane's continuations sit at its right end, in the order packed; the columns
    // before them are padding.
    let mut ids = vec![0i64; l * c];
    let mut segment = vec![-1i64; l * c];
    let mut positions = vec![0i64; l * c];
    let mut group_of_lane = Vec::with_capacity(l);
    // For each output row and response column: the flat lane position of the state that
    // predicts it (0 where the row has no token there; masked).
    let mut at = vec![0i64; n * r];
    let mut targets = vec![0i64; n * r];
    let mut mask = vec![0f32; n * r];
    for (li, lane) in lanes.iter().enumerate() {
        group_of_lane.push(lane.group as i64);
        let pad = c - lane.used;
        for &(row, start) in &lane.members {
            let (prefix, pair) = pairs[row];
            let own = &pair.prompt[prefix..];
            let len = own.len() + pair.response.len();
            let base = li * c + pad + start;
            for (t, &id) in own.iter().chain(pair.response).enumerate() {
                ids[base + t] = id;
                segment[base + t] = row as i64;
                positions[base + t] = (prefix + t) as i64;
            }
            let rl = pair.response.len();
            for (t, &id) in pair.response.iter().enumerate() {
                let col = row * r + r - rl + t;
                // The state before response token t: column len − rl − 1 + t.
                at[col] = (base + len - rl - 1 + t) as i64;
                targets[col] = id;
                mask[col] = 1.0;
            }
        }
    }
    let (l, c, n, r) = (l as i64, c as i64, n as i64, r as i64);
    let ids = Tensor::from_slice(&ids).view([l, c]).to_device(device);
    let segment = Tensor::from_slice(&segment).view([l, c]).to_device(device);
    let positions = Tensor::from_slice(&positions)
        .view([l, c])
        .to_device(device);
    let group_of_lane = Tensor::from_slice(&group_of_lane).to_device(device);
    // Each token sees its own group's prefix (not the prefix batch's padding), then the
    // tokens of its own continuation up to itself; a padding token sees itself too, so
    // no row of the softmax is empty.
    let to_prefix = prefix_valid
        .index_select(0, &group_of_lane)
        .view([l, 1, 1, p])
        .expand([l, 1, c, p], false);
    let causal = Tensor::ones([c, c], (Kind::Bool, device)).tril(0);
    let same = segment
        .unsqueeze(2)
        .eq_tensor(&segment.unsqueeze(1))
        .logical_and(&segment.ge(0).unsqueeze(1));
    let eye = Tensor::eye(c, (Kind::Bool, device));
    let own = same.logical_and(&causal).logical_or(&eye).unsqueeze(1);
    let attend = Tensor::cat(&[to_prefix, own], 3);
    Ok(PassPlan {
        rows: PassInput {
            ids,
            positions,
            mask: attend,
        },
        prefixes: Some((prefix, spans)),
        readout: Readout::Positions {
            at: Tensor::from_slice(&at).to_device(device),
            n,
            r,
        },
        targets: Tensor::from_slice(&targets).view([n, r]).to_device(device),
        mask: Tensor::from_slice(&mask).view([n, r]).to_device(device),
    })
}

/// log p(target) under softmax(logits / temperature) for hidden states [C, R, H] and
/// per-row temperatures [C] (float32), and the entropy of that distribution when asked.
/// The logits of the C rows exist only inside this call.
pub fn token_logprobs(
    model: &Decoder,
    hidden: &Tensor,
    targets: &Tensor,
    temperatures: &Tensor,
    with_entropy: bool,
) -> (Tensor, Option<Tensor>) {
    // At least float32 (bf16 and f16 models); a float64 model stays float64.
    let kind = if hidden.kind() == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    };
    let logits = model.logits(hidden).to_kind(kind) / temperatures.view([-1, 1, 1]);
    let logp_all = logits.log_softmax(-1, kind);
    let logprobs = logp_all
        .gather(2, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1);
    let entropy =
        with_entropy.then(|| -(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, kind));
    (logprobs, entropy)
}

/// [`token_logprobs`] computed only where `mask` [C, R] is 1 (the response tokens of
/// right-aligned rows of different lengths): logits exist only at those positions, and
/// the log-probs and entropy are 0 elsewhere.
pub fn masked_token_logprobs(
    model: &Decoder,
    hidden: &Tensor,
    targets: &Tensor,
    temperatures: &Tensor,
    mask: &Tensor,
    with_entropy: bool,
) -> (Tensor, Option<Tensor>) {
    let (c, r, h) = hidden.size3().expect("hidden states are [C, R, H]");
    let at = mask.reshape([c * r]).nonzero().squeeze_dim(1);
    let kind = if hidden.kind() == Kind::Double {
        Kind::Double
    } else {
        Kind::Float
    };
    let pick = |t: &Tensor| t.reshape([c * r]).index_select(0, &at);
    let temps = temperatures
        .view([c, 1])
        .expand([c, r], false)
        .reshape([c * r])
        .index_select(0, &at);
    let logits = model
        .logits(&hidden.reshape([c * r, h]).index_select(0, &at))
        .to_kind(kind)
        / temps.view([-1, 1]);
    let logp_all = logits.log_softmax(-1, kind);
    let logp = logp_all
        .gather(1, &pick(targets).unsqueeze(-1), false)
        .squeeze_dim(-1);
    let spread = |values: Tensor| {
        Tensor::zeros([c * r], (kind, hidden.device()))
            .index_add(0, &at, &values)
            .view([c, r])
    };
    let entropy = with_entropy
        .then(|| spread(-(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, kind)));
    (spread(logp), entropy)
}

/// Rows per log-softmax chunk so that a chunk's float32 logits (and the two tensors of
/// the same size the softmax and its backward keep) fit in `budget_bytes`.
pub fn rows_per_chunk(budget_bytes: usize, response_len: i64, vocab: i64) -> i64 {
    let per_row = (3 * 4 * response_len.max(1) * vocab.max(1)) as usize;
    (budget_bytes / per_row).max(1) as i64
}

/// Checks the temperatures of a batch: each must be a positive number.
pub fn check_temperatures(temperatures: &[f64]) -> Result<()> {
    match temperatures.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
        Some(t) => Err(ModelError::Other {
            what: "training forward".into(),
            message: format!("temperature must be > 0, got {t}"),
        }),
        None => Ok(()),
    }
}

/// log p(response token | prefix) under softmax(logits / temperature), with grad (or
/// without, under `no_grad`), for rows that each have their own temperature. The
/// log-softmax runs in chunks of rows under `budget_bytes` of logits.
pub fn response_logprobs_per_row(
    model: &Decoder,
    pairs: &[SequencePair],
    temperatures: &[f64],
    with_entropy: bool,
    budget_bytes: usize,
) -> Result<ResponseLogprobs> {
    check_temperatures(temperatures)?;
    if temperatures.len() != pairs.len() {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: format!(
                "{} temperatures for {} rows",
                temperatures.len(),
                pairs.len()
            ),
        });
    }
    let h = response_hidden(model, pairs)?;
    let (n, r) = (pairs.len() as i64, h.targets.size()[1]);
    let temps = Tensor::from_slice(temperatures)
        .to_kind(Kind::Float)
        .to_device(model.device());
    let chunk = rows_per_chunk(budget_bytes, r, model.config.vocab_size);
    let mut logprobs = Vec::new();
    let mut entropies = Vec::new();
    let mut start = 0;
    while start < n {
        let c = chunk.min(n - start);
        let (lp, ent) = token_logprobs(
            model,
            &h.hidden.narrow(0, start, c),
            &h.targets.narrow(0, start, c),
            &temps.narrow(0, start, c),
            with_entropy,
        );
        logprobs.push(lp);
        entropies.extend(ent);
        start += c;
    }
    Ok(ResponseLogprobs {
        logprobs: Tensor::cat(&logprobs, 0) * &h.mask,
        entropy: with_entropy.then(|| Tensor::cat(&entropies, 0) * &h.mask),
        mask: h.mask,
    })
}

/// log p(response token | prefix) under softmax(logits / temperature), with grad.
pub fn response_logprobs(
    model: &Decoder,
    pairs: &[SequencePair],
    temperature: f64,
    with_entropy: bool,
) -> Result<ResponseLogprobs> {
    response_logprobs_per_row(
        model,
        pairs,
        &vec![temperature; pairs.len()],
        with_entropy,
        DEFAULT_LOGITS_BUDGET,
    )
}

/// Default bytes of float32 logits one log-softmax chunk may hold (256 MiB).
pub const DEFAULT_LOGITS_BUDGET: usize = 256 << 20;

/// Cuts sequences (by total length) into micro-batches whose padded size, rows × longest
/// row, stays within `token_budget`. Sequences are sorted by length so rows of a
/// micro-batch pad little; a sequence longer than the budget gets a micro-batch alone.
pub fn plan_micro_batches(lengths: &[usize], token_budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for i in order {
        match batches.last_mut() {
            // Sorted descending: the first row of a micro-batch is its longest.
            Some(batch) if (batch.len() + 1) * longest <= token_budget => batch.push(i),
            _ => {
                longest = lengths[i];
                batches.push(vec![i]);
            }
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::plan_micro_batches;

    #[test]
    fn micro_batches_respect_the_budget() {
        let lengths = [10, 3, 7, 10, 2, 30];
        let plan = plan_micro_batches(&lengths, 20);
        assert_eq!(plan, vec![vec![5], vec![0, 3], vec![2, 1], vec![4]]);
        for batch in &plan {
            let longest = batch.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(batch.len() == 1 || batch.len() * longest <= 20);
        }
        let mut all: Vec<usize> = plan.concat();
        all.sort();
        assert_eq!(all, vec![0, 1, 2, 3, 4, 5]);
    }
}
