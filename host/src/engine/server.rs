//! An engine server drmas starts and stops itself (single-box use): the command with its
//! `{port}` and `{model}` placeholders filled, run by `drmas-process` (its own process
//! group, killed with drmas, stopped with SIGTERM then SIGKILL).

pub use drmas_process::{ManagedServer, free_port};
use std::path::Path;

/// Starts the engine `command` (`{port}` and `{model}` filled in each word) with
/// `extra` arguments after it, its output appended to `log`.
pub fn start(
    command: &[String],
    extra: &[String],
    port: u16,
    model: &Path,
    log: &Path,
) -> std::io::Result<ManagedServer> {
    let mut filled = drmas_process::fill(
        command,
        &[
            ("port", &port.to_string()),
            ("model", &model.display().to_string()),
        ],
    );
    filled.extend(extra.iter().cloned());
    ManagedServer::start(&filled, port, log).map_err(|e| {
        // drmas-process says a bare name is looked up on PATH; here, where to change it.
        let program = filled.first().map_or("", String::as_str);
        if e.kind() != std::io::ErrorKind::NotFound || program.contains('/') {
            return e;
        }
        let build = if program == "llama-server" {
            " (scripts/build-llama-server.sh builds llama.cpp's and prints its path)"
        } else {
            ""
        };
        std::io::Error::new(
            e.kind(),
            format!("{e} as the first word of [models.engine] command{build}"),
        )
    })
}
