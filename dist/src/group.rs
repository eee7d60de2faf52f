//! The store and process groups, and their collectives.

use crate::{DistError, ffi};
use std::{ffi::CString, os::raw::c_char, time::Duration};
use tch::Tensor;

const ERR_LEN: usize = 4096;

/// Runs a shim call with an error buffer; a non-zero return becomes the C++ text.
fn call(op: &str, f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<(), DistError> {
    let mut buf = vec![0u8; ERR_LEN];
    let rc = f(buf.as_mut_ptr().cast(), buf.len());
    if rc == 0 {
        return Ok(());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]);
    // c10's messages carry the C++ stack after this line; the message is before it.
    let message = text
        .split("\nException raised from")
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    Err(DistError::C10d {
        op: op.to_string(),
        message,
    })
}

fn millis(timeout: Duration) -> i64 {
    i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX)
}

/// The job's key-value store (c10d's `TCPStore`), where process groups rendezvous.
pub struct Store {
    ptr: *mut ffi::DrmasStore,
}

// SAFETY: a TCPStore serializes its own requests; the pointer is owned here and freed once.
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

/// A store pointer handed from the thread that made it.
struct StorePtr(*mut ffi::DrmasStore);
// SAFETY: the pointer is owned by whoever holds this; it is used by one thread at a time.
unsafe impl Send for StorePtr {}

