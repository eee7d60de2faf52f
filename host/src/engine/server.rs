//! An engine server drmas starts and stops itself (single-box use): the command with its
//! `{port}` and `{model}` placeholders filled, output to a log file, killed with drmas
//! (the kernel's parent-death signal), stopped with SIGTERM then SIGKILL.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A running engine process.
pub struct ManagedServer {
    child: Child,
    port: u16,
    log: PathBuf,
    command: Vec<String>,
}

/// A free TCP port on 127.0.0.1 (the kernel's pick; free when asked).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What to do when the engine's program is not found: a bare name is looked up on PATH.
fn not_found_hint(program: &str, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::NotFound || program.contains('/') {
        return String::new();
    }
    let build = if program == "llama-server" {
        " (scripts/build-llama-server.sh builds llama.cpp's and prints its path)"
    } else {
        ""
    };
    format!(
        "; `{program}` is looked up on PATH: put its folder on PATH or give its full path as the first word of [models.engine] command{build}"
    )
}

impl ManagedServer {
    /// Starts `command` (program and arguments; `{port}` and `{model}` in any of them are
    /// replaced) with its output appended to `log`.
    pub fn start(
        command: &[String],
        extra: &[String],
        port: u16,
        model: &Path,
        log: &Path,
    ) -> std::io::Result<ManagedServer> {
        let filled: Vec<String> = command
            .iter()
            .map(|a| {
                a.replace("{port}", &port.to_string())
                    .replace("{model}", &model.display().to_string())
            })
            .chain(extra.iter().cloned())
            .collect();
        let (program, args) = filled
            .split_first()
            .ok_or_else(|| std::io::Error::other("the engine command is empty"))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut c = Command::new(program);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: prctl is async-signal-safe; the kernel kills the engine when the thread
        // that started it dies, so a killed trainer leaves no engine behind.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = c.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{program}: {e}{}", not_found_hint(program, &e)),
            )
        })?;
        Ok(ManagedServer {
            child,
            port,
            log: log.to_path_buf(),
            command: filled,
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The command as it was run.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `None` while it runs; its exit status once it has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `n` lines of its log (for an error that says why it died).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for it.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        // SAFETY: a signal to our own child, by its pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let started = Instant::now();
        while started.elapsed() < grace {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
