//! A server drmas starts and stops itself (an inference engine, an environment server):
//! the command as the caller filled it, output to a log file, killed with drmas (the
//! kernel's parent-death signal), stopped with SIGTERM then SIGKILL.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A running server process.
pub struct ManagedServer {
    child: Child,
    port: u16,
    log: PathBuf,
    command: Vec<String>,
    /// [`Self::exited`] has reaped the server: its pid no longer holds the group's id.
    reaped: bool,
}

/// A free TCP port on 127.0.0.1 (the kernel's pick; free when asked).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// What to say when the program is not found: a bare name is looked up on PATH.
fn not_found_hint(program: &str, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::NotFound || program.contains('/') {
        return String::new();
    }
    format!("; `{program}` is looked up on PATH: put its folder on PATH or give its full path")
}

/// `command` with each `{name}` of `values` replaced, in every word.
pub fn fill(command: &[String], values: &[(&str, &str)]) -> Vec<String> {
    command
        .iter()
        .map(|word| {
            values.iter().fold(word.clone(), |w, (name, value)| {
                w.replace(&format!("{{{name}}}"), value)
            })
        })
        .collect()
}

impl ManagedServer {
    /// Starts `command` (program and arguments, placeholders already filled) with its
    /// output appended to `log`; `port` is where it listens.
    pub fn start(command: &[String], port: u16, log: &Path) -> std::io::Result<ManagedServer> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("the command is empty"))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut c = Command::new(program);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // A process group of its own, stopped whole: servers that start worker
        // processes (SGLang's and vLLM's tokenizer and scheduler, uvicorn's workers)
        // would keep them running after a signal to the server alone. And the kernel
        // kills the server when the thread that started it dies (prctl is
        // async-signal-safe), so a killed trainer leaves no server behind.
        c.process_group(0);
        // SAFETY: see above.
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
            command: command.to_vec(),
            reaped: false,
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
        let status = self.child.try_wait().ok().flatten();
        self.reaped |= status.is_some();
        status
    }

    /// The last `n` lines of its log (for an error that says why it died).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM to the server's process group, then SIGKILL to the group after `grace`
    /// (or at once when the server itself has already ended: what it started is
    /// stopped all the same); then reaps the server.
    ///
    /// The group's id is the server's pid, which stays ours while the server is not
    /// reaped, so the server is watched without reaping it ([`Self::ended_unreaped`])
    /// until the group has had its SIGKILL. Once reaped (by [`Self::exited`]), the id
    /// is held only by the group's other members: it is signalled only while one lives.
    pub fn stop(&mut self, grace: Duration) {
        let group = self.child.id() as libc::pid_t;
        let signal = |sig| {
            // SAFETY: a signal to the process group our own child leads, while its id
            // cannot have been reused (see above).
            unsafe {
                libc::killpg(group, sig);
            }
        };
        if self.reaped {
            // The group's id is safe to signal while a member lives.
            if group_has_members(group) {
                signal(libc::SIGKILL);
            }
            return;
        }
        if !self.ended_unreaped() {
            signal(libc::SIGTERM);
            let started = Instant::now();
            while started.elapsed() < grace && !self.ended_unreaped() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Whether the server has ended, leaving it unreaped (a zombie holds its pid).
    fn ended_unreaped(&self) -> bool {
        // SAFETY: waitid on our own child into a zeroed siginfo; WNOWAIT leaves it
        // waitable, WNOHANG returns at once.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r != 0 || info.si_pid() != 0
        }
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Whether any live process is in process group `group`.
fn group_has_members(group: libc::pid_t) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            && std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                // Fields after the command's closing parenthesis: state, ppid, pgrp, …
                stat.rsplit_once(')').is_some_and(|(_, rest)| {
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    f.len() > 2 && f[0] != "Z" && f[2] == group.to_string()
                })
            })
    })
}
