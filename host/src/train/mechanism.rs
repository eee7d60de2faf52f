//! The mechanism Dr. MAS acts on, measured every step from the step's own sample table
//! (docs/algorithms.md): per agent, how many of its groups carry a signal at all (a
//! group whose scores are all equal gives every sample advantage 0 under any centred
//! normalizer), and — with a shadow normalizer — the gradient-inflation term the paper
//! analyses, mean(A²) of the agent's samples under the run's normalizer and under the
//! shadow one, and how alike the two advantage vectors are.

use drmas_plugin_api::SampleRow;
use serde::Serialize;
use std::collections::BTreeMap;

/// One agent's groups of one step: a group is the agent's samples of one task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupSignal {
    /// Groups of this agent in the step.
    pub groups: usize,
    /// Groups whose scores differ: the ones a centred advantage can learn from.
    pub with_signal: usize,
    /// `(groups − with_signal) / groups`.
    pub zero_variance_fraction: f64,
}

/// Per agent, its groups with and without signal. A group of one sample has no
/// variance either: it is counted as without signal.
pub fn group_signal(rows: &[SampleRow]) -> BTreeMap<String, GroupSignal> {
    let mut scores: BTreeMap<(&str, &str), Vec<f32>> = BTreeMap::new();
    for r in rows {
        scores
            .entry((r.agent.as_str(), r.uid.as_str()))
            .or_default()
            .push(r.score);
    }
    let mut out: BTreeMap<String, GroupSignal> = BTreeMap::new();
    for ((agent, _), s) in scores {
        let signal = s.iter().any(|&x| x != s[0]);
        let e = out.entry(agent.to_string()).or_insert(GroupSignal {
            groups: 0,
            with_signal: 0,
            zero_variance_fraction: 0.0,
        });
        e.groups += 1;
        e.with_signal += usize::from(signal);
    }
    for g in out.values_mut() {
        g.zero_variance_fraction = (g.groups - g.with_signal) as f64 / g.groups as f64;
    }
    out
}

/// One agent's advantages under the run's normalizer against a shadow normalizer's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShadowComparison {
    /// mean(A²) of the agent's samples under the run's normalizer.
    pub mean_sq: f64,
    /// mean(A²) under the shadow normalizer.
    pub shadow_mean_sq: f64,
    /// Pearson correlation of the two advantage vectors; `None` when either is
    /// constant (no direction to compare).
    pub correlation: Option<f64>,
}

/// Per agent, the run's advantages `ours` against the shadow's `shadow` (both in the
/// order of `rows`).
pub fn compare_shadow(
    rows: &[SampleRow],
    ours: &[f32],
    shadow: &[f32],
) -> BTreeMap<String, ShadowComparison> {
    let mut by_agent: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for ((r, &a), &b) in rows.iter().zip(ours).zip(shadow) {
        by_agent
            .entry(r.agent.as_str())
            .or_default()
            .push((f64::from(a), f64::from(b)));
    }
    by_agent
        .into_iter()
        .map(|(agent, pairs)| {
            let n = pairs.len() as f64;
            let mean_sq = pairs.iter().map(|p| p.0 * p.0).sum::<f64>() / n;
            let shadow_mean_sq = pairs.iter().map(|p| p.1 * p.1).sum::<f64>() / n;
            (
                agent.to_string(),
                ShadowComparison {
                    mean_sq,
                    shadow_mean_sq,
                    correlation: pearson(&pairs),
                },
            )
        })
        .collect()
}

fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len() as f64;
    let (ma, mb) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), p| (a + p.0 / n, b + p.1 / n));
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for &(a, b) in pairs {
        sab += (a - ma) * (b - mb);
        saa += (a - ma) * (a - ma);
        sbb += (b - mb) * (b - mb);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(uid: &str, traj: u32, agent: &str, score: f32) -> SampleRow {
        SampleRow {
            uid: uid.into(),
            traj,
            agent: agent.into(),
            turn: 0,
            score,
        }
    }

    #[test]
    fn groups_with_and_without_signal_per_agent() {
        let rows = [
            // Task a: the solver's scores differ, the verifier's do not.
            row("a", 0, "solver", 1.0),
            row("a", 1, "solver", 0.0),
            row("a", 0, "verifier", 0.5),
            row("a", 1, "verifier", 0.5),
            // Task b: both constant; task c: the solver alone, once.
            row("b", 0, "solver", 1.0),
            row("b", 1, "solver", 1.0),
            row("b", 0, "verifier", 0.0),
            row("b", 1, "verifier", 0.0),
            row("c", 0, "solver", 0.3),
        ];
        let s = group_signal(&rows);
        assert_eq!(
            s["solver"],
            GroupSignal {
                groups: 3,
                with_signal: 1,
                zero_variance_fraction: 2.0 / 3.0
            }
        );
        assert_eq!(
            s["verifier"],
            GroupSignal {
                groups: 2,
                with_signal: 0,
                zero_variance_fraction: 1.0
            }
        );
    }

    #[test]
    fn the_shadow_comparison_by_hand() {
        let rows = [
            row("a", 0, "solver", 0.0),
            row("a", 1, "solver", 0.0),
            row("a", 2, "solver", 0.0),
            row("a", 0, "verifier", 0.0),
            row("a", 1, "verifier", 0.0),
        ];
        // Solver: ours (1, -1, 0), shadow (2, -2, 0): mean(A²) 2/3 and 8/3, correlation 1.
        // Verifier: ours (1, 1) constant: no correlation; shadow (0.5, -0.5).
        let ours = [1.0, -1.0, 0.0, 1.0, 1.0];
        let shadow = [2.0, -2.0, 0.0, 0.5, -0.5];
        let c = compare_shadow(&rows, &ours, &shadow);
        let s = c["solver"];
        assert!((s.mean_sq - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.shadow_mean_sq - 8.0 / 3.0).abs() < 1e-12);
        assert!((s.correlation.unwrap() - 1.0).abs() < 1e-12);
        let v = c["verifier"];
        assert_eq!(
            (v.mean_sq, v.shadow_mean_sq, v.correlation),
            (1.0, 0.25, None)
        );
        // Opposite directions: −1.
        let c = compare_shadow(&rows[..3], &[1.0, 0.0, -1.0], &[-3.0, 0.0, 3.0]);
        assert!((c["solver"].correlation.unwrap() + 1.0).abs() < 1e-12);
    }
}
