//! What can go wrong talking to an engine.

/// An engine call that failed; each names the engine and its address.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine could not be reached or did not answer in time, after the retries.
    #[error("{engine} at {url}: {what} failed after {attempts} attempts: {last}")]
    Unreachable {
        engine: &'static str,
        url: String,
        what: &'static str,
        attempts: u32,
        last: String,
    },
    /// The engine answered with an error status (not retried: the request is at fault).
    #[error("{engine} at {url}: {what}: HTTP {status}: {body}")]
    Status {
        engine: &'static str,
        url: String,
        what: &'static str,
        status: u16,
        body: String,
    },
    /// The engine's answer does not have the shape its protocol says.
    #[error("{engine}: {what}: unexpected answer: {why}")]
    Answer {
        engine: &'static str,
        what: &'static str,
        why: String,
    },
    /// The engine's generation breaks a rule every answer must keep (ids within the
    /// vocabulary, one finite log-prob ≤ 0 per id, at most the tokens asked for), or
    /// does not have its protocol's shape.
    #[error("{engine} at {url}: {why}")]
    Invalid {
        engine: &'static str,
        url: String,
        why: String,
    },
    /// The engine has no call for this.
    #[error("{engine} has no way of {what}")]
    Unsupported {
        engine: &'static str,
        what: &'static str,
    },
    /// The engine said a call failed (`success: false`).
    #[error("{engine} at {url}: {what} failed: {message}")]
    Refused {
        engine: &'static str,
        url: String,
        what: &'static str,
        message: String,
    },
    /// The engine did not become healthy in time.
    #[error("{engine} at {url} did not answer {path} with 200 within {seconds:.0} s: {last}")]
    NotReady {
        engine: &'static str,
        url: String,
        path: &'static str,
        seconds: f64,
        last: String,
    },
}
