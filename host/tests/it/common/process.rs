//! Processes a test starts, stopped whole: each runs in a process group of its own, and
//! dropping its guard kills the group (the process and whatever it started: an MLflow
//! server's workers, a trainer's engine) and reaps the leader, also when the test
//! panics first. And the one way tests wait: on a condition, polled, with a hang guard
//! that is never the thing asserted.

use std::{
    os::unix::process::CommandExt,
    process::{Child, Command, ExitStatus, Output},
    time::{Duration, Instant},
};

/// How long a test waits for something that should take seconds before it calls it a
/// hang. Generous on purpose: a loaded CI machine is slow, and a guard that fires on a
/// slow machine is a flaky test.
pub const HANG: Duration = Duration::from_secs(300);

/// Polls `done` every `every` until it is true; panics naming `what` after `HANG`.
pub fn wait_until(what: &str, every: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < HANG,
            "{what}: not within {} s",
            HANG.as_secs()
        );
        std::thread::sleep(every);
    }
}

/// A child in its own process group; the group is killed when this is dropped.
pub struct Group {
    child: Option<Child>,
    pgid: i32,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> Group {
        let child = command
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {:?}: {e}", command.get_program()));
        let pgid = child.id() as i32;
        Group {
            child: Some(child),
            pgid,
        }
    }

    pub fn id(&self) -> u32 {
        self.child().id()
    }

    pub fn child(&self) -> &Child {
        self.child.as_ref().expect("the child is still held")
    }

    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the child is still held")
    }

    /// `None` while the leader runs.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child_mut().try_wait().unwrap()
    }

    /// Sends `signal` to the leader alone.
    pub fn signal(&self, signal: i32) {
        // SAFETY: a plain signal to a process this test started (not yet reaped: the
        // pid cannot have been reused).
        unsafe {
            libc::kill(self.pgid, signal);
        }
    }

    /// Sends `signal` to the whole group.
    pub fn signal_group(&self, signal: i32) {
        // SAFETY: a plain signal to the group this test's child leads.
        unsafe {
            libc::killpg(self.pgid, signal);
        }
    }

    /// Kills the leader alone (SIGKILL) and reaps it; the rest of the group is left
    /// for the test to look at (and for the drop to kill).
    pub fn kill_leader(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.child_mut().wait().unwrap()
    }

    /// Waits for the leader's exit, polling, with the hang guard.
    pub fn wait(&mut self) -> ExitStatus {
        let mut status = None;
        wait_until("the process ended", Duration::from_millis(20), || {
            status = self.try_wait();
            status.is_some()
        });
        status.unwrap()
    }

    /// Waits for the leader's exit and collects its piped output, with the hang guard
    /// (past it the group is killed and the test fails); then kills what is left of
    /// the group.
    pub fn wait_with_output(mut self) -> Output {
        let child = self.child.take().expect("the child is still held");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        match rx.recv_timeout(HANG) {
            Ok(output) => output.unwrap(),
            // Dropping `self` kills the group, which ends the pipes' writers.
            Err(_) => panic!("pid {pid} still running after {} s", HANG.as_secs()),
        }
    }

    /// Whether any process of the group is alive (zombies count as ended).
    pub fn group_alive(&self) -> bool {
        group_members(self.pgid).next().is_some()
    }
}

/// The live (not zombie) processes, this one aside, whose environment has a variable
/// whose text contains `needle`: what a server and every worker it started carry (a
/// folder of the test's), wherever they were reparented and whatever group they made.
pub fn processes_with_env(needle: &str) -> Vec<i32> {
    let own = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            });
            live && std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|var| String::from_utf8_lossy(var).contains(needle))
            })
        })
        .collect()
}

/// The live (not zombie) processes whose group is `pgid`.
fn group_members(pgid: i32) -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(move |pid| {
            // Fields after the command's closing parenthesis: state, ppid, pgrp, …
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: SIGKILL to the group this test started.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.wait();
        }
    }
}
