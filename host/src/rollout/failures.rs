//! Failed episodes: which component each failure is blamed on, how many each caused,
//! and the limit (`[workflow] max_failed_episodes`) past which a run stops.

use super::{
    error::RolloutError,
    orchestra::{EpisodeOutcome, EpisodeSpec},
};
use serde::Serialize;
use std::{cell::RefCell, collections::BTreeMap, fmt};

/// What an episode's failure is blamed on: a component (`agent`, `environment`,
/// `reward`, by its `plugin/component` name), a model (by its id) or the host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct Blame {
    /// `agent`, `environment`, `reward`, `model` or `host`.
    pub kind: String,
    pub name: String,
}

impl fmt::Display for Blame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// The failures blamed on one component.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ComponentFailures {
    pub episodes: usize,
    /// The task of the first failed episode (`source/id`).
    pub first_task: String,
    pub first_error: String,
}

/// Failed episodes counted by what they are blamed on (keys as `agent math/solver`).
/// Cancelled episodes (the run was stopped) are not failures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct FailureTally {
    pub by_component: BTreeMap<String, ComponentFailures>,
}

impl FailureTally {
    /// Counts the failure of an episode of `task` (`source/id`); returns what it is
    /// blamed on, or `None` for a cancelled episode (not counted).
    pub fn record(&mut self, task: &str, error: &RolloutError) -> Option<Blame> {
        let blame = error.blame()?;
        self.by_component
            .entry(blame.to_string())
            .and_modify(|c| c.episodes += 1)
            .or_insert_with(|| ComponentFailures {
                episodes: 1,
                first_task: task.to_string(),
                first_error: error.to_string(),
            });
        Some(blame)
    }

    /// Adds another tally (another rank's): counts add up, the first error stays.
    pub fn merge(&mut self, other: FailureTally) {
        for (who, c) in other.by_component {
            self.by_component
                .entry(who)
                .and_modify(|mine| mine.episodes += c.episodes)
                .or_insert(c);
        }
    }

    /// Failed episodes in all.
    pub fn total(&self) -> usize {
        self.by_component.values().map(|c| c.episodes).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_component.is_empty()
    }

    /// One line: each component with its count and first error.
    pub fn summary(&self) -> String {
        self.by_component
            .iter()
            .map(|(who, c)| {
                format!(
                    "{who}: {} (first, task {}: {})",
                    c.episodes, c.first_task, c.first_error
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Whether `failed` of `total` episodes is more than the fraction `limit` allows.
pub fn over_failure_limit(failed: usize, total: usize, limit: f64) -> bool {
    failed as f64 > limit * total as f64
}

/// The run-stopping error's text: the limit, the count and the per-component counts.
pub fn failure_limit_message(tally: &FailureTally, total: usize, limit: f64) -> String {
    format!(
        "{} of {total} episodes failed, more than [workflow] max_failed_episodes = {limit} allows; {}",
        tally.total(),
        tally.summary()
    )
}

/// The failures of one run of episodes (an evaluation, a training step) as they come
/// in: counted by component, each with its log line, and checked against the limit.
pub struct FailureWatch {
    /// Each episode's `(uid, traj)`, by its index in the run.
    labels: Vec<(String, u32)>,
    limit: f64,
    tally: RefCell<FailureTally>,
}

impl FailureWatch {
    pub fn new(specs: &[EpisodeSpec], limit: f64) -> Self {
        Self {
            labels: specs.iter().map(|s| (s.uid.clone(), s.traj)).collect(),
            limit,
            tally: RefCell::default(),
        }
    }

    /// Counts episode `i`'s result if it failed; returns the line to log, or `None`
    /// for a completed or cancelled episode.
    pub fn record(
        &self,
        i: usize,
        result: &Result<EpisodeOutcome, RolloutError>,
    ) -> Option<String> {
        let Err(e) = result else {
            return None;
        };
        let (uid, traj) = &self.labels[i];
        self.tally.borrow_mut().record(uid, e)?;
        Some(format!("task {uid} (episode {traj}) failed: {e}"))
    }

    /// Whether this share of episodes alone already puts a run of `total` episodes over
    /// the limit (a data-parallel rank's early stop: its failures are the run's too).
    pub fn over_limit_of(&self, total: usize) -> bool {
        over_failure_limit(self.tally.borrow().total(), total, self.limit)
    }

    /// The tally, whatever the limit says (judged on the whole set's, see
    /// [`super::run_episode_set`]).
    pub fn into_tally(self) -> FailureTally {
        self.tally.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::ComponentError;

    fn plugin_error(name: &str) -> RolloutError {
        RolloutError::Plugin {
            blame: Blame {
                kind: "agent".into(),
                name: name.into(),
            },
            source: ComponentError::Failed {
                component: format!("agent `{name}` (x 0.1.0, built-in)"),
                message: "boom".into(),
            },
        }
    }

    #[test]
    fn failures_are_counted_per_component_with_the_first_error() {
        let mut tally = FailureTally::default();
        assert_eq!(
            tally
                .record("s/1", &plugin_error("x/y"))
                .unwrap()
                .to_string(),
            "agent x/y"
        );
        tally.record("s/2", &plugin_error("x/y"));
        tally.record("s/3", &plugin_error("x/z"));
        assert_eq!(tally.record("s/4", &RolloutError::Cancelled), None);
        assert_eq!(tally.total(), 3);
        assert_eq!(
            tally.summary(),
            "agent x/y: 2 (first, task s/1: agent `x/y` (x 0.1.0, built-in): boom); \
             agent x/z: 1 (first, task s/3: agent `x/z` (x 0.1.0, built-in): boom)"
        );
        assert_eq!(
            serde_json::to_value(&tally).unwrap()["agent x/y"],
            serde_json::json!({
                "episodes": 2,
                "first_task": "s/1",
                "first_error": "agent `x/y` (x 0.1.0, built-in): boom"
            })
        );
    }

    #[test]
    fn the_limit_is_a_fraction_of_the_episodes() {
        assert!(!over_failure_limit(0, 10, 0.0));
        assert!(over_failure_limit(1, 10, 0.0));
        assert!(!over_failure_limit(1, 20, 0.05));
        assert!(over_failure_limit(2, 20, 0.05));
        assert!(!over_failure_limit(10, 10, 1.0));
    }
}
