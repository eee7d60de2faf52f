//! MLflow through its REST API (`/api/2.0/mlflow/…`), on a thread of its own so that a
//! server that is down or slow never stops or slows training.
//!
//! The training thread only queues (a bounded queue: when it is full, the step is
//! dropped and counted). The sender thread creates or finds the experiment, creates
//! the run (tags: drmas version, commit, the run folder's key; params: the resolved
//! experiment, flattened) or reopens a resumed one, and sends each step's metrics with
//! `runs/log-batch` within MLflow's limits (1,000 metrics, 100 params, 100 tags per
//! call). A call is tried [`ATTEMPTS`] times with a growing pause; a step that still
//! fails is a gap. Sample tables go up as artifacts (`mlflow-artifacts:` through the
//! server, `file:` copied).
//!
//! `RUN/tracking/mlflow.json` (written whole after each delivered step) holds the run's
//! ids, the last step delivered and the gaps. It is written at the end of the run
//! whatever the server did: when the sender has not finished within the grace (a server
//! that accepts and never answers), the training thread writes it, every step queued and
//! not delivered counted as a gap and `incomplete` set; the sender writes nothing after
//! that.
//!
//! A kill at any moment loses nothing and never makes a second run: the folder's key is
//! on record before the run is made with it as a tag, so a resume whose checkpoint and
//! record name no run finds it by that tag (`runs/search`); and a resume asks the
//! server what it holds and sends again what it lacks ([`catch_up`]).

mod api;
mod catch_up;

pub use api::ATTEMPTS;

use super::MlflowSection;
use api::Api;
use catch_up::Held;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        mpsc::{self, Receiver, SyncSender, TrySendError},
    },
    time::{Duration, Instant},
};

/// Steps (and artifacts) waiting to be sent; past this the newest is dropped.
pub const QUEUE: usize = 256;
/// MLflow's limits per `log-batch`.
const MAX_METRICS: usize = 1000;
const MAX_PARAMS: usize = 100;
const MAX_TAGS: usize = 100;
/// MLflow's limit on a param's value (characters).
const MAX_PARAM_VALUE: usize = 6000;
/// The tag that ties an MLflow run to its run folder (the record's `run_key`).
pub const RUN_KEY_TAG: &str = "drmas.run_key";

/// Fault points (`DRMAS_FAULT_POINT`, ARCHITECTURE.md's `output`): the server has made
/// the run, and the record does not name it yet.
pub const FAULT_RUN_CREATED: &str = "mlflow-run-created";
/// The server has a step's metrics, and the record does not say so yet.
pub const FAULT_STEP_SENT: &str = "mlflow-step-sent";
/// The server has a sample table, and the record does not say so yet.
pub const FAULT_ARTIFACT_SENT: &str = "mlflow-artifact-sent";

/// What the run folder keeps of the MLflow run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MlflowRecord {
    pub uri: String,
    pub experiment_id: String,
    pub run_id: String,
    /// The run folder's key, on record before the run is created with it as its
    /// [`RUN_KEY_TAG`]: a resume that finds no run id finds the run by it. Records of
    /// older drmas have none.
    #[serde(default)]
    pub run_key: String,
    /// The last step whose metrics the server has, all of them.
    pub delivered_step: Option<u64>,
    /// Steps whose metrics never reached the server (it was down, or the queue full).
    pub gaps: Vec<u64>,
    /// Artifacts that never reached it.
    pub lost_artifacts: Vec<String>,
    /// The run ended before the server had taken everything (it did not answer within
    /// the grace): the steps it had not taken are in `gaps`.
    #[serde(default)]
    pub incomplete: bool,
}

/// `RUN/tracking/mlflow.json`.
pub fn record_path(run: &Path) -> PathBuf {
    run.join("tracking").join("mlflow.json")
}

pub fn read_record(run: &Path) -> Option<MlflowRecord> {
    let text = std::fs::read_to_string(record_path(run)).ok()?;
    serde_json::from_str(&text).ok()
}

/// What a resumed run tells its sink.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// The MLflow run the checkpoint names, if it names one.
    pub run_id: Option<String>,
    /// The checkpoint's step (0 without one): the steps after it are computed again.
    pub step: u64,
    /// The run's metrics log (JSON lines, one per step; steps 1 to `step` at this
    /// point), whose steps the server lacks are sent again.
    pub lines: PathBuf,
}

