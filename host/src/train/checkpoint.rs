//! Checkpoints of a run: `checkpoints/step-NNNNNN/` holds each model's HF weights and
//! optimizer state (written by its worker) and `trainer_state.json`. A checkpoint is
//! built in a temporary folder, synced, then renamed into place, so a folder named
//! `step-*` is always complete; older ones are deleted only after a newer one is.

use super::{data_order::DataCursor, run_error::RunError, spike::SpikeDetector};
use crate::{output, pool::ModelHandle};
use serde::{Deserialize, Serialize};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub const TRAINER_STATE: &str = "trainer_state.json";
const FORMAT: u32 = 1;

/// Everything besides the models that a run needs to continue exactly. Every random
/// stream (data order, sampling seeds) is a pure function of the seed and the step, so
/// the seed and the cursor stand for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    pub format: u32,
    pub experiment: String,
    pub seed: u64,
    /// Steps completed.
    pub step: u32,
    pub cursor: DataCursor,
    pub spikes: BTreeMap<String, SpikeDetector>,
    pub consecutive_skips: BTreeMap<String, u32>,
    /// The last metrics lines written (at most a few), for a look without the log.
    pub metrics_tail: Vec<serde_json::Value>,
}

impl TrainerState {
    pub fn new(experiment: &str, seed: u64) -> Self {
        Self {
            format: FORMAT,
            experiment: experiment.to_string(),
            seed,
            step: 0,
            cursor: DataCursor::default(),
            spikes: BTreeMap::new(),
            consecutive_skips: BTreeMap::new(),
            metrics_tail: Vec::new(),
        }
    }
}

pub fn checkpoints_dir(run: &Path) -> PathBuf {
    run.join("checkpoints")
}

pub fn step_dir(run: &Path, step: u32) -> PathBuf {
    checkpoints_dir(run).join(format!("step-{step:06}"))
}

fn step_of(name: &str) -> Option<u32> {
    name.strip_prefix("step-")?.parse().ok()
}

/// Complete checkpoints of the run, oldest first.
pub fn list(run: &Path) -> Result<Vec<(u32, PathBuf)>, RunError> {
    let dir = checkpoints_dir(run);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunError::io(&dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| RunError::io(&dir, e))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(step) = step_of(name)
            && path.join(TRAINER_STATE).is_file()
        {
            found.push((step, path));
        }
    }
    found.sort();
    Ok(found)
}

/// The newest complete checkpoint.
pub fn latest(run: &Path) -> Result<Option<(u32, PathBuf)>, RunError> {
    Ok(list(run)?.pop())
}

/// Removes what a killed save left behind (temporary `.step-*` folders), and puts
/// back a checkpoint whose replacement was killed halfway.
pub fn clean_leftovers(run: &Path) -> Result<(), RunError> {
    let dir = checkpoints_dir(run);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut targets = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(rest) = name.strip_prefix('.')
            && let Some((step, _)) = rest.split_once(".tmp-").or(rest.split_once(".old-"))
            && step.starts_with("step-")
        {
            targets.insert(dir.join(step));
        }
    }
    for target in targets {
        output::clean_leftovers(&target).map_err(|e| RunError::io(&target, e))?;
    }
    Ok(())
}

/// Writes the checkpoint of `state.step`: each model's worker saves into its folder,
/// then the trainer state; the folder appears under its final name only when whole.
/// Keeps the newest `keep` checkpoints. Returns the checkpoint's folder.
pub fn save(
    run: &Path,
    models: &[(String, ModelHandle)],
    state: &TrainerState,
    keep: usize,
) -> Result<PathBuf, RunError> {
    let target = step_dir(run, state.step);
    if target.join(TRAINER_STATE).is_file() {
        return Ok(target);
    }
    // A folder without a trainer state is not a checkpoint (see `list`): it is replaced.
    let staged = output::StagedDir::new(&target).map_err(|e| RunError::io(&target, e))?;
    for (id, handle) in models {
        let dir = staged.path().join(id);
        handle.save(dir)?;
    }
    let text = serde_json::to_string_pretty(state).expect("trainer state serializes");
    let state_path = staged.path().join(TRAINER_STATE);
    output::write_atomic(&state_path, text.as_bytes()).map_err(|e| RunError::io(&state_path, e))?;
    staged.commit().map_err(|e| RunError::io(&target, e))?;
    let all = list(run)?;
    for (_, old) in all.iter().rev().skip(keep.max(1)) {
        std::fs::remove_dir_all(old).map_err(|e| RunError::io(old, e))?;
    }
    Ok(target)
}

/// Reads a checkpoint's trainer state and loads every model's weights and optimizer
/// state into its worker.
pub fn restore(dir: &Path, models: &[(String, ModelHandle)]) -> Result<TrainerState, RunError> {
    let path = dir.join(TRAINER_STATE);
    let text = std::fs::read_to_string(&path).map_err(|e| RunError::io(&path, e))?;
    let state: TrainerState = serde_json::from_str(&text).map_err(|e| RunError::Checkpoint {
        path: path.clone(),
        message: e.to_string(),
    })?;
    if state.format != FORMAT {
        return Err(RunError::Checkpoint {
            path,
            message: format!("format {} (this drmas reads format {FORMAT})", state.format),
        });
    }
    for (id, handle) in models {
        let model_dir = dir.join(id);
        if !model_dir.is_dir() {
            return Err(RunError::Checkpoint {
                path: dir.to_path_buf(),
                message: format!("no folder for model `{id}`"),
            });
        }
        handle.restore(model_dir)?;
    }
    Ok(state)
}
