//! The `mean` and `std` keys (statistic pools, docs/algorithms.md), against a reference
//! written here with plain loops and no code of the plugin's: every pool for the mean ×
//! every pool (or none) for the std × every preset × `singleton` and `epsilon`, on three
//! fixed tables; a port of the Dr. MAS code's ablation function, against the pools its
//! four estimators name in each of its two settings; and hand-computed numbers.

use drmas_plugin_api::{ComponentFactory, Normalizer, SampleRow};

const EPS: f64 = 1e-6;

// ------------------------------------------------------------------ the tables

/// Two agents whose scores are distributed differently; the solver acts twice in u1 τ1.
fn team() -> Vec<SampleRow> {
    vec![
        SampleRow::new("u1", 0, "solver", 0, 1.0),
        SampleRow::new("u1", 0, "verifier", 1, 1.0),
        SampleRow::new("u1", 1, "solver", 0, 0.0),
        SampleRow::new("u1", 1, "verifier", 1, 0.0),
        SampleRow::new("u1", 1, "solver", 2, 0.0),
        SampleRow::new("u1", 1, "verifier", 3, -0.1),
        SampleRow::new("u2", 0, "solver", 0, 0.0),
        SampleRow::new("u2", 0, "verifier", 1, 0.0),
        SampleRow::new("u2", 1, "solver", 0, 1.0),
        SampleRow::new("u2", 1, "verifier", 1, 0.9),
    ]
}

/// Singleton and zero-variance pools, in scores that are exact in binary (so a
/// zero variance is exactly zero in both implementations, whatever their order):
/// - `single`: one sample, a singleton in every pool but `batch`;
/// - `flat`: every score 0.5, zero variance in every pool of the task;
/// - `balanced`: trajectory means equal (zero variance in `trajectory`) while each
///   agent's scores differ, so `std = "trajectory"` divides by ε alone;
/// - `lonely`: the verifier acts in one of two trajectories, a singleton `agent` pool
///   beside a two-value `trajectory` pool.
fn edges() -> Vec<SampleRow> {
    vec![
        SampleRow::new("single", 0, "solver", 0, 0.75),
        SampleRow::new("flat", 0, "solver", 0, 0.5),
        SampleRow::new("flat", 0, "verifier", 1, 0.5),
        SampleRow::new("flat", 1, "solver", 0, 0.5),
        SampleRow::new("flat", 1, "verifier", 1, 0.5),
        SampleRow::new("flat", 2, "solver", 0, 0.5),
        SampleRow::new("balanced", 0, "solver", 0, 1.0),
        SampleRow::new("balanced", 0, "verifier", 1, 0.0),
        SampleRow::new("balanced", 1, "solver", 0, 0.0),
        SampleRow::new("balanced", 1, "verifier", 1, 1.0),
        SampleRow::new("lonely", 0, "solver", 0, 1.0),
        SampleRow::new("lonely", 0, "verifier", 1, 0.5),
        SampleRow::new("lonely", 1, "solver", 0, 0.0),
    ]
}

/// Three agents, uneven turns: an agent skipped in some trajectories, one acting twice,
/// the coder at turn 0 in one trajectory and turn 1 in the others; rows interleaved.
fn trio() -> Vec<SampleRow> {
    vec![
        SampleRow::new("w1", 0, "planner", 0, 0.3),
        SampleRow::new("w2", 0, "planner", 0, -0.2),
        SampleRow::new("w1", 0, "coder", 1, 0.7),
        SampleRow::new("w1", 0, "reviewer", 2, 0.2),
        SampleRow::new("w1", 0, "coder", 3, 0.9),
        SampleRow::new("w1", 1, "planner", 0, 0.1),
        SampleRow::new("w1", 1, "coder", 1, -0.4),
        SampleRow::new("w1", 1, "reviewer", 2, 0.6),
        SampleRow::new("w1", 2, "planner", 0, 0.8),
        SampleRow::new("w1", 2, "reviewer", 1, 0.05),
        SampleRow::new("w2", 0, "coder", 1, 0.35),
        SampleRow::new("w2", 0, "reviewer", 2, 0.45),
        SampleRow::new("w2", 0, "planner", 3, 0.15),
        SampleRow::new("w2", 0, "coder", 4, 0.65),
        SampleRow::new("w2", 1, "coder", 0, 0.55),
        SampleRow::new("w2", 1, "reviewer", 1, -0.3),
        SampleRow::new("w2", 2, "planner", 0, 0.4),
        SampleRow::new("w2", 2, "coder", 1, 0.0),
        SampleRow::new("w2", 2, "reviewer", 2, 1.0),
    ]
}

