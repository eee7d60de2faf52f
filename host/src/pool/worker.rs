//! One thread per model (ARCHITECTURE.md): it owns the model's backend — weights, optimizer
//! moments, reference copy — and is the only thread that touches them. Everyone else
//! holds a cheap, cloneable [`ModelHandle`] and sends commands: generation requests of
//! concurrent episodes are gathered into batches; updates, log-probs, saves and device
//! moves run between batches, where the weights live. A request the backend refuses
//! (past the context, too large alone) is answered at once; a batch grows only while
//! its memory estimate fits; a generation with a non-finite log-prob fails its batch.
//!
//! Batches form in one of two ways ([`Batching`]): deterministically, in the rounds of
//! a rollout (`rounds.rs`: all requests of a round, sorted by what they ask, cut into
//! batches by the limits and the memory check), or timed (what arrives within the gather
//! window). Either way a row's result does not depend on its batch (`model::sampler`).

use super::backend::{Backend, BackendRequest};
use super::error::{BackendError, WorkerError};
use super::rounds::{Batching, RoundEnd, Rounds};
use crate::model::Generation;
use std::{
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};
use tokio::sync::oneshot;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// At most this many sequences per generation batch.
    pub max_sequences: usize,
    /// At most this many tokens (prompt + max new) per generation batch.
    pub max_tokens: usize,
    /// After the first generation request arrives, wait this long for more (a full
    /// batch starts at once). Timed batching only.
    pub gather_window: Duration,
    /// How batches form: in rounds of the rollout, or by the gather window.
    pub batching: Batching,
}

/// Held while a worker computes. Workers whose models share a device share one
/// ([`spawn_worker_on`]), so they take turns instead of oversubscribing it (two models
/// on two CPU cores each starting two compute threads run slower than one after the
/// other). It is the pool's runtime state, not a setting: [`WorkerConfig`] stays plain.
#[derive(Debug, Clone, Default)]
pub struct DeviceTurn(Arc<Mutex<()>>);

impl DeviceTurn {
    fn take(&self) -> std::sync::MutexGuard<'_, ()> {
        // A poisoned lock only means another worker panicked mid-batch; the device is fine.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            max_sequences: 64,
            max_tokens: 64 * 1024,
            gather_window: Duration::from_millis(5),
            batching: Batching::Deterministic,
        }
    }
}

/// Counters of what the worker did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerStats {
    pub batches: usize,
    pub requests: usize,
    pub largest_batch: usize,
    pub generated_tokens: usize,
    /// Seconds spent generating.
    pub busy_seconds: f64,
    /// Seconds spent in other commands (updates, log-probs, saves).
    pub command_seconds: f64,
}

type Call = Box<dyn FnOnce(&mut dyn Backend) + Send>;

pub(super) enum Command {
    Generate {
        request: BackendRequest,
        slot: usize,
        reply: oneshot::Sender<Result<Generation, WorkerError>>,
        /// Part of a rollout's round: held until the round closes ([`Command::Flush`]).
        in_round: bool,
    },
    /// The round closed: serve every request held for it.
    Flush,
    Call {
        what: &'static str,
        call: Call,
    },
}

/// A closed round is one more command in the worker's queue, after the round's requests.
impl RoundEnd for mpsc::Sender<Command> {
    fn round_closed(&self) {
        let _ = self.send(Command::Flush);
    }
    fn clone_box(&self) -> Box<dyn RoundEnd> {
        Box::new(self.clone())
    }
}

/// A cheap, cloneable handle to a model's worker.
#[derive(Clone)]
pub struct ModelHandle {
    model: Arc<str>,
    /// Which of the worker's models this handle speaks for (a worker serving several
    /// LoRA adapters on one base has one slot per adapter).
    slot: usize,
    commands: mpsc::Sender<Command>,
    stats: Arc<Mutex<WorkerStats>>,
    batching: Batching,
    // Declared after `commands`, so the last handle closes the queue before it joins.
    _thread: Arc<WorkerThread>,
}

/// The worker's thread, joined when the last handle goes. Without the join, a command
/// that returns early (an evaluation stopped at its failure limit) would exit the
/// process while the worker is still inside libtorch, whose teardown then fails under
/// it; with it, the worker finishes the batch it is running (its replies go nowhere)
/// and returns when it sees the closed queue.
struct WorkerThread(Mutex<Option<std::thread::JoinHandle<()>>>);

