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

/// Runs the decoder over left-padded (prompt, response) rows; see [`ResponseHidden`].
pub fn response_hidden(model: &Decoder, pairs: &[SequencePair]) -> Result<ResponseHidden> {
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
    let hidden = model.forward(
        &ids,
        &positions_from_mask(&valid),
        &prefill_mask(&valid),
        None,
    );
    // Hidden states at width-R-1 .. width-2 predict the last R tokens.
    Ok(ResponseHidden {
        hidden: hidden.narrow(1, width - r - 1, r),
        targets: ids.narrow(1, width - r, r),
        mask,
    })
}

/// [`ResponseHidden`] of rows that share one prompt: the prompt runs once (its keys and
/// values, with grad, are attended by every row), then the responses, left-padded, so
/// the layout is that of [`response_hidden`].
pub fn shared_prompt_hidden(
    model: &Decoder,
    prompt: &[i64],
    responses: &[&[i64]],
) -> Result<ResponseHidden> {
    if prompt.is_empty() || responses.is_empty() || responses.iter().any(|r| r.is_empty()) {
        return Err(ModelError::Other {
            what: "training forward".into(),
            message: "no rows, or a prompt or response is empty".into(),
        });
    }
    let device = model.device();
    let p = prompt.len() as i64;
    let g = responses.len() as i64;
    let r = responses.iter().map(|x| x.len()).max().unwrap_or(0) as i64;
    model.check_context(
        || format!("training forward: a prompt of {p} + the longest response of {r}"),
        (p + r) as u64,
    )?;
    let (prompt_hidden, prefix) =
        model.forward_prefix(&Tensor::from_slice(prompt).view([1, p]).to_device(device));
    let mut ids = Vec::with_capacity((g * r) as usize);
    let mut valid = Vec::with_capacity((g * r) as usize);
    let mut first = Vec::with_capacity((g * r) as usize);
    for x in responses {
        let pad = r as usize - x.len();
        ids.extend(std::iter::repeat_n(0i64, pad).chain(x.iter().copied()));
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, x.len())));
        first.extend((0..r as usize).map(|c| c == pad));
    }
    let ids = Tensor::from_slice(&ids).view([g, r]).to_device(device);
    let valid = Tensor::from_slice(&valid).view([g, r]).to_device(device);
    let first = Tensor::from_slice(&first).view([g, r, 1]).to_device(device);
    let positions = positions_from_mask(&valid) + p;
    // Every response token sees the whole prompt, then its own row causally.
    let to_prompt = Tensor::ones([g, 1, r, p], (Kind::Bool, device));
    let mask = Tensor::cat(&[to_prompt, prefill_mask(&valid)], 3);
    let hidden = model.forward_continuation(&ids, &positions, &mask, &prefix);
    let width = hidden.size()[2];
    // The prompt's last state predicts each response's first token; response position
    // c − 1 predicts the token at c.
    let last = prompt_hidden
        .narrow(1, p - 1, 1)
        .expand([g, r, width], false);
    let shifted = Tensor::cat(&[last.narrow(1, 0, 1), hidden.narrow(1, 0, r - 1)], 1);
    Ok(ResponseHidden {
        hidden: last.where_self(&first, &shifted),
        targets: ids,
        mask: valid.to_kind(Kind::Float),
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
