//! What crosses from the trainer to a model worker for one update, and what comes back.

use super::loss::{LossSettings, LossStats};
use super::optimizer::AdamWConfig;
use std::{
    collections::BTreeMap,
    sync::{Arc, Condvar, Mutex},
};

/// One sample as the update sees it: token ids, the behaviour policy's log-probs, the
/// temperature it was sampled at, and its advantage (broadcast over its tokens).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSample {
    pub agent: String,
    pub prompt: Vec<i64>,
    pub response: Vec<i64>,
    /// log p of each response token when it was sampled.
    pub sample_logprobs: Vec<f32>,
    pub temperature: f64,
    pub advantage: f32,
}

/// Where `logp_old` of the clipped ratio comes from when it is not simply the detached
/// current log-prob (several mini-batches or PPO epochs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogpOld {
    /// A no-grad forward of the current weights before the first optimizer step.
    #[default]
    Recompute,
    /// The log-probs recorded while sampling (the behaviour policy).
    Sampling,
}

/// How a worker updates its model; fixed for a run.
#[derive(Debug, Clone)]
pub struct UpdateSettings {
    pub loss: LossSettings,
    pub optimizer: AdamWConfig,
    /// Gradient-norm clip (the norm is logged before clipping).
    pub grad_clip: f64,
    /// Padded tokens (rows × longest row) of one micro-batch.
    pub micro_batch_tokens: usize,
    /// Bytes of float32 logits one chunk of the log-softmax may hold.
    pub logits_budget_bytes: usize,
    pub ppo_epochs: u32,
    pub mini_batches: u32,
    pub logp_old: LogpOld,
    /// Run a prompt that several samples share once (forward and backward) for all.
    pub share_prompts: bool,
    /// Before the update, the pre-clip gradient norms the batch would give with the
    /// shadow normalizer's advantages (`UpdateBatch::shadow_advantages`), per agent and
    /// for the model, on the same samples and weights, without a step
    /// (`[trainer] shadow_gradients`).
    pub shadow_gradients: bool,
}

/// One update of one model: the samples its agents produced in a step.
#[derive(Debug, Clone)]
pub struct UpdateBatch {
    /// The trainer step (the policy version after this update is `step + 1`).
    pub step: u32,
    pub lr: f64,
    pub samples: Vec<TrainSample>,
    /// With data parallelism: where this rank's samples sit in the step's whole batch of
    /// this model. `None` in one process.
    pub share: Option<BatchShare>,
    /// Micro-batches done and planned, for a progress bar on another thread.
    pub progress: Arc<UpdateProgress>,
    /// The shadow normalizer's advantage of each sample (in `samples`' order), for
    /// [`UpdateSettings::shadow_gradients`].
    pub shadow_advantages: Option<Vec<f32>>,
}

/// A rank's samples within the step's batch on all ranks: what makes N ranks walk the
/// same agents and mini-batches, in the same order, as one process on the whole batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchShare {
    /// Every agent of this model with samples in the step on any rank, and how many it
    /// has on all ranks. Each rank runs each agent's gradient sum in this (sorted) order,
    /// those without samples here too.
    pub agent_totals: BTreeMap<String, usize>,
    /// Each of the batch's samples' place among its agent's samples on all ranks, in the
    /// order one process holds them; mini-batch k of M takes the places ≡ k (mod M).
    pub positions: Vec<usize>,
}

/// Counters an update advances as it goes, and a wait for their next change (the
/// trainer's progress bar follows them without polling).
#[derive(Debug, Default)]
pub struct UpdateProgress {
    counts: Mutex<ProgressCounts>,
    changed: Condvar,
}

/// Micro-batches done and planned, and whether the update has ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProgressCounts {
    pub done: usize,
    pub total: usize,
    pub ended: bool,
}

