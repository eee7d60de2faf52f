//! Deterministic batching: generation requests are served in rounds whose boundaries
//! do not depend on time. A round closes when every live episode of a rollout is
//! waiting on a model (its request submitted) or has ended; then every worker that holds
//! requests of the round serves all of them, in an order set by the requests alone
//! (`worker.rs`). A rollout ([`Rounds::scope`] around each episode) counts its
//! episodes; [`crate::pool::ModelHandle::generate`] called inside a scope, on a worker
//! with [`Batching::Deterministic`], joins the round.

use std::sync::{Arc, Mutex};

/// How a worker learns that a round it holds requests of has closed (its command
/// queue, in `worker.rs`: the rounds know nothing of the worker's commands).
pub(super) trait RoundEnd: Send {
    fn round_closed(&self);
    fn clone_box(&self) -> Box<dyn RoundEnd>;
}

/// How a worker forms generation batches (`[pool] batching`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Batching {
    /// In rounds (above): which requests meet in a batch does not depend on timing.
    #[default]
    Deterministic,
    /// Each batch gathers what arrives within the gather window after its first request.
    Timed,
}

tokio::task_local! {
    static ROUND: Arc<Rounds>;
}

/// The round state of one rollout.
pub struct Rounds {
    state: Mutex<State>,
}

struct State {
    /// Episodes that have not ended.
    live: usize,
    /// Episodes whose request waits for the current round to close.
    waiting: usize,
    round: u64,
    /// The workers that hold requests of the current round: (identity, queue).
    workers: Vec<(usize, Box<dyn RoundEnd>)>,
}

/// One request's place in a round: given back when its answer arrives (or its episode
/// is dropped) so an answer that came before the round closed (a request refused at
/// once) stops counting as waiting.
pub(super) struct Ticket {
    rounds: Arc<Rounds>,
    round: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.rounds.lock();
        if s.round == self.round {
            s.waiting = s.waiting.saturating_sub(1);
        }
    }
}

/// While held, the episode of its task does not count as live: rounds close without it.
/// For an episode that waits its turn to start (an environment's limit on episodes at
/// once), which would otherwise hold up the rounds of the episodes it waits for.
pub struct Away(Arc<Rounds>);

impl Drop for Away {
    fn drop(&mut self) {
        self.0.lock().live += 1;
    }
}

/// Ends its episode in the round count when dropped: finished, failed or aborted.
struct Ended(Arc<Rounds>);

impl Drop for Ended {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.live = s.live.saturating_sub(1);
        s.close_if_complete();
    }
}

impl Rounds {
    /// The rounds of a rollout of `episodes` episodes.
    pub fn new(episodes: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                live: episodes,
                waiting: 0,
                round: 0,
                workers: Vec::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is counters only; a panic elsewhere leaves them usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one episode of the rollout: its model calls join the rounds, and its end
    /// (or its future being dropped, started or not) is counted.
    pub fn scope<F: Future>(
        self: &Arc<Self>,
        episode: F,
    ) -> impl Future<Output = F::Output> + use<F> {
        let ended = Ended(self.clone());
        ROUND.scope(self.clone(), async move {
            let _ended = ended;
            episode.await
        })
    }

    /// Takes the episode running on this task out of the live count until the guard
    /// drops (`None` outside a rollout's scope); a round that only it held up closes.
    pub fn away() -> Option<Away> {
        let rounds = Self::current()?;
        {
            let mut s = rounds.lock();
            s.live = s.live.saturating_sub(1);
            s.close_if_complete();
        }
        Some(Away(rounds))
    }

    /// The rounds of the episode running on this task, if any.
    pub(super) fn current() -> Option<Arc<Rounds>> {
        ROUND.try_with(Arc::clone).ok()
    }

    /// Counts a request already sent to the worker `(id, queue)` as waiting; closes the
    /// round when it was the last live episode not waiting.
    pub(super) fn wait(self: &Arc<Self>, id: usize, queue: &dyn RoundEnd) -> Ticket {
        let mut s = self.lock();
        s.waiting += 1;
        if !s.workers.iter().any(|(w, _)| *w == id) {
            s.workers.push((id, queue.clone_box()));
        }
        let round = s.round;
        s.close_if_complete();
        Ticket {
            rounds: self.clone(),
            round,
        }
    }
}

impl State {
    fn close_if_complete(&mut self) {
        if self.waiting == 0 || self.waiting < self.live {
            return;
        }
        // Every request of the round was sent before it was counted, so each worker
        // finds them all in its queue before this flush.
        for (_, queue) in self.workers.drain(..) {
            queue.round_closed();
        }
        self.waiting = 0;
        self.round += 1;
    }
}
