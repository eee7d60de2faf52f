//! Advantage normalizers (docs/algorithms.md).
//!
//! | name         | group                 | values in the group              | advantage               |
//! |--------------|-----------------------|----------------------------------|-------------------------|
//! | `grpo`       | uid                   | per-trajectory mean score r̄_τ    | (r̄_τ − μ) / (σ + ε)     |
//! | `grpo-mean`  | uid                   | r̄_τ                              | r̄_τ − μ                 |
//! | `rloo`       | uid                   | r̄_τ                              | N/(N−1) · (r̄_τ − μ)     |
//! | `drmas`      | (uid, agent)          | every sample of that agent       | (s − μ_k) / (σ_k + ε)   |
//! | `drmas-mean` | (uid, agent)          | every sample of that agent       | s − μ_k                 |
//! | `at-grpo`    | (uid, turn, agent)    | samples of that agent that turn  | (s − μ) / (σ + ε)       |
//!
//! σ is the unbiased (n − 1) standard deviation. A group of one value uses μ = 0, σ = 1
//! (as the reference implementation does) unless `singleton = "zero"`, which gives it A = 0.
//!
//! Each row is a preset: a mean pool, a scale and (for the three that divide) a std pool
//! (`pool.rs`). The `mean` and `std` keys of `[normalizer.config]` choose the pools
//! separately — the Dr. MAS ablation's `agent_traj` is `drmas` with
//! `std = "trajectory"`, LitePPO's batch std is `grpo` with `std = "batch"` — and
//! leave the preset's own where absent.

mod group;
mod normalizer;
mod pool;
mod sources;

pub use normalizer::{GroupNormalizer, Grouping, NormConfig, Scale, Singleton};
pub use pool::{Pool, PoolStats};
pub use sources::{MeanSource, StdSource};

use drmas_plugin_api::PluginSpec;

/// The `norms` plugin: every normalizer of docs/algorithms.md.
pub fn plugin() -> PluginSpec {
    let variants: [(&str, &str, Grouping, Scale); 6] = [
        (
            "grpo",
            "global GRPO: trajectory means normalized per task (the baseline)",
            Grouping::Uid,
            Scale::Std,
        ),
        (
            "grpo-mean",
            "GRPO without the std division",
            Grouping::Uid,
            Scale::None,
        ),
        (
            "rloo",
            "leave-one-out baseline over trajectory means: N/(N-1)·(r − μ)",
            Grouping::Uid,
            Scale::Rloo,
        ),
        (
            "drmas",
            "Dr. MAS: each agent's samples normalized by that agent's own mean and std",
            Grouping::UidAgent,
            Scale::Std,
        ),
        (
            "drmas-mean",
            "Dr. MAS without the std division",
            Grouping::UidAgent,
            Scale::None,
        ),
        (
            "at-grpo",
            "agent- and turn-wise groups: (uid, turn, agent)",
            Grouping::UidTurnAgent,
            Scale::Std,
        ),
    ];
    variants.into_iter().fold(
        PluginSpec::new("norms", env!("CARGO_PKG_VERSION")),
        |spec, (name, summary, grouping, scale)| {
            spec.normalizer_with(name, summary, move |config: NormConfig| {
                GroupNormalizer::checked(grouping, scale, config)
            })
        },
    )
}

// Linked into the host, it registers as a built-in; built alone, it is a `.so`.
#[cfg(feature = "builtin")]
drmas_plugin_api::register_builtin!(plugin);
#[cfg(not(feature = "builtin"))]
drmas_plugin_api::export_plugin!(plugin);