fn tables() -> [(&'static str, Vec<SampleRow>); 3] {
    [("team", team()), ("edges", edges()), ("trio", trio())]
}

// ------------------------------------------------------------ the reference

#[derive(Debug, Clone, Copy, PartialEq)]
enum P {
    Agent,
    AgentTurn,
    AgentTraj,
    Task,
    Traj,
    Batch,
}

const POOLS: [(&str, P); 6] = [
    ("agent", P::Agent),
    ("agent-turn", P::AgentTurn),
    ("agent-trajectory", P::AgentTraj),
    ("task", P::Task),
    ("trajectory", P::Traj),
    ("batch", P::Batch),
];

/// Whether sample `b` is in the pool of sample `a`.
fn shares(p: P, a: &SampleRow, b: &SampleRow) -> bool {
    match p {
        P::Agent | P::AgentTraj => a.uid == b.uid && a.agent == b.agent,
        P::AgentTurn => a.uid == b.uid && a.agent == b.agent && a.turn == b.turn,
        P::Task | P::Traj => a.uid == b.uid,
        P::Batch => true,
    }
}

fn per_trajectory(p: P) -> bool {
    p == P::AgentTraj || p == P::Traj
}

/// The mean score of the samples of `a`'s pool that are in trajectory `traj`.
fn trajectory_mean(p: P, rows: &[SampleRow], a: &SampleRow, traj: u32) -> f64 {
    let mut sum = 0.0;
    let mut n = 0.0;
    for b in rows {
        if shares(p, a, b) && b.traj == traj {
            sum += f64::from(b.score);
            n += 1.0;
        }
    }
    sum / n
}

/// Sample `i`'s own value in pool `p`.
fn own_value(p: P, rows: &[SampleRow], i: usize) -> f64 {
    if per_trajectory(p) {
        trajectory_mean(p, rows, &rows[i], rows[i].traj)
    } else {
        f64::from(rows[i].score)
    }
}

/// The values of sample `i`'s pool `p`.
fn pool_values(p: P, rows: &[SampleRow], i: usize) -> Vec<f64> {
    let a = &rows[i];
    let mut values = Vec::new();
    let mut seen: Vec<u32> = Vec::new();
    for b in rows {
        if !shares(p, a, b) {
            continue;
        }
        if per_trajectory(p) {
            if !seen.contains(&b.traj) {
                seen.push(b.traj);
                values.push(trajectory_mean(p, rows, a, b.traj));
            }
        } else {
            values.push(f64::from(b.score));
        }
    }
    values
}

fn mean(v: &[f64]) -> f64 {
    let mut sum = 0.0;
    for x in v {
        sum += x;
    }
    sum / v.len() as f64
}

fn unbiased_std(v: &[f64]) -> f64 {
    let m = mean(v);
    let mut ss = 0.0;
    for x in v {
        ss += (x - m) * (x - m);
    }
    (ss / (v.len() as f64 - 1.0)).sqrt()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Divide,
    Centre,
    Rloo,
}

/// The six presets: their own pool and what they do with it.
const PRESETS: [(&str, P, Kind); 6] = [
    ("grpo", P::Traj, Kind::Divide),
    ("grpo-mean", P::Traj, Kind::Centre),
    ("rloo", P::Traj, Kind::Rloo),
    ("drmas", P::Agent, Kind::Divide),
    ("drmas-mean", P::Agent, Kind::Centre),
    ("at-grpo", P::AgentTurn, Kind::Divide),
];

/// A(i) = (x − μ_mean-pool) / (σ_std-pool + ε), x the sample's own value in the mean
/// pool; a pool of one value has μ = 0 and σ = 1, or A = 0 with `zero`.
fn reference(
    rows: &[SampleRow],
    mean_pool: P,
    std_pool: Option<P>,
    kind: Kind,
    zero: bool,
    eps: f64,
) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..rows.len() {
        let x = own_value(mean_pool, rows, i);
        let m = pool_values(mean_pool, rows, i);
        let n = m.len() as f64;
        let mu = if m.len() == 1 { 0.0 } else { mean(&m) };
        let a = match (kind, std_pool) {
            (Kind::Divide, Some(sp)) => {
                let s = pool_values(sp, rows, i);
                if zero && (m.len() == 1 || s.len() == 1) {
                    0.0
                } else {
                    let sigma = if s.len() == 1 { 1.0 } else { unbiased_std(&s) };
                    (x - mu) / (sigma + eps)
                }
            }
            (Kind::Rloo, _) if m.len() > 1 => n / (n - 1.0) * (x - mu),
            _ if zero && m.len() == 1 => 0.0,
            _ => x - mu,
        };
        out.push(a);
    }
    out
}

