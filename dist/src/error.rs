use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A c10d call failed; `message` is the C++ exception's text (a peer that died or
    /// did not answer within the timeout shows here).
    #[error("{op}: {message}")]
    C10d { op: String, message: String },
    /// The launch environment is incomplete or inconsistent.
    #[error("launch environment: {0}")]
    Launch(String),
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
}
