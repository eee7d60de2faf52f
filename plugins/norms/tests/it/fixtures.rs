//! Hand-computed fixtures for every normalizer (docs/algorithms.md).
//!
//! The team: a solver (S) and a verifier (V); two tasks, two trajectories each.
//!
//! task u1 (the agents' scores are distributed differently):
//!   τ0: S t0 = 1.0, V t1 = 1.0                          r̄ = 1.0
//!   τ1: S t0 = 0.0, V t1 = 0.0, S t2 = 0.0, V t3 = -0.1  r̄ = -0.1 / 4 = -0.025
//! task u2:
//!   τ0: S t0 = 0.0, V t1 = 0.0                          r̄ = 0.0
//!   τ1: S t0 = 1.0, V t1 = 0.9                          r̄ = 0.95

use drmas_norms::{GroupNormalizer, Grouping, NormConfig, Scale, Singleton};
use drmas_plugin_api::{ComponentFactory, Normalizer, PluginErrorKind, SampleRow};

const EPS: f64 = 1e-6;

fn table() -> Vec<SampleRow> {
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

/// Builds the named normalizer through the plugin's own spec, as the host does.
fn norm(name: &str, config: &str) -> Box<dyn Normalizer> {
    let spec = drmas_norms::plugin();
    let entry = spec
        .entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no normalizer {name}"));
    match &entry.factory {
        ComponentFactory::Normalizer(make) => make(config).expect("config accepted"),
        _ => panic!("{name} is not a normalizer"),
    }
}

fn assert_close(got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() < 1e-5,
            "sample {i}: got {g}, want {w}; all: {got:?}"
        );
    }
}

// Any group of two distinct values normalizes to ±(d/2)/(d/√2 + ε).
fn pair(d: f64) -> f64 {
    (d / 2.0) / (d / 2f64.sqrt() + EPS)
}

#[test]
fn grpo_normalizes_trajectory_means_per_task() {
    let a = norm("grpo", "").advantages(&table()).unwrap();
    let u1 = pair(1.0 - -0.025); // τ0 above τ1
    let u2 = pair(0.95);
    assert_close(&a, &[u1, u1, -u1, -u1, -u1, -u1, -u2, -u2, u2, u2]);
}

#[test]
fn drmas_normalizes_each_agent_with_its_own_statistics() {
    let a = norm("drmas", "").advantages(&table()).unwrap();
    // u1 solver: [1, 0, 0] → μ = 1/3, σ² = (4/9 + 1/9 + 1/9) / 2 = 1/3.
    let s_sd = (1.0f64 / 3.0).sqrt();
    let s_hi = (2.0 / 3.0) / (s_sd + EPS);
    let s_lo = (-1.0 / 3.0) / (s_sd + EPS);
    // u1 verifier: [1, 0, -0.1] → μ = 0.3, σ² = (0.49 + 0.09 + 0.16) / 2 = 0.37.
    let v_sd = 0.37f64.sqrt();
    let v = |x: f64| (x - 0.3) / (v_sd + EPS);
    // u2: both agents are pairs: solver [0, 1], verifier [0, 0.9].
    assert_close(
        &a,
        &[
            s_hi,
            v(1.0),
            s_lo,
            v(0.0),
            s_lo,
            v(-0.1),
            -pair(1.0),
            -pair(0.9),
            pair(1.0),
            pair(0.9),
        ],
    );
    // The method differs from the baseline on exactly this kind of table.
    let g = norm("grpo", "").advantages(&table()).unwrap();
    assert!((a[0] - g[0]).abs() > 0.4, "drmas {a:?} vs grpo {g:?}");
}

#[test]
fn mean_only_variants_centre_without_scaling() {
    let g = norm("grpo-mean", "").advantages(&table()).unwrap();
    let u1 = (1.0 + 0.025) / 2.0;
    let u2 = 0.95 / 2.0;
    assert_close(&g, &[u1, u1, -u1, -u1, -u1, -u1, -u2, -u2, u2, u2]);

    let d = norm("drmas-mean", "").advantages(&table()).unwrap();
    assert_close(
        &d,
        &[
            2.0 / 3.0,
            0.7,
            -1.0 / 3.0,
            -0.3,
            -1.0 / 3.0,
            -0.4,
            -0.5,
            -0.45,
            0.5,
            0.45,
        ],
    );
}

