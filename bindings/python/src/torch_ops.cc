// torch.ops.octattn.attention and attention_backward as native operators: the schemas,
// the CPU kernels calling octattn's C API on the tensors in place, and the autograd
// formula, all in C++ so that an eager call crosses torch's dispatcher once and no Python
// (torch.library's Python ops cost tens of microseconds a call). Built against the torch
// of the build's Python (bindings/python/CMakeLists.txt) and loaded by octattn/ops.py,
// which registers the fake (meta) kernels for torch.compile in Python
// (set_python_module below names it).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "octattn.h"
#include "options.h"

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

// The calling thread's default context of the Python package (its octattn.set_threads,
// set_target and last_run apply to the operators too), bound by octattn/ops.py at load;
// `threads` is torch's thread count, which the context follows unless the caller set a
// cap. Until bound, a context of this library's own per thread.
using ContextSource = octattn_context* (*)(int32_t threads);
std::atomic<ContextSource> context_source{nullptr};

octattn_context* ThreadContext() {
  const int32_t threads = static_cast<int32_t>(at::get_num_threads());
  if (ContextSource source = context_source.load(std::memory_order_acquire)) {
    octattn_context* ctx = source(threads);
    TORCH_CHECK(ctx != nullptr, "octattn: OUT_OF_MEMORY: no context for this thread");
    return ctx;
  }
  struct Owned {
    octattn_context* ctx = nullptr;
    ~Owned() { octattn_context_destroy(ctx); }
  };
  thread_local Owned own;
  if (!own.ctx) {
    TORCH_CHECK(octattn_context_create(&own.ctx) == OCTATTN_OK,
                "octattn: OUT_OF_MEMORY: no context for this thread");
  }
  octattn_context_set_threads(own.ctx, threads);
  return own.ctx;
}

// A failed call: torch raises RuntimeError("octattn: STATUS: the library's message").
void Check(octattn_context* ctx, octattn_status s) {
  static const char* const kNames[] = {
      "OK",
      "NULL_POINTER",
      "INVALID_SHAPE",
      "INVALID_STRIDE",
      "OVERFLOW",
      "ALIASING",
      "INVALID_OPTION",
      "STRUCT_SIZE",
      "WORKSPACE_TOO_SMALL",
      "UNSUPPORTED",
      "OUT_OF_MEMORY",
      "MISALIGNED",
      "INTERNAL",
  };
  if (s == OCTATTN_OK) return;
  const char* name = s > 0 && s < 13 ? kNames[s] : "ERROR";
  TORCH_CHECK(false, "octattn: ", name, ": ", octattn_context_last_error(ctx));
}

octattn_dtype DtypeOf(const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return OCTATTN_DTYPE_F32;
    case at::kBFloat16:
      return OCTATTN_DTYPE_BF16;
    case at::kHalf:
      return OCTATTN_DTYPE_F16;
    case at::kBool:
      return OCTATTN_DTYPE_BOOL;
    case at::kChar:
      return OCTATTN_DTYPE_INT8;
    case at::kFloat8_e4m3fn:
      return OCTATTN_DTYPE_FP8_E4M3;
    case at::kFloat8_e5m2:
      return OCTATTN_DTYPE_FP8_E5M2;
    default:
      return 0;
  }
}

// The library's view of a CPU tensor of 4 dimensions (3: a trailing 1 appended, lse's
// [B, H, T]); `swap` exchanges dimensions 1 and 2 ([B, T, H, D] seen as [B, H, T, D]).
octattn_tensor View(const Tensor& t, const char* name, bool swap = false) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": a CPU tensor");
  TORCH_CHECK_VALUE(t.dim() == 3 || t.dim() == 4, name, ": expected 4 dimensions (3 for lse), got ",
                    t.dim());
  octattn_tensor v{};
  v.dtype = DtypeOf(t);
  TORCH_CHECK_TYPE(v.dtype != 0, name, ": dtype must be float32, bfloat16 or float16, got ",
                   t.scalar_type());
  v.data = t.data_ptr();
  for (int64_t i = 0; i < 4; ++i) {
    v.shape[i] = i < t.dim() ? t.size(i) : 1;
    v.stride[i] = i < t.dim() ? t.stride(i) : 1;
  }
  if (swap) {
    std::swap(v.shape[1], v.shape[2]);
    std::swap(v.stride[1], v.stride[2]);
  }
  return v;
}

