use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A c10d call failed; `message` is the C++ exception's text (a peer that died or
    /// did not answer within the timeout shows here).
    #[error("{op}: {message}")]
    C10d { op: String, message: String },
    /// A collective's tensors do not fit each other (sizes, dtypes, devices): checked
    /// before any rank sends anything.
    #[error("{op}: {message}")]
    Tensors { op: String, message: String },
    /// The launch environment is incomplete or inconsistent.
    #[error("launch environment: {0}")]
    Launch(String),
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    /// The store this process was to host could not listen: its port is taken.
    #[error(
        "cannot host the job's store: port {port} is in use by another program (MASTER_PORT={port}); free it or start the job with another MASTER_PORT"
    )]
    PortInUse { port: u16 },
    /// The store did not answer within the timeout: nothing drmas-like listens there.
    #[error(
        "the job's store at {addr} gave no answer within {} s ([pool] collective_timeout_s): is its host (rank 0, or the launcher's agent) running, and is the port not another program's?",
        seconds_text(*.waited)
    )]
    StoreTimeout {
        addr: String,
        waited: std::time::Duration,
    },
}

/// Seconds as people write them: `15`, `2.5`.
fn seconds_text(d: std::time::Duration) -> String {
    format!("{}", d.as_secs_f64())
}
