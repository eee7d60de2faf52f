//! A blocking HTTP client for one engine: JSON POSTs with a timeout, bounded retries with
//! exponential backoff on what may pass (no connection, a timeout, 429, 5xx), none on
//! what will not (4xx: the request is at fault), and a health wait.

use super::{EngineError, EngineOutput, EngineRequest, Protocol};
use serde_json::Value;
use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

/// How often a call is tried, and how long it waits before trying again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// The wait before the second attempt; it doubles after each.
    pub backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 3,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Answers larger than this are refused (a generation's JSON is a few hundred bytes per
/// token).
const MAX_ANSWER_BYTES: u64 = 256 << 20;

pub struct EngineClient {
    url: String,
    protocol: Box<dyn Protocol>,
    agent: ureq::Agent,
    retry: Retry,
    /// The model's vocabulary size: ids at or above it are refused.
    vocab: Option<usize>,
}

enum Failure {
    Retry(String),
    Final(EngineError),
}

impl EngineClient {
    /// A client of the engine at `url` (`http://host:port`, no trailing path) speaking
    /// `protocol`; each request may take at most `timeout`.
    pub fn new(
        url: &str,
        protocol: Box<dyn Protocol>,
        timeout: Duration,
        retry: Retry,
    ) -> EngineClient {
        let url = url.trim_end_matches('/').to_string();
        let loopback = url
            .parse::<ureq::http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .is_some_and(|h| matches!(h.as_str(), "127.0.0.1" | "localhost" | "[::1]" | "::1"));
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            // Statuses are read here, to tell a retryable 503 from a final 400.
            .http_status_as_error(false);
        if loopback {
            // A proxy from the environment cannot reach this machine's loopback.
            builder = builder.proxy(None);
        }
        EngineClient {
            url,
            protocol,
            agent: ureq::Agent::new_with_config(builder.build()),
            retry,
            vocab: None,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Refuses generations with an id at or above `vocab` (the model's vocabulary size)
    /// from now on; without it only negative ids are refused.
    pub fn set_vocab(&mut self, vocab: usize) {
        self.vocab = Some(vocab);
    }

    pub fn protocol(&self) -> &dyn Protocol {
        self.protocol.as_ref()
    }

    /// One generation, checked ([`super::check_output`]): an answer that breaks a rule
    /// is an [`EngineError::Invalid`] naming the engine, its address, the field and the
    /// value.
    pub fn generate(&self, request: &EngineRequest) -> Result<EngineOutput, EngineError> {
        let body = self.protocol.generate_body(request);
        let answer = self.post(self.protocol.generate_path(), &body, "generate")?;
        let invalid = |why: String| EngineError::Invalid {
            engine: self.protocol.name(),
            url: self.url.clone(),
            why,
        };
        let mut out = self.protocol.parse_generate(&answer).map_err(|e| match e {
            EngineError::Answer { what, why, .. } => {
                invalid(format!("{what}: unexpected answer: {why}"))
            }
            other => other,
        })?;
        super::check_output(
            &mut out,
            self.protocol.answer_fields(),
            request.max_new_tokens,
            self.vocab,
        )
        .map_err(invalid)?;
        Ok(out)
    }

    /// Every request's generation, at most `parallel` in flight at once (the engine
    /// batches concurrent requests itself); in the order of `requests`.
    pub fn generate_all(
        &self,
        requests: &[EngineRequest],
        parallel: usize,
    ) -> Vec<Result<EngineOutput, EngineError>> {
        let next = AtomicUsize::new(0);
        let mut results: Vec<Option<Result<EngineOutput, EngineError>>> =
            (0..requests.len()).map(|_| None).collect();
        let done = std::sync::Mutex::new(&mut results);
        std::thread::scope(|s| {
            for _ in 0..parallel.clamp(1, requests.len().max(1)) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(r) = requests.get(i) else { break };
                        let out = self.generate(r);
                        done.lock().expect("no panic holds it")[i] = Some(out);
                    }
                });
            }
        });
        results
            .into_iter()
            .map(|r| r.expect("every request was answered"))
            .collect()
    }

    /// POSTs `body` (JSON) to `path` and returns the JSON answer (`null` for an empty
    /// one), retrying what may pass.
    pub fn post(&self, path: &str, body: &Value, what: &'static str) -> Result<Value, EngineError> {
        self.with_retries(what, || self.post_once(path, body, what))
    }

    /// GETs `path`; the JSON answer, or `null` when it is not JSON.
    pub fn get(&self, path: &str, what: &'static str) -> Result<Value, EngineError> {
        self.with_retries(what, || {
            let response = self.agent.get(format!("{}{path}", self.url)).call();
            self.read(response, what)
        })
    }

    /// Waits until the engine answers its health path with 200, at most `limit`.
    pub fn wait_ready(&self, limit: Duration) -> Result<(), EngineError> {
        let started = Instant::now();
        let path = self.protocol.health_path();
        loop {
            let last = match self.agent.get(format!("{}{path}", self.url)).call() {
                Ok(r) if r.status().as_u16() == 200 => return Ok(()),
                Ok(r) => format!("HTTP {}", r.status().as_u16()),
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= limit {
                return Err(EngineError::NotReady {
                    engine: self.protocol.name(),
                    url: self.url.clone(),
                    path,
                    seconds: limit.as_secs_f64(),
                    last,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn with_retries(
        &self,
        what: &'static str,
        once: impl Fn() -> Result<Value, Failure>,
    ) -> Result<Value, EngineError> {
        let attempts = self.retry.attempts.max(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            if attempt > 0 {
                std::thread::sleep(
                    self.retry
                        .backoff
                        .saturating_mul(1 << (attempt - 1).min(16)),
                );
            }
            match once() {
                Ok(v) => return Ok(v),
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Retry(why)) => last = why,
            }
        }
        Err(EngineError::Unreachable {
            engine: self.protocol.name(),
            url: self.url.clone(),
            what,
            attempts,
            last,
        })
    }

    fn post_once(&self, path: &str, body: &Value, what: &'static str) -> Result<Value, Failure> {
        let response = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .send(body.to_string());
        self.read(response, what)
    }

    fn read(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        what: &'static str,
    ) -> Result<Value, Failure> {
        let mut response = response.map_err(|e| Failure::Retry(e.to_string()))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| Failure::Retry(e.to_string()))?;
        if !(200..300).contains(&status) {
            let body: String = text.trim().chars().take(300).collect();
            return Err(if status >= 500 || status == 429 {
                Failure::Retry(format!("HTTP {status}: {body}"))
            } else {
                Failure::Final(EngineError::Status {
                    engine: self.protocol.name(),
                    url: self.url.clone(),
                    what,
                    status,
                    body,
                })
            });
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}