bool IsBthd(std::string_view layout) {
  TORCH_CHECK_VALUE(layout == "bhtd" || layout == "bthd", "layout is 'bhtd' or 'bthd'");
  return layout == "bthd";
}

octattn_algorithm AlgorithmOf(std::string_view a) {
  if (a == "auto") return OCTATTN_ALGORITHM_AUTO;
  if (a == "fused") return OCTATTN_ALGORITHM_FUSED;
  if (a == "naive") return OCTATTN_ALGORITHM_NAIVE;
  if (a == "reference") return OCTATTN_ALGORITHM_REFERENCE;
  TORCH_CHECK_VALUE(false, "algorithm is 'auto', 'fused', 'naive' or 'reference'");
}

// ALiBi slopes and sinks: float32, contiguous, one per query head (kept alive by `keep`).
const float* PerHead(const OptTensor& a, int64_t heads, const char* name, Tensor* keep) {
  if (!a) return nullptr;
  TORCH_CHECK_VALUE(a->device().is_cpu(), name, ": a CPU tensor");
  TORCH_CHECK_VALUE(a->dim() == 1 && a->size(0) == heads, name, ": one entry per query head (",
                    heads, ")");
  *keep = a->to(at::kFloat).contiguous();
  return keep->data_ptr<float>();
}

// A padded batch's per-sequence array: int64, contiguous, one entry per batch entry.
const int64_t* PerSequence(const OptTensor& a, int64_t n, const char* name) {
  if (!a) return nullptr;
  TORCH_CHECK_VALUE(a->device().is_cpu(), name, ": a CPU tensor");
  TORCH_CHECK_TYPE(
      a->scalar_type() == at::kLong && a->dim() == 1 && (a->size(0) <= 1 || a->stride(0) == 1),
      name, ": a contiguous 1-D int64 tensor");
  TORCH_CHECK_VALUE(a->size(0) == n, name, ": one entry per batch entry (", n, "), got ",
                    a->size(0));
  return a->data_ptr<int64_t>();
}

// The options of a call and what they point at.
struct Options {
  octattn_attention_options o;
  octattn_tensor bias{}, mask{};
  octattn_tensor keys[4]{};  // key lists: key_indices, key_counts, key_indices2, key_counts2
  Tensor alibi, sinks;       // float32 copies where the caller's were not
};

// Key lists (include/octattn.h, Key lists): int32 CPU tensors [Tq, n], [B, Tq, n] or
// [B, Hkv, Tq, n] (counts: the same less n), read in place.
using Lists = std::array<OptTensor, 4>;
void FillLists(Options* opt, const Lists& lists) {
  static const char* const kNames[4] = {"key_indices", "key_counts", "key_indices2", "key_counts2"};
  const octattn_tensor* ptrs[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int l = 0; l < 4; ++l) {
    if (!lists[l]) continue;
    const Tensor& t = *lists[l];
    TORCH_CHECK_VALUE(t.device().is_cpu(), kNames[l], ": a CPU tensor");
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, kNames[l], ": an int32 tensor");
    const std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end()),
        stride(t.strides().begin(), t.strides().end());
    TORCH_CHECK_VALUE(octattn_python::KeyListView(t.data_ptr(), shape.size(), shape.data(),
                                                  stride.data(), l % 2 == 1, &opt->keys[l]),
                      kNames[l],
                      l % 2 ? ": [Tq], [B, Tq] or [B, Hkv, Tq] (the lists' shape less n)"
                            : ": [Tq, n], [B, Tq, n] or [B, Hkv, Tq, n]");
    ptrs[l] = &opt->keys[l];
  }
  opt->o.key_indices = ptrs[0];
  opt->o.key_counts = ptrs[1];
  opt->o.key_indices2 = ptrs[2];
  opt->o.key_counts2 = ptrs[3];
}

