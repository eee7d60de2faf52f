//! Batched generation: left padding, per-row positions and masks, a preallocated KV
//! cache, identical prompts prefilled once and forked, per-row sampling settings and
//! seeds, finished rows dropped from the batch as they finish.
//!
//! A row's result does not depend on what else is in the batch, bit for bit: it draws
//! its random numbers from its own generator seeded by its request, and its tensors
//! have shapes set by itself alone: its prompt's [`bucket`]; every matrix product in
//! blocks of a fixed number of rows (one prompt's bucket while prefilling, [`MIN_ROWS`]
//! while decoding and in the head, [`ModeGuard::product_rows`]), since libtorch's CPU
//! GEMM sums a row in another order when the product's row count changes; attention
//! over its own bucket's columns. See docs/training.md (reproducibility) for what was
//! measured.

use super::{
    decoder::{Decoder, in_row_blocks, positions_from_mask, prefill_mask},
    error::{ModelError, Result},
    kv_cache::AttentionGroup,
    memory,
    mode::ModeGuard,
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::HashMap;
use tch::{Kind, Tensor};

/// How one request is sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy (log-probs are then those of temperature 1).
    pub temperature: f64,
    /// Nucleus sampling; 1 = off.
    pub top_p: f64,
    /// 0 = off.
    pub top_k: i64,
    pub max_new_tokens: usize,
    /// Generation stops after any of these tokens (it is kept in the output).
    pub stop_token_ids: Vec<i64>,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 256,
            stop_token_ids: Vec::new(),
            seed: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    pub prompt: Vec<i64>,
    pub params: SamplingParams,
    /// The prompt's first tokens that other requests likely share (the chat's messages
    /// before the last one: system prompt, worked examples): at least
    /// [`MIN_SHARED_PREFIX`] of them, and fewer than the prompt, and the prompt is
    /// prefilled in two parts, the prefix once for every row of the batch that shares it.
    /// 0 = no hint. A row's result depends on its own prompt and hint alone.
    pub shared_prefix: usize,
}

/// The shortest prefix worth prefilling apart (shorter hints are ignored).
pub const MIN_SHARED_PREFIX: usize = 32;

/// The tokens of a request's prompt prefilled as a shared prefix (0 = none).
fn split_of(r: &GenerationRequest) -> usize {
    if r.shared_prefix >= MIN_SHARED_PREFIX && r.shared_prefix < r.prompt.len() {
        r.shared_prefix
    } else {
        0
    }
}

