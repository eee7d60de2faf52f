//! What a step leaves behind besides the models: its metrics line (with the pool's
//! residency), its sample table, and what the trackers take of both.

use super::{METRICS_FILE, Trainer};
use crate::output;
use crate::pool::ModelHandle;
use crate::record::{DistRecord, PoolRecord, StepRecord, TrackingRecord, WorkerRecord};
use crate::rollout::Sample;
use crate::train::RunError;
use std::collections::BTreeMap;

impl Trainer {
    /// The metrics phase: the pool's residency joins the step's line, which is appended
    /// to the run's metrics file and kept (without timings) for resume checks. The line
    /// is written before the checkpoint: a checkpoint at step N always has N lines behind
    /// it, and a resume drops lines past its checkpoint.
    pub(super) fn log_step(&mut self, mut record: StepRecord) -> Result<StepRecord, RunError> {
        record.pool = Some(self.pool_record()?);
        record.dist = (self.dist.as_ref()).map(|d| DistRecord {
            world_size: d.world_size as u64,
        });
        record.tracking = self.trackers.as_ref().map(|t| {
            // What the trackers took so far (this line's own handling is in the next).
            let cost = t.cost();
            TrackingRecord {
                seconds: cost.seconds,
                tensorboard_bytes: cost.tensorboard_bytes,
            }
        });
        if self.is_root() {
            let metrics = self.parts.run_dir.join(METRICS_FILE);
            output::append_line(&metrics, &record.to_line())
                .map_err(|e| RunError::io(&metrics, e))?;
        }
        if let Some(t) = &mut self.trackers {
            t.log_line(u64::from(self.state.step), &record);
        }
        self.tracker_warnings();
        self.state
            .metrics_tail
            .push(crate::train::metrics::without_timing(&record.to_value()));
        let excess = self.state.metrics_tail.len().saturating_sub(3);
        self.state.metrics_tail.drain(..excess);
        Ok(record)
    }

    /// Every `log_samples_every` steps, the first `samples_per_agent` samples of each
    /// agent (in episode order) as a table: `RUN/samples/step-NNNNNN.jsonl`, TensorBoard
    /// text, an MLflow artifact.
    pub(super) fn log_samples(&mut self, samples: &[Sample]) -> Result<(), RunError> {
        let settings = &self.parts.tracking.settings;
        let step = self.state.step;
        if !self.is_root()
            || settings.log_samples_every == 0
            || !step.is_multiple_of(settings.log_samples_every)
        {
            return Ok(());
        }
        let per_agent = settings.samples_per_agent as usize;
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        let mut rows = Vec::new();
        for s in samples {
            let n = taken.entry(s.agent.as_str()).or_default();
            if *n >= per_agent {
                continue;
            }
            *n += 1;
            let decode = |ids: &[i64]| {
                self.parts
                    .team
                    .models
                    .get(&s.model)
                    .and_then(|m| m.codec.decode(ids).ok())
                    .unwrap_or_else(|| format!("{ids:?}"))
            };
            rows.push(crate::tracking::SampleRow {
                step: u64::from(step),
                agent: s.agent.clone(),
                model: s.model.clone(),
                uid: s.uid.clone(),
                traj: s.traj,
                turn: s.turn,
                prompt: decode(&s.prompt_ids),
                completion: decode(&s.response_ids),
                score: f64::from(s.score),
                advantage: f64::from(s.advantage),
                valid: s.valid,
                finish: s.finish.as_str().to_string(),
            });
        }
        rows.sort_by(|a, b| a.agent.cmp(&b.agent));
        let file = crate::tracking::write_samples(&self.parts.run_dir, u64::from(step), &rows)
            .map_err(|e| RunError::io(self.parts.run_dir.join("samples"), e))?;
        if let Some(t) = &mut self.trackers {
            t.log_samples(u64::from(step), &rows, &file);
        }
        Ok(())
    }

    /// The distinct workers of the models, each with the index of its first model.
    pub(super) fn workers(&self) -> Vec<(usize, ModelHandle)> {
        let mut out: Vec<(usize, ModelHandle)> = Vec::new();
        for (i, (_, h, _)) in self.parts.models.iter().enumerate() {
            if !out.iter().any(|(_, o)| o.same_worker(h)) {
                out.push((i, h.clone()));
            }
        }
        out
    }

    /// Per worker: bytes on its device and in host memory, the device's memory in use,
    /// and this step's moves (seconds, bytes).
    pub(super) fn pool_record(&mut self) -> Result<PoolRecord, RunError> {
        let mut workers = BTreeMap::new();
        for (i, h) in self.workers() {
            let r = h.residency()?;
            let name = self.parts.models[i].0.clone();
            let before = self
                .moves
                .insert(name.clone(), (r.move_seconds, r.moved_bytes));
            let (s0, b0) = before.unwrap_or((0.0, 0));
            let worker = WorkerRecord {
                device: r.device,
                on_device_bytes: r.on_device,
                on_host_bytes: r.on_host,
                device_used_bytes: r.device_used,
                move_seconds: r.move_seconds - s0,
                moved_bytes: r.moved_bytes - b0,
            };
            workers.insert(name, worker);
        }
        Ok(PoolRecord {
            offload: self.opts.offload.name().to_string(),
            workers,
        })
    }
}
