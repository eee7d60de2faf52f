//! Data parallelism inside an update: the ranks that hold the same model meet at a few
//! points of [`super::run_update`] so that N ranks, each on its share of the step's
//! samples, take the optimizer step one process would take on all of them. The loss
//! denominators are summed before the backward, each agent's gradient is summed after
//! its micro-batches (bucketed), the loss's finiteness is agreed, and the statistics
//! the report carries are summed (maxima taken where they are maxima). The ranks then
//! hold the same gradients, so the same clip and the same AdamW step.
//!
//! The collectives themselves are behind [`Collective`], so this module makes no c10d
//! call; the pool gives it a c10d process group. A failed collective keeps c10d's error
//! ([`DistError`]), so the trainer can tell a peer that timed out from a bad launch.

use super::{
    LossStats, TrainError,
    optimizer::{AdamW, sum_of_squares},
};
use drmas_dist::DistError;
use tch::{Kind, Tensor};

/// The other ranks of one model: the same calls in the same order on every rank.
pub trait Collective: Send {
    fn world_size(&self) -> usize;
    /// This rank's place in the group, 0 to world_size − 1: which shard it owns.
    fn rank(&self) -> usize;
    /// Sums `t` over the ranks, in place.
    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError>;
    /// The elementwise maximum over the ranks, in place.
    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError>;
    /// This rank's slice of the ranks' sum of `input`, into `output`. Both are taken
    /// flat: `input` holds world_size × `output`'s n elements (the caller pads it to a
    /// multiple of the world size), and rank r gets elements [r·n, (r+1)·n) of the sum:
    /// a sharded gradient's reduction.
    fn reduce_scatter_sum(&mut self, input: &Tensor, output: &mut Tensor) -> Result<(), DistError>;
    /// Every rank's `input` into `output` in rank order, both flat: `output` holds
    /// world_size × `input`'s n elements, rank r's at [r·n, (r+1)·n): sharded weights
    /// made whole.
    fn all_gather_into_tensor(
        &mut self,
        output: &mut Tensor,
        input: &Tensor,
    ) -> Result<(), DistError>;
    /// [`Self::all_gather_into_tensor`] into a contiguous `output`, started: it may run
    /// while the caller computes, and `output` holds the gather once the returned
    /// [`Pending`] is waited for. Collectives issued meanwhile run after it. By default
    /// it runs at once (a group without asynchronous collectives).
    fn start_all_gather_into_tensor(
        &mut self,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<Pending, DistError> {
        self.all_gather_into_tensor(&mut output.shallow_clone(), input)?;
        Ok(Pending::Done)
    }
}

/// A collective started by [`Collective::start_all_gather_into_tensor`].
#[must_use = "a started collective is waited for before its output is read"]
pub enum Pending {
    /// It ran when started.
    Done,
    /// Running on the process group.
    Gather(drmas_dist::PendingGather),
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pending::Done => "Pending::Done",
            Pending::Gather(_) => "Pending::Gather",
        })
    }
}

impl Pending {
    /// Waits for it to end (at most the group's timeout).
    pub fn wait(self) -> Result<(), DistError> {
        match self {
            Pending::Done => Ok(()),
            Pending::Gather(g) => g.wait(),
        }
    }
}

/// A group of one: every collective leaves its tensors as they are (a sum or a
/// gather over one rank). The sharded optimizer's single-process case, and what its
/// tests compare with one process's AdamW.
#[derive(Debug, Clone, Copy, Default)]
pub struct Solo;

impl Collective for Solo {
    fn world_size(&self) -> usize {
        1
    }

    fn rank(&self) -> usize {
        0
    }

    fn all_reduce_sum(&mut self, _t: &mut Tensor) -> Result<(), DistError> {
        Ok(())
    }

    fn all_reduce_max(&mut self, _t: &mut Tensor) -> Result<(), DistError> {
        Ok(())
    }

    fn reduce_scatter_sum(&mut self, input: &Tensor, output: &mut Tensor) -> Result<(), DistError> {
        output.copy_(&input.reshape([-1]).view_as(output));
        Ok(())
    }

    fn all_gather_into_tensor(
        &mut self,
        output: &mut Tensor,
        input: &Tensor,
    ) -> Result<(), DistError> {
        output.copy_(&input.reshape([-1]).view_as(output));
        Ok(())
    }
}

/// Gradients are summed in buckets of at most this many elements (64 MiB of f32): one
/// collective per bucket instead of one per tensor, without a copy of the whole model.
const BUCKET_ELEMENTS: i64 = 16 << 20;

