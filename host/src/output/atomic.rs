//! Files and folders written whole or not at all: a temporary name beside the target,
//! synced, then renamed (a folder: swapped in with one atomic exchange).

use super::{
    FAULT_DIR_STAGED, FAULT_DIR_SWAPPED, FAULT_FILE_PARTIAL, FAULT_FILE_RENAMED,
    FAULT_FILE_WRITTEN, fault_point,
    leftovers::{clean_leftovers, old_beside, remove_any},
    parent_of, sync_dir, sync_tree, temp_beside,
};
use std::{
    ffi::CString,
    fs,
    io::{self, Write},
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

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
}
