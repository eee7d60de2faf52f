//! A Search-R1 retrieval server as a [`crate::Retriever`]: `POST /retrieve` with
//! bounded retries and a timeout per request, and concurrent calls merged into one
//! request.
//!
//! Batching: many episodes search at about the same moment, each from its own blocking
//! thread. The first caller of a batch (the leader) waits up to `batch_window_ms` for
//! others (followers) to add their queries, then sends them all in one request and hands
//! each caller its own lists. A batch is sent early when it holds `max_batch` queries.
//! Calls with different `k` are never merged (one request has one `topk`).

use crate::{
    passage::Passage,
    protocol::{RetrieveRequest, parse_response},
    retriever::{RetrieveError, Retriever},
};
use std::{
    collections::HashMap,
    sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

/// How to reach a retrieval server.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteConfig {
    /// `http://HOST:PORT/retrieve`; a URL without a path gets `/retrieve`.
    pub url: String,
    /// The most one request may take, connecting and reading the answer included.
    pub timeout_ms: u64,
    /// Requests sent again after a failure that may pass (connection refused or reset,
    /// timeout, HTTP 5xx or 429); a malformed answer or another 4xx is not retried.
    pub retries: u32,
    /// The wait before the first retry; doubled before each next one.
    pub backoff_ms: u64,
    /// How long the first caller of a batch waits for others; 0 sends every call alone.
    pub batch_window_ms: u64,
    /// The most queries in one request.
    pub max_batch: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:8000/retrieve".into(),
            timeout_ms: 5000,
            retries: 2,
            backoff_ms: 100,
            batch_window_ms: 5,
            max_batch: 256,
        }
    }
}

impl RemoteConfig {
    /// The longest a call can take before it returns an error: every attempt timing out
    /// and every back-off slept, plus the batching window.
    pub fn worst_case(&self) -> Duration {
        let attempts = u64::from(self.retries) + 1;
        let backoff: u64 = (0..self.retries)
            .map(|i| self.backoff_ms.saturating_mul(1 << i.min(20)))
            .sum();
        Duration::from_millis(self.timeout_ms * attempts + backoff + self.batch_window_ms)
    }
}

/// A retrieval server, called from many threads.
pub struct RemoteRetriever {
    config: RemoteConfig,
    /// The endpoint, normalized (`/retrieve` added when the URL had no path).
    url: String,
    agent: ureq::Agent,
    /// The batch each `k` is gathering, if any.
    open: Mutex<HashMap<usize, Arc<Batch>>>,
}

/// Queries gathered for one request, and the request's outcome once it is known.
struct Batch {
    k: usize,
    state: Mutex<BatchState>,
    changed: Condvar,
}

#[derive(Default)]
struct BatchState {
    queries: Vec<String>,
    /// No more queries join: it is full, or its leader is sending it.
    closed: bool,
    outcome: Option<Result<Arc<Vec<Vec<Passage>>>, RetrieveError>>,
}

