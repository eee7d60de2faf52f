//! `remote/openenv`: an environment served by an OpenEnv server (meta-pytorch/OpenEnv),
//! in any language. Each episode has its own WebSocket session: `prepare` opens it and
//! resets the server's environment with the task (the group's G episodes get the same
//! seed, so they play the same problem), each call of the step tool is a `step` whose
//! observation the next agent reads and whose reward and `done` the episode keeps, and
//! `end_episode` closes it. At most `max_sessions` are open at once.
//!
//! Failures: a refused action (the server's `VALIDATION_ERROR`, or an input that is not
//! an action) is the agent's mistake and becomes the step's observation; a server that
//! cannot be reached, answers garbage, goes quiet past `message_timeout_s` or fails in
//! its environment fails the episode, with the server's URL in the message, and the
//! host counts it against `[workflow] max_failed_episodes` (docs/failures.md).

use crate::client::{OpenEnvSession, RemoteError};
use crate::schema::ActionShape;
use crate::server::ServerOwner;
use drmas_plugin_api::{
    Environment, EpisodeEnd, EpisodeId, EpisodeStart, Metrics, PluginError, PluginResult,
    RewardValue, Task, ToolCall, ToolContext, ToolResult, ToolSpec, config_table,
};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Where `prepare` leaves the number of the session it opened, for `start_episode` to
/// find: `Task::meta["openenv_session"]`.
pub const SESSION_KEY: &str = "openenv_session";
/// The reset's observation, as the server sent it: `Task::meta["observation"]`.
pub const OBSERVATION_KEY: &str = "observation";

