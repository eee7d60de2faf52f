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
//! constants.

use std::{
    ffi::CString,
    fs,
    io::{self, Write},
    os::{fd::AsRawFd, unix::ffi::OsStrExt},
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
/// Every fault point, for tests that go through all of them.
pub const FAULT_POINTS: [&str; 5] = [
    FAULT_FILE_PARTIAL,
    FAULT_FILE_WRITTEN,
    FAULT_FILE_RENAMED,
    FAULT_DIR_STAGED,
    FAULT_DIR_SWAPPED,
];

/// Kills this process (SIGKILL: no destructors, no flushing) when `DRMAS_FAULT_POINT`
/// names `point` (`point` kills at its first pass, `point#N` at its N-th). Used to test
/// that a kill at that moment loses nothing.
pub fn fault_point(point: &str) {
    static WANTED: OnceLock<Option<(String, usize)>> = OnceLock::new();
    static PASSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let wanted = WANTED.get_or_init(|| {
        let v = std::env::var("DRMAS_FAULT_POINT").ok()?;
        Some(match v.split_once('#') {
            Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1)),
            None => (v, 1),
        })
    });
    if let Some((name, nth)) = wanted
        && name == point
        && PASSES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == *nth
    {
        eprintln!("fault injected at {point}#{nth}");
        // SAFETY: sends a signal to this process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
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

/// Where a replaced folder waits for removal when the filesystem cannot swap two
/// folders atomically (`.NAME.old-PID`).
fn old_beside(path: &Path) -> PathBuf {
    parent_of(path).join(format!(".{}.old-{}", file_name(path), std::process::id()))
}

/// Whether a process with this pid is alive (and not this one).
fn other_process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes what killed writers left beside `path` (`.NAME.tmp-PID`, `.NAME.old-PID` of
/// processes that are gone); an old folder whose replacement never arrived is put back
/// first. Returns how many leftovers were handled.
pub fn clean_leftovers(path: &Path) -> io::Result<usize> {
    let dir = parent_of(path);
    let name = file_name(path);
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(0);
    };
    let (tmp_prefix, old_prefix) = (format!(".{name}.tmp-"), format!(".{name}.old-"));
    let mut handled = 0;
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        let (pid, old) = if let Some(pid) = entry_name.strip_prefix(&tmp_prefix) {
            (pid, false)
        } else if let Some(pid) = entry_name.strip_prefix(&old_prefix) {
            (pid, true)
        } else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if other_process_alive(pid) {
            continue;
        }
        let leftover = entry.path();
        if old && fs::symlink_metadata(path).is_err() {
            tracing::warn!(
                "restoring {} from {} (a replacement was killed halfway)",
                path.display(),
                leftover.display()
            );
            fs::rename(&leftover, path)?;
        } else {
            tracing::info!("removing {} (left by a killed write)", leftover.display());
            remove_any(&leftover)?;
        }
        handled += 1;
    }
    if handled > 0 {
        sync_dir(dir)?;
    }
    Ok(handled)
}

fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
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

