// A C interface over libtorch's c10d (the engine behind torch.distributed): a TCP
// store, process groups (Gloo for CPU tensors; NCCL for CUDA tensors when built with
// DRMAS_NCCL), and the few collectives drmas needs. Every call catches C++ exceptions
// and returns their text; every collective waits at most the group's timeout.
//
// Tensors cross as `at::Tensor*`, which is what tch's `Tensor::as_ptr()` holds.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DRMAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* err, size_t len, const std::string& text) {
  if (err == nullptr || len == 0) return;
  size_t n = text.size() < len - 1 ? text.size() : len - 1;
  std::memcpy(err, text.data(), n);
  err[n] = '\0';
}

template <typename F>
int guarded(char* err, size_t len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, len, e.what());
  } catch (...) {
    set_error(err, len, "unknown C++ exception");
  }
  return 1;
}

}  // namespace

struct DrmasStore {
  c10::intrusive_ptr<c10d::Store> store;
};

// A collective started and not yet waited for: its work, and the tensors it reads and
// writes, held here until the wait so that neither is freed while it runs.
struct DrmasWork {
  c10::intrusive_ptr<c10d::Work> work;
  std::chrono::milliseconds timeout;
  at::Tensor out;
  at::Tensor in;
};

struct DrmasGroup {
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
  // NCCL has every collective natively; Gloo lacks a real reduce-scatter (below).
  bool nccl;
};

namespace {

// Every rank's `input` (flat, the same number of elements everywhere) into `output`
// (flat: world_size × that), in rank order, started: c10d's work, which runs while the
// caller goes on. Both contiguous, of one dtype and device. Both backends have it
// natively; Gloo's gathers into a buffer of the output's size and copies it out.
c10::intrusive_ptr<c10d::Work> start_all_gather_into_tensor(DrmasGroup* g, at::Tensor& out,
                                                            at::Tensor& in) {
  c10d::AllgatherOptions opts;
  opts.timeout = g->timeout;
  return g->backend->_allgather_base(out, in, opts);
}

}  // namespace

extern "C" {

// The job's store at host:port. `is_server`: this process hosts it (rank 0 without a
// launcher's agent store); the others connect as clients, retrying for at most
// `connect_timeout_ms`. The store's operations then wait at most `timeout_ms`. (The
// caller bounds the whole call itself: a client whose port is another program's can
// wait here for an answer that never comes.)
int drmas_store_new(const char* host, uint16_t port, int world_size, bool is_server,
                    int64_t timeout_ms, int64_t connect_timeout_ms, DrmasStore** out,
                    char* err, size_t len) {
  return guarded(err, len, [&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server;
    opts.numWorkers = world_size;
    opts.waitWorkers = false;
    opts.timeout = std::chrono::milliseconds(connect_timeout_ms);
    auto store = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    store->setTimeout(std::chrono::milliseconds(timeout_ms));
    *out = new DrmasStore{store};
  });
}

void drmas_store_free(DrmasStore* s) { delete s; }

// A Gloo process group over `prefix/` of the store.
int drmas_group_new_gloo(DrmasStore* s, const char* prefix, int rank, int world_size,
                         int64_t timeout_ms, DrmasGroup** out, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), s->store);
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && ifname[0] != '\0') {
      opts->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(std::string(ifname)));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, opts);
    *out = new DrmasGroup{pg, std::chrono::milliseconds(timeout_ms), false};
  });
}

int drmas_group_new_nccl(DrmasStore* s, const char* prefix, int rank, int world_size,
                         int64_t timeout_ms, DrmasGroup** out, char* err, size_t len) {
#ifdef DRMAS_NCCL
  return guarded(err, len, [&] {
    auto store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), s->store);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts);
    *out = new DrmasGroup{pg, std::chrono::milliseconds(timeout_ms), true};
  });
#else
  (void)s;
  (void)prefix;
  (void)rank;
  (void)world_size;
  (void)timeout_ms;
  (void)out;
  set_error(err, len, "this drmas was built without NCCL (cargo feature `nccl`)");
  return 1;
#endif
}

void drmas_group_free(DrmasGroup* g) { delete g; }

// Sums `t` over the group, in place.
int drmas_all_reduce_sum(DrmasGroup* g, at::Tensor* t, char* err, size_t len) {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> ts{*t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = g->timeout;
    auto work = g->backend->allreduce(ts, opts);
    work->wait(g->timeout);
  });
}

// The maximum of `t` over the group, in place.
int drmas_all_reduce_max(DrmasGroup* g, at::Tensor* t, char* err, size_t len) {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> ts{*t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    opts.timeout = g->timeout;
    auto work = g->backend->allreduce(ts, opts);
    work->wait(g->timeout);
  });
}