// ---------------------------------------------------------- the comparisons

fn norm(name: &str, config: &str) -> Box<dyn Normalizer> {
    let spec = drmas_norms::plugin();
    let entry = spec
        .entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no normalizer {name}"));
    match &entry.factory {
        ComponentFactory::Normalizer(make) => make(config)
            .unwrap_or_else(|e| panic!("norms/{name} refused {config:?}: {}", e.message())),
        _ => panic!("{name} is not a normalizer"),
    }
}

/// Within 1e-6, relative where the value is above 1 (a σ of 0 divides by ε alone).
fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}: sample {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

#[test]
fn every_mean_and_std_pool_of_every_preset_matches_the_reference() {
    let mut checked = 0;
    for (table, rows) in tables() {
        for (name, own, kind) in PRESETS {
            let means = std::iter::once(None).chain(POOLS.map(Some));
            for mean_key in means {
                // None: the key absent; Some(None): std = "none".
                let mut stds: Vec<Option<Option<(&str, P)>>> = vec![None, Some(None)];
                if kind == Kind::Divide {
                    stds.extend(POOLS.map(|p| Some(Some(p))));
                }
                for std_key in stds {
                    for (extra, zero, eps) in [
                        ("", false, EPS),
                        ("singleton = \"zero\"\n", true, EPS),
                        ("epsilon = 0.25\n", false, 0.25),
                    ] {
                        let mut config = extra.to_string();
                        if let Some((pool, _)) = mean_key {
                            config += &format!("mean = \"{pool}\"\n");
                        }
                        match std_key {
                            Some(Some((pool, _))) => config += &format!("std = \"{pool}\"\n"),
                            Some(None) => config += "std = \"none\"\n",
                            None => {}
                        }
                        let mean_pool = mean_key.map_or(own, |(_, p)| p);
                        let (kind, std_pool) = match (kind, std_key) {
                            (Kind::Divide, None) => (Kind::Divide, Some(own)),
                            (Kind::Divide, Some(Some((_, p)))) => (Kind::Divide, Some(p)),
                            (Kind::Divide, Some(None)) => (Kind::Centre, None),
                            (kind, _) => (kind, None),
                        };
                        let want = reference(&rows, mean_pool, std_pool, kind, zero, eps);
                        let got = norm(name, &config).advantages(&rows).unwrap();
                        assert_close(&got, &want, &format!("{table}: norms/{name} {config:?}"));
                        checked += 1;
                    }
                }
            }
        }
    }
    // 3 tables × 3 configs × (3 dividing presets × 7 means × 8 stds + 3 others × 7 × 2).
    assert_eq!(checked, 3 * 3 * (3 * 7 * 8 + 3 * 7 * 2));
}

#[test]
fn keys_that_name_the_presets_own_pools_change_nothing() {
    for (_, rows) in tables() {
        for (name, keys) in [
            ("grpo", "mean = \"trajectory\"\nstd = \"trajectory\""),
            ("grpo-mean", "mean = \"trajectory\"\nstd = \"none\""),
            ("rloo", "mean = \"trajectory\"\nstd = \"none\""),
            ("drmas", "mean = \"agent\"\nstd = \"agent\""),
            ("drmas-mean", "mean = \"agent\"\nstd = \"none\""),
            ("at-grpo", "mean = \"agent-turn\"\nstd = \"agent-turn\""),
            ("grpo", "mean = \"preset\"\nstd = \"preset\""),
        ] {
            let preset = norm(name, "").advantages(&rows).unwrap();
            assert_eq!(
                norm(name, keys).advantages(&rows).unwrap(),
                preset,
                "{name} {keys:?}"
            );
        }
        // The presets are one machine: grpo with drmas's pools is drmas, bit for bit.
        assert_eq!(
            norm("grpo", "mean = \"agent\"\nstd = \"agent\"").advantages(&rows),
            norm("drmas", "").advantages(&rows)
        );
        assert_eq!(
            norm("drmas", "std = \"none\"").advantages(&rows),
            norm("drmas-mean", "").advantages(&rows)
        );
    }
}

// ------------------------------------------- the Dr. MAS code's ablation branch

/// A port of `compute_grpo_outcome_advantage` on the `ablation` branch of
/// langfengQ/DrMAS (verl/trainer/ppo/core_algos.py): samples are grouped by `index`,
/// the uid, or the uid and the agent with `group_by_agent_id`; the "agent" statistics
/// are over every sample score of the index group, the "traj" statistics over the means
/// of its (index, trajectory) groups; an estimator whose mean is "traj" replaces each
/// score by its (index, trajectory) mean. Groups of one value get mean 0, std 1.
fn drmas_code(
    rows: &[SampleRow],
    group_by_agent_id: bool,
    estimator: &str,
    norm_by_std: bool,
) -> Vec<f64> {
    let index = |s: &SampleRow| {
        if group_by_agent_id {
            format!("{}_{}", s.uid, s.agent)
        } else {
            s.uid.clone()
        }
    };
    // traj_accumulator: (index, traj) → scores, in insertion order.
    let mut acc: Vec<((String, u32), Vec<f64>)> = Vec::new();
    for s in rows {
        let key = (index(s), s.traj);
        match acc.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(f64::from(s.score)),
            None => acc.push((key, vec![f64::from(s.score)])),
        }
    }
    let mut agent: Vec<(String, Vec<f64>)> = Vec::new();
    let mut traj: Vec<(String, Vec<f64>)> = Vec::new();
    for ((idx, _), list) in &acc {
        let avg = mean(list);
        match agent.iter_mut().find(|(k, _)| k == idx) {
            Some((_, v)) => v.extend(list),
            None => agent.push((idx.clone(), list.clone())),
        }
        match traj.iter_mut().find(|(k, _)| k == idx) {
            Some((_, v)) => v.push(avg),
            None => traj.push((idx.clone(), vec![avg])),
        }
    }
    let stats = |groups: &[(String, Vec<f64>)], idx: &str| {
        let v = &groups.iter().find(|(k, _)| k == idx).unwrap().1;
        if v.len() == 1 {
            (0.0, 1.0)
        } else {
            (mean(v), unbiased_std(v))
        }
    };
    let (mean_from, std_from, traj_scores) = match estimator {
        "agent_agent" => (&agent, &agent, false),
        "traj_traj" => (&traj, &traj, true),
        "agent_traj" => (&agent, &traj, false),
        "traj_agent" => (&traj, &agent, true),
        _ => panic!("unknown estimator {estimator}"),
    };
    rows.iter()
        .map(|s| {
            let idx = index(s);
            let score = if traj_scores {
                mean(
                    &acc.iter()
                        .find(|(k, _)| *k == (idx.clone(), s.traj))
                        .unwrap()
                        .1,
                )
            } else {
                f64::from(s.score)
            };
            let (m, _) = stats(mean_from, &idx);
            let (_, sd) = stats(std_from, &idx);
            if norm_by_std {
                (score - m) / (sd + EPS)
            } else {
                score - m
            }
        })
        .collect()
}

