//! A c10d process group as the update's [`Collective`]: what a model's worker holds
//! when the job has several ranks (docs/distributed.md).

use crate::update::{Collective, Pending};
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
            traffic: Traffic::default(),
        })
    }
}

/// A model worker's process group and the device its model lives on. NCCL moves CUDA
/// tensors only, while an update also sums small host-side values (loss denominators,
/// statistics, the weights' checksum): those go through the model's device and back.
pub struct ModelGroup {
    group: Group,
    device: Device,
    traffic: Traffic,
}

/// What a model's collectives moved since it was last taken: per operation, the calls
/// and the bytes of their tensors (an all-reduce's tensor, a reduce-scatter's input, an
/// all-gather's output: the whole that the ranks combine; a ring sends (N − 1)/N of it
/// from each rank, twice for an all-reduce).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub all_reduce: (u64, u64),
    pub reduce_scatter: (u64, u64),
    pub all_gather: (u64, u64),
}

impl Traffic {
    fn add(to: &mut (u64, u64), t: &Tensor) {
        to.0 += 1;
        to.1 += (t.numel() * t.kind().elt_size_in_bytes()) as u64;
    }
}

impl ModelGroup {
    /// What the collectives moved since the last call, and the count restarted.
    pub fn take_traffic(&mut self) -> Traffic {
        std::mem::take(&mut self.traffic)
    }

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

    /// Runs `op` on (`input`, `output`), or on their copies on the model's GPU when
    /// either is elsewhere; `output` gets the result back.
    fn pair_on_device(
        &mut self,
        input: &Tensor,
        output: &mut Tensor,
        op: impl FnOnce(&mut Group, &Tensor, &mut Tensor) -> Result<(), DistError>,
    ) -> Result<(), DistError> {
        let here = |t: &Tensor| t.device() == self.device;
        if !self.device.is_cuda() || (here(input) && here(output)) {
            return op(&mut self.group, input, output);
        }
        let input = input.to_device(self.device);
        let mut staged = output.to_device(self.device);
        op(&mut self.group, &input, &mut staged)?;
        output.copy_(&staged);
        Ok(())
    }
}

/// A group used as it is: its backend must take the tensors where they are (Gloo: the
/// CPU's; NCCL: CUDA's).
impl Collective for Group {
    fn world_size(&self) -> usize {
        Group::world_size(self)
    }

    fn rank(&self) -> usize {
        Group::rank(self)
    }

    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Group::all_reduce_sum(self, t)
    }

    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Group::all_reduce_max(self, t)
    }

    fn reduce_scatter_sum(&mut self, input: &Tensor, output: &mut Tensor) -> Result<(), DistError> {
        Group::reduce_scatter_sum(self, input, output)
    }

    fn all_gather_into_tensor(
        &mut self,
        output: &mut Tensor,
        input: &Tensor,
    ) -> Result<(), DistError> {
        Group::all_gather_into_tensor(self, output, input)
    }
}

impl Collective for ModelGroup {
    fn world_size(&self) -> usize {
        self.group.world_size()
    }

    fn rank(&self) -> usize {
        self.group.rank()
    }

    fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Traffic::add(&mut self.traffic.all_reduce, t);
        self.on_device(t, Group::all_reduce_sum)
    }

    fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        Traffic::add(&mut self.traffic.all_reduce, t);
        self.on_device(t, Group::all_reduce_max)
    }

    fn reduce_scatter_sum(&mut self, input: &Tensor, output: &mut Tensor) -> Result<(), DistError> {
        Traffic::add(&mut self.traffic.reduce_scatter, input);
        self.pair_on_device(input, output, Group::reduce_scatter_sum)
    }

    fn all_gather_into_tensor(
        &mut self,
        output: &mut Tensor,
        input: &Tensor,
    ) -> Result<(), DistError> {
        Traffic::add(&mut self.traffic.all_gather, output);
        self.pair_on_device(input, output, |g, input, output| {
            g.all_gather_into_tensor(output, input)
        })
    }

    fn start_all_gather_into_tensor(
        &mut self,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<Pending, DistError> {
        let here = |t: &Tensor| t.device() == self.device;
        if self.device.is_cuda() && !(here(input) && here(output)) {
            // Staged through the GPU and copied back: done at once.
            self.all_gather_into_tensor(&mut output.shallow_clone(), input)?;
            return Ok(Pending::Done);
        }
        Traffic::add(&mut self.traffic.all_gather, output);
        Ok(Pending::Gather(
            self.group.start_all_gather_into_tensor(output, input)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    /// Two ranks' model groups on the CPU (threads of this process, each its own store
    /// client), used through the update's trait as the update uses them.
    fn two_model_groups<T: Send + 'static>(
        f: impl Fn(usize, &mut ModelGroup) -> T + Send + Sync + Clone + 'static,
    ) -> Vec<T> {
        let port = crate::engine::free_port().unwrap();
        let timeout = Duration::from_secs(30);
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let store = Store::connect("127.0.0.1", port, 2, rank == 0, timeout).unwrap();
                    let job = DistJob {
                        store: Arc::new(store),
                        rank,
                        world_size: 2,
                        local_rank: 0,
                        timeout,
                        prefix: "test/".into(),
                    };
                    let mut group = job.model_group("model/m", Device::Cpu).unwrap();
                    f(rank, &mut group)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn a_model_group_reduce_scatters_and_gathers_through_the_trait_and_counts_its_bytes() {
        let out = two_model_groups(|rank, sync| {
            let r = rank as f64;
            // 5 values padded to 6 by the caller; slices of 3.
            let input = Tensor::from_slice(&[1.0 + r, 2.0, 3.0, 4.0, 5.0 * (r + 1.0), 0.0]);
            let mut slice = Tensor::zeros([3], (Kind::Double, Device::Cpu));
            sync.reduce_scatter_sum(&input, &mut slice).unwrap();
            let mut whole = Tensor::zeros([2, 3], (Kind::Double, Device::Cpu));
            sync.all_gather_into_tensor(&mut whole, &slice).unwrap();
            let mut norm = Tensor::from_slice(&[r]);
            sync.all_reduce_sum(&mut norm).unwrap();
            let traffic = sync.take_traffic();
            assert_eq!(sync.take_traffic(), Traffic::default(), "taken");
            (
                Vec::<f64>::try_from(slice).unwrap(),
                Vec::<f64>::try_from(whole.reshape([-1])).unwrap(),
                traffic,
            )
        });
        assert_eq!(out[0].0, [3.0, 4.0, 6.0]);
        assert_eq!(out[1].0, [8.0, 15.0, 0.0]);
        for (_, whole, traffic) in &out {
            assert_eq!(whole, &[3.0, 4.0, 6.0, 8.0, 15.0, 0.0]);
            // f64: the reduce-scatter's input and the gather's output are 6 values.
            let want = Traffic {
                all_reduce: (1, 8),
                reduce_scatter: (1, 48),
                all_gather: (1, 48),
            };
            assert_eq!(*traffic, want);
        }
    }
}
