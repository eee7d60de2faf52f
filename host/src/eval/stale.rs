//! The outputs an earlier evaluation left at this run's paths. Scripts and people take
//! a report that exists for the result of the last run; an evaluation that stops at its
//! failure limit, fails or is killed writes none, so the earlier run's report (and
//! sample dump) must not stay where this run's would be. Each is renamed to
//! `NAME.stale` before the run starts, and removed once the run has written its own.

use std::{
    ffi::OsString,
    io,
    path::{Path, PathBuf},
};

/// The suffix an earlier run's output gets while this run has not replaced it.
pub const STALE_SUFFIX: &str = ".stale";

/// `path` with [`STALE_SUFFIX`] added to its file name: `eval.json` → `eval.json.stale`.
pub fn stale_path(path: &Path) -> PathBuf {
    let mut name: OsString = path.file_name().unwrap_or_default().to_os_string();
    name.push(STALE_SUFFIX);
    path.with_file_name(name)
}

/// Earlier outputs moved out of the way of this run, as `(path, stale path)`.
#[derive(Debug, Default, PartialEq)]
pub struct SetAside {
    moved: Vec<(PathBuf, PathBuf)>,
}

/// Renames each of `paths` that exists to its [`stale_path`] (replacing an older
/// stale copy). Call it once the outputs are locked and before the run starts: from
/// then on a file at one of `paths` is this run's, written whole when it completed.
pub fn set_aside(paths: &[&Path]) -> io::Result<SetAside> {
    let mut moved = Vec::new();
    for path in paths {
        // Nothing there, or not a plain file (the output checks refuse those): nothing
        // to move.
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let stale = stale_path(path);
        std::fs::rename(path, &stale).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot move the earlier run's output to {}: {e}",
                    path.display(),
                    stale.display()
                ),
            )
        })?;
        moved.push((path.to_path_buf(), stale));
    }
    Ok(SetAside { moved })
}

impl SetAside {
    /// One line per file moved, for the terminal.
    pub fn notes(&self) -> Vec<String> {
        self.moved
            .iter()
            .map(|(path, stale)| {
                format!(
                    "note: {} is from an earlier run; moved to {} (this run writes {} only \
                     when it completes)",
                    path.display(),
                    stale.display(),
                    path.display()
                )
            })
            .collect()
    }

    /// The stale copies, in the order of the paths given.
    pub fn stale_files(&self) -> Vec<&Path> {
        self.moved.iter().map(|(_, s)| s.as_path()).collect()
    }

    /// This run wrote its outputs: the earlier ones are not needed any more. A stale
    /// copy that cannot be removed is left, named as what it is.
    pub fn discard(self) {
        for (_, stale) in self.moved {
            if let Err(e) = std::fs::remove_file(&stale) {
                tracing::warn!("{}: cannot remove: {e}", stale.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_outputs_are_renamed_stale_and_removed_after_a_completed_run() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("eval.json");
        let dump = dir.path().join("samples.jsonl");
        let absent = dir.path().join("absent.json");
        std::fs::write(&report, b"{\"old\": true}").unwrap();
        std::fs::write(&dump, b"old\n").unwrap();
        std::fs::write(stale_path(&dump), b"older\n").unwrap();

        let set = set_aside(&[&report, &dump, &absent]).unwrap();
        assert!(!report.exists() && !dump.exists() && !absent.exists());
        assert_eq!(
            std::fs::read(dir.path().join("eval.json.stale")).unwrap(),
            b"{\"old\": true}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("samples.jsonl.stale")).unwrap(),
            b"old\n",
            "the newer stale copy replaces an older one"
        );
        assert_eq!(
            set.notes(),
            [
                format!(
                    "note: {} is from an earlier run; moved to {}.stale (this run writes {} \
                     only when it completes)",
                    report.display(),
                    report.display(),
                    report.display()
                ),
                format!(
                    "note: {} is from an earlier run; moved to {}.stale (this run writes {} \
                     only when it completes)",
                    dump.display(),
                    dump.display(),
                    dump.display()
                ),
            ]
        );
        set.discard();
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn nothing_to_set_aside_is_no_note() {
        let dir = tempfile::tempdir().unwrap();
        let set = set_aside(&[&dir.path().join("eval.json")]).unwrap();
        assert_eq!(set, SetAside::default());
        assert!(set.notes().is_empty());
    }
}