/// Locks a mutex whose holder may have panicked: the state stays consistent (each
/// change is one assignment), so a panic elsewhere must not become a panic here.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RemoteRetriever {
    /// A client of the server at `config.url`. Only `http://` URLs: the client has no TLS
    /// (retrieval servers run beside the trainer).
    pub fn new(config: RemoteConfig) -> Result<Self, RetrieveError> {
        let url = endpoint(&config.url)?;
        let loopback = {
            let uri: ureq::http::Uri = url.parse().expect("checked by endpoint");
            matches!(
                uri.host(),
                Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
            )
        };
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(config.timeout_ms.max(1))))
            // Statuses are read here, to tell a retryable 503 from a final 400.
            .http_status_as_error(false);
        if loopback {
            // A proxy from the environment cannot reach this machine's loopback.
            builder = builder.proxy(None);
        }
        Ok(Self {
            agent: ureq::Agent::new_with_config(builder.build()),
            url,
            config,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    /// Sends `queries` in requests of at most `max_batch`, in order.
    fn send_all(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>, RetrieveError> {
        let mut results = Vec::with_capacity(queries.len());
        for chunk in queries.chunks(self.config.max_batch.max(1)) {
            results.extend(self.send_with_retries(chunk, k)?);
        }
        Ok(results)
    }

    fn send_with_retries(
        &self,
        queries: &[String],
        k: usize,
    ) -> Result<Vec<Vec<Passage>>, RetrieveError> {
        let attempts = self.config.retries + 1;
        let started = std::time::Instant::now();
        let mut timed_out = 0;
        let mut last = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                let backoff = self
                    .config
                    .backoff_ms
                    .saturating_mul(1 << (attempt - 1).min(20));
                std::thread::sleep(Duration::from_millis(backoff));
            }
            match self.send_once(queries, k) {
                Ok(results) => return Ok(results),
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Retry(e)) => {
                    timed_out += u32::from(matches!(e, RetrieveError::Timeout { .. }));
                    last = Some(e);
                }
            }
        }
        Err(match last.expect("at least one attempt") {
            RetrieveError::Timeout { url, millis, .. } => RetrieveError::Timeout {
                url,
                millis,
                timed_out,
                attempts,
                seconds: started.elapsed().as_secs_f64(),
            },
            RetrieveError::Remote { url, message } => RetrieveError::Remote {
                url,
                message: format!("{message} ({attempts} attempts)"),
            },
            other => other,
        })
    }

    fn send_once(&self, queries: &[String], k: usize) -> Result<Vec<Vec<Passage>>, Failure> {
        let request = RetrieveRequest {
            queries: queries.to_vec(),
            topk: Some(k),
            return_scores: true,
        };
        let body = serde_json::to_string(&request).expect("a request serializes");
        let mut response = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json")
            .send(&body)
            .map_err(|e| self.transport_failure(e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_string()
            .map_err(|e| self.transport_failure(e))?;
        if !(200..300).contains(&status) {
            let error = self.remote(format!(
                "HTTP {status}: {}",
                crate::passage::truncate_chars(text.trim(), 300)
            ));
            return Err(if status >= 500 || status == 429 {
                Failure::Retry(error)
            } else {
                Failure::Final(error)
            });
        }
        parse_response(&text, queries.len()).map_err(|message| {
            Failure::Final(RetrieveError::Malformed {
                url: self.url.clone(),
                message,
            })
        })
    }

    fn transport_failure(&self, e: ureq::Error) -> Failure {
        Failure::Retry(match e {
            ureq::Error::Timeout(_) => RetrieveError::Timeout {
                url: self.url.clone(),
                millis: self.config.timeout_ms,
                timed_out: 1,
                attempts: 1,
                seconds: self.config.timeout_ms as f64 / 1000.0,
            },
            e => self.remote(e.to_string()),
        })
    }

    fn remote(&self, message: String) -> RetrieveError {
        RetrieveError::Remote {
            url: self.url.clone(),
            message,
        }
    }

    /// Adds `queries` to the open batch of `k`, or opens one. Returns the batch, where
    /// the caller's queries start in it, and whether the caller leads it.
    fn join(&self, queries: &[String], k: usize) -> (Arc<Batch>, usize, bool) {
        let max = self.config.max_batch;
        let mut open = lock(&self.open);
        if let Some(batch) = open.get(&k).cloned() {
            let mut state = lock(&batch.state);
            if !state.closed && state.queries.len() + queries.len() <= max {
                let offset = state.queries.len();
                state.queries.extend_from_slice(queries);
                if state.queries.len() == max {
                    // Full: its leader sends it now.
                    state.closed = true;
                    open.remove(&k);
                    batch.changed.notify_all();
                }
                drop(state);
                return (batch, offset, false);
            }
            // No room for these queries: the leader sends what it has, now.
            state.closed = true;
            drop(state);
            open.remove(&k);
            batch.changed.notify_all();
        }
        let batch = Arc::new(Batch {
            k,
            state: Mutex::new(BatchState {
                queries: queries.to_vec(),
                ..BatchState::default()
            }),
            changed: Condvar::new(),
        });
        open.insert(k, batch.clone());
        (batch, 0, true)
    }

    /// The leader's part: wait for the window to pass or the batch to fill, close it,
    /// send it, publish the outcome.
    fn lead(&self, batch: &Arc<Batch>) {
        let mut publish = Publish { batch, done: false };
        let deadline = Instant::now() + Duration::from_millis(self.config.batch_window_ms);
        {
            let mut state = lock(&batch.state);
            while !state.closed {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                state = batch
                    .changed
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        // Lock order: `open`, then the batch (as in `join`).
        let queries = {
            let mut open = lock(&self.open);
            if open.get(&batch.k).is_some_and(|b| Arc::ptr_eq(b, batch)) {
                open.remove(&batch.k);
            }
            let mut state = lock(&batch.state);
            state.closed = true;
            std::mem::take(&mut state.queries)
        };
        let outcome = self.send_all(&queries, batch.k).map(Arc::new);
        publish.set(outcome);
    }
}

/// A response bigger than this is refused (a misbehaving server must not exhaust
/// memory); 512 queries of 10 passages of 2 KB are 10 MB.
const MAX_RESPONSE_BYTES: u64 = 256 << 20;

/// What one attempt's failure means for the next.
enum Failure {
    Retry(RetrieveError),
    Final(RetrieveError),
}

/// Publishes a batch's outcome exactly once: if the leader unwinds before it has one,
/// the followers get an error instead of waiting forever.
struct Publish<'a> {
    batch: &'a Batch,
    done: bool,
}

impl Publish<'_> {
    fn set(&mut self, outcome: Result<Arc<Vec<Vec<Passage>>>, RetrieveError>) {
        lock(&self.batch.state).outcome = Some(outcome);
        self.done = true;
        self.batch.changed.notify_all();
    }
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        if !self.done {
            lock(&self.batch.state).outcome = Some(Err(RetrieveError::Remote {
                url: String::new(),
                message: "the request carrying this search was abandoned (its sender panicked)"
                    .into(),
            }));
            self.batch.changed.notify_all();
        }
    }
}