impl Store {
    /// Connects to (or, with `is_server`, hosts) the store at `host:port` for
    /// `world_size` processes, waiting at most `timeout` for it in all: a port held by
    /// another program, which accepts the connection and never answers, fails after
    /// `timeout` too ([`DistError::StoreTimeout`]); a port this process cannot listen on
    /// is [`DistError::PortInUse`].
    pub fn connect(
        host: &str,
        port: u16,
        world_size: usize,
        is_server: bool,
        timeout: Duration,
    ) -> Result<Self, DistError> {
        let c_host = CString::new(host)
            .map_err(|_| DistError::Launch(format!("the store host `{host}` holds a NUL byte")))?;
        let addr = format!("{host}:{port}");
        let op = format!("the store at {addr}");
        // c10d's own connect deadline lies past ours, so that ours is the one a rank
        // reports; its operations wait `timeout` once connected.
        let connect_timeout = timeout.saturating_mul(2) + Duration::from_secs(1);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("drmas-store".into())
            .spawn(move || {
                let mut ptr = std::ptr::null_mut();
                let made = call(&op, |err, len| unsafe {
                    ffi::drmas_store_new(
                        c_host.as_ptr(),
                        port,
                        world_size as i32,
                        is_server,
                        millis(timeout),
                        millis(connect_timeout),
                        &mut ptr,
                        err,
                        len,
                    )
                })
                .map(|()| StorePtr(ptr));
                // Given up on: nobody will own it.
                if let Err(std::sync::mpsc::SendError(Ok(late))) = tx.send(made) {
                    // SAFETY: created above, never handed out.
                    unsafe { ffi::drmas_store_free(late.0) }
                }
            })
            .map_err(|e| DistError::C10d {
                op: format!("the store at {addr}"),
                message: format!("cannot start a thread: {e}"),
            })?;
        match rx.recv_timeout(timeout) {
            Ok(Ok(StorePtr(ptr))) => Ok(Self { ptr }),
            Ok(Err(DistError::C10d { message, .. }))
                if is_server
                    && (message.contains("EADDRINUSE")
                        || message.contains("ddress already in use")) =>
            {
                Err(DistError::PortInUse { port })
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(DistError::StoreTimeout {
                addr,
                waited: timeout,
            }),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: created by drmas_store_new, freed once; groups keep their own reference.
        unsafe { ffi::drmas_store_free(self.ptr) }
    }
}

/// Which library moves the tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// CPU tensors, over TCP.
    Gloo,
    /// CUDA tensors (the `nccl` feature).
    Nccl,
}

/// One process group: `world_size` processes that issue the same collectives in the same
/// order. Each collective waits at most the group's timeout, then fails with c10d's
/// text (which names the peer that did not answer).
pub struct Group {
    ptr: *mut ffi::DrmasGroup,
    name: String,
    rank: usize,
    world_size: usize,
}

// SAFETY: the group is used by one thread at a time (`&mut self` for collectives that
// write, and drmas gives each group to one worker thread).
unsafe impl Send for Group {}

impl Group {
    /// A group named `name` (its keys in the store are under `name/`): every rank must
    /// create it with the same name.
    pub fn new(
        store: &Store,
        backend: Backend,
        name: &str,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> Result<Self, DistError> {
        let prefix = CString::new(name)
            .map_err(|_| DistError::Launch(format!("the group name `{name}` holds a NUL byte")))?;
        let mut ptr = std::ptr::null_mut();
        let op = format!("process group `{name}` (rank {rank} of {world_size}, {backend:?})");
        call(&op, |err, len| unsafe {
            let f = match backend {
                Backend::Gloo => ffi::drmas_group_new_gloo,
                Backend::Nccl => ffi::drmas_group_new_nccl,
            };
            f(
                store.ptr,
                prefix.as_ptr(),
                rank as i32,
                world_size as i32,
                millis(timeout),
                &mut ptr,
                err,
                len,
            )
        })?;
        Ok(Self {
            ptr,
            name: name.to_string(),
            rank,
            world_size,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn op(&self, what: &str) -> String {
        format!(
            "{what} in group `{}` (rank {} of {})",
            self.name, self.rank, self.world_size
        )
    }

    /// Sums `t` over the group, in place (every rank ends with the sum).
    pub fn all_reduce_sum(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        let op = self.op("all-reduce (sum)");
        call(&op, |err, len| unsafe {
            ffi::drmas_all_reduce_sum(self.ptr, ffi::at(t), err, len)
        })
    }

    /// The elementwise maximum of `t` over the group, in place.
    pub fn all_reduce_max(&mut self, t: &mut Tensor) -> Result<(), DistError> {
        let op = self.op("all-reduce (max)");
        call(&op, |err, len| unsafe {
            ffi::drmas_all_reduce_max(self.ptr, ffi::at(t), err, len)
        })
    }

    /// Rank `root`'s `t` into every rank's `t` (same shape and type everywhere).
    pub fn broadcast(&mut self, t: &mut Tensor, root: usize) -> Result<(), DistError> {
        let op = self.op(&format!("broadcast from rank {root}"));
        call(&op, |err, len| unsafe {
            ffi::drmas_broadcast(self.ptr, ffi::at(t), root as i32, err, len)
        })
    }

    /// Every rank's `input` (the same shape on every rank), stacked along a new first
    /// dimension in rank order.
    pub fn all_gather(&mut self, input: &Tensor) -> Result<Tensor, DistError> {
        let mut input = input.contiguous();
        let mut shape = vec![self.world_size as i64];
        shape.extend(input.size());
        let mut out = Tensor::zeros(&shape, (input.kind(), input.device()));
        let op = self.op("all-gather");
        call(&op, |err, len| unsafe {
            ffi::drmas_all_gather(self.ptr, ffi::at(&mut out), ffi::at(&mut input), err, len)
        })?;
        Ok(out)
    }

    /// Sums `input` over the group and keeps this rank's slice of the sum in `output`.
    /// Both are taken flat, whatever their shapes: `input` holds world_size × `output`'s
    /// n elements, its slice r being elements [r·n, (r+1)·n), and rank r ends with the
    /// sum of every rank's slice r. A length that is not a multiple of the world size is
    /// the caller's to pad. On Gloo this is an all-to-all and a local sum (the shim says
    /// what it costs); on NCCL, NCCL's reduce-scatter.
    pub fn reduce_scatter_sum(
        &mut self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), DistError> {
        let op = self.op("reduce-scatter (sum)");
        self.check_flat(&op, ("input", input), ("output", output))?;
        let mut input = input.contiguous();
        self.write_contiguous(output, |group, out| {
            call(&op, |err, len| unsafe {
                ffi::drmas_reduce_scatter_sum(
                    group.ptr,
                    ffi::at(out),
                    ffi::at(&mut input),
                    err,
                    len,
                )
            })
        })
    }

    /// Every rank's `input` into `output`, in rank order, both taken flat: `output`
    /// holds world_size × `input`'s n elements, rank r's at [r·n, (r+1)·n).
    pub fn all_gather_into_tensor(
        &mut self,
        output: &mut Tensor,
        input: &Tensor,
    ) -> Result<(), DistError> {
        let op = self.op("all-gather (into one tensor)");
        self.check_flat(&op, ("output", output), ("input", input))?;
        let mut input = input.contiguous();
        self.write_contiguous(output, |group, out| {
            call(&op, |err, len| unsafe {
                ffi::drmas_all_gather_into_tensor(
                    group.ptr,
                    ffi::at(out),
                    ffi::at(&mut input),
                    err,
                    len,
                )
            })
        })
    }

    /// [`Self::all_gather_into_tensor`] started: it runs while the caller computes, and
    /// `output` (contiguous) holds the gather once [`PendingGather::wait`] returns.
    /// Collectives issued on the group meanwhile run after it, in the order issued (as
    /// every rank must issue them).
    pub fn start_all_gather_into_tensor(
        &mut self,
        output: &Tensor,
        input: &Tensor,
    ) -> Result<PendingGather, DistError> {
        let op = self.op("all-gather (into one tensor)");
        self.check_flat(&op, ("output", output), ("input", input))?;
        if !output.is_contiguous() {
            return Err(DistError::Tensors {
                op,
                message: "a started all-gather writes a contiguous output".into(),
            });
        }
        let mut input = input.contiguous();
        let mut out = output.shallow_clone();
        let mut work = std::ptr::null_mut();
        call(&op, |err, len| unsafe {
            ffi::drmas_all_gather_into_tensor_start(
                self.ptr,
                ffi::at(&mut out),
                ffi::at(&mut input),
                &mut work,
                err,
                len,
            )
        })?;
        Ok(PendingGather { work, op })
    }

    /// Checks, before anything is sent, that `whole` holds world_size × `part`'s
    /// elements and that both have one dtype and device: a rank that got these wrong
    /// would otherwise leave the others waiting, or read past a buffer.
    fn check_flat(
        &self,
        op: &str,
        (whole_name, whole): (&str, &Tensor),
        (part_name, part): (&str, &Tensor),
    ) -> Result<(), DistError> {
        let fail = |message: String| {
            Err(DistError::Tensors {
                op: op.to_string(),
                message,
            })
        };
        if whole.kind() != part.kind() {
            return fail(format!(
                "the {whole_name} is {:?} and the {part_name} {:?}: both must have one dtype",
                whole.kind(),
                part.kind()
            ));
        }
        if whole.device() != part.device() {
            return fail(format!(
                "the {whole_name} is on {:?} and the {part_name} on {:?}: both must be on one device",
                whole.device(),
                part.device()
            ));
        }
        let (n, total) = (part.numel(), whole.numel());
        if total != self.world_size * n {
            return fail(format!(
                "the {whole_name} has {total} elements and the {part_name} {n}: the {whole_name} must hold {} ranks × {n} = {}",
                self.world_size,
                self.world_size * n,
            ));
        }
        Ok(())
    }

    /// Runs `f` on `t`, or on a contiguous copy of it that is then copied back: the
    /// shim writes the flat elements of a contiguous tensor.
    fn write_contiguous(
        &mut self,
        t: &mut Tensor,
        f: impl FnOnce(&mut Self, &mut Tensor) -> Result<(), DistError>,
    ) -> Result<(), DistError> {
        if t.is_contiguous() {
            return f(self, t);
        }
        let mut staged = t.contiguous();
        f(self, &mut staged)?;
        t.copy_(&staged);
        Ok(())
    }

    /// Every rank's bytes, in rank order (lengths may differ): two all-gathers, the
    /// lengths then the padded bytes.
    pub fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>, DistError> {
        let len = Tensor::from_slice(&[bytes.len() as i64]);
        let lens = self.all_gather(&len)?;
        let lens: Vec<i64> =
            Vec::<i64>::try_from(lens.reshape([-1])).map_err(|e| DistError::C10d {
                op: self.op("all-gather"),
                message: e.to_string(),
            })?;
        let max = lens.iter().copied().max().unwrap_or(0).max(1) as usize;
        let mut padded = bytes.to_vec();
        padded.resize(max, 0);
        let all = self.all_gather(&Tensor::from_slice(&padded))?;
        let flat: Vec<u8> =
            Vec::<u8>::try_from(all.reshape([-1])).map_err(|e| DistError::C10d {
                op: self.op("all-gather"),
                message: e.to_string(),
            })?;
        Ok(lens
            .iter()
            .enumerate()
            .map(|(r, &n)| flat[r * max..r * max + n as usize].to_vec())
            .collect())
    }

    /// Waits until every rank of the group got here.
    pub fn barrier(&mut self) -> Result<(), DistError> {
        let op = self.op("barrier");
        call(&op, |err, len| unsafe {
            ffi::drmas_barrier(self.ptr, err, len)
        })
    }
}

/// An all-gather started by [`Group::start_all_gather_into_tensor`]. Dropped without
/// [`Self::wait`], it is waited for (its tensors are in use until it ends).
pub struct PendingGather {
    work: *mut ffi::DrmasWork,
    op: String,
}

// SAFETY: the work is owned here, waited for and freed once, by one thread at a time.
unsafe impl Send for PendingGather {}

impl PendingGather {
    /// Waits (at most the group's timeout) for the gather to end.
    pub fn wait(self) -> Result<(), DistError> {
        call(&self.op, |err, len| unsafe {
            ffi::drmas_work_wait(self.work, err, len)
        })
    }
}

impl Drop for PendingGather {
    fn drop(&mut self) {
        // SAFETY: created by drmas_all_gather_into_tensor_start, freed once.
        unsafe { ffi::drmas_work_free(self.work) }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: created by drmas_group_new_*, freed once.
        unsafe { ffi::drmas_group_free(self.ptr) }
    }
}
