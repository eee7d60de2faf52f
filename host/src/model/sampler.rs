//! Batched generation: left padding, per-row positions and masks, a preallocated KV
//! cache, identical prompts prefilled once and forked, per-row sampling settings and
//! seeds, finished rows dropped from the batch as they finish.
//!
//! Each row draws its random numbers from its own generator seeded by its request, so
//! a row's sample does not depend on what else is in the batch.

use super::{
    decoder::{Decoder, positions_from_mask, prefill_mask},
    error::{ModelError, Result},
    finite::all_finite,
    memory,
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
    request: usize,
    rng: StdRng,
    tokens: Vec<i64>,
    logprobs: Vec<f32>,
    finish: Option<FinishReason>,
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

/// [`generate`] where request `i` runs through LoRA adapter `adapters[i]` (`None` =
/// the base weights): requests of different adapters share one batch, and identical
/// prompts are prefilled once only within one adapter. Without `adapters` the model's
/// current routing is used.
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
    let route = |rows: &mut dyn Iterator<Item = Option<usize>>| {
        if adapters.is_some() {
            model.route_rows(&rows.collect::<Vec<_>>());
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

    // Identical prompts (through the same adapter) are prefilled once.
    let mut unique: Vec<&[i64]> = Vec::new();
    let mut unique_adapter: Vec<Option<usize>> = Vec::new();
    let mut index: HashMap<(Option<usize>, &[i64]), i64> = HashMap::new();
    let row_of_unique: Vec<i64> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            *index
                .entry((adapter_of(i), r.prompt.as_slice()))
                .or_insert_with(|| {
                    unique.push(r.prompt.as_slice());
                    unique_adapter.push(adapter_of(i));
                    unique.len() as i64 - 1
                })
        })
        .collect();
    let width = unique.iter().map(|p| p.len()).max().unwrap_or(0) as i64;
    let max_new = requests
        .iter()
        .map(|r| r.params.max_new_tokens)
        .max()
        .unwrap_or(0) as i64;
    let estimate = memory::check_generation(
        &model.config,
        model.kind(),
        device,
        requests.len() as u64,
        width as u64,
        max_new as u64,
    )?;
    let started = std::time::Instant::now();
    let (valid, mut cache, mut logits) = prefill(
        model,
        &unique,
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

    // Fork the prefilled prompts into one row per request.
    let fork = Tensor::from_slice(&row_of_unique).to_device(device);
    let identity = row_of_unique
        .iter()
        .enumerate()
        .all(|(i, &r)| i as i64 == r);
    if !identity {
        cache = cache.select_rows(&fork);
        logits = logits.index_select(0, &fork);
    }
    let mut key_valid = valid.index_select(0, &fork);
    let mut last_pos = positions.select(1, width - 1).index_select(0, &fork);

    let mut rows: Vec<Row> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| Row {
            request: i,
            rng: StdRng::seed_from_u64(r.params.seed),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            finish: if r.params.max_new_tokens == 0 {
                Some(FinishReason::Length)
            } else {
                None
            },
        })
        .collect();
    let mut active: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].finish.is_none())
        .collect();
    if active.len() < rows.len() {
        let keep = Tensor::from_slice(&active.iter().map(|&i| i as i64).collect::<Vec<_>>())
            .to_device(device);
        if !active.is_empty() {
            cache = cache.select_rows(&keep);
            logits = logits.index_select(0, &keep);
            key_valid = key_valid.index_select(0, &keep);
            last_pos = last_pos.index_select(0, &keep);
        }
    }

    while !active.is_empty() {
        steps += 1;
        check_finite_logits(&logits, &rows, &active, steps)?;
        let params: Vec<&SamplingParams> = active
            .iter()
            .map(|&i| &requests[rows[i].request].params)
            .collect();
        let uniforms: Vec<f64> = active
            .iter()
            .map(|&i| rows[i].rng.random::<f64>())
            .collect();
        let (tokens, logps) = sample(&logits, &params, &uniforms);
        let tokens_vec = Vec::<i64>::try_from(&tokens).map_err(ModelError::from)?;
        let logps_vec = Vec::<f32>::try_from(&logps).map_err(ModelError::from)?;
        let mut still = Vec::with_capacity(active.len());
        for (slot, &i) in active.iter().enumerate() {
            let row = &mut rows[i];
            let p = &requests[row.request].params;
            row.tokens.push(tokens_vec[slot]);
            row.logprobs.push(logps_vec[slot]);
            if p.stop_token_ids.contains(&tokens_vec[slot]) {
                row.finish = Some(FinishReason::StopToken);
            } else if let Some(n) = stop.and_then(|s| s.check(row.request, &row.tokens)) {
                row.tokens.truncate(n);
                row.logprobs.truncate(n);
                row.finish = Some(FinishReason::StopString);
            } else if row.tokens.len() >= p.max_new_tokens {
                row.finish = Some(FinishReason::Length);
            }
            if row.finish.is_none() {
                still.push(slot as i64);
            }
        }
        if still.is_empty() {
            break;
        }
        let mut next = tokens;
        if still.len() < active.len() {
            let keep = Tensor::from_slice(&still).to_device(device);
            cache = cache.select_rows(&keep);
            key_valid = key_valid.index_select(0, &keep);
            last_pos = last_pos.index_select(0, &keep);
            next = next.index_select(0, &keep);
            active = still.iter().map(|&s| active[s as usize]).collect();
        }
        let b = active.len() as i64;
        route(&mut active.iter().map(|&i| adapter_of(rows[i].request)));
        last_pos += 1;
        key_valid = Tensor::cat(&[key_valid, Tensor::ones([b, 1], (Kind::Bool, device))], 1);
        let mask = key_valid.view([b, 1, 1, -1]);
        let hidden = model.forward(
            &next.view([b, 1]),
            &last_pos.view([b, 1]),
            &mask,
            Some(&mut cache),
        );
        logits = model.logits(&hidden.select(1, 0));
    }
    tracing::debug!(steps, seconds = started.elapsed().as_secs_f64(), "decode");
    if adapters.is_some() {
        // The row groups were this batch's; later forwards set their own.
        model.route_all(None);
    }
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

