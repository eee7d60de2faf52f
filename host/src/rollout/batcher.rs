//! One thread per model: it owns the backend (and so the model's tensors), gathers the
//! requests of every episode using that model into batches, and answers each request
//! through its own channel. Agents that share a model share its batcher.

use super::{
    backend::{Backend, BackendRequest},
    error::RolloutError,
};
use crate::model::Generation;
use std::{
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};
use tokio::sync::oneshot;

#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// At most this many sequences per batch.
    pub max_sequences: usize,
    /// At most this many tokens (prompt + max new) per batch.
    pub max_tokens: usize,
    /// After the first request arrives, wait this long for more.
    pub gather_window: Duration,
    /// Held while a batch runs. Batchers whose models share a device share the lock, so
    /// they take turns instead of oversubscribing it (two models on two CPU cores each
    /// starting two compute threads run slower than one after the other).
    pub device_lock: Option<Arc<Mutex<()>>>,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        Self {
            max_sequences: 64,
            max_tokens: 64 * 1024,
            gather_window: Duration::from_millis(5),
            device_lock: None,
        }
    }
}

/// Counters of what the batcher did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatcherStats {
    pub batches: usize,
    pub requests: usize,
    pub largest_batch: usize,
    pub generated_tokens: usize,
    pub busy_seconds: f64,
}

struct Job {
    request: BackendRequest,
    reply: oneshot::Sender<Result<Generation, RolloutError>>,
}

/// A cheap, cloneable handle to a model's batcher.
#[derive(Clone)]
pub struct BatcherHandle {
    model: String,
    jobs: mpsc::Sender<Job>,
    stats: Arc<Mutex<BatcherStats>>,
}

impl BatcherHandle {
    /// Queues `request` and waits for its generation.
    pub async fn generate(&self, request: BackendRequest) -> Result<Generation, RolloutError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { request, reply })
            .map_err(|_| RolloutError::BatcherGone {
                model: self.model.clone(),
            })?;
        answer.await.map_err(|_| RolloutError::BatcherGone {
            model: self.model.clone(),
        })?
    }

    pub fn stats(&self) -> BatcherStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn model(&self) -> &str {
        &self.model
    }
}

/// Starts the batcher thread of `model`. `make` runs on that thread and builds the
/// backend there, so the model's tensors are created by the thread that uses them.
pub fn spawn_batcher<F>(
    model: &str,
    config: BatcherConfig,
    make: F,
) -> Result<BatcherHandle, RolloutError>
where
    F: FnOnce() -> Result<Box<dyn Backend>, String> + Send + 'static,
{
    let (jobs, queue) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let stats = Arc::new(Mutex::new(BatcherStats::default()));
    let thread_stats = stats.clone();
    let name = model.to_string();
    std::thread::Builder::new()
        .name(format!("batcher-{model}"))
        .spawn(move || {
            let mut backend = match make() {
                Ok(b) => {
                    let _ = ready_tx.send(Ok(()));
                    b
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            serve(&name, backend.as_mut(), &queue, &config, &thread_stats);
        })
        .map_err(|e| RolloutError::Model {
            model: model.to_string(),
            message: format!("cannot start its thread: {e}"),
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(BatcherHandle {
            model: model.to_string(),
            jobs,
            stats,
        }),
        Ok(Err(message)) => Err(RolloutError::Model {
            model: model.to_string(),
            message,
        }),
        Err(_) => Err(RolloutError::Model {
            model: model.to_string(),
            message: "its thread died while loading".into(),
        }),
    }
}

fn serve(
    model: &str,
    backend: &mut dyn Backend,
    queue: &mpsc::Receiver<Job>,
    config: &BatcherConfig,
    stats: &Mutex<BatcherStats>,
) {
    let cost = |r: &BackendRequest| r.prompt.len() + r.params.max_new_tokens;
    // Blocks until the first job of a batch; ends when every handle is dropped.
    while let Ok(first) = queue.recv() {
        let mut tokens = cost(&first.request);
        let mut batch = vec![first];
        let deadline = Instant::now() + config.gather_window;
        while batch.len() < config.max_sequences {
            let left = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(left) {
                Ok(job) => {
                    let c = cost(&job.request);
                    if tokens + c > config.max_tokens {
                        // Serve what we have; this job opens the next batch.
                        run_batch(model, backend, std::mem::take(&mut batch), config, stats);
                        tokens = 0;
                    }
                    tokens += c;
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            run_batch(model, backend, batch, config, stats);
        }
    }
}

fn run_batch(
    model: &str,
    backend: &mut dyn Backend,
    batch: Vec<Job>,
    config: &BatcherConfig,
    stats: &Mutex<BatcherStats>,
) {
    // A poisoned lock only means another batcher panicked mid-batch; the device is fine.
    let _turn = config
        .device_lock
        .as_ref()
        .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
    let started = Instant::now();
    let requests: Vec<BackendRequest> = batch.iter().map(|j| j.request.clone()).collect();
    // A panic in the backend must not leave episodes waiting forever.
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| backend.generate(&requests)))
            .unwrap_or_else(|_| Err("the model backend panicked".to_string()));
    if let Ok(mut s) = stats.lock() {
        s.batches += 1;
        s.requests += batch.len();
        s.largest_batch = s.largest_batch.max(batch.len());
        s.busy_seconds += started.elapsed().as_secs_f64();
        if let Ok(gens) = &result {
            s.generated_tokens += gens.iter().map(|g| g.tokens.len()).sum::<usize>();
        }
    }
    match result {
        Ok(gens) if gens.len() == batch.len() => {
            for (job, g) in batch.into_iter().zip(gens) {
                let _ = job.reply.send(Ok(g));
            }
        }
        Ok(gens) => {
            let message = format!(
                "the backend returned {} generations for {} requests",
                gens.len(),
                batch.len()
            );
            for job in batch {
                let _ = job.reply.send(Err(RolloutError::Model {
                    model: model.into(),
                    message: message.clone(),
                }));
            }
        }
        Err(message) => {
            for job in batch {
                let _ = job.reply.send(Err(RolloutError::Model {
                    model: model.into(),
                    message: message.clone(),
                }));
            }
        }
    }
}
