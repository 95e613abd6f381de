// The compiled part of the Python package: octattn's C API over nanobind ndarrays
// (numpy arrays, torch tensors and any DLPack producer, with their strides, no copies).
// Arguments are positional and already checked for their Python types by
// octattn/__init__.py, which gives them their keyword names and defaults; everything
// the library validates (shapes, strides, aliasing, options) is left to the library,
// whose status and message come back as octattn.Error.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "octattn.h"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<nb::device::cpu>;
using OptArray = std::optional<Array>;

nb::object error_class;  // octattn.Error, set by the package at import

// Raises octattn.Error(status, message).
[[noreturn]] void Raise(octattn_status status, const std::string& message) {
  nb::object error = error_class(status, message);
  PyErr_SetObject(error_class.ptr(), error.ptr());
  throw nb::python_error();
}

// A tensor view of `a`: 4 dimensions (3: a trailing 1 is appended, as for lse
// [B, H, T] or a [B, T, C] sequence); `swap` exchanges dimensions 1 and 2 ([B, T, H, D]
// arrays seen as [B, H, T, D]).
octattn_tensor View(const Array& a, const char* name, bool swap = false) {
  octattn_tensor t{};
  t.data = a.data();
  const nb::dlpack::dtype d = a.dtype();
  using Code = nb::dlpack::dtype_code;
  if (d == nb::dtype<float>())
    t.dtype = OCTATTN_DTYPE_F32;
  else if (d.code == static_cast<uint8_t>(Code::Bfloat) && d.bits == 16)
    t.dtype = OCTATTN_DTYPE_BF16;
  else if (d.code == static_cast<uint8_t>(Code::Float) && d.bits == 16)
    t.dtype = OCTATTN_DTYPE_F16;
  else if (d.code == static_cast<uint8_t>(Code::Bool) && d.bits == 8)
    t.dtype = OCTATTN_DTYPE_BOOL;
  else
    throw nb::type_error(
        (std::string(name) + ": dtype must be float32 (or bool for a mask)").c_str());
  const size_t n = a.ndim();
  if (n != 3 && n != 4)
    throw nb::value_error(
        (std::string(name) + ": expected 4 dimensions (3 for lse), got " + std::to_string(n))
            .c_str());
  for (size_t i = 0; i < 4; ++i) {
    t.shape[i] = i < n ? static_cast<int64_t>(a.shape(i)) : 1;
    t.stride[i] = i < n ? a.stride(i) : 1;
  }
  if (swap) {
    std::swap(t.shape[1], t.shape[2]);
    std::swap(t.stride[1], t.stride[2]);
  }
  return t;
}

// A per-head float32 array (ALiBi slopes, sinks): contiguous, at least `heads` entries.
const float* PerHead(const OptArray& a, int64_t heads, const char* name) {
  if (!a) return nullptr;
  if (a->dtype() != nb::dtype<float>() || a->ndim() != 1 || a->stride(0) != 1)
    throw nb::type_error((std::string(name) + ": a contiguous 1-D float32 array").c_str());
  if (static_cast<int64_t>(a->shape(0)) != heads)
    throw nb::value_error(
        (std::string(name) + ": one entry per query head (" + std::to_string(heads) + ")").c_str());
  return static_cast<const float*>(a->data());
}

// The options of a call and the tensors they point at.
struct Options {
  octattn_attention_options o;
  octattn_tensor bias, mask;
};

void FillOptions(Options* opt, bool causal, int64_t window, int64_t stride,
                 std::optional<int64_t> q_start, int64_t k_start, float scale, int64_t chunk,
                 float softcap, const OptArray& alibi, const OptArray& sinks, const OptArray& bias,
                 const OptArray& mask, int32_t algorithm, int64_t q_heads) {
  octattn_attention_options_init(&opt->o);
  opt->o.causal = causal ? 1 : 0;
  opt->o.window = window;
  opt->o.stride = stride;
  if (q_start) opt->o.q_start = *q_start;
  opt->o.k_start = k_start;
  opt->o.scale = scale;
  opt->o.chunk = chunk;
  opt->o.softcap = softcap;
  opt->o.algorithm = algorithm;
  opt->o.alibi_slopes = PerHead(alibi, q_heads, "alibi_slopes");
  opt->o.sinks = PerHead(sinks, q_heads, "sinks");
  if (bias) {
    opt->bias = View(*bias, "bias");
    opt->o.bias = &opt->bias;
  }
  if (mask) {
    opt->mask = View(*mask, "mask");
    opt->o.mask = &opt->mask;
  }
}

