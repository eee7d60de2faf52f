//! Whole-or-absent outputs: every file drmas writes goes to a temporary name beside its
//! target, is synced, then renamed into place, so a kill at any moment leaves the old
//! file or the new one, never a part. Folders (checkpoints) are built the same way.

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
};

/// The folder a path lives in (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A temporary name beside `path` that a later run recognises as a leftover.
pub fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent_of(path).join(format!(".{name}.tmp-{}", std::process::id()))
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
    let tmp = temp_beside(path);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Moves a finished folder `tmp` to `path` (which must not exist) and syncs both.
pub fn publish_dir(tmp: &Path, path: &Path) -> io::Result<()> {
    sync_tree(tmp)?;
    fs::rename(tmp, path)?;
    sync_dir(parent_of(path))
}

/// Appends one line to a log and syncs it. A kill mid-write can leave a cut-off last
/// line, which readers of the log skip and [`truncate_lines`] removes.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    f.write_all(&bytes)?;
    f.sync_data()
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
        assert!(
            fs::read_to_string(&p)
                .unwrap()
                .ends_with("2}\n{\"step\":3}\n")
        );
    }
}
