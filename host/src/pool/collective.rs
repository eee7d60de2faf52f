//! A c10d process group as the update's [`Collective`]: what a model's worker holds
//! when the job has several ranks (docs/distributed.md).

use crate::update::Collective;
use drmas_dist::{Backend, DistError, Group, Store};
use std::{sync::Arc, time::Duration};
use tch::{Device, Tensor};

/// A job of several ranks as the pool sees it: the store every process group meets in,
/// this process's rank, and how long a collective may wait.
pub struct DistJob {
    pub store: Arc<Store>,
    pub rank: usize,
    pub world_size: usize,
    /// The GPU this rank uses for `auto` devices (`LOCAL_RANK`).
    pub local_rank: usize,
    pub timeout: Duration,
    /// Put before every group's name in the store: a restarted job's attempt.
    pub prefix: String,
}

impl std::fmt::Debug for DistJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistJob")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("local_rank", &self.local_rank)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl DistJob {
    /// The process group `name` of every rank, on the backend for `device` (Gloo for the
    /// CPU, NCCL for CUDA). Every rank must ask for it; it waits for them.
    pub fn group(&self, name: &str, device: Device) -> Result<Group, DistError> {
        let backend = if device.is_cuda() {
            Backend::Nccl
        } else {
            Backend::Gloo
        };
        Group::new(
            &self.store,
            backend,
            &format!("{}{name}", self.prefix),
            self.rank,
            self.world_size,
            self.timeout,
        )
    }

    /// A model's process group, on the backend for the model's `device`.
    pub fn model_group(&self, name: &str, device: Device) -> Result<ModelGroup, DistError> {
        Ok(ModelGroup {
            group: self.group(name, device)?,
            device,
        })
    }
}

/// A model worker's process group and the device its model lives on. NCCL moves CUDA
/// tensors only, while an update also sums small host-side values (loss denominators,
/// statistics, the weights' checksum): those go through the model's device and back.
pub struct ModelGroup {
    group: Group,
    device: Device,
}

impl ModelGroup {
    /// Runs `op` on `t`, or on its copy on the model's GPU when `t` is elsewhere.
    fn on_device(
        &mut self,
        t: &mut Tensor,
        op: fn(&mut Group, &mut Tensor) -> Result<(), DistError>,
    ) -> Result<(), DistError> {
        if !self.device.is_cuda() || t.device() == self.device {
            return op(&mut self.group, t);
        }
        let mut staged = t.to_device(self.device);
        op(&mut self.group, &mut staged)?;
        t.copy_(&staged);
        Ok(())
    }
}

/// A group used as it is: its backend must take the tensors where they are (Gloo: the
/// CPU's; NCCL: CUDA's).
impl Collective for Group {
    fn world_size(&self) -> usize {
        Group::world_size(self)
    }

    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Group::all_reduce_sum(self, t)
    }

    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Group::all_reduce_max(self, t)
    }
}

impl Collective for ModelGroup {
    fn world_size(&self) -> usize {
        self.group.world_size()
    }

    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        self.on_device(t, Group::all_reduce_sum)
    }

    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        self.on_device(t, Group::all_reduce_max)
    }
}