void Fill(Options* opt, const OptTensor& alibi, const OptTensor& sinks, const OptTensor& bias,
          const OptTensor& mask, bool causal, int64_t window, int64_t stride,
          std::optional<double> scale, std::optional<int64_t> q_start, int64_t k_start,
          int64_t chunk, double softcap, std::string_view algorithm, const OptTensor& q_starts,
          const OptTensor& kv_starts, const OptTensor& kv_lens, int64_t batch, int64_t q_heads) {
  octattn_python::SetOptions(&opt->o, causal, window, stride, q_start, k_start,
                             scale ? static_cast<float>(*scale) : 0.0f, chunk,
                             static_cast<float>(softcap), AlgorithmOf(algorithm));
  opt->o.alibi_slopes = PerHead(alibi, q_heads, "alibi_slopes", &opt->alibi);
  opt->o.sinks = PerHead(sinks, q_heads, "sinks", &opt->sinks);
  opt->o.q_starts = PerSequence(q_starts, batch, "q_starts");
  opt->o.kv_starts = PerSequence(kv_starts, batch, "kv_starts");
  opt->o.kv_lens = PerSequence(kv_lens, batch, "kv_lens");
  if (bias) {
    opt->bias = View(*bias, "bias");
    opt->o.bias = &opt->bias;
  }
  if (mask) {
    opt->mask = View(*mask, "mask");
    opt->o.mask = &opt->mask;
  }
}

void CheckQkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                    "q, k and v have 4 dimensions ([B, H, T, D] or, bthd, [B, T, H, D])");
}

std::tuple<Tensor, Tensor> AttentionCpu(
    const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& alibi,
    const OptTensor& sinks, const OptTensor& bias, const OptTensor& mask, const OptTensor& q_starts,
    const OptTensor& kv_starts, const OptTensor& kv_lens, const OptTensor& key_indices,
    const OptTensor& key_counts, const OptTensor& key_indices2, const OptTensor& key_counts2,
    bool causal, int64_t window, int64_t stride, std::optional<double> scale,
    std::optional<int64_t> q_start, int64_t k_start, int64_t chunk, double softcap,
    std::string_view layout, std::string_view algorithm) {
  const bool bthd = IsBthd(layout);
  CheckQkv(q, k, v);
  const octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd);
  Tensor o = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
  Tensor lse = at::empty({tq.shape[0], tq.shape[1], tq.shape[2]}, q.options().dtype(at::kFloat));
  octattn_tensor to = View(o, "o", bthd), tl = View(lse, "lse");
  Options opt;
  Fill(&opt, alibi, sinks, bias, mask, causal, window, stride, scale, q_start, k_start, chunk,
       softcap, algorithm, q_starts, kv_starts, kv_lens, tq.shape[0], tq.shape[1]);
  FillLists(&opt, {key_indices, key_counts, key_indices2, key_counts2});
  octattn_context* ctx = ThreadContext();
  Check(ctx, octattn_attention(ctx, &opt.o, &tq, &tk, &tv, &to, &tl, nullptr, nullptr, 0));
  return {o, lse};
}