/// The width a prompt of `len` tokens takes in a batch's cache: its [`bucket`], or,
/// split after a shared prefix of `split` tokens, the prefix's bucket then the rest's.
fn row_width(len: usize, split: usize) -> i64 {
    if split == 0 {
        bucket(len)
    } else {
        bucket(split) + bucket(len - split)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token was generated.
    StopToken,
    /// A stop string was found by the [`StopCheck`]; the tokens were cut after it.
    StopString,
    /// `max_new_tokens` was reached.
    Length,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub tokens: Vec<i64>,
    /// log p(token) under softmax(logits / temperature), one per token.
    pub logprobs: Vec<f32>,
    pub finish: FinishReason,
    /// How many updates the weights that sampled it had received (set by the model
    /// worker; 0 from [`generate`] itself).
    pub policy_version: u64,
}

/// Decides, after each new token, whether a row's text hit a stop string.
pub trait StopCheck {
    /// `Some(n)`: stop, keeping the first `n` generated tokens.
    fn check(&self, request: usize, tokens: &[i64]) -> Option<usize>;
}

struct Row {
    rng: StdRng,
    tokens: Vec<i64>,
    logprobs: Vec<f32>,
    finish: Option<FinishReason>,
}

/// The rows of every matrix product of a decode step and of the head: a batch's rows
/// are cut into blocks of exactly this many ([`in_row_blocks`]), and a batch keeps at
/// least this many rows ("ghost" copies of a row, whose results are thrown away).
/// libtorch's CPU GEMM (MKL) sums a row in an order set by the product's shape: it
/// differs for 1, 2–3 rows, when a thread's share falls below 4 rows, and on AVX-512
/// with 2 threads for `K = 1536` products of 57–192 rows (the reduction split over the
/// threads), so no row count above some threshold is safe on every host; one fixed
/// shape is (measured, docs/training.md).
pub const MIN_ROWS: usize = 16;

/// The width a prompt of `len` tokens is left-padded to. It depends on the prompt
/// alone, so a row's padding, attention length and prefill shape are the same in every
/// batch: attention over a different padding or length sums in another order, and its
/// last bits differ. Steps of 16 tokens up to 128, then an eighth of the next power of
/// two (≤ 12.5 % padding); at least 16, a prompt's prefill products have that many rows.
pub fn bucket(len: usize) -> i64 {
    let len = len.max(1) as u64;
    let step = (len.next_power_of_two() / 8).max(16);
    len.div_ceil(step).saturating_mul(step) as i64
}

/// Generates completions for `requests` in one batch. Refused before anything is
/// allocated: a request whose prompt and `max_new_tokens` exceed the model's context,
/// a batch whose memory estimate ([`memory::estimate_generation`]) does not fit. A step
/// whose logits are not finite fails the batch.
pub fn generate(
    model: &Decoder,
    requests: &[GenerationRequest],
    stop: Option<&dyn StopCheck>,
) -> Result<Vec<Generation>> {
    generate_routed(model, requests, None, stop)
}

/// A row of the batch's tensors: a request (by its index) or a ghost that only keeps
/// the batch at [`MIN_ROWS`] (a finished row, or a copy made to fill a small batch).
#[derive(Clone, Copy)]
struct Slot {
    request: Option<usize>,
    bucket: i64,
    adapter: Option<usize>,
}

/// [`generate`] where request `i` runs through LoRA adapter `adapters[i]` (`None` =
/// the base weights): requests of different adapters share one batch, and identical
/// prompts are prefilled once only within one adapter. Without `adapters` the model's
/// current routing is used.
///
/// What a row computes does not depend on its batch-mates: each prompt is padded to its
/// own [`bucket`], prefilled with the prompts of its bucket only, and attends over its
/// own bucket's key columns while decoding; every product is computed in blocks of a
/// fixed row count (a prompt's own bucket in its prefill, [`MIN_ROWS`] otherwise);
/// each row samples by the rule its own settings pick, with its own seeded generator.
/// (One exception: LoRA rows of different adapters in one batch share the adapter
/// deltas' products by adapter, so those depend on how many rows each adapter has.)
pub fn generate_routed(
    model: &Decoder,
    requests: &[GenerationRequest],
    adapters: Option<&[Option<usize>]>,
    stop: Option<&dyn StopCheck>,
) -> Result<Vec<Generation>> {
    if let Some(a) = adapters {
        assert_eq!(a.len(), requests.len(), "one adapter per request");
    }
    let adapter_of = |i: usize| adapters.and_then(|a| a[i]);
    // The routing and the row-block products are this generation's: the guard puts
    // back what later forwards (training, log-probs) had, whether it ends, fails or
    // panics.
    let mode = model.mode();
    let route = |rows: &mut dyn Iterator<Item = Option<usize>>| {
        if adapters.is_some() {
            mode.route_rows(&rows.collect::<Vec<_>>());
        }
    };
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    for (i, r) in requests.iter().enumerate() {
        if r.prompt.is_empty() {
            return Err(ModelError::Other {
                what: format!("request {i}"),
                message: "empty prompt".into(),
            });
        }
        if !(r.params.temperature >= 0.0
            && r.params.top_p > 0.0
            && r.params.top_p <= 1.0
            && r.params.top_k >= 0)
        {
            return Err(ModelError::Other {
                what: format!("request {i}"),
                message: format!("bad sampling settings {:?}", r.params),
            });
        }
        check_request_context(model, i, r)?;
    }
    let _guard = tch::no_grad_guard();
    let device = model.device();

    // The batch's rows by bucket, widest first (stable), so each bucket's rows are
    // contiguous: its decode attention is one group.
    let bucket_of = |i: usize| row_width(requests[i].prompt.len(), split_of(&requests[i]));
    let mut layout: Vec<usize> = (0..requests.len()).collect();
    layout.sort_by_key(|&i| std::cmp::Reverse(bucket_of(i)));

    // Identical prompts (through the same adapter, split alike) are prefilled once.
    let mut unique: Vec<Prompt> = Vec::new();
    let mut unique_adapter: Vec<Option<usize>> = Vec::new();
    let mut index: HashMap<(Option<usize>, &[i64], usize), i64> = HashMap::new();
    let mut fork: Vec<i64> = layout
        .iter()
        .map(|&i| {
            let split = split_of(&requests[i]);
            *index
                .entry((adapter_of(i), requests[i].prompt.as_slice(), split))
                .or_insert_with(|| {
                    unique.push(Prompt {
                        ids: requests[i].prompt.as_slice(),
                        split,
                    });
                    unique_adapter.push(adapter_of(i));
                    unique.len() as i64 - 1
                })
        })
        .collect();
    let width = unique[0].width();
    let max_new = requests
        .iter()
        .map(|r| r.params.max_new_tokens)
        .max()
        .unwrap_or(0) as i64;
    let mut slots: Vec<Slot> = layout
        .iter()
        .map(|&i| Slot {
            request: Some(i),
            bucket: bucket_of(i),
            adapter: adapter_of(i),
        })
        .collect();
    while slots.len() < MIN_ROWS {
        let last = *slots.last().expect("at least one request");
        slots.push(Slot {
            request: None,
            ..last
        });
        fork.push(*fork.last().expect("at least one request"));
    }
    let estimate = memory::check_generation(
        &model.config,
        model.kind(),
        device,
        slots.len() as u64,
        width as u64,
        max_new as u64,
    )?;
    let started = std::time::Instant::now();
    let (valid, mut cache, mut logits) = prefill(
        model,
        &mode,
        &unique,
        &unique_adapter,
        &|rows: &[usize]| route(&mut rows.iter().map(|&u| unique_adapter[u])),
        width,
        width + max_new.max(1),
    )?;
    memory::note_generation_peak(device, estimate.total());
    tracing::debug!(
        prompts = unique.len(),
        width,
        estimate = %estimate.describe(),
        seconds = started.elapsed().as_secs_f64(),
        "prefill"
    );
    let started = std::time::Instant::now();
    let mut steps = 0usize;
    let positions = positions_from_mask(&valid);

    // Fork the prefilled prompts into one row per request (and the ghosts).
    let identity = fork.iter().enumerate().all(|(i, &r)| i as i64 == r);
    let fork = Tensor::from_slice(&fork).to_device(device);
    if !identity {
        cache = cache.select_rows(&fork);
        logits = logits.index_select(0, &fork);
    }
    let mut key_valid = valid.index_select(0, &fork);
    let mut last_pos = positions.select(1, width - 1).index_select(0, &fork);

    let mut rows: Vec<Row> = requests
        .iter()
        .map(|r| Row {
            rng: StdRng::seed_from_u64(r.params.seed),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            finish: (r.params.max_new_tokens == 0).then_some(FinishReason::Length),
        })
        .collect();
    for s in &mut slots {
        if s.request.is_some_and(|i| rows[i].finish.is_some()) {
            s.request = None;
        }
    }
    let last_position = model.context() - 1;

    loop {
        let live: Vec<usize> = (0..slots.len())
            .filter(|&p| slots[p].request.is_some())
            .collect();
        if live.is_empty() {
            break;
        }
        steps += 1;
        let live_requests: Vec<usize> = live.iter().map(|&p| slots[p].request.unwrap()).collect();
        let live_logits = if live.len() == slots.len() {
            logits.shallow_clone()
        } else {
            let at = live.iter().map(|&p| p as i64).collect::<Vec<_>>();
            logits.index_select(0, &Tensor::from_slice(&at).to_device(device))
        };
        let params: Vec<&SamplingParams> =
            live_requests.iter().map(|&i| &requests[i].params).collect();
        let uniforms: Vec<f64> = live_requests
            .iter()
            .map(|&i| rows[i].rng.random::<f64>())
            .collect();
        let (tokens, logps) = sample(&live_logits, &params, &uniforms);
        // One read from the device a step: the tokens, their log-probs and each row's
        // logit sum (for the finiteness check), packed. On a GPU every read waits for
        // the step's kernels, so three reads were three stalls.
        let (tokens_vec, logps_vec) = read_step(&live_logits, &tokens, &logps)
            .map_err(|e| e.or_rows(&live_requests, steps))?;
        // Ghost rows are fed token 0; what they compute is never read.
        let mut next = vec![0i64; slots.len()];
        for (k, &p) in live.iter().enumerate() {
            let i = live_requests[k];
            let row = &mut rows[i];
            let params = &requests[i].params;
            row.tokens.push(tokens_vec[k]);
            row.logprobs.push(logps_vec[k]);
            if params.stop_token_ids.contains(&tokens_vec[k]) {
                row.finish = Some(FinishReason::StopToken);
            } else if let Some(n) = stop.and_then(|s| s.check(i, &row.tokens)) {
                row.tokens.truncate(n);
                row.logprobs.truncate(n);
                row.finish = Some(FinishReason::StopString);
            } else if row.tokens.len() >= params.max_new_tokens {
                row.finish = Some(FinishReason::Length);
            }
            if row.finish.is_some() {
                slots[p].request = None;
            } else {
                next[p] = tokens_vec[k];
            }
        }
        let still = slots.iter().filter(|s| s.request.is_some()).count();
        if still == 0 {
            break;
        }
        // Finished rows leave the batch while it keeps MIN_ROWS rows.
        let mut spare = slots.len().saturating_sub(still.max(MIN_ROWS));
        if spare > 0 {
            let keep: Vec<usize> = (0..slots.len())
                .filter(|&p| {
                    let drop = slots[p].request.is_none() && spare > 0;
                    spare -= usize::from(drop);
                    !drop
                })
                .collect();
            let at = Tensor::from_slice(&keep.iter().map(|&p| p as i64).collect::<Vec<_>>())
                .to_device(device);
            cache = cache.select_rows(&at);
            key_valid = key_valid.index_select(0, &at);
            last_pos = last_pos.index_select(0, &at);
            next = keep.iter().map(|&p| next[p]).collect();
            slots = keep.iter().map(|&p| slots[p]).collect();
        }
        let b = slots.len() as i64;
        route(&mut slots.iter().map(|s| s.adapter));
        // A ghost may outlive its own request's positions; real rows never reach the
        // clamp (their context was checked).
        last_pos = (last_pos + 1).clamp_max(last_position);
        key_valid = Tensor::cat(&[key_valid, Tensor::ones([b, 1], (Kind::Bool, device))], 1);
        cache.set_groups(Some(attention_groups(&slots, width)));
        let mask = key_valid.view([b, 1, 1, -1]);
        let next = Tensor::from_slice(&next).to_device(device).view([b, 1]);
        mode.product_rows(Some(MIN_ROWS as i64));
        // The positions are clamped to the context above: no device read to check them.
        let hidden = model.forward_bounded(
            &next,
            &last_pos.view([b, 1]),
            last_position,
            &mask,
            Some(&mut cache),
        );
        logits = head_logits(model, &hidden.select(1, 0));
    }
    tracing::debug!(steps, seconds = started.elapsed().as_secs_f64(), "decode");
    Ok(rows
        .into_iter()
        .map(|r| Generation {
            tokens: r.tokens,
            logprobs: r.logprobs,
            finish: r.finish.unwrap_or(FinishReason::Length),
            policy_version: 0,
        })
        .collect())
}

/// The decode attention groups of `slots` (contiguous runs of one bucket) in a cache
/// whose prompts end at column `width`: a bucket-`b` row's keys start at `width - b`.
fn attention_groups(slots: &[Slot], width: i64) -> Vec<AttentionGroup> {
    let mut groups: Vec<AttentionGroup> = Vec::new();
    for (p, s) in slots.iter().enumerate() {
        let key = width - s.bucket;
        match groups.last_mut() {
            Some(g) if g.key == key => g.rows += 1,
            _ => groups.push(AttentionGroup {
                first: p as i64,
                rows: 1,
                key,
            }),
        }
    }
    groups
}

/// Refuses request `i` when its prompt and `max_new_tokens` together are longer than
/// the model's context: positions past it do not exist.
fn check_request_context(model: &Decoder, i: usize, request: &GenerationRequest) -> Result<()> {
    let (prompt, new) = (request.prompt.len(), request.params.max_new_tokens);
    model.check_context(
        || format!("request {i}: prompt of {prompt} tokens + max_new_tokens {new}"),
        (prompt as u64).saturating_add(new as u64),
    )
}

/// What [`read_step`] found wrong: the device's error, or the rows (of the step's live
/// rows) whose logits are not finite.
enum StepReadError {
    Model(ModelError),
    NonFinite(Vec<usize>),
}

impl From<tch::TchError> for StepReadError {
    fn from(e: tch::TchError) -> Self {
        StepReadError::Model(e.into())
    }
}

impl StepReadError {
    /// The error of the batch: live row `k` is request `requests[k]`.
    fn or_rows(self, requests: &[usize], step: usize) -> ModelError {
        match self {
            StepReadError::Model(e) => e,
            StepReadError::NonFinite(bad) => ModelError::NonFinite {
                what: format!(
                    "new token {step} of request(s) {}",
                    bad.iter()
                        .map(|&k| requests[k].to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                message: "the logits are not finite (NaN or infinite)".into(),
            },
        }
    }
}

/// The step's sampled `tokens` and `logps` on the host, in one read, after checking
/// that every row of `logits` is finite: a NaN or an infinity would have been sampled
/// as a garbage token with a NaN log-prob, so the batch fails instead. A row's sum is
/// read with them; only a non-finite sum, which finite values could also give by
/// overflowing, is checked element by element (a second read).
fn read_step(
    logits: &Tensor,
    tokens: &Tensor,
    logps: &Tensor,
) -> std::result::Result<(Vec<i64>, Vec<f32>), StepReadError> {
    let b = tokens.size()[0] as usize;
    let sums = logits.f_sum_dim_intlist(-1, false, Kind::Float)?;
    // Token ids below 2^53 and float32 log-probs are exact in float64.
    let packed = Tensor::f_stack(
        &[
            tokens.f_to_kind(Kind::Double)?,
            logps.f_to_kind(Kind::Double)?,
            sums.f_to_kind(Kind::Double)?,
        ],
        0,
    )?;
    let host = Vec::<f64>::try_from(&packed.f_view([-1])?)?;
    let (tokens, rest) = host.split_at(b);
    let (logps, sums) = rest.split_at(b);
    if sums.iter().any(|s| !s.is_finite()) {
        let per_row = Vec::<bool>::try_from(&logits.f_isfinite()?.f_all_dim(-1, false)?)?;
        let bad: Vec<usize> = (0..b).filter(|&k| !per_row[k]).collect();
        if !bad.is_empty() {
            return Err(StepReadError::NonFinite(bad));
        }
    }
    Ok((
        tokens.iter().map(|&t| t as i64).collect(),
        logps.iter().map(|&l| l as f32).collect(),
    ))
}

/// A distinct prompt of a batch and where it splits after a shared prefix (0 = it
/// does not).
#[derive(Clone, Copy)]
struct Prompt<'a> {
    ids: &'a [i64],
    split: usize,
}

impl Prompt<'_> {
    fn width(&self) -> i64 {
        row_width(self.ids.len(), self.split)
    }

    /// Which positions of its [`Prompt::width`] columns hold tokens: left-padded in
    /// one bucket, or the prefix and the rest each left-padded in its own.
    fn valid(&self) -> Vec<bool> {
        let padded = |len: usize| {
            let pad = bucket(len) as usize - len;
            std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, len))
        };
        if self.split == 0 {
            padded(self.ids.len()).collect()
        } else {
            padded(self.split)
                .chain(padded(self.ids.len() - self.split))
                .collect()
        }
    }
}

