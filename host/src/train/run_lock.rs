//! One writer per run folder: an exclusive `flock` on `RUN/.lock`, released by the
//! kernel when the process ends however it ends, so a crashed run never leaves it stuck.

use super::run_error::RunError;
use std::{fs, io::Write, os::fd::AsRawFd, path::Path};

pub struct RunLock {
    _file: fs::File,
}

impl RunLock {
    pub fn acquire(run: &Path) -> Result<Self, RunError> {
        fs::create_dir_all(run).map_err(|e| RunError::io(run, e))?;
        let path = run.join(".lock");
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| RunError::io(&path, e))?;
        // SAFETY: flock on a file descriptor we own.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let pid = fs::read_to_string(&path).unwrap_or_default();
            return Err(RunError::Locked {
                path: run.to_path_buf(),
                pid: pid.trim().to_string(),
            });
        }
        file.set_len(0).map_err(|e| RunError::io(&path, e))?;
        write!(file, "{}", std::process::id()).map_err(|e| RunError::io(&path, e))?;
        Ok(Self { _file: file })
    }
}