/// Refuses request `i` when its prompt and `max_new_tokens` together are longer than
/// the model's context: positions past it do not exist.
fn check_request_context(model: &Decoder, i: usize, request: &GenerationRequest) -> Result<()> {
    let (prompt, new) = (request.prompt.len(), request.params.max_new_tokens);
    model.check_context(
        || format!("request {i}: prompt of {prompt} tokens + max_new_tokens {new}"),
        (prompt as u64).saturating_add(new as u64),
    )
}

/// Fails the batch when the logits of the next token are not finite in some row: a
/// NaN or an infinity would be sampled as a garbage token with a NaN log-prob. One sum
/// per step; the rows are found only when one is bad.
fn check_finite_logits(logits: &Tensor, rows: &[Row], active: &[usize], step: usize) -> Result<()> {
    if all_finite(logits)? {
        return Ok(());
    }
    let per_row = Vec::<bool>::try_from(&logits.f_isfinite()?.f_all_dim(-1, false)?)?;
    let bad: Vec<String> = active
        .iter()
        .zip(per_row)
        .filter(|(_, ok)| !ok)
        .map(|(&i, _)| rows[i].request.to_string())
        .collect();
    Err(ModelError::NonFinite {
        what: format!("new token {step} of request(s) {}", bad.join(", ")),
        message: "the logits are not finite (NaN or infinite)".into(),
    })
}

/// Prompts whose lengths are within this ratio of the longest in their group are
/// prefilled together; the rest start a new group. Padding is computed and thrown away,
/// so mixed lengths are cheaper in groups.
const PREFILL_GROUP_RATIO: f64 = 0.85;

