//! One update of one model, run by its worker where the weights live: samples grouped by
//! agent, micro-batches under a token budget with gradient accumulation, the log-softmax
//! in row chunks under a logits budget (the decoder body is back-propagated once per
//! micro-batch from the gradient the chunks leave on its output), gradient norm before
//! clipping, clipping, and an AdamW step — skipped when the loss or gradient is not
//! finite.

use super::{
    batch::{
        BatchShare, LogpOld, ShadowNorms, TrainSample, UpdateBatch, UpdateReport, UpdateSettings,
    },
    error::TrainError,
    full,
    gathered::ShardedWeights,
    loss::{Denominators, LossInputs, LossStats, StatsOnDevice, policy_loss_on_device},
    optimizer::{AdamW, SquaresOnDevice},
    sharded::ShardedAdamW,
    stepper::Stepper,
    sync::{self, Collective},
};
use crate::model::{
    Decoder, PassPlan, PrefixGroup, SequencePair,
    flops::{forward_flops, sequence_flops},
    masked_token_logprobs, packed_plan, padded_plan, plan_micro_batches, rows_per_chunk,
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
    let mut by_agent: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        by_agent.entry(s.agent.as_str()).or_default().push(i);
    }
    let mut out = vec![Vec::new(); samples.len()];
    for idx in by_agent.values() {
        for micro in plan(samples, idx, settings) {
            let rows = micro.rows();
            let h = micro_hidden(model, samples, &micro)?;
            let (n, r) = (rows.len() as i64, h.targets.size()[1]);
            let temps = Tensor::from_slice(
                &rows
                    .iter()
                    .map(|&i| samples[i].temperature as f32)
                    .collect::<Vec<_>>(),
            )
            .to_device(model.device());
            let chunk = rows_per_chunk(settings.logits_budget_bytes, r, model.config.vocab_size);
            let mut start = 0;
            while start < n {
                let c = chunk.min(n - start);
                let (lp, _) = masked_token_logprobs(
                    model,
                    &h.hidden.narrow(0, start, c),
                    &h.targets.narrow(0, start, c),
                    &temps.narrow(0, start, c),
                    &h.mask.narrow(0, start, c),
                    false,
                );
                for j in 0..c {
                    let i = rows[(start + j) as usize];
                    let len = samples[i].response.len() as i64;
                    let row = lp.get(j).narrow(0, r - len, len).to_kind(Kind::Float);
                    out[i] = Vec::<f32>::try_from(row).unwrap_or_default();
                }
                start += c;
            }
        }
    }
    Ok(out)
}

/// One micro-batch: rows padded together, or groups of rows that share a prompt
/// prefix packed in one pass (each group's prefix is run and back-propagated once for
/// all its rows; [`packed_hidden`]).
#[derive(Debug, Clone, PartialEq)]
enum Micro {
    Padded(Vec<usize>),
    /// (prefix length, rows) per group.
    Packed(Vec<(usize, Vec<usize>)>),
}

impl Micro {
    /// The rows, in the order the forward lays them out.
    fn rows(&self) -> Vec<usize> {
        match self {
            Micro::Padded(r) => r.clone(),
            Micro::Packed(groups) => groups.iter().flat_map(|(_, r)| r.iter().copied()).collect(),
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
            Micro::Packed(groups) => groups
                .iter()
                .map(|(prefix, rows)| {
                    let p = *prefix as f64;
                    let shared = forward_flops(c, p, (p + 1.0) / 2.0, 0.0);
                    shared
                        + rows
                            .iter()
                            .map(|&i| {
                                let s = &samples[i];
                                let n = (s.prompt.len() - prefix + s.response.len()) as f64;
                                forward_flops(c, n, p + (n + 1.0) / 2.0, s.response.len() as f64)
                            })
                            .sum::<f64>()
                })
                .sum(),
        }
    }
}

/// The final hidden states of a micro-batch's rows (see [`crate::model::ResponseHidden`]).
fn micro_hidden(
    model: &Decoder,
    samples: &[TrainSample],
    micro: &Micro,
) -> Result<crate::model::ResponseHidden, TrainError> {
    Ok(micro_plan(model, samples, micro)?.run(model))
}

