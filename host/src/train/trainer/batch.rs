//! A model's share of a step's samples as its update batch, with the staleness bound.

use crate::rollout::Sample;
use crate::train::metrics::Staleness;
use crate::update::{BatchShare, TrainSample, UpdateBatch, UpdateProgress};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Model `id`'s share of this rank's samples as its worker's update batch: the step's
/// `samples` (every rank's, in episode order) where `mine` says they are this rank's.
/// In a data-parallel job (`distributed`) the batch says where its samples sit among
/// all ranks' (see [`BatchShare`]).
///
/// A sample more than `policy.bound` versions behind the model's weights
/// (`policy.current`) is left out, on every rank alike (each rank sees every sample's
/// version), and counted in the returned [`Staleness`] over all ranks' samples.
pub(super) fn update_batch(
    samples: &[Sample],
    mine: &[bool],
    distributed: bool,
    id: &str,
    step: u32,
    lr: f64,
    policy: PolicyWindow,
) -> (UpdateBatch, Staleness) {
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    let mut local = Vec::new();
    let mut positions = Vec::new();
    let mut staleness = Staleness::default();
    for (s, &mine) in samples.iter().zip(mine).filter(|(s, _)| s.model == id) {
        let lag = policy.current.saturating_sub(s.policy_version);
        staleness.max = staleness.max.max(lag);
        if lag > 0 {
            staleness.stale += 1;
        }
        if lag > policy.bound {
            staleness.refused += 1;
            continue;
        }
        let place = totals.entry(s.agent.clone()).or_default();
        if mine {
            local.push(TrainSample {
                agent: s.agent.clone(),
                prompt: s.prompt_ids.clone(),
                response: s.response_ids.clone(),
                sample_logprobs: s.logprobs.clone(),
                temperature: s.temperature,
                advantage: s.advantage,
            });
            positions.push(*place);
        }
        *place += 1;
    }
    let batch = UpdateBatch {
        step,
        lr,
        samples: local,
        share: distributed.then_some(BatchShare {
            agent_totals: totals,
            positions,
        }),
        progress: Arc::new(UpdateProgress::default()),
        shadow_advantages: None,
    };
    (batch, staleness)
}

/// The policy versions a model's update takes samples from: its weights' version and
/// how far behind it a sample may be (`[trainer] max_staleness`).
#[derive(Debug, Clone, Copy)]
pub(super) struct PolicyWindow {
    pub(super) current: u64,
    pub(super) bound: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Finish;

    pub(super) fn sample(agent: &str, model: &str, version: u64, first_token: i64) -> Sample {
        Sample {
            uid: "t".into(),
            traj: 0,
            agent: agent.into(),
            model: model.into(),
            turn: 0,
            prompt_ids: vec![1, 2],
            response_ids: vec![first_token],
            logprobs: vec![-0.5],
            temperature: 1.0,
            valid: true,
            score: 1.0,
            finish: Finish::StopToken,
            policy_version: version,
            advantage: 0.5,
        }
    }

    /// Weights at version 5, bound 1: lags 0 and 1 are trained on, lag 3 is left out;
    /// the other model's sample is not this model's business; the count covers every
    /// rank's samples while the batch holds this rank's, with places among the kept.
    #[test]
    pub(super) fn samples_past_the_staleness_bound_are_left_out_and_counted() {
        let samples = vec![
            sample("solver", "lm", 5, 10),
            sample("solver", "lm", 4, 11),
            sample("verifier", "lm", 2, 12),
            sample("solver", "other", 0, 13),
            sample("solver", "lm", 5, 14),
        ];
        let mine = [true, false, true, true, true];
        let policy = PolicyWindow {
            current: 5,
            bound: 1,
        };
        let (batch, stale) = update_batch(&samples, &mine, true, "lm", 0, 1e-3, policy);
        assert_eq!(
            stale,
            Staleness {
                stale: 2,
                refused: 1,
                max: 3
            }
        );
        let firsts: Vec<i64> = batch.samples.iter().map(|s| s.response[0]).collect();
        assert_eq!(firsts, [10, 14]);
        let share = batch.share.unwrap();
        assert_eq!(share.agent_totals, BTreeMap::from([("solver".into(), 3)]));
        assert_eq!(share.positions, [0, 2]);

        // Bound 0: only the current version's samples.
        let policy = PolicyWindow {
            current: 5,
            bound: 0,
        };
        let (batch, stale) = update_batch(&samples, &[true; 5], false, "lm", 0, 1e-3, policy);
        assert_eq!(stale.refused, 2);
        assert_eq!(batch.samples.len(), 2);
        assert!(batch.share.is_none());
    }
}
