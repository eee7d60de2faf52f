//! Devices: parsing device names, and what this machine has (for `drmas info`).

mod device;
mod nvml;
mod runtime;

pub use device::{DeviceSpec, parse_device};
pub use nvml::{GpuInfo, driver_gpus};
pub use runtime::{RuntimeInfo, runtime_info, smoke_test};