class Context {
 public:
  Context() {
    if (octattn_status s = octattn_context_create(&ctx_)) Raise(s, "octattn_context_create failed");
  }
  ~Context() { octattn_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void Check(octattn_status s) const {
    if (s != OCTATTN_OK) Raise(s, octattn_context_last_error(ctx_));
  }

  void SetThreads(int32_t threads) { Check(octattn_context_set_threads(ctx_, threads)); }
  int32_t Threads() const {
    int32_t n = 0;
    Check(octattn_context_get_threads(ctx_, &n));
    return n;
  }
  void SetTarget(int32_t backend, int32_t target) {
    Check(octattn_context_set_target(ctx_, backend, target));
  }
  void SetMemoryLimit(uint64_t bytes) { Check(octattn_context_set_memory_limit(ctx_, bytes)); }
  nb::dict LastRun() const {
    octattn_run_info info{};
    info.struct_size = sizeof(info);
    Check(octattn_context_last_run(ctx_, &info));
    nb::dict d;
    d["algorithm"] = octattn_algorithm_name(info.algorithm);
    d["backend"] = info.algorithm == OCTATTN_ALGORITHM_REFERENCE
                       ? "reference"
                       : octattn_backend_name(info.backend);
    d["target"] = octattn_target_name(info.target);
    d["threads"] = info.threads;
    return d;
  }

  void Attention(const Array& q, const Array& k, const Array& v, const Array& o,
                 const OptArray& lse, const OptArray& weights, bool bthd, bool causal,
                 int64_t window, int64_t stride, std::optional<int64_t> q_start, int64_t k_start,
                 float scale, int64_t chunk, float softcap, const OptArray& alibi,
                 const OptArray& sinks, const OptArray& bias, const OptArray& mask,
                 int32_t algorithm) {
    octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd),
                   to = View(o, "out", bthd), tl{}, tw{};
    if (lse) tl = View(*lse, "lse");
    if (weights) tw = View(*weights, "weights");
    Options opt;
    FillOptions(&opt, causal, window, stride, q_start, k_start, scale, chunk, softcap, alibi, sinks,
                bias, mask, algorithm, tq.shape[1]);
    octattn_status s;
    {
      nb::gil_scoped_release release;
      s = octattn_attention(ctx_, &opt.o, &tq, &tk, &tv, &to, lse ? &tl : nullptr,
                            weights ? &tw : nullptr, nullptr, 0);
    }
    Check(s);
  }

  size_t WorkspaceSize(const Array& q, const Array& k, const Array& v, const Array& o, bool bthd,
                       bool causal, int64_t window, int64_t stride, std::optional<int64_t> q_start,
                       int64_t k_start, int64_t chunk, int32_t algorithm) {
    octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd),
                   to = View(o, "out", bthd);
    Options opt;
    FillOptions(&opt, causal, window, stride, q_start, k_start, 0.0f, chunk, 0.0f, {}, {}, {}, {},
                algorithm, tq.shape[1]);
    size_t bytes = 0;
    Check(octattn_attention_workspace_size(ctx_, &opt.o, &tq, &tk, &tv, &to, nullptr, nullptr,
                                           &bytes));
    return bytes;
  }

  // The stages.
  void Scores(const Array& q, const Array& k, const Array& scores) {
    octattn_tensor tq = View(q, "q"), tk = View(k, "k"), ts = View(scores, "scores");
    Check(octattn_scores(ctx_, &tq, &tk, &ts));
  }
  void Scale(const Array& scores, float scale) {
    octattn_tensor ts = View(scores, "scores");
    Check(octattn_scale(ctx_, &ts, scale));
  }
  void Mask(const Array& scores, bool causal, int64_t window, int64_t stride,
            std::optional<int64_t> q_start, int64_t k_start, int64_t chunk, const OptArray& mask) {
    octattn_tensor ts = View(scores, "scores");
    Options opt;
    FillOptions(&opt, causal, window, stride, q_start, k_start, 0.0f, chunk, 0.0f, {}, {}, {}, mask,
                OCTATTN_ALGORITHM_AUTO, ts.shape[1]);
    Check(octattn_mask(ctx_, &opt.o, &ts));
  }
  void ModifyScores(const Array& scores, std::optional<int64_t> q_start, int64_t k_start,
                    float softcap, const OptArray& alibi, const OptArray& bias) {
    octattn_tensor ts = View(scores, "scores");
    Options opt;
    FillOptions(&opt, true, 0, 0, q_start, k_start, 0.0f, 0, softcap, alibi, {}, bias, {},
                OCTATTN_ALGORITHM_AUTO, ts.shape[1]);
    Check(octattn_modify_scores(ctx_, &opt.o, &ts));
  }
  void Softmax(const Array& scores, const OptArray& sinks, const OptArray& lse) {
    octattn_tensor ts = View(scores, "scores"), tl{};
    if (lse) tl = View(*lse, "lse");
    if (sinks)
      Check(octattn_softmax_sinks(ctx_, &ts, PerHead(sinks, ts.shape[1], "sinks"),
                                  lse ? &tl : nullptr));
    else
      Check(octattn_softmax(ctx_, &ts, lse ? &tl : nullptr));
  }
  void WeightedSum(const Array& w, const Array& v, const Array& o) {
    octattn_tensor tw = View(w, "weights"), tv = View(v, "v"), to = View(o, "out");
    Check(octattn_weighted_sum(ctx_, &tw, &tv, &to));
  }
  void SplitHeads(const Array& src, int64_t heads, const Array& dst) {
    octattn_tensor ts = View(src, "x"), td = View(dst, "out");
    Check(octattn_split_heads(ctx_, &ts, heads, &td));
  }
  void MergeHeads(const Array& src, const Array& dst) {
    octattn_tensor ts = View(src, "x"), td = View(dst, "out");
    Check(octattn_merge_heads(ctx_, &ts, &td));
  }
  void SplitQkv(const Array& src, int64_t q_heads, int64_t kv_heads, const Array& q, const Array& k,
                const Array& v) {
    octattn_tensor ts = View(src, "qkv"), tq = View(q, "q"), tk = View(k, "k"), tv = View(v, "v");
    Check(octattn_split_qkv(ctx_, &ts, q_heads, kv_heads, &tq, &tk, &tv));
  }
  void Merge(const std::vector<Array>& o_parts, const std::vector<Array>& lse_parts, const Array& o,
             const OptArray& lse) {
    if (o_parts.size() != lse_parts.size())
      throw nb::value_error("merge: as many lse parts as output parts");
    std::vector<octattn_tensor> to, tl;
    for (const Array& a : o_parts) to.push_back(View(a, "o_parts"));
    for (const Array& a : lse_parts) tl.push_back(View(a, "lse_parts"));
    octattn_tensor out = View(o, "out"), out_lse{};
    if (lse) out_lse = View(*lse, "lse");
    Check(octattn_merge(ctx_, to.size(), to.data(), tl.data(), &out, lse ? &out_lse : nullptr));
  }

 private:
  octattn_context* ctx_ = nullptr;
};

