//! Resuming: the newest checkpoint, none of whose parts is trusted, checked against the
//! run folder, the experiment and the metrics log before its models load.

use super::console::warn;
use super::{CHANGES_FILE, METRICS_FILE, Parts, TrainOptions};
use crate::output;
use crate::pool::ModelHandle;
use crate::record::{self, RecordError};
use crate::train::checkpoint::TrainerState;
use crate::train::fingerprint::Fingerprint;
use crate::train::{RunError, checkpoint, fingerprint};
use std::path::Path;

/// The state a resume starts from: the newest checkpoint, none of whose parts is
/// trusted (its files against its manifest, its state against its folder, its
/// experiment against this one, the metrics log against its step), then its models;
/// the metrics lines past it are dropped. Without a checkpoint, a fresh state.
pub(super) fn resume(
    parts: &Parts,
    handles: &[(String, ModelHandle)],
    opts: &TrainOptions,
    fingerprint: &Fingerprint,
    root: bool,
) -> Result<TrainerState, RunError> {
    let metrics = parts.run_dir.join(METRICS_FILE);
    let Some((step, dir)) = checkpoint::latest(&parts.run_dir)? else {
        if root {
            output::truncate_lines(&metrics, |_| false).map_err(|e| RunError::io(&metrics, e))?;
        }
        return Ok(TrainerState {
            fingerprint: Some(fingerprint.clone()),
            ..TrainerState::new(&parts.name, parts.seed)
        });
    };
    let (mut state, verified) =
        checkpoint::open(&dir).map_err(|e| with_the_way_back(e, &parts.run_dir, step))?;
    if state.experiment != parts.name || state.seed != parts.seed {
        return Err(RunError::Resume {
            path: dir,
            message: format!(
                "it is a checkpoint of experiment `{}` with seed {}, not `{}` with seed {}",
                state.experiment, state.seed, parts.name, parts.seed
            ),
        });
    }
    let changes = match &state.fingerprint {
        Some(old) => fingerprint::changes(old, fingerprint),
        None => Vec::new(),
    };
    if !changes.is_empty() && !opts.accept_changes {
        return Err(RunError::Changed {
            checkpoint: dir,
            changes: changes.iter().map(|c| c.to_string()).collect(),
            record: parts.run_dir.join(CHANGES_FILE),
        });
    }
    let bytes = match std::fs::read(&metrics) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(RunError::io(&metrics, e)),
    };
    let records = record::parse_records(&metrics, &bytes)?;
    records.check_through(step).map_err(|e| match e {
        RecordError::Steps { path, message } => RunError::Resume {
            path,
            message: format!(
                "{message}; resuming from {} needs one line for each of steps 1 to {step}",
                dir.display()
            ),
        },
        other => other.into(),
    })?;
    checkpoint::load_models(&dir, handles)?;
    // Lines of steps after the checkpoint are redone; a cut-off line dropped.
    let kept = records.keep_through(&bytes, step);
    if root && kept != bytes {
        output::write_atomic(&metrics, &kept).map_err(|e| RunError::io(&metrics, e))?;
    }
    if state.fingerprint.is_none() || !verified {
        warn(
            opts.quiet,
            &format!(
                "note: {} was written by an older drmas: its files are not checked against a manifest, and what changed in the experiment since cannot be listed (the next checkpoint records both)",
                dir.display()
            ),
        );
    }
    if !changes.is_empty() && root {
        let record = parts.run_dir.join(CHANGES_FILE);
        let line = serde_json::json!({
            "step": step,
            "checkpoint": dir,
            "changes": changes,
        });
        output::append_line(&record, &line.to_string()).map_err(|e| RunError::io(&record, e))?;
        for c in &changes {
            warn(opts.quiet, &format!("resuming with a change: {c}"));
        }
    }
    if !opts.quiet && root {
        crate::output::console::err_line(format_args!(
            "resuming from {} (step {step})",
            dir.display()
        ));
    }
    state.fingerprint = Some(fingerprint.clone());
    Ok(state)
}

/// A newest checkpoint that cannot be used leaves the one before it: the refusal says
/// how to resume from that (the user decides; losing steps silently is not an option).
pub(super) fn with_the_way_back(error: RunError, run: &Path, step: u32) -> RunError {
    let RunError::Checkpoint { path, message } = error else {
        return error;
    };
    let earlier = checkpoint::list(run)
        .ok()
        .and_then(|all| all.into_iter().rev().find(|(s, _)| *s < step));
    let message = match earlier {
        Some((_, dir)) => format!(
            "{message}; to resume from the checkpoint before it ({}), move this one out of the checkpoints folder",
            dir.file_name().unwrap_or_default().to_string_lossy()
        ),
        None => message,
    };
    RunError::Checkpoint { path, message }
}
