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

/// The paper's Lemma measured on one step, for one agent k. Per task g, over the sample
/// scores (population moments): μ_g, σ_g of every agent's samples, μ_gk, σ_gk of agent
/// k's. Under a baseline shared by the whole team, an advantage (r − μ_g)/σ_g of agent
/// k has mean square F_gk = (σ_gk² + (μ_gk − μ_g)²) / σ_g²: the factor by which k's
/// gradient is inflated (F > 1) or damped (F < 1) against a normalization of its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LemmaStats {
    /// F_k: the F_gk of the agent's tasks, weighted by its samples in each (tasks whose
    /// scores are all equal, σ_g = 0, have no F and are left out).
    pub inflation_global: Option<f64>,
    /// mean(A²) of the agent's samples under the run's own advantages: the same factor
    /// for the run's normalizer (≈ 1 for one that normalizes per agent).
    pub inflation_run: Option<f64>,
    /// μ_gk − μ_g and σ_gk / σ_g, weighted as F_k (σ_g > 0 tasks).
    pub mean_gap: Option<f64>,
    pub std_ratio: Option<f64>,
    /// σ_gk over the agent's tasks: its 5th percentile (nearest rank), and the share of
    /// tasks where it is below 1e-3, 1e-2 and 1e-1 (a task where the agent acted once
    /// has σ_gk = 0).
    pub std_p5: Option<f64>,
    pub std_below: [f64; 3],
    /// |A| of the agent's samples under the run's advantages: 99th percentile (nearest
    /// rank) and maximum.
    pub adv_abs_p99: Option<f64>,
    pub adv_abs_max: Option<f64>,
    /// Tasks of the agent, and those with σ_g = 0.
    pub tasks: usize,
    pub flat_tasks: usize,
}

/// Population mean and standard deviation.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The nearest-rank `q`-quantile of `v` (sorted here).
fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Per agent, [`LemmaStats`] of the step's `rows` with the run's advantages `ours` (in
/// the order of `rows`).
pub fn lemma(rows: &[SampleRow], ours: &[f32]) -> BTreeMap<String, LemmaStats> {
    let mut tasks: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
    let mut adv: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (r, &a) in rows.iter().zip(ours) {
        tasks
            .entry(r.uid.as_str())
            .or_default()
            .push((r.agent.as_str(), f64::from(r.score)));
        adv.entry(r.agent.as_str()).or_default().push(f64::from(a));
    }
    #[derive(Default)]
    struct Acc {
        weight: f64,
        f: f64,
        gap: f64,
        ratio: f64,
        stds: Vec<f64>,
        flat: usize,
    }
    let mut acc: BTreeMap<&str, Acc> = BTreeMap::new();
    for samples in tasks.values() {
        let all: Vec<f64> = samples.iter().map(|s| s.1).collect();
        let (mu, sigma) = moments(&all);
        let mut agents: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for &(agent, score) in samples {
            agents.entry(agent).or_default().push(score);
        }
        for (agent, scores) in agents {
            let (mu_k, sigma_k) = moments(&scores);
            let a = acc.entry(agent).or_default();
            a.stds.push(sigma_k);
            if sigma == 0.0 {
                a.flat += 1;
                continue;
            }
            let n = scores.len() as f64;
            a.weight += n;
            a.f += n * (sigma_k * sigma_k + (mu_k - mu) * (mu_k - mu)) / (sigma * sigma);
            a.gap += n * (mu_k - mu);
            a.ratio += n * sigma_k / sigma;
        }
    }
    acc.into_iter()
        .map(|(agent, a)| {
            let per = |x: f64| (a.weight > 0.0).then(|| x / a.weight);
            let advs = &adv[agent];
            let abs: Vec<f64> = advs.iter().map(|x| x.abs()).collect();
            let below =
                |t: f64| a.stds.iter().filter(|&&s| s < t).count() as f64 / a.stds.len() as f64;
            let stats = LemmaStats {
                inflation_global: per(a.f),
                inflation_run: Some(advs.iter().map(|x| x * x).sum::<f64>() / advs.len() as f64),
                mean_gap: per(a.gap),
                std_ratio: per(a.ratio),
                std_p5: quantile(a.stds.clone(), 0.05),
                std_below: [below(1e-3), below(1e-2), below(1e-1)],
                adv_abs_p99: quantile(abs.clone(), 0.99),
                adv_abs_max: abs.iter().copied().reduce(f64::max),
                tasks: a.stds.len(),
                flat_tasks: a.flat,
            };
            (agent.to_string(), stats)
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

    /// The Lemma's table by hand. Task a: solver scores (1, 0), verifier (1, 1): all
    /// four have μ = 0.75, σ² = 0.1875. Solver: μ_k = 0.5, σ_k² = 0.25, so
    /// F = (0.25 + 0.0625) / 0.1875 = 5/3; verifier: μ_k = 1, σ_k = 0, F = 0.0625 /
    /// 0.1875 = 1/3. Task b: every score 0 (σ = 0): left out of F, counted flat. Task c:
    /// the solver alone, once: σ = 0 as well.
    #[test]
    fn the_lemmas_inflation_factor_and_tails_by_hand() {
        let rows = [
            row("a", 0, "solver", 1.0),
            row("a", 1, "solver", 0.0),
            row("a", 0, "verifier", 1.0),
            row("a", 1, "verifier", 1.0),
            row("b", 0, "solver", 0.0),
            row("b", 1, "solver", 0.0),
            row("b", 0, "verifier", 0.0),
            row("b", 1, "verifier", 0.0),
            row("c", 0, "solver", 0.5),
        ];
        let ours = [1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0];
        let l = lemma(&rows, &ours);
        let s = &l["solver"];
        assert!((s.inflation_global.unwrap() - 5.0 / 3.0).abs() < 1e-12);
        // The identity the Lemma states: the mean of the squared global z-scores.
        let z = |r: f64| (r - 0.75) / 0.1875f64.sqrt();
        let direct = (z(1.0).powi(2) + z(0.0).powi(2)) / 2.0;
        assert!((s.inflation_global.unwrap() - direct).abs() < 1e-12);
        assert!((s.mean_gap.unwrap() + 0.25).abs() < 1e-12);
        assert!((s.std_ratio.unwrap() - 0.5 / 0.1875f64.sqrt()).abs() < 1e-12);
        // Its tasks' σ_k: a 0.5, b 0, c 0 (one sample).
        assert_eq!((s.tasks, s.flat_tasks), (3, 2));
        assert_eq!(s.std_p5, Some(0.0));
        assert_eq!(s.std_below, [2.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        // mean(A²) of (1, −1, 0, 0, 0) = 2/5; |A| p99 and max 1.
        assert!((s.inflation_run.unwrap() - 0.4).abs() < 1e-12);
        assert_eq!((s.adv_abs_p99, s.adv_abs_max), (Some(1.0), Some(1.0)));
        let v = &l["verifier"];
        assert!((v.inflation_global.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((v.mean_gap.unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(v.std_ratio, Some(0.0));
        assert_eq!(v.std_below, [1.0, 1.0, 1.0]);
        assert_eq!((v.tasks, v.flat_tasks), (2, 1));
        assert!((v.inflation_run.unwrap() - 0.125).abs() < 1e-12);
        // An agent only in flat tasks has no factor.
        let flat = lemma(&rows[4..8], &ours[4..8]);
        assert_eq!(flat["solver"].inflation_global, None);
        assert_eq!(flat["solver"].mean_gap, None);
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
