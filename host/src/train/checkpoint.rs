//! Checkpoints of a run: `checkpoints/step-NNNNNN/` holds each model's HF weights and
//! optimizer state (written by its worker), `trainer_state.json`, and last
//! `MANIFEST.sha256` with every other file's hash. A checkpoint is built in a temporary
//! folder, synced, then renamed into place, so a folder named `step-*` is always
//! complete. An old one is retired by renaming it to `.step-NNNNNN.retired` (synced)
//! before it is deleted, so a kill while deleting leaves a name the next writer knows
//! and removes, never a half-deleted `step-*`.

use super::{
    data_order::DataCursor,
    fingerprint::{Fingerprint, rust_spelling},
    manifest,
    run_error::RunError,
    spike::SpikeDetector,
};
use crate::{output, pool::ModelHandle};
use serde::{Deserialize, Serialize};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub const TRAINER_STATE: &str = "trainer_state.json";
/// 3: the fingerprint in the experiment file's spelling. Format 2 (a manifest and the
/// fingerprint in Rust's spelling, read through [`rust_spelling`]) and format 1 (neither)
/// still load.
const FORMAT: u32 = 3;

/// An old checkpoint renamed for deletion; nothing of it is deleted yet.
pub const FAULT_PRUNE_RENAMED: &str = "prune-renamed";
/// An old checkpoint is partly deleted (its trainer state is gone, its models not).
pub const FAULT_PRUNE_PARTIAL: &str = "prune-partial";

/// What a retired checkpoint is called until it is gone.
const RETIRED: &str = ".retired";

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
    /// What the run trains on (settings, data and weights), to list what a resume
    /// would change; absent in checkpoints of format 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
    /// Per model, the optimizer steps so far and how many of them `grad_clip` bound
    /// (for the running fraction in the metrics; empty in older checkpoints).
    #[serde(default)]
    pub clip_bound: BTreeMap<String, super::metrics::ClipCount>,
    /// The run's TensorBoard file and MLflow run, which a resume goes on with.
    #[serde(default)]
    pub tracking: crate::tracking::TrackingState,
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
            fingerprint: None,
            clip_bound: BTreeMap::new(),
            tracking: Default::default(),
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

/// The run's `step-*` folders with their steps, oldest first, complete or not.
fn step_folders(run: &Path) -> Result<Vec<(u32, PathBuf)>, RunError> {
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
            && path.is_dir()
        {
            found.push((step, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Complete checkpoints of the run, oldest first.
pub fn list(run: &Path) -> Result<Vec<(u32, PathBuf)>, RunError> {
    let mut found = step_folders(run)?;
    found.retain(|(_, path)| path.join(TRAINER_STATE).is_file());
    Ok(found)
}

/// The newest complete checkpoint.
pub fn latest(run: &Path) -> Result<Option<(u32, PathBuf)>, RunError> {
    Ok(list(run)?.pop())
}

/// Removes what a killed save or prune left behind (temporary `.step-*` folders,
/// retired `.step-*.retired` ones), and puts back a checkpoint whose replacement was
/// killed halfway. Called with the run folder's lock held, so no live writer owns them.
pub fn clean_leftovers(run: &Path) -> Result<(), RunError> {
    let dir = checkpoints_dir(run);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut targets = std::collections::BTreeSet::new();
    let mut retired = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix('.') else {
            continue;
        };
        if rest.starts_with("step-") && rest.ends_with(RETIRED) {
            retired.push(entry.path());
        } else if let Some((step, _)) = rest.split_once(".tmp-").or(rest.split_once(".old-"))
            && step.starts_with("step-")
        {
            targets.insert(dir.join(step));
        }
    }
    for target in targets {
        output::clean_leftovers(&target).map_err(|e| RunError::io(&target, e))?;
    }
    for path in &retired {
        tracing::info!("removing {} (a pruned checkpoint)", path.display());
        std::fs::remove_dir_all(path).map_err(|e| RunError::io(path, e))?;
    }
    if !retired.is_empty() {
        output::sync_dir(&dir).map_err(|e| RunError::io(&dir, e))?;
    }
    Ok(())
}

/// The `step-*` folders of the run that its manifest does not vouch for, with why:
/// a part the manifest lists is missing, or there is no manifest and no trainer state,
/// or a trainer state of a format that has a manifest and no manifest. Judged by what is
/// absent (nothing is hashed). A checkpoint of an older drmas (format 1, no manifest) is
/// vouched for by its trainer state. A manifest or state that cannot be read or parsed
/// is an error, never a reason to remove the folder: only absence is evidence of a
/// deletion that did not finish.
pub fn unvouched(run: &Path) -> Result<Vec<(PathBuf, String)>, RunError> {
    let unreadable = |path: &Path, message: String| RunError::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    let mut found = Vec::new();
    for (_, path) in step_folders(run)? {
        let why = match manifest::missing_parts(&path) {
            Err(e) => return Err(unreadable(&path, e.to_string())),
            Ok(Some(missing)) => missing
                .first()
                .map(|part| format!("{} lists {part}, which is missing", manifest::MANIFEST)),
            Ok(None) => {
                let state_path = path.join(TRAINER_STATE);
                match std::fs::read_to_string(&state_path) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Some(format!("no {TRAINER_STATE} and no {}", manifest::MANIFEST))
                    }
                    Err(e) => return Err(RunError::io(&state_path, e)),
                    Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                        Err(e) => return Err(unreadable(&state_path, e.to_string())),
                        Ok(v) if v["format"].as_u64() == Some(1) => None,
                        Ok(_) => Some(format!("no {}", manifest::MANIFEST)),
                    },
                }
            }
        };
        if let Some(why) = why {
            found.push((path, why));
        }
    }
    found.sort();
    Ok(found)
}

