//! libtorch operations tch 0.24 does not expose, through a C++ shim compiled against
//! the same libtorch (`shim/kernels_shim.cpp`):
//!
//! - [`OpCounter`]: how many ATen operators run between two points, the measure of a
//!   decode step's launch cost that can be taken on the CPU as well as on a GPU (on
//!   CUDA each outermost operator is at least one kernel launch);
//! - [`fused_adamw`]: libtorch's fused AdamW step over a list of parameters (one
//!   multi-tensor kernel on CUDA instead of ~10 operators per parameter).

use std::sync::atomic::{AtomicBool, Ordering};
use tch::Tensor;
use thiserror::Error;

mod ffi {
    use std::os::raw::c_char;

    pub type AtTensor = std::ffi::c_void;

    unsafe extern "C" {
        pub fn drmas_ops_count_start() -> u64;
        pub fn drmas_ops_count_read(all: *mut i64, outermost: *mut i64);
        pub fn drmas_ops_count_stop(handle: u64);
        pub fn drmas_fused_adamw(
            params: *const *mut AtTensor,
            grads: *const *mut AtTensor,
            exp_avgs: *const *mut AtTensor,
            exp_avg_sqs: *const *mut AtTensor,
            steps: *const *mut AtTensor,
            n: usize,
            lr: f64,
            beta1: f64,
            beta2: f64,
            weight_decay: f64,
            eps: f64,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum KernelError {
    #[error("an operator counter is already running (one at a time per process)")]
    CounterBusy,
    #[error("fused AdamW: {0}")]
    FusedAdamW(String),
}

/// Whether a counter is running: the shim's counts are process-wide.
static COUNTING: AtomicBool = AtomicBool::new(false);

/// Operators dispatched since a point: `all` of them, and the `outermost` (those the
/// caller issued, not those they ran inside).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCount {
    pub all: i64,
    pub outermost: i64,
}

impl std::ops::Sub for OpCount {
    type Output = OpCount;
    fn sub(self, o: OpCount) -> OpCount {
        OpCount {
            all: self.all - o.all,
            outermost: self.outermost - o.outermost,
        }
    }
}

/// Counts the ATen operators every thread dispatches while it lives (one at a time per
/// process). Counting costs a callback per operator: it is for benchmarks, not runs.
pub struct OpCounter {
    handle: u64,
}

impl OpCounter {
    pub fn start() -> Result<Self, KernelError> {
        if COUNTING.swap(true, Ordering::SeqCst) {
            return Err(KernelError::CounterBusy);
        }
        // SAFETY: no arguments; the handle is returned to the shim on drop.
        let handle = unsafe { ffi::drmas_ops_count_start() };
        Ok(Self { handle })
    }

    /// The counts since [`OpCounter::start`].
    pub fn read(&self) -> OpCount {
        let (mut all, mut outermost) = (0i64, 0i64);
        // SAFETY: two valid out-pointers.
        unsafe { ffi::drmas_ops_count_read(&mut all, &mut outermost) };
        OpCount { all, outermost }
    }
}

impl Drop for OpCounter {
    fn drop(&mut self) {
        // SAFETY: the handle the shim returned at the start, removed once.
        unsafe { ffi::drmas_ops_count_stop(self.handle) };
        COUNTING.store(false, Ordering::SeqCst);
    }
}

/// AdamW's hyper-parameters (PyTorch's formula, decoupled weight decay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
}

/// One fused AdamW step, in place, over `params` with `grads`, moments `exp_avgs` and
/// `exp_avg_sqs`, and each parameter's step count after this step (`steps`: a float32
/// scalar tensor on its device, read by the kernel on the device, so no host wait; one
/// tensor may serve every parameter): libtorch's `_fused_adamw_`. Lists of different lengths,
/// and a gradient or moment whose shape, device or dtype is not its parameter's (the
/// CPU kernel does not check them), are refused before any tensor is touched.
pub fn fused_adamw(
    params: &[&Tensor],
    grads: &[&Tensor],
    exp_avgs: &[&Tensor],
    exp_avg_sqs: &[&Tensor],
    steps: &[&Tensor],
    h: AdamW,
) -> Result<(), KernelError> {
    let n = params.len();
    if [grads.len(), exp_avgs.len(), exp_avg_sqs.len(), steps.len()]
        .iter()
        .any(|&l| l != n)
    {
        return Err(KernelError::FusedAdamW(format!(
            "lists of different lengths: {n} parameters, {} gradients, {} and {} moments, {} steps",
            grads.len(),
            exp_avgs.len(),
            exp_avg_sqs.len(),
            steps.len()
        )));
    }
    for (i, p) in params.iter().enumerate() {
        for (what, t) in [
            ("gradient", grads[i]),
            ("first moment", exp_avgs[i]),
            ("second moment", exp_avg_sqs[i]),
        ] {
            if (t.size(), t.device(), t.kind()) != (p.size(), p.device(), p.kind()) {
                return Err(KernelError::FusedAdamW(format!(
                    "parameter {i}'s {what} is {:?} {:?} on {:?}, the parameter {:?} {:?} on {:?}",
                    t.size(),
                    t.kind(),
                    t.device(),
                    p.size(),
                    p.kind(),
                    p.device()
                )));
            }
        }
        let s = steps[i];
        if (s.dim(), s.kind(), s.device()) != (0, tch::Kind::Float, p.device()) {
            return Err(KernelError::FusedAdamW(format!(
                "parameter {i}'s step count must be a float32 scalar on {:?}, got {:?} {:?} on {:?}",
                p.device(),
                s.size(),
                s.kind(),
                s.device()
            )));
        }
    }
    let ptrs = |ts: &[&Tensor]| -> Vec<*mut ffi::AtTensor> {
        ts.iter()
            .map(|t| t.as_ptr() as *mut ffi::AtTensor)
            .collect()
    };
    let (p, g, m, v, s) = (
        ptrs(params),
        ptrs(grads),
        ptrs(exp_avgs),
        ptrs(exp_avg_sqs),
        ptrs(steps),
    );
    let mut err = vec![0u8; 2048];
    // SAFETY: five arrays of n live `at::Tensor*` (tch's pointers) borrowed for the
    // call, and an error buffer of its stated length.
    let rc = unsafe {
        ffi::drmas_fused_adamw(
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            s.as_ptr(),
            n,
            h.lr,
            h.beta1,
            h.beta2,
            h.weight_decay,
            h.eps,
            err.as_mut_ptr() as *mut std::os::raw::c_char,
            err.len(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
    let text = String::from_utf8_lossy(&err[..end]);
    // libtorch's messages end with a C++ backtrace; its first line says what failed.
    Err(KernelError::FusedAdamW(
        text.lines().next().unwrap_or("").to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    /// The counter counts every thread's operators: the tests take turns.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn the_counter_sees_each_operator_issued_and_what_they_run_inside() {
        let _turn = turn();
        let a = Tensor::from_slice(&[1.0f32, 2.0]);
        let b = Tensor::from_slice(&[3.0f32, 4.0]);
        let counter = OpCounter::start().unwrap();
        assert_eq!(OpCounter::start().err(), Some(KernelError::CounterBusy));
        let before = counter.read();
        let c = &a + &b;
        let d = &c * &a;
        let after = counter.read();
        assert_eq!((after - before).outermost, 2);
        assert!((after - before).all >= 2);
        // A composite operator (log_softmax) runs others inside: counted once outermost.
        let before = counter.read();
        let _ = d.log_softmax(0, Kind::Float);
        let inside = counter.read() - before;
        assert_eq!(inside.outermost, 1);
        assert!(inside.all > 1, "{inside:?}");
        drop(counter);
        // Stopped: nothing counts, and a new counter may start.
        let counter = OpCounter::start().unwrap();
        assert_eq!(counter.read(), OpCount::default());
    }

    #[test]
    fn fused_adamw_takes_pytorchs_step_computed_by_hand() {
        let _turn = turn();
        // One step of AdamW from zero moments: m = (1 − β1)·g, v = (1 − β2)·g², the
        // bias corrections make m̂ = g and v̂ = g², so p ← p·(1 − lr·wd) − lr·g/(|g| + ε).
        let p = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
        let g = Tensor::from_slice(&[0.5f32, -0.25, 0.0]);
        let m = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
        let v = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
        let step = Tensor::ones([], (Kind::Float, tch::Device::Cpu));
        let h = AdamW {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.01,
            eps: 1e-8,
        };
        fused_adamw(&[&p], &[&g], &[&m], &[&v], &[&step], h).unwrap();
        let got = Vec::<f32>::try_from(&p).unwrap();
        let want = [
            1.0 * (1.0 - 0.001) - 0.1 * 0.5 / (0.5 + 1e-8),
            -2.0 * (1.0 - 0.001) + 0.1 * 0.25 / (0.25 + 1e-8),
            0.5 * (1.0 - 0.001),
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
        assert_eq!(Vec::<f32>::try_from(&m).unwrap(), [0.05f32, -0.025, 0.0]);
    }

    #[test]
    fn mismatched_lists_and_tensors_are_refused_with_the_reason() {
        let _turn = turn();
        let p = Tensor::from_slice(&[1.0f32]);
        let s = Tensor::zeros([], (Kind::Float, tch::Device::Cpu));
        let h = AdamW {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.0,
            eps: 1e-8,
        };
        let e = fused_adamw(&[&p], &[], &[&p], &[&p], &[&s], h).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fused AdamW: lists of different lengths: 1 parameters, 0 gradients, 1 and 1 moments, 1 steps"
        );
        let wide = Tensor::from_slice(&[1.0f32, 2.0]);
        let e = fused_adamw(&[&p], &[&wide], &[&p], &[&p], &[&s], h).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fused AdamW: parameter 0's gradient is [2] Float on Cpu, the parameter [1] Float on Cpu"
        );
        let double = Tensor::from_slice(&[1.0f64]);
        let e = fused_adamw(&[&p], &[&p], &[&p], &[&double], &[&s], h).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fused AdamW: parameter 0's second moment is [1] Double on Cpu, the parameter [1] Float on Cpu"
        );
        let e = fused_adamw(&[&p], &[&p], &[&p], &[&p], &[&p], h).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fused AdamW: parameter 0's step count must be a float32 scalar on Cpu, got [1] Float on Cpu"
        );
        // Nothing was touched.
        assert_eq!(Vec::<f32>::try_from(&p).unwrap(), [1.0]);
    }
}
