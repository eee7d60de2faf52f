//! The test command's last check (`scripts/py/leftovers.py`): a process that carries the
//! command's mark and outlived whatever started it is found, named and killed; one
//! with another mark is not touched.

use crate::common::{self, process::wait_until};
use std::{process::Command, time::Duration};

/// `sleep 600` in a session of its own (as an orphaned server would be), marked with
/// `session`; its pid.
fn marked_sleeper(session: &str) -> i32 {
    // The shell starts the sleeper in the background and exits at once, so the sleeper
    // is reparented: exactly the shape of a leak.
    let out = Command::new("setsid")
        .args(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"])
        .env("DRMAS_TEST_SESSION", session)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

fn check(session: &str, kill: bool) -> (i32, String) {
    let mut c = Command::new("python3");
    c.arg(common::script("leftovers.py")).arg(session);
    if kill {
        c.arg("--kill");
    }
    let out = c.output().unwrap();
    (out.status.code().unwrap(), common::output_text(&out))
}

#[test]
fn a_marked_orphan_is_named_and_killed_and_others_are_left_alone() {
    let session = format!("leftovers-test-{}", std::process::id());
    let other = format!("{session}-other");
    let leak = marked_sleeper(&session);
    let bystander = marked_sleeper(&other);
    let _stop = Killed([leak, bystander]);

    let (code, text) = check(&session, false);
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        text,
        format!(
            "left running: pid {leak} (parent {}): sleep 600\n",
            parent(leak)
        )
    );
    assert!(alive(leak), "listed, not killed without --kill");

    let (code, text) = check(&session, true);
    assert_eq!(code, 1, "{text}");
    wait_until("the leftover is killed", Duration::from_millis(20), || {
        !alive(leak)
    });
    assert!(alive(bystander), "another session's process was touched");

    let (code, text) = check(&session, false);
    assert_eq!((code, text.as_str()), (0, ""));
}

/// Kills the sleepers when the test ends, passed or failed.
struct Killed([i32; 2]);

impl Drop for Killed {
    fn drop(&mut self) {
        for pid in self.0 {
            if alive(pid) {
                // SAFETY: a plain signal to a process this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The parent the kernel gave an orphan (init, or a subreaper such as a container's).
fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}