#[test]
fn rloo_scales_centered_trajectory_means_by_n_over_n_minus_one() {
    let a = norm("rloo", "").advantages(&table()).unwrap();
    // N = 2: 2 · (r̄ − μ) = r̄_τ − r̄_other.
    let u1 = 1.025;
    let u2 = 0.95;
    assert_close(&a, &[u1, u1, -u1, -u1, -u1, -u1, -u2, -u2, u2, u2]);
}

#[test]
fn at_grpo_groups_by_task_turn_and_agent() {
    let a = norm("at-grpo", "").advantages(&table()).unwrap();
    // u1: (t0, S) = [1, 0], (t1, V) = [1, 0]: pairs. (t2, S) = [0] and (t3, V) = [-0.1]
    // are singletons: μ = 0, σ = 1 → s / (1 + ε).
    let p = pair(1.0);
    assert_close(
        &a,
        &[
            p,
            p,
            -p,
            -p,
            0.0,
            -0.1 / (1.0 + EPS),
            -pair(1.0),
            -pair(0.9),
            pair(1.0),
            pair(0.9),
        ],
    );
}

#[test]
fn singleton_group_keeps_score_or_zeroes_it_when_asked() {
    let rows = vec![SampleRow::new("u", 0, "solver", 0, 0.75)];
    for name in ["grpo", "drmas", "at-grpo"] {
        let a = norm(name, "").advantages(&rows).unwrap();
        assert_close(&a, &[0.75 / (1.0 + EPS)]);
        let z = norm(name, "singleton = \"zero\"")
            .advantages(&rows)
            .unwrap();
        assert_close(&z, &[0.0]);
    }
    for name in ["grpo-mean", "drmas-mean", "rloo"] {
        assert_close(&norm(name, "").advantages(&rows).unwrap(), &[0.75]);
    }
}

#[test]
fn all_equal_group_gets_zero_advantage() {
    let rows: Vec<_> = (0..4)
        .map(|t| SampleRow::new("u", t, "solver", 0, 1.0))
        .collect();
    for name in [
        "grpo",
        "grpo-mean",
        "rloo",
        "drmas",
        "drmas-mean",
        "at-grpo",
    ] {
        let a = norm(name, "").advantages(&rows).unwrap();
        assert_close(&a, &[0.0; 4]);
    }
}

#[test]
fn epsilon_is_configurable() {
    let rows = vec![
        SampleRow::new("u", 0, "s", 0, 0.0),
        SampleRow::new("u", 1, "s", 0, 1.0),
    ];
    let a = norm("drmas", "epsilon = 0.5").advantages(&rows).unwrap();
    let sd = 1.0 / 2f64.sqrt();
    assert_close(&a, &[-0.5 / (sd + 0.5), 0.5 / (sd + 0.5)]);
}

#[test]
fn empty_table_gives_no_advantages() {
    assert!(norm("drmas", "").advantages(&[]).unwrap().is_empty());
}

#[test]
fn non_finite_score_is_an_input_error() {
    let rows = vec![SampleRow::new("u7", 3, "verifier", 1, f32::NAN)];
    let err = norm("grpo", "").advantages(&rows).unwrap_err();
    assert_eq!(err.kind, PluginErrorKind::Input);
    assert_eq!(
        err.message(),
        "sample 0 (uid u7, traj 3, agent verifier) has a non-finite score NaN"
    );
}

#[test]
fn bad_config_is_refused_with_the_key() {
    let err = GroupNormalizer::from_config(Grouping::Uid, Scale::Std, "epsilom = 1.0").unwrap_err();
    assert_eq!(err.kind, PluginErrorKind::Config);
    assert!(
        err.message().contains("unknown field `epsilom`"),
        "{}",
        err.message()
    );

    let err =
        GroupNormalizer::from_config(Grouping::Uid, Scale::Std, "epsilon = -1.0").unwrap_err();
    assert_eq!(
        err.message(),
        "epsilon must be a finite number >= 0, got -1"
    );

    let err = GroupNormalizer::from_config(Grouping::Uid, Scale::Std, "singleton = \"drop\"")
        .unwrap_err();
    assert!(
        err.message().contains("unknown variant `drop`"),
        "{}",
        err.message()
    );
}

#[test]
fn direct_construction_matches_the_spec() {
    let direct = GroupNormalizer::new(Grouping::UidAgent, Scale::Std, NormConfig::default());
    assert_eq!(
        direct.advantages(&table()).unwrap(),
        norm("drmas", "").advantages(&table()).unwrap()
    );
    assert_eq!(NormConfig::default().singleton, Singleton::Keep);
}