/// Deletes the checkpoint `old`: first renamed out of the `step-*` names (and the
/// rename synced), then removed. A kill at any moment leaves it complete under its
/// name, or under the retired name that [`clean_leftovers`] removes.
fn retire(old: &Path) -> Result<(), RunError> {
    let dir = output::parent_of(old);
    let name = old.file_name().unwrap_or_default().to_string_lossy();
    let retired = dir.join(format!(".{name}{RETIRED}"));
    if retired.exists() {
        std::fs::remove_dir_all(&retired).map_err(|e| RunError::io(&retired, e))?;
    }
    std::fs::rename(old, &retired).map_err(|e| RunError::io(old, e))?;
    output::sync_dir(dir).map_err(|e| RunError::io(dir, e))?;
    output::fault_point(FAULT_PRUNE_RENAMED);
    let state = retired.join(TRAINER_STATE);
    match std::fs::remove_file(&state) {
        // A half-deleted folder may have lost it already.
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(RunError::io(&state, e));
        }
        _ => {}
    }
    output::fault_point(FAULT_PRUNE_PARTIAL);
    std::fs::remove_dir_all(&retired).map_err(|e| RunError::io(&retired, e))?;
    output::sync_dir(dir).map_err(|e| RunError::io(dir, e))
}

/// Writes the checkpoint of `state.step`: each model's worker saves into its folder,
/// then the trainer state, then the manifest of all of it; the folder appears under its
/// final name only when whole. Keeps the newest `keep` checkpoints. Returns the
/// checkpoint's folder.
pub fn save(
    run: &Path,
    models: &[(String, ModelHandle)],
    state: &TrainerState,
    keep: usize,
) -> Result<PathBuf, RunError> {
    match stage(run, state.step)? {
        Some(staged) => commit(staged, run, models, state, keep),
        None => Ok(step_dir(run, state.step)),
    }
}

/// The folder `step`'s checkpoint is built in, or `None` when that checkpoint is
/// already written.
pub fn stage(run: &Path, step: u32) -> Result<Option<output::StagedDir>, RunError> {
    let target = step_dir(run, step);
    if target.join(TRAINER_STATE).is_file() {
        return Ok(None);
    }
    // A folder without a trainer state is not a checkpoint (see `list`): it is replaced.
    output::StagedDir::new(&target)
        .map(Some)
        .map_err(|e| RunError::io(&target, e))
}

/// Where rank 0 writes model `id`'s sharded optimizer state, gathered from the ranks,
/// before [`commit`] moves it into the model's folder (`pool::GatherTo`).
pub fn gather_file(staged: &output::StagedDir, id: &str) -> PathBuf {
    staged.path().join(format!(".{id}.optimizer.safetensors"))
}

/// [`save`] into a folder [`stage`] made (a sharded optimizer's state already gathered
/// into it, [`gather_file`]).
pub fn commit(
    staged: output::StagedDir,
    run: &Path,
    models: &[(String, ModelHandle)],
    state: &TrainerState,
    keep: usize,
) -> Result<PathBuf, RunError> {
    let target = step_dir(run, state.step);
    for (id, handle) in models {
        let dir = staged.path().join(id);
        handle.save(dir)?;
    }
    // A resumed format-1 state is written as what it now is.
    let state = TrainerState {
        format: FORMAT,
        ..state.clone()
    };
    let text = serde_json::to_string_pretty(&state).expect("trainer state serializes");
    let state_path = staged.path().join(TRAINER_STATE);
    output::write_atomic(&state_path, text.as_bytes()).map_err(|e| RunError::io(&state_path, e))?;
    manifest::write(staged.path()).map_err(|e| RunError::Checkpoint {
        path: target.clone(),
        message: e.to_string(),
    })?;
    staged.commit().map_err(|e| RunError::io(&target, e))?;
    // What a kill while deleting (or a deletion by hand) left half there is not a
    // checkpoint: it goes, and the log says so.
    for (dir, why) in unvouched(run)? {
        if dir != target {
            tracing::warn!(
                "removing {}: not a complete checkpoint ({why}); a deletion that did not finish left it",
                dir.display()
            );
            retire(&dir)?;
        }
    }
    let all = list(run)?;
    for (_, old) in all.iter().rev().skip(keep.max(1)) {
        retire(old)?;
    }
    Ok(target)
}

