//! What can stop a training run. Sources are kept: a worker's out-of-memory, a plugin's
//! failure and a full disk are different variants underneath.

use crate::{
    data::DataError,
    eval::EvalError,
    launch::LaunchError,
    plugin::ComponentError,
    pool::WorkerError,
    rollout::{EpisodeSetError, RolloutError},
};
use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RunError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    #[error(transparent)]
    Component(#[from] ComponentError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Eval(#[from] EvalError),
    #[error("{0}: the experiment has no [data] train set")]
    NoTrainData(PathBuf),
    /// A collective between the ranks of a data-parallel job failed: c10d's error, whose
    /// text names the peer that did not answer.
    #[error("data parallelism: {0}")]
    Dist(#[from] drmas_dist::DistError),
    /// The ranks of a data-parallel job were started with different experiments (or
    /// drmas versions): the first difference, `key: rank 0 has A, rank R has B`.
    #[error(
        "data parallelism: the ranks do not run the same experiment: {0}; start every rank with the same experiment file, --set overrides, options and drmas"
    )]
    RanksDiffer(String),
    /// Components handed to [`crate::train::Trainer::with_components`] lack a model the
    /// experiment names.
    #[error("{path}: the team handed in has no model `{id}`, which [[models]] names")]
    MissingModel { path: PathBuf, id: String },
    #[error("{path}: the training set is empty")]
    EmptyTrainData { path: PathBuf },
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// A line of the run's `metrics.jsonl` that is not a step record.
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    /// The step's episodes stopped the run: past the failure limit, every one failed,
    /// or the ranks could not exchange them. The same error in one process and on every
    /// rank of a data-parallel job.
    #[error("step {step}: training stopped: {source}")]
    Episodes {
        step: u32,
        #[source]
        source: EpisodeSetError,
    },
    #[error(
        "step {step}: model `{model}` skipped {count} updates in a row (non-finite loss or gradient); stopped. The last good state is in {checkpoint}"
    )]
    TooManySkips {
        model: String,
        count: u32,
        step: u32,
        checkpoint: PathBuf,
    },
    #[error("{path}: not a usable checkpoint: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Resume { path: PathBuf, message: String },
    #[error(
        "{checkpoint}: the experiment differs from the one this run was trained with: {}; resume with --accept-changes to go on with it (the changes are recorded in {record}), or undo them",
        changes.join("; ")
    )]
    Changed {
        checkpoint: PathBuf,
        /// `key: old → new`, one per change.
        changes: Vec<String>,
        record: PathBuf,
    },
    /// A run stopped by `error`, with what was kept of it.
    #[error("{error}; {kept}")]
    Stopped {
        #[source]
        error: Box<RunError>,
        kept: String,
    },
}

impl RunError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RunError::Io {
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_dist::DistError;
    use std::error::Error as _;

    #[test]
    fn a_failed_collective_stays_a_c10d_error_under_the_run_error() {
        let e = RunError::from(DistError::C10d {
            op: "allgather".into(),
            message: "rank 1 did not answer".into(),
        });
        assert_eq!(
            e.to_string(),
            "data parallelism: allgather: rank 1 did not answer"
        );
        assert!(matches!(&e, RunError::Dist(DistError::C10d { .. })));
        let c10d = e.source().expect("c10d's error");
        assert!(c10d.downcast_ref::<DistError>().is_some());
    }
}
