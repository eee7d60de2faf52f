//! The rollout phase of a step: the step's episodes, run as one set
//! ([`crate::rollout::run_episode_set`]: dealt to the ranks of a data-parallel job,
//! the failure limit judged on the whole step).

use super::Trainer;
use crate::rollout::{EpisodeOutcome, EpisodeSetPlan, EpisodeSpec, Progress, run_episode_set};
use crate::train::{RunError, signal};

/// What the rollout phase of a step hands on.
pub(super) struct Rollout {
    pub(super) outcomes: Vec<EpisodeOutcome>,
    /// Whether each outcome's episode ran on this rank (all of them in one process).
    pub(super) local: Vec<bool>,
    /// Episodes that failed (their samples are dropped).
    pub(super) failed: usize,
    pub(super) tally: crate::rollout::FailureTally,
    pub(super) epoch: u64,
}

impl Trainer {
    /// The episodes of a round of step `step`: the next `tasks` tasks, G trajectories
    /// each. Round 0 is the step's own; later rounds refill it (dynamic sampling).
    pub(super) fn specs(&mut self, tasks: usize, round: usize) -> (Vec<EpisodeSpec>, u64) {
        let plan = self.policy.steps;
        let picks = self
            .state
            .cursor
            .take(self.parts.seed, self.parts.tasks.len(), tasks);
        let epoch = picks.first().map(|p| p.1).unwrap_or(0);
        let step = self.state.step;
        let mut specs = Vec::new();
        for (pos, (index, _)) in picks.into_iter().enumerate() {
            let task = &self.parts.tasks[index];
            // The uid groups the G trajectories and seeds their sampling: unique per
            // step and position (a small set can hold a task twice in one step).
            let uid = match round {
                0 => format!("{step}:{pos}:{}/{}", task.source, task.id),
                r => format!("{step}:r{r}.{pos}:{}/{}", task.source, task.id),
            };
            for traj in 0..plan.group_size {
                specs.push(EpisodeSpec {
                    task: task.clone(),
                    uid: uid.clone(),
                    traj,
                    sampling_override: None,
                });
            }
        }
        (specs, epoch)
    }

    /// The rollout phase: the step's G episodes per task. A failed episode (a plugin
    /// panicked, returned an error or a non-finite number; a model failed) is counted
    /// and logged and its samples are dropped: the normalizer sees the smaller group.
    /// Past the failure limit the run stops, as soon as the step's count can no longer
    /// stay within it; so it does when every episode failed. `None` when a stop request
    /// ended it; the data cursor is then back where it was (as after an error), so a
    /// resume redoes the step.
    pub(super) fn rollout(&mut self) -> Result<Option<Rollout>, RunError> {
        self.rollout_round(self.policy.steps.prompts, 0)
    }

    /// One round of `tasks` tasks (round 0: the step's own; see [`Trainer::specs`]).
    pub(super) fn rollout_round(
        &mut self,
        tasks: usize,
        round: usize,
    ) -> Result<Option<Rollout>, RunError> {
        let step = self.state.step;
        let cursor_before = self.state.cursor;
        let (specs, epoch) = self.specs(tasks, round);
        let label = match round {
            0 => format!("step {}/{}", step + 1, self.policy.steps.total),
            r => format!("step {}/{} refill {r}", step + 1, self.policy.steps.total),
        };
        let plan = EpisodeSetPlan {
            specs,
            group_size: self.policy.steps.group_size as usize,
            progress: Progress {
                label,
                show: !self.opts.quiet,
                lines: false,
            },
        };
        let set = run_episode_set(
            &self.runtime,
            &self.parts.team,
            plan,
            signal::requested,
            self.dist.as_mut().map(|d| &mut d.group),
        );
        let set = match set {
            Ok(set) if !set.stopped => set,
            Ok(_) => {
                self.state.cursor = cursor_before;
                return Ok(None);
            }
            Err(source) => {
                self.state.cursor = cursor_before;
                return Err(RunError::Episodes {
                    step: step + 1,
                    source,
                });
            }
        };
        Ok(Some(Rollout {
            outcomes: set.outcomes,
            local: set.local,
            failed: set.failed.len(),
            tally: set.tally,
            epoch,
        }))
    }
}