#[test]
fn the_drmas_codes_four_estimators_are_these_pools() {
    // (group_by_agent_id, estimator, mean, std)
    let map = [
        (true, "agent_agent", "agent", "agent"),
        (true, "traj_traj", "agent-trajectory", "agent-trajectory"),
        (true, "agent_traj", "agent", "agent-trajectory"),
        (true, "traj_agent", "agent-trajectory", "agent"),
        (false, "agent_agent", "task", "task"),
        (false, "traj_traj", "trajectory", "trajectory"),
        (false, "agent_traj", "task", "trajectory"),
        (false, "traj_agent", "trajectory", "task"),
    ];
    for (table, rows) in tables() {
        for (by_agent, estimator, mean, std) in map {
            let what = format!("{table}: group_by_agent_id={by_agent} {estimator}");
            let config = format!("mean = \"{mean}\"\nstd = \"{std}\"");
            let got = norm("grpo", &config).advantages(&rows).unwrap();
            assert_close(&got, &drmas_code(&rows, by_agent, estimator, true), &what);
            // norm_adv_by_std_in_grpo = False: centre only.
            let config = format!("mean = \"{mean}\"\nstd = \"none\"");
            let got = norm("grpo", &config).advantages(&rows).unwrap();
            assert_close(&got, &drmas_code(&rows, by_agent, estimator, false), &what);
        }
        // Its two presets are ours: Dr. MAS and GRPO.
        let drmas = norm("drmas", "").advantages(&rows).unwrap();
        assert_close(&drmas, &drmas_code(&rows, true, "agent_agent", true), table);
        let grpo = norm("grpo", "").advantages(&rows).unwrap();
        assert_close(&grpo, &drmas_code(&rows, false, "traj_traj", true), table);
    }
}

