//! DAPO-style dynamic sampling (`[trainer.dynamic_sampling]`): an agent's group of a
//! task whose binary outcomes are all equal carries no signal (every centred advantage
//! in it is 0) and is left out of the update; with `refill_tasks` the trainer rolls out
//! further tasks until the kept samples reach the step's count (or the bound is spent).

use crate::rollout::Sample;
use std::collections::BTreeMap;

/// A sample's binary outcome: its score with the invalid penalty taken back reaches
/// `threshold` (within float32's rounding of the score: 1e-6).
pub fn outcome(s: &Sample, invalid_penalty: f64, threshold: f64) -> bool {
    let raw = f64::from(s.score) + if s.valid { 0.0 } else { invalid_penalty };
    raw >= threshold - 1e-6
}

/// Which samples a step keeps, and its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Per sample, in order: whether its (task, agent) group has outcomes that differ.
    pub keep: Vec<bool>,
    pub groups: usize,
    pub dropped_groups: usize,
}

impl Kept {
    pub fn kept(&self) -> usize {
        self.keep.iter().filter(|&&k| k).count()
    }
}

/// The groups of `samples` (task uid, agent) and whether each is kept. A group of one
/// sample has no variance: dropped.
pub fn filter(samples: &[&Sample], invalid_penalty: f64, threshold: f64) -> Kept {
    let mut groups: BTreeMap<(&str, &str), (bool, bool)> = BTreeMap::new();
    for s in samples {
        let g = groups
            .entry((s.uid.as_str(), s.agent.as_str()))
            .or_insert((false, false));
        if outcome(s, invalid_penalty, threshold) {
            g.0 = true;
        } else {
            g.1 = true;
        }
    }
    let informative = |s: &&Sample| {
        let (win, lose) = groups[&(s.uid.as_str(), s.agent.as_str())];
        win && lose
    };
    let keep: Vec<bool> = samples.iter().map(informative).collect();
    let dropped_groups = groups.values().filter(|(w, l)| !(*w && *l)).count();
    Kept {
        keep,
        groups: groups.len(),
        dropped_groups,
    }
}

/// How many further tasks the next refill round asks for: the tasks that would make up
/// the missing samples at the rate kept so far (at least one), within what is left of
/// the bound.
pub fn refill_round(missing: usize, kept_per_task: f64, left: usize) -> usize {
    if missing == 0 || left == 0 {
        return 0;
    }
    let per = kept_per_task.max(1.0);
    ((missing as f64 / per).ceil() as usize).clamp(1, left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Finish;

    fn sample(uid: &str, agent: &str, score: f32, valid: bool) -> Sample {
        Sample {
            uid: uid.into(),
            traj: 0,
            agent: agent.into(),
            model: "m".into(),
            turn: 0,
            prompt_ids: vec![1],
            response_ids: vec![2],
            logprobs: vec![-0.5],
            temperature: 1.0,
            valid,
            score,
            finish: Finish::StopToken,
            policy_version: 0,
            advantage: 0.0,
        }
    }

    /// Task a: the solver 1 and 0 (kept), the verifier 1 and 1 (dropped). Task b: the
    /// solver once (dropped), the verifier 0 and −0.1 — an invalid verdict whose raw
    /// score is 0: both fail, dropped although the shaped scores differ.
    #[test]
    fn groups_whose_binary_outcomes_are_equal_are_dropped() {
        let s = [
            sample("a", "solver", 1.0, true),
            sample("a", "solver", 0.0, true),
            sample("a", "verifier", 1.0, true),
            sample("a", "verifier", 1.0, true),
            sample("b", "solver", 1.0, true),
            sample("b", "verifier", 0.0, true),
            sample("b", "verifier", -0.1, false),
        ];
        let k = filter(&s.iter().collect::<Vec<_>>(), 0.1, 1.0);
        assert_eq!(k.keep, [true, true, false, false, false, false, false]);
        assert_eq!((k.groups, k.dropped_groups, k.kept()), (4, 3, 2));
        assert!(outcome(&sample("x", "a", 0.9, false), 0.1, 1.0));
        assert!(!outcome(&sample("x", "a", 0.9, true), 0.1, 1.0));
    }

    #[test]
    fn a_refill_round_asks_for_the_missing_tasks_within_the_bound() {
        // 10 samples missing at 2.5 kept per task: 4 tasks; the bound leaves 3.
        assert_eq!(refill_round(10, 2.5, 8), 4);
        assert_eq!(refill_round(10, 2.5, 3), 3);
        // Nothing kept so far: one sample per task at best.
        assert_eq!(refill_round(3, 0.0, 8), 3);
        assert_eq!(refill_round(0, 2.0, 8), 0);
        assert_eq!(refill_round(5, 2.0, 0), 0);
    }
}
