//! Experiment tracking (docs/tracking.md): each step's metrics line, evaluations and
//! sample tables go, besides `metrics.jsonl`, to TensorBoard event files and to an
//! MLflow server.
//!
//! The trackers never stop a run: a sink that fails is warned about once, its gap
//! counted, and training goes on. A resumed run continues the same TensorBoard file and
//! MLflow run, with the steps it computes again neither missing nor there twice.
//!
//! This module knows nothing of training; the trainer hands it step records and rows.
//! It sits with `model` and `engine` in the layers, above `record` (ARCHITECTURE.md).

mod flatten;
pub mod mlflow;
pub mod samples;
pub mod tensorboard;

pub use flatten::scalars;
pub use samples::{SampleRow, write_samples};

use crate::record::StepRecord;
use serde::{Deserialize, Serialize};
use std::{
    path::{Path, PathBuf},
    time::Instant,
};

/// `[tracking]` in an experiment.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrackingSection {
    /// Event files under `RUN/tensorboard/`.
    #[serde(default = "yes")]
    pub tensorboard: bool,
    /// An MLflow tracking server: `{ uri = "http://host:5000", experiment = "name" }`.
    #[serde(default)]
    pub mlflow: Option<MlflowSection>,
    /// A sample table every N steps (0: never).
    #[serde(default = "default_samples_every")]
    pub log_samples_every: u32,
    /// Samples per agent in a table.
    #[serde(default = "default_samples_per_agent")]
    pub samples_per_agent: u32,
}