// `t` of rank `root` copied into every rank's `t`.
int drmas_broadcast(DrmasGroup* g, at::Tensor* t, int root, char* err, size_t len) {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> ts{*t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = g->timeout;
    auto work = g->backend->broadcast(ts, opts);
    work->wait(g->timeout);
  });
}

// Every rank's `input` (same shape everywhere) into `output`, whose first dimension is
// world_size × the input's.
int drmas_all_gather(DrmasGroup* g, at::Tensor* output, at::Tensor* input, char* err,
                     size_t len) {
  return guarded(err, len, [&] {
    std::vector<at::Tensor> in{*input};
    std::vector<at::Tensor> parts = output->unbind(0);
    std::vector<std::vector<at::Tensor>> out{parts};
    c10d::AllgatherOptions opts;
    opts.timeout = g->timeout;
    auto work = g->backend->allgather(out, in, opts);
    work->wait(g->timeout);
  });
}

// The sum over the group of `input` (flat: world_size × `output`'s elements, slice r at
// [r·n, (r+1)·n)), of which this rank keeps slice `rank` in `output`. Both contiguous,
// of one dtype and device; the caller checked the sizes.
//
// NCCL reduce-scatters natively. Gloo has no reduce-scatter of its own: its
// `_reduce_scatter_base` clones the input and all-reduces all of it, then keeps the
// slice, which sends 2·(N−1)/N of the input's bytes per rank (a ring all-reduce) and
// computes the whole sum on every rank. Here Gloo instead sends each rank its slice of
// everyone's input with one all-to-all — (N−1)/N of the input's bytes out and in per
// rank, what a ring reduce-scatter sends — and sums the N slices here, in rank order.
// It costs one buffer of the input's size for the slices received.
int drmas_reduce_scatter_sum(DrmasGroup* g, at::Tensor* output, at::Tensor* input, char* err,
                             size_t len) {
  return guarded(err, len, [&] {
    at::Tensor in = input->view({-1});
    at::Tensor out = output->view({-1});
    if (g->nccl) {
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      opts.timeout = g->timeout;
      auto work = g->backend->_reduce_scatter_base(out, in, opts);
      work->wait(g->timeout);
      return;
    }
    const int64_t world = g->backend->getSize();
    // Row r: rank r's slice `rank` (equal splits: empty counts).
    at::Tensor slices = at::empty({world, out.numel()}, in.options());
    at::Tensor received = slices.view({-1});
    std::vector<int64_t> counts;
    c10d::AllToAllOptions opts;
    opts.timeout = g->timeout;
    auto work = g->backend->alltoall_base(received, in, counts, counts, opts);
    work->wait(g->timeout);
    out.copy_(slices[0]);
    for (int64_t r = 1; r < world; ++r) out.add_(slices[r]);
  });
}

// start_all_gather_into_tensor (above the C interface), waited for.
int drmas_all_gather_into_tensor(DrmasGroup* g, at::Tensor* output, at::Tensor* input,
                                 char* err, size_t len) {
  return guarded(err, len, [&] {
    at::Tensor in = input->view({-1});
    at::Tensor out = output->view({-1});
    start_all_gather_into_tensor(g, out, in)->wait(g->timeout);
  });
}

// start_all_gather_into_tensor, returned at once: `*out_work` is to be waited for
// (drmas_work_wait) before `output` is read, and freed after (drmas_work_free).
// Collectives issued meanwhile on the group run after it, in order.
int drmas_all_gather_into_tensor_start(DrmasGroup* g, at::Tensor* output, at::Tensor* input,
                                       DrmasWork** out_work, char* err, size_t len) {
  return guarded(err, len, [&] {
    at::Tensor in = input->view({-1});
    at::Tensor out = output->view({-1});
    auto work = start_all_gather_into_tensor(g, out, in);
    *out_work = new DrmasWork{work, g->timeout, out, in};
  });
}

int drmas_work_wait(DrmasWork* w, char* err, size_t len) {
  return guarded(err, len, [&] { w->work->wait(w->timeout); });
}

// Frees a work; one not waited for is waited for first (its tensors are still in use),
// its failure ignored: the caller is already failing.
void drmas_work_free(DrmasWork* w) {
  try {
    if (!w->work->isCompleted()) w->work->wait(w->timeout);
  } catch (...) {
  }
  delete w;
}

int drmas_barrier(DrmasGroup* g, char* err, size_t len) {
  return guarded(err, len, [&] {
    c10d::BarrierOptions opts;
    opts.timeout = g->timeout;
    auto work = g->backend->barrier(opts);
    work->wait(g->timeout);
  });
}

}  // extern "C"
