//! An output's place checked before any work: a file's folder can be made and takes a
//! new file, a folder is not a file.

use super::parent_of;
use std::{
    fs, io,
    path::{Path, PathBuf},
};

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

/// Checks, without creating anything that stays, that `dir` could be made and written:
/// the nearest folder of it that exists takes a new file. `drmas check` uses it, so a
/// read-only mount is refused at check time, not a second into `train`.
pub fn probe_dir_target(dir: &Path) -> Result<(), OutputError> {
    let err = |message: String| OutputError::Target {
        path: dir.to_path_buf(),
        message,
    };
    if dir.as_os_str().is_empty() {
        return Err(err("an empty path".into()));
    }
    let Some(existing) = dir
        .ancestors()
        .map(|a| {
            if a.as_os_str().is_empty() {
                Path::new(".")
            } else {
                a
            }
        })
        .find(|a| fs::symlink_metadata(a).is_ok())
    else {
        return Ok(());
    };
    if !existing.is_dir() {
        return Err(if existing == dir {
            err("is a file, not a folder".into())
        } else {
            err(format!("{} is a file, not a folder", existing.display()))
        });
    }
    let probe = existing.join(format!(".drmas-write-probe-{}", std::process::id()));
    match fs::File::create(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if existing == dir => Err(err(format!("cannot write into it: {e}"))),
        Err(e) => Err(err(format!(
            "cannot be created: cannot write into {}: {e}",
            existing.display()
        ))),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        // The probe judges without creating the folder.
        probe_dir_target(&dir.path().join("new/run")).unwrap();
        assert!(!dir.path().join("new").exists());
        assert_eq!(
            probe_dir_target(&file.join("run")).unwrap_err().to_string(),
            format!(
                "output {}: {} is a file, not a folder",
                file.join("run").display(),
                file.display()
            )
        );
        assert_eq!(
            probe_dir_target(Path::new("/proc/drmas-run"))
                .unwrap_err()
                .to_string(),
            "output /proc/drmas-run: cannot be created: cannot write into /proc: No such file or directory (os error 2)"
        );
        let deep = dir.path().join("a/b/report.json");
        check_file_target(&deep).unwrap();
        assert!(dir.path().join("a/b").is_dir());
        assert!(!deep.exists());
    }
}
