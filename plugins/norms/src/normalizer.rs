//! One configurable group normalizer that covers every variant.
//!
//! A normalizer is a mean pool, a scale and, when the scale divides, a std pool
//! (`crate::pool`). Each of the six components is a preset of these; the `mean` and
//! `std` keys of its config replace the preset's pools one at a time.

use crate::pool::{Pool, PoolStats};
use crate::sources::{MeanSource, StdSource};
use drmas_plugin_api::{
    Normalizer, PluginError, PluginResult, SampleRow, config_table, kit::ConfigType, parse_config,
};
use serde::{Deserialize, Serialize};

/// A preset's own pool: which samples are normalized together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One group per task; each trajectory contributes the mean of its samples' scores
    /// and all samples of a trajectory share its advantage (the `trajectory` pool).
    Uid,
    /// One group per (task, agent); every sample of the agent is a value (`agent`).
    UidAgent,
    /// One group per (task, turn, agent) (`agent-turn`).
    UidTurnAgent,
}

impl Grouping {
    pub fn pool(self) -> Pool {
        match self {
            Grouping::Uid => Pool::Trajectory,
            Grouping::UidAgent => Pool::Agent,
            Grouping::UidTurnAgent => Pool::AgentTurn,
        }
    }
}

/// How a centered value is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Divide by σ + ε.
    Std,
    /// Centre only.
    None,
    /// Multiply by N / (N − 1) (leave-one-out baseline).
    Rloo,
}

/// What a group with a single value gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Singleton {
    /// μ = 0, σ = 1: the value itself (the reference implementation's behaviour).
    #[default]
    Keep,
    /// A = 0.
    Zero,
}

impl ConfigType for Singleton {
    fn config_type() -> String {
        "string".to_string()
    }
}

config_table! {
    /// The `[normalizer.config]` table every variant accepts.
    #[derive(Debug, Clone, PartialEq)]
    pub struct NormConfig {
        /// added to the std before dividing by it (variants that divide)
        pub epsilon: f64 = 1e-6,
        /// a group of one value: "keep" it (mean 0, std 1) or "zero" its advantage
        pub singleton: Singleton = Singleton::Keep,
        /// the pool the mean is taken over: "agent", "agent-turn", "agent-trajectory",
        /// "task", "trajectory" or "batch"; "preset" is the component's own
        pub mean: MeanSource = MeanSource::Preset,
        /// the pool the std is taken over (as `mean`), or "none" to centre only; "preset"
        /// is the component's own; only grpo, drmas and at-grpo take a pool
        pub std: StdSource = StdSource::Preset,
    }
}

#[derive(Debug, Clone)]
pub struct GroupNormalizer {
    mean: Pool,
    scale: Scale,
    /// Used when `scale` is [`Scale::Std`].
    std: Pool,
    config: NormConfig,
}

impl GroupNormalizer {
    /// The preset `grouping` × `scale` with the `mean` and `std` of `config` applied
    /// (unchecked: a std pool on a scale that does not divide is ignored).
    pub fn new(grouping: Grouping, scale: Scale, config: NormConfig) -> Self {
        let own = grouping.pool();
        let mean = match config.mean {
            MeanSource::Preset => own,
            MeanSource::Pool(pool) => pool,
        };
        let (scale, std) = match (scale, config.std) {
            (Scale::Std, StdSource::Pool(pool)) => (Scale::Std, pool),
            (Scale::Std, StdSource::None) => (Scale::None, own),
            (scale, _) => (scale, own),
        };
        Self {
            mean,
            scale,
            std,
            config,
        }
    }

    pub fn from_config(grouping: Grouping, scale: Scale, text: &str) -> PluginResult<Self> {
        Self::checked(grouping, scale, parse_config(text)?)
    }

    /// [`GroupNormalizer::new`], refusing an `epsilon` that is negative or not finite and
    /// a `std` pool for a variant that never divides by a std.
    pub fn checked(grouping: Grouping, scale: Scale, config: NormConfig) -> PluginResult<Self> {
        if !(config.epsilon.is_finite() && config.epsilon >= 0.0) {
            return Err(PluginError::config(format!(
                "epsilon must be a finite number >= 0, got {}",
                config.epsilon
            )));
        }
        if let StdSource::Pool(pool) = config.std {
            let why = match scale {
                Scale::Std => None,
                Scale::None => Some("this variant only centres"),
                Scale::Rloo => Some("rloo scales by N/(N-1)"),
            };
            if let Some(why) = why {
                return Err(PluginError::config(format!(
                    "std = \"{}\" is refused: {why} and never divides by a std, so `std` may only \
                     be \"preset\" or \"none\" here; to divide by the std of that pool use \
                     norms/grpo, norms/drmas or norms/at-grpo",
                    pool.name()
                )));
            }
        }
        Ok(Self::new(grouping, scale, config))
    }

    /// The pool the mean is taken over.
    pub fn mean_pool(&self) -> Pool {
        self.mean
    }

    /// The pool the std is taken over; `None` when the advantage is not divided by one.
    pub fn std_pool(&self) -> Option<Pool> {
        (self.scale == Scale::Std).then_some(self.std)
    }

    /// The advantage of sample `i`. A pool of one value has μ = 0 (mean pool) and σ = 1
    /// (std pool), as the reference implementation has, unless `singleton = "zero"`.
    fn advantage(&self, i: usize, mean: &PoolStats, std: &PoolStats) -> f64 {
        let zero = self.config.singleton == Singleton::Zero;
        let x = mean.value[i];
        let n = mean.size[i];
        let mu = if n == 1 { 0.0 } else { mean.mean[i] };
        match self.scale {
            Scale::Std => {
                let lone = std.size[i] == 1;
                if zero && (n == 1 || lone) {
                    return 0.0;
                }
                let sigma = if lone { 1.0 } else { std.std[i] };
                (x - mu) / (sigma + self.config.epsilon)
            }
            Scale::None | Scale::Rloo if zero && n == 1 => 0.0,
            Scale::None => x - mu,
            // N/(N − 1) is undefined for one value: it keeps x − 0, as the reference does.
            Scale::Rloo if n == 1 => x,
            Scale::Rloo => {
                let n = n as f64;
                n / (n - 1.0) * (x - mu)
            }
        }
    }
}

impl Normalizer for GroupNormalizer {
    fn advantages(&self, samples: &[SampleRow]) -> PluginResult<Vec<f32>> {
        if let Some((i, s)) = samples
            .iter()
            .enumerate()
            .find(|(_, s)| !s.score.is_finite())
        {
            return Err(PluginError::input(format!(
                "sample {i} (uid {}, traj {}, agent {}) has a non-finite score {}",
                s.uid, s.traj, s.agent, s.score
            )));
        }
        let mean = PoolStats::of(self.mean, samples);
        // The std pool's statistics, where it is not the mean pool itself.
        let other = match self.std_pool() {
            Some(pool) if pool != self.mean => Some(PoolStats::of(pool, samples)),
            _ => None,
        };
        let std = other.as_ref().unwrap_or(&mean);
        Ok((0..samples.len())
            .map(|i| self.advantage(i, &mean, std) as f32)
            .collect())
    }
}
