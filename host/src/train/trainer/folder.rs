//! The run folder's guard: one trainer at a time, and a fresh run never writes over
//! another run's results.

use super::METRICS_FILE;
use crate::train::{RunError, checkpoint};
use std::path::Path;

/// Refuses a run folder that is a file, takes the folder's lock, and then — with the
/// lock held, so that a folder another process is training is reported as in use, not
/// as holding a run — judges what is in it.
pub(super) fn take_run_folder(
    run: &Path,
    resume: bool,
) -> Result<crate::output::OutputLock, RunError> {
    if run.exists() && !run.is_dir() {
        return Err(RunError::Resume {
            path: run.to_path_buf(),
            message: "the run folder is a file".into(),
        });
    }
    let lock = crate::output::OutputLock::run_folder(run)?;
    check_run_folder(run, resume)?;
    Ok(lock)
}

/// The run's own files must be what drmas writes there, and a fresh run must not write
/// over another run's results.
pub(super) fn check_run_folder(run: &Path, resume: bool) -> Result<(), RunError> {
    let metrics = run.join(METRICS_FILE);
    if metrics.exists() && !metrics.is_file() {
        return Err(RunError::Resume {
            path: metrics,
            message: "is a folder, not the run's metrics log (a file drmas writes one line per step to): move it out of the way".into(),
        });
    }
    let checkpoints = checkpoint::checkpoints_dir(run);
    if checkpoints.exists() && !checkpoints.is_dir() {
        return Err(RunError::Resume {
            path: checkpoints,
            message: "is a file, not the run's folder of checkpoints: move it out of the way"
                .into(),
        });
    }
    if resume {
        return Ok(());
    }
    let has_metrics = std::fs::metadata(&metrics).is_ok_and(|m| m.len() > 0);
    let has_checkpoints = !checkpoint::list(run)?.is_empty();
    if has_metrics || has_checkpoints {
        return Err(RunError::Resume {
            path: run.to_path_buf(),
            message: "this run folder already holds a run: continue it with --resume, or set another [experiment] output_dir".into(),
        });
    }
    Ok(())
}