impl Drop for WorkerThread {
    fn drop(&mut self) {
        let handle = self.0.get_mut().ok().and_then(Option::take);
        if let Some(handle) = handle
            && handle.thread().id() != std::thread::current().id()
        {
            let _ = handle.join();
        }
    }
}

impl ModelHandle {
    pub fn model(&self) -> &str {
        &self.model
    }

    /// A handle to slot `slot` of the same worker, named `model` in errors.
    pub fn for_slot(&self, model: &str, slot: usize) -> ModelHandle {
        ModelHandle {
            model: model.into(),
            slot,
            ..self.clone()
        }
    }

    /// Whether `other` is served by the same worker thread.
    pub fn same_worker(&self, other: &ModelHandle) -> bool {
        Arc::ptr_eq(&self._thread, &other._thread)
    }

    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn gone(&self) -> WorkerError {
        WorkerError::Gone {
            model: self.model.to_string(),
        }
    }

    /// Queues a generation request and waits for it; it is batched with the requests
    /// of every other episode that uses this model. Inside a rollout's rounds
    /// ([`Rounds::scope`]) on a deterministic worker it waits for its round to close.
    pub async fn generate(&self, request: BackendRequest) -> Result<Generation, WorkerError> {
        let (reply, answer) = oneshot::channel();
        let rounds = match self.batching {
            Batching::Deterministic => Rounds::current(),
            Batching::Timed => None,
        };
        self.commands
            .send(Command::Generate {
                request,
                slot: self.slot,
                reply,
                in_round: rounds.is_some(),
            })
            .map_err(|_| self.gone())?;
        // Counted only once sent, so the flush that closes the round comes after it.
        let _ticket = rounds.map(|r| r.wait(Arc::as_ptr(&self._thread) as usize, &self.commands));
        answer.await.map_err(|_| self.gone())?
    }

