//! MLflow through its REST API (`/api/2.0/mlflow/…`), on a thread of its own so that a
//! server that is down or slow never stops or slows training.
//!
//! The training thread only queues (a bounded queue: when it is full, the step is
//! dropped and counted). The sender thread creates or finds the experiment, creates
//! the run (tags: drmas version, commit; params: the resolved experiment, flattened) or
//! reopens a resumed one, and sends each step's metrics with `runs/log-batch` within
//! MLflow's limits (1,000 metrics, 100 params, 100 tags per call). A call is tried
//! [`ATTEMPTS`] times with a growing pause; a step that still fails is a gap. Sample
//! tables go up as artifacts (`mlflow-artifacts:` through the server, `file:` copied).
//!
//! `RUN/tracking/mlflow.json` (written whole after each delivered step) holds the run's
//! ids, the last step delivered and the gaps, so that a resumed run skips the steps the
//! server already has and the gaps are on record. It is written at the end of the run
//! whatever the server did: when the sender has not finished within the grace (a server
//! that accepts and never answers), the training thread writes it, every step queued and
//! not delivered counted as a gap and `incomplete` set; the sender writes nothing after
//! that.

use super::MlflowSection;
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

/// Tries per call.
pub const ATTEMPTS: u32 = 3;
/// Steps (and artifacts) waiting to be sent; past this the newest is dropped.
pub const QUEUE: usize = 256;
/// MLflow's limits per `log-batch`.
const MAX_METRICS: usize = 1000;
const MAX_PARAMS: usize = 100;
const MAX_TAGS: usize = 100;
/// MLflow's limit on a param's value (characters).
const MAX_PARAM_VALUE: usize = 6000;
/// One call's limit.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What the run folder keeps of the MLflow run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MlflowRecord {
    pub uri: String,
    pub experiment_id: String,
    pub run_id: String,
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
    /// Starts the sender for `settings` in run folder `run`: a new MLflow run, or the one
    /// `resumed` names (`(run id, step resumed from)`), whose steps past the one the
    /// server already has are sent again.
    pub fn start(
        settings: &MlflowSection,
        run: &Path,
        resumed: Option<(String, u64)>,
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> MlflowSink {
        let (queue, messages) = mpsc::sync_channel(QUEUE);
        let (finished, done) = mpsc::channel();
        // The record as it stands before any call: a resumed run's, read here, so that
        // what the end writes never loses its ids whatever the server does.
        let record = initial_record(&settings.uri, read_record(run), resumed.as_ref());
        let shared = Arc::new(Shared {
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

/// The record a run starts from: a resumed run's (its ids, the steps the server has),
/// or a new one for `uri`.
fn initial_record(
    uri: &str,
    previous: Option<MlflowRecord>,
    resumed: Option<&(String, u64)>,
) -> MlflowRecord {
    match resumed {
        Some((run_id, step)) => {
            let mut record =
                previous
                    .filter(|r| &r.run_id == run_id)
                    .unwrap_or_else(|| MlflowRecord {
                        run_id: run_id.clone(),
                        ..Default::default()
                    });
            record.uri = uri.to_string();
            // The server has the steps up to the one delivered last; the resumed run
            // computes the steps after `step` again, and sends those it lacks.
            record.delivered_step = record.delivered_step.map(|d| d.max(*step)).or(Some(*step));
            record.incomplete = false;
            record
        }
        None => MlflowRecord {
            uri: uri.to_string(),
            ..Default::default()
        },
    }
}

/// The newest step of any metric a `runs/get` answer shows (each metric's latest value
/// carries its step), or `None` for a run without metrics.
fn last_step_held(run: &Value) -> Option<u64> {
    run["run"]["data"]["metrics"]
        .as_array()?
        .iter()
        .filter_map(|m| {
            m["step"]
                .as_u64()
                .or_else(|| m["step"].as_str()?.parse().ok())
        })
        .max()
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

/// Calls to the server.
struct Api {
    base: String,
    agent: ureq::Agent,
}

impl Api {
    fn new(uri: &str) -> Api {
        let base = uri.trim_end_matches('/').to_string();
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false);
        let loopback = base.contains("://127.0.0.1") || base.contains("://localhost");
        if loopback {
            builder = builder.proxy(None);
        }
        Api {
            base,
            agent: ureq::Agent::new_with_config(builder.build()),
        }
    }

    /// One call, tried [`ATTEMPTS`] times: the answer, or the last failure's text.
    /// `Ok(Err(..))` is the server's own refusal (4xx), not tried again.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300 << attempt));
            }
            let response = match (method, body) {
                ("GET", _) => self.agent.get(&url).call(),
                (_, Some(b)) => self.agent.post(&url).send_json(b),
                (_, None) => self.agent.post(&url).send_empty(),
            };
            match response {
                Err(e) => last = format!("{url}: {e}"),
                Ok(mut r) => {
                    let status = r.status().as_u16();
                    let text = r.body_mut().read_to_string().unwrap_or_default();
                    if (200..300).contains(&status) {
                        return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
                    }
                    last = format!(
                        "{url}: HTTP {status}: {}",
                        text.chars().take(300).collect::<String>()
                    );
                    if (400..500).contains(&status) && status != 429 {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    fn put(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let url = format!("{}{path}", self.base);
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(300 << attempt));
            }
            match self
                .agent
                .put(&url)
                .header("Content-Type", "application/octet-stream")
                .send(bytes)
            {
                Ok(r) if (200..300).contains(&r.status().as_u16()) => return Ok(()),
                Ok(r) => last = format!("{url}: HTTP {}", r.status().as_u16()),
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(last)
    }
}

/// The sender thread's state.
struct Sender {
    api: Api,
    experiment: String,
    run: PathBuf,
    shared: Arc<Shared>,
    record: MlflowRecord,
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
            percent_encode(&self.experiment)
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

    /// Finds or makes the run; failures leave it unmade (later messages try again).
    fn open(
        &mut self,
        resumed: Option<(String, u64)>,
        params: &[(String, String)],
        tags: &[(String, String)],
    ) {
        if let Some((run_id, _)) = resumed {
            // `self.record` is the resumed run's already (`initial_record`).
            *self.shared.run_id.lock().expect("run id") = Some(run_id.clone());
            if let Err(e) = self.api.call(
                "POST",
                "/api/2.0/mlflow/runs/update",
                Some(&json!({"run_id": run_id, "status": "RUNNING"})),
            ) {
                self.warn_once(e);
            }
            // The server may hold steps the record does not: a kill between the server's
            // answer and the record's write (seen on a loaded machine: a step twice in
            // the history). What the server holds decides what is sent again.
            match self.api.call(
                "GET",
                &format!("/api/2.0/mlflow/runs/get?run_id={run_id}"),
                None,
            ) {
                Ok(v) => {
                    if let Some(held) = last_step_held(&v) {
                        self.record.delivered_step =
                            Some(self.record.delivered_step.map_or(held, |d| d.max(held)));
                    }
                }
                Err(e) => self.warn_once(e),
            }
            self.save();
            return;
        }
        let made = self.experiment_id().and_then(|experiment_id| {
            let v = self.api.call(
                "POST",
                "/api/2.0/mlflow/runs/create",
                Some(&json!({
                    "experiment_id": experiment_id,
                    "start_time": now_ms(),
                    "run_name": self.run.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "tags": entries(&tags[..tags.len().min(MAX_TAGS)]),
                })),
            )?;
            let run_id = v["run"]["info"]["run_id"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("no run id in {v}"))?;
            Ok((experiment_id, run_id))
        });
        match made {
            Ok((experiment_id, run_id)) => {
                self.record.experiment_id = experiment_id;
                self.record.run_id = run_id.clone();
                *self.shared.run_id.lock().expect("run id") = Some(run_id.clone());
                self.save();
                let params: Vec<(String, String)> = params
                    .iter()
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
            Err(e) => self.warn_once(format!("cannot create the run: {e}")),
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Metrics { step, values } => self.metrics(step, values),
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

    fn metrics(&mut self, step: u64, values: Vec<(String, f64)>) {
        if self.record.delivered_step.is_some_and(|d| step <= d) {
            return;
        }
        if self.record.run_id.is_empty() {
            self.record.gaps.push(step);
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
                self.record.gaps.push(step);
                self.save();
                return;
            }
        }
        tracing::debug!(
            step,
            seconds = started.elapsed().as_secs_f64(),
            "mlflow step sent"
        );
        self.record.delivered_step = Some(step);
        self.save();
    }

    fn artifact(&mut self, file: &Path, dir: &str) {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sent = (|| {
            if self.record.run_id.is_empty() {
                return Err("no run".to_string());
            }
            let v = self.api.call(
                "GET",
                &format!("/api/2.0/mlflow/runs/get?run_id={}", self.record.run_id),
                None,
            )?;
            let uri = v["run"]["info"]["artifact_uri"]
                .as_str()
                .ok_or_else(|| format!("no artifact_uri in {v}"))?
                .to_string();
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
        })();
        if let Err(e) = sent {
            self.warn_once(format!("artifact {dir}/{name}: {e}"));
            self.record.lost_artifacts.push(format!("{dir}/{name}"));
        }
        // The count and the record are written together: an end that does not wait
        // for this thread lists each artifact it had not handled once.
        self.artifacts_handled += 1;
        self.save();
    }
}

/// `text` for a URL query value.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_step_held_is_the_newest_of_the_metrics_latest_steps() {
        // As MLflow's runs/get answers: int64 steps as numbers or as strings.
        let run = json!({"run": {"data": {"metrics": [
            {"key": "reward_mean", "value": 0.5, "timestamp": 1, "step": 3},
            {"key": "loss", "value": 0.1, "timestamp": 1, "step": "4"},
            {"key": "entropy", "value": 2.0, "timestamp": 1, "step": 2}
        ]}}});
        assert_eq!(last_step_held(&run), Some(4));
        assert_eq!(last_step_held(&json!({"run": {"data": {}}})), None);
        assert_eq!(
            last_step_held(&json!({"run": {"data": {"metrics": []}}})),
            None
        );
    }
}