impl Rollout {
    /// Adds a refill round's episodes.
    pub(super) fn extend(&mut self, more: Rollout) {
        self.outcomes.extend(more.outcomes);
        self.local.extend(more.local);
        self.failed += more.failed;
        self.tally.merge(more.tally);
    }
}

/// What dynamic sampling did in a step.
#[derive(Debug, Clone)]
pub(super) struct DynamicStep {
    /// Per sample of the step's outcomes, in order: kept for the update.
    pub(super) keep: Vec<bool>,
    pub(super) record: crate::record::DynamicSamplingRecord,
}

impl Trainer {
    /// Dynamic sampling (`[trainer.dynamic_sampling]`) on a step's rollout: the groups
    /// whose binary outcomes are all equal are marked to leave out; with `refill_tasks`,
    /// further rounds of tasks are rolled out while fewer samples are kept than the
    /// step's own rollout made, within the bound; refill groups past that count are
    /// left out again, last first, so the batch never grows. `None`: a stop request
    /// ended a round.
    pub(super) fn dynamic_sampling(
        &mut self,
        rollout: &mut Rollout,
        ds: &crate::config::DynamicSampling,
    ) -> Result<Option<DynamicStep>, RunError> {
        use crate::train::dynamic::{filter, refill_round};
        let penalty = self.parts.settings.invalid_penalty;
        let threshold = self.policy.eval.success_threshold;
        fn samples(r: &Rollout) -> Vec<&crate::rollout::Sample> {
            r.outcomes.iter().flat_map(|o| &o.samples).collect()
        }
        let target = rollout
            .outcomes
            .iter()
            .map(|o| o.samples.len())
            .sum::<usize>();
        let mut kept = filter(&samples(rollout), penalty, threshold);
        let bound = ds.refill_tasks.map_or(0, |n| n.get() as usize);
        let (mut used, mut rounds) = (0, 0);
        while kept.kept() < target && used < bound {
            let per_task = kept.kept() as f64 / (self.policy.steps.prompts + used) as f64;
            let n = refill_round(target - kept.kept(), per_task, bound - used);
            rounds += 1;
            let Some(more) = self.rollout_round(n, rounds)? else {
                return Ok(None);
            };
            used += n;
            rollout.extend(more);
            kept = filter(&samples(rollout), penalty, threshold);
        }
        // Past the step's count: refill groups out again, the last first. The refill
        // rounds' samples are the ones after the step's own `target` (rounds append).
        let all = samples(rollout);
        let mut keep = kept.keep.clone();
        let mut excess = kept.kept().saturating_sub(target);
        let mut trimmed = 0;
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for i in (target..all.len()).rev() {
            let group = (all[i].uid.as_str(), all[i].agent.as_str());
            if excess == 0 {
                break;
            }
            if !keep[i] || seen.contains(&group) {
                continue;
            }
            seen.push(group);
            let mut n = 0;
            for (s, k) in all[target..].iter().zip(&mut keep[target..]) {
                if *k && (s.uid.as_str(), s.agent.as_str()) == group {
                    *k = false;
                    n += 1;
                }
            }
            trimmed += 1;
            excess = excess.saturating_sub(n);
        }
        let kept_samples = keep.iter().filter(|&&k| k).count();
        let record = crate::record::DynamicSamplingRecord {
            groups: kept.groups as u64,
            dropped_groups: kept.dropped_groups as u64,
            trimmed_groups: trimmed,
            kept_samples: kept_samples as u64,
            dropped_samples: (all.len() - kept_samples) as u64,
            target_samples: target as u64,
            refill_tasks: used as u64,
            refill_rounds: rounds as u64,
        };
        Ok(Some(DynamicStep { keep, record }))
    }
}
