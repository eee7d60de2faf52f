//! One configurable group normalizer that covers every variant.

use crate::group::mean_std;
use drmas_plugin_api::{
    Normalizer, PluginError, PluginResult, SampleRow, config_table, kit::ConfigType, parse_config,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Which samples are normalized together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// One group per task; each trajectory contributes the mean of its samples' scores
    /// and all samples of a trajectory share its advantage.
    Uid,
    /// One group per (task, agent); every sample of the agent is a value.
    UidAgent,
    /// One group per (task, turn, agent).
    UidTurnAgent,
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
    }
}

#[derive(Debug, Clone)]
pub struct GroupNormalizer {
    grouping: Grouping,
    scale: Scale,
    config: NormConfig,
}

impl GroupNormalizer {
    pub fn new(grouping: Grouping, scale: Scale, config: NormConfig) -> Self {
        Self {
            grouping,
            scale,
            config,
        }
    }

    pub fn from_config(grouping: Grouping, scale: Scale, text: &str) -> PluginResult<Self> {
        Self::checked(grouping, scale, parse_config(text)?)
    }

    /// [`GroupNormalizer::new`], refusing an `epsilon` that is negative or not finite.
    pub fn checked(grouping: Grouping, scale: Scale, config: NormConfig) -> PluginResult<Self> {
        if !(config.epsilon.is_finite() && config.epsilon >= 0.0) {
            return Err(PluginError::config(format!(
                "epsilon must be a finite number >= 0, got {}",
                config.epsilon
            )));
        }
        Ok(Self::new(grouping, scale, config))
    }

    /// Advantages of the values of one group, in order.
    fn normalize_group(&self, values: &[f64]) -> Vec<f64> {
        if values.len() == 1 {
            // μ = 0, σ = 1 fed through the same formula, as the reference does.
            return match (self.config.singleton, self.scale) {
                (Singleton::Zero, _) => vec![0.0],
                (Singleton::Keep, Scale::Std) => vec![values[0] / (1.0 + self.config.epsilon)],
                (Singleton::Keep, Scale::None | Scale::Rloo) => vec![values[0]],
            };
        }
        let (mean, std) = mean_std(values);
        let n = values.len() as f64;
        values
            .iter()
            .map(|v| match self.scale {
                Scale::Std => (v - mean) / (std + self.config.epsilon),
                Scale::None => v - mean,
                Scale::Rloo => n / (n - 1.0) * (v - mean),
            })
            .collect()
    }

    /// Trajectory-level normalization: r̄_τ per (uid, traj), groups per uid.
    fn by_trajectory(&self, samples: &[SampleRow]) -> Vec<f64> {
        // (uid, traj) -> (sum, count); keep first-seen order for determinism.
        let mut traj_index: HashMap<(&str, u32), usize> = HashMap::new();
        let mut trajs: Vec<(&str, f64, usize)> = Vec::new();
        let sample_traj: Vec<usize> = samples
            .iter()
            .map(|s| {
                let i = *traj_index
                    .entry((s.uid.as_str(), s.traj))
                    .or_insert_with(|| {
                        trajs.push((s.uid.as_str(), 0.0, 0));
                        trajs.len() - 1
                    });
                trajs[i].1 += f64::from(s.score);
                trajs[i].2 += 1;
                i
            })
            .collect();
        let means: Vec<f64> = trajs.iter().map(|(_, sum, n)| sum / *n as f64).collect();
        let traj_adv = self.normalize_keyed(trajs.iter().map(|(uid, _, _)| *uid), &means);
        sample_traj.into_iter().map(|i| traj_adv[i]).collect()
    }

    /// Normalizes `values` within groups given by `keys` (one key per value).
    fn normalize_keyed<K: std::hash::Hash + Eq>(
        &self,
        keys: impl Iterator<Item = K>,
        values: &[f64],
    ) -> Vec<f64> {
        let mut groups: HashMap<K, Vec<usize>> = HashMap::new();
        for (i, key) in keys.enumerate() {
            groups.entry(key).or_default().push(i);
        }
        let mut out = vec![0.0; values.len()];
        for members in groups.values() {
            let group_values: Vec<f64> = members.iter().map(|&i| values[i]).collect();
            for (&i, a) in members.iter().zip(self.normalize_group(&group_values)) {
                out[i] = a;
            }
        }
        out
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
        let scores: Vec<f64> = samples.iter().map(|s| f64::from(s.score)).collect();
        let advantages = match self.grouping {
            Grouping::Uid => self.by_trajectory(samples),
            Grouping::UidAgent => self.normalize_keyed(
                samples.iter().map(|s| (s.uid.as_str(), s.agent.as_str())),
                &scores,
            ),
            Grouping::UidTurnAgent => self.normalize_keyed(
                samples
                    .iter()
                    .map(|s| (s.uid.as_str(), s.turn, s.agent.as_str())),
                &scores,
            ),
        };
        Ok(advantages.into_iter().map(|a| a as f32).collect())
    }
}