    /// Runs `f` on the worker thread with its backend and this handle's slot (the
    /// model the backend's commands are to act on), and waits for the result. The typed
    /// commands (update, save, …) are built on this; `what` names it in errors.
    pub fn call<T, F>(&self, what: &'static str, f: F) -> Result<T, WorkerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Backend, usize) -> Result<T, BackendError> + Send + 'static,
    {
        // A model parked in host memory comes back first; a failure to bring it back is
        // this call's error.
        self.call_where_it_is(what, move |backend, slot| {
            backend.onload()?;
            f(backend, slot)
        })
    }

    /// The policy version of the weights this handle's model generates with now (its
    /// updates so far), asked where the model is.
    pub fn policy_version(&self) -> Result<u64, WorkerError> {
        self.call_where_it_is("reading its policy version", |b, slot| b.version(slot))
    }

    /// [`Self::call`] without bringing the model back from host memory first: for the
    /// commands that move it themselves or only ask where it is (offload, residency,
    /// save, restore, update).
    fn call_where_it_is<T, F>(&self, what: &'static str, f: F) -> Result<T, WorkerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Backend, usize) -> Result<T, BackendError> + Send + 'static,
    {
        let (reply, answer) = mpsc::channel();
        let model = self.model.to_string();
        let slot = self.slot;
        let call: Call = Box::new(move |backend| {
            let run = || f(backend, slot);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                .unwrap_or_else(|panic| Err(BackendError::Panicked(panic_message(panic.as_ref()))))
                .map_err(|source| WorkerError::backend(&model, what, source));
            let _ = reply.send(result);
        });
        self.commands
            .send(Command::Call { what, call })
            .map_err(|_| self.gone())?;
        answer.recv().map_err(|_| self.gone())?
    }
}

impl ModelHandle {
    /// log p of each response token under the current weights (see [`Backend::logprobs`]).
    pub fn logprobs(
        &self,
        pairs: Vec<super::backend::ScoreRequest>,
    ) -> Result<Vec<Vec<f32>>, WorkerError> {
        self.call("log-probs", move |b, slot| b.logprobs(slot, &pairs))
    }

    /// Moves the model (weights, optimizer state, reference) to `device`.
    pub fn to_device(&self, device: tch::Device) -> Result<(), WorkerError> {
        self.call("move to a device", move |b, _| b.to_device(device))
    }

    /// Saves this handle's model into `dir` (the backend brings back what it needs and
    /// parks it again afterwards).
    pub fn save(&self, dir: std::path::PathBuf) -> Result<(), WorkerError> {
        self.call_where_it_is("save", move |b, slot| b.save(slot, &dir))
    }

    /// Gathers this handle's sharded optimizer state from the job's ranks, rank 0
    /// writing it `to` a file for its next save (every rank calls it, models in the same
    /// order; a whole state needs nothing).
    pub fn gather_optimizer(&self, to: Option<super::GatherTo>) -> Result<(), WorkerError> {
        self.call_where_it_is("gather the optimizer state", move |b, slot| {
            b.gather_optimizer(slot, to)
        })
    }

    /// Restores this handle's model from `dir`.
    pub fn restore(&self, dir: std::path::PathBuf) -> Result<(), WorkerError> {
        self.call_where_it_is("restore", move |b, slot| b.restore(slot, &dir))
    }

    /// One training update of this handle's model.
    pub fn update(
        &self,
        batch: crate::update::UpdateBatch,
    ) -> Result<crate::update::UpdateReport, WorkerError> {
        self.call_where_it_is("update", move |b, slot| b.update(slot, &batch))
    }

    /// Parks `parts` of the worker's models in host memory until a command needs them.
    pub fn offload(&self, parts: super::backend::OffloadParts) -> Result<(), WorkerError> {
        self.call_where_it_is("offload", move |b, _| b.offload(parts))
    }

    /// Where the worker's tensors are and what moving them has cost.
    pub fn residency(&self) -> Result<super::backend::Residency, WorkerError> {
        self.call_where_it_is("residency", |b, _| Ok(b.residency()))
    }
}

/// The text of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Starts the worker thread of `model`. `make` runs on that thread and builds the
/// backend there, so the model's tensors are created by the thread that owns them.
pub fn spawn_worker<F>(
    model: &str,
    config: WorkerConfig,
    make: F,
) -> Result<ModelHandle, WorkerError>
where
    F: FnOnce() -> Result<Box<dyn Backend>, BackendError> + Send + 'static,
{
    spawn_worker_on(model, config, DeviceTurn::default(), make)
}

/// [`spawn_worker`] taking turns on its device with the other workers that hold a clone
/// of `turn`.
pub fn spawn_worker_on<F>(
    model: &str,
    config: WorkerConfig,
    turn: DeviceTurn,
    make: F,
) -> Result<ModelHandle, WorkerError>
where
    F: FnOnce() -> Result<Box<dyn Backend>, BackendError> + Send + 'static,
{
    let (commands, queue) = mpsc::channel::<Command>();
    let batching = config.batching;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), BackendError>>();
    let stats = Arc::new(Mutex::new(WorkerStats::default()));
    let thread_stats = stats.clone();
    let name: Arc<str> = model.into();
    let thread_name = name.clone();
    let thread = std::thread::Builder::new()
        .name(format!("model-{model}"))
        .spawn(move || {
            let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(make))
                .unwrap_or_else(|p| Err(BackendError::Panicked(panic_message(p.as_ref()))));
            let mut backend = match made {
                Ok(b) => {
                    let _ = ready_tx.send(Ok(()));
                    b
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            serve(
                &thread_name,
                backend.as_mut(),
                &queue,
                &config,
                &turn,
                &thread_stats,
            );
        })
        .map_err(|source| WorkerError::Spawn {
            model: model.to_string(),
            source,
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ModelHandle {
            model: name,
            slot: 0,
            commands,
            stats,
            batching,
            _thread: Arc::new(WorkerThread(Mutex::new(Some(thread)))),
        }),
        Ok(Err(source)) => Err(WorkerError::backend(model, "load", source)),
        Err(_) => Err(WorkerError::Gone {
            model: model.to_string(),
        }),
    }
}

struct GenJob {
    request: BackendRequest,
    slot: usize,
    reply: oneshot::Sender<Result<Generation, WorkerError>>,
}

/// The size of a batch being gathered: what the token cap and the memory check see.
#[derive(Clone, Copy)]
struct BatchShape {
    rows: usize,
    /// Σ (prompt + max new tokens), against [`WorkerConfig::max_tokens`].
    tokens: usize,
    longest_prompt: usize,
    most_new: usize,
}

impl BatchShape {
    fn of(r: &BackendRequest) -> Self {
        Self {
            rows: 1,
            tokens: r.prompt.len().saturating_add(r.params.max_new_tokens),
            longest_prompt: r.prompt.len(),
            most_new: r.params.max_new_tokens,
        }
    }

    fn with(self, r: &BackendRequest) -> Self {
        let one = Self::of(r);
        Self {
            rows: self.rows + 1,
            tokens: self.tokens.saturating_add(one.tokens),
            longest_prompt: self.longest_prompt.max(one.longest_prompt),
            most_new: self.most_new.max(one.most_new),
        }
    }
}

/// A job for the next batch, or `None` when the backend refused the request (past the
/// model's context, too large alone): its episode gets the error at once, and the batch
/// the others are gathered into is not failed for it.
fn admit(
    model: &str,
    backend: &mut dyn Backend,
    request: BackendRequest,
    slot: usize,
    reply: oneshot::Sender<Result<Generation, WorkerError>>,
) -> Option<GenJob> {
    let verdict =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| backend.admit(&request)))
            .unwrap_or_else(|p| Err(BackendError::Panicked(panic_message(p.as_ref()))));
    match verdict {
        Ok(()) => Some(GenJob {
            request,
            slot,
            reply,
        }),
        Err(source) => {
            let _ = reply.send(Err(WorkerError::backend(model, "generation", source)));
            None
        }
    }
}