/// Left-padded ids and validity [rows, width] of token runs of one bucket.
fn left_padded(runs: &[&[i64]], width: i64, device: tch::Device) -> (Tensor, Tensor) {
    let n = runs.len() as i64;
    let mut ids = Vec::with_capacity((n * width) as usize);
    let mut valid = Vec::with_capacity(ids.capacity());
    for run in runs {
        let pad = width as usize - run.len();
        ids.extend(std::iter::repeat_n(0i64, pad).chain(run.iter().copied()));
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, run.len())));
    }
    (
        Tensor::from_slice(&ids).view([n, width]).to_device(device),
        Tensor::from_slice(&valid)
            .view([n, width])
            .to_device(device),
    )
}

/// Logits [G, V] of hidden states [G, H], the head's products of exactly [`MIN_ROWS`]
/// rows each ([`in_row_blocks`]).
fn head_logits(model: &Decoder, last: &Tensor) -> Tensor {
    in_row_blocks(last, MIN_ROWS as i64, |h| model.decode_logits(h))
}

/// Prefills `prompts` into one left-padded cache of `capacity` tokens, each prompt laid
/// out in its own [`Prompt::width`] at the right of `width` columns. Whole prompts of
/// one [`bucket`] are prefilled together at that bucket's width (so a prompt's prefill
/// has the same shape in every batch). A split prompt's prefix is prefilled alone,
/// once for every prompt of the batch that starts with it (through the same adapter),
/// and the rests of one bucket after one prefix together, attending to its keys.
/// Returns the [U, width] validity mask, the cache, and the logits of each prompt's last
/// token [U, V].
fn prefill(
    model: &Decoder,
    mode: &ModeGuard<'_>,
    prompts: &[Prompt],
    adapters: &[Option<usize>],
    route: &dyn Fn(&[usize]),
    width: i64,
    capacity: i64,
) -> Result<(Tensor, super::KvCache, Tensor)> {
    let device = model.device();
    let u = prompts.len() as i64;
    let mut valid = Vec::with_capacity((u * width) as usize);
    for p in prompts {
        let own = p.valid();
        valid.extend(std::iter::repeat_n(false, width as usize - own.len()).chain(own));
    }
    let valid = Tensor::from_slice(&valid)
        .view([u, width])
        .to_device(device);
    let mut cache = model.new_cache(u, capacity);
    let mut logits_rows: Vec<Option<Tensor>> = (0..prompts.len()).map(|_| None).collect();

    // Whole prompts, by bucket.
    let mut order: Vec<usize> = (0..prompts.len())
        .filter(|&i| prompts[i].split == 0)
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bucket(prompts[i].ids.len())));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some(g) if bucket(prompts[g[0]].ids.len()) == bucket(prompts[i].ids.len()) => g.push(i),
            _ => groups.push(vec![i]),
        }
    }
    for group in groups {
        let gw = bucket(prompts[group[0]].ids.len());
        let runs: Vec<&[i64]> = group.iter().map(|&i| prompts[i].ids).collect();
        let (ids, gvalid) = left_padded(&runs, gw, device);
        let mut gcache = model.new_cache(group.len() as i64, gw);
        route(&group);
        // One product per prompt: its rows' bits are its own whatever the group.
        mode.product_rows(Some(gw));
        let hidden = model.forward(
            &ids,
            &positions_from_mask(&gvalid),
            &prefill_mask(&gvalid),
            Some(&mut gcache),
        );
        let last = head_logits(model, &hidden.select(1, gw - 1));
        // Rows of a group are scattered in prompt order: copy them one by one.
        for (slot, &i) in group.iter().enumerate() {
            let one = gcache.select_rows(&Tensor::from_slice(&[slot as i64]).to_device(device));
            cache.write_rows(i as i64, &one, width - gw);
            logits_rows[i] = Some(last.get(slot as i64));
        }
    }

    // Split prompts, by (adapter, prefix), then by the bucket of their rest.
    let mut prefixes: Vec<(Option<usize>, &[i64], Vec<usize>)> = Vec::new();
    for (i, p) in prompts.iter().enumerate().filter(|(_, p)| p.split > 0) {
        let prefix = &p.ids[..p.split];
        match prefixes
            .iter_mut()
            .find(|(a, q, _)| *a == adapters[i] && *q == prefix)
        {
            Some((_, _, rows)) => rows.push(i),
            None => prefixes.push((adapters[i], prefix, vec![i])),
        }
    }
    for (_, prefix, rows) in prefixes {
        let pw = bucket(prefix.len());
        let (ids, pvalid) = left_padded(&[prefix], pw, device);
        let mut pcache = model.new_cache(1, pw);
        route(&rows[..1]);
        mode.product_rows(Some(pw));
        // Only its keys and values are kept, in `pcache`.
        let _ = model.forward(
            &ids,
            &positions_from_mask(&pvalid),
            &prefill_mask(&pvalid),
            Some(&mut pcache),
        );
        let mut by_bucket: Vec<Vec<usize>> = Vec::new();
        for &i in &rows {
            let rest = bucket(prompts[i].ids.len() - prefix.len());
            match by_bucket
                .iter_mut()
                .find(|g| bucket(prompts[g[0]].ids.len() - prefix.len()) == rest)
            {
                Some(g) => g.push(i),
                None => by_bucket.push(vec![i]),
            }
        }
        for group in by_bucket {
            let g = group.len() as i64;
            let rw = bucket(prompts[group[0]].ids.len() - prefix.len());
            let runs: Vec<&[i64]> = group
                .iter()
                .map(|&i| &prompts[i].ids[prefix.len()..])
                .collect();
            let (ids, rvalid) = left_padded(&runs, rw, device);
            let mut gcache = model.new_cache(g, pw + rw);
            for row in 0..g {
                gcache.write_rows(row, &pcache, 0);
            }
            gcache.set_len(pw);
            // Each row sees the prefix's tokens, then its own rest causally.
            let to_prefix = pvalid.view([1, 1, 1, pw]).expand([g, 1, rw, pw], false);
            let mask = Tensor::cat(&[to_prefix, prefill_mask(&rvalid)], 3);
            let positions = positions_from_mask(&rvalid) + prefix.len() as i64;
            route(&group);
            mode.product_rows(Some(rw));
            let hidden = model.forward(&ids, &positions, &mask, Some(&mut gcache));
            let last = head_logits(model, &hidden.select(1, rw - 1));
            for (slot, &i) in group.iter().enumerate() {
                let one = gcache.select_rows(&Tensor::from_slice(&[slot as i64]).to_device(device));
                cache.write_rows(i as i64, &one, width - pw - rw);
                logits_rows[i] = Some(last.get(slot as i64));
            }
        }
    }
    cache.set_len(width);
    let logits: Vec<Tensor> = logits_rows
        .into_iter()
        .map(|t| t.expect("every prompt prefilled"))
        .collect();
    Ok((valid, cache, Tensor::stack(&logits, 0)))
}

