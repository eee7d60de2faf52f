//! The trainer's side of data parallelism (docs/distributed.md): each rank runs the
//! episodes of its share of the step's tasks (a task's G episodes stay on one rank), the
//! ranks exchange their episodes so that each holds the step's every sample (the
//! normalizer, the metrics and the failure limit then see what one process would), and
//! each model's worker updates on its rank's samples with its own process group. Rank 0
//! alone writes (metrics, checkpoints); the others wait for it at the checkpoint.

use super::run_error::RunError;
use crate::pool::{ExchangeError, all_gather_json};
use crate::rollout::{EpisodeOutcome, FailureTally};
use drmas_dist::Group;
use serde::{Deserialize, Serialize};

/// The trainer's process group and this rank's place.
pub struct TrainerDist {
    pub group: Group,
    pub rank: usize,
    pub world_size: usize,
}

/// What one rank's rollout hands the others.
#[derive(Debug, Serialize, Deserialize)]
pub struct RankRollout {
    /// A stop was asked for on this rank (Ctrl-C, SIGTERM).
    pub stop: bool,
    /// Completed episodes with their index among the step's episodes.
    pub outcomes: Vec<(usize, EpisodeOutcome)>,
    pub failed: usize,
    pub tally: FailureTally,
}

/// Checks, when a rank joins its job, that every rank runs the same experiment: each
/// rank's `mine` ([`super::fingerprint::of_files`] with the drmas version and the
/// command's options added) is gathered on a group of its own, and every rank refuses
/// the first difference from rank 0's with the same error.
pub fn check_ranks_agree(
    job: &crate::pool::DistJob,
    mine: &super::fingerprint::Fingerprint,
) -> Result<(), RunError> {
    let mut group = job.group("join", tch::Device::Cpu)?;
    let bytes = serde_json::to_vec(mine).map_err(ExchangeError::Encode)?;
    let all = group.all_gather_bytes(&bytes)?;
    let mut ranks = Vec::with_capacity(all.len());
    for (rank, b) in all.iter().enumerate() {
        ranks.push(serde_json::from_slice(b).map_err(|_| {
            RunError::RanksDiffer(format!(
                "rank {rank} sent a fingerprint this drmas cannot read (another drmas version?)"
            ))
        })?);
    }
    match super::fingerprint::rank_difference(&ranks) {
        Some(difference) => Err(RunError::RanksDiffer(difference)),
        None => Ok(()),
    }
}

impl TrainerDist {
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Whether the task at `pos` of the step is this rank's: tasks are dealt round-robin.
    pub fn owns_task(&self, pos: usize) -> bool {
        pos % self.world_size == self.rank
    }

    /// Whether `flag` is true on any rank.
    pub fn any(&mut self, flag: bool) -> Result<bool, RunError> {
        let mut t = tch::Tensor::from_slice(&[i64::from(flag)]);
        self.group.all_reduce_max(&mut t)?;
        Ok(t.int64_value(&[0]) != 0)
    }

    pub fn barrier(&mut self) -> Result<(), RunError> {
        Ok(self.group.barrier()?)
    }

    /// Every rank's rollout, in rank order.
    pub fn gather(&mut self, mine: &RankRollout) -> Result<Vec<RankRollout>, RunError> {
        Ok(all_gather_json(&mut self.group, mine)?)
    }
}
