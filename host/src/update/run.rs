//! One update of one model, run by its worker where the weights live: samples grouped by
//! agent, micro-batches under a token budget with gradient accumulation, the log-softmax
//! in row chunks under a logits budget (the decoder body is back-propagated once per
//! micro-batch from the gradient the chunks leave on its output), gradient norm before
//! clipping, clipping, and an AdamW step — skipped when the loss or gradient is not
//! finite.

use super::{
    batch::{LogpOld, TrainSample, UpdateBatch, UpdateReport, UpdateSettings},
    error::TrainError,
    loss::{Denominators, LossInputs, LossStats, policy_loss},
    optimizer::AdamW,
};
use crate::model::{
    Decoder, SequencePair,
    flops::{forward_flops, sequence_flops},
    plan_micro_batches, response_hidden, response_logprobs_per_row, rows_per_chunk,
    shared_prompt_hidden, token_logprobs,
};
use std::{collections::BTreeMap, time::Instant};
use tch::{Device, Kind, Tensor};

/// Checks what the update relies on, naming the sample.
fn check_samples(samples: &[TrainSample]) -> Result<(), TrainError> {
    for (index, s) in samples.iter().enumerate() {
        let problem = if s.prompt.is_empty() {
            Some("empty prompt".to_string())
        } else if s.response.is_empty() {
            Some("empty response".to_string())
        } else if s.sample_logprobs.len() != s.response.len() {
            Some(format!(
                "{} sampling log-probs for {} response tokens",
                s.sample_logprobs.len(),
                s.response.len()
            ))
        } else if !(s.temperature.is_finite() && s.temperature > 0.0) {
            Some(format!("temperature {}", s.temperature))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(TrainError::Sample {
                index,
                agent: s.agent.clone(),
                problem,
            });
        }
    }
    Ok(())
}

/// [N, R] float32 rows right-aligned like the training forward (row i's token j at
/// column R − len_i + j), zeros elsewhere.
fn right_aligned(rows: &[&[f32]], r: usize, device: Device) -> Tensor {
    let mut flat = vec![0f32; rows.len() * r];
    for (i, row) in rows.iter().enumerate() {
        flat[i * r + r - row.len()..(i + 1) * r].copy_from_slice(row);
    }
    Tensor::from_slice(&flat)
        .view([rows.len() as i64, r as i64])
        .to_device(device)
}

/// Log-probs of every sample's response under `model`, without grad, in micro-batches.
fn score(
    model: &Decoder,
    samples: &[TrainSample],
    settings: &UpdateSettings,
) -> Result<Vec<Vec<f32>>, TrainError> {
    let _guard = tch::no_grad_guard();
    let lengths: Vec<usize> = samples
        .iter()
        .map(|s| s.prompt.len() + s.response.len())
        .collect();
    let mut out = vec![Vec::new(); samples.len()];
    for mb in plan_micro_batches(&lengths, settings.micro_batch_tokens) {
        let pairs: Vec<SequencePair> = mb
            .iter()
            .map(|&i| SequencePair {
                prompt: &samples[i].prompt,
                response: &samples[i].response,
            })
            .collect();
        let temps: Vec<f64> = mb.iter().map(|&i| samples[i].temperature).collect();
        let lp =
            response_logprobs_per_row(model, &pairs, &temps, false, settings.logits_budget_bytes)?;
        for (row, &i) in mb.iter().enumerate() {
            out[i] = lp.row(row as i64, samples[i].response.len());
        }
    }
    Ok(out)
}

/// Every gradient (zeros where a parameter has none), for measuring one agent's share.
fn grads_snapshot(optimizer: &AdamW) -> Vec<Tensor> {
    optimizer
        .params()
        .iter()
        .map(|(_, p)| {
            let g = p.grad();
            if g.defined() {
                g.detach().copy()
            } else {
                p.zeros_like()
            }
        })
        .collect()
}

/// ‖current grads − snapshot‖₂.
fn grad_delta_norm(optimizer: &AdamW, snapshot: &[Tensor]) -> f64 {
    let _guard = tch::no_grad_guard();
    let mut sum = 0f64;
    for ((_, p), before) in optimizer.params().iter().zip(snapshot) {
        let g = p.grad();
        let delta = if g.defined() { &g - before } else { -before };
        sum += delta
            .to_kind(Kind::Double)
            .pow_tensor_scalar(2)
            .sum(Kind::Double)
            .double_value(&[]);
    }
    sum.sqrt()
}