config_table! {
    /// `[environment.config]` of `remote/openenv`.
    #[derive(Debug, Clone)]
    pub struct OpenEnvConfig {
        /// the server's base URL, http://HOST:PORT (its sessions are at ws://HOST:PORT/ws);
        /// "" when `command` starts it
        pub url: String = String::new(),
        /// a server drmas starts when the first episode needs it and stops at the end:
        /// program and arguments, {port} replaced by a free port
        pub command: Vec<String> = Vec::new(),
        /// the started server's output, appended (default: openenv-server.log in the
        /// working directory)
        pub log: String = "openenv-server.log".to_string(),
        /// seconds a started server has to answer GET /health
        pub startup_timeout_s: f64 = 120.0,
        /// seconds to open one session's connection
        pub connect_timeout_s: f64 = 10.0,
        /// seconds the server has to answer each message (reset, step, state)
        pub message_timeout_s: f64 = 60.0,
        /// further tries to open a session after a failed connection (connections only:
        /// a reset or a step is never sent twice)
        pub connect_retries: u32 = 2,
        /// sessions open at once; the server's max_concurrent_envs must allow as many
        pub max_sessions: usize = 8,
        /// the tool agents call for a step
        pub tool: String = "step".to_string(),
        /// the action's text field the tool input fills ({"expression": input}); "": the
        /// input is the whole action as a JSON object
        pub action_field: String = String::new(),
        /// the observation's field the agents read as text; "": the observation as JSON
        pub observation_field: String = String::new(),
        /// the reset's observation replaces the task's question (for servers that pick
        /// the problem themselves from the seed)
        pub reset_question: bool = false,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Episode metrics of `remote/openenv` (each the mean over the episodes that report it).
pub mod metric {
    /// Milliseconds to open the episode's session and reset it.
    pub const RESET_MS: &str = "remote_reset_ms";
    /// Milliseconds per step, sending the action to reading the observation.
    pub const STEP_MS: &str = "remote_step_ms";
    /// Steps the episode took.
    pub const STEPS: &str = "remote_steps";
}

/// A session `prepare` opened, with what its reset cost.
struct Prepared {
    session: OpenEnvSession,
    reset_ms: f64,
}

/// An episode's session and its timings. The session is locked by its step, by the
/// keep-alive, and by `end_episode` to close it.
struct Live {
    session: Arc<Mutex<OpenEnvSession>>,
    reset_ms: f64,
    step_ms: Vec<f64>,
}

type LiveMap = Arc<Mutex<HashMap<EpisodeId, Live>>>;

/// How often idle sessions answer their server's pings: well within uvicorn's 20 s.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(5);

/// A thread that answers the pings of every idle session (`OpenEnvSession::keep_alive`)
/// until dropped. It holds the sessions only weakly: the environment owns them.
struct KeepAlive {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeepAlive {
    fn start(live: &LiveMap) -> Self {
        let live = Arc::downgrade(live);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("openenv-keepalive".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(KEEP_ALIVE_EVERY)
                {
                    let Some(live) = live.upgrade() else { return };
                    let sessions: Vec<Arc<Mutex<OpenEnvSession>>> =
                        lock(&live).values().map(|l| l.session.clone()).collect();
                    for session in sessions {
                        // A session in a step is busy with its server already.
                        if let Ok(mut s) = session.try_lock() {
                            // A session that fails here fails its next step, which
                            // says why.
                            let _ = s.keep_alive();
                        }
                    }
                }
            })
            .ok();
        Self {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub struct OpenEnv {
    config: OpenEnvConfig,
    shape: ActionShape,
    /// Sessions `prepare` opened, by number, until `start_episode` takes them.
    prepared: Mutex<HashMap<u64, Prepared>>,
    next: AtomicU64,
    live: LiveMap,
    /// Started with the first episode.
    keep_alive: OnceLock<KeepAlive>,
    /// The server `command` started: on first use, once.
    server: OnceLock<Result<ServerOwner, String>>,
}

impl OpenEnv {
    pub fn new(config: OpenEnvConfig) -> PluginResult<Self> {
        match (config.url.is_empty(), config.command.is_empty()) {
            (true, true) => {
                return Err(PluginError::config(
                    "give the server's `url` (http://HOST:PORT), or a `command` that starts it",
                ));
            }
            (false, false) => {
                return Err(PluginError::config(
                    "`url` and `command` are both set: give one (with `command`, drmas picks the port)",
                ));
            }
            _ => {}
        }
        if !config.url.is_empty() {
            base_url(&config.url).map_err(PluginError::config)?;
        }
        if config.max_sessions == 0 {
            return Err(PluginError::config("max_sessions: must be at least 1"));
        }
        for (key, secs) in [
            ("startup_timeout_s", config.startup_timeout_s),
            ("connect_timeout_s", config.connect_timeout_s),
            ("message_timeout_s", config.message_timeout_s),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(PluginError::config(format!(
                    "{key}: must be a number of seconds above 0 and at most 86400, got {secs}"
                )));
            }
        }
        if config.tool.is_empty() {
            return Err(PluginError::config("tool: must name the step tool"));
        }
        Ok(Self {
            shape: ActionShape::from_field(&config.action_field),
            prepared: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            live: Arc::default(),
            keep_alive: OnceLock::new(),
            server: OnceLock::new(),
            config,
        })
    }

    /// The server's base URL (`http://HOST:PORT`), starting it first when `command`
    /// says to.
    pub fn base(&self) -> PluginResult<String> {
        if !self.config.url.is_empty() {
            return base_url(&self.config.url).map_err(PluginError::config);
        }
        let started = self.server.get_or_init(|| {
            ServerOwner::start(
                &self.config.command,
                std::path::Path::new(&self.config.log),
                Duration::from_secs_f64(self.config.startup_timeout_s),
            )
        });
        match started {
            Ok(server) => Ok(server.url().to_string()),
            Err(e) => Err(PluginError::other(e.clone())),
        }
    }

    fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.config.connect_timeout_s)
    }

    fn message_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.config.message_timeout_s)
    }

    /// Opens a session, retrying the connection only.
    fn open(&self) -> PluginResult<OpenEnvSession> {
        let ws = ws_url(&self.base()?);
        let mut attempt = 0;
        loop {
            match OpenEnvSession::connect(&ws, self.connect_timeout(), self.message_timeout()) {
                Ok(s) => return Ok(s),
                Err(e @ RemoteError::Connect { .. }) if attempt < self.config.connect_retries => {
                    attempt += 1;
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(250 * u64::from(attempt)));
                }
                Err(e) => return Err(failure(e)),
            }
        }
    }

    /// The text an agent reads for an observation.
    fn observation_text(&self, observation: &Value) -> String {
        let field = &self.config.observation_field;
        if !field.is_empty() {
            match observation.get(field) {
                Some(Value::String(s)) => return s.clone(),
                Some(other) => return other.to_string(),
                None => {}
            }
        }
        observation.to_string()
    }

    /// Opens and resets a session. How many are open at once is the host's to keep:
    /// it starts no more episodes together than `max_episodes` says.
    fn open_and_reset(&self, task: &Task) -> PluginResult<(Prepared, Value)> {
        let started = Instant::now();
        let mut session = self.open()?;
        let reply = session
            .reset(Some(task_seed(task)), None, &reset_fields(task))
            .map_err(failure)?;
        let reset_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok((Prepared { session, reset_ms }, reply.observation))
    }

    /// Everything `drmas check --online` reports about the server, or why it will not do.
    pub fn probe(&self) -> PluginResult<Vec<String>> {
        let base = self.base()?;
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .timeout_global(Some(self.message_timeout()))
                .build(),
        );
        let get = |path: &str| -> PluginResult<Value> {
            let url = format!("{base}{path}");
            let mut reply = agent
                .get(&url)
                .call()
                .map_err(|e| PluginError::other(format!("{url}: {e}")))?;
            reply
                .body_mut()
                .read_json::<Value>()
                .map_err(|e| PluginError::other(format!("{url}: not JSON: {e}")))
        };
        let health = get("/health")?;
        if health.get("status").and_then(Value::as_str) != Some("healthy") {
            return Err(PluginError::other(format!(
                "{base}/health: the server is not healthy: {health}"
            )));
        }
        let schema = get("/schema")?;
        let action = schema.get("action").ok_or_else(|| {
            PluginError::other(format!("{base}/schema: no `action` schema in {schema}"))
        })?;
        let fits = self
            .shape
            .check(action)
            .map_err(|e| PluginError::config(format!("{base}/schema: {e}")))?;
        // As many sessions as the experiment opens at once, all open together: a server
        // whose max_concurrent_envs is lower refuses the extra ones at once.
        let mut sessions = Vec::new();
        for _ in 0..self.config.max_sessions {
            let mut s = self.open()?;
            match s.state() {
                Ok(_) => sessions.push(s),
                Err(RemoteError::Server { code, message, .. }) if code == "CAPACITY_REACHED" => {
                    let open = sessions.len();
                    for mut s in sessions {
                        s.close();
                    }
                    return Err(PluginError::config(format!(
                        "max_sessions = {}: {base} refused session {} ({message}); start it with max_concurrent_envs >= {} (its environment must set SUPPORTS_CONCURRENT_SESSIONS = True), or lower max_sessions",
                        self.config.max_sessions,
                        open + 1,
                        self.config.max_sessions
                    )));
                }
                Err(e) => return Err(failure(e)),
            }
        }
        for mut s in sessions {
            s.close();
        }
        Ok(vec![
            format!("{base}: healthy"),
            format!("action: {fits}"),
            format!("{} sessions open at once: ok", self.config.max_sessions),
        ])
    }
}