fn serve(
    model: &str,
    backend: &mut dyn Backend,
    queue: &mpsc::Receiver<Command>,
    config: &WorkerConfig,
    turn: &DeviceTurn,
    stats: &Mutex<WorkerStats>,
) {
    // A command that arrived while a batch was being gathered runs right after it.
    let mut held: Option<Command> = None;
    // Requests of the open round, served when it closes.
    let mut round: Vec<GenJob> = Vec::new();
    loop {
        let first = match held.take() {
            Some(c) => c,
            // Blocks until the next command; ends when every handle is dropped.
            None => match queue.recv() {
                Ok(c) => c,
                Err(_) => return,
            },
        };
        let first = match first {
            Command::Call { what, call } => {
                run_call(what, call, backend, turn, stats);
                continue;
            }
            Command::Flush => {
                serve_round(
                    model,
                    backend,
                    std::mem::take(&mut round),
                    config,
                    turn,
                    stats,
                );
                continue;
            }
            Command::Generate {
                request,
                slot,
                reply,
                in_round: true,
            } => {
                round.extend(admit(model, backend, request, slot, reply));
                continue;
            }
            Command::Generate {
                request,
                slot,
                reply,
                in_round: false,
            } => match admit(model, backend, request, slot, reply) {
                Some(job) => job,
                None => continue,
            },
        };
        let mut shape = BatchShape::of(&first.request);
        let mut batch = vec![first];
        let deadline = Instant::now() + config.gather_window;
        while batch.len() < config.max_sequences {
            let left = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(left) {
                Ok(Command::Generate {
                    request,
                    slot,
                    reply,
                    in_round: true,
                }) => round.extend(admit(model, backend, request, slot, reply)),
                Ok(Command::Generate {
                    request,
                    slot,
                    reply,
                    in_round: false,
                }) => {
                    let Some(job) = admit(model, backend, request, slot, reply) else {
                        continue;
                    };
                    let grown = shape.with(&job.request);
                    if grown.tokens > config.max_tokens
                        || !backend.fits(grown.rows, grown.longest_prompt, grown.most_new)
                    {
                        // Serve what we have; this job opens the next batch.
                        run_batch(model, backend, std::mem::take(&mut batch), turn, stats);
                        shape = BatchShape::of(&job.request);
                    } else {
                        shape = grown;
                    }
                    batch.push(job);
                }
                Ok(call) => {
                    held = Some(call);
                    break;
                }
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            run_batch(model, backend, batch, turn, stats);
        }
    }
}

/// Serves a closed round: its requests (those whose episode still waits) sorted by what
/// they ask — slot, then seed, prompt and settings — so the batches are the same
/// whatever order the requests arrived in, then cut into batches in that order by the
/// row and token limits and the memory check; one adapter slot per batch (LoRA deltas
/// are computed per adapter, over that adapter's rows).
fn serve_round(
    model: &str,
    backend: &mut dyn Backend,
    mut jobs: Vec<GenJob>,
    config: &WorkerConfig,
    turn: &DeviceTurn,
    stats: &Mutex<WorkerStats>,
) {
    jobs.retain(|j| !j.reply.is_closed());
    jobs.sort_by(|a, b| {
        let key = |j: &GenJob| {
            let p = &j.request.params;
            (
                j.slot,
                p.seed,
                p.max_new_tokens,
                p.temperature.to_bits(),
                p.top_p.to_bits(),
                p.top_k,
            )
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.request.prompt.cmp(&b.request.prompt))
            .then_with(|| {
                a.request
                    .params
                    .stop_token_ids
                    .cmp(&b.request.params.stop_token_ids)
            })
            .then_with(|| a.request.stop.cmp(&b.request.stop))
    });
    let mut batch: Vec<GenJob> = Vec::new();
    let mut shape: Option<BatchShape> = None;
    for job in jobs {
        let grown = match shape {
            Some(s) => s.with(&job.request),
            None => BatchShape::of(&job.request),
        };
        let full = shape.is_some()
            && (batch.len() >= config.max_sequences
                || batch[0].slot != job.slot
                || grown.tokens > config.max_tokens
                || !backend.fits(grown.rows, grown.longest_prompt, grown.most_new));
        if full {
            run_batch(model, backend, std::mem::take(&mut batch), turn, stats);
            shape = Some(BatchShape::of(&job.request));
        } else {
            shape = Some(grown);
        }
        batch.push(job);
    }
    if !batch.is_empty() {
        run_batch(model, backend, batch, turn, stats);
    }
}

/// Every generation must carry one finite log-prob per token: a NaN would reach the
/// trainer's ratios and the reports (as `null`). `request` is its place in the batch.
fn check_logprobs(request: usize, g: &Generation) -> Result<(), BackendError> {
    if g.logprobs.len() != g.tokens.len() {
        return Err(BackendError::LogprobCount {
            request,
            tokens: g.tokens.len(),
            logprobs: g.logprobs.len(),
        });
    }
    if let Some((i, &value)) = g.logprobs.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(BackendError::NonFiniteLogprob {
            request,
            token: i + 1,
            value,
        });
    }
    Ok(())
}