/// One micro-batch: rows padded together, or rows that share one prompt (the prompt is
/// run and back-propagated once for all of them).
#[derive(Debug, Clone, PartialEq)]
enum Micro {
    Padded(Vec<usize>),
    SharedPrompt(Vec<usize>),
}

impl Micro {
    fn rows(&self) -> &[usize] {
        match self {
            Micro::Padded(r) | Micro::SharedPrompt(r) => r,
        }
    }

    /// Forward FLOPs of the work this micro-batch does (without padding).
    fn flops(&self, model: &Decoder, samples: &[TrainSample]) -> f64 {
        let c = &model.config;
        match self {
            Micro::Padded(rows) => rows
                .iter()
                .map(|&i| {
                    let s = &samples[i];
                    sequence_flops(c, s.prompt.len() + s.response.len(), s.response.len())
                })
                .sum(),
            Micro::SharedPrompt(rows) => {
                let p = samples[rows[0]].prompt.len() as f64;
                let prompt = forward_flops(c, p, (p + 1.0) / 2.0, 0.0);
                prompt
                    + rows
                        .iter()
                        .map(|&i| {
                            let n = samples[i].response.len() as f64;
                            forward_flops(c, n, p + (n + 1.0) / 2.0, n)
                        })
                        .sum::<f64>()
            }
        }
    }
}

/// The micro-batches of one agent's samples `idx`: rows with the same prompt together
/// (when sharing is on), split so that prompt + rows × longest response stays within
/// the token budget; the others padded together under the budget.
fn plan(samples: &[TrainSample], idx: &[usize], settings: &UpdateSettings) -> Vec<Micro> {
    let mut groups: Vec<(&[i64], Vec<usize>)> = Vec::new();
    for &i in idx {
        let prompt = samples[i].prompt.as_slice();
        match groups.iter_mut().find(|(p, _)| *p == prompt) {
            Some((_, rows)) if settings.share_prompts => rows.push(i),
            _ => groups.push((prompt, vec![i])),
        }
    }
    let mut micros = Vec::new();
    let mut singles = Vec::new();
    for (prompt, rows) in groups {
        if rows.len() < 2 {
            singles.extend(rows);
            continue;
        }
        let longest = rows
            .iter()
            .map(|&i| samples[i].response.len())
            .max()
            .unwrap_or(1);
        let per = (settings.micro_batch_tokens.saturating_sub(prompt.len()) / longest).max(1);
        for chunk in rows.chunks(per) {
            micros.push(if chunk.len() > 1 {
                Micro::SharedPrompt(chunk.to_vec())
            } else {
                Micro::Padded(chunk.to_vec())
            });
        }
    }
    let lengths: Vec<usize> = singles
        .iter()
        .map(|&i| samples[i].prompt.len() + samples[i].response.len())
        .collect();
    micros.extend(
        plan_micro_batches(&lengths, settings.micro_batch_tokens)
            .into_iter()
            .map(|mb| Micro::Padded(mb.into_iter().map(|j| singles[j]).collect())),
    );
    micros
}

