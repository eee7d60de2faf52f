//! The shim's C interface (`shim/c10d_shim.cpp`).

use std::os::raw::{c_char, c_int};
use tch::Tensor;

#[repr(C)]
pub struct DrmasStore {
    _private: [u8; 0],
}
#[repr(C)]
pub struct DrmasGroup {
    _private: [u8; 0],
}
#[repr(C)]
pub struct DrmasWork {
    _private: [u8; 0],
}

/// What an `at::Tensor*` points to (tch's `C_tensor` pointers are `at::Tensor*`).
pub type AtTensor = std::ffi::c_void;

unsafe extern "C" {
    pub fn drmas_store_new(
        host: *const c_char,
        port: u16,
        world_size: c_int,
        is_server: bool,
        timeout_ms: i64,
        connect_timeout_ms: i64,
        out: *mut *mut DrmasStore,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_store_free(s: *mut DrmasStore);
    pub fn drmas_group_new_gloo(
        s: *mut DrmasStore,
        prefix: *const c_char,
        rank: c_int,
        world_size: c_int,
        timeout_ms: i64,
        out: *mut *mut DrmasGroup,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_group_new_nccl(
        s: *mut DrmasStore,
        prefix: *const c_char,
        rank: c_int,
        world_size: c_int,
        timeout_ms: i64,
        out: *mut *mut DrmasGroup,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_group_free(g: *mut DrmasGroup);
    pub fn drmas_all_reduce_sum(
        g: *mut DrmasGroup,
        t: *mut AtTensor,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_all_reduce_max(
        g: *mut DrmasGroup,
        t: *mut AtTensor,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_broadcast(
        g: *mut DrmasGroup,
        t: *mut AtTensor,
        root: c_int,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_all_gather(
        g: *mut DrmasGroup,
        output: *mut AtTensor,
        input: *mut AtTensor,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_reduce_scatter_sum(
        g: *mut DrmasGroup,
        output: *mut AtTensor,
        input: *mut AtTensor,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_all_gather_into_tensor(
        g: *mut DrmasGroup,
        output: *mut AtTensor,
        input: *mut AtTensor,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_all_gather_into_tensor_start(
        g: *mut DrmasGroup,
        output: *mut AtTensor,
        input: *mut AtTensor,
        work: *mut *mut DrmasWork,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    pub fn drmas_work_wait(w: *mut DrmasWork, err: *mut c_char, len: usize) -> c_int;
    pub fn drmas_work_free(w: *mut DrmasWork);
    pub fn drmas_barrier(g: *mut DrmasGroup, err: *mut c_char, len: usize) -> c_int;
}

/// The `at::Tensor*` behind a tch tensor.
pub fn at(t: &mut Tensor) -> *mut AtTensor {
    t.as_mut_ptr().cast()
}