fn run_call(
    what: &'static str,
    call: Call,
    backend: &mut dyn Backend,
    turn: &DeviceTurn,
    stats: &Mutex<WorkerStats>,
) {
    let _turn = turn.take();
    let started = Instant::now();
    tracing::debug!(command = what, "worker command");
    call(backend);
    if let Ok(mut s) = stats.lock() {
        s.command_seconds += started.elapsed().as_secs_f64();
    }
}

fn run_batch(
    model: &str,
    backend: &mut dyn Backend,
    batch: Vec<GenJob>,
    turn: &DeviceTurn,
    stats: &Mutex<WorkerStats>,
) {
    let _turn = turn.take();
    let started = Instant::now();
    let requests: Vec<BackendRequest> = batch.iter().map(|j| j.request.clone()).collect();
    let slots: Vec<usize> = batch.iter().map(|j| j.slot).collect();
    // A panic in the backend must not leave episodes waiting forever.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        backend.generate_each(&requests, &slots)
    }))
    .unwrap_or_else(|p| Err(BackendError::Panicked(panic_message(p.as_ref()))));
    if let Ok(mut s) = stats.lock() {
        s.batches += 1;
        s.requests += batch.len();
        s.largest_batch = s.largest_batch.max(batch.len());
        s.busy_seconds += started.elapsed().as_secs_f64();
        if let Ok(gens) = &result {
            s.generated_tokens += gens.iter().flatten().map(|g| g.tokens.len()).sum::<usize>();
        }
    }
    let result = match result {
        Ok(gens) if gens.len() != batch.len() => Err(BackendError::Count {
            expected: batch.len(),
            got: gens.len(),
        }),
        other => other,
    };
    match result {
        Ok(gens) => {
            // Each request gets its own generation or its own error.
            for (request, (job, g)) in batch.into_iter().zip(gens).enumerate() {
                let g = g.and_then(|g| check_logprobs(request, &g).map(|()| g));
                let _ = job.reply.send(g.map_err(|source| WorkerError::Batch {
                    model: model.to_string(),
                    source: Arc::new(source),
                }));
            }
        }
        Err(source) => {
            // Every request of the batch gets the error; its source is shared.
            let source = Arc::new(source);
            for job in batch {
                let _ = job.reply.send(Err(WorkerError::Batch {
                    model: model.to_string(),
                    source: source.clone(),
                }));
            }
        }
    }
}