/// The update of `model` on `batch`.
pub fn run_update(
    model: &Decoder,
    optimizer: &mut AdamW,
    reference: Option<&Decoder>,
    batch: &UpdateBatch,
    settings: &UpdateSettings,
) -> Result<UpdateReport, TrainError> {
    let started = Instant::now();
    let samples = &batch.samples;
    check_samples(samples)?;
    let mut report = UpdateReport::default();
    if samples.is_empty() {
        return Ok(report);
    }
    let loss = &settings.loss;
    let ref_logprobs = match (loss.kl, reference) {
        (Some(_), Some(r)) => {
            // A LoRA model's reference is its own base: the same decoder, adapters off.
            r.set_adapters_off(true);
            let scored = score(r, samples, settings);
            r.set_adapters_off(false);
            Some(scored?)
        }
        (Some(_), None) => {
            return Err(TrainError::Missing {
                what: "a reference model",
                when: "the loss has a KL term",
            });
        }
        (None, _) => None,
    };
    // With one optimizer step the ratio is taken against the detached current log-prob
    // of the same forward; with several, against log-probs fixed before the first step.
    let several = settings.ppo_epochs > 1 || settings.mini_batches > 1;
    let old_logprobs = match (several, settings.logp_old) {
        (false, _) => None,
        (true, LogpOld::Recompute) => {
            // The policy that sampled ran without LoRA dropout; so do its log-probs.
            model.set_train_mode(false);
            let scored = score(model, samples, settings);
            model.set_train_mode(true);
            Some(scored?)
        }
        (true, LogpOld::Sampling) => {
            Some(samples.iter().map(|s| s.sample_logprobs.clone()).collect())
        }
    };

    // Each mini-batch takes every M-th sample of each agent, so all agents are in each.
    let mut by_agent: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        by_agent.entry(s.agent.as_str()).or_default().push(i);
    }
    let m = settings.mini_batches.max(1) as usize;
    let minis: Vec<BTreeMap<&str, Vec<usize>>> = (0..m)
        .map(|k| {
            by_agent
                .iter()
                .map(|(a, idx)| (*a, idx.iter().copied().skip(k).step_by(m).collect()))
                .filter(|(_, idx): &(&str, Vec<usize>)| !idx.is_empty())
                .collect()
        })
        .filter(|mini: &BTreeMap<&str, Vec<usize>>| !mini.is_empty())
        .collect();
    let plans: Vec<BTreeMap<&str, Vec<Micro>>> = minis
        .iter()
        .map(|mini| {
            mini.iter()
                .map(|(agent, idx)| (*agent, plan(samples, idx, settings)))
                .collect()
        })
        .collect();
    let per_epoch: usize = plans.iter().flat_map(|p| p.values()).map(Vec::len).sum();
    batch
        .progress
        .plan(per_epoch * settings.ppo_epochs.max(1) as usize);

    for epoch in 0..settings.ppo_epochs.max(1) {
        for (mini_index, mini) in minis.iter().enumerate() {
            let first_step = epoch == 0 && mini_index == 0;
            let all: Vec<usize> = mini.values().flatten().copied().collect();
            let den = Denominators {
                tokens: all.iter().map(|&i| samples[i].response.len() as f64).sum(),
                seqs: all.len() as f64,
            };
            optimizer.zero_grad();
            let mut sums = LossSums::default();
            let mut agent_norms: BTreeMap<&str, f64> = BTreeMap::new();
            for (agent, idx) in mini {
                let snapshot = (mini.len() > 1).then(|| grads_snapshot(optimizer));
                let mut agent_stats = LossStats::default();
                for micro in &plans[mini_index][agent] {
                    let stats = micro_batch(
                        model,
                        samples,
                        micro,
                        MicroInputs {
                            old: old_logprobs.as_deref(),
                            reference: ref_logprobs.as_deref(),
                            den: &den,
                        },
                        settings,
                        &mut sums,
                    )?;
                    if first_step {
                        // Forward, then backward at twice the forward.
                        report.flops += 3.0 * micro.flops(model, samples);
                    }
                    agent_stats.merge(&stats);
                    batch.progress.advance();
                }
                if let Some(snapshot) = snapshot {
                    agent_norms.insert(agent, grad_delta_norm(optimizer, &snapshot));
                }
                let entry = report.agents.entry(agent.to_string()).or_default();
                entry.stats.merge(&agent_stats);
                report.stats.merge(&agent_stats);
                if epoch == 0 {
                    entry.samples += idx.len();
                }
            }
            let norm = optimizer.clip_grad_norm(settings.grad_clip);
            for (agent, entry) in report.agents.iter_mut() {
                if !first_step || !mini.contains_key(agent.as_str()) {
                    continue;
                }
                entry.grad_norm = agent_norms.get(agent.as_str()).copied().unwrap_or(norm);
            }
            report.grad_norms.push(norm);
            if sums.finite && norm.is_finite() {
                optimizer.step(batch.lr);
                report.applied += 1;
            } else {
                tracing::warn!(
                    step = batch.step,
                    grad_norm = norm,
                    loss_finite = sums.finite,
                    "skipped an optimizer step: the loss or the gradient is not finite"
                );
                optimizer.zero_grad();
                report.skipped += 1;
            }
        }
    }
    optimizer.zero_grad();
    report.tokens = samples.iter().map(|s| s.response.len()).sum();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What the micro-batches of one optimizer step add up.
struct LossSums {
    loss: f64,
    finite: bool,
}

impl Default for LossSums {
    fn default() -> Self {
        Self {
            loss: 0.0,
            finite: true,
        }
    }
}

