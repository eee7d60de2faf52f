//! What killed writers leave beside an output (`.NAME.tmp-PID`, `.NAME.old-PID`),
//! recognised by name and removed, or put back, by the next writer of that output.

use super::{file_name, parent_of, sync_dir};
use std::{
    fs, io,
    path::{Path, PathBuf},
};

/// Where a replaced folder waits for removal when the filesystem cannot swap two
/// folders atomically (`.NAME.old-PID`).
pub(super) fn old_beside(path: &Path) -> PathBuf {
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

pub(super) fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
