//! Whole-or-absent outputs, in one place. Every file drmas writes goes to a temporary
//! name beside its target, is synced, then renamed into place, so a kill at any moment
//! leaves the old file or the new one, never a part. A folder (an imported model, a
//! checkpoint) is staged the same way and swapped in with one atomic exchange. What a
//! killed writer left behind is recognised by its name and cleaned by the next one, and
//! an output folder has one writer at a time ([`OutputLock`]).
//!
//! Crash safety is tested by killing the process at named points of these writes: the
//! environment variable `DRMAS_FAULT_POINT=<point>[#N]` makes drmas kill itself
//! (SIGKILL) when it reaches that point (the N-th time). The points are the `FAULT_*`
//! constants. `<point>[#N]:stop` stops it there instead (SIGSTOP), so a test can act
//! while it holds what it holds at that point, without a race.
//!
//! The parts: `atomic` writes files and folders whole, `leftovers` cleans what a killed
//! writer left, `target` checks an output before any work, `inputs` keeps an output off
//! what the same command reads, and `lock` gives each output one writer; `console`
//! writes to standard output and error without panicking when they fail.

mod atomic;
pub mod console;
mod inputs;
mod leftovers;
mod lock;
mod target;

pub use atomic::{StagedDir, append_line, truncate_lines, write_atomic, write_atomic_with};
pub use inputs::{Input, check_not_an_input};
pub use leftovers::clean_leftovers;
pub use lock::{Footprint, LOCK_NOTE, OutputLock, lock_file_of};
pub use target::{OutputError, check_dir_target, check_file_target, probe_dir_target};

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::OnceLock,
};

/// Half of a file's bytes are written to its temporary name.
pub const FAULT_FILE_PARTIAL: &str = "file-partial";
/// A file's temporary is complete and synced, not yet renamed.
pub const FAULT_FILE_WRITTEN: &str = "file-written";
/// A file is renamed into place; its folder is not synced yet.
pub const FAULT_FILE_RENAMED: &str = "file-renamed";
/// A staged folder is complete, not yet swapped in.
pub const FAULT_DIR_STAGED: &str = "dir-staged";
/// A staged folder is swapped in; the old one waits under the temporary name.
pub const FAULT_DIR_SWAPPED: &str = "dir-swapped";
/// A command holds the locks of all its outputs and has not started its work (`eval`).
pub const FAULT_OUTPUTS_LOCKED: &str = "outputs-locked";
/// Every fault point of a write, for tests that go through all of them.
pub const FAULT_POINTS: [&str; 5] = [
    FAULT_FILE_PARTIAL,
    FAULT_FILE_WRITTEN,
    FAULT_FILE_RENAMED,
    FAULT_DIR_STAGED,
    FAULT_DIR_SWAPPED,
];

/// Kills this process (SIGKILL: no destructors, no flushing) when `DRMAS_FAULT_POINT`
/// names `point` (`point` kills at its first pass, `point#N` at its N-th). Used to test
/// that a kill at that moment loses nothing. With `:stop` after it the process stops
/// (SIGSTOP) instead, until it is continued or killed.
pub fn fault_point(point: &str) {
    struct Wanted {
        name: String,
        nth: usize,
        stop: bool,
    }
    static WANTED: OnceLock<Option<Wanted>> = OnceLock::new();
    static PASSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let wanted = WANTED.get_or_init(|| {
        let v = std::env::var("DRMAS_FAULT_POINT").ok()?;
        let (v, stop) = match v.strip_suffix(":stop") {
            Some(rest) => (rest.to_string(), true),
            None => (v, false),
        };
        Some(match v.split_once('#') {
            Some((name, n)) => Wanted {
                name: name.to_string(),
                nth: n.parse().unwrap_or(1),
                stop,
            },
            None => Wanted {
                name: v,
                nth: 1,
                stop,
            },
        })
    });
    if let Some(w) = wanted
        && w.name == point
        && PASSES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == w.nth
    {
        let (what, signal) = match w.stop {
            true => ("stopped", libc::SIGSTOP),
            false => ("injected", libc::SIGKILL),
        };
        console::err_line(format_args!("fault {what} at {point}#{}", w.nth));
        // SAFETY: sends a signal to this process.
        unsafe {
            libc::kill(libc::getpid(), signal);
        }
    }
}

/// The folder a path lives in (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A temporary name beside `path` that a later run recognises as a leftover
/// (`.NAME.tmp-PID`).
pub fn temp_beside(path: &Path) -> PathBuf {
    parent_of(path).join(format!(".{}.tmp-{}", file_name(path), std::process::id()))
}

/// Syncs a folder's entry list, so a rename inside it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Syncs every file and folder under `dir` (and `dir` itself).
pub fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            fs::File::open(&path)?.sync_all()?;
        }
    }
    sync_dir(dir)
}
