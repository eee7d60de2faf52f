//! What libtorch in this process can do.

use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    /// From the `version.py` beside the loaded libtorch, e.g. `2.11.0+cu130`.
    pub libtorch_version: String,
    /// The folder the loaded `libtorch_cpu.so` came from.
    pub libtorch_dir: Option<PathBuf>,
    pub cuda_available: bool,
    pub cuda_device_count: i64,
    pub cudnn_available: bool,
    pub threads: i32,
}

pub fn runtime_info() -> RuntimeInfo {
    let libtorch_dir = loaded_libtorch_dir();
    let libtorch_version = libtorch_dir
        .as_ref()
        .and_then(|lib| std::fs::read_to_string(lib.parent()?.join("version.py")).ok())
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("__version__ = "))
                .map(|v| v.trim().trim_matches('\'').trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "unknown (no version.py beside the loaded libtorch)".to_string());
    RuntimeInfo {
        libtorch_version,
        libtorch_dir,
        cuda_available: tch::Cuda::is_available(),
        cuda_device_count: tch::Cuda::device_count(),
        cudnn_available: tch::Cuda::cudnn_is_available(),
        threads: tch::get_num_threads(),
    }
}

/// Finds the loaded `libtorch_cpu.so` in this process's memory map.
fn loaded_libtorch_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libtorch_cpu.so"))
        .and_then(|p| PathBuf::from(p).parent().map(PathBuf::from))
}

/// Multiplies two small matrices on `device` and returns the sum of the product, to
/// show that kernels really run there (a 2×2 ones product sums to 8).
pub fn smoke_test(device: tch::Device) -> Result<f64, tch::TchError> {
    let a = tch::Tensor::f_ones([2, 2], (tch::Kind::Float, device))?;
    let product = a.f_matmul(&a)?;
    product.f_sum(tch::Kind::Double)?.f_double_value(&[])
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke_test_runs_on_the_cpu() {
        assert_eq!(super::smoke_test(tch::Device::Cpu).unwrap(), 8.0);
    }
}