impl Default for TrackingSection {
    fn default() -> Self {
        Self {
            tensorboard: true,
            mlflow: None,
            log_samples_every: default_samples_every(),
            samples_per_agent: default_samples_per_agent(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_samples_every() -> u32 {
    10
}

fn default_samples_per_agent() -> u32 {
    2
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MlflowSection {
    /// The server's address (`http://…`).
    pub uri: String,
    /// The experiment's name (created when missing).
    pub experiment: String,
    /// Seconds the end of a run waits for what is still queued for the server; then
    /// `RUN/tracking/mlflow.json` is written with what was not delivered as gaps.
    #[serde(default = "default_grace_s")]
    pub grace_s: f64,
}

fn default_grace_s() -> f64 {
    30.0
}

/// What a resumed run needs to go on with the same trackers, kept in the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrackingState {
    /// The event file's name in `RUN/tensorboard/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<String>,
    /// The MLflow run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow_run: Option<String>,
}

/// A resumed run, as its trackers go on with it.
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    /// What the checkpoint kept of the trackers (default without a checkpoint).
    pub state: &'a TrackingState,
    /// The checkpoint's step (0 without one): the steps after it are computed again.
    pub step: u64,
    /// The run's metrics log (JSON lines, one per step), for a sink that lacks steps up
    /// to `step`.
    pub lines: &'a Path,
}

/// The folder of a run's event files.
pub fn tensorboard_dir(run: &Path) -> PathBuf {
    run.join("tensorboard")
}

/// What the trackers cost the run so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrackingCost {
    /// Seconds the training thread spent handing lines to the sinks.
    pub seconds: f64,
    /// Bytes written to the event file.
    pub tensorboard_bytes: u64,
}

/// The sinks of one run (rank 0 only).
pub struct Trackers {
    tensorboard: Option<tensorboard::EventFile>,
    mlflow: Option<mlflow::MlflowSink>,
    /// Warnings go through the caller (the trainer's progress line).
    warnings: Vec<String>,
    tensorboard_failed: bool,
    cost: TrackingCost,
}

impl Trackers {
    /// The sinks `settings` asks for, for the run in `run`. A fresh run (`resume` None)
    /// creates them; a resumed one goes on with the ones it had, cut after its step or
    /// sent what they lack up to it. `params` (the resolved experiment, flattened) and
    /// `tags` go to MLflow when its run is created.
    pub fn open(
        run: &Path,
        settings: &TrackingSection,
        resume: Option<Resume<'_>>,
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Trackers {
        let mut warnings = Vec::new();
        let tensorboard = settings
            .tensorboard
            .then(|| {
                let dir = tensorboard_dir(run);
                let opened = match resume.and_then(|r| Some((r.state.tensorboard.clone()?, r.step)))
                {
                    Some((name, step)) if dir.join(&name).is_file() => {
                        tensorboard::EventFile::resume(&dir.join(&name), step)
                    }
                    _ => tensorboard::EventFile::create(&dir),
                };
                opened
                    .map_err(|e| {
                        warnings.push(format!(
                            "tracking: TensorBoard is off for this run: {}: {e}",
                            dir.display()
                        ))
                    })
                    .ok()
            })
            .flatten();
        let mlflow = settings.mlflow.as_ref().map(|m| {
            let resumed = resume.map(|r| mlflow::Resumed {
                run_id: r.state.mlflow_run.clone(),
                step: r.step,
                lines: r.lines.to_path_buf(),
            });
            mlflow::MlflowSink::start(m, run, resumed, params, tags)
        });
        Trackers {
            tensorboard,
            mlflow,
            warnings,
            tensorboard_failed: false,
            cost: TrackingCost::default(),
        }
    }

    /// Ids to keep in the checkpoint.
    pub fn state(&self) -> TrackingState {
        TrackingState {
            tensorboard: self.tensorboard.as_ref().and_then(|f| {
                f.path()
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            }),
            mlflow_run: self.mlflow.as_ref().and_then(|m| m.run_id()),
        }
    }

    /// Warnings since the last call (each sink warns once).
    pub fn take_warnings(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.warnings);
        if let Some(m) = &mut self.mlflow {
            out.extend(m.take_warnings());
        }
        out
    }

    pub fn cost(&self) -> TrackingCost {
        self.cost
    }

    fn tensorboard_error(&mut self, e: std::io::Error) {
        if !self.tensorboard_failed {
            self.tensorboard_failed = true;
            let path = self
                .tensorboard
                .as_ref()
                .map(|f| f.path().display().to_string())
                .unwrap_or_default();
            self.warnings.push(format!(
                "tracking: TensorBoard event file {path}: {e}; its later events are lost (metrics.jsonl has them)"
            ));
        }
    }

    /// A step's record: every number of its line as a scalar at `step`.
    pub fn log_line(&mut self, step: u64, record: &StepRecord) {
        let started = Instant::now();
        let values = scalars(&record.to_value());
        if let Some(f) = &mut self.tensorboard
            && !self.tensorboard_failed
        {
            match f.scalars(step, &values) {
                Ok(n) => self.cost.tensorboard_bytes += n,
                Err(e) => self.tensorboard_error(e),
            }
        }
        if let Some(m) = &mut self.mlflow {
            m.log_metrics(step, values);
        }
        self.cost.seconds += started.elapsed().as_secs_f64();
    }

    /// A sample table of `step`, already written to `file` (`RUN/samples/…`): a text
    /// summary per agent in TensorBoard, the file as an MLflow artifact.
    pub fn log_samples(&mut self, step: u64, rows: &[SampleRow], file: &Path) {
        let started = Instant::now();
        if let Some(f) = &mut self.tensorboard
            && !self.tensorboard_failed
        {
            let mut agents: Vec<&str> = rows.iter().map(|r| r.agent.as_str()).collect();
            agents.dedup();
            for agent in agents {
                let table = samples::markdown(rows.iter().filter(|r| r.agent == agent));
                match f.text(step, &format!("samples/{agent}"), &table) {
                    Ok(n) => self.cost.tensorboard_bytes += n,
                    Err(e) => {
                        self.tensorboard_error(e);
                        break;
                    }
                }
            }
        }
        if let Some(m) = &mut self.mlflow {
            m.log_artifact(file, "samples");
        }
        self.cost.seconds += started.elapsed().as_secs_f64();
    }

    /// The run ended: the MLflow run's status is set (`FINISHED`, `KILLED` for a run
    /// stopped to be resumed, `FAILED`), and what is queued for it is sent within the
    /// section's `grace_s`; `RUN/tracking/mlflow.json` is written whatever the server
    /// did, what it has not taken counted as gaps.
    pub fn finish(&mut self, status: &'static str) {
        if let Some(m) = &mut self.mlflow {
            m.finish(status);
        }
    }
}