// (dq, dk, dv, dsinks, dbias): float32 in q's layout; dsinks [Hq] and dbias [B, Hq, Tq,
// Tk] only when asked (else empty).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> BackwardCpu(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o, const Tensor& lse,
    const Tensor& dout, const OptTensor& dlse, const OptTensor& alibi, const OptTensor& sinks,
    const OptTensor& bias, const OptTensor& mask, const OptTensor& q_starts,
    const OptTensor& kv_starts, const OptTensor& kv_lens, const OptTensor& key_indices,
    const OptTensor& key_counts, const OptTensor& key_indices2, const OptTensor& key_counts2,
    bool causal, int64_t window, int64_t stride, std::optional<double> scale,
    std::optional<int64_t> q_start, int64_t k_start, int64_t chunk, double softcap,
    std::string_view layout, std::string_view algorithm, bool return_dsinks, bool return_dbias) {
  const bool bthd = IsBthd(layout);
  CheckQkv(q, k, v);
  const octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd),
                       to = View(o, "o", bthd), tl = View(lse, "lse"),
                       td = View(dout, "dout", bthd);
  octattn_tensor tdl{};
  if (dlse) tdl = View(*dlse, "dlse");
  const auto f32 = q.options().dtype(at::kFloat);
  Tensor dq = at::empty(q.sizes(), f32), dk = at::empty(k.sizes(), f32),
         dv = at::empty(v.sizes(), f32);
  Tensor dsinks = at::empty({return_dsinks ? tq.shape[1] : 0}, f32);
  Tensor dbias = return_dbias ? at::empty({tq.shape[0], tq.shape[1], tq.shape[2], tk.shape[2]}, f32)
                              : at::empty({0}, f32);
  octattn_tensor gq = View(dq, "dq", bthd), gk = View(dk, "dk", bthd), gv = View(dv, "dv", bthd),
                 gb{};
  if (return_dbias) gb = View(dbias, "dbias");
  Options opt;
  Fill(&opt, alibi, sinks, bias, mask, causal, window, stride, scale, q_start, k_start, chunk,
       softcap, algorithm, q_starts, kv_starts, kv_lens, tq.shape[0], tq.shape[1]);
  FillLists(&opt, {key_indices, key_counts, key_indices2, key_counts2});
  octattn_context* ctx = ThreadContext();
  Check(ctx, octattn_attention_backward(ctx, &opt.o, &tq, &tk, &tv, &to, &tl, &td,
                                        dlse ? &tdl : nullptr, &gq, &gk, &gv,
                                        return_dsinks ? dsinks.data_ptr<float>() : nullptr,
                                        return_dbias ? &gb : nullptr, nullptr, 0));
  return {dq, dk, dv, dsinks, dbias};
}

// The operators through the dispatcher, so that the autograd kernel's calls reach the
// CPU kernels eagerly and fake ones when torch.compile traces.
std::tuple<Tensor, Tensor> CallAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const OptTensor& alibi, const OptTensor& sinks,
                                         const OptTensor& bias, const OptTensor& mask,
                                         const OptTensor& q_starts, const OptTensor& kv_starts,
                                         const OptTensor& kv_lens, bool causal, int64_t window,
                                         int64_t stride, std::optional<double> scale,
                                         std::optional<int64_t> q_start, int64_t k_start,
                                         int64_t chunk, double softcap, std::string_view layout,
                                         std::string_view algorithm, const Lists& lists) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("octattn::attention", "")
                             .typed<decltype(AttentionCpu)>();
  return op.call(q, k, v, alibi, sinks, bias, mask, q_starts, kv_starts, kv_lens, lists[0],
                 lists[1], lists[2], lists[3], causal, window, stride, scale, q_start, k_start,
                 chunk, softcap, layout, algorithm);
}

// The key lists' names, as saved for the backward.
const char* const kListNames[4] = {"key_indices", "key_counts", "key_indices2", "key_counts2"};

