//! Collectives for drmas over libtorch's c10d, the engine behind `torch.distributed`:
//! the job's TCP store, process groups (Gloo for CPU tensors; NCCL for CUDA tensors
//! with the `nccl` feature), and the collectives a data-parallel step needs — plus the
//! flat reduce-scatter and all-gather that sharded state needs — each waiting at most
//! its group's timeout. C++ exceptions come back as [`DistError`]s
//! with their text. The launch contract (`RANK`, `WORLD_SIZE`, … or `SLURM_*`) is read
//! by [`World::from_env`].
//!
//! tch has no distributed API; the shim (`shim/c10d_shim.cpp`, compiled by this crate's
//! build script against the same libtorch) takes tch's tensors as the `at::Tensor*`
//! they wrap.

mod error;
mod ffi;
mod group;
mod world;

pub use error::DistError;
pub use group::{Backend, Group, PendingGather, Store};
pub use world::{World, WorldSource};