/// How a row picks its token: decided by its own settings alone, so a row samples the
/// same way whatever the other rows of its batch ask for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rule {
    Greedy,
    /// The CDF in vocabulary order (no top-k, no top-p).
    Plain,
    /// Over the `k` most likely tokens.
    TopK(i64),
    /// Over the sorted distribution (top-p, with or without top-k).
    Sorted,
}

fn rule(p: &SamplingParams, vocab: i64) -> Rule {
    if p.temperature == 0.0 {
        Rule::Greedy
    } else if p.top_p < 1.0 {
        Rule::Sorted
    } else if p.top_k > 0 && p.top_k < vocab {
        Rule::TopK(p.top_k)
    } else {
        Rule::Plain
    }
}

/// One token per row from `logits` [B, V]: greedy where temperature is 0, otherwise
/// inverse-CDF sampling with the row's uniform number over the top-k / top-p filtered
/// distribution. The rows of one [`Rule`] are sampled together. Returns the tokens and
/// their log-probs under softmax(logits / T).
fn sample(logits: &Tensor, params: &[&SamplingParams], uniforms: &[f64]) -> (Tensor, Tensor) {
    let device = logits.device();
    let b = params.len() as i64;
    let vocab = logits.size()[1];
    let temps: Vec<f32> = params
        .iter()
        .map(|p| {
            if p.temperature > 0.0 {
                p.temperature as f32
            } else {
                1.0
            }
        })
        .collect();
    let temps = Tensor::from_slice(&temps).to_device(device).view([b, 1]);
    let scaled = logits.to_kind(Kind::Float) / &temps;
    let logp = scaled.log_softmax(-1, Kind::Float);

    let mut by_rule: std::collections::BTreeMap<Rule, Vec<usize>> = Default::default();
    for (i, p) in params.iter().enumerate() {
        by_rule.entry(rule(p, vocab)).or_default().push(i);
    }
    let mut tokens = Tensor::zeros([b], (Kind::Int64, device));
    for (rule, rows) in by_rule {
        let at = Tensor::from_slice(&rows.iter().map(|&i| i as i64).collect::<Vec<_>>())
            .to_device(device);
        let sub = if rows.len() == params.len() {
            logp.shallow_clone()
        } else {
            logp.index_select(0, &at)
        };
        let picked = match rule {
            Rule::Greedy => sub.argmax(-1, false),
            _ => {
                let p: Vec<&SamplingParams> = rows.iter().map(|&i| params[i]).collect();
                let u: Vec<f64> = rows.iter().map(|&i| uniforms[i]).collect();
                sample_rows(&sub, &p, &u)
            }
        };
        tokens = tokens.index_copy(0, &at, &picked);
    }
    let token_logp = logp.gather(1, &tokens.view([b, 1]), false).view([b]);
    (tokens, token_logp)
}