/// Writes `bytes` to `path` whole or not at all; creates the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_of(path);
    fs::create_dir_all(dir)?;
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a folder, not a file",
        ));
    }
    clean_leftovers(path)?;
    let tmp = temp_beside(path);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        let half = bytes.len() / 2;
        f.write_all(&bytes[..half])?;
        fault_point(FAULT_FILE_PARTIAL);
        f.write_all(&bytes[half..])?;
        f.sync_all()?;
        fault_point(FAULT_FILE_WRITTEN);
        fs::rename(&tmp, path)?;
        fault_point(FAULT_FILE_RENAMED);
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// [`write_atomic`] for a writer that wants a path (libtorch's safetensors writer):
/// `write` fills a temporary file beside `path`, which is then synced and renamed.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let dir = parent_of(path);
    fs::create_dir_all(dir)?;
    clean_leftovers(path)?;
    let tmp = temp_beside(path);
    let result = (|| {
        write(&tmp)?;
        fault_point(FAULT_FILE_PARTIAL);
        fs::File::open(&tmp)?.sync_all()?;
        fault_point(FAULT_FILE_WRITTEN);
        fs::rename(&tmp, path)?;
        fault_point(FAULT_FILE_RENAMED);
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A folder being built under a temporary name beside its target. [`Self::commit`]
/// syncs it and swaps it in; dropping it uncommitted removes it.
pub struct StagedDir {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl StagedDir {
    /// Cleans what killed writers left beside `target` and creates the staging folder
    /// (and `target`'s parent).
    pub fn new(target: &Path) -> io::Result<Self> {
        fs::create_dir_all(parent_of(target))?;
        if target.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "is a file, not a folder",
            ));
        }
        clean_leftovers(target)?;
        let tmp = temp_beside(target);
        remove_any(&tmp)?;
        fs::create_dir(&tmp)?;
        Ok(Self {
            tmp,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// Where to write the folder's contents.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Syncs the staged folder and puts it in place of the target: one atomic exchange
    /// when the target exists, so a kill leaves the old folder or the new one; then the
    /// old one is removed.
    pub fn commit(mut self) -> io::Result<()> {
        sync_tree(&self.tmp)?;
        fault_point(FAULT_DIR_STAGED);
        let parent = parent_of(&self.target).to_path_buf();
        if fs::symlink_metadata(&self.target).is_ok() {
            match exchange(&self.tmp, &self.target) {
                Ok(()) => {
                    // `tmp` now names the old folder.
                    self.committed = true;
                    sync_dir(&parent)?;
                    fault_point(FAULT_DIR_SWAPPED);
                    remove_any(&self.tmp)?;
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                    // No atomic exchange on this filesystem: move the old folder aside
                    // under a name `clean_leftovers` restores if the second rename never
                    // happens.
                    let old = old_beside(&self.target);
                    fs::rename(&self.target, &old)?;
                    fs::rename(&self.tmp, &self.target)?;
                    self.committed = true;
                    sync_dir(&parent)?;
                    fault_point(FAULT_DIR_SWAPPED);
                    remove_any(&old)?;
                }
                Err(e) => return Err(e),
            }
        } else {
            fs::rename(&self.tmp, &self.target)?;
            self.committed = true;
        }
        sync_dir(&parent)
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = remove_any(&self.tmp);
        }
    }
}

/// Swaps two paths atomically (`renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them as given.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Appends one line to a log, rewriting the log whole (see [`write_atomic`]), so a
/// reader or a kill never sees a cut-off line. Logs here are a line per step: small.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    let mut bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        // A cut line from an older writer is not part of the log.
        let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(keep);
    }
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Rewrites the log at `path` keeping only the complete lines that `keep` accepts
/// (atomically); a missing log stays missing.
pub fn truncate_lines(path: &Path, keep: impl Fn(&str) -> bool) -> io::Result<()> {
    let text = match fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::with_capacity(text.len());
    // Only newline-terminated lines are complete.
    for line in text.split_inclusive(|&b| b == b'\n') {
        if line.ends_with(b"\n")
            && let Ok(s) = std::str::from_utf8(&line[..line.len() - 1])
            && keep(s)
        {
            out.extend_from_slice(line);
        }
    }
    if out == text {
        return Ok(());
    }
    write_atomic(path, &out)
}

/// Checks, before any work, that `path` can be written as a file: its folder exists or
/// can be made, it is not a folder, and the folder takes a new file. The error names
/// the path and what is wrong.
pub fn check_file_target(path: &Path) -> Result<(), OutputError> {
    let err = |message: String| OutputError::Target {
        path: path.to_path_buf(),
        message,
    };
    if path.as_os_str().is_empty() {
        return Err(err("an empty path".into()));
    }
    if path.is_dir() {
        return Err(err("is a folder; give a file name".into()));
    }
    check_dir_target(parent_of(path)).map_err(|e| match e {
        OutputError::Target { path: dir, message } => {
            err(format!("its folder {}: {message}", dir.display()))
        }
        other => other,
    })
}

/// Checks, before any work, that `dir` is a folder drmas can write into, creating it
/// (and its parents) if needed.
pub fn check_dir_target(dir: &Path) -> Result<(), OutputError> {
    let err = |message: String| OutputError::Target {
        path: dir.to_path_buf(),
        message,
    };
    // The first ancestor that exists must be a folder.
    if let Some(existing) = dir
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && fs::symlink_metadata(a).is_ok())
        && !existing.is_dir()
    {
        return Err(if existing == dir {
            err("is a file, not a folder".into())
        } else {
            err(format!("{} is a file, not a folder", existing.display()))
        });
    }
    fs::create_dir_all(dir).map_err(|e| err(format!("cannot create the folder: {e}")))?;
    // Writable in fact, not by the mode bits (root, read-only mounts, ACLs).
    let probe = dir.join(format!(".drmas-write-probe-{}", std::process::id()));
    match fs::File::create(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(err(format!("cannot write into it: {e}"))),
    }
}

