//! The private copy a plugin is loaded from. The dynamic loader maps a library's file
//! into memory page by page; a file rewritten in place under a running process (`cp`
//! over it, a rebuild that writes the same path) changes or truncates pages the process
//! runs, which ends in a segfault or a bus error with no message. So the bytes that
//! passed the trust checks are written to a file in a fresh folder that only this
//! process's user can enter, opened from there, and the copy is removed as soon as it
//! is open: the mapping keeps the removed file alive, nobody can reach it by a path,
//! and nothing is left behind, also when the process is killed later.

use std::{
    ffi::{CString, OsStr},
    io::Write,
    os::unix::{ffi::OsStrExt, fs::OpenOptionsExt},
    path::{Path, PathBuf},
};

/// A plugin's bytes in a private folder, removed (file and folder) on drop.
pub struct PrivateCopy {
    dir: PathBuf,
    file: PathBuf,
}

impl PrivateCopy {
    /// Writes `bytes` as `name` in a new private folder under the system's temporary
    /// folder (`TMPDIR`, else `/tmp`).
    pub fn write(name: &OsStr, bytes: &[u8]) -> std::io::Result<Self> {
        Self::write_in(&std::env::temp_dir(), name, bytes)
    }

    /// [`PrivateCopy::write`] under `base`.
    pub fn write_in(base: &Path, name: &OsStr, bytes: &[u8]) -> std::io::Result<Self> {
        let dir = make_private_dir(base)?;
        let file = dir.join(name);
        let copy = Self { dir, file };
        // Read and execute for the owner only; `create_new` refuses anything already
        // there (nothing can be: the folder was made empty, for this process alone).
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .open(&copy.file)?;
        out.write_all(bytes)?;
        Ok(copy)
    }

    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The folder holding the copy.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A new folder `base/drmas-plugin-XXXXXX` made by `mkdtemp`: a name nobody else chose,
/// mode 0700, owned by this process's user, so no other user can add, replace or
/// change a file in it (even in a shared `/tmp`, whose sticky bit keeps others from
/// renaming or removing it).
fn make_private_dir(base: &Path) -> std::io::Result<PathBuf> {
    let template = base.join("drmas-plugin-XXXXXX");
    let template = CString::new(template.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let raw = template.into_raw();
    // SAFETY: `raw` is a writable NUL-terminated buffer ending in `XXXXXX`, as mkdtemp
    // requires; it rewrites those six bytes in place and returns `raw` or null.
    let made = unsafe { libc::mkdtemp(raw) };
    // SAFETY: `raw` came from `CString::into_raw` and its length is unchanged.
    let template = unsafe { CString::from_raw(raw) };
    if made.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PathBuf::from(OsStr::from_bytes(template.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_copy_is_private_and_gone_after_drop() {
        let base = tempfile::tempdir().unwrap();
        let copy =
            PrivateCopy::write_in(base.path(), OsStr::new("libx.so"), b"\x7fELF...").unwrap();
        assert_eq!(std::fs::read(copy.path()).unwrap(), b"\x7fELF...");
        assert_eq!(copy.path().parent(), Some(copy.dir()));
        assert_eq!(copy.dir().parent(), Some(base.path()));
        let dir = std::fs::metadata(copy.dir()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o7777, 0o700);
        assert_eq!(dir.uid(), crate::plugin::trust::current_uid());
        let file = std::fs::metadata(copy.path()).unwrap();
        assert_eq!(file.permissions().mode() & 0o7777, 0o500);

        let second = PrivateCopy::write_in(base.path(), OsStr::new("libx.so"), b"2").unwrap();
        assert_ne!(second.dir(), copy.dir(), "each load gets its own folder");

        let (dir, file) = (copy.dir().to_path_buf(), copy.path().to_path_buf());
        drop(copy);
        assert!(
            !file.exists() && !dir.exists(),
            "{} left behind",
            dir.display()
        );
        drop(second);
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_base_folder_that_cannot_hold_it_is_an_error_naming_why() {
        let base = tempfile::tempdir().unwrap();
        let missing = base.path().join("missing");
        let err = PrivateCopy::write_in(&missing, OsStr::new("a.so"), b"x")
            .err()
            .unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
