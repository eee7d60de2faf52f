//! One training step, phase by phase: rollout, advantages, updates (with spike and
//! skip watch), evaluation, the metrics line, the checkpoint.

use super::Trainer;
use super::batch::{PolicyWindow, update_batch};
use super::console::summary_line;
use crate::eval::evaluate;
use crate::pool::ModelHandle;
use crate::record::{EvalRecord, EvalScores, StepRecord};
use crate::rollout::Sample;
use crate::train::mechanism::ShadowComparison;
use crate::train::metrics::{ModelStep, Staleness, StepInput, StepTimes, step_record};
use crate::train::{RunError, checkpoint};
use crate::update::UpdateReport;
use drmas_plugin_api::SampleRow;
use std::collections::BTreeMap;
use std::time::Instant;

/// What watching one model's update found.
pub(super) struct Watched {
    spike: bool,
    spikes_total: u64,
    skipped_in_a_row: u32,
}

impl Trainer {
    /// One training step; `None` when a stop request ended its rollout (nothing of the
    /// step is kept). The phases, in order: rollout (with the failure limit),
    /// advantages, updates (with spike and skip watch), evaluation, the metrics line,
    /// the checkpoint.
    pub fn step(&mut self) -> Result<Option<StepRecord>, RunError> {
        let step_started = Instant::now();
        let policy = self.policy.clone();
        let step = self.state.step;
        let mut times = StepTimes {
            save: std::mem::take(&mut self.save_seconds),
            ..StepTimes::default()
        };
        self.untouched = Some(self.state.cursor);

        let started = Instant::now();
        let Some(mut rollout) = self.rollout()? else {
            return Ok(None);
        };
        let dynamic = match self.parts.settings.dynamic_sampling.clone() {
            None => None,
            Some(ds) => match self.dynamic_sampling(&mut rollout, &ds)? {
                Some(d) => Some(d),
                None => {
                    // A stop request during a refill: the step is not kept.
                    if let Some(cursor) = self.untouched {
                        self.state.cursor = cursor;
                    }
                    return Ok(None);
                }
            },
        };
        times.rollout = started.elapsed().as_secs_f64();

        let started = Instant::now();
        let mut samples: Vec<Sample> = rollout
            .outcomes
            .iter()
            .flat_map(|o| o.samples.clone())
            .collect();
        // Dynamic sampling: the groups without signal stay out of the advantages and
        // the update (`keep` is over these samples, in this order).
        let keep = dynamic.as_ref().map(|d| d.keep.clone());
        if let Some(keep) = &keep {
            let mut k = keep.iter();
            samples.retain(|_| *k.next().expect("one flag per sample"));
        }
        let (has_advantages, shadow, shadow_advantages) = self.assign_advantages(&mut samples)?;
        // This rank trains on its own episodes' samples (all of them in one process).
        let mut mine: Vec<bool> = rollout
            .outcomes
            .iter()
            .zip(&rollout.local)
            .flat_map(|(o, &mine)| std::iter::repeat_n(mine, o.samples.len()))
            .collect();
        if let Some(keep) = &keep {
            let mut k = keep.iter();
            mine.retain(|_| *k.next().expect("one flag per sample"));
        }
        times.advantages = started.elapsed().as_secs_f64();

        let started = Instant::now();
        self.untouched = None;
        let model_steps = self.update_models(
            &samples,
            &mine,
            has_advantages,
            shadow_advantages.as_deref(),
        )?;
        times.update = started.elapsed().as_secs_f64();

        let mut eval = None;
        // In a data-parallel job the ranks share the evaluation's tasks.
        if policy.eval.due(step + 1) && !self.parts.val.is_empty() {
            let started = Instant::now();
            eval = Some(self.evaluate()?);
            times.eval = started.elapsed().as_secs_f64();
        }

        self.state.step = step + 1;
        for (id, m) in &model_steps {
            self.state
                .clip_bound
                .entry(id.clone())
                .or_default()
                .add(&m.report, policy.grad_clip(id));
        }
        times.total = step_started.elapsed().as_secs_f64();
        let record = step_record(&StepInput {
            step: step + 1,
            epoch: rollout.epoch,
            outcomes: &rollout.outcomes,
            failed_episodes: rollout.failed,
            failures: &rollout.tally,
            samples: &samples,
            models: &model_steps,
            times,
            success_threshold: policy.eval.success_threshold,
            reward_names: &self.parts.team.reward_names(),
            eval,
            grad_clips: &model_steps
                .keys()
                .map(|id| (id.clone(), policy.grad_clip(id)))
                .collect(),
            clip_totals: &self.state.clip_bound,
            shadow: shadow.as_ref(),
        });
        let record = StepRecord {
            dynamic_sampling: dynamic.as_ref().map(|d| d.record),
            ..record
        };
        let record = self.log_step(record)?;
        self.log_samples(&samples)?;
        if let Some(t) = &self.trackers {
            self.state.tracking = t.state();
        }
        self.checkpoint_if_due(&model_steps)?;
        if !self.opts.quiet && self.is_root() {
            crate::output::console::err_line(format_args!(
                "{}",
                summary_line(&record, policy.steps.total)
            ));
        }
        self.last_samples = samples;
        Ok(Some(record))
    }

