//! The trainer's side of data parallelism (docs/distributed.md): each rank runs the
//! episodes of its share of the step's tasks and the ranks exchange them
//! ([`crate::rollout::run_episode_set`]), so that each holds the step's every sample (the
//! normalizer, the metrics and the failure limit then see what one process would), and
//! each model's worker updates on its rank's samples with its own process group. Rank 0
//! alone writes (metrics, checkpoints); the others wait for it at the checkpoint.

use super::run_error::RunError;
use drmas_dist::Group;

/// The trainer's process group and this rank's place.
pub struct TrainerDist {
    pub group: Group,
    pub rank: usize,
    pub world_size: usize,
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
    let bytes = serde_json::to_vec(mine).expect("a fingerprint is a map of strings");
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

    /// Whether `flag` is true on any rank.
    pub fn any(&mut self, flag: bool) -> Result<bool, RunError> {
        let mut t = tch::Tensor::from_slice(&[i64::from(flag)]);
        self.group.all_reduce_max(&mut t)?;
        Ok(t.int64_value(&[0]) != 0)
    }

    pub fn barrier(&mut self) -> Result<(), RunError> {
        Ok(self.group.barrier()?)
    }
}