/// Prefills `prompts` into one left-padded cache of `capacity` tokens, in groups of
/// similar length. Returns the [U, width] validity mask, the cache, and the logits of
/// each prompt's last token [U, V].
fn prefill(
    model: &Decoder,
    prompts: &[&[i64]],
    route: &dyn Fn(&[usize]),
    width: i64,
    capacity: i64,
) -> Result<(Tensor, super::KvCache, Tensor)> {
    let device = model.device();
    let u = prompts.len() as i64;
    let mut valid = Vec::with_capacity((u * width) as usize);
    for p in prompts {
        let pad = width as usize - p.len();
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, p.len())));
    }
    let valid = Tensor::from_slice(&valid)
        .view([u, width])
        .to_device(device);
    let mut cache = model.new_cache(u, capacity);

    // Groups of consecutive prompts after sorting by length, longest first.
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(prompts[i].len()));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some(g)
                if prompts[i].len() as f64 >= PREFILL_GROUP_RATIO * prompts[g[0]].len() as f64 =>
            {
                g.push(i)
            }
            _ => groups.push(vec![i]),
        }
    }
    let mut logits_rows: Vec<Option<Tensor>> = (0..prompts.len()).map(|_| None).collect();
    for group in groups {
        let gw = prompts[group[0]].len() as i64;
        let g = group.len() as i64;
        let mut ids = Vec::with_capacity((g * gw) as usize);
        let mut gvalid = Vec::with_capacity(ids.capacity());
        for &i in &group {
            let pad = gw as usize - prompts[i].len();
            ids.extend(std::iter::repeat_n(0i64, pad).chain(prompts[i].iter().copied()));
            gvalid.extend(
                std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, prompts[i].len())),
            );
        }
        let ids = Tensor::from_slice(&ids).view([g, gw]).to_device(device);
        let gvalid = Tensor::from_slice(&gvalid).view([g, gw]).to_device(device);
        let mut gcache = model.new_cache(g, gw);
        route(&group);
        let hidden = model.forward(
            &ids,
            &positions_from_mask(&gvalid),
            &prefill_mask(&gvalid),
            Some(&mut gcache),
        );
        let last = model.logits(&hidden.select(1, gw - 1));
        // Rows of a group are scattered in prompt order: copy them one by one.
        for (slot, &i) in group.iter().enumerate() {
            let one = gcache.select_rows(&Tensor::from_slice(&[slot as i64]).to_device(device));
            cache.write_rows(i as i64, &one, width - gw);
            logits_rows[i] = Some(last.get(slot as i64));
        }
    }
    cache.set_len(width);
    let logits: Vec<Tensor> = logits_rows
        .into_iter()
        .map(|t| t.expect("every prompt prefilled"))
        .collect();
    Ok((valid, cache, Tensor::stack(&logits, 0)))
}

/// One token per row from `logits` [B, V]: greedy where temperature is 0, otherwise
/// inverse-CDF sampling with the row's uniform number over the top-k / top-p filtered
/// distribution. Returns the tokens and their log-probs under softmax(logits / T).
fn sample(logits: &Tensor, params: &[&SamplingParams], uniforms: &[f64]) -> (Tensor, Tensor) {
    let device = logits.device();
    let b = params.len() as i64;
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

    let greedy_all = params.iter().all(|p| p.temperature == 0.0);
    let tokens = if greedy_all {
        logp.argmax(-1, false)
    } else {
        let sampled = sample_rows(&logp, params, uniforms);
        let greedy_rows: Vec<bool> = params.iter().map(|p| p.temperature == 0.0).collect();
        if greedy_rows.iter().any(|&g| g) {
            let g = Tensor::from_slice(&greedy_rows).to_device(device);
            sampled.where_self(&g.logical_not(), &logp.argmax(-1, false))
        } else {
            sampled
        }
    };
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