// The options every call carries, saved for the backward.
struct Settings {
  bool causal;
  int64_t window, stride;
  std::optional<double> scale;
  std::optional<int64_t> q_start;
  int64_t k_start, chunk;
  double softcap;
  std::string layout, algorithm;
  OptTensor q_starts, kv_starts, kv_lens;  // a padded batch's sequences (no gradient)
  Lists lists;                             // key lists (no gradient)
};

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& q, const Tensor& k, const Tensor& v,
                                                const OptTensor& alibi, const OptTensor& sinks,
                                                const OptTensor& bias, const OptTensor& mask,
                                                const Settings& s) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [o, lse] = CallAttention(q, k, v, alibi, sinks, bias, mask, s.q_starts, s.kv_starts,
                                  s.kv_lens, s.causal, s.window, s.stride, s.scale, s.q_start,
                                  s.k_start, s.chunk, s.softcap, s.layout, s.algorithm, s.lists);
    ctx->save_for_backward({q, k, v, o, lse, alibi.value_or(Tensor()), sinks.value_or(Tensor()),
                            bias.value_or(Tensor()), mask.value_or(Tensor())});
    ctx->saved_data["causal"] = s.causal;
    ctx->saved_data["window"] = s.window;
    ctx->saved_data["stride"] = s.stride;
    ctx->saved_data["scale"] = s.scale;
    ctx->saved_data["q_start"] = s.q_start;
    ctx->saved_data["k_start"] = s.k_start;
    ctx->saved_data["chunk"] = s.chunk;
    ctx->saved_data["softcap"] = s.softcap;
    ctx->saved_data["layout"] = s.layout;
    ctx->saved_data["q_starts"] = s.q_starts;
    ctx->saved_data["kv_starts"] = s.kv_starts;
    ctx->saved_data["kv_lens"] = s.kv_lens;
    for (int l = 0; l < 4; ++l) ctx->saved_data[kListNames[l]] = s.lists[l];
    // The backward has fused and reference only; naive's forward equals fused's.
    ctx->saved_data["algorithm"] = s.algorithm == "naive" ? std::string("auto") : s.algorithm;
    return {o, lse};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
    auto opt = [](const Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; };
    const OptTensor alibi = opt(saved[5]), sinks = opt(saved[6]), bias = opt(saved[7]),
                    mask = opt(saved[8]);
    // needs_input_grad counts the inputs that were tensors: q, k, v, then the optional
    // ones given.
    const size_t sinks_at = 3 + (alibi ? 1 : 0), bias_at = sinks_at + (sinks ? 1 : 0);
    const bool want_dsinks = sinks && ctx->needs_input_grad(sinks_at);
    const bool want_dbias = bias && ctx->needs_input_grad(bias_at);
    const Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(o);
    const OptTensor dlse = opt(grads[1]);
    auto& d = ctx->saved_data;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("octattn::attention_backward", "")
                               .typed<decltype(BackwardCpu)>();
    const std::string layout = d["layout"].toStringRef(), algorithm = d["algorithm"].toStringRef();
    auto [dq, dk, dv, dsinks, dbias] = op.call(
        q, k, v, o, lse, dout, dlse, alibi, sinks, bias, mask, d["q_starts"].toOptional<Tensor>(),
        d["kv_starts"].toOptional<Tensor>(), d["kv_lens"].toOptional<Tensor>(),
        d[kListNames[0]].toOptional<Tensor>(), d[kListNames[1]].toOptional<Tensor>(),
        d[kListNames[2]].toOptional<Tensor>(), d[kListNames[3]].toOptional<Tensor>(),
        d["causal"].toBool(), d["window"].toInt(), d["stride"].toInt(),
        d["scale"].toOptional<double>(), d["q_start"].toOptional<int64_t>(), d["k_start"].toInt(),
        d["chunk"].toInt(), d["softcap"].toDouble(), layout, algorithm, want_dsinks, want_dbias);
    Tensor gsinks, gbias;
    if (want_dsinks) gsinks = dsinks.to(sinks->scalar_type());
    if (want_dbias) {
      // A bias that broadcasts gets its gradient summed over the broadcast dimensions.
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < 4; ++i)
        if (bias->size(i) == 1 && dbias.size(i) != 1) dims.push_back(i);
      gbias = (dims.empty() ? dbias : dbias.sum(dims, /*keepdim=*/true)).to(bias->scalar_type());
    }
    // The library's gradients are float32; autograd wants each in its input's dtype.
    return {dq.to(q.scalar_type()),
            dk.to(k.scalar_type()),
            dv.to(v.scalar_type()),
            Tensor(),
            gsinks,
            gbias,
            Tensor(),
            Tensor()};
  }
};

