//! The optimizer an update steps, as [`super::run_update`] walks it: AdamW whole on
//! every rank ([`AdamW`], gradients all-reduced), or sharded across the ranks
//! ([`ShardedAdamW`], gradients reduce-scattered; docs/distributed.md, "Sharding"). The
//! update's other work (micro-batches, loss, statistics) is the same for both.

use super::{
    TrainError,
    optimizer::{AdamW, sum_of_squares},
    sharded::ShardedAdamW,
    sync::{self, Collective},
};
use tch::Tensor;

pub(crate) enum Stepper<'a> {
    Whole(&'a mut AdamW),
    Sharded(&'a mut ShardedAdamW),
}

/// A sharded optimizer's collectives: it has no meaning outside a group.
fn group<'a, 'b>(
    sync: Option<&'a mut (dyn Collective + 'b)>,
) -> Result<&'a mut (dyn Collective + 'b), TrainError> {
    sync.ok_or(TrainError::Missing {
        what: "a process group (a data-parallel job)",
        when: "the optimizer state is sharded (shard = \"optimizer\")",
    })
}

impl Stepper<'_> {
    /// The sharded optimizer, if it is one.
    pub fn sharded_mut(&mut self) -> Option<&mut ShardedAdamW> {
        match self {
            Stepper::Whole(_) => None,
            Stepper::Sharded(o) => Some(o),
        }
    }

    pub fn params(&self) -> &[(String, Tensor)] {
        match self {
            Stepper::Whole(o) => o.params(),
            Stepper::Sharded(o) => o.params(),
        }
    }

    /// Before an optimizer step's micro-batches: gradients zeroed; in a job, a whole
    /// AdamW's every parameter gets one (a rank without samples takes part in each sum).
    pub fn begin(&mut self, in_job: bool) {
        match self {
            Stepper::Whole(o) => {
                o.zero_grad();
                if in_job {
                    sync::define_grads(o);
                }
            }
            Stepper::Sharded(o) => o.zero_grad(),
        }
    }

    /// The gradients before an agent's micro-batches, where its own gradient must be
    /// told from the agents' before it (`needed`). A sharded optimizer reduces each
    /// agent's gradient and zeroes it: it needs none.
    pub fn snapshot(&self, needed: bool) -> Option<Vec<Tensor>> {
        match self {
            Stepper::Whole(o) => needed.then(|| grads_snapshot(o)),
            Stepper::Sharded(_) => None,
        }
    }

    /// Sums an agent's gradient over the ranks: all-reduced in place (what it added
    /// since `snapshot`), or reduce-scattered into this rank's shard. Returns, when
    /// sharded, this rank's Σ x² of the agent's reduced shards.
    pub fn sum_agent(
        &mut self,
        sync: &mut dyn Collective,
        snapshot: Option<&[Tensor]>,
    ) -> Result<Option<f64>, TrainError> {
        match self {
            Stepper::Whole(o) => sync::all_reduce_grads(sync, o, snapshot).map(|()| None),
            Stepper::Sharded(o) => o.reduce_gradients(sync).map(Some),
        }
    }

    /// The norm of one agent's (summed) gradient: of the gradients' change since
    /// `snapshot`, or the ranks' sum of the squares [`Self::sum_agent`] returned.
    pub fn agent_norm(
        &mut self,
        sync: Option<&mut (dyn Collective + '_)>,
        snapshot: Option<&[Tensor]>,
        reduced: Option<f64>,
    ) -> Result<f64, TrainError> {
        match self {
            Stepper::Whole(o) => Ok(grad_delta_norm(o, snapshot)),
            Stepper::Sharded(_) => {
                let mut squares = [reduced.unwrap_or(0.0)];
                sync::sum_f64(group(sync)?, &mut squares)?;
                Ok(squares[0].sqrt())
            }
        }
    }

    /// The global gradient norm before clipping, after clipping to `max_norm`.
    pub fn clip_grad_norm(
        &mut self,
        sync: Option<&mut (dyn Collective + '_)>,
        max_norm: f64,
    ) -> Result<f64, TrainError> {
        match self {
            Stepper::Whole(o) => Ok(o.clip_grad_norm(max_norm)),
            Stepper::Sharded(o) => o.clip_grad_norm(group(sync)?, max_norm),
        }
    }

    pub fn step(
        &mut self,
        sync: Option<&mut (dyn Collective + '_)>,
        lr: f64,
    ) -> Result<(), TrainError> {
        match self {
            Stepper::Whole(o) => {
                o.step(lr);
                Ok(())
            }
            Stepper::Sharded(o) => o.step(group(sync)?, lr),
        }
    }

    pub fn zero_grad(&mut self) {
        match self {
            Stepper::Whole(o) => o.zero_grad(),
            Stepper::Sharded(o) => o.zero_grad(),
        }
    }
}

/// Every gradient (zeros where a parameter has none), for measuring one agent's share.
fn grads_snapshot(optimizer: &AdamW) -> Vec<Tensor> {
    optimizer
        .params()
        .iter()
        .map(|(_, p)| {
            let g = p.grad();
            if g.defined() {
                g.detach().copy()
            } else {
                p.zeros_like()
            }
        })
        .collect()
}

/// ‖current grads − snapshot‖₂, or ‖current grads‖₂ without a snapshot (the grads were
/// zero before), to the precision of [`sum_of_squares`].
fn grad_delta_norm(optimizer: &AdamW, snapshot: Option<&[Tensor]>) -> f64 {
    let _guard = tch::no_grad_guard();
    let mut sum = 0f64;
    for (k, (_, p)) in optimizer.params().iter().enumerate() {
        let g = p.grad();
        sum += match (g.defined(), snapshot.map(|s| &s[k])) {
            (true, Some(before)) => sum_of_squares(&(&g - before)),
            (true, None) => sum_of_squares(&g),
            (false, Some(before)) => sum_of_squares(before),
            (false, None) => 0.0,
        };
    }
    sum.sqrt()
}