// ---------------------------------------------------------- by hand

/// One task, three trajectories; the solver acts twice in τ1:
///
///   τ0: S = 1, V = 1          r̄ = 1
///   τ1: S = 0, V = 1, S = 0   r̄ = 1/3
///   τ2: S = 1, V = 0.5        r̄ = 3/4
///
/// agent pools: S [1, 0, 0, 1] μ = 1/2, σ = √(1/3); V [1, 1, 0.5] μ = 5/6, σ = √(1/12).
/// trajectory pool: [1, 1/3, 3/4], μ = 25/36, σ² = (121 + 169 + 4)/1296 / 2 = 49/432.
/// agent-trajectory pools: S [1, 0, 1] (τ1's two zeros are one value) σ = √(1/3);
/// V as its agent pool.
fn hand() -> Vec<SampleRow> {
    vec![
        SampleRow::new("u", 0, "S", 0, 1.0),
        SampleRow::new("u", 0, "V", 1, 1.0),
        SampleRow::new("u", 1, "S", 0, 0.0),
        SampleRow::new("u", 1, "V", 1, 1.0),
        SampleRow::new("u", 1, "S", 2, 0.0),
        SampleRow::new("u", 2, "S", 0, 1.0),
        SampleRow::new("u", 2, "V", 1, 0.5),
    ]
}

#[test]
fn agent_mean_with_trajectory_std_by_hand() {
    // (s − μ_k) / (√(49/432) + ε): S ±(1/2)/0.3367877, V (1/6)/… and (−1/3)/…
    let want = [
        1.4846106, 0.4948702, -1.4846106, 0.4948702, -1.4846106, 1.4846106, -0.9897404,
    ];
    for (name, config) in [
        ("drmas", "std = \"trajectory\""),
        ("grpo", "mean = \"agent\""),
    ] {
        let got = norm(name, config).advantages(&hand()).unwrap();
        assert_close(&got, &want, &format!("{name} {config}"));
    }
}

#[test]
fn trajectory_mean_with_agent_std_by_hand() {
    // (r̄_τ − 25/36) / (σ_k + ε): τ0 11/36, τ1 −13/36, τ2 2/36 over √(1/3) (S) or √(1/12) (V).
    let want = [
        0.5292368, 1.0584718, -0.6254617, -1.2509212, -0.6254617, 0.0962249, 0.1924494,
    ];
    for (name, config) in [
        ("grpo", "std = \"agent\""),
        ("drmas", "mean = \"trajectory\""),
    ] {
        let got = norm(name, config).advantages(&hand()).unwrap();
        assert_close(&got, &want, &format!("{name} {config}"));
    }
}

