//! One way to run a set of episodes (ARCHITECTURE.md, `rollout`): a training step's and
//! an evaluation's. The set is dealt to the ranks of a data-parallel job a group of
//! episodes at a time (a task's G or k episodes stay on one rank), each rank runs its
//! share under the failure limit with a progress bar, the ranks exchange what they ran,
//! and every rank judges the limit on the whole set's count. One process is a job of one
//! rank: the same dealing, judging and errors, only the exchange has nobody to talk to.

use super::failures::FailureWatch;
use super::{
    Blame, EpisodeOutcome, EpisodeSpec, FailureTally, RolloutError, Team, failure_limit_message,
    over_failure_limit, run_episodes_until,
};
use drmas_dist::{DistError, Group};
use std::{sync::Arc, time::Instant};

/// The rank that runs episode `index` of a set dealt `group_size` episodes at a time to
/// `world` ranks: round-robin by group, so a task's episodes share a rank.
pub fn rank_of(index: usize, group_size: usize, world: usize) -> usize {
    (index / group_size.max(1)) % world.max(1)
}

/// How a set shows its progress.
#[derive(Debug, Clone)]
pub struct Progress {
    /// Names the set on its bar, before each failure line and progress line (`step 3/10`,
    /// `eval`).
    pub label: String,
    /// Show progress: a bar on a terminal.
    pub show: bool,
    /// Where `show` asks for progress and no bar can be drawn (not a terminal), a line
    /// per tenth of this rank's episodes.
    pub lines: bool,
}

/// A set of episodes to run.
pub struct EpisodeSetPlan {
    /// Every episode of the set, every rank's, in the set's order.
    pub specs: Vec<EpisodeSpec>,
    /// Consecutive episodes dealt to one rank together (a task's G or k).
    pub group_size: usize,
    pub progress: Progress,
}

/// An episode that failed: its task, what it is blamed on, and the error's text.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FailedEpisode {
    /// The episode's uid (`source/id` in an evaluation).
    pub uid: String,
    /// The task's id.
    pub task: String,
    pub traj: u32,
    pub blame: Blame,
    pub error: String,
}

/// The first failed episode's error: the error itself where it ran on this rank, its
/// text where it ran on another (the same text either way).
#[derive(Debug, thiserror::Error)]
pub enum EpisodeFailure {
    #[error(transparent)]
    Here(RolloutError),
    #[error("{message}")]
    OnRank { rank: usize, message: String },
}

/// Why a set of episodes stopped its run: the same error in one process and on every
/// rank of a job.
#[derive(Debug, thiserror::Error)]
pub enum EpisodeSetError {
    /// More of the set's episodes failed than `[workflow] max_failed_episodes` allows.
    #[error("{}", failure_limit_message(.tally, *.episodes, *.limit))]
    TooManyFailures {
        episodes: usize,
        limit: f64,
        tally: FailureTally,
    },
    /// Every episode failed (within the limit): there is nothing to go on.
    #[error(
        "all {episodes} episodes failed, so there is nothing to report; the first, task {task}: {first}"
    )]
    AllFailed {
        episodes: usize,
        /// The first failed episode's uid.
        task: String,
        #[source]
        first: EpisodeFailure,
    },
    /// The exchange between the ranks failed (c10d's text names the peer).
    #[error("data parallelism: exchanging the episodes between the ranks: {0}")]
    Collective(#[from] DistError),
    #[error("this rank's episodes cannot be sent: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("rank {rank}'s episodes do not parse: {source}")]
    Decode {
        rank: usize,
        #[source]
        source: serde_json::Error,
    },
}

/// What a set of episodes produced, the same on every rank.
#[derive(Debug)]
pub struct EpisodeSet {
    /// Episodes in the set.
    pub episodes: usize,
    /// The completed episodes, in the set's order.
    pub outcomes: Vec<EpisodeOutcome>,
    /// Whether each of `outcomes` ran on this rank (all of them in one process).
    pub local: Vec<bool>,
    /// The failed episodes (cancelled ones included), in the set's order.
    pub failed: Vec<FailedEpisode>,
    pub tally: FailureTally,
    /// A stop was asked for on some rank: the set was cut short (the limit was judged,
    /// every episode failing was not).
    pub stopped: bool,
}

/// What one rank hands the others: its episodes with their index in the set.
#[derive(serde::Serialize, serde::Deserialize)]
struct Share {
    stop: bool,
    outcomes: Vec<(usize, EpisodeOutcome)>,
    failed: Vec<(usize, FailedEpisode)>,
    tally: FailureTally,
}