/// The training pass of a micro-batch's rows, laid out ([`PassPlan`]).
fn micro_plan(
    model: &Decoder,
    samples: &[TrainSample],
    micro: &Micro,
) -> Result<PassPlan, TrainError> {
    let pair = |i: usize| SequencePair {
        prompt: &samples[i].prompt,
        response: &samples[i].response,
    };
    Ok(match micro {
        Micro::Padded(rows) => {
            padded_plan(model, &rows.iter().map(|&i| pair(i)).collect::<Vec<_>>())?
        }
        Micro::Packed(groups) => packed_plan(
            model,
            &groups
                .iter()
                .map(|(prefix, rows)| PrefixGroup {
                    prefix: *prefix,
                    rows: rows.iter().map(|&i| pair(i)).collect(),
                })
                .collect::<Vec<_>>(),
        )?,
    })
}

/// Groups the rows `idx` by shared prompt prefix: rows in prompt order, each joining
/// the group before it when that lowers the tokens computed — the group's prefix may
/// shrink to what the row shares with it, which every row of the group then computes
/// on its own. A prefix stays at least one token short of each of its prompts. Rows
/// whose prompt has one token are returned apart (they have no prefix to share).
fn prefix_groups(samples: &[TrainSample], idx: &[usize]) -> (Vec<(usize, Vec<usize>)>, Vec<usize>) {
    let (mut order, short): (Vec<usize>, Vec<usize>) =
        idx.iter().partition(|&&i| samples[i].prompt.len() >= 2);
    order.sort_by(|&a, &b| samples[a].prompt.cmp(&samples[b].prompt).then(a.cmp(&b)));
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order {
        let prompt = &samples[i].prompt;
        if let Some((prefix, rows)) = groups.last_mut() {
            let first = &samples[rows[0]].prompt;
            let common = first.iter().zip(prompt).take_while(|(a, b)| a == b).count();
            let joined = (*prefix).min(common).min(prompt.len() - 1);
            // Joining saves `joined` tokens of this row and costs each other row of the
            // group `prefix − joined` tokens it no longer shares.
            if joined > 0 && joined > (rows.len() - 1) * (*prefix - joined) {
                *prefix = joined;
                rows.push(i);
                continue;
            }
        }
        groups.push((prompt.len() - 1, vec![i]));
    }
    (groups, short)
}

/// Packs prefix groups into micro-batches whose padded size — prefixes × longest
/// prefix + rows × longest continuation (the rest of the prompt and the response) —
/// stays within the token budget; a group too large for one is split across several
/// (its prefix then runs in each). Longest prefixes first, so prefixes pad little.
fn pack(
    samples: &[TrainSample],
    mut groups: Vec<(usize, Vec<usize>)>,
    budget: usize,
) -> Vec<Micro> {
    groups.sort_by_key(|(prefix, rows)| (std::cmp::Reverse(*prefix), rows[0]));
    let mut micros = Vec::new();
    let mut current: Vec<(usize, Vec<usize>)> = Vec::new();
    let (mut prefixes, mut longest_prefix, mut rows_in, mut longest_rest) = (0, 0, 0, 0);
    for (prefix, rows) in groups {
        let mut open = false;
        for i in rows {
            let s = &samples[i];
            let rest = s.prompt.len() - prefix + s.response.len();
            let size = |open: bool, prefixes: usize, lp: usize, n: usize, lr: usize| {
                let (k, p) = if open {
                    (prefixes, lp)
                } else {
                    (prefixes + 1, lp.max(prefix))
                };
                k * p + (n + 1) * lr.max(rest)
            };
            if rows_in > 0 && size(open, prefixes, longest_prefix, rows_in, longest_rest) > budget {
                micros.push(Micro::Packed(std::mem::take(&mut current)));
                (prefixes, longest_prefix, rows_in, longest_rest) = (0, 0, 0, 0);
                open = false;
            }
            if !open {
                current.push((prefix, Vec::new()));
                prefixes += 1;
                longest_prefix = longest_prefix.max(prefix);
                open = true;
            }
            current.last_mut().expect("a group is open").1.push(i);
            rows_in += 1;
            longest_rest = longest_rest.max(rest);
        }
    }
    if !current.is_empty() {
        micros.push(Micro::Packed(current));
    }
    micros
}

