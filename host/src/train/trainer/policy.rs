//! `[trainer]` turned into the policies the loop asks (configuration is not state): how
//! many episodes a step runs, when to save, evaluate and stop on skips, how an update
//! is watched, and the learning-rate schedule.

use crate::config::TrainerSection;
use crate::eval::EvalOptions;
use crate::update::LrSchedule;

/// What the loop follows, built once from `[trainer]`.
#[derive(Debug, Clone)]
pub(super) struct Policies {
    pub(super) steps: StepPlan,
    pub(super) schedule: LrSchedule,
    pub(super) watch: UpdateWatch,
    pub(super) saves: SavePolicy,
    pub(super) eval: EvalPolicy,
    /// Models whose `grad_clip` is their own (the rest clip at `watch.grad_clip`).
    pub(super) grad_clips: std::collections::BTreeMap<String, f64>,
}

impl Policies {
    /// The gradient-norm clip of model `id`.
    pub(super) fn grad_clip(&self, id: &str) -> f64 {
        self.grad_clips
            .get(id)
            .copied()
            .unwrap_or(self.watch.grad_clip)
    }
}

/// How long the run is and what one step rolls out.
#[derive(Debug, Clone, Copy)]
pub(super) struct StepPlan {
    /// Steps in the whole run.
    pub(super) total: u32,
    /// Tasks a step takes.
    pub(super) prompts: usize,
    /// Trajectories per task.
    pub(super) group_size: u32,
}

/// How a model's update is judged after it ran.
#[derive(Debug, Clone, Copy)]
pub(super) struct UpdateWatch {
    /// A norm above `spike_factor` × the running median of the last `spike_window`.
    pub(super) spike_factor: f64,
    pub(super) spike_window: usize,
    /// Skipped updates in a row that stop the run.
    pub(super) max_skips: u32,
    /// The clip bound, for the count of clipped updates.
    pub(super) grad_clip: f64,
    /// Policy versions a sample may lag its model's weights.
    pub(super) max_staleness: u64,
}

/// When a checkpoint is written and how many are kept.
#[derive(Debug, Clone, Copy)]
pub(super) struct SavePolicy {
    every: u32,
    pub(super) keep: usize,
}

/// When the validation set is evaluated, and how.
#[derive(Debug, Clone, Copy)]
pub(super) struct EvalPolicy {
    every: u32,
    k: usize,
    limit: Option<usize>,
    /// A reward at or above it is a success (the step's and the evaluation's).
    pub(super) success_threshold: f64,
}

impl From<&TrainerSection> for Policies {
    fn from(t: &TrainerSection) -> Self {
        Self {
            steps: StepPlan {
                total: t.steps,
                prompts: t.prompts_per_step as usize,
                group_size: t.group_size,
            },
            schedule: LrSchedule {
                kind: t.lr_schedule,
                warmup_steps: t.warmup_steps,
                total_steps: t.steps,
                min_lr_ratio: t.min_lr_ratio,
            },
            watch: UpdateWatch {
                spike_factor: t.spike_factor,
                spike_window: t.spike_window.get() as usize,
                max_skips: t.max_consecutive_skips.get(),
                grad_clip: t.grad_clip,
                max_staleness: u64::from(t.max_staleness),
            },
            grad_clips: Default::default(),
            saves: SavePolicy {
                every: t.save_every,
                keep: t.keep_checkpoints.get() as usize,
            },
            eval: EvalPolicy {
                every: t.eval_every,
                k: t.eval_k.get() as usize,
                limit: t.eval_limit.map(std::num::NonZeroUsize::get),
                success_threshold: t.success_threshold,
            },
        }
    }
}

impl SavePolicy {
    /// A checkpoint after step `done` (1-based) of a run of `total`: every `every`
    /// steps (0: never on a schedule) and after the last.
    pub(super) fn due(&self, done: u32, total: u32) -> bool {
        (self.every > 0 && done.is_multiple_of(self.every)) || done == total
    }
}

impl EvalPolicy {
    /// An evaluation after step `done` (1-based): every `every` steps (0: never).
    pub(super) fn due(&self, done: u32) -> bool {
        self.every > 0 && done.is_multiple_of(self.every)
    }

    pub(super) fn options(&self, progress: bool) -> EvalOptions {
        EvalOptions {
            k: self.k,
            limit: self.limit,
            success_threshold: self.success_threshold,
            progress,
            ..EvalOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_follow_the_schedule_and_the_last_step() {
        let p = SavePolicy { every: 3, keep: 2 };
        let due: Vec<u32> = (1..=8).filter(|&s| p.due(s, 8)).collect();
        assert_eq!(due, [3, 6, 8]);
        let never = SavePolicy { every: 0, keep: 2 };
        let due: Vec<u32> = (1..=4).filter(|&s| never.due(s, 4)).collect();
        assert_eq!(due, [4]);
    }

    #[test]
    fn evaluations_follow_their_period_and_zero_turns_them_off() {
        let p = EvalPolicy {
            every: 2,
            k: 4,
            limit: None,
            success_threshold: 1.0,
        };
        let due: Vec<u32> = (1..=5).filter(|&s| p.due(s)).collect();
        assert_eq!(due, [2, 4]);
        let off = EvalPolicy { every: 0, ..p };
        assert!((1..=5).all(|s| !off.due(s)));
        assert_eq!(p.options(false).k, 4);
    }
}