/// Runs `plan` with `team` on `runtime`: this rank's share of it (all of it without a
/// `group`), stopped early when `stop()` turns true or when this rank's failures alone
/// put the set over the limit; then the ranks exchange their shares. The limit
/// (`team.options.max_failed_episodes`) is judged first, then a stop, then every
/// episode failing.
pub fn run_episode_set(
    runtime: &tokio::runtime::Runtime,
    team: &Arc<Team>,
    plan: EpisodeSetPlan,
    stop: impl Fn() -> bool,
    group: Option<&mut Group>,
) -> Result<EpisodeSet, EpisodeSetError> {
    let (rank, world) = group
        .as_deref()
        .map_or((0, 1), |g| (g.rank(), g.world_size()));
    let episodes = plan.specs.len();
    let limit = team.options.max_failed_episodes;
    let (indices, specs): (Vec<usize>, Vec<EpisodeSpec>) = plan
        .specs
        .into_iter()
        .enumerate()
        .filter(|(i, _)| rank_of(*i, plan.group_size, world) == rank)
        .unzip();
    let labels: Vec<(String, u32, String)> = specs
        .iter()
        .map(|s| (s.uid.clone(), s.traj, s.task.id.clone()))
        .collect();
    let watch = FailureWatch::new(&specs, limit);
    let mut shown = Shown::new(&plan.progress, specs.len());
    let results = runtime.block_on(run_episodes_until(
        team.clone(),
        specs,
        |i, r| shown.done(watch.record(i, r)),
        // This rank's failures count against the whole set: past the limit alone, the
        // set is (the ranks judge the rest together).
        || stop() || watch.over_limit_of(episodes),
    ));
    shown.finish();

    let mut mine = Share {
        stop: stop(),
        outcomes: Vec::new(),
        failed: Vec::new(),
        tally: watch.into_tally(),
    };
    // This rank's errors themselves, by index in the set (the others see their text).
    let mut errors = std::collections::BTreeMap::new();
    for (((uid, traj, task), r), index) in labels.into_iter().zip(results).zip(indices) {
        match r {
            Ok(o) => mine.outcomes.push((index, o)),
            Err(e) => {
                let failed = FailedEpisode {
                    uid,
                    task,
                    traj,
                    blame: e.blame().unwrap_or(Blame {
                        kind: "host".into(),
                        name: "run".into(),
                    }),
                    error: e.to_string(),
                };
                mine.failed.push((index, failed));
                errors.insert(index, e);
            }
        }
    }

    let shares = exchange(group, mine)?;
    let stopped = shares.iter().any(|s| s.stop);
    let mut outcomes = Vec::new();
    let mut failed = Vec::new();
    let mut tally = FailureTally::default();
    for (r, share) in shares.into_iter().enumerate() {
        tally.merge(share.tally);
        outcomes.extend(share.outcomes.into_iter().map(|(i, o)| (i, r == rank, o)));
        failed.extend(share.failed.into_iter().map(|(i, f)| (i, r, f)));
    }
    outcomes.sort_by_key(|(i, _, _)| *i);
    failed.sort_by_key(|(i, _, _)| *i);

    if over_failure_limit(tally.total(), episodes, limit) {
        return Err(EpisodeSetError::TooManyFailures {
            episodes,
            limit,
            tally,
        });
    }
    if !stopped
        && outcomes.is_empty()
        && let Some((index, on, first)) = failed.first()
    {
        let error = match errors.remove(index) {
            Some(e) => EpisodeFailure::Here(e),
            None => EpisodeFailure::OnRank {
                rank: *on,
                message: first.error.clone(),
            },
        };
        return Err(EpisodeSetError::AllFailed {
            episodes,
            task: first.uid.clone(),
            first: error,
        });
    }
    Ok(EpisodeSet {
        episodes,
        local: outcomes.iter().map(|(_, l, _)| *l).collect(),
        outcomes: outcomes.into_iter().map(|(_, _, o)| o).collect(),
        failed: failed.into_iter().map(|(_, _, f)| f).collect(),
        tally,
        stopped,
    })
}

/// Every rank's share, in rank order: this rank's alone without a group.
fn exchange(group: Option<&mut Group>, mine: Share) -> Result<Vec<Share>, EpisodeSetError> {
    let Some(group) = group else {
        return Ok(vec![mine]);
    };
    let bytes = serde_json::to_vec(&mine).map_err(EpisodeSetError::Encode)?;
    group
        .all_gather_bytes(&bytes)?
        .into_iter()
        .enumerate()
        .map(|(rank, b)| {
            serde_json::from_slice(&b).map_err(|source| EpisodeSetError::Decode { rank, source })
        })
        .collect()
}

/// A set's progress as its episodes end: the bar, the failure lines, and the progress
/// lines where there is no terminal.
struct Shown<'a> {
    progress: &'a Progress,
    bar: indicatif::ProgressBar,
    started: Instant,
    done: usize,
    len: usize,
}

impl<'a> Shown<'a> {
    fn new(progress: &'a Progress, len: usize) -> Self {
        let bar = if progress.show {
            let bar = indicatif::ProgressBar::new(len as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} {bar:30} {pos}/{len} episodes  {elapsed} ETA {eta}",
                )
                .expect("a valid template"),
            );
            bar.set_prefix(progress.label.clone());
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        Self {
            progress,
            bar,
            started: Instant::now(),
            done: 0,
            len,
        }
    }

    /// An episode ended; `failure` is its failure line, if it failed.
    fn done(&mut self, failure: Option<String>) {
        self.done += 1;
        self.bar.inc(1);
        let label = &self.progress.label;
        if let Some(line) = failure {
            if self.bar.is_hidden() {
                tracing::warn!("{label}: {line}");
            } else {
                self.bar.println(format!("{label}: {line}"));
            }
        }
        let (done, len) = (self.done, self.len);
        if self.bar.is_hidden()
            && self.progress.show
            && self.progress.lines
            && (done * 10 / len.max(1)) != ((done - 1) * 10 / len.max(1))
        {
            let secs = self.started.elapsed().as_secs_f64();
            let eta = secs / done as f64 * (len - done) as f64;
            crate::output::console::err_line(format_args!(
                "{label}: {done}/{len} episodes, {secs:.0}s elapsed, ETA {eta:.0}s"
            ));
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_of_episodes_stays_on_one_rank_and_groups_go_round_robin() {
        let ranks: Vec<usize> = (0..12).map(|i| rank_of(i, 2, 3)).collect();
        assert_eq!(ranks, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        // One process is a job of one rank: it runs everything.
        assert!((0..12).all(|i| rank_of(i, 4, 1) == 0));
        // A group size of 0 (no episodes per task) deals one at a time.
        assert_eq!(rank_of(3, 0, 2), 1);
    }
}