impl UpdateProgress {
    pub fn counts(&self) -> ProgressCounts {
        *self.lock()
    }
    pub fn plan(&self, total: usize) {
        self.change(|c| c.total = total);
    }
    pub fn advance(&self) {
        self.change(|c| c.done += 1);
    }
    /// The update is over (returned, failed or panicked): waiters stop waiting.
    pub fn end(&self) {
        self.change(|c| c.ended = true);
    }
    /// The counts once they differ from `seen`, or at once when they already do.
    pub fn wait_change(&self, seen: ProgressCounts) -> ProgressCounts {
        let guard = self.lock();
        let guard = self
            .changed
            .wait_while(guard, |c| *c == seen)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    fn change(&self, f: impl FnOnce(&mut ProgressCounts)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    /// Counters stay readable after a panicking holder (they are plain numbers).
    fn lock(&self) -> std::sync::MutexGuard<'_, ProgressCounts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one agent's samples did in an update.
#[derive(Debug, Clone, Default)]
pub struct AgentUpdate {
    pub stats: LossStats,
    /// Norm of this agent's share of the gradient (first optimizer step of the update).
    pub grad_norm: f64,
    pub samples: usize,
}

/// What an update did.
#[derive(Debug, Clone, Default)]
pub struct UpdateReport {
    /// Gradient norm before clipping of each optimizer step (skipped ones included).
    pub grad_norms: Vec<f64>,
    /// Optimizer steps skipped because the loss or the gradient was not finite.
    pub skipped: usize,
    pub applied: usize,
    pub stats: LossStats,
    pub agents: BTreeMap<String, AgentUpdate>,
    pub tokens: usize,
    /// Floating-point operations of the forward and backward passes (matmuls only).
    pub flops: f64,
    pub seconds: f64,
    /// Where `seconds` went.
    pub phases: UpdatePhases,
    /// With rollouts on an engine: the seconds the engine took to take the new weights
    /// after the update (not in `seconds`).
    pub engine_sync: Option<f64>,
    /// With the weights sharded (`shard = "full"`): what this rank held of them.
    pub weights: Option<super::gathered::WeightBytes>,
    /// With [`UpdateSettings::shadow_gradients`]: the pre-clip gradient norms under the
    /// shadow advantages.
    pub shadow: Option<ShadowNorms>,
}

/// The pre-clip gradient norm of the first optimizer step had the advantages been the
/// shadow normalizer's: of the model's whole gradient and of each agent's share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShadowNorms {
    pub model: f64,
    pub agents: BTreeMap<String, f64>,
}

/// Seconds of an update by phase (the rest of `seconds` is planning, reference and old
/// log-probs, and bookkeeping).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpdatePhases {
    /// The decoder body's forward of every micro-batch.
    pub forward: f64,
    /// Logits, log-softmax and loss per chunk of rows, with their backward down to the
    /// body's output.
    pub loss: f64,
    /// The decoder body's backward.
    pub backward: f64,
    /// Per-agent gradient norms (the copies they need included), the global norm and
    /// clipping, and the AdamW step.
    pub optimizer: f64,
}

/// The pre-clip gradient norm of an update, with the cases a plain `f64` would blur
/// kept apart: a NaN compares false with everything, so a plain maximum over
/// `[5, NaN, 3]` depends on the order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GradNorm {
    /// The update took no optimizer step.
    NoStep,
    /// Every step's norm was finite: the largest of them.
    Finite(f64),
    /// At least one step's norm was NaN or infinite (that step was skipped), whatever
    /// the others were.
    NonFinite,
}

impl GradNorm {
    /// The norm when it is finite.
    pub fn finite(self) -> Option<f64> {
        match self {
            GradNorm::Finite(n) => Some(n),
            GradNorm::NoStep | GradNorm::NonFinite => None,
        }
    }

    /// The norm as a number for logs: NaN unless it is finite.
    pub fn as_f64(self) -> f64 {
        self.finite().unwrap_or(f64::NAN)
    }
}

impl UpdateReport {
    /// The largest pre-clip gradient norm of the update's optimizer steps.
    pub fn grad_norm(&self) -> GradNorm {
        if self.grad_norms.is_empty() {
            GradNorm::NoStep
        } else if self.grad_norms.iter().any(|n| !n.is_finite()) {
            GradNorm::NonFinite
        } else {
            GradNorm::Finite(self.grad_norms.iter().copied().fold(0.0, f64::max))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(norms: &[f64]) -> UpdateReport {
        UpdateReport {
            grad_norms: norms.to_vec(),
            ..UpdateReport::default()
        }
    }

    #[test]
    fn the_grad_norm_is_the_largest_and_any_non_finite_norm_wins_in_any_order() {
        assert_eq!(report(&[5.0, 3.0, 4.0]).grad_norm(), GradNorm::Finite(5.0));
        assert_eq!(report(&[0.0]).grad_norm(), GradNorm::Finite(0.0));
        for order in [
            [5.0, f64::NAN, 3.0],
            [f64::NAN, 5.0, 3.0],
            [5.0, 3.0, f64::NAN],
            [5.0, f64::INFINITY, 3.0],
        ] {
            assert_eq!(report(&order).grad_norm(), GradNorm::NonFinite, "{order:?}");
        }
        assert_eq!(report(&[]).grad_norm(), GradNorm::NoStep);
        assert_eq!(GradNorm::NonFinite.finite(), None);
        assert!(GradNorm::NoStep.as_f64().is_nan());
        assert_eq!(GradNorm::Finite(2.5).as_f64(), 2.5);
    }

    /// A waiter follows every change and stops when the update ends, however fast the
    /// updating thread runs ahead of it.
    #[test]
    fn a_waiter_sees_the_last_counts_and_the_end() {
        let progress = Arc::new(UpdateProgress::default());
        let worker = {
            let p = progress.clone();
            std::thread::spawn(move || {
                p.plan(3);
                for _ in 0..3 {
                    p.advance();
                }
                p.end();
            })
        };
        let mut seen = ProgressCounts::default();
        let mut changes = 0;
        while !seen.ended {
            let next = progress.wait_change(seen);
            assert_ne!(next, seen);
            assert!(next.done >= seen.done);
            seen = next;
            changes += 1;
        }
        worker.join().unwrap();
        assert_eq!(
            seen,
            ProgressCounts {
                done: 3,
                total: 3,
                ended: true
            }
        );
        assert!((1..=5).contains(&changes), "{changes}");
        // Already different: no wait.
        assert_eq!(progress.wait_change(ProgressCounts::default()), seen);
    }
}