/// Sums `values` over the ranks.
pub fn sum_f64(sync: &mut dyn Collective, values: &mut [f64]) -> Result<(), TrainError> {
    let mut t = Tensor::from_slice(values);
    sync.all_reduce_sum(&mut t)?;
    values.copy_from_slice(&Vec::<f64>::try_from(t)?);
    Ok(())
}

/// The maximum of each of `values` over the ranks.
pub fn max_f64(sync: &mut dyn Collective, values: &mut [f64]) -> Result<(), TrainError> {
    let mut t = Tensor::from_slice(values);
    sync.all_reduce_max(&mut t)?;
    values.copy_from_slice(&Vec::<f64>::try_from(t)?);
    Ok(())
}

/// One rank's loss statistics made the ranks' together.
pub fn all_reduce_stats(sync: &mut dyn Collective, s: &mut LossStats) -> Result<(), TrainError> {
    let mut sums: Vec<f64> = s.sums_mut().iter().map(|v| **v).collect();
    sum_f64(sync, &mut sums)?;
    for (field, total) in s.sums_mut().into_iter().zip(sums) {
        *field = total;
    }
    let mut max = [s.mismatch_max_ratio];
    max_f64(sync, &mut max)?;
    s.mismatch_max_ratio = max[0];
    Ok(())
}

/// Every trainable parameter gets a gradient (zeros where it has none): a rank without
/// samples of this model, or of an agent, still takes part in every sum.
pub fn define_grads(optimizer: &AdamW) {
    let missing: Vec<&Tensor> = optimizer
        .params()
        .iter()
        .map(|(_, p)| p)
        .filter(|p| !p.grad().defined())
        .collect();
    if missing.is_empty() {
        return;
    }
    // A zero that depends on each of them: its backward defines their gradients as 0.
    let zero = missing
        .iter()
        .map(|p| p.sum(Kind::Float) * 0.0)
        .reduce(|a, b| a + b)
        .expect("not empty");
    zero.backward();
}

/// Sums the gradients accumulated since `before` (every gradient, without it) over the
/// ranks; afterwards each gradient is `before + Σ_ranks (grad − before)`.
pub fn all_reduce_grads(
    sync: &mut dyn Collective,
    optimizer: &AdamW,
    before: Option<&[Tensor]>,
) -> Result<(), TrainError> {
    let _guard = tch::no_grad_guard();
    let mut grads: Vec<Tensor> = optimizer.params().iter().map(|(_, p)| p.grad()).collect();
    if let Some(before) = before {
        for (g, b) in grads.iter_mut().zip(before) {
            *g -= b;
        }
    }
    let mut start = 0;
    while start < grads.len() {
        // A bucket: consecutive gradients up to the size, at least one.
        let mut end = start;
        let mut elements = 0;
        while end < grads.len()
            && (end == start || elements + grads[end].numel() as i64 <= BUCKET_ELEMENTS)
        {
            elements += grads[end].numel() as i64;
            end += 1;
        }
        let flat: Vec<Tensor> = grads[start..end].iter().map(|g| g.reshape([-1])).collect();
        let mut bucket = Tensor::cat(&flat, 0);
        sync.all_reduce_sum(&mut bucket)?;
        let mut offset = 0;
        for g in &mut grads[start..end] {
            let n = g.numel() as i64;
            g.copy_(&bucket.narrow(0, offset, n).view_as(g));
            offset += n;
        }
        start = end;
    }
    if let Some(before) = before {
        for (g, b) in grads.iter_mut().zip(before) {
            *g += b;
        }
    }
    Ok(())
}

/// Checks that every rank holds the same weights: a checksum of the trainable
/// parameters (each tensor's sum and sum of squares, weighted by its position), whose
/// maximum and minimum over the ranks must be equal. `when` says which check failed.
pub fn check_weights_agree(
    sync: &mut dyn Collective,
    params: &[(String, Tensor)],
    when: &str,
) -> Result<(), TrainError> {
    let _guard = tch::no_grad_guard();
    let sum: f64 = params
        .iter()
        .enumerate()
        .map(|(k, (_, p))| {
            (k as f64 + 1.0) * (sum_of_squares(p) + p.sum(Kind::Double).double_value(&[]))
        })
        .sum();
    let mut both = [sum, -sum];
    max_f64(sync, &mut both)?;
    let (high, low) = (both[0], -both[1]);
    if high.to_bits() != low.to_bits() {
        return Err(TrainError::WeightsDiffer {
            when: when.to_string(),
            low,
            high,
        });
    }
    Ok(())
}
