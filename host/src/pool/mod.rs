//! Devices and model workers: device names resolved in one place, one worker thread per
//! model that owns its weights and serves commands through a [`ModelHandle`], and what
//! this machine has (for `drmas info`).

mod backend;
mod collective;
mod device;
mod engine_backend;
mod error;
mod nvml;
mod offload;
pub mod placement;
mod rounds;
mod runtime;
pub mod sizing;
mod worker;

pub use backend::{
    Backend, BackendRequest, GatherTo, ModelBackend, OPTIMIZER_FILE, OPTIMIZER_OWNER_KEY,
    OffloadParts, Residency, ScoreRequest, Slot, Training, load_adapter_dir, save_adapter,
};
pub use collective::{DistJob, ModelGroup, Traffic};
pub use device::{DeviceError, DeviceSpec, cuda_count, parse_device, synchronize};
pub use engine_backend::{EngineBackend, WeightSync, finish_generation, start_serving};
pub use error::{BackendError, EngineFailure, WorkerError};
pub use nvml::{GpuInfo, driver_gpus};
pub use offload::{Offload, distinct_workers};
pub use rounds::{Batching, Rounds};
pub use runtime::{RuntimeInfo, runtime_info, smoke_test};
pub use worker::{
    DeviceTurn, ModelHandle, WorkerConfig, WorkerStats, panic_message, spawn_worker,
    spawn_worker_on,
};