/// `http://HOST:PORT` from the configured URL (a trailing `/` and a `ws://` scheme are
/// accepted).
fn base_url(url: &str) -> Result<String, String> {
    let trimmed = url.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("ws://"))
        .ok_or_else(|| format!("url: `{url}` must start with http:// (TLS is not supported)"))?;
    let rest = rest.strip_suffix("/ws").unwrap_or(rest);
    if rest.is_empty() || rest.contains('/') {
        return Err(format!(
            "url: `{url}` must be the server's base URL, http://HOST:PORT"
        ));
    }
    Ok(format!("http://{rest}"))
}

fn ws_url(base: &str) -> String {
    format!("ws://{}/ws", base.trim_start_matches("http://"))
}

/// The reset's seed: the task's `meta.seed` when it has one, else a hash of its source
/// and id, so every episode of a task's group plays the same problem.
pub fn task_seed(task: &Task) -> u64 {
    if let Some(seed) = task.meta.get("seed").and_then(Value::as_u64) {
        return seed;
    }
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in task.source.bytes().chain([0]).chain(task.id.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h >> 1 // within i64, for servers that read the seed as a signed integer
}

/// What a reset sends beside the seed: the task as `task` (id, source, question,
/// answer, meta); the server passes it on when its environment's `reset` takes `task`.
fn reset_fields(task: &Task) -> Map<String, Value> {
    let mut meta = task.meta.clone();
    meta.remove(SESSION_KEY);
    let mut fields = Map::new();
    fields.insert(
        "task".into(),
        json!({
            "id": task.id, "source": task.source, "question": task.question,
            "answer": task.answer, "meta": meta,
        }),
    );
    fields
}

/// A failure of the server (not of the agent): it fails the episode.
fn failure(e: RemoteError) -> PluginError {
    PluginError::other(e.to_string())
}

impl Environment for OpenEnv {
    fn prepare(&self, task: &Task) -> PluginResult<Task> {
        let (session, observation) = self.open_and_reset(task)?;
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.prepared).insert(number, session);
        let mut task = task.clone();
        if self.config.reset_question {
            task.question = self.observation_text(&observation);
        }
        task.meta.insert(OBSERVATION_KEY.into(), observation);
        task.meta.insert(SESSION_KEY.into(), json!(number));
        Ok(task)
    }

    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec::new(&self.config.tool, "act in the environment: one step")
                .with_input_format(&self.shape.input_format()),
        ]
    }

    fn start_episode(&self, start: &EpisodeStart) -> PluginResult<()> {
        let number = start.task.meta.get(SESSION_KEY).and_then(Value::as_u64);
        let prepared = number.and_then(|n| lock(&self.prepared).remove(&n));
        let Some(Prepared { session, reset_ms }) = prepared else {
            return Err(PluginError::input(format!(
                "episode {}: its task has no session of this environment (`{SESSION_KEY}` in the task's meta comes from prepare)",
                start.episode
            )));
        };
        self.keep_alive.get_or_init(|| KeepAlive::start(&self.live));
        lock(&self.live).insert(
            start.episode,
            Live {
                session: Arc::new(Mutex::new(session)),
                reset_ms,
                step_ms: Vec::new(),
            },
        );
        Ok(())
    }

    fn call_tool(&self, context: &ToolContext, call: &ToolCall) -> PluginResult<ToolResult> {
        if call.name != self.config.tool {
            return Err(PluginError::input(format!(
                "unknown tool `{}`; this environment offers `{}`",
                call.name, self.config.tool
            )));
        }
        let action = match self.shape.action(&call.input) {
            Ok(a) => a,
            // The agent's mistake: it reads why, and the episode goes on.
            Err(why) => return Ok(ToolResult::output(format!("Invalid action: {why}."))),
        };
        let session = lock(&self.live)
            .get(&context.episode)
            .map(|l| l.session.clone())
            .ok_or_else(|| {
                PluginError::input(format!(
                    "episode {} has no open session (a step after the episode ended)",
                    context.episode
                ))
            })?;
        let started = Instant::now();
        let result = lock(&session).step(&action);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if let Some(live) = lock(&self.live).get_mut(&context.episode) {
            live.step_ms.push(ms);
        }
        match result {
            Ok(reply) => Ok(ToolResult {
                output: self.observation_text(&reply.observation),
                done: reply.done,
                reward: reply.reward.map(RewardValue),
            }),
            Err(RemoteError::Server { code, message, .. }) if code == "VALIDATION_ERROR" => {
                Ok(ToolResult::output(format!(
                    "Invalid action: the environment refused it: {message}"
                )))
            }
            Err(e) => Err(failure(e)),
        }
    }

    fn episode_metrics(&self, episode: EpisodeId) -> PluginResult<Metrics> {
        let live = lock(&self.live);
        let Some(live) = live.get(&episode) else {
            return Ok(Metrics::new());
        };
        let mut m = Metrics::new();
        m.insert(metric::RESET_MS.into(), live.reset_ms);
        m.insert(metric::STEPS.into(), live.step_ms.len() as f64);
        if !live.step_ms.is_empty() {
            let mean = live.step_ms.iter().sum::<f64>() / live.step_ms.len() as f64;
            m.insert(metric::STEP_MS.into(), mean);
        }
        Ok(m)
    }

    fn end_episode(&self, end: &EpisodeEnd) -> PluginResult<()> {
        let live = lock(&self.live).remove(&end.episode);
        if let Some(live) = live {
            lock(&live.session).close();
        }
        Ok(())
    }

    fn probe(&self) -> PluginResult<Vec<String>> {
        OpenEnv::probe(self)
    }

    fn max_episodes(&self) -> Option<usize> {
        Some(self.config.max_sessions)
    }

    fn is_slow(&self) -> bool {
        true
    }
}

