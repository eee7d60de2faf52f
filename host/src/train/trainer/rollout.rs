//! The rollout phase of a step: the step's episodes, the failure limit, and in a
//! data-parallel job the exchange of every rank's episodes.

use super::Trainer;
use crate::rollout::{EpisodeOutcome, EpisodeSpec, FailureWatch, RolloutError, run_episodes_until};
use crate::train::data_order::DataCursor;
use crate::train::{RunError, signal};

/// What the rollout phase of a step hands on.
pub(super) struct Rollout {
    pub(super) outcomes: Vec<EpisodeOutcome>,
    /// Whether each outcome's episode ran on this rank (all of them in one process).
    pub(super) local: Vec<bool>,
    /// Episodes that failed (their samples are dropped).
    pub(super) failed: usize,
    pub(super) tally: crate::rollout::FailureTally,
    pub(super) epoch: u64,
}

impl Trainer {
    /// The episodes of step `step`: the next tasks, G trajectories each.
    pub(super) fn specs(&mut self) -> (Vec<EpisodeSpec>, u64) {
        let plan = self.policy.steps;
        let picks = self
            .state
            .cursor
            .take(self.parts.seed, self.parts.tasks.len(), plan.prompts);
        let epoch = picks.first().map(|p| p.1).unwrap_or(0);
        let step = self.state.step;
        let mut specs = Vec::new();
        for (pos, (index, _)) in picks.into_iter().enumerate() {
            let task = &self.parts.tasks[index];
            // The uid groups the G trajectories and seeds their sampling: unique per
            // step and position (a small set can hold a task twice in one step).
            let uid = format!("{step}:{pos}:{}/{}", task.source, task.id);
            for traj in 0..plan.group_size {
                specs.push(EpisodeSpec {
                    task: task.clone(),
                    uid: uid.clone(),
                    traj,
                    sampling_override: None,
                });
            }
        }
        (specs, epoch)
    }

    /// The rollout phase: the step's G episodes per task. A failed episode (a plugin
    /// panicked, returned an error or a non-finite number; a model failed) is counted
    /// and logged and its samples are dropped: the normalizer sees the smaller group.
    /// Past the failure limit the run stops, as soon as the step's count can no longer
    /// stay within it. `None` when a stop request ended it; the data cursor is then
    /// back where it was, so a resume redoes the step.
    pub(super) fn rollout(&mut self) -> Result<Option<Rollout>, RunError> {
        let step = self.state.step;
        let cursor_before = self.state.cursor;
        let (specs, epoch) = self.specs();
        let total = specs.len();
        let group_size = self.policy.steps.group_size.max(1) as usize;
        // This rank's episodes: the G of each of its tasks (every one in one process).
        let mine: Vec<usize> = (0..total)
            .filter(|i| {
                self.dist
                    .as_ref()
                    .is_none_or(|d| d.owns_task(i / group_size))
            })
            .collect();
        let specs: Vec<EpisodeSpec> = mine.iter().map(|&i| specs[i].clone()).collect();
        let limit = self.parts.team.options.max_failed_episodes;
        let distributed = self.dist.is_some();
        let watch = FailureWatch::new(&specs, limit);
        let bar = self.bar(specs.len() as u64, "episodes");
        let results = self.runtime.block_on(run_episodes_until(
            self.parts.team.clone(),
            specs,
            |i, r| {
                bar.inc(1);
                if let Some(line) = watch.record(i, r) {
                    let line = format!("step {}: {line}", step + 1);
                    if bar.is_hidden() {
                        tracing::warn!("{line}");
                    } else {
                        bar.println(line);
                    }
                }
            },
            // A rank's own failures count against the step's every episode: past the
            // limit alone, the step is (the ranks judge the rest together).
            || signal::requested() || watch.over_limit_of(total),
        ));
        bar.finish_and_clear();
        if distributed {
            return self.merge_rollout(
                results,
                &mine,
                watch.into_tally(),
                total,
                epoch,
                cursor_before,
            );
        }
        let tally = match watch.finish() {
            Ok(tally) => tally,
            Err(source) => {
                self.state.cursor = cursor_before;
                return Err(RunError::TooManyFailures {
                    step: step + 1,
                    source,
                });
            }
        };
        if signal::requested() {
            self.state.cursor = cursor_before;
            return Ok(None);
        }
        let mut outcomes: Vec<EpisodeOutcome> = Vec::new();
        let mut failures: Vec<RolloutError> = Vec::new();
        for r in results {
            match r {
                Ok(o) => outcomes.push(o),
                Err(e) => failures.push(e),
            }
        }
        if outcomes.is_empty() {
            return Err(RunError::AllEpisodesFailed {
                step: step + 1,
                first: failures
                    .into_iter()
                    .next()
                    .unwrap_or(RolloutError::Cancelled),
            });
        }
        Ok(Some(Rollout {
            local: vec![true; outcomes.len()],
            outcomes,
            failed: failures.len(),
            tally,
            epoch,
        }))
    }

    /// A data-parallel rollout's end: the ranks exchange their episodes, agree on a stop
    /// and judge the failure limit on the step's count, as one process would.
    pub(super) fn merge_rollout(
        &mut self,
        results: Vec<Result<EpisodeOutcome, RolloutError>>,
        mine: &[usize],
        tally: crate::rollout::FailureTally,
        total: usize,
        epoch: u64,
        cursor_before: DataCursor,
    ) -> Result<Option<Rollout>, RunError> {
        let step = self.state.step;
        let mut outcomes = Vec::new();
        let mut failed = 0;
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(o) => outcomes.push((mine[k], o)),
                Err(_) => failed += 1,
            }
        }
        let ours = crate::train::dist::RankRollout {
            stop: signal::requested(),
            outcomes,
            failed,
            tally,
        };
        let d = self.dist.as_mut().expect("a data-parallel rollout");
        let rank = d.rank;
        let all = d.gather(&ours)?;
        if all.iter().any(|r| r.stop) {
            self.state.cursor = cursor_before;
            return Ok(None);
        }
        let mut merged: Vec<(usize, bool, EpisodeOutcome)> = Vec::new();
        let mut failed = 0;
        let mut tally = crate::rollout::FailureTally::default();
        for (r, part) in all.into_iter().enumerate() {
            failed += part.failed;
            tally.merge(part.tally);
            merged.extend(part.outcomes.into_iter().map(|(i, o)| (i, r == rank, o)));
        }
        merged.sort_by_key(|(i, _, _)| *i);
        let limit = self.parts.team.options.max_failed_episodes;
        if crate::rollout::over_failure_limit(tally.total(), total, limit) || merged.is_empty() {
            self.state.cursor = cursor_before;
            return Err(RunError::TooManyFailures {
                step: step + 1,
                source: crate::rollout::FailureLimit {
                    tally,
                    total,
                    limit,
                },
            });
        }
        Ok(Some(Rollout {
            local: merged.iter().map(|(_, l, _)| *l).collect(),
            outcomes: merged.into_iter().map(|(_, _, o)| o).collect(),
            failed,
            tally,
            epoch,
        }))
    }
}