enum Message {
    Metrics {
        step: u64,
        values: Vec<(String, f64)>,
    },
    Artifact {
        file: PathBuf,
        dir: String,
    },
    Finish {
        status: &'static str,
    },
}

/// The queue's end on the training thread.
pub struct MlflowSink {
    queue: Option<SyncSender<Message>>,
    shared: Arc<Shared>,
    done: Option<Receiver<()>>,
    dropped_warned: bool,
    /// The run folder.
    run: PathBuf,
    /// How long the end waits for the sender.
    grace: Duration,
    /// Steps put on the queue, in order.
    queued_steps: Vec<u64>,
    /// Artifacts put on the queue (`dir/name`), in order.
    queued_artifacts: Vec<String>,
}

#[derive(Default)]
struct Shared {
    run_id: Mutex<Option<String>>,
    warnings: Mutex<Vec<String>>,
    dropped: Mutex<Vec<u64>>,
    /// What the sender last wrote, under one lock so that the training thread's
    /// [`MlflowSink::close`] sees a record and a count that agree.
    record: Mutex<Written>,
}

/// The record as the sender last wrote it.
#[derive(Default)]
struct Written {
    record: MlflowRecord,
    /// Artifacts the sender had handled (sent or lost, in queue order) when it wrote.
    artifacts_handled: usize,
    /// The training thread has closed the record: the sender writes nothing more.
    closed: bool,
}