impl Drop for OpenEnv {
    fn drop(&mut self) {
        // Sessions still open (a run stopped between prepare and start) are closed
        // before the server they belong to is stopped.
        for (_, mut p) in lock(&self.prepared).drain() {
            p.session.close();
        }
        let live: Vec<Live> = lock(&self.live).drain().map(|(_, l)| l).collect();
        for l in live {
            lock(&l.session).close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::parse_config;

    fn config(text: &str) -> OpenEnvConfig {
        parse_config(text).unwrap()
    }

    #[test]
    fn a_server_is_given_by_url_or_by_command_not_both() {
        let err = OpenEnv::new(config("")).err().unwrap();
        assert_eq!(
            err.message(),
            "give the server's `url` (http://HOST:PORT), or a `command` that starts it"
        );
        let err = OpenEnv::new(config("url = \"http://x:1\"\ncommand = [\"srv\"]"))
            .err()
            .unwrap();
        assert!(
            err.message()
                .starts_with("`url` and `command` are both set")
        );
        let err = OpenEnv::new(config("url = \"https://x:1\"")).err().unwrap();
        assert_eq!(
            err.message(),
            "url: `https://x:1` must start with http:// (TLS is not supported)"
        );
        let err = OpenEnv::new(config("url = \"http://x:1/api\""))
            .err()
            .unwrap();
        assert_eq!(
            err.message(),
            "url: `http://x:1/api` must be the server's base URL, http://HOST:PORT"
        );
        let err = OpenEnv::new(config("url = \"http://x:1\"\nmax_sessions = 0"))
            .err()
            .unwrap();
        assert_eq!(err.message(), "max_sessions: must be at least 1");
        let err = OpenEnv::new(config("url = \"http://x:1\"\nmessage_timeout_s = 0"))
            .err()
            .unwrap();
        assert_eq!(
            err.message(),
            "message_timeout_s: must be a number of seconds above 0 and at most 86400, got 0"
        );
    }

    #[test]
    fn urls_are_read_as_the_base_and_the_session_socket() {
        for url in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "ws://127.0.0.1:8000/ws",
        ] {
            let base = base_url(url).unwrap();
            assert_eq!(base, "http://127.0.0.1:8000");
            assert_eq!(ws_url(&base), "ws://127.0.0.1:8000/ws");
        }
    }

    #[test]
    fn a_group_shares_its_seed_and_a_task_may_give_its_own() {
        let task = |id: &str| Task {
            id: id.into(),
            source: "countdown".into(),
            ..Task::default()
        };
        assert_eq!(task_seed(&task("a")), task_seed(&task("a")));
        assert_ne!(task_seed(&task("a")), task_seed(&task("b")));
        assert!(task_seed(&task("a")) <= i64::MAX as u64);
        let mut t = task("a");
        t.meta.insert("seed".into(), json!(42));
        assert_eq!(task_seed(&t), 42);
        // The session number never reaches the server.
        t.meta.insert(SESSION_KEY.into(), json!(3));
        let sent = reset_fields(&t);
        assert_eq!(sent["task"]["meta"], json!({"seed": 42}));
        assert_eq!(sent["task"]["source"], "countdown");
    }
}