#[test]
fn agent_mean_with_agent_trajectory_std_by_hand() {
    // The Dr. MAS code's agent_traj with group_by_agent_id: S ±(1/2)/√(1/3),
    // V (1/6)/√(1/12) and (−1/3)/√(1/12).
    let want = [
        0.8660239, 0.5773483, -0.8660239, 0.5773483, -0.8660239, 0.8660239, -1.1546965,
    ];
    let got = norm("drmas", "std = \"agent-trajectory\"")
        .advantages(&hand())
        .unwrap();
    assert_close(&got, &want, "drmas std = agent-trajectory");
}

#[test]
fn batch_std_by_hand() {
    // LitePPO: GRPO's centred trajectory means over the std of every sample score of
    // the batch, [1, 1, 0, 1, 0, 1, 0.5]: μ = 9/14, σ = 0.4755949.
    let want = [
        0.6424689, 0.6424689, -0.7592814, -0.7592814, -0.7592814, 0.1168125, 0.1168125,
    ];
    let got = norm("grpo", "std = \"batch\"").advantages(&hand()).unwrap();
    assert_close(&got, &want, "grpo std = batch");
}

#[test]
fn singleton_and_zero_variance_pools_by_hand() {
    let rows = edges();
    // `balanced`: trajectory means [0.5, 0.5] have σ = 0, so agent-centred scores are
    // divided by ε alone: ±0.5 / 1e-6; trajectory-centred ones are 0 / (σ_k + ε) = 0.
    let a = norm("drmas", "std = \"trajectory\"")
        .advantages(&rows)
        .unwrap();
    assert_close(
        &a[6..10],
        &[5e5, -5e5, -5e5, 5e5],
        "balanced agent/trajectory",
    );
    let a = norm("grpo", "std = \"agent\"").advantages(&rows).unwrap();
    assert_close(&a[6..10], &[0.0; 4], "balanced trajectory/agent");
    // `lonely`: the verifier's agent pool is [0.5] (μ = 0, σ = 1) beside the
    // trajectory pool [0.75, 0] (μ = 3/8, σ = (3/8)·√2 = 0.5303301).
    let sd = 0.75 / 2f64.sqrt();
    let a = norm("drmas", "std = \"trajectory\"")
        .advantages(&rows)
        .unwrap();
    assert_close(
        &a[10..13],
        &[0.5 / (sd + EPS), 0.5 / (sd + EPS), -0.5 / (sd + EPS)],
        "lonely",
    );
    let z = norm("drmas", "std = \"trajectory\"\nsingleton = \"zero\"")
        .advantages(&rows)
        .unwrap();
    assert_close(
        &z[10..13],
        &[0.5 / (sd + EPS), 0.0, -0.5 / (sd + EPS)],
        "lonely, zero",
    );
    // trajectory mean over the verifier's lone std: (0.75 − 3/8) / (1 + ε); with
    // `zero` a lone std pool zeroes the advantage too.
    let a = norm("grpo", "std = \"agent\"").advantages(&rows).unwrap();
    assert_close(
        &a[11..12],
        &[0.375 / (1.0 + EPS)],
        "lonely trajectory/agent",
    );
    let z = norm("grpo", "std = \"agent\"\nsingleton = \"zero\"")
        .advantages(&rows)
        .unwrap();
    assert_close(&z[11..12], &[0.0], "lonely trajectory/agent, zero");
    // `single` in a batch pool: μ_batch over all 13 samples, never a singleton.
    let a = norm("grpo", "mean = \"batch\"\nstd = \"none\"")
        .advantages(&rows)
        .unwrap();
    let batch_mean = (0.75 + 0.5 * 5.0 + 2.0 + 1.5) / 13.0;
    assert_close(&a[0..1], &[0.75 - batch_mean], "single, batch mean");
}