/// The micro-batches of one agent's samples `idx`: with prompt sharing on, groups of
/// rows that share a prompt prefix packed together ([`prefix_groups`], [`pack`]); the
/// other rows padded together under the budget.
fn plan(samples: &[TrainSample], idx: &[usize], settings: &UpdateSettings) -> Vec<Micro> {
    let (micros, padded) = if settings.share_prompts {
        let (groups, short) = prefix_groups(samples, idx);
        (pack(samples, groups, settings.micro_batch_tokens), short)
    } else {
        (Vec::new(), idx.to_vec())
    };
    let lengths: Vec<usize> = padded
        .iter()
        .map(|&i| samples[i].prompt.len() + samples[i].response.len())
        .collect();
    micros
        .into_iter()
        .chain(
            plan_micro_batches(&lengths, settings.micro_batch_tokens)
                .into_iter()
                .map(|mb| Micro::Padded(mb.into_iter().map(|j| padded[j]).collect())),
        )
        .collect()
}

/// The update of `model` on `batch`.
pub fn run_update(
    model: &Decoder,
    optimizer: &mut AdamW,
    reference: Option<&Decoder>,
    batch: &UpdateBatch,
    settings: &UpdateSettings,
    sync: Option<&mut dyn Collective>,
) -> Result<UpdateReport, TrainError> {
    update(
        model,
        Stepper::Whole(optimizer),
        reference,
        batch,
        settings,
        sync,
        false,
    )
}

/// The update of `model` on `batch` with its optimizer state sharded across the ranks
/// of `sync` (docs/distributed.md, "Sharding"): the step one process would take.
pub fn run_update_sharded(
    model: &Decoder,
    optimizer: &mut ShardedAdamW,
    reference: Option<&Decoder>,
    batch: &UpdateBatch,
    settings: &UpdateSettings,
    sync: &mut dyn Collective,
) -> Result<UpdateReport, TrainError> {
    update(
        model,
        Stepper::Sharded(optimizer),
        reference,
        batch,
        settings,
        Some(sync),
        false,
    )
}

/// [`run_update_sharded`] with the model's weights sharded too during the update
/// (`shard = "full"`; docs/distributed.md, "Sharding"): each decoder layer's weights
/// are gathered just before its forward and again before its backward, and freed
/// after; the weights are whole again when it returns. `optimizer` steps the model's
/// weights (laid out as they are), or a LoRA model's adapters, the base frozen.
pub fn run_update_full(
    model: &Decoder,
    optimizer: &mut ShardedAdamW,
    reference: Option<&Decoder>,
    batch: &UpdateBatch,
    settings: &UpdateSettings,
    sync: &mut dyn Collective,
) -> Result<UpdateReport, TrainError> {
    update(
        model,
        Stepper::Sharded(optimizer),
        reference,
        batch,
        settings,
        Some(sync),
        true,
    )
}

/// The weights sharded during an update (`shard = "full"`).
struct FullState {
    weights: ShardedWeights,
    units: full::Units,
    /// The optimizer steps these weights (not a LoRA model's adapters).
    trains: bool,
}

