//! The async runtime episodes run on, one definition for eval, training and benches.

use std::ops::Deref;

/// Threads that drive episode tasks. Episodes mostly wait on model workers (their own
/// threads) and on tool calls (blocking threads), so two drivers keep every worker fed
/// without competing with the workers for the cores of a small machine.
pub const EPISODE_THREADS: usize = 2;

/// A tokio runtime for episodes that, when dropped, does not wait for blocking threads:
/// a tool call that timed out may still hold one, and every episode has ended by then.
pub struct EpisodeRuntime(Option<tokio::runtime::Runtime>);

impl EpisodeRuntime {
    pub fn new() -> std::io::Result<Self> {
        Self::with_threads(EPISODE_THREADS)
    }

    /// A runtime with `threads` episode drivers (`[pool] episode_threads`; 0 = the
    /// default).
    pub fn with_threads(threads: usize) -> std::io::Result<Self> {
        let threads = if threads == 0 {
            EPISODE_THREADS
        } else {
            threads
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?;
        Ok(Self(Some(runtime)))
    }
}

impl Deref for EpisodeRuntime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for EpisodeRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_experiment_default_is_the_runtime_default() {
        assert_eq!(
            crate::config::PoolSection::default().episode_threads,
            EPISODE_THREADS
        );
    }

    #[test]
    fn dropping_does_not_wait_for_a_blocking_call_that_never_ends() {
        let runtime = EpisodeRuntime::new().unwrap();
        let (_keep, hold) = std::sync::mpsc::channel::<()>();
        // A blocking call that only ends when `_keep` is dropped, after the runtime.
        runtime.spawn_blocking(move || {
            let _ = hold.recv();
        });
        let started = Instant::now();
        drop(runtime);
        // Reaching this line at all is the point; the bound only reports a hang as a
        // failure instead of a stuck test.
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
