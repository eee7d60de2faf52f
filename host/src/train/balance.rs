//! `[trainer] loss_balance`: a weight on each sample's advantage, applied after the
//! normalizer (and to the shadow normalizer's advantages alike, so that a paired
//! comparison still isolates the normalization). The reviewers' stabilizer for plain
//! GRPO: with `"agent-frequency"` an agent that acts n times in a task's trajectories
//! has each of its samples weighted 1/n, so that an agent acting twice per trajectory
//! does not weigh twice as much as one acting once.

use crate::config::LossBalance;
use drmas_plugin_api::SampleRow;
use std::collections::BTreeMap;

/// Each row's weight under `balance` (all 1 for `None`): for `AgentFrequency`,
/// 1 / n(task, agent), scaled so that the weights' mean over the batch is 1.
pub fn weights(balance: LossBalance, rows: &[SampleRow]) -> Vec<f32> {
    match balance {
        LossBalance::None => vec![1.0; rows.len()],
        LossBalance::AgentFrequency => {
            let mut n: BTreeMap<(&str, &str), usize> = BTreeMap::new();
            for r in rows {
                *n.entry((r.uid.as_str(), r.agent.as_str())).or_default() += 1;
            }
            let raw: Vec<f64> = rows
                .iter()
                .map(|r| 1.0 / n[&(r.uid.as_str(), r.agent.as_str())] as f64)
                .collect();
            let mean = raw.iter().sum::<f64>() / raw.len().max(1) as f64;
            raw.iter().map(|w| (w / mean) as f32).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(uid: &str, agent: &str) -> SampleRow {
        SampleRow::new(uid, 0, agent, 0, 0.0)
    }

    /// Task a: the solver twice, the verifier once; task b: each once. Raw weights
    /// (½, ½, 1, 1, 1), mean 0.8: (0.625, 0.625, 1.25, 1.25, 1.25).
    #[test]
    fn agent_frequency_weights_by_hand() {
        let rows = [
            row("a", "solver"),
            row("a", "solver"),
            row("a", "verifier"),
            row("b", "solver"),
            row("b", "verifier"),
        ];
        assert_eq!(
            weights(LossBalance::AgentFrequency, &rows),
            [0.625, 0.625, 1.25, 1.25, 1.25]
        );
        assert_eq!(weights(LossBalance::None, &rows), [1.0; 5]);
        let w = weights(LossBalance::AgentFrequency, &rows);
        assert!((w.iter().sum::<f32>() / 5.0 - 1.0).abs() < 1e-6);
        assert!(weights(LossBalance::AgentFrequency, &[]).is_empty());
    }
}