impl FullState {
    /// The model's weights, whole now, sharded over `sync`'s ranks and freed.
    fn start(
        model: &Decoder,
        optimizer: &Stepper,
        sync: &dyn Collective,
    ) -> Result<FullState, TrainError> {
        let base: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
        let trains = optimizer
            .params()
            .iter()
            .all(|(n, _)| base.iter().any(|(b, _)| b == n));
        let mut weights = ShardedWeights::new(base, sync.world_size(), sync.rank())?;
        let units = full::Units::of(&weights, model)?;
        weights.release_all();
        Ok(FullState {
            weights,
            units,
            trains,
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn update(
    model: &Decoder,
    mut optimizer: Stepper,
    reference: Option<&Decoder>,
    batch: &UpdateBatch,
    settings: &UpdateSettings,
    sync: Option<&mut dyn Collective>,
    shard_weights: bool,
) -> Result<UpdateReport, TrainError> {
    let started = Instant::now();
    let samples = &batch.samples;
    check_samples(samples)?;
    let mut report = UpdateReport::default();
    // In a job every rank runs every collective, samples here or not (a job of one rank
    // runs them on itself).
    let mut sync = sync;
    if samples.is_empty() && sync.is_none() {
        return Ok(report);
    }
    let share = match (&sync, &batch.share) {
        (Some(_), None) => {
            return Err(TrainError::Missing {
                what: "the batch's place in the step (UpdateBatch::share)",
                when: "the update runs in a data-parallel job",
            });
        }
        (Some(_), Some(share)) => {
            if share.positions.len() != samples.len() {
                return Err(TrainError::Setting {
                    name: "share.positions",
                    value: share.positions.len() as f64,
                    why: "there must be one place per sample of the batch",
                });
            }
            Some(share)
        }
        (None, _) => None,
    };
    if let Some(sync) = sync.as_deref_mut() {
        sync::check_weights_agree(sync, optimizer.params(), "before the update")?;
    }
    let loss = &settings.loss;
    let ref_logprobs = match (loss.kl, reference) {
        (Some(_), Some(r)) => {
            // A LoRA model's reference is its own base: the same decoder, adapters off
            // while the guard lives (a panic in the scoring turns them back on too).
            let mode = r.mode();
            mode.adapters_off();
            let scored = score(r, samples, settings);
            drop(mode);
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
            let mode = model.mode();
            mode.train(false);
            let scored = score(model, samples, settings);
            drop(mode);
            Some(scored?)
        }
        (true, LogpOld::Sampling) => {
            Some(samples.iter().map(|s| s.sample_logprobs.clone()).collect())
        }
    };

    // The weights sharded from here on (the scoring above ran on whole weights).
    let mut full = match (shard_weights, sync.as_deref()) {
        (false, _) => None,
        (true, Some(sync)) => Some(FullState::start(model, &optimizer, sync)?),
        (true, None) => {
            return Err(TrainError::Missing {
                what: "a process group (a data-parallel job)",
                when: "the weights are sharded (shard = \"full\")",
            });
        }
    };

    let minis = mini_batches(batch, settings.mini_batches.max(1) as usize, share);
    let plans: Vec<BTreeMap<&str, Vec<Micro>>> = minis
        .iter()
        .map(|mini| {
            mini.iter()
                .map(|(agent, idx)| (*agent, plan(samples, idx, settings)))
                .collect()
        })
        .collect();
    // Forward and backward in forward FLOPs: the backward is twice the forward for a
    // full model (gradients of activations and of weights), once for LoRA, whose frozen
    // weights get none (the adapters' own products are a few percent).
    let backward_factor = if model.adapters().is_empty() {
        3.0
    } else {
        2.0
    };
    let per_epoch: usize = plans.iter().flat_map(|p| p.values()).map(Vec::len).sum();
    batch
        .progress
        .plan(per_epoch * settings.ppo_epochs.max(1) as usize);

    // Without shadow advantages (the shadow normalizer failed this step, and the
    // trainer said so) there is nothing to compare.
    if settings.shadow_gradients
        && batch.shadow_advantages.is_some()
        && let (Some(first), Some(plan)) = (minis.first(), plans.first())
    {
        if sync.is_some() || full.is_some() {
            return Err(TrainError::Missing {
                what: "a single-process update with whole weights",
                when: "shadow_gradients is on",
            });
        }
        let inputs = ShadowInputs {
            mini: first,
            plan,
            old: old_logprobs.as_deref(),
            reference: ref_logprobs.as_deref(),
        };
        report.shadow = Some(shadow_norms(
            model,
            &mut optimizer,
            batch,
            inputs,
            settings,
        )?);
    }

    for epoch in 0..settings.ppo_epochs.max(1) {
        for (mini_index, mini) in minis.iter().enumerate() {
            let first_step = epoch == 0 && mini_index == 0;
            let all: Vec<usize> = mini.values().flatten().copied().collect();
            let mut den_values = [
                all.iter().map(|&i| samples[i].response.len() as f64).sum(),
                all.len() as f64,
            ];
            if let Some(sync) = sync.as_deref_mut() {
                // The loss is normalized by the whole batch's tokens and rows.
                sync::sum_f64(sync, &mut den_values)?;
            }
            let den = Denominators {
                tokens: den_values[0],
                seqs: den_values[1],
            };
            optimizer.begin(sync.is_some());
            // With the weights sharded every rank runs as many micro-batches per agent
            // as the rank with the most (idle ones where it has fewer), so that their
            // gathers and reductions pair up.
            let mut most: Vec<f64> = mini
                .keys()
                .map(|a| plans[mini_index][a].len() as f64)
                .collect();
            if let (Some(_), Some(sync)) = (&full, sync.as_deref_mut()) {
                sync::max_f64(sync, &mut most)?;
            }
            let mut sums = LossSums::default();
            let mut agent_norms: BTreeMap<&str, f64> = BTreeMap::new();
            for (k, (agent, idx)) in mini.iter().enumerate() {
                // The first agent's gradient is what the grads hold after it (they were
                // zeroed): only later agents need the grads before them, copied.
                let started = Instant::now();
                let snapshot = optimizer.snapshot(mini.len() > 1 && k > 0);
                let agent_samples = idx.len();
                sums.phases.optimizer += started.elapsed().as_secs_f64();
                let mut agent_stats = LossStats::default();
                for micro in &plans[mini_index][agent] {
                    let inputs = MicroInputs {
                        old: old_logprobs.as_deref(),
                        reference: ref_logprobs.as_deref(),
                        den: &den,
                    };
                    let stats = match (&mut full, sync.as_deref_mut()) {
                        (Some(f), Some(sync)) => micro_batch_full(
                            model,
                            samples,
                            micro,
                            inputs,
                            settings,
                            &mut sums,
                            (f, &mut optimizer, sync),
                        )?,
                        _ => micro_batch(model, samples, micro, inputs, settings, &mut sums)?,
                    };
                    if first_step {
                        report.flops += backward_factor * micro.flops(model, samples);
                    }
                    agent_stats.merge(&stats);
                    batch.progress.advance();
                }
                if let (Some(f), Some(sync)) = (&mut full, sync.as_deref_mut()) {
                    let local = plans[mini_index][agent].len();
                    for _ in local..most[k] as usize {
                        let mut sink = f.sink(&mut optimizer);
                        full::idle_micro_batch(&mut f.weights, &f.units, sync, &mut sink)?;
                    }
                }
                let mut agent_samples = agent_samples as f64;
                let mut reduced = None;
                if let Some(sync) = sync.as_deref_mut() {
                    let started = Instant::now();
                    // This agent's gradient, summed over the ranks (only what it added:
                    // the agents before it were summed already).
                    reduced = match (&full, optimizer.sharded_mut()) {
                        (Some(f), Some(o)) if f.trains => {
                            // The layers were reduced micro-batch by micro-batch; the
                            // outer unit's gradient is held whole until now.
                            o.add_held_grads(sync, f.units.outer)?;
                            Some(o.finish_agent())
                        }
                        _ => optimizer.sum_agent(sync, snapshot.as_deref())?,
                    };
                    sync::all_reduce_stats(sync, &mut agent_stats)?;
                    let mut n = [agent_samples];
                    sync::sum_f64(sync, &mut n)?;
                    agent_samples = n[0];
                    sums.phases.optimizer += started.elapsed().as_secs_f64();
                }
                if mini.len() > 1 {
                    let started = Instant::now();
                    let norm =
                        optimizer.agent_norm(sync.as_deref_mut(), snapshot.as_deref(), reduced)?;
                    agent_norms.insert(agent, norm);
                    sums.phases.optimizer += started.elapsed().as_secs_f64();
                }
                if agent_samples == 0.0 {
                    // No rank had samples of this agent in this mini-batch.
                    continue;
                }
                let entry = report.agents.entry(agent.to_string()).or_default();
                entry.stats.merge(&agent_stats);
                report.stats.merge(&agent_stats);
                if epoch == 0 {
                    entry.samples += agent_samples as usize;
                }
            }
            if let Some(sync) = sync.as_deref_mut() {
                // One rank's non-finite loss skips the step on every rank.
                let mut bad = [f64::from(u8::from(!sums.finite))];
                sync::max_f64(sync, &mut bad)?;
                sums.finite = bad[0] == 0.0;
            }
            let started = Instant::now();
            let norm = optimizer.clip_grad_norm(sync.as_deref_mut(), settings.grad_clip)?;
            for (agent, entry) in report.agents.iter_mut() {
                if !first_step || !mini.contains_key(agent.as_str()) {
                    continue;
                }
                entry.grad_norm = agent_norms.get(agent.as_str()).copied().unwrap_or(norm);
            }
            report.grad_norms.push(norm);
            if sums.finite && norm.is_finite() {
                match (&mut full, optimizer.sharded_mut(), sync.as_deref_mut()) {
                    (Some(f), Some(o), Some(sync)) if f.trains => {
                        o.step_sharded(sync, batch.lr, &mut f.weights)?
                    }
                    (_, _, sync) => optimizer.step(sync, batch.lr)?,
                }
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
            sums.phases.optimizer += started.elapsed().as_secs_f64();
            let p = &mut report.phases;
            p.forward += sums.phases.forward;
            p.loss += sums.phases.loss;
            p.backward += sums.phases.backward;
            p.optimizer += sums.phases.optimizer;
        }
    }
    optimizer.zero_grad();
    let mut tokens = [samples.iter().map(|s| s.response.len() as f64).sum::<f64>()];
    if let Some(sync) = sync {
        if let Some(f) = &mut full {
            report.weights = Some(f.weights.bytes());
            // Whole again, for generation, evaluation and saving.
            f.weights.gather_all(sync)?;
        }
        sync::sum_f64(sync, &mut tokens)?;
        sync::check_weights_agree(sync, optimizer.params(), "after the update")?;
    }
    report.tokens = tokens[0] as usize;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The first optimizer step's mini-batch and its plan, and the log-probs the update
/// takes its ratio and KL against: what [`shadow_norms`] repeats.
struct ShadowInputs<'a> {
    mini: &'a BTreeMap<&'a str, Vec<usize>>,
    plan: &'a BTreeMap<&'a str, Vec<Micro>>,
    old: Option<&'a [Vec<f32>]>,
    reference: Option<&'a [Vec<f32>]>,
}

/// The pre-clip gradient norms of the first optimizer step had the advantages been the
/// shadow normalizer's (`batch.shadow_advantages`): the same samples, micro-batches,
/// denominators and weights, each agent's share and the model's whole gradient. The
/// gradients are left zeroed; nothing steps. Costs one more forward and backward of
/// the first mini-batch.
fn shadow_norms(
    model: &Decoder,
    optimizer: &mut Stepper,
    batch: &UpdateBatch,
    inputs: ShadowInputs,
    settings: &UpdateSettings,
) -> Result<ShadowNorms, TrainError> {
    let samples = &batch.samples;
    let Some(advantages) = &batch.shadow_advantages else {
        return Err(TrainError::Missing {
            what: "the shadow normalizer's advantages (UpdateBatch::shadow_advantages)",
            when: "shadow_gradients is on",
        });
    };
    if advantages.len() != samples.len() {
        return Err(TrainError::Setting {
            name: "shadow_advantages",
            value: advantages.len() as f64,
            why: "there must be one shadow advantage per sample of the batch",
        });
    }
    let shadow: Vec<TrainSample> = samples
        .iter()
        .zip(advantages)
        .map(|(s, &a)| TrainSample {
            advantage: a,
            ..s.clone()
        })
        .collect();
    let all: Vec<usize> = inputs.mini.values().flatten().copied().collect();
    let den = Denominators {
        tokens: all.iter().map(|&i| samples[i].response.len() as f64).sum(),
        seqs: all.len() as f64,
    };
    let grads = |o: &Stepper| -> Vec<Tensor> {
        o.params()
            .iter()
            .map(|(_, p)| p.grad())
            .filter(Tensor::defined)
            .collect()
    };
    let norm = |ts: &[Tensor]| {
        let mut squares = SquaresOnDevice::new(-0.0);
        for t in ts {
            squares.add(t);
        }
        squares.read().sqrt()
    };
    let mut out = ShadowNorms::default();
    let mut whole: Option<Vec<Tensor>> = None;
    let mut sums = LossSums::default();
    for agent in inputs.mini.keys() {
        optimizer.zero_grad();
        for micro in &inputs.plan[agent] {
            let micro_inputs = MicroInputs {
                old: inputs.old,
                reference: inputs.reference,
                den: &den,
            };
            micro_batch(model, &shadow, micro, micro_inputs, settings, &mut sums)?;
        }
        let _guard = tch::no_grad_guard();
        let own = grads(optimizer);
        out.agents.insert(agent.to_string(), norm(&own));
        whole = Some(match whole {
            None => own.iter().map(Tensor::copy).collect(),
            Some(w) => w.iter().zip(&own).map(|(a, b)| a + b).collect(),
        });
    }
    out.model = whole.as_deref().map_or(0.0, norm);
    optimizer.zero_grad();
    Ok(out)
}

/// The update's mini-batches: per agent, the indices into `batch.samples` of each.
/// Each mini-batch takes every M-th sample of each agent, so all agents are in each.
/// In a data-parallel job the places are the step's on all ranks (`share`), so N ranks
/// split the whole batch as one process does; an agent stays in a mini-batch where it
/// has samples on some rank, with none here too (this rank takes part in its sums).
fn mini_batches<'b>(
    batch: &'b UpdateBatch,
    m: usize,
    share: Option<&'b BatchShare>,
) -> Vec<BTreeMap<&'b str, Vec<usize>>> {
    let mut by_agent: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
    if let Some(share) = share {
        for agent in share.agent_totals.keys() {
            by_agent.entry(agent.as_str()).or_default();
        }
    }
    for (i, s) in batch.samples.iter().enumerate() {
        let places = by_agent.entry(s.agent.as_str()).or_default();
        let place = share.map_or(places.len(), |sh| sh.positions[i]);
        places.push((i, place));
    }
    // Samples of `agent` in mini-batch `k` on all ranks.
    let total_in = |agent: &str, k: usize, local: usize| -> usize {
        match share {
            Some(sh) => {
                let n = sh.agent_totals.get(agent).copied().unwrap_or(0);
                (n + m - 1 - k) / m
            }
            None => local,
        }
    };
    (0..m)
        .map(|k| {
            by_agent
                .iter()
                .filter_map(|(agent, places)| {
                    let idx: Vec<usize> = places
                        .iter()
                        .filter(|(_, place)| place % m == k)
                        .map(|(i, _)| *i)
                        .collect();
                    (total_in(agent, k, idx.len()) > 0).then_some((*agent, idx))
                })
                .collect()
        })
        .filter(|mini: &BTreeMap<&str, Vec<usize>>| !mini.is_empty())
        .collect()
}

/// What the micro-batches of one optimizer step add up.
struct LossSums {
    loss: f64,
    finite: bool,
    phases: super::batch::UpdatePhases,
}

impl Default for LossSums {
    fn default() -> Self {
        Self {
            loss: 0.0,
            finite: true,
            phases: Default::default(),
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
    let started = Instant::now();
    let h = micro_hidden(model, samples, micro)?;
    sums.phases.forward += started.elapsed().as_secs_f64();
    let (stats, grad) = chunk_losses(model, samples, &micro.rows(), &h, inputs, settings, sums)?;
    let started = Instant::now();
    if let Some(grad) = grad {
        (&h.hidden * grad).sum(Kind::Float).f_backward()?;
    }
    sums.phases.backward += started.elapsed().as_secs_f64();
    Ok(stats)
}

/// [`micro_batch`] with the weights sharded (`shard = "full"`): the pass layer by
/// layer ([`full`]).
fn micro_batch_full(
    model: &Decoder,
    samples: &[TrainSample],
    micro: &Micro,
    inputs: MicroInputs,
    settings: &UpdateSettings,
    sums: &mut LossSums,
    (f, optimizer, sync): (&mut FullState, &mut Stepper, &mut dyn Collective),
) -> Result<LossStats, TrainError> {
    let started = Instant::now();
    let plan = micro_plan(model, samples, micro)?;
    let pass = full::forward(model, &plan, &mut f.weights, &f.units, sync)?;
    sums.phases.forward += started.elapsed().as_secs_f64();
    let (stats, grad) = chunk_losses(
        model,
        samples,
        &micro.rows(),
        &pass.hidden,
        inputs,
        settings,
        sums,
    )?;
    let started = Instant::now();
    let mut sink = f.sink(optimizer);
    full::backward(
        model,
        &plan,
        pass,
        grad,
        &mut f.weights,
        &f.units,
        sync,
        &mut sink,
    )?;
    sums.phases.backward += started.elapsed().as_secs_f64();
    Ok(stats)
}

impl FullState {
    /// Where the layers' gradients go (see [`full::LayerGrads`]).
    fn sink<'a>(&self, optimizer: &'a mut Stepper) -> full::LayerGrads<'a> {
        match optimizer.sharded_mut() {
            Some(o) if self.trains => full::LayerGrads::Reduce(o),
            _ => full::LayerGrads::Frozen,
        }
    }
}

/// The loss of a micro-batch's response states `h` (rows = sample indices), chunk by
/// chunk of rows, each chunk's backward run down to the states: returns the stats and
/// the gradient of the loss with respect to `h.hidden` (none where nothing reached it),
/// for the caller to back-propagate through the decoder's body once.
fn chunk_losses(
    model: &Decoder,
    samples: &[TrainSample],
    rows: &[usize],
    h: &crate::model::ResponseHidden,
    inputs: MicroInputs,
    settings: &UpdateSettings,
    sums: &mut LossSums,
) -> Result<(LossStats, Option<Tensor>), TrainError> {
    let device = model.device();
    let started = Instant::now();
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
    let mut on_device = StatsOnDevice::new(sums.loss, device);
    let mut start = 0;
    while start < n {
        let c = chunk.min(n - start);
        let mask = h.mask.narrow(0, start, c);
        let (logp, entropy) = masked_token_logprobs(
            model,
            &leaf.narrow(0, start, c),
            &h.targets.narrow(0, start, c),
            &temps.narrow(0, start, c),
            &mask,
            // Entropy is always logged; rows_per_chunk budgets for it.
            true,
        );
        let logp_old = match &old {
            Some(o) => o.narrow(0, start, c),
            None => logp.detach(),
        };
        let logp_ref = reference.as_ref().map(|t| t.narrow(0, start, c));
        let logp_sample = sample_lp.narrow(0, start, c);
        let adv = advantages.narrow(0, start, c);
        let (loss, chunk_stats) = policy_loss_on_device(
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
        on_device.add(&loss, &chunk_stats);
        loss.f_backward()?;
        start += c;
    }
    // The chunks' losses and stats in one read (a non-finite chunk makes the sum so).
    let (loss, stats) = on_device.read()?;
    sums.loss = loss;
    if !loss.is_finite() {
        sums.finite = false;
    }
    sums.phases.loss += started.elapsed().as_secs_f64();
    let grad = leaf.grad();
    Ok((stats, grad.defined().then_some(grad)))
}

#[cfg(test)]
mod tests {
    use super::{Micro, pack, prefix_groups};
    use crate::update::TrainSample;

    fn sample(prompt: Vec<i64>) -> TrainSample {
        TrainSample {
            agent: "a".into(),
            prompt,
            response: vec![7, 8],
            sample_logprobs: vec![-1.0, -1.0],
            temperature: 1.0,
            advantage: 0.0,
        }
    }

    fn samples() -> Vec<TrainSample> {
        let a: Vec<i64> = (1..=10).collect();
        let mut b: Vec<i64> = (1..=8).collect();
        b.extend([20, 21]);
        vec![
            sample(a.clone()),
            sample(a),
            sample(b),
            sample(vec![30, 31, 32]),
            sample(vec![9]),
        ]
    }

    #[test]
    fn rows_join_a_prefix_group_when_that_computes_fewer_tokens() {
        let s = samples();
        // The two copies of a share 9 tokens (one short of their length); b shares 8
        // with them: lowering the prefix by one costs the group 1 token and saves b 8.
        // The three-token prompt shares nothing; the one-token prompt cannot be split.
        let (groups, short) = prefix_groups(&s, &[0, 1, 2, 3, 4]);
        assert_eq!(groups, vec![(8, vec![0, 1, 2]), (2, vec![3])]);
        assert_eq!(short, vec![4]);
    }

    #[test]
    fn a_row_does_not_join_when_the_group_would_lose_more_than_it_saves() {
        // Five rows share 9 tokens; a sixth shares 2: lowering the prefix to 2 would cost
        // 4 × 7 tokens to save 2.
        let mut s: Vec<TrainSample> = (0..5).map(|_| sample((1..=10).collect())).collect();
        s.push(sample(vec![1, 2, 99]));
        let (groups, _) = prefix_groups(&s, &[0, 1, 2, 3, 4, 5]);
        assert_eq!(groups, vec![(9, vec![0, 1, 2, 3, 4]), (2, vec![5])]);
    }

    #[test]
    fn packing_keeps_each_micro_batch_within_the_token_budget() {
        let s = samples();
        let groups = vec![(2, vec![3]), (8, vec![0, 1, 2])];
        // All in one: 2 prefixes × 8 + 4 rows × 4 (two own prompt tokens, two response).
        assert_eq!(
            pack(&s, groups.clone(), 32),
            vec![Micro::Packed(vec![(8, vec![0, 1, 2]), (2, vec![3])])]
        );
        // At 20 the group of three fills a micro-batch (8 + 3 × 4); at 16 it is split
        // and its prefix runs in both parts (8 + 3 × 4 = 20 > 16), and the last row
        // cannot join the second (2 × 8 + 2 × 4 = 24 > 16).
        assert_eq!(
            pack(&s, groups.clone(), 20),
            vec![
                Micro::Packed(vec![(8, vec![0, 1, 2])]),
                Micro::Packed(vec![(2, vec![3])])
            ]
        );
        assert_eq!(
            pack(&s, groups, 16),
            vec![
                Micro::Packed(vec![(8, vec![0, 1])]),
                Micro::Packed(vec![(8, vec![2])]),
                Micro::Packed(vec![(2, vec![3])])
            ]
        );
    }
}
