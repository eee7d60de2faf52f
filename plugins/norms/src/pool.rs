//! Statistic pools: the values a sample's mean (or std) is taken over.
//!
//! For a sample of agent k at turn t in trajectory τ of task group g (docs/algorithms.md,
//! "Statistic pools"):
//!
//! | pool               | values                                                     | the sample's own value x |
//! |--------------------|------------------------------------------------------------|--------------------------|
//! | `agent`            | every sample score of agent k in g                         | its score s              |
//! | `agent-turn`       | the scores of agent k's samples at turn t in g             | s                        |
//! | `agent-trajectory` | one per trajectory of g where k acted: k's mean score in it | k's mean in τ            |
//! | `task`             | every sample score of g, all agents                        | s                        |
//! | `trajectory`       | one per trajectory of g: r̄, the mean of all its samples   | r̄_τ                      |
//! | `batch`            | every sample score of the batch                            | s                        |

use crate::group::mean_std;
use drmas_plugin_api::SampleRow;
use std::collections::HashMap;

/// Which values a statistic is taken over (see the module table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    Agent,
    AgentTurn,
    AgentTrajectory,
    Task,
    Trajectory,
    Batch,
}

impl Pool {
    pub const ALL: [Pool; 6] = [
        Pool::Agent,
        Pool::AgentTurn,
        Pool::AgentTrajectory,
        Pool::Task,
        Pool::Trajectory,
        Pool::Batch,
    ];

    /// The name used in `[normalizer.config]`.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Agent => "agent",
            Pool::AgentTurn => "agent-turn",
            Pool::AgentTrajectory => "agent-trajectory",
            Pool::Task => "task",
            Pool::Trajectory => "trajectory",
            Pool::Batch => "batch",
        }
    }

    /// The pool named `name` (as in [`Pool::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether a value of the pool is a trajectory's mean rather than one sample's score.
    fn per_trajectory(self) -> bool {
        matches!(self, Pool::AgentTrajectory | Pool::Trajectory)
    }

    /// The pool's partition of the batch: samples with equal keys share one pool.
    fn key(self, s: &SampleRow) -> Key<'_> {
        let (uid, agent, turn) = (Some(s.uid.as_str()), Some(s.agent.as_str()), Some(s.turn));
        match self {
            Pool::Agent | Pool::AgentTrajectory => Key(uid, agent, None),
            Pool::AgentTurn => Key(uid, agent, turn),
            Pool::Task | Pool::Trajectory => Key(uid, None, None),
            Pool::Batch => Key(None, None, None),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key<'a>(Option<&'a str>, Option<&'a str>, Option<u32>);

/// Per sample (in the batch's order): its own value in a pool and that pool's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStats {
    /// The sample's value x: its score, or its trajectory's mean for a per-trajectory pool.
    pub value: Vec<f64>,
    /// The pool's mean.
    pub mean: Vec<f64>,
    /// The pool's unbiased std; NaN for a pool of one value.
    pub std: Vec<f64>,
    /// How many values the pool holds.
    pub size: Vec<usize>,
}

impl PoolStats {
    /// The statistics of `pool` for every sample of `samples`.
    ///
    /// Values are summed in the batch's order (a trajectory's samples, then a pool's
    /// values in first-seen order), the order the six presets always used, so they are
    /// unchanged bit for bit.
    pub fn of(pool: Pool, samples: &[SampleRow]) -> Self {
        let keys: Vec<Key> = samples.iter().map(|s| pool.key(s)).collect();
        // A unit is what contributes one value: a sample, or a (key, trajectory).
        let (unit_of, unit_values, unit_keys): (Vec<usize>, Vec<f64>, Vec<Key>) =
            if pool.per_trajectory() {
                let mut index: HashMap<(Key, u32), usize> = HashMap::new();
                let mut sums: Vec<(f64, usize)> = Vec::new();
                let mut unit_keys = Vec::new();
                let unit_of = samples
                    .iter()
                    .zip(&keys)
                    .map(|(s, &key)| {
                        let u = *index.entry((key, s.traj)).or_insert_with(|| {
                            sums.push((0.0, 0));
                            unit_keys.push(key);
                            sums.len() - 1
                        });
                        sums[u].0 += f64::from(s.score);
                        sums[u].1 += 1;
                        u
                    })
                    .collect();
                let means = sums.iter().map(|(sum, n)| sum / *n as f64).collect();
                (unit_of, means, unit_keys)
            } else {
                let scores = samples.iter().map(|s| f64::from(s.score)).collect();
                ((0..samples.len()).collect(), scores, keys)
            };

        let mut pools: HashMap<Key, Vec<usize>> = HashMap::new();
        for (u, key) in unit_keys.into_iter().enumerate() {
            pools.entry(key).or_default().push(u);
        }
        let mut unit_stats = vec![(0.0, f64::NAN, 0); unit_values.len()];
        for members in pools.values() {
            let values: Vec<f64> = members.iter().map(|&u| unit_values[u]).collect();
            let (mean, std) = mean_std(&values);
            for &u in members {
                unit_stats[u] = (mean, std, members.len());
            }
        }

        let mut stats = PoolStats {
            value: Vec::with_capacity(samples.len()),
            mean: Vec::with_capacity(samples.len()),
            std: Vec::with_capacity(samples.len()),
            size: Vec::with_capacity(samples.len()),
        };
        for u in unit_of {
            let (mean, std, size) = unit_stats[u];
            stats.value.push(unit_values[u]);
            stats.mean.push(mean);
            stats.std.push(std);
            stats.size.push(size);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for pool in Pool::ALL {
            assert_eq!(Pool::parse(pool.name()), Some(pool));
        }
        assert_eq!(Pool::parse("traj"), None);
    }

    #[test]
    fn per_trajectory_pool_gives_each_sample_its_trajectory_mean() {
        let rows = [
            SampleRow::new("u", 0, "a", 0, 1.0),
            SampleRow::new("u", 0, "b", 1, 0.0),
            SampleRow::new("u", 1, "a", 0, 0.0),
        ];
        let s = PoolStats::of(Pool::Trajectory, &rows);
        assert_eq!(s.value, [0.5, 0.5, 0.0]);
        assert_eq!(s.mean, [0.25; 3]);
        assert_eq!(s.size, [2; 3]);
        let s = PoolStats::of(Pool::AgentTrajectory, &rows);
        assert_eq!(s.value, [1.0, 0.0, 0.0]);
        assert_eq!(s.size, [2, 1, 2]);
        assert!(s.std[1].is_nan());
    }
}
