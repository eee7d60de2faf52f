//! What the environment asks of a retriever: the top-k passages of a batch of queries.

use crate::passage::Passage;

/// Why a retrieval failed. The environment turns each into an observation, never an
/// episode error. Cloned when one failed request answers several callers (the remote
/// client merges concurrent calls into one request).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RetrieveError {
    #[error("index {path}: {message}")]
    Index { path: String, message: String },
    #[error("retriever {url}: {message}")]
    Remote { url: String, message: String },
    /// No answer within the per-attempt timeout `millis`: `timed_out` of the `attempts`
    /// timed out, `seconds` in all (the pauses between attempts included).
    #[error(
        "retriever {url}: no answer within {millis} ms per attempt; {timed_out} of {attempts} attempts timed out, {seconds:.1} s in all"
    )]
    Timeout {
        url: String,
        millis: u64,
        timed_out: u32,
        attempts: u32,
        seconds: f64,
    },
    #[error("retriever {url}: malformed response: {message}")]
    Malformed { url: String, message: String },
}

/// A local index or a remote server. Called concurrently from many episodes.
pub trait Retriever: Send + Sync {
    /// The top `k` passages of each query, in the order of `queries`.
    fn search_batch(
        &self,
        queries: &[String],
        k: usize,
    ) -> Result<Vec<Vec<Passage>>, RetrieveError>;
}
