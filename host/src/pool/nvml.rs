//! GPU names and memory from the NVIDIA driver's management library. libtorch reports
//! only a device count; NVML ships with every driver, so where there is a GPU it is
//! there too. Indices are the driver's, which can differ from CUDA's under
//! `CUDA_VISIBLE_DEVICES`.

use libloading::{Library, Symbol};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub memory_total_mib: u64,
}

#[repr(C)]
struct NvmlMemory {
    total: u64,
    free: u64,
    used: u64,
}

type Handle = *mut c_void;

/// The GPUs the driver sees; empty where there is no NVIDIA driver.
pub fn driver_gpus() -> Vec<GpuInfo> {
    // SAFETY: NVML's C API is called with the signatures of its public header;
    // buffers are sized as NVML requires.
    unsafe { query() }.unwrap_or_default()
}

unsafe fn query() -> Option<Vec<GpuInfo>> {
    let lib = unsafe { Library::new("libnvidia-ml.so.1") }.ok()?;
    unsafe {
        let init: Symbol<unsafe extern "C" fn() -> c_int> = lib.get(b"nvmlInit_v2").ok()?;
        let count: Symbol<unsafe extern "C" fn(*mut c_uint) -> c_int> =
            lib.get(b"nvmlDeviceGetCount_v2").ok()?;
        let by_index: Symbol<unsafe extern "C" fn(c_uint, *mut Handle) -> c_int> =
            lib.get(b"nvmlDeviceGetHandleByIndex_v2").ok()?;
        let name: Symbol<unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> c_int> =
            lib.get(b"nvmlDeviceGetName").ok()?;
        let memory: Symbol<unsafe extern "C" fn(Handle, *mut NvmlMemory) -> c_int> =
            lib.get(b"nvmlDeviceGetMemoryInfo").ok()?;
        let shutdown: Symbol<unsafe extern "C" fn() -> c_int> = lib.get(b"nvmlShutdown").ok()?;
        if init() != 0 {
            return None;
        }
        let mut n: c_uint = 0;
        let mut gpus = Vec::new();
        if count(&mut n) == 0 {
            for i in 0..n {
                let mut handle: Handle = std::ptr::null_mut();
                if by_index(i, &mut handle) != 0 {
                    continue;
                }
                let mut buf = [0 as c_char; 96];
                let gpu_name = if name(handle, buf.as_mut_ptr(), buf.len() as c_uint) == 0 {
                    CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
                } else {
                    "unknown".to_string()
                };
                let mut mem = NvmlMemory {
                    total: 0,
                    free: 0,
                    used: 0,
                };
                let total = if memory(handle, &mut mem) == 0 {
                    mem.total / (1 << 20)
                } else {
                    0
                };
                gpus.push(GpuInfo {
                    index: i,
                    name: gpu_name,
                    memory_total_mib: total,
                });
            }
        }
        shutdown();
        Some(gpus)
    }
}
