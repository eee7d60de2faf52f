//! What can go wrong in a model worker. Errors keep their source, so a caller can tell
//! an out-of-memory or shape error of the model from a failed update or a dead worker.

use crate::{engine::EngineError, model::ModelError, update::TrainError};
use std::{path::PathBuf, process::ExitStatus, sync::Arc};
use thiserror::Error;

/// An error of a backend's own work, before the worker names the model.
#[derive(Debug, Error)]
pub enum BackendError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error("this backend cannot do that (it is not a trainable model)")]
    Unsupported,
    /// A command named a slot the worker does not have (a handle of another worker's).
    #[error("no model in slot {slot}: {}", slots_text(*.slots))]
    UnknownSlot { slot: usize, slots: usize },
    /// Joining the model's process group with the other ranks failed.
    #[error("data parallelism: {0}")]
    Dist(#[from] drmas_dist::DistError),
    #[error("panicked: {0}")]
    Panicked(String),
    /// The model's inference engine failed (docs/engines.md). Boxed: the failure
    /// carries the end of the engine's log, and every backend result carries this type.
    #[error("engine: {0}")]
    Engine(#[source] Box<EngineFailure>),
    /// A token id the model cannot embed, refused before any tensor is made (libtorch's
    /// embedding would abort the worker).
    #[error(
        "{what} {index}: {part} token {position} is {id}, outside the model's vocabulary of {vocab}; nothing of it was computed"
    )]
    TokenOutOfVocab {
        what: &'static str,
        index: usize,
        part: &'static str,
        position: usize,
        id: i64,
        vocab: i64,
    },
    #[error("returned {got} generations for {expected} requests")]
    Count { expected: usize, got: usize },
    #[error("request {request}: {tokens} tokens but {logprobs} log-probs")]
    LogprobCount {
        request: usize,
        tokens: usize,
        logprobs: usize,
    },
    /// A sample must never carry a NaN or infinite log-prob into the trainer or a report.
    #[error("request {request}: the log-prob of new token {token} is {value}, not a finite number")]
    NonFiniteLogprob {
        request: usize,
        token: usize,
        value: f32,
    },
}

/// How a model's inference engine failed: a call (unreachable within the retries,
/// refused, a bad answer), its process (not started, not ready, ended), or one request.
#[derive(Debug, Error)]
pub enum EngineFailure {
    #[error("{0}")]
    Call(#[source] EngineError),
    #[error("cannot start the engine: {0}")]
    Start(#[source] std::io::Error),
    /// The folder of the engine's log could not be made.
    #[error("{}: {source}", dir.display())]
    LogDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The engine did not become ready in time (`ended`: it ended meanwhile).
    #[error(
        "{source}{}; the end of its log ({}):\n{tail}",
        ended.map_or(String::new(), |s| format!(" (it ended: {s})")),
        log.display()
    )]
    NotReady {
        #[source]
        source: EngineError,
        ended: Option<ExitStatus>,
        log: PathBuf,
        tail: String,
    },
    /// The engine drmas runs ended while it was needed.
    #[error("the engine at {url} ended ({status}); the end of its log ({}):\n{tail}", log.display())]
    Ended {
        url: String,
        status: ExitStatus,
        log: PathBuf,
        tail: String,
    },
    /// The engine aborted one request.
    #[error("the engine aborted the request: {0}")]
    Aborted(String),
}

/// Where a worker's models are, for the error of a slot it does not have.
fn slots_text(slots: usize) -> String {
    match slots {
        0 => "this worker has no model".to_string(),
        1 => "this worker has one, in slot 0".to_string(),
        n => format!("this worker's {n} models are in slots 0 to {}", n - 1),
    }
}

impl From<EngineFailure> for BackendError {
    fn from(e: EngineFailure) -> Self {
        BackendError::Engine(Box::new(e))
    }
}

impl From<EngineError> for BackendError {
    fn from(e: EngineError) -> Self {
        EngineFailure::Call(e).into()
    }
}

impl BackendError {
    /// The engine's failure underneath, if the engine failed.
    pub fn engine_failure(&self) -> Option<&EngineFailure> {
        match self {
            BackendError::Engine(e) => Some(e),
            _ => None,
        }
    }

    /// An allocation refused by the memory estimate, or libtorch reporting an exhausted
    /// device (as an error whose text says so).
    pub fn is_out_of_memory(&self) -> bool {
        if matches!(self, BackendError::Model(ModelError::Memory { .. })) {
            return true;
        }
        let text = self.to_string();
        text.contains("out of memory") || text.contains("OutOfMemory")
    }
}

#[derive(Debug, Error)]
pub enum WorkerError {
    #[error("model `{model}`: {what}: {source}")]
    Backend {
        model: String,
        what: &'static str,
        #[source]
        source: Box<BackendError>,
    },
    /// A generation batch failed; every request in it gets the same source.
    #[error("model `{model}`: generation: {source}")]
    Batch {
        model: String,
        #[source]
        source: Arc<BackendError>,
    },
    #[error("the worker of model `{model}` has stopped")]
    Gone { model: String },
    #[error("model `{model}`: cannot start its worker thread: {source}")]
    Spawn {
        model: String,
        #[source]
        source: std::io::Error,
    },
}

impl WorkerError {
    pub fn backend(model: &str, what: &'static str, source: BackendError) -> Self {
        WorkerError::Backend {
            model: model.to_string(),
            what,
            source: Box::new(source),
        }
    }

    /// The backend error underneath, if any.
    pub fn backend_error(&self) -> Option<&BackendError> {
        match self {
            WorkerError::Backend { source, .. } => Some(source.as_ref()),
            WorkerError::Batch { source, .. } => Some(source),
            _ => None,
        }
    }

    pub fn is_out_of_memory(&self) -> bool {
        self.backend_error()
            .is_some_and(BackendError::is_out_of_memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn an_engine_failure_keeps_its_kind_and_its_chain() {
        let e = BackendError::from(EngineError::Unreachable {
            engine: "sglang",
            url: "http://127.0.0.1:9".into(),
            what: "generate",
            attempts: 3,
            last: "timed out".into(),
        });
        assert_eq!(
            e.to_string(),
            "engine: sglang at http://127.0.0.1:9: generate failed after 3 attempts: timed out"
        );
        assert!(matches!(
            e.engine_failure(),
            Some(EngineFailure::Call(EngineError::Unreachable { .. }))
        ));
        let failure = e.source().expect("the engine's failure");
        let call = failure.source().expect("the engine call's error");
        assert!(call.downcast_ref::<EngineError>().is_some());
        assert_eq!(
            call.to_string(),
            "sglang at http://127.0.0.1:9: generate failed after 3 attempts: timed out"
        );
    }

    #[test]
    fn a_slot_the_worker_lacks_names_the_slots_it_has() {
        let text = |slot, slots| BackendError::UnknownSlot { slot, slots }.to_string();
        assert_eq!(
            text(1, 1),
            "no model in slot 1: this worker has one, in slot 0"
        );
        assert_eq!(
            text(5, 3),
            "no model in slot 5: this worker's 3 models are in slots 0 to 2"
        );
    }
}