    /// The advantages phase: the normalizer turns the samples' scores into advantages,
    /// written into `samples`; with a shadow normalizer, its comparison and (for
    /// `shadow_gradients`) its advantages in the samples' order. Advantages a normalizer
    /// cannot make finite (huge or broken scores) make the step's samples useless:
    /// `false`, every model skips its update, as for a non-finite loss, and the run
    /// goes on.
    pub(super) fn assign_advantages(&self, samples: &mut [Sample]) -> Result<Advantages, RunError> {
        let rows: Vec<SampleRow> = crate::train::metrics::sample_rows(samples);
        let advantages = match self.parts.normalizer.advantages(&rows) {
            Ok(a) => a,
            Err(e @ crate::plugin::ComponentError::NonFinite { .. }) => {
                self.warn(&format!(
                    "step {}: {e}; every update of this step is skipped",
                    self.state.step + 1
                ));
                return Ok((false, None, None));
            }
            Err(e) => return Err(e.into()),
        };
        // The shadow only measures: its failure costs the step's comparison, not the step.
        let theirs = self
            .parts
            .shadow
            .as_ref()
            .and_then(|shadow| match shadow.advantages(&rows) {
                Ok(theirs) => Some(theirs),
                Err(e) => {
                    self.warn(&format!(
                        "step {}: shadow normalizer: {e}; no comparison this step",
                        self.state.step + 1
                    ));
                    None
                }
            });
        // The loss balance weighs both alike: the comparison stays one of normalizers.
        let balance = crate::train::balance::weights(self.parts.settings.loss_balance, &rows);
        let weigh =
            |a: Vec<f32>| -> Vec<f32> { a.iter().zip(&balance).map(|(a, w)| a * w).collect() };
        let advantages = weigh(advantages);
        let theirs = theirs.map(weigh);
        let shadow = theirs
            .as_ref()
            .map(|theirs| crate::train::mechanism::compare_shadow(&rows, &advantages, theirs));
        for (s, a) in samples.iter_mut().zip(advantages) {
            s.advantage = a;
        }
        Ok((true, shadow, theirs))
    }

    /// The update phase: one model after the other (they take turns on a device
    /// anyway), each on its own agents' samples, with the pool's offload policy between
    /// them; then each model's gradient norm goes through its spike detector and its
    /// skip count.
    pub(super) fn update_models(
        &mut self,
        samples: &[Sample],
        mine: &[bool],
        has_advantages: bool,
        shadow_advantages: Option<&[f32]>,
    ) -> Result<BTreeMap<String, ModelStep>, RunError> {
        let step = self.state.step;
        let models = self.parts.models.clone();
        let handles: Vec<ModelHandle> = models.iter().map(|m| m.1.clone()).collect();
        let offload = self.opts.offload;
        offload.before_updates(&handles)?;
        let mut model_steps = BTreeMap::new();
        for (i, (id, handle, base_lr)) in models.iter().enumerate() {
            let lr = self.policy.schedule.lr_at(*base_lr, step);
            let mut staleness = Staleness::default();
            let report = if has_advantages {
                let policy = PolicyWindow {
                    current: handle.policy_version()?,
                    bound: self.policy.watch.max_staleness,
                };
                let (mut batch, stale) =
                    update_batch(samples, mine, self.dist.is_some(), id, step, lr, policy);
                batch.shadow_advantages =
                    shadow_advantages.map(|a| shadow_of(samples, mine, a, id, policy));
                staleness = stale;
                if stale.refused > 0 {
                    self.warn(&format!(
                        "step {}: {} of model `{id}`'s samples are more than [trainer] max_staleness = {} policy versions behind its weights (version {}) and are left out of its update",
                        step + 1,
                        stale.refused,
                        policy.bound,
                        policy.current
                    ));
                }
                let report = self.update_with_progress(id, handle, batch)?;
                offload.after_update(&handles, i)?;
                report
            } else {
                UpdateReport {
                    grad_norms: vec![f64::NAN],
                    skipped: 1,
                    ..Default::default()
                }
            };
            let watched = self.watch_update(id, &report);
            model_steps.insert(
                id.clone(),
                ModelStep {
                    lr,
                    spike: watched.spike,
                    spikes_total: watched.spikes_total,
                    skipped_in_a_row: watched.skipped_in_a_row,
                    staleness,
                    report,
                },
            );
        }
        Ok(model_steps)
    }

