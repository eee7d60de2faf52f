//! Which model state lives on the host between uses (`[pool] offload`).

use super::{backend::OffloadParts, error::WorkerError, worker::ModelHandle};
use serde::{Deserialize, Serialize};

/// What the pool moves to host memory between uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    /// Every model stays on its device.
    #[default]
    None,
    /// Optimizer state lives in host memory except during its model's update.
    Optimizer,
    /// Models (weights, adapters, optimizer state) not in use move to host memory.
    Inactive,
}

impl Offload {
    /// The name the experiment file uses.
    pub fn name(self) -> &'static str {
        match self {
            Offload::None => "none",
            Offload::Optimizer => "optimizer",
            Offload::Inactive => "inactive",
        }
    }

    /// Before the updates of a step, which run model after model in `models`' order:
    /// with `inactive`, every worker but the one of the first model goes to host memory
    /// (the rollout is over); with `optimizer`, optimizer state is already there (it goes
    /// after each update).
    pub fn before_updates(self, models: &[ModelHandle]) -> Result<(), WorkerError> {
        if self != Offload::Inactive {
            return Ok(());
        }
        let Some(first) = models.first() else {
            return Ok(());
        };
        for h in distinct_workers(models) {
            if !first.same_worker(&h) {
                h.offload(OffloadParts::All)?;
            }
        }
        Ok(())
    }

    /// After the update of `models[i]`: its optimizer state (`optimizer`) or its whole
    /// worker (`inactive`, unless the next model to update is on the same worker) goes to
    /// host memory.
    pub fn after_update(self, models: &[ModelHandle], i: usize) -> Result<(), WorkerError> {
        let handle = &models[i];
        match self {
            Offload::None => Ok(()),
            Offload::Optimizer => handle.offload(OffloadParts::Optimizer),
            Offload::Inactive => {
                let next_same = models.get(i + 1).is_some_and(|n| n.same_worker(handle));
                if next_same {
                    Ok(())
                } else {
                    handle.offload(OffloadParts::All)
                }
            }
        }
    }
}

/// The distinct workers behind `models`, in the order of their first model.
pub fn distinct_workers(models: &[ModelHandle]) -> Vec<ModelHandle> {
    let mut out: Vec<ModelHandle> = Vec::new();
    for h in models {
        if !out.iter().any(|o| o.same_worker(h)) {
            out.push(h.clone());
        }
    }
    out
}
