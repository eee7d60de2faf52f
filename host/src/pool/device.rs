//! Device names: parsed once at the edge into [`DeviceSpec`], resolved against what this
//! machine has in one place ([`resolve`]), so `auto` means the same everywhere.

use std::fmt;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Every visible GPU, or the CPU where there is none.
    Auto,
    Cpu,
    Cuda(usize),
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    #[error("unknown device `{0}`: expected \"auto\", \"cpu\" or \"cuda:N\"")]
    Unknown(String),
    #[error("device `cuda:{index}` does not exist: {}", available(*count))]
    Missing { index: usize, count: usize },
}

/// The devices a machine with `count` GPUs has, for error messages.
fn available(count: usize) -> String {
    match count {
        0 => "this machine has no CUDA device (devices: cpu)".to_string(),
        1 => "this machine has one CUDA device (devices: cpu, cuda:0)".to_string(),
        n => format!(
            "this machine has {n} CUDA devices (devices: cpu, cuda:0..cuda:{})",
            n - 1
        ),
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = DeviceError;

    /// Parses `auto`, `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
    fn from_str(text: &str) -> Result<Self, DeviceError> {
        match text {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| DeviceError::Unknown(text.to_string())),
        }
    }
}

/// Parses a device name (see [`DeviceSpec::from_str`]).
pub fn parse_device(text: &str) -> Result<DeviceSpec, DeviceError> {
    text.parse()
}

impl DeviceSpec {
    /// The devices this name stands for on a machine with `cuda_count` GPUs: `auto` is
    /// every GPU, or the CPU where there is none; a GPU that does not exist is an error.
    pub fn resolve_with(self, cuda_count: usize) -> Result<Vec<tch::Device>, DeviceError> {
        match self {
            DeviceSpec::Cpu => Ok(vec![tch::Device::Cpu]),
            DeviceSpec::Cuda(index) if index < cuda_count => Ok(vec![tch::Device::Cuda(index)]),
            DeviceSpec::Cuda(index) => Err(DeviceError::Missing {
                index,
                count: cuda_count,
            }),
            DeviceSpec::Auto if cuda_count == 0 => Ok(vec![tch::Device::Cpu]),
            DeviceSpec::Auto => Ok((0..cuda_count).map(tch::Device::Cuda).collect()),
        }
    }

    /// [`Self::resolve_with`] on this machine.
    pub fn resolve(self) -> Result<Vec<tch::Device>, DeviceError> {
        self.resolve_with(cuda_count())
    }

    /// The one device a single-device command (`generate`, `bench`) runs on: the first
    /// of what the name resolves to.
    pub fn single(self) -> Result<tch::Device, DeviceError> {
        Ok(self.resolve()?[0])
    }
}

/// Waits for the work queued on `device` (a CUDA stream runs ahead of the host), so a
/// timing ends when the work does; nothing to wait for on the CPU.
pub fn synchronize(device: tch::Device) {
    if let tch::Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// CUDA devices libtorch sees in this process.
pub fn cuda_count() -> usize {
    tch::Cuda::device_count().max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn parses_device_names() {
        assert_eq!(parse_device("cpu"), Ok(DeviceSpec::Cpu));
        assert_eq!(parse_device("cuda:3"), Ok(DeviceSpec::Cuda(3)));
        assert_eq!(parse_device("cuda"), Ok(DeviceSpec::Cuda(0)));
        assert_eq!(
            parse_device("gpu0").unwrap_err().to_string(),
            "unknown device `gpu0`: expected \"auto\", \"cpu\" or \"cuda:N\""
        );
        assert!(parse_device("cuda:x").is_err());
        assert!(parse_device("auto ").is_err());
    }

    #[test]
    fn auto_means_every_gpu_or_the_cpu() {
        assert_eq!(DeviceSpec::Auto.resolve_with(0), Ok(vec![Device::Cpu]));
        assert_eq!(
            DeviceSpec::Auto.resolve_with(2),
            Ok(vec![Device::Cuda(0), Device::Cuda(1)])
        );
        assert_eq!(
            DeviceSpec::Cuda(1).resolve_with(1).unwrap_err().to_string(),
            "device `cuda:1` does not exist: this machine has one CUDA device (devices: cpu, cuda:0)"
        );
        assert_eq!(
            DeviceSpec::Cuda(7).resolve_with(4).unwrap_err().to_string(),
            "device `cuda:7` does not exist: this machine has 4 CUDA devices (devices: cpu, cuda:0..cuda:3)"
        );
    }
}