/// An output that cannot be written where the user asked.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("output {path}: {message}")]
    Target { path: PathBuf, message: String },
    #[error("{what} {path} is in use by another drmas process (pid {pid})")]
    Locked {
        what: &'static str,
        path: PathBuf,
        pid: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// One writer per output: an exclusive `flock` on a lock file, released by the kernel
/// when the process ends however it ends, so a crashed run never leaves it stuck. The
/// file holds the holder's pid, for the message a second writer gets.
pub struct OutputLock {
    _file: fs::File,
}

impl OutputLock {
    /// Locks the output at `path` (`what` it is, for the message) through `lock_file`.
    pub fn acquire(lock_file: &Path, what: &'static str, path: &Path) -> Result<Self, OutputError> {
        let io_err = |source| OutputError::Io {
            path: lock_file.to_path_buf(),
            source,
        };
        fs::create_dir_all(parent_of(lock_file)).map_err(io_err)?;
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(lock_file)
            .map_err(io_err)?;
        // SAFETY: flock on a file descriptor we own.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let pid = fs::read_to_string(lock_file).unwrap_or_default();
            return Err(OutputError::Locked {
                what,
                path: path.to_path_buf(),
                pid: pid.trim().to_string(),
            });
        }
        file.set_len(0).map_err(io_err)?;
        write!(file, "{}", std::process::id()).map_err(io_err)?;
        Ok(Self { _file: file })
    }

    /// The lock of a run folder (`RUN/.lock`).
    pub fn run_folder(run: &Path) -> Result<Self, OutputError> {
        Self::acquire(&run.join(".lock"), "run folder", run)
    }

    /// The lock of one output file (`.NAME.lock` beside it).
    pub fn file(path: &Path) -> Result<Self, OutputError> {
        let lock = parent_of(path).join(format!(".{}.lock", file_name(path)));
        Self::acquire(&lock, "output", path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        let err = write_atomic(dir.path(), b"x").unwrap_err();
        assert_eq!(err.to_string(), "is a folder, not a file");
    }

    #[test]
    fn truncation_drops_cut_lines_and_rejected_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        fs::write(&p, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"st").unwrap();
        truncate_lines(&p, |l| !l.contains('3')).unwrap();
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            "{\"step\":1}\n{\"step\":2}\n"
        );
        append_line(&p, "{\"step\":3}").unwrap();
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n"
        );
        // A cut last line is dropped by the next append.
        fs::write(&p, "a\nb").unwrap();
        append_line(&p, "c").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nc\n");
    }

    #[test]
    fn staged_folder_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("old.txt"), "old").unwrap();
        let staged = StagedDir::new(&target).unwrap();
        fs::write(staged.path().join("new.txt"), "new").unwrap();
        // Until the commit the old folder is untouched.
        assert!(target.join("old.txt").is_file());
        staged.commit().unwrap();
        assert!(!target.join("old.txt").exists());
        assert_eq!(fs::read_to_string(target.join("new.txt")).unwrap(), "new");
        // Nothing else is left beside it.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

        // Dropped uncommitted: the staging folder goes, the target stays.
        let staged = StagedDir::new(&target).unwrap();
        let tmp = staged.path().to_path_buf();
        drop(staged);
        assert!(!tmp.exists());
        assert!(target.join("new.txt").is_file());
    }

    #[test]
    fn leftovers_of_dead_writers_are_removed_and_a_lost_folder_restored() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("ckpt");
        // A pid that cannot be alive: above the kernel's maximum.
        let dead = 4_194_305;
        fs::create_dir(dir.path().join(format!(".ckpt.tmp-{dead}"))).unwrap();
        fs::create_dir(dir.path().join(format!(".ckpt.old-{dead}"))).unwrap();
        fs::write(dir.path().join(format!(".ckpt.old-{dead}/w")), "old").unwrap();
        // Another output's leftovers and a live writer's temporary are not touched.
        fs::write(dir.path().join(format!(".other.tmp-{dead}")), "").unwrap();
        let live = dir.path().join(".ckpt.tmp-1");
        fs::write(&live, "").unwrap();
        assert_eq!(clean_leftovers(&target).unwrap(), 2);
        assert_eq!(fs::read_to_string(target.join("w")).unwrap(), "old");
        assert!(live.exists());
        assert!(dir.path().join(format!(".other.tmp-{dead}")).exists());
    }

    #[test]
    fn output_targets_are_checked_before_work() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, "").unwrap();
        assert_eq!(
            check_dir_target(&file).unwrap_err().to_string(),
            format!("output {}: is a file, not a folder", file.display())
        );
        assert_eq!(
            check_file_target(&file.join("report.json"))
                .unwrap_err()
                .to_string(),
            format!(
                "output {}: its folder {}: is a file, not a folder",
                file.join("report.json").display(),
                file.display(),
            )
        );
        assert_eq!(
            check_file_target(dir.path()).unwrap_err().to_string(),
            format!(
                "output {}: is a folder; give a file name",
                dir.path().display()
            )
        );
        let deep = dir.path().join("a/b/report.json");
        check_file_target(&deep).unwrap();
        assert!(dir.path().join("a/b").is_dir());
        assert!(!deep.exists());
    }

    #[test]
    fn a_second_writer_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let _held = OutputLock::run_folder(dir.path()).unwrap();
        // flock is per open file: a second open in this process conflicts too.
        let err = OutputLock::run_folder(dir.path()).err().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "run folder {} is in use by another drmas process (pid {})",
                dir.path().display(),
                std::process::id()
            )
        );
        drop(_held);
        OutputLock::run_folder(dir.path()).unwrap();
    }
}