/// Opens the checkpoint in `dir` for a resume, trusting none of its parts: every file
/// against the manifest, the trainer state's format, and its step against the folder's
/// name. Returns the state and whether a manifest was there to check (format 1 has
/// none).
pub fn open(dir: &Path) -> Result<(TrainerState, bool), RunError> {
    let bad = |path: &Path, message: String| RunError::Checkpoint {
        path: path.to_path_buf(),
        message,
    };
    let verified = manifest::verify(dir).map_err(|e| bad(dir, e.to_string()))?;
    let path = dir.join(TRAINER_STATE);
    let text = std::fs::read_to_string(&path).map_err(|e| RunError::io(&path, e))?;
    let mut state: TrainerState =
        serde_json::from_str(&text).map_err(|e| bad(&path, e.to_string()))?;
    if !(1..=FORMAT).contains(&state.format) {
        return Err(bad(
            &path,
            format!(
                "format {} (this drmas reads formats 1 to {FORMAT})",
                state.format
            ),
        ));
    }
    if !verified && state.format >= 2 {
        return Err(bad(
            dir,
            format!(
                "{} is missing (a checkpoint of format {} has one)",
                manifest::MANIFEST,
                state.format
            ),
        ));
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    if step_of(&name) != Some(state.step) {
        return Err(bad(
            &path,
            format!(
                "`step` is {}, but the folder is {name}: the state belongs to another checkpoint",
                state.step
            ),
        ));
    }
    if state.format == 2 {
        state.fingerprint = state.fingerprint.as_ref().map(rust_spelling::upgrade);
    }
    Ok((state, verified))
}

/// Loads every model's weights and optimizer state from the checkpoint in `dir` into
/// its worker (which checks the folder's config against its weights and its own model,
/// and the optimizer state against the parameters).
pub fn load_models(dir: &Path, models: &[(String, ModelHandle)]) -> Result<(), RunError> {
    for (id, handle) in models {
        let model_dir = dir.join(id);
        if !model_dir.is_dir() {
            return Err(RunError::Checkpoint {
                path: dir.to_path_buf(),
                message: format!("no folder for model `{id}`"),
            });
        }
        check_owner(&model_dir, id)?;
        handle.restore(model_dir)?;
    }
    Ok(())
}

/// The optimizer state in `model_dir` must be model `id`'s: its header names the
/// folder it was saved in (states written before drmas recorded it name none and pass).
fn check_owner(model_dir: &Path, id: &str) -> Result<(), RunError> {
    use crate::pool::{OPTIMIZER_FILE, OPTIMIZER_OWNER_KEY};
    let path = model_dir.join(OPTIMIZER_FILE);
    // A missing or unreadable file is the restore's to report, with its own words.
    let Ok(meta) = crate::model::read_metadata(&path) else {
        return Ok(());
    };
    match meta.get(OPTIMIZER_OWNER_KEY) {
        Some(owner) if owner != id => Err(RunError::Checkpoint {
            path: path.clone(),
            message: format!(
                "the optimizer state of model `{owner}`, not of `{id}`: it was moved or copied between the models' folders"
            ),
        }),
        _ => Ok(()),
    }
}

/// Reads a checkpoint's trainer state and loads every model's weights and optimizer
/// state into its worker.
pub fn restore(dir: &Path, models: &[(String, ModelHandle)]) -> Result<TrainerState, RunError> {
    let (state, _) = open(dir)?;
    load_models(dir, models)?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what is absent makes a folder unvouched; a manifest or trainer state that
    /// cannot be read is an error, and the folder is not listed for removal.
    #[test]
    fn only_absence_makes_a_step_folder_unvouched() {
        let run = tempfile::tempdir().unwrap();
        let step = |n: u32| {
            let dir = checkpoints_dir(run.path()).join(format!("step-{n:06}"));
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        // Format 1 (no manifest) with its state: vouched for.
        let old = step(1);
        std::fs::write(old.join(TRAINER_STATE), r#"{"format": 1}"#).unwrap();
        // A manifest listing a part that is gone; nothing at all.
        let half = step(2);
        std::fs::write(half.join(manifest::MANIFEST), "ab  lm/model.safetensors\n").unwrap();
        let empty = step(3);
        let found = unvouched(run.path()).unwrap();
        assert_eq!(
            found,
            [
                (
                    half,
                    format!(
                        "{} lists lm/model.safetensors, which is missing",
                        manifest::MANIFEST
                    )
                ),
                (
                    empty,
                    format!("no {TRAINER_STATE} and no {}", manifest::MANIFEST)
                ),
            ]
        );
        // A state that does not parse is an error, not a reason to remove.
        let bad = step(4);
        std::fs::write(bad.join(TRAINER_STATE), "{not json").unwrap();
        let e = unvouched(run.path()).unwrap_err().to_string();
        assert!(
            e.contains(&bad.join(TRAINER_STATE).display().to_string()),
            "{e}"
        );
        assert!(bad.is_dir());
    }
}