impl Retriever for RemoteRetriever {
    fn search_batch(
        &self,
        queries: &[String],
        k: usize,
    ) -> Result<Vec<Vec<Passage>>, RetrieveError> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        if self.config.batch_window_ms == 0 || queries.len() >= self.config.max_batch {
            return self.send_all(queries, k);
        }
        let (batch, offset, leader) = self.join(queries, k);
        if leader {
            self.lead(&batch);
        }
        let mut state = lock(&batch.state);
        while state.outcome.is_none() {
            state = batch
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match state.outcome.as_ref().expect("waited for it") {
            Ok(all) => Ok(all[offset..offset + queries.len()].to_vec()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The endpoint of a server URL: `http://` only, `/retrieve` added to a URL without a
/// path.
fn endpoint(url: &str) -> Result<String, RetrieveError> {
    let bad = |message: &str| RetrieveError::Remote {
        url: url.to_string(),
        message: message.to_string(),
    };
    let uri: ureq::http::Uri = url.parse().map_err(|e| bad(&format!("not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(bad(
                "https is not supported (the client has no TLS); use http:// to a server on this machine or network",
            ));
        }
        _ => return Err(bad("not an http:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host in the URL"));
    }
    Ok(if uri.path() == "/" && uri.query().is_none() {
        format!("{}/retrieve", url.trim_end_matches('/'))
    } else {
        url.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_path_get_retrieve() {
        assert_eq!(
            endpoint("http://127.0.0.1:8000").unwrap(),
            "http://127.0.0.1:8000/retrieve"
        );
        assert_eq!(
            endpoint("http://127.0.0.1:8000/").unwrap(),
            "http://127.0.0.1:8000/retrieve"
        );
        assert_eq!(
            endpoint("http://h:1/custom/path").unwrap(),
            "http://h:1/custom/path"
        );
        assert_eq!(
            endpoint("https://h/retrieve").unwrap_err().to_string(),
            "retriever https://h/retrieve: https is not supported (the client has no TLS); use http:// to a server on this machine or network"
        );
        assert_eq!(
            endpoint("localhost:8000").unwrap_err().to_string(),
            "retriever localhost:8000: not an http:// URL"
        );
    }

    #[test]
    fn the_worst_case_counts_every_attempt_and_back_off() {
        let c = RemoteConfig {
            timeout_ms: 1000,
            retries: 2,
            backoff_ms: 100,
            batch_window_ms: 5,
            ..RemoteConfig::default()
        };
        // 3 attempts, back-offs 100 + 200, the window.
        assert_eq!(c.worst_case(), Duration::from_millis(3305));
    }
}