std::tuple<Tensor, Tensor> AttentionAutograd(
    const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& alibi,
    const OptTensor& sinks, const OptTensor& bias, const OptTensor& mask, const OptTensor& q_starts,
    const OptTensor& kv_starts, const OptTensor& kv_lens, const OptTensor& key_indices,
    const OptTensor& key_counts, const OptTensor& key_indices2, const OptTensor& key_counts2,
    bool causal, int64_t window, int64_t stride, std::optional<double> scale,
    std::optional<int64_t> q_start, int64_t k_start, int64_t chunk, double softcap,
    std::string_view layout, std::string_view algorithm) {
  const Lists lists = {key_indices, key_counts, key_indices2, key_counts2};
  // No graph to record (grad mode off, or no input that wants a gradient): straight to
  // the kernel, without the autograd node's allocations.
  auto wants = [](const OptTensor& t) { return t && t->requires_grad(); };
  if (!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() ||
                                       v.requires_grad() || wants(sinks) || wants(bias))) {
    at::AutoDispatchBelowADInplaceOrView below;
    return CallAttention(q, k, v, alibi, sinks, bias, mask, q_starts, kv_starts, kv_lens, causal,
                         window, stride, scale, q_start, k_start, chunk, softcap, layout, algorithm,
                         lists);
  }
  const Settings s{causal,
                   window,
                   stride,
                   scale,
                   q_start,
                   k_start,
                   chunk,
                   softcap,
                   std::string(layout),
                   std::string(algorithm),
                   q_starts,
                   kv_starts,
                   kv_lens,
                   lists};
  auto out = AttentionFunction::apply(q, k, v, alibi, sinks, bias, mask, s);
  return {out[0], out[1]};
}

}  // namespace

// Binds the Python package's per-thread contexts (octattn/ops.py passes
// octattn._octattn's source at load).
extern "C" __attribute__((visibility("default"))) void octattn_torch_bind(ContextSource source) {
  context_source.store(source, std::memory_order_release);
}

TORCH_LIBRARY(octattn, m) {
  m.set_python_module("octattn.ops");
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, Tensor? alibi_slopes=None, Tensor? sinks=None, "
      "Tensor? bias=None, Tensor? mask=None, Tensor? q_starts=None, Tensor? kv_starts=None, "
      "Tensor? kv_lens=None, Tensor? key_indices=None, Tensor? key_counts=None, "
      "Tensor? key_indices2=None, Tensor? key_counts2=None, *, bool causal=True, "
      "int window=0, int stride=0, float? scale=None, int? q_start=None, int k_start=0, "
      "int chunk=0, float softcap=0.0, str layout=\"bhtd\", str algorithm=\"auto\") -> "
      "(Tensor, Tensor)");
  m.def(
      "attention_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor dout, "
      "Tensor? dlse, Tensor? alibi_slopes=None, Tensor? sinks=None, Tensor? bias=None, "
      "Tensor? mask=None, Tensor? q_starts=None, Tensor? kv_starts=None, Tensor? kv_lens=None, "
      "Tensor? key_indices=None, Tensor? key_counts=None, Tensor? key_indices2=None, "
      "Tensor? key_counts2=None, *, bool causal=True, int window=0, int stride=0, "
      "float? scale=None, int? q_start=None, int k_start=0, int chunk=0, float softcap=0.0, "
      "str layout=\"bhtd\", str algorithm=\"auto\", bool return_dsinks=False, "
      "bool return_dbias=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(octattn, CPU, m) {
  m.impl("attention", &AttentionCpu);
  m.impl("attention_backward", &BackwardCpu);
}

TORCH_LIBRARY_IMPL(octattn, Autograd, m) { m.impl("attention", &AttentionAutograd); }
