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
    /// The episodes of step `step`: the next tasks, G trajectories each.
    pub(super) fn specs(&mut self) -> (Vec<EpisodeSpec>, u64) {
        let plan = self.policy.steps;
        let picks = self
            .state
            .cursor
            .take(self.parts.seed, self.parts.tasks.len(), plan.prompts);
        let epoch = picks.first().map(|p| p.1).unwrap_or(0);
        let step = self.state.step;
        let mut specs = Vec::new();
        for (pos, (index, _)) in picks.into_iter().enumerate() {
            let task = &self.parts.tasks[index];
            // The uid groups the G trajectories and seeds their sampling: unique per
            // step and position (a small set can hold a task twice in one step).
            let uid = format!("{step}:{pos}:{}/{}", task.source, task.id);
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
        let step = self.state.step;
        let cursor_before = self.state.cursor;
        let (specs, epoch) = self.specs();
        let plan = EpisodeSetPlan {
            specs,
            group_size: self.policy.steps.group_size as usize,
            progress: Progress {
                label: format!("step {}/{}", step + 1, self.policy.steps.total),
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