/// Inverse-CDF sampling of one token per row of `logp` [B, V]. Without top-k or top-p
/// the CDF is taken in vocabulary order (no sort); with top-k only, over the `topk`
/// candidates; with top-p, over the fully sorted distribution.
fn sample_rows(logp: &Tensor, params: &[&SamplingParams], uniforms: &[f64]) -> Tensor {
    let device = logp.device();
    let b = params.len() as i64;
    let vocab = logp.size()[1];
    let u = Tensor::from_slice(&uniforms.iter().map(|&x| x as f32).collect::<Vec<_>>())
        .to_device(device)
        .view([b, 1]);
    let needs_top_p = params.iter().any(|p| p.top_p < 1.0);
    let max_k = params
        .iter()
        .map(|p| {
            if p.top_k > 0 {
                p.top_k.min(vocab)
            } else {
                vocab
            }
        })
        .max()
        .unwrap_or(vocab);
    let (candidates, order) = if needs_top_p || max_k < vocab {
        if needs_top_p || max_k == vocab {
            let (v, i) = logp.sort(-1, true);
            (v, Some(i))
        } else {
            let (v, i) = logp.topk(max_k, -1, true, true);
            (v, Some(i))
        }
    } else {
        (logp.shallow_clone(), None)
    };
    let mut probs = candidates.exp();
    if order.is_some() {
        let width = probs.size()[1];
        let ranks = Tensor::arange(width, (Kind::Int64, device)).view([1, width]);
        // top-k: ranks at or past k are dropped (k = 0: keep all).
        let ks: Vec<i64> = params
            .iter()
            .map(|p| if p.top_k > 0 { p.top_k } else { vocab })
            .collect();
        let ks = Tensor::from_slice(&ks).to_device(device).view([b, 1]);
        let mut drop = ranks.ge_tensor(&ks);
        if needs_top_p {
            // top-p: keep the smallest prefix whose mass reaches p (the token that crosses
            // p is kept, and always the most likely one).
            let ps: Vec<f32> = params.iter().map(|p| p.top_p as f32).collect();
            let ps = Tensor::from_slice(&ps).to_device(device).view([b, 1]);
            let mass_before = probs.cumsum(-1, Kind::Float) - &probs;
            drop = drop.logical_or(&mass_before.ge_tensor(&ps).logical_and(&ranks.gt(0)));
        }
        probs = probs.masked_fill(&drop, 0.0);
    }
    let cdf = probs.cumsum(-1, Kind::Float);
    let width = cdf.size()[1];
    let total = cdf.select(1, width - 1).view([b, 1]);
    let pick = cdf
        .lt_tensor(&(u * total))
        .sum_dim_intlist(-1, false, Kind::Int64)
        .clamp_max(width - 1)
        .view([b, 1]);
    match order {
        Some(order) => order.gather(1, &pick, false).view([b]),
        None => pick.view([b]),
    }
}