    /// The spike detector and the skip count of model `id` after its update.
    pub(super) fn watch_update(&mut self, id: &str, report: &UpdateReport) -> Watched {
        let watch = self.policy.watch;
        let detector = self.state.spikes.entry(id.to_string()).or_default();
        // Only a finite norm is a reading: a non-finite step is counted as skipped.
        let norm = report.grad_norm().finite();
        let spike =
            norm.is_some_and(|n| detector.observe(n, watch.spike_factor, watch.spike_window));
        let spikes_total = detector.spikes;
        if spike {
            let msg = format!(
                "step {}: gradient spike in model `{id}`: norm {:.3} > {} × running median",
                self.state.step + 1,
                norm.unwrap_or(f64::NAN),
                watch.spike_factor
            );
            self.warn(&msg);
        }
        let skips = self
            .state
            .consecutive_skips
            .entry(id.to_string())
            .or_default();
        if report.skipped > 0 && report.applied == 0 {
            *skips += 1;
        } else {
            *skips = 0;
        }
        Watched {
            spike,
            spikes_total,
            skipped_in_a_row: *skips,
        }
    }

    /// The checkpoint phase: a checkpoint every `save_every` steps, at the last step,
    /// and when a model has skipped too many updates in a row (then the run stops with
    /// that checkpoint named).
    pub(super) fn checkpoint_if_due(
        &mut self,
        model_steps: &BTreeMap<String, ModelStep>,
    ) -> Result<(), RunError> {
        let max_skips = self.policy.watch.max_skips;
        let too_many = model_steps
            .iter()
            .find(|(_, m)| m.skipped_in_a_row >= max_skips);
        let due = (self.policy.saves).due(self.state.step, self.policy.steps.total);
        if due || too_many.is_some() {
            let started = Instant::now();
            self.last_saved = Some(self.save()?);
            self.save_seconds = started.elapsed().as_secs_f64();
        }
        if let Some((model, m)) = too_many {
            return Err(RunError::TooManySkips {
                model: model.clone(),
                count: m.skipped_in_a_row,
                step: self.state.step,
                checkpoint: self
                    .last_saved
                    .clone()
                    .unwrap_or_else(|| checkpoint::step_dir(&self.parts.run_dir, self.state.step)),
            });
        }
        Ok(())
    }

    pub(super) fn evaluate(&mut self) -> Result<EvalRecord, RunError> {
        let opts = (self.policy.eval)
            .options(!self.opts.quiet && self.dist.as_ref().is_none_or(|d| d.is_root()));
        let report = evaluate(
            &self.parts.team,
            &self.parts.name,
            &self.parts.val,
            &opts,
            &self.runtime,
            self.dist.as_mut().map(|d| &mut d.group),
        )?
        .report;
        let sources = (report.sources.iter())
            .map(|(s, r)| {
                let scores = EvalScores {
                    avg_at_k: r.avg_at_k,
                    pass_at_k: r.pass_at_k,
                };
                (s.clone(), scores)
            })
            .collect();
        Ok(EvalRecord {
            k: report.k as u64,
            avg_at_k: report.overall.avg_at_k,
            pass_at_k: report.overall.pass_at_k,
            sources,
            failed_episodes: report.failed_episodes as u64,
            seconds: report.seconds,
        })
    }
}

/// What the advantages phase gives: whether the step's advantages are usable, the
/// shadow normalizer's comparison per agent, and its advantages in the samples' order.
type Advantages = (
    bool,
    Option<BTreeMap<String, ShadowComparison>>,
    Option<Vec<f32>>,
);

/// The shadow advantages of model `id`'s update batch: those of the samples
/// [`update_batch`] keeps (this rank's, within the staleness bound), in its order.
fn shadow_of(
    samples: &[Sample],
    mine: &[bool],
    shadow: &[f32],
    id: &str,
    policy: PolicyWindow,
) -> Vec<f32> {
    samples
        .iter()
        .zip(mine)
        .zip(shadow)
        .filter(|((s, m), _)| {
            **m && s.model == id && policy.current.saturating_sub(s.policy_version) <= policy.bound
        })
        .map(|(_, &a)| a)
        .collect()
}
