//! An environment server `remote/openenv` starts itself (`command`): on a free port,
//! ready when `GET /health` answers, stopped when the environment is dropped and killed
//! with drmas. The server is owned by a thread of its own that lives as long as the
//! environment: the kernel's parent-death signal follows the thread that started the
//! process, and the host's blocking threads, where the first episode asks for the
//! server, come and go.

use drmas_process::{ManagedServer, fill, free_port};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct ServerOwner {
    url: String,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerOwner {
    /// Starts `command` (`{port}` filled) and waits until it is healthy, it exits, or
    /// `ready_within` passes; the error says which, with the end of its log.
    pub fn start(command: &[String], log: &Path, ready_within: Duration) -> Result<Self, String> {
        let command = command.to_vec();
        let log = log.to_path_buf();
        if let Some(dir) = log.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!("cannot create {} for the server's log: {e}", dir.display())
            })?;
        }
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("openenv-server".into())
            .spawn(move || {
                let started = free_port()
                    .map_err(|e| format!("no free port for the environment server: {e}"))
                    .and_then(|port| {
                        let filled = fill(&command, &[("port", &port.to_string())]);
                        ManagedServer::start(&filled, port, &log).map_err(|e| {
                            format!(
                                "cannot start the environment server `{}`: {e}",
                                filled.join(" ")
                            )
                        })
                    });
                let mut server = match started {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                match wait_healthy(&mut server, ready_within) {
                    Ok(()) => {
                        let _ = ready_tx.send(Ok(server.url()));
                        // Until the environment is dropped (or drmas exits, taking this
                        // thread and, through the parent-death signal, the server).
                        let _ = stop_rx.recv();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                server.stop(Duration::from_secs(5));
            })
            .map_err(|e| format!("cannot start a thread for the environment server: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(url)) => Ok(Self {
                url,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err("the environment server's thread ended before it was ready".into())
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for ServerOwner {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `GET /health` until it answers 200, the server exits, or `limit` passes.
fn wait_healthy(server: &mut ManagedServer, limit: Duration) -> Result<(), String> {
    let url = format!("{}/health", server.url());
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build(),
    );
    let started = Instant::now();
    let command = server.command().join(" ");
    loop {
        if let Some(status) = server.exited() {
            return Err(format!(
                "the environment server `{command}` exited ({status}) before it was ready; the end of its log ({}):\n{}",
                server.log().display(),
                server.log_tail(20)
            ));
        }
        if agent.get(&url).call().is_ok() {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(format!(
                "the environment server `{command}` did not answer {url} within {} s (startup_timeout_s); the end of its log ({}):\n{}",
                limit.as_secs_f64(),
                server.log().display(),
                server.log_tail(20)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