/// The loss of one optimizer step over all of `samples` (one mini-batch; `logp_old`
/// given, or the detached current log-probs; no reference), accumulating its gradient into the
/// model's parameters exactly as [`run_update`] does: the same micro-batches, shared
/// prompts and log-softmax chunks. For checking gradients; returns the loss value.
pub fn accumulate_gradients(
    model: &Decoder,
    samples: &[TrainSample],
    logp_old: Option<&[Vec<f32>]>,
    settings: &UpdateSettings,
) -> Result<f64, TrainError> {
    check_samples(samples)?;
    let den = Denominators {
        tokens: samples.iter().map(|s| s.response.len() as f64).sum(),
        seqs: samples.len() as f64,
    };
    let mut by_agent: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        by_agent.entry(s.agent.as_str()).or_default().push(i);
    }
    let mut sums = LossSums::default();
    for idx in by_agent.values() {
        for micro in plan(samples, idx, settings) {
            micro_batch(
                model,
                samples,
                &micro,
                MicroInputs {
                    old: logp_old,
                    reference: None,
                    den: &den,
                },
                settings,
                &mut sums,
            )?;
        }
    }
    Ok(sums.loss)
}

struct MicroInputs<'a> {
    old: Option<&'a [Vec<f32>]>,
    reference: Option<&'a [Vec<f32>]>,
    den: &'a Denominators,
}

/// Forward and backward of one micro-batch (rows = sample indices); returns its stats.
fn micro_batch(
    model: &Decoder,
    samples: &[TrainSample],
    micro: &Micro,
    inputs: MicroInputs,
    settings: &UpdateSettings,
    sums: &mut LossSums,
) -> Result<LossStats, TrainError> {
    let rows = micro.rows();
    let device = model.device();
    let h = match micro {
        Micro::Padded(_) => {
            let pairs: Vec<SequencePair> = rows
                .iter()
                .map(|&i| SequencePair {
                    prompt: &samples[i].prompt,
                    response: &samples[i].response,
                })
                .collect();
            response_hidden(model, &pairs)?
        }
        Micro::SharedPrompt(_) => {
            let responses: Vec<&[i64]> = rows
                .iter()
                .map(|&i| samples[i].response.as_slice())
                .collect();
            shared_prompt_hidden(model, &samples[rows[0]].prompt, &responses)?
        }
    };
    let r = h.targets.size()[1];
    let n = rows.len() as i64;
    // The decoder body's output as a leaf: each chunk's backward stops here and leaves
    // its gradient, and the body is back-propagated once with the sum.
    let leaf = h.hidden.detach().set_requires_grad(true);
    let ru = r as usize;
    let temps = Tensor::from_slice(
        &rows
            .iter()
            .map(|&i| samples[i].temperature as f32)
            .collect::<Vec<_>>(),
    )
    .to_device(device);
    let advantages = Tensor::from_slice(
        &rows
            .iter()
            .map(|&i| samples[i].advantage)
            .collect::<Vec<_>>(),
    )
    .to_device(device);
    let sample_lp = right_aligned(
        &rows
            .iter()
            .map(|&i| samples[i].sample_logprobs.as_slice())
            .collect::<Vec<_>>(),
        ru,
        device,
    );
    let table = |t: &[Vec<f32>]| {
        right_aligned(
            &rows.iter().map(|&i| t[i].as_slice()).collect::<Vec<_>>(),
            ru,
            device,
        )
    };
    let old = inputs.old.map(table);
    let reference = inputs.reference.map(table);
    let chunk = rows_per_chunk(settings.logits_budget_bytes, r, model.config.vocab_size);
    let mut stats = LossStats::default();
    let mut start = 0;
    while start < n {
        let c = chunk.min(n - start);
        let (logp, entropy) = token_logprobs(
            model,
            &leaf.narrow(0, start, c),
            &h.targets.narrow(0, start, c),
            &temps.narrow(0, start, c),
            // Entropy is always logged; rows_per_chunk budgets for it.
            true,
        );
        let mask = h.mask.narrow(0, start, c);
        let logp_old = match &old {
            Some(o) => o.narrow(0, start, c),
            None => logp.detach(),
        };
        let logp_ref = reference.as_ref().map(|t| t.narrow(0, start, c));
        let logp_sample = sample_lp.narrow(0, start, c);
        let adv = advantages.narrow(0, start, c);
        let out = policy_loss(
            &LossInputs {
                logp: &logp,
                logp_old: &logp_old,
                advantages: &adv,
                mask: &mask,
                logp_ref: logp_ref.as_ref(),
                logp_sample: Some(&logp_sample),
                entropy: entropy.as_ref(),
            },
            &settings.loss,
            inputs.den,
        )?;
        let value = out.loss.double_value(&[]);
        sums.loss += value;
        if !value.is_finite() {
            sums.finite = false;
        }
        out.loss.f_backward()?;
        stats.merge(&out.stats);
        start += c;
    }
    let grad = leaf.grad();
    if grad.defined() {
        (&h.hidden * grad).sum(Kind::Float).f_backward()?;
    }
    Ok(stats)
}
