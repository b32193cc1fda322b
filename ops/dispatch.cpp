// Every public op of ops/, dispatched on the device of its views — the one place where
// ops choose a backend (docs/architecture.md §2). The bodies are generated from the op
// table (ops/op_list.h): a backend adds its implementations in ops/<backend>/ with the
// signatures the table declares, and an op a backend lacks fails with a ShapeError
// naming the op and the device, never a wrong result.
#include "core/error.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/backward.h"
#include "ops/batch_invariant_gemm.h"
#include "ops/cpu/kernels.h"
#include "ops/device_emulation.h"
#include "ops/op_list.h"
#include "ops/op_profile.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/paged_attention.h"
#include "ops/cpu/quantized_detail.h"
#include "ops/quantized_linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/tensor_ops.h"
#include "ops/top_candidates.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/kernels.h"
#endif

namespace olmo2::ops {
namespace {

/// The device every non-empty view of an op is on; ShapeError naming the op when they
/// differ. Empty views (skipped outputs) do not count; when every view is empty, the
/// first view's device (an op on empty GPU tensors runs the GPU op, which does nothing).
Device device_of(const char* op, std::initializer_list<const TensorView*> views) {
  bool seen = false;
  Device d = views.size() > 0 ? (*views.begin())->device() : Device::CPU;
  for (const TensorView* v : views) {
    if (v->empty()) continue;
    if (seen && v->device() != d) {
      OLMO2_THROW(ShapeError, "ops::", op, ": views on different devices (", device_name(d), " and ",
                  device_name(v->device()), ")");
    }
    d = v->device(), seen = true;
  }
  return d;
}

/// The device an op's same-device views are on (device_of).
template <typename... Views>
Device pick_device(const char* op, Views... views) {
  return device_of(op, {views...});
}

/// A transfer's device: the CPU when both views are on it, the other device otherwise
/// (a host <-> device copy is the GPU backend's; docs/architecture.md §2).
Device pick_device(const char*, TransferViews, const TensorView* src, const TensorView* dst) {
  return src->device() == Device::CPU ? dst->device() : src->device();
}

[[noreturn]] void no_backend(const char* op, Device d, const char* why) {
  OLMO2_THROW(ShapeError, "ops::", op, " has no ", device_name(d), " implementation (", why, ")");
}

/// `call(0)` for Device::CUDA views — the CUDA op, or on the emulated device the CPU op on
/// re-flagged views — where the op's row names the CUDA backend, the named refusal
/// otherwise (so the emulation refuses what a GPU would). The call is a generic lambda,
/// instantiated only when called: the CUDA implementation of an op without one is never
/// named.
template <unsigned Devices, typename Result, typename Call>
Result on_cuda(const char* op, Call&& call) {
  if constexpr ((Devices & kOnCuda) != 0) {
    return call(0);
  } else {
    no_backend(op, Device::CUDA, "the op table lists no CUDA implementation");
  }
}

#ifndef OLMO2_HAVE_CUDA
[[noreturn]] void no_backend(const char* op, Device d) { no_backend(op, d, "this build has no CUDA backend"); }
#endif

}  // namespace

// The table's rows as the public ops: the CPU implementation for views on the CPU, the
// CPU one on re-flagged views for an emulated device (ops/device_emulation.h), or the
// CUDA one for views on the GPU. In a build without CUDA a GPU view exists only under
// emulation (Buffer refuses to allocate one otherwise), and the named refusal says so
// should one be made by hand; so does an op whose row does not name kOnCuda.
#define OLMO2_EXPAND(...) __VA_ARGS__
#ifdef OLMO2_HAVE_CUDA
#define OLMO2_CUDA_CALL(result, name, arguments, devices) \
  return on_cuda<(devices), result>(#name, [&](auto) { return cuda::name arguments; })
#else
#define OLMO2_CUDA_CALL(result, name, arguments, devices) no_backend(#name, Device::CUDA)
#endif
#define OLMO2_DEFINE_OP(result, name, parameters, arguments, views, devices)                          \
  result name parameters {                                                                           \
    const OpProfileScope profile_(#name); /* off: one atomic load (ops/op_profile.h) */               \
    const Device d_ = pick_device(#name, OLMO2_EXPAND views);                                         \
    if (d_ == Device::CPU) return cpu::name arguments;                                                \
    if (device_emulated()) /* the GPU's refusal too, for an op the row keeps off CUDA */              \
      return on_cuda<(devices), result>(#name, [&](auto) {                                        \
        return call_on_host([](const auto&... a_) { return cpu::name(a_...); }, OLMO2_EXPAND arguments); \
      });                                                                                            \
    OLMO2_CUDA_CALL(result, name, arguments, devices);                                                        \
  }
OLMO2_OP_TABLE(OLMO2_DEFINE_OP)
#undef OLMO2_DEFINE_OP
#undef OLMO2_CUDA_CALL
#undef OLMO2_EXPAND

// The quantized-weight product is outside the op table (its weight is not a view, and
// only the CPU backend has it): views on another device get its one-line refusal.
void linear_quantized(const TensorView& x, const QuantizedWeight& w, const TensorView& y) {
  const OpProfileScope profile_("linear_quantized");  // counted with the products (ops/op_profile.h)
  for (const TensorView* v : {&x, &w.values.view(), &w.scales.view(), &y})
    if (!v->empty() && v->device() != Device::CPU)
      OLMO2_THROW(ShapeError, "ops::linear_quantized: quantized weights run on the CPU only (a view is on ",
                  device_name(v->device()), ")");
  detail::linear_quantized_cpu(x, w, y);
}

}  // namespace olmo2::ops
