// libtorch operations tch 0.24 does not expose, behind a C interface: a counter of the
// ATen operators dispatched (what a step costs in launches, measurable on the CPU too)
// and the fused AdamW step (`at::_fused_adamw_`, one kernel over every tensor of a list
// on CUDA, a vectorized loop on the CPU). Every call catches C++ exceptions and
// returns their text. Tensors cross as `at::Tensor*` (what tch's `as_ptr()` holds).

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <atomic>
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

// Operators entered, and those entered while no other operator was running on the
// thread (what the caller asked for; the rest are what those call inside).
std::atomic<int64_t> g_ops{0};
std::atomic<int64_t> g_top{0};
thread_local int t_depth = 0;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  g_ops.fetch_add(1, std::memory_order_relaxed);
  if (t_depth == 0) g_top.fetch_add(1, std::memory_order_relaxed);
  ++t_depth;
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) { --t_depth; }

std::vector<at::Tensor> tensors(at::Tensor** ts, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*ts[i]);
  return out;
}

}  // namespace

extern "C" {

// Starts counting on every thread; returns the callback's handle for
// `drmas_ops_count_stop`. The counts start at 0.
uint64_t drmas_ops_count_start() {
  g_ops.store(0);
  g_top.store(0);
  auto cb = at::RecordFunctionCallback(on_enter, on_exit)
                .scopes({at::RecordScope::FUNCTION});
  return at::addGlobalCallback(cb);
}

// The operators dispatched since the start: all of them, and the outermost ones.
void drmas_ops_count_read(int64_t* all, int64_t* outermost) {
  *all = g_ops.load();
  *outermost = g_top.load();
}

void drmas_ops_count_stop(uint64_t handle) { at::removeCallback(handle); }

// One AdamW step (decoupled weight decay, PyTorch's formula) over n parameters, in
// place: params, grads, first and second moments, and each parameter's step count
// after this step (a float32 scalar tensor on the parameter's device, which the kernel
// reads: torch.optim increments it before the call; one tensor may serve every entry).
int drmas_fused_adamw(at::Tensor** params, at::Tensor** grads, at::Tensor** exp_avgs,
                      at::Tensor** exp_avg_sqs, at::Tensor** steps, size_t n, double lr,
                      double beta1, double beta2, double weight_decay, double eps,
                      char* err, size_t len) {
  return guarded(err, len, [&] {
    auto p = tensors(params, n);
    auto g = tensors(grads, n);
    auto m = tensors(exp_avgs, n);
    auto v = tensors(exp_avg_sqs, n);
    auto s = tensors(steps, n);
    std::vector<at::Tensor> none;
    at::_fused_adamw_(p, g, m, v, none, s, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  });
}

}  // extern "C"