// The library's size or offset of a struct member (octattn_struct_layout), or -1.
int64_t StructLayout(const std::string& type, std::optional<std::string> field) {
  size_t out = 0;
  if (octattn_struct_layout(type.c_str(), field ? field->c_str() : nullptr, &out) != OCTATTN_OK)
    return -1;
  return static_cast<int64_t>(out);
}

}  // namespace

NB_MODULE(_octattn, m) {
  m.doc() = "octattn's C API over nanobind ndarrays (use the octattn package, not this module)";
  m.def("_set_error_class", [](nb::object cls) { error_class = cls; });
  m.def("version", [] { return std::string(octattn_version_string()); });
  m.def("status_string", [](int32_t s) { return std::string(octattn_status_string(s)); });
  m.def("struct_layout", &StructLayout, nb::arg("type"), nb::arg("field").none());
  m.def("available_targets", [](int32_t backend) {
    octattn_target targets[16];
    size_t n = 0;
    std::vector<std::string> names;
    if (octattn_available_targets(backend, targets, 16, &n) == OCTATTN_OK)
      for (size_t i = 0; i < n && i < 16; ++i) names.push_back(octattn_target_name(targets[i]));
    return names;
  });
  m.def("sizeof_tensor", [] { return sizeof(octattn_tensor); });
  m.def("sizeof_options", [] { return sizeof(octattn_attention_options); });
  m.def("sizeof_run_info", [] { return sizeof(octattn_run_info); });

  nb::class_<Context>(m, "Context")
      .def(nb::init<>())
      .def("set_threads", &Context::SetThreads)
      .def("threads", &Context::Threads)
      .def("set_target", &Context::SetTarget)
      .def("set_memory_limit", &Context::SetMemoryLimit)
      .def("last_run", &Context::LastRun)
      .def("attention", &Context::Attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
           nb::arg("lse").none(), nb::arg("weights").none(), nb::arg("bthd"), nb::arg("causal"),
           nb::arg("window"), nb::arg("stride"), nb::arg("q_start").none(), nb::arg("k_start"),
           nb::arg("scale"), nb::arg("chunk"), nb::arg("softcap"), nb::arg("alibi").none(),
           nb::arg("sinks").none(), nb::arg("bias").none(), nb::arg("mask").none(),
           nb::arg("algorithm"))
      .def("workspace_size", &Context::WorkspaceSize, nb::arg("q"), nb::arg("k"), nb::arg("v"),
           nb::arg("o"), nb::arg("bthd"), nb::arg("causal"), nb::arg("window"), nb::arg("stride"),
           nb::arg("q_start").none(), nb::arg("k_start"), nb::arg("chunk"), nb::arg("algorithm"))
      .def("scores", &Context::Scores)
      .def("scale", &Context::Scale)
      .def("mask", &Context::Mask, nb::arg("scores"), nb::arg("causal"), nb::arg("window"),
           nb::arg("stride"), nb::arg("q_start").none(), nb::arg("k_start"), nb::arg("chunk"),
           nb::arg("mask").none())
      .def("modify_scores", &Context::ModifyScores, nb::arg("scores"), nb::arg("q_start").none(),
           nb::arg("k_start"), nb::arg("softcap"), nb::arg("alibi").none(), nb::arg("bias").none())
      .def("softmax", &Context::Softmax, nb::arg("scores"), nb::arg("sinks").none(),
           nb::arg("lse").none())
      .def("weighted_sum", &Context::WeightedSum)
      .def("split_heads", &Context::SplitHeads)
      .def("merge_heads", &Context::MergeHeads)
      .def("split_qkv", &Context::SplitQkv)
      .def("merge", &Context::Merge, nb::arg("o_parts"), nb::arg("lse_parts"), nb::arg("o"),
           nb::arg("lse").none());
}