impl Shared {
    fn warn(&self, text: String) {
        self.warnings.lock().expect("warnings").push(text);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl MlflowSink {
    /// Starts the sender for `settings` in run folder `run`: a new MLflow run, or for a
    /// `resumed` one the run it made, with what the server lacks sent again.
    pub fn start(
        settings: &MlflowSection,
        run: &Path,
        resumed: Option<Resumed>,
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> MlflowSink {
        let (queue, messages) = mpsc::sync_channel(QUEUE);
        let (finished, done) = mpsc::channel();
        // The record as it stands before any call: a resumed run's, read here, so that
        // what the end writes never loses its ids whatever the server does.
        let mut record = initial_record(&settings.uri, read_record(run), resumed.as_ref());
        // Until the server says what it holds, the steps after the last one on record up
        // to the checkpoint's are gaps: a server that never answers leaves them there.
        let pending = resumed
            .as_ref()
            .map(|r| pending_steps(&record, r.step))
            .unwrap_or_default();
        record.gaps.extend(&pending);
        record.gaps.sort_unstable();
        // A run id known now goes into the next checkpoint whatever the sender is doing.
        let known = (!record.run_id.is_empty()).then(|| record.run_id.clone());
        let shared = Arc::new(Shared {
            run_id: Mutex::new(known),
            record: Mutex::new(Written {
                record: record.clone(),
                ..Written::default()
            }),
            ..Shared::default()
        });
        let mut sender = Sender {
            api: Api::new(&settings.uri),
            experiment: settings.experiment.clone(),
            run: run.to_path_buf(),
            shared: shared.clone(),
            record,
            held: None,
            pending,
            artifact_uri: None,
            artifacts_handled: 0,
            warned: false,
        };
        let params = params.to_vec();
        let tags = tags.to_vec();
        std::thread::Builder::new()
            .name("mlflow".into())
            .spawn(move || {
                sender.open(resumed, &params, &tags);
                for message in messages {
                    let last = matches!(message, Message::Finish { .. });
                    sender.handle(message);
                    if last {
                        break;
                    }
                }
                let _ = finished.send(());
            })
            .expect("a thread for MLflow");
        MlflowSink {
            queue: Some(queue),
            shared,
            done: Some(done),
            dropped_warned: false,
            run: run.to_path_buf(),
            grace: Duration::from_secs_f64(settings.grace_s.max(0.0)),
            queued_steps: Vec::new(),
            queued_artifacts: Vec::new(),
        }
    }

    /// The run's id, once the server has made it.
    pub fn run_id(&self) -> Option<String> {
        self.shared.run_id.lock().expect("run id").clone()
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut *self.shared.warnings.lock().expect("warnings"))
    }

    fn queue(&mut self, message: Message, step: Option<u64>) {
        let Some(q) = &self.queue else { return };
        let artifact = match &message {
            Message::Artifact { file, dir } => Some(artifact_name(file, dir)),
            _ => None,
        };
        match q.try_send(message) {
            Ok(()) => {
                self.queued_steps.extend(step);
                self.queued_artifacts.extend(artifact);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                if let Some(step) = step {
                    self.shared.dropped.lock().expect("dropped").push(step);
                }
                if !self.dropped_warned {
                    self.dropped_warned = true;
                    self.shared.warn(format!(
                        "tracking: MLflow is not keeping up ({QUEUE} messages waiting); later steps are dropped and counted in {}",
                        "RUN/tracking/mlflow.json"
                    ));
                }
            }
        }
    }

    pub fn log_metrics(&mut self, step: u64, values: Vec<(String, f64)>) {
        self.queue(Message::Metrics { step, values }, Some(step));
    }

    pub fn log_artifact(&mut self, file: &Path, dir: &str) {
        self.queue(
            Message::Artifact {
                file: file.to_path_buf(),
                dir: dir.to_string(),
            },
            None,
        );
    }

    /// Ends the run with `status` (MLflow's `FINISHED`, `KILLED`, `FAILED`), waiting at
    /// most the grace (`grace_s`) for what is queued; `RUN/tracking/mlflow.json` is
    /// written in any case (by the training thread when the sender is not done).
    pub fn finish(&mut self, status: &'static str) {
        let grace = self.grace;
        // One deadline for both waits: the end takes at most the grace in all.
        let deadline = Instant::now() + grace;
        if let Some(q) = self.queue.take() {
            let mut message = Message::Finish { status };
            // The queue may be full: wait for room, within the grace.
            while let Err(TrySendError::Full(m)) = q.try_send(message) {
                if Instant::now() > deadline {
                    break;
                }
                message = m;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(done) = self.done.take()
            && done
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .is_err()
        {
            let record = self.close();
            self.shared.warn(format!(
                "tracking: MLflow had not taken everything after {} s (tracking.mlflow.grace_s); the rest is dropped: {} step(s) on record as gaps{} in {}",
                grace.as_secs_f64(),
                record.gaps.len(),
                if record.lost_artifacts.is_empty() {
                    String::new()
                } else {
                    format!(" and {} lost artifact(s)", record.lost_artifacts.len())
                },
                record_path(&self.run).display()
            ));
        }
    }

    /// Writes the record as the sender left it, with every queued step it has not
    /// delivered as a gap, every queued artifact it has not handled as lost, and
    /// `incomplete` set; the sender writes nothing after this.
    fn close(&mut self) -> MlflowRecord {
        let mut guard = self.shared.record.lock().expect("record");
        let dropped = std::mem::take(&mut *self.shared.dropped.lock().expect("dropped"));
        let Written {
            record,
            artifacts_handled: handled,
            closed,
        } = &mut *guard;
        let handled = *handled;
        *closed = true;
        let delivered = record.delivered_step;
        let gaps: Vec<u64> = self
            .queued_steps
            .iter()
            .copied()
            .filter(|&s| delivered.is_none_or(|d| s > d))
            .chain(dropped)
            .collect();
        record.gaps.extend(gaps);
        record.gaps.sort_unstable();
        record.gaps.dedup();
        record
            .lost_artifacts
            .extend(self.queued_artifacts.iter().skip(handled).cloned());
        record.incomplete = true;
        write_record(&self.run, record);
        record.clone()
    }
}

/// `dir/name` of an artifact, as the record lists it.
fn artifact_name(file: &Path, dir: &str) -> String {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{dir}/{name}")
}

/// A new run folder key: random, so that a fresh run in a folder never takes the MLflow
/// run of another.
fn new_run_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The record a run starts from, before any call. A resumed run continues the run its
/// checkpoint names or, when it names none (a kill between the run's creation and the
/// checkpoint), the one the record names; the record's key, gaps and lost artifacts
/// are kept, and what the server holds is asked later. A fresh run has a new record.
/// Either way the record has a key.
fn initial_record(
    uri: &str,
    previous: Option<MlflowRecord>,
    resumed: Option<&Resumed>,
) -> MlflowRecord {
    let mut record = match (resumed, previous) {
        (None, _) | (Some(_), None) => MlflowRecord {
            run_id: resumed.and_then(|r| r.run_id.clone()).unwrap_or_default(),
            ..Default::default()
        },
        (Some(r), Some(previous)) => match &r.run_id {
            Some(id) if previous.run_id != *id && !previous.run_id.is_empty() => MlflowRecord {
                run_id: id.clone(),
                run_key: previous.run_key,
                ..Default::default()
            },
            Some(id) => MlflowRecord {
                run_id: id.clone(),
                ..previous
            },
            None => previous,
        },
    };
    record.uri = uri.to_string();
    record.incomplete = false;
    if record.run_key.is_empty() {
        record.run_key = new_run_key();
    }
    record
}

/// The steps of a resumed run that the record neither has delivered nor has as gaps, up
/// to the checkpoint's `step`: the previous process computed them, and the server may
/// have them or not.
fn pending_steps(record: &MlflowRecord, step: u64) -> Vec<u64> {
    let from = record.delivered_step.map_or(1, |d| d + 1);
    (from..=step).filter(|s| !record.gaps.contains(s)).collect()
}

/// `RUN/tracking/mlflow.json`, whole or not at all.
fn write_record(run: &Path, record: &MlflowRecord) {
    let path = record_path(run);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let text = serde_json::to_string_pretty(record).expect("json");
    let _ = crate::output::write_atomic(&path, text.as_bytes());
}

impl Drop for MlflowSink {
    fn drop(&mut self) {
        // A run that ends without `finish` (an error) leaves the sender to end itself.
        self.queue.take();
    }
}

/// The sender thread's state.
struct Sender {
    api: Api,
    experiment: String,
    run: PathBuf,
    shared: Arc<Shared>,
    record: MlflowRecord,
    /// What the server held of a resumed run when it was reopened, kept up to date with
    /// what is sent since: the steps up to `delivered_step` send only what it lacks.
    /// `None` for a fresh run, or when the server did not say.
    held: Option<Held>,
    /// A resumed run's steps on record as gaps until the server says whether it holds
    /// them ([`pending_steps`]).
    pending: Vec<u64>,
    /// Where the run's artifacts go (`runs/get`'s `artifact_uri`), once asked.
    artifact_uri: Option<String>,
    /// Artifacts handled so far (sent or lost), in queue order.
    artifacts_handled: usize,
    warned: bool,
}

fn entries(items: &[(String, String)]) -> Vec<Value> {
    items
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect()
}

/// `items` once each, in order.
fn add_once<T: PartialEq>(items: &mut Vec<T>, item: T) {
    if !items.contains(&item) {
        items.push(item);
    }
}

impl Sender {
    fn warn_once(&mut self, text: String) {
        if !self.warned {
            self.warned = true;
            self.shared.warn(format!(
                "tracking: MLflow at {}: {text}; training goes on, and the steps it misses are counted in {}",
                self.api.base,
                record_path(&self.run).display()
            ));
        }
    }

    /// Writes the record, unless the training thread has closed it (the run ended
    /// without waiting for this thread).
    fn save(&self) {
        let mut guard = self.shared.record.lock().expect("record");
        if guard.closed {
            return;
        }
        guard.record = self.record.clone();
        guard.artifacts_handled = self.artifacts_handled;
        write_record(&self.run, &self.record);
    }

    fn experiment_id(&self) -> Result<String, String> {
        let path = format!(
            "/api/2.0/mlflow/experiments/get-by-name?experiment_name={}",
            api::percent_encode(&self.experiment)
        );
        match self.api.call("GET", &path, None) {
            Ok(v) => v["experiment"]["experiment_id"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("no experiment id in {v}")),
            Err(e) if e.contains("RESOURCE_DOES_NOT_EXIST") => {
                let v = self.api.call(
                    "POST",
                    "/api/2.0/mlflow/experiments/create",
                    Some(&json!({"name": self.experiment})),
                )?;
                v["experiment_id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("no experiment id in {v}"))
            }
            Err(e) => Err(e),
        }
    }

    /// The run's ids, on record and for the trainer's checkpoint.
    fn adopt(&mut self, experiment_id: String, run_id: String) {
        self.record.experiment_id = experiment_id;
        self.record.run_id = run_id.clone();
        *self.shared.run_id.lock().expect("run id") = Some(run_id);
        self.save();
    }

    /// Finds or makes the run, and for a resumed one sends what the server lacks. A
    /// failure leaves it unmade: later steps are gaps.
    fn open(
        &mut self,
        resumed: Option<Resumed>,
        params: &[(String, String)],
        tags: &[(String, String)],
    ) {
        // The key is on record before a run is made with it, so that a kill right after
        // the server made it leaves a way to find it.
        self.save();
        let reopened = !self.record.run_id.is_empty();
        if !reopened && !self.find_or_create(resumed.is_some(), tags) {
            return;
        }
        let run_id = self.record.run_id.clone();
        let Some(resumed) = resumed else {
            self.log_params(&run_id, params, None);
            return;
        };
        if reopened
            && let Err(e) = self.api.call(
                "POST",
                "/api/2.0/mlflow/runs/update",
                Some(&json!({"run_id": run_id, "status": "RUNNING"})),
            )
        {
            self.warn_once(e);
        }
        let held = match self.api.run(&run_id) {
            Ok(v) => Some(Held::of(&v)),
            Err(e) => {
                self.warn_once(e);
                None
            }
        };
        self.log_params(&run_id, params, held.as_ref());
        self.catch_up(&resumed, held);
    }

    /// A resumed run whose checkpoint and record name no run finds the one made with
    /// the folder's key (a kill before its id was on record), and makes one only when
    /// there is none; a fresh run makes one. `false` when there is no run.
    fn find_or_create(&mut self, resumed: bool, tags: &[(String, String)]) -> bool {
        let experiment_id = match self.experiment_id() {
            Ok(id) => id,
            Err(e) => {
                self.warn_once(format!("cannot create the run: {e}"));
                return false;
            }
        };
        if resumed {
            match self
                .api
                .find_tagged(&experiment_id, RUN_KEY_TAG, &self.record.run_key)
            {
                Ok(Some(run_id)) => {
                    self.adopt(experiment_id, run_id);
                    return true;
                }
                Ok(None) => {}
                // Not knowing whether the run is there, making one could make a second.
                Err(e) => {
                    self.warn_once(format!("cannot look for the run of this folder: {e}"));
                    return false;
                }
            }
        }
        let mut tags: Vec<(String, String)> = tags[..tags.len().min(MAX_TAGS - 1)].to_vec();
        tags.push((RUN_KEY_TAG.to_string(), self.record.run_key.clone()));
        let made = self
            .api
            .call(
                "POST",
                "/api/2.0/mlflow/runs/create",
                Some(&json!({
                    "experiment_id": experiment_id,
                    "start_time": now_ms(),
                    "run_name": self.run.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "tags": entries(&tags),
                })),
            )
            .and_then(|v| {
                v["run"]["info"]["run_id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("no run id in {v}"))
            });
        match made {
            Ok(run_id) => {
                crate::output::fault_point(FAULT_RUN_CREATED);
                self.adopt(experiment_id, run_id);
                true
            }
            Err(e) => {
                self.warn_once(format!("cannot create the run: {e}"));
                false
            }
        }
    }

    /// The experiment's settings as params, those the server does not hold yet (`held`:
    /// a resumed run's, whose first process may have been killed before it sent them;
    /// one whose value changed since, `--accept-changes`, keeps its first value).
    fn log_params(&mut self, run_id: &str, params: &[(String, String)], held: Option<&Held>) {
        let params: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| held.is_none_or(|h| !h.params.contains(k)))
            .map(|(k, v)| (k.clone(), v.chars().take(MAX_PARAM_VALUE).collect()))
            .collect();
        for chunk in params.chunks(MAX_PARAMS) {
            if let Err(e) = self.api.call(
                "POST",
                "/api/2.0/mlflow/runs/log-batch",
                Some(&json!({"run_id": run_id, "params": entries(chunk)})),
            ) {
                self.warn_once(format!("logging the experiment's settings: {e}"));
                break;
            }
        }
    }

    /// A resumed run: the steps up to the checkpoint's that the server lacks are sent
    /// again from the metrics log, and the sample tables up to it that it lacks from
    /// the run folder. What the server holds (`held`) decides, not the record (a kill
    /// between the server's answer and the record's write) and not the checkpoint (a
    /// kill while the sender lagged behind training); without its answer, the record
    /// does. What is to be sent is on record as gaps and lost artifacts until it is.
    fn catch_up(&mut self, resumed: &Resumed, held: Option<Held>) {
        if let Some(h) = &held {
            let newest = h.newest();
            self.record.delivered_step = newest;
            self.artifact_uri = h.artifact_uri.clone();
            // The pending steps the server has (a later one is there: they went in
            // order) are no gaps; what it lacks of the newest is marked again below.
            let pending = std::mem::take(&mut self.pending);
            self.record
                .gaps
                .retain(|g| !(pending.contains(g) && newest.is_some_and(|n| *g <= n)));
        }
        self.held = held;
        // The newest step held may lack a part (a kill between two of its calls).
        let from = self.record.delivered_step.unwrap_or(0);
        let logged =
            catch_up::logged_steps(&resumed.lines, from, resumed.step).unwrap_or_else(|e| {
                // The resume has checked the log; one broken since leaves its steps gaps.
                self.warn_once(e.to_string());
                Vec::new()
            });
        let steps: Vec<(u64, Vec<(String, f64)>)> = logged
            .into_iter()
            .filter_map(|(step, values)| Some((step, self.unsent(step, values)?)))
            .collect();
        let tables = self.tables_lacking(resumed.step);
        for (step, _) in &steps {
            add_once(&mut self.record.gaps, *step);
        }
        self.record.gaps.sort_unstable();
        for file in &tables {
            add_once(
                &mut self.record.lost_artifacts,
                artifact_name(file, "samples"),
            );
        }
        self.save();
        for (step, values) in steps {
            self.send(step, values);
        }
        for file in tables {
            let name = artifact_name(&file, "samples");
            match self.upload(&file, "samples") {
                Ok(()) => self.record.lost_artifacts.retain(|a| *a != name),
                Err(e) => self.warn_once(format!("artifact {name}: {e}")),
            }
            self.save();
        }
    }

    /// The sample tables of steps up to `step` in the run folder that the server does
    /// not hold (whole: a size that differs is an upload cut short). All of them when
    /// it does not say.
    fn tables_lacking(&mut self, step: u64) -> Vec<PathBuf> {
        let tables: Vec<PathBuf> = super::samples::tables(&self.run)
            .into_iter()
            .filter(|(s, _)| *s <= step)
            .map(|(_, file)| file)
            .collect();
        if tables.is_empty() {
            return tables;
        }
        let listed = match self.api.artifacts(&self.record.run_id, "samples") {
            Ok(l) => Some(l),
            Err(e) => {
                self.warn_once(e);
                None
            }
        };
        tables
            .into_iter()
            .filter(|file| {
                let size = std::fs::metadata(file).ok().map(|m| m.len());
                listed.as_ref().is_none_or(|l| {
                    size.is_none() || l.get(&artifact_name(file, "samples")) != size.as_ref()
                })
            })
            .collect()
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Metrics { step, values } => {
                if let Some(values) = self.unsent(step, values) {
                    self.send(step, values);
                }
            }
            Message::Artifact { file, dir } => self.artifact(&file, &dir),
            Message::Finish { status } => {
                let dropped = std::mem::take(&mut *self.shared.dropped.lock().expect("dropped"));
                self.record.gaps.extend(dropped);
                self.record.gaps.sort_unstable();
                self.record.gaps.dedup();
                // On record before the last call, which may never answer.
                self.save();
                if !self.record.run_id.is_empty() {
                    let body = json!({"run_id": self.record.run_id, "status": status, "end_time": now_ms()});
                    if let Err(e) =
                        self.api
                            .call("POST", "/api/2.0/mlflow/runs/update", Some(&body))
                    {
                        self.warn_once(e);
                    }
                }
                self.save();
            }
        }
    }

    /// What of step `step` is to be sent: all of a step after the last delivered; of one
    /// up to it, what the server lacks (a resumed run's steps computed again), or
    /// nothing when it did not say. `None` when nothing is.
    fn unsent(&self, step: u64, values: Vec<(String, f64)>) -> Option<Vec<(String, f64)>> {
        match self.record.delivered_step {
            Some(d) if step <= d => {
                let lacking = self.held.as_ref()?.lacking(step, values);
                (!lacking.is_empty()).then_some(lacking)
            }
            _ => Some(values),
        }
    }

    fn send(&mut self, step: u64, values: Vec<(String, f64)>) {
        if self.record.run_id.is_empty() {
            add_once(&mut self.record.gaps, step);
            self.save();
            return;
        }
        let timestamp = now_ms();
        let metrics: Vec<Value> = values
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v, "timestamp": timestamp, "step": step}))
            .collect();
        let started = Instant::now();
        for chunk in metrics.chunks(MAX_METRICS) {
            let body = json!({"run_id": self.record.run_id, "metrics": chunk});
            if let Err(e) = self
                .api
                .call("POST", "/api/2.0/mlflow/runs/log-batch", Some(&body))
            {
                self.warn_once(e);
                add_once(&mut self.record.gaps, step);
                self.record.gaps.sort_unstable();
                self.save();
                return;
            }
        }
        crate::output::fault_point(FAULT_STEP_SENT);
        tracing::debug!(
            step,
            seconds = started.elapsed().as_secs_f64(),
            "mlflow step sent"
        );
        if let Some(h) = &mut self.held {
            h.add(step, &values);
        }
        self.record.delivered_step = Some(self.record.delivered_step.map_or(step, |d| d.max(step)));
        self.record.gaps.retain(|&g| g != step);
        self.save();
    }

    /// A queued artifact: sent, or on record as lost.
    fn artifact(&mut self, file: &Path, dir: &str) {
        let name = artifact_name(file, dir);
        match self.upload(file, dir) {
            Ok(()) => crate::output::fault_point(FAULT_ARTIFACT_SENT),
            Err(e) => {
                self.warn_once(format!("artifact {name}: {e}"));
                add_once(&mut self.record.lost_artifacts, name);
            }
        }
        // The count and the record are written together: an end that does not wait
        // for this thread lists each artifact it had not handled once.
        self.artifacts_handled += 1;
        self.save();
    }

    /// Puts `file` in the run's artifact folder `dir`: through the server's artifact
    /// proxy (`mlflow-artifacts:`), or copied (`file:`).
    fn upload(&mut self, file: &Path, dir: &str) -> Result<(), String> {
        if self.record.run_id.is_empty() {
            return Err("no run".to_string());
        }
        let uri = match &self.artifact_uri {
            Some(uri) => uri.clone(),
            None => {
                let v = self.api.run(&self.record.run_id)?;
                let uri = v["run"]["info"]["artifact_uri"]
                    .as_str()
                    .ok_or_else(|| format!("no artifact_uri in {v}"))?
                    .to_string();
                self.artifact_uri = Some(uri.clone());
                uri
            }
        };
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
        if let Some(rest) = uri.strip_prefix("mlflow-artifacts:") {
            let rest = rest.trim_start_matches('/');
            self.api.put(
                &format!("/api/2.0/mlflow-artifacts/artifacts/{rest}/{dir}/{name}"),
                &bytes,
            )
        } else if let Some(local) = uri.strip_prefix("file://") {
            let to = Path::new(local).join(dir);
            std::fs::create_dir_all(&to).map_err(|e| format!("{}: {e}", to.display()))?;
            crate::output::write_atomic(&to.join(&name), &bytes)
                .map_err(|e| format!("{}: {e}", to.display()))
        } else {
            Err(format!(
                "artifact store `{uri}` is not one drmas writes to (mlflow-artifacts: or file:)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resumed(run_id: Option<&str>, step: u64) -> Resumed {
        Resumed {
            run_id: run_id.map(str::to_string),
            step,
            lines: PathBuf::from("metrics.jsonl"),
        }
    }

    fn recorded(run_id: &str, key: &str) -> MlflowRecord {
        MlflowRecord {
            uri: "http://old".into(),
            experiment_id: "1".into(),
            run_id: run_id.into(),
            run_key: key.into(),
            delivered_step: Some(3),
            gaps: vec![2],
            lost_artifacts: vec!["samples/step-000002.jsonl".into()],
            incomplete: true,
        }
    }

    #[test]
    fn a_resume_continues_the_checkpoints_run_else_the_records() {
        let uri = "http://127.0.0.1:5000";
        // The checkpoint names the record's run: the record goes on, the server asked
        // later for what it holds.
        let r = initial_record(
            uri,
            Some(recorded("abc", "k1")),
            Some(&resumed(Some("abc"), 2)),
        );
        assert_eq!(
            r,
            MlflowRecord {
                uri: uri.into(),
                incomplete: false,
                ..recorded("abc", "k1")
            }
        );
        // The checkpoint was taken before the run's id reached the trainer: the record's.
        let r = initial_record(uri, Some(recorded("abc", "k1")), Some(&resumed(None, 2)));
        assert_eq!((r.run_id.as_str(), r.run_key.as_str()), ("abc", "k1"));
        assert_eq!(r.delivered_step, Some(3));
        // Killed before the run's id was on record: no id, the key to find it by.
        let r = initial_record(uri, Some(recorded("", "k1")), Some(&resumed(None, 0)));
        assert_eq!((r.run_id.as_str(), r.run_key.as_str()), ("", "k1"));
        // The record names another run than the checkpoint: the checkpoint's, afresh.
        let r = initial_record(
            uri,
            Some(recorded("old", "k1")),
            Some(&resumed(Some("abc"), 2)),
        );
        assert_eq!(
            (
                r.run_id.as_str(),
                r.run_key.as_str(),
                r.delivered_step,
                r.gaps.len()
            ),
            ("abc", "k1", None, 0)
        );
        // No record (an older drmas's run, or none written): the checkpoint's, a new key.
        let r = initial_record(uri, None, Some(&resumed(Some("abc"), 2)));
        assert_eq!(r.run_id, "abc");
        assert_eq!(r.run_key.len(), 32);
    }

    #[test]
    fn the_steps_a_resume_does_not_know_the_server_to_hold_are_pending() {
        // Delivered up to 3, 2 a gap already: 4 and 5 were computed and maybe sent.
        let r = recorded("abc", "k1");
        assert_eq!(pending_steps(&r, 5), [4, 5]);
        assert_eq!(pending_steps(&r, 3), Vec::<u64>::new());
        // Nothing delivered (the sender lagged from the start): every step, but a gap.
        let r = MlflowRecord {
            delivered_step: None,
            ..recorded("abc", "k1")
        };
        assert_eq!(pending_steps(&r, 4), [1, 3, 4]);
    }

    #[test]
    fn a_fresh_run_has_a_new_record_with_a_new_key() {
        let a = initial_record("http://a", Some(recorded("abc", "k1")), None);
        let b = initial_record("http://a", None, None);
        assert_eq!(a.run_id, "");
        assert_eq!(a.delivered_step, None);
        assert!(a.gaps.is_empty() && a.lost_artifacts.is_empty());
        assert_ne!(a.run_key, "k1");
        assert_ne!(a.run_key, b.run_key);
        assert!(
            a.run_key.chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            a.run_key
        );
    }

    #[test]
    fn a_record_of_an_older_drmas_still_reads() {
        // Written before the run key and `incomplete` were.
        let old = r#"{
  "uri": "http://127.0.0.1:5000",
  "experiment_id": "1",
  "run_id": "abc",
  "delivered_step": 4,
  "gaps": [],
  "lost_artifacts": []
}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tracking")).unwrap();
        std::fs::write(record_path(dir.path()), old).unwrap();
        let r = read_record(dir.path()).unwrap();
        assert_eq!(
            r,
            MlflowRecord {
                uri: "http://127.0.0.1:5000".into(),
                experiment_id: "1".into(),
                run_id: "abc".into(),
                delivered_step: Some(4),
                ..Default::default()
            }
        );
        // Resumed, it goes on with its run and gets a key.
        let r = initial_record(
            "http://127.0.0.1:5000",
            Some(r),
            Some(&resumed(Some("abc"), 4)),
        );
        assert_eq!((r.run_id.as_str(), r.run_key.len()), ("abc", 32));
    }
}
