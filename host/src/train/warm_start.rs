//! A run that starts from another run's checkpoint (`[trainer] warm_start`): the models
//! load their weights from it (the launch does that), with `optimizer = true` each
//! model's AdamW moments and step count too, and the run records where it came from
//! in `RUN/origin.json`. Its own step counter, data order and metrics start afresh: a
//! format warm start is an ordinary short run whose checkpoint every arm and seed of a
//! comparison then starts from.

use super::{checkpoint::TRAINER_STATE, run_error::RunError};
use crate::{config::WarmStart, output, pool::ModelHandle};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The run folder's record of its warm start.
pub const ORIGIN_FILE: &str = "origin.json";

/// Takes the optimizer state when asked, and records the origin (a fresh run only:
/// a resume has its own checkpoint and keeps the record it wrote).
pub fn begin(run: &Path, w: &WarmStart, models: &[(String, ModelHandle)]) -> Result<(), RunError> {
    if w.optimizer {
        for (id, handle) in models {
            let dir = crate::launch::model_path(&w.checkpoint, id, Some(&w.checkpoint));
            handle.restore(dir)?;
        }
    }
    let state: Option<serde_json::Value> =
        std::fs::read_to_string(w.checkpoint.join(TRAINER_STATE))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    let manifest = std::fs::read(w.checkpoint.join("MANIFEST.sha256"))
        .ok()
        .map(|b| {
            Sha256::digest(&b)
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
        });
    let record = serde_json::json!({
        "warm_start": {
            "checkpoint": std::fs::canonicalize(&w.checkpoint).unwrap_or_else(|_| w.checkpoint.clone()),
            "optimizer": w.optimizer,
            "experiment": state.as_ref().and_then(|s| s.get("experiment").cloned()),
            "step": state.as_ref().and_then(|s| s.get("step").cloned()),
            "manifest_sha256": manifest,
        }
    });
    let path = run.join(ORIGIN_FILE);
    let text = serde_json::to_string_pretty(&record).expect("a JSON value serializes");
    output::write_atomic(&path, text.as_bytes()).map_err(|e| RunError::io(&path, e))
}
