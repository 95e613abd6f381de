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
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "octattn.h"
#include "options.h"

namespace nb = nanobind;

namespace {

// Tensor arguments arrive as Python objects: a torch tensor is read through its
// attributes (data_ptr, shape, stride: several times cheaper than a DLPack export),
// anything else through nanobind's ndarray caster (numpy arrays, DLPack producers).
using Array = nb::handle;     // a tensor argument
using OptArray = nb::handle;  // a tensor argument or None

// octattn.Error, set by the package at import; torch.Tensor, its dtypes and
// get_num_threads, read from the torch module once it is imported. Owned references that are never
// released (a module's globals outlive the interpreter's finalization otherwise).
nb::handle error_class;
nb::handle torch_tensor, torch_f32, torch_bf16, torch_f16, torch_bool, torch_threads;
nb::handle torch_i8, torch_u8, torch_e4m3, torch_e5m2;  // the last two: torch >= 2.1
// A uint8 array's marker dtype: the bytes of ggml blocks, given a format (kv_format).
constexpr octattn_dtype kBytes = 100;

// Raises octattn.Error(status, message).
[[noreturn]] void Raise(octattn_status status, const std::string& message) {
  nb::object error = error_class(status, message);
  PyErr_SetObject(error_class.ptr(), error.ptr());
  throw nb::python_error();
}

[[noreturn]] void Bad(const char* name, const std::string& what, bool type = false) {
  const std::string text = std::string(name) + ": " + what;
  if (type) throw nb::type_error(text.c_str());
  throw nb::value_error(text.c_str());
}

// torch's tensor type, dtypes and get_num_threads, read once torch is imported.
void LearnTorch() {
  PyObject* module = PyImport_GetModule(nb::str("torch").ptr());
  if (!module) {
    PyErr_Clear();
    return;
  }
  nb::object torch = nb::steal(module);
  torch_f32 = nb::object(torch.attr("float32")).release();
  torch_bf16 = nb::object(torch.attr("bfloat16")).release();
  torch_f16 = nb::object(torch.attr("float16")).release();
  torch_bool = nb::object(torch.attr("bool")).release();
  torch_i8 = nb::object(torch.attr("int8")).release();
  torch_u8 = nb::object(torch.attr("uint8")).release();
  if (nb::hasattr(torch, "float8_e4m3fn")) {
    torch_e4m3 = nb::object(torch.attr("float8_e4m3fn")).release();
    torch_e5m2 = nb::object(torch.attr("float8_e5m2")).release();
  }
  torch_threads = nb::object(torch.attr("get_num_threads")).release();
  torch_tensor = nb::object(torch.attr("Tensor")).release();
}

bool IsTorch(nb::handle h) {
  if (!torch_tensor.ptr()) LearnTorch();
  return torch_tensor.ptr() != nullptr &&
         PyObject_TypeCheck(h.ptr(), reinterpret_cast<PyTypeObject*>(torch_tensor.ptr()));
}

// The data, dtype and (up to 4) sizes and strides of a tensor argument.
struct Raw {
  void* data = nullptr;
  octattn_dtype dtype = 0;
  size_t ndim = 0;
  int64_t shape[4] = {1, 1, 1, 1}, stride[4] = {1, 1, 1, 1};
};

Raw RawOf(nb::handle h, const char* name) {
  Raw r;
  if (IsTorch(h)) {
    if (!nb::cast<bool>(h.attr("is_cpu"))) Bad(name, "a CPU tensor", true);
    nb::handle dt = h.attr("dtype");
    r.dtype = dt.is(torch_f32)                        ? OCTATTN_DTYPE_F32
              : dt.is(torch_bf16)                     ? OCTATTN_DTYPE_BF16
              : dt.is(torch_f16)                      ? OCTATTN_DTYPE_F16
              : dt.is(torch_bool)                     ? OCTATTN_DTYPE_BOOL
              : dt.is(torch_i8)                       ? OCTATTN_DTYPE_INT8
              : dt.is(torch_u8)                       ? kBytes
              : torch_e4m3.ptr() && dt.is(torch_e4m3) ? OCTATTN_DTYPE_FP8_E4M3
              : torch_e5m2.ptr() && dt.is(torch_e5m2) ? OCTATTN_DTYPE_FP8_E5M2
                                                      : 0;
    nb::tuple shape = nb::borrow<nb::tuple>(h.attr("shape"));
    nb::tuple stride = nb::borrow<nb::tuple>(h.attr("stride")());
    r.ndim = nb::len(shape);
    if (r.ndim > 4) Bad(name, "expected 4 dimensions (3 for lse), got " + std::to_string(r.ndim));
    for (size_t i = 0; i < r.ndim; ++i) {
      r.shape[i] = nb::cast<int64_t>(shape[i]);
      r.stride[i] = nb::cast<int64_t>(stride[i]);
    }
    r.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(h.attr("data_ptr")()));
  } else {
    nb::ndarray<nb::device::cpu> a;
    if (!nb::try_cast(h, a, false))
      Bad(name, "a numpy array, a torch CPU tensor or a DLPack producer", true);
    const nb::dlpack::dtype d = a.dtype();
    using Code = nb::dlpack::dtype_code;
    r.dtype = d == nb::dtype<float>()                                        ? OCTATTN_DTYPE_F32
              : d.code == static_cast<uint8_t>(Code::Bfloat) && d.bits == 16 ? OCTATTN_DTYPE_BF16
              : d.code == static_cast<uint8_t>(Code::Float) && d.bits == 16  ? OCTATTN_DTYPE_F16
              : d.code == static_cast<uint8_t>(Code::Bool) && d.bits == 8    ? OCTATTN_DTYPE_BOOL
              : d == nb::dtype<int8_t>()                                     ? OCTATTN_DTYPE_INT8
              : d == nb::dtype<uint8_t>()                                    ? kBytes
                                                                             : 0;
    r.ndim = a.ndim();
    if (r.ndim > 4) Bad(name, "expected 4 dimensions (3 for lse), got " + std::to_string(r.ndim));
    for (size_t i = 0; i < r.ndim; ++i) {
      r.shape[i] = static_cast<int64_t>(a.shape(i));
      r.stride[i] = a.stride(i);
    }
    r.data = a.data();
  }
  if (r.dtype == 0) Bad(name, "dtype must be float32 (or bool for a mask)", true);
  return r;
}

// A KV cache argument as the call reads it: a uint8 array of ggml blocks (kv_format
// "q8_0" or "q4_0": its last dimension the row's bytes, strides in bytes) as blocks of
// values; a uint8 array of fp8 codes (kv_format "fp8_e4m3" or "fp8_e5m2", numpy having
// no fp8 dtype) as those; DeepSeek V3.2's latent rows ("fp8_ds_mla") as rows; any other
// as it is.
Raw CacheOf(nb::handle h, const char* name, octattn_dtype format) {
  Raw r = RawOf(h, name);
  if (r.dtype != kBytes) {
    if (format) Bad(name, "kv_format is for uint8 arrays", true);
    return r;
  }
  if (!format) Bad(name, "a uint8 cache needs kv_format ('q8_0', 'q4_0', 'fp8_e4m3', ...)", true);
  r.dtype = format;
  if (format == OCTATTN_DTYPE_FP8_DS_MLA) {
    // 656-byte rows as 576 values, or a slice of their first <= 512 bytes (v: the fp8
    // values, whose scales lie further in the row).
    const size_t last = r.ndim - 1;
    const int64_t n = r.ndim < 1 ? 0 : r.shape[last];
    if (r.ndim < 1 || (n != 656 && n > 512) || (n > 1 && r.stride[last] != 1))
      Bad(name, "rows of 656 contiguous bytes (or a slice of their first 512, as v)");
    for (size_t i = 0; i < last; ++i) {
      if (r.stride[i] % 656 != 0) Bad(name, "strides of whole 656-byte rows");
      r.stride[i] /= 656;
    }
    r.shape[last] = n == 656 ? 576 : n;
    r.stride[last] = 1;
    return r;
  }
  if (format != OCTATTN_DTYPE_Q8_0 && format != OCTATTN_DTYPE_Q4_0) return r;
  const int64_t unit = format == OCTATTN_DTYPE_Q8_0 ? 34 : 18, last = r.ndim - 1;
  if (r.ndim < 1 || r.shape[last] % unit != 0 || (r.shape[last] > 1 && r.stride[last] != 1))
    Bad(name, "rows of whole blocks (" + std::to_string(unit) + " contiguous bytes each)");
  for (size_t i = 0; i < r.ndim; ++i) {
    if (static_cast<int64_t>(i) == last) continue;
    if (r.stride[i] % unit != 0) Bad(name, "strides of whole blocks");
    r.stride[i] /= unit;
  }
  r.shape[last] = r.shape[last] / unit * 32;
  r.stride[last] = 1;
  return r;
}

octattn_dtype FormatOf(nb::handle format) {
  if (format.is_none()) return 0;
  const std::string f = nb::cast<std::string>(format);
  if (f == "q8_0") return OCTATTN_DTYPE_Q8_0;
  if (f == "q4_0") return OCTATTN_DTYPE_Q4_0;
  if (f == "fp8_e4m3") return OCTATTN_DTYPE_FP8_E4M3;
  if (f == "fp8_e5m2") return OCTATTN_DTYPE_FP8_E5M2;
  if (f == "int8") return OCTATTN_DTYPE_INT8;
  if (f == "fp8_ds_mla") return OCTATTN_DTYPE_FP8_DS_MLA;
  throw nb::value_error(
      "kv_format is 'q8_0', 'q4_0', 'fp8_e4m3', 'fp8_e5m2', 'int8' or 'fp8_ds_mla'");
}

// A tensor view of `h`: 4 dimensions (3: a trailing 1 is appended, as for lse
// [B, H, T] or a [B, T, C] sequence); `swap` exchanges dimensions 1 and 2 ([B, T, H, D]
// arrays seen as [B, H, T, D]).
octattn_tensor ViewOf(const Raw& r, const char* name, bool swap = false) {
  if (r.ndim != 3 && r.ndim != 4)
    Bad(name, "expected 4 dimensions (3 for lse), got " + std::to_string(r.ndim));
  octattn_tensor t{};
  t.data = r.data;
  t.dtype = r.dtype;
  for (size_t i = 0; i < 4; ++i) {
    t.shape[i] = r.shape[i];
    t.stride[i] = r.stride[i];
  }
  if (swap) {
    std::swap(t.shape[1], t.shape[2]);
    std::swap(t.stride[1], t.stride[2]);
  }
  return t;
}

octattn_tensor View(nb::handle h, const char* name, bool swap = false) {
  return ViewOf(RawOf(h, name), name, swap);
}

// A per-head float32 array (ALiBi slopes, sinks): contiguous, one entry per query head.
const float* PerHead(nb::handle a, int64_t heads, const char* name) {
  if (a.is_none()) return nullptr;
  const Raw r = RawOf(a, name);
  if (r.dtype != OCTATTN_DTYPE_F32 || r.ndim != 1 || (r.shape[0] > 1 && r.stride[0] != 1))
    Bad(name, "a contiguous 1-D float32 array", true);
  if (r.shape[0] != heads) Bad(name, "one entry per query head (" + std::to_string(heads) + ")");
  return static_cast<const float*>(r.data);
}

// A contiguous 1-D integer array (int64, or int32 for `bits` 32) of `n` entries (n < 0:
// any), for the per-sequence options; null for None.
const void* Ints(nb::handle a, int bits, int64_t n, const char* name) {
  if (a.is_none()) return nullptr;
  const std::string kind = bits == 64 ? "int64" : "int32";
  nb::ndarray<nb::device::cpu> arr;
  void* data = nullptr;
  size_t ndim = 0;
  int64_t len = 0, stride = 1;
  bool ok = false;
  if (IsTorch(a)) {
    if (!nb::cast<bool>(a.attr("is_cpu"))) Bad(name, "a CPU tensor", true);
    nb::object want = nb::module_::import_("torch").attr(bits == 64 ? "int64" : "int32");
    ok = a.attr("dtype").is(want);
    nb::tuple shape = nb::borrow<nb::tuple>(a.attr("shape"));
    ndim = nb::len(shape);
    if (ndim == 1) {
      len = nb::cast<int64_t>(shape[0]);
      stride = nb::cast<int64_t>(nb::borrow<nb::tuple>(a.attr("stride")())[0]);
    }
    data = reinterpret_cast<void*>(nb::cast<uintptr_t>(a.attr("data_ptr")()));
  } else if (nb::try_cast(a, arr, false)) {
    ok = bits == 64 ? arr.dtype() == nb::dtype<int64_t>() : arr.dtype() == nb::dtype<int32_t>();
    ndim = arr.ndim();
    if (ndim == 1) {
      len = static_cast<int64_t>(arr.shape(0));
      stride = arr.stride(0);
    }
    data = arr.data();
  }
  if (!ok || ndim != 1 || (len > 1 && stride != 1))
    Bad(name, "a contiguous 1-D " + kind + " array", true);
  if (n >= 0 && len != n)
    Bad(name, std::to_string(n) + " entries expected, got " + std::to_string(len));
  return data;
}

// The options of a call and the tensors they point at.
struct Options {
  octattn_attention_options o;
  octattn_tensor bias, mask;
};

void FillOptions(Options* opt, bool causal, int64_t window, int64_t stride,
                 std::optional<int64_t> q_start, int64_t k_start, float scale, int64_t chunk,
                 float softcap, OptArray alibi, OptArray sinks, OptArray bias, OptArray mask,
                 int32_t algorithm, int64_t q_heads) {
  octattn_python::SetOptions(&opt->o, causal, window, stride, q_start, k_start, scale, chunk,
                             softcap, algorithm);
  opt->o.alibi_slopes = PerHead(alibi, q_heads, "alibi_slopes");
  opt->o.sinks = PerHead(sinks, q_heads, "sinks");
  if (!bias.is_none()) {
    opt->bias = View(bias, "bias");
    opt->o.bias = &opt->bias;
  }
  if (!mask.is_none()) {
    opt->mask = View(mask, "mask");
    opt->o.mask = &opt->mask;
  }
}

// The sequence options of a call (include/octattn.h, SEMANTICS: Sequences, Paged): the
// arrays are the caller's, alive for the call.
struct Batch {
  const int64_t *q_starts = nullptr, *kv_starts = nullptr, *kv_lens = nullptr;
  int64_t sequences = 0;
  const int64_t *cu_q = nullptr, *cu_k = nullptr;
  const int32_t* table = nullptr;
  int64_t cols = 0;
  // A quantized cache's scale tensors (null: none) and rows per scale row.
  const octattn_tensor *k_scale = nullptr, *v_scale = nullptr;
  int64_t k_scale_rows = 0, v_scale_rows = 0;
  octattn_qk_precision qk = OCTATTN_QK_EXACT;
  // A tree of draft tokens (null: none): packed bits, rows tree_row_bytes apart.
  const uint8_t* tree = nullptr;
  int64_t tree_row_bytes = 0, tree_stride = 0;
  // A block mask (lists 0: none; 2: partial only; 4: with the full ones).
  octattn_tensor blocks[4]{};
  int lists = 0;
  int64_t block_q = 0, block_kv = 0;
  octattn_tensor* key_scores = nullptr;  // an output (null: not asked)
  // Key lists: key_indices, key_counts, key_indices2, key_counts2 (has[l]: given).
  octattn_tensor keys[4]{};
  bool has[4] = {false, false, false, false};
  void ApplyBlocks(octattn_attention_options* o) const {
    o->block_counts = lists ? &blocks[0] : nullptr;
    o->block_indices = lists ? &blocks[1] : nullptr;
    o->full_block_counts = lists == 4 ? &blocks[2] : nullptr;
    o->full_block_indices = lists == 4 ? &blocks[3] : nullptr;
    o->block_q = block_q;
    o->block_kv = block_kv;
  }
  void ApplyKeyLists(octattn_attention_options* o) const {
    o->key_indices = has[0] ? &keys[0] : nullptr;
    o->key_counts = has[1] ? &keys[1] : nullptr;
    o->key_indices2 = has[2] ? &keys[2] : nullptr;
    o->key_counts2 = has[3] ? &keys[3] : nullptr;
  }
  void Apply(octattn_attention_options* o) const {
    ApplyBlocks(o);
    o->qk_precision = qk;
    o->tree = tree;
    o->tree_row_bytes = tree_row_bytes;
    o->tree_stride = tree_stride;
    o->k_scale = k_scale;
    o->v_scale = v_scale;
    o->key_scores = key_scores;
    ApplyKeyLists(o);
    o->k_scale_rows = k_scale_rows;
    o->v_scale_rows = v_scale_rows;
    o->q_starts = q_starts;
    o->kv_starts = kv_starts;
    o->kv_lens = kv_lens;
    o->sequences = sequences;
    o->cu_seqlens_q = cu_q;
    o->cu_seqlens_k = cu_k;
    o->block_table = table;
    o->block_table_cols = cols;
  }
};

// An integer array's data, sizes and strides (in elements; at most 3 dimensions kept),
// torch or numpy on the CPU; ok: its dtype is T (torch: `torch_dtype`).
struct IntArray {
  bool ok = false;
  size_t ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0}, stride[4] = {0, 0, 0, 0};
  void* data = nullptr;
};
template <class T>
IntArray IntArrayOf(nb::handle a, const char* name, const char* torch_dtype) {
  IntArray r;
  nb::ndarray<nb::device::cpu> arr;
  if (IsTorch(a)) {
    if (!nb::cast<bool>(a.attr("is_cpu"))) Bad(name, "a CPU tensor", true);
    r.ok = a.attr("dtype").is(nb::module_::import_("torch").attr(torch_dtype));
    nb::tuple sh = nb::borrow<nb::tuple>(a.attr("shape"));
    nb::tuple st = nb::borrow<nb::tuple>(a.attr("stride")());
    r.ndim = nb::len(sh);
    for (size_t i = 0; i < r.ndim && i < 4; ++i) {
      r.shape[i] = nb::cast<int64_t>(sh[i]);
      r.stride[i] = nb::cast<int64_t>(st[i]);
    }
    r.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(a.attr("data_ptr")()));
  } else if (nb::try_cast(a, arr, false)) {
    r.ok = arr.dtype() == nb::dtype<T>();
    r.ndim = arr.ndim();
    for (size_t i = 0; i < r.ndim && i < 4; ++i) {
      r.shape[i] = static_cast<int64_t>(arr.shape(i));
      r.stride[i] = arr.stride(i);
    }
    r.data = arr.data();
  }
  return r;
}

// A block table: a C-contiguous 2-D int32 array [sequences, cols].
const int32_t* BlockTable(nb::handle a, int64_t* rows, int64_t* cols) {
  const char* name = "block_table";
  const IntArray t = IntArrayOf<int32_t>(a, name, "int32");
  if (!t.ok || t.ndim != 2 || (t.shape[1] > 1 && t.stride[1] != 1) ||
      (t.shape[0] > 1 && t.stride[0] != t.shape[1]))
    Bad(name, "a C-contiguous 2-D int32 array [sequences, blocks]", true);
  *rows = t.shape[0];
  *cols = t.shape[1];
  return static_cast<const int32_t*>(t.data);
}

// A tree's packed bits (octattn.pack_tree's output): uint8 [rows, row_bytes] (one tree
// for every batch entry, or a ragged batch's rows) or [B, rows, row_bytes], each row's
// bytes contiguous and rows one after another; a batch entry's rows anywhere (stride 0:
// the same tree).
void TreeOf(nb::handle a, Batch* batch) {
  if (a.is_none()) return;
  const char* name = "tree";
  const IntArray t = IntArrayOf<uint8_t>(a, name, "uint8");
  const size_t r = t.ndim == 3 ? 1 : 0;  // the rows' dimension
  if (!t.ok || (t.ndim != 2 && t.ndim != 3) || (t.shape[r + 1] > 1 && t.stride[r + 1] != 1) ||
      (t.shape[r] > 1 && t.stride[r] != t.shape[r + 1]) || t.shape[r + 1] < 1)
    Bad(name,
        "a uint8 array [rows, bytes] or [B, rows, bytes] of packed bits (octattn.pack_tree), "
        "each entry's rows contiguous",
        true);
  batch->tree = static_cast<const uint8_t*>(t.data);
  batch->tree_row_bytes = t.shape[r + 1];
  batch->tree_stride = t.ndim == 3 && t.shape[0] > 1 ? t.stride[0] : 0;
}

// A block mask (octattn.block_mask's `blocks`): (counts, indices, full_counts,
// full_indices, block_q, block_kv), counts int32 [B, H, q_blocks], indices int32 [B, H,
// q_blocks, n] (flex_attention's kv_num_blocks, kv_indices, ...), the full ones None or
// both given; any strides, read in place.
void BlocksOf(nb::handle a, Batch* batch) {
  if (a.is_none()) return;
  const char* name = "blocks";
  if (!nb::isinstance<nb::tuple>(a) || nb::len(a) != 6)
    Bad(name, "a tuple (counts, indices, full_counts, full_indices, block_q, block_kv)", true);
  nb::tuple t = nb::borrow<nb::tuple>(a);
  static const char* const kNames[4] = {"blocks: counts", "blocks: indices", "blocks: full_counts",
                                        "blocks: full_indices"};
  batch->lists = t[2].is_none() && t[3].is_none() ? 2 : 4;
  for (int l = 0; l < batch->lists; ++l) {
    const IntArray x = IntArrayOf<int32_t>(t[l], kNames[l], "int32");
    const size_t dims = l % 2 ? 4 : 3;
    if (!x.ok || x.ndim != dims)
      Bad(kNames[l],
          l % 2 ? "an int32 array [B, H, q_blocks, n]" : "an int32 array [B, H, q_blocks]", true);
    octattn_tensor& v = batch->blocks[l];
    v.data = x.data;
    v.dtype = OCTATTN_DTYPE_INT32;
    for (size_t d = 0; d < 4; ++d) {
      v.shape[d] = d < dims ? x.shape[d] : 1;
      v.stride[d] = d < dims ? x.stride[d] : 1;
    }
  }
  batch->block_q = nb::cast<int64_t>(t[4]);
  batch->block_kv = nb::cast<int64_t>(t[5]);
}

// Key lists (include/octattn.h, Key lists): int32 indices [Tq, n] (every batch entry's and
// kv head's; a ragged batch's rows), [B, Tq, n] or [B, Hkv, Tq, n], and counts of the same
// shape less n (None: every entry read); any strides, read in place. List l (0 or 1)
// into batch->keys[2 l] and [2 l + 1].
void KeyListOf(nb::handle idx, nb::handle cnt, int l, Batch* batch) {
  static const char* const kNames[4] = {"key_indices", "key_counts", "key_indices2", "key_counts2"};
  for (int w = 0; w < 2; ++w) {
    nb::handle a = w ? cnt : idx;
    if (a.is_none()) continue;
    const char* name = kNames[2 * l + w];
    const IntArray x = IntArrayOf<int32_t>(a, name, "int32");
    if (!x.ok || !octattn_python::KeyListView(x.data, x.ndim, x.shape, x.stride, w == 1,
                                              &batch->keys[2 * l + w]))
      Bad(name,
          w ? "an int32 array [Tq], [B, Tq] or [B, Hkv, Tq] (the lists' shape less n)"
            : "an int32 array [Tq, n], [B, Tq, n] or [B, Hkv, Tq, n]",
          true);
    batch->has[2 * l + w] = true;
  }
}

// A [T, H, D] array seen as [1, T, H, D] (ragged rows; ViewOf with swap makes it
// [1, H, T, D]).
Raw AsRows(const Raw& r, const char* name) {
  if (r.ndim != 3) Bad(name, "expected 3 dimensions [total, H, D] with cu_seqlens_q");
  Raw out = r;
  out.ndim = 4;
  for (int i = 3; i > 0; --i) {
    out.shape[i] = r.shape[i - 1];
    out.stride[i] = r.stride[i - 1];
  }
  out.shape[0] = 1;
  out.stride[0] = r.shape[0] * r.stride[0];
  return out;
}

class Context {
 public:
  Context() {
    if (octattn_status s = octattn_context_create(&ctx_)) Raise(s, "octattn_context_create failed");
  }
  // A context whose creation failed holds null (for callers without Python).
  explicit Context(std::nothrow_t) { octattn_context_create(&ctx_); }
  ~Context() { octattn_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void Check(octattn_status s) const {
    if (s != OCTATTN_OK) Raise(s, octattn_context_last_error(ctx_));
  }

  // A cap set by the caller; without one, the default context follows torch's.
  void SetThreads(int32_t threads) {
    Check(octattn_context_set_threads(ctx_, threads));
    explicit_threads_ = true;
  }
  // Caps the threads at torch.get_num_threads() (`n`) unless the caller set a cap.
  void FollowThreads(int32_t n) { Check(Follow(n)); }
  // The same without Python (the torch operators call it without the GIL).
  octattn_status Follow(int32_t n) {
    if (explicit_threads_ || n == followed_) return OCTATTN_OK;
    const octattn_status s = octattn_context_set_threads(ctx_, n);
    if (s == OCTATTN_OK) followed_ = n;
    return s;
  }
  octattn_context* raw() const { return ctx_; }
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
    d["shared_kv_rows"] = info.shared_kv_rows;
    return d;
  }

  // octattn_attention on views already read (lse and weights may be null), with the
  // sequence options of `batch` (null: none).
  void Attention(const octattn_tensor& q, const octattn_tensor& k, const octattn_tensor& v,
                 octattn_tensor* o, octattn_tensor* lse, octattn_tensor* weights, bool causal,
                 int64_t window, int64_t stride, std::optional<int64_t> q_start, int64_t k_start,
                 float scale, int64_t chunk, float softcap, OptArray alibi, OptArray sinks,
                 OptArray bias, OptArray mask, int32_t algorithm, const Batch* batch = nullptr) {
    Options opt;
    FillOptions(&opt, causal, window, stride, q_start, k_start, scale, chunk, softcap, alibi, sinks,
                bias, mask, algorithm, q.shape[1]);
    if (batch) batch->Apply(&opt.o);
    octattn_status s;
    {
      nb::gil_scoped_release release;
      s = octattn_attention(ctx_, &opt.o, &q, &k, &v, o, lse, weights, nullptr, 0);
    }
    Check(s);
  }

  void KvStore(const octattn_tensor& src, octattn_tensor* dst, octattn_tensor* scale,
               int64_t scale_rows, const int64_t* slots) {
    octattn_status s;
    {
      nb::gil_scoped_release release;
      s = octattn_kv_store(ctx_, &src, dst, scale, scale_rows, slots);
    }
    Check(s);
  }

  // octattn_attention_backward: gradients into the caller's dq, dk, dv (and dsinks,
  // dbias when given), every array in the layout of q (lse [B, Hq, Tq], dbias [B, Hq,
  // Tq, Tk], dsinks [Hq]).
  void Backward(Array q, Array k, Array v, Array o, Array lse, Array dout, OptArray dlse, Array dq,
                Array dk, Array dv, OptArray dsinks, OptArray dbias, bool bthd, bool causal,
                int64_t window, int64_t stride, std::optional<int64_t> q_start, int64_t k_start,
                std::optional<float> scale, int64_t chunk, float softcap, OptArray alibi,
                OptArray sinks, OptArray bias, OptArray mask, int32_t algorithm, OptArray q_starts,
                OptArray kv_starts, OptArray kv_lens, nb::handle tree, nb::handle blocks,
                nb::handle key_indices, nb::handle key_counts, nb::handle key_indices2,
                nb::handle key_counts2) {
    const octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd),
                         to = View(o, "o", bthd), tl = View(lse, "lse"),
                         td = View(dout, "dout", bthd);
    octattn_tensor gq = View(dq, "dq", bthd), gk = View(dk, "dk", bthd), gv = View(dv, "dv", bthd),
                   gb{}, tdl{};
    if (!dlse.is_none()) tdl = View(dlse, "dlse");
    if (!dbias.is_none()) gb = View(dbias, "dbias");
    float* ds = nullptr;
    if (!dsinks.is_none()) {
      const Raw r = RawOf(dsinks, "dsinks");
      if (r.dtype != OCTATTN_DTYPE_F32 || r.ndim != 1 || (r.shape[0] > 1 && r.stride[0] != 1))
        Bad("dsinks", "a contiguous 1-D float32 array", true);
      if (r.shape[0] != tq.shape[1]) Bad("dsinks", "one entry per query head");
      ds = static_cast<float*>(r.data);
    }
    Options opt;
    FillOptions(&opt, causal, window, stride, q_start, k_start, scale ? *scale : 0.0f, chunk,
                softcap, alibi, sinks, bias, mask, algorithm, tq.shape[1]);
    // A padded batch: one int64 entry per batch entry each.
    const int64_t n = tq.shape[0];
    opt.o.q_starts = static_cast<const int64_t*>(Ints(q_starts, 64, n, "q_starts"));
    opt.o.kv_starts = static_cast<const int64_t*>(Ints(kv_starts, 64, n, "kv_starts"));
    opt.o.kv_lens = static_cast<const int64_t*>(Ints(kv_lens, 64, n, "kv_lens"));
    Batch trees;
    TreeOf(tree, &trees);
    opt.o.tree = trees.tree;
    opt.o.tree_row_bytes = trees.tree_row_bytes;
    opt.o.tree_stride = trees.tree_stride;
    BlocksOf(blocks, &trees);
    trees.ApplyBlocks(&opt.o);
    KeyListOf(key_indices, key_counts, 0, &trees);
    KeyListOf(key_indices2, key_counts2, 1, &trees);
    trees.ApplyKeyLists(&opt.o);
    octattn_status s;
    {
      nb::gil_scoped_release release;
      s = octattn_attention_backward(ctx_, &opt.o, &tq, &tk, &tv, &to, &tl, &td,
                                     dlse.is_none() ? nullptr : &tdl, &gq, &gk, &gv, ds,
                                     dbias.is_none() ? nullptr : &gb, nullptr, 0);
    }
    Check(s);
  }

  size_t WorkspaceSize(Array q, Array k, Array v, Array o, bool bthd, bool causal, int64_t window,
                       int64_t stride, std::optional<int64_t> q_start, int64_t k_start,
                       int64_t chunk, int32_t algorithm) {
    octattn_tensor tq = View(q, "q", bthd), tk = View(k, "k", bthd), tv = View(v, "v", bthd),
                   to = View(o, "out", bthd);
    Options opt;
    const nb::handle none = nb::none();
    FillOptions(&opt, causal, window, stride, q_start, k_start, 0.0f, chunk, 0.0f, none, none, none,
                none, algorithm, tq.shape[1]);
    size_t bytes = 0;
    Check(octattn_attention_workspace_size(ctx_, &opt.o, &tq, &tk, &tv, &to, nullptr, nullptr,
                                           &bytes));
    return bytes;
  }

  // The stages.
  void Scores(Array q, Array k, Array scores) {
    octattn_tensor tq = View(q, "q"), tk = View(k, "k"), ts = View(scores, "scores");
    Check(octattn_scores(ctx_, &tq, &tk, &ts));
  }
  void Scale(Array scores, float scale) {
    octattn_tensor ts = View(scores, "scores");
    Check(octattn_scale(ctx_, &ts, scale));
  }
  void Mask(Array scores, bool causal, int64_t window, int64_t stride,
            std::optional<int64_t> q_start, int64_t k_start, int64_t chunk, OptArray mask,
            nb::handle key_indices, nb::handle key_counts, nb::handle key_indices2,
            nb::handle key_counts2) {
    octattn_tensor ts = View(scores, "scores");
    Options opt;
    const nb::handle none = nb::none();
    FillOptions(&opt, causal, window, stride, q_start, k_start, 0.0f, chunk, 0.0f, none, none, none,
                mask, OCTATTN_ALGORITHM_AUTO, ts.shape[1]);
    Batch lists;
    KeyListOf(key_indices, key_counts, 0, &lists);
    KeyListOf(key_indices2, key_counts2, 1, &lists);
    lists.ApplyKeyLists(&opt.o);
    Check(octattn_mask(ctx_, &opt.o, &ts));
  }
  void ModifyScores(Array scores, std::optional<int64_t> q_start, int64_t k_start, float softcap,
                    OptArray alibi, OptArray bias) {
    octattn_tensor ts = View(scores, "scores");
    Options opt;
    const nb::handle none = nb::none();
    FillOptions(&opt, true, 0, 0, q_start, k_start, 0.0f, 0, softcap, alibi, none, bias, none,
                OCTATTN_ALGORITHM_AUTO, ts.shape[1]);
    Check(octattn_modify_scores(ctx_, &opt.o, &ts));
  }
  void Softmax(Array scores, OptArray sinks, OptArray lse) {
    octattn_tensor ts = View(scores, "scores"), tl{};
    if (!lse.is_none()) tl = View(lse, "lse");
    octattn_tensor* lp = lse.is_none() ? nullptr : &tl;
    if (!sinks.is_none())
      Check(octattn_softmax_sinks(ctx_, &ts, PerHead(sinks, ts.shape[1], "sinks"), lp));
    else
      Check(octattn_softmax(ctx_, &ts, lp));
  }
  void WeightedSum(Array w, Array v, Array o) {
    octattn_tensor tw = View(w, "weights"), tv = View(v, "v"), to = View(o, "out");
    Check(octattn_weighted_sum(ctx_, &tw, &tv, &to));
  }
  void SplitHeads(Array src, int64_t heads, Array dst) {
    octattn_tensor ts = View(src, "x"), td = View(dst, "out");
    Check(octattn_split_heads(ctx_, &ts, heads, &td));
  }
  void MergeHeads(Array src, Array dst) {
    octattn_tensor ts = View(src, "x"), td = View(dst, "out");
    Check(octattn_merge_heads(ctx_, &ts, &td));
  }
  void SplitQkv(Array src, int64_t q_heads, int64_t kv_heads, Array q, Array k, Array v) {
    octattn_tensor ts = View(src, "qkv"), tq = View(q, "q"), tk = View(k, "k"), tv = View(v, "v");
    Check(octattn_split_qkv(ctx_, &ts, q_heads, kv_heads, &tq, &tk, &tv));
  }
  void Merge(nb::list o_parts, nb::list lse_parts, Array o, OptArray lse) {
    if (nb::len(o_parts) != nb::len(lse_parts))
      throw nb::value_error("merge: as many lse parts as output parts");
    std::vector<octattn_tensor> to, tl;
    for (nb::handle a : o_parts) to.push_back(View(a, "o_parts"));
    for (nb::handle a : lse_parts) tl.push_back(View(a, "lse_parts"));
    octattn_tensor out = View(o, "out"), out_lse{};
    if (!lse.is_none()) out_lse = View(lse, "lse");
    Check(octattn_merge(ctx_, to.size(), to.data(), tl.data(), &out,
                        lse.is_none() ? nullptr : &out_lse));
  }

 private:
  octattn_context* ctx_ = nullptr;
  bool explicit_threads_ = false;
  int32_t followed_ = -1;
};

// numpy.empty and the package's per-head converter, set at import.
nb::handle numpy_empty, per_head;

// The default context of this thread (one per Python thread: a context must not be used
// by two threads at once).
std::unique_ptr<Context>& ThreadContext() {
  thread_local std::unique_ptr<Context> ctx;
  return ctx;
}
Context& DefaultContext() {
  std::unique_ptr<Context>& ctx = ThreadContext();
  if (!ctx) ctx = std::make_unique<Context>();
  return *ctx;
}

// The default context of the calling thread for the torch operators (octattn/ops.py
// binds them to it), its threads following torch's `threads` as the package's torch
// calls do; null where it cannot be made. Touches no Python: the operators run without
// the GIL.
octattn_context* OperatorContext(int32_t threads) noexcept {
  std::unique_ptr<Context>& ctx = ThreadContext();
  if (!ctx) {
    auto made = std::unique_ptr<Context>(new (std::nothrow) Context(std::nothrow));
    if (!made || !made->raw()) return nullptr;
    ctx = std::move(made);
  }
  return ctx->Follow(threads) == OCTATTN_OK ? ctx->raw() : nullptr;
}

bool Is(nb::handle s, const char* text) {
  return PyUnicode_Check(s.ptr()) && PyUnicode_CompareWithASCIIString(s.ptr(), text) == 0;
}

// An uninitialized float32 array of like's kind (torch or numpy), or (same_dtype) of
// like's dtype.
nb::object Empty(nb::handle like, bool torch, std::initializer_list<int64_t> dims,
                 bool same_dtype = false) {
  nb::list shape;
  for (int64_t d : dims) shape.append(d);
  nb::object dtype = same_dtype ? nb::object(like.attr("dtype"))
                     : torch    ? nb::borrow(torch_f32)
                                : nb::object(nb::str("float32"));
  if (torch) return like.attr("new_empty")(nb::tuple(shape), nb::arg("dtype") = dtype);
  return nb::borrow(numpy_empty)(nb::tuple(shape), nb::arg("dtype") = dtype);
}

// octattn.attention (its docstring is in octattn/__init__.py).
nb::object AttentionEntry(nb::handle q, nb::handle k, nb::handle v, bool causal, int64_t window,
                          int64_t stride, std::optional<float> scale,
                          std::optional<int64_t> q_start, int64_t k_start, int64_t chunk,
                          float softcap, nb::handle alibi, nb::handle sinks, nb::handle bias,
                          nb::handle mask, nb::handle out, bool return_lse, bool return_weights,
                          nb::handle algorithm, nb::handle layout, nb::handle context,
                          nb::handle q_starts, nb::handle kv_starts, nb::handle kv_lens,
                          nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle block_table,
                          nb::handle k_scale, nb::handle v_scale, int64_t k_scale_rows,
                          int64_t v_scale_rows, nb::handle kv_format, nb::handle qk,
                          nb::handle tree, nb::handle blocks, bool return_key_scores,
                          nb::handle key_indices, nb::handle key_counts, nb::handle key_indices2,
                          nb::handle key_counts2) {
  const bool torch = IsTorch(q);
  Context* ctx;
  if (context.is_none()) {
    ctx = &DefaultContext();
    if (torch) ctx->FollowThreads(nb::cast<int32_t>(nb::borrow(torch_threads)()));
  } else {
    ctx = nb::cast<Context*>(context);
  }
  const bool bthd = Is(layout, "bthd");
  if (!bthd && !Is(layout, "bhtd")) throw nb::value_error("layout is 'bhtd' or 'bthd'");
  const int32_t algo = Is(algorithm, "auto")        ? OCTATTN_ALGORITHM_AUTO
                       : Is(algorithm, "fused")     ? OCTATTN_ALGORITHM_FUSED
                       : Is(algorithm, "naive")     ? OCTATTN_ALGORITHM_NAIVE
                       : Is(algorithm, "reference") ? OCTATTN_ALGORITHM_REFERENCE
                                                    : -1;
  if (algo < 0) throw nb::value_error("algorithm is 'auto', 'fused', 'naive' or 'reference'");
  // Each tensor argument is read once (for torch, five attribute calls).
  const octattn_dtype format = FormatOf(kv_format);
  Raw rq = RawOf(q, "q"), rk = CacheOf(k, "k", format), rv = CacheOf(v, "v", format);
  // Sequences: ragged (cu_seqlens_q: q, k, v and out [total, H, D]) or the batch entries;
  // a block table makes k and v pools ([blocks, block_size, H, D], layout "bthd").
  Batch batch;
  const bool ragged = !cu_seqlens_q.is_none(), paged = !block_table.is_none();
  int64_t n = 0;
  if (ragged) {
    if (nb::len(cu_seqlens_q) < 1) Bad("cu_seqlens_q", "n + 1 offsets");
    n = static_cast<int64_t>(nb::len(cu_seqlens_q)) - 1;
    batch.sequences = n;
    batch.cu_q = static_cast<const int64_t*>(Ints(cu_seqlens_q, 64, n + 1, "cu_seqlens_q"));
    batch.cu_k = static_cast<const int64_t*>(Ints(cu_seqlens_k, 64, n + 1, "cu_seqlens_k"));
    rq = AsRows(rq, "q");
    if (!paged) {
      rk = AsRows(rk, "k");
      rv = AsRows(rv, "v");
    }
  } else if (!cu_seqlens_k.is_none()) {
    Bad("cu_seqlens_k", "needs cu_seqlens_q (a ragged batch)");
  } else {
    n = rq.ndim == 4 ? rq.shape[0] : 0;
  }
  if (paged) {
    int64_t rows = 0;
    batch.table = BlockTable(block_table, &rows, &batch.cols);
    if (rows != n) Bad("block_table", "one row per sequence (" + std::to_string(n) + ")");
  }
  batch.q_starts = static_cast<const int64_t*>(Ints(q_starts, 64, n, "q_starts"));
  batch.kv_starts = static_cast<const int64_t*>(Ints(kv_starts, 64, n, "kv_starts"));
  batch.kv_lens = static_cast<const int64_t*>(Ints(kv_lens, 64, n, "kv_lens"));
  if (rq.ndim != 4 || rk.ndim != 4 || rv.ndim != 4)
    throw nb::value_error(
        "q, k and v have 4 dimensions ([B, H, T, D] or, bthd, [B, T, H, D]; with "
        "cu_seqlens_q 3: [total, H, D], k and v 4 with a block table)");
  // Ragged q rows are [1, T, H, D]; paged k and v follow `layout`.
  const bool q_bthd = bthd || ragged, kv_bthd = paged ? bthd : q_bthd;
  // [B, H, T] of the queries, whatever the layout.
  const int64_t B = rq.shape[0], H = q_bthd ? rq.shape[2] : rq.shape[1],
                T = q_bthd ? rq.shape[1] : rq.shape[2];
  const int64_t Tk = paged ? batch.cols * (kv_bthd ? rk.shape[1] : rk.shape[2])
                           : (kv_bthd ? rk.shape[1] : rk.shape[2]);
  nb::object o;
  if (!out.is_none())
    o = nb::borrow(out);
  else if (ragged)
    o = Empty(q, torch, {T, H, rv.shape[3]}, true);
  else
    o = Empty(q, torch, {rq.shape[0], rq.shape[1], rq.shape[2], rv.shape[3]}, true);
  nb::object lse = nb::none(), weights = nb::none(), key_scores = nb::none();
  if (return_lse) lse = Empty(q, torch, {B, H, T});
  if (return_weights) weights = Empty(q, torch, {B, H, T, Tk});
  // Key scores: per batch entry (paged: per sequence) and kv head, each key row's.
  const int64_t Hkv = kv_bthd ? rk.shape[2] : rk.shape[1];
  if (return_key_scores) key_scores = Empty(q, torch, {paged && ragged ? n : B, Hkv, Tk});
  octattn_tensor tkey{};
  if (return_key_scores) {
    tkey = View(key_scores, "key_scores");
    batch.key_scores = &tkey;
  }
  nb::object a = alibi.is_none() ? nb::none() : nb::borrow(per_head)(alibi, q);
  nb::object sk = sinks.is_none() ? nb::none() : nb::borrow(per_head)(sinks, q);
  Raw ro = RawOf(o, "out");
  if (ragged) ro = AsRows(ro, "out");
  octattn_tensor to = ViewOf(ro, "out", q_bthd), tl{}, tw{};
  if (return_lse) tl = View(lse, "lse");
  if (return_weights) tw = View(weights, "weights");
  // Scales: [B, Hkv, R, D / G] (bthd: [B, R, Hkv, D / G]) as k and v, sizes of 1 broadcast.
  octattn_tensor tks{}, tvs{};
  if (!k_scale.is_none()) tks = ViewOf(RawOf(k_scale, "k_scale"), "k_scale", kv_bthd);
  if (!v_scale.is_none()) tvs = ViewOf(RawOf(v_scale, "v_scale"), "v_scale", kv_bthd);
  batch.k_scale = k_scale.is_none() ? nullptr : &tks;
  batch.v_scale = v_scale.is_none() ? nullptr : &tvs;
  batch.k_scale_rows = k_scale_rows;
  batch.v_scale_rows = v_scale_rows;
  if (!Is(qk, "exact") && !Is(qk, "int8")) throw nb::value_error("qk is 'exact' or 'int8'");
  batch.qk = Is(qk, "int8") ? OCTATTN_QK_INT8 : OCTATTN_QK_EXACT;
  TreeOf(tree, &batch);
  BlocksOf(blocks, &batch);
  KeyListOf(key_indices, key_counts, 0, &batch);
  KeyListOf(key_indices2, key_counts2, 1, &batch);
  ctx->Attention(ViewOf(rq, "q", q_bthd), ViewOf(rk, "k", kv_bthd), ViewOf(rv, "v", kv_bthd), &to,
                 return_lse ? &tl : nullptr, return_weights ? &tw : nullptr, causal, window, stride,
                 q_start, k_start, scale ? *scale : 0.0f, chunk, softcap, a, sk, bias, mask, algo,
                 &batch);
  if (ragged && return_lse) lse = lse.attr("__getitem__")(0);  // [H, total]
  if (ragged && !paged && return_key_scores)
    key_scores = key_scores.attr("__getitem__")(0);  // [Hkv, total keys]
  nb::list parts;
  parts.append(o);
  if (return_lse) parts.append(lse);
  if (return_weights) parts.append(weights);
  if (return_key_scores) parts.append(key_scores);
  if (nb::len(parts) == 1) return o;
  return nb::tuple(parts);
}

// octattn.kv_store: src [B, H, T, D] (bthd: [B, T, H, D]) converted into dst, a view of
// the cache's rows (or with slots a pool [blocks, H, block_size, D], bthd [blocks,
// block_size, H, D]); scale: INT8's output, FP8's input.
void KvStoreEntry(nb::handle src, nb::handle dst, nb::handle scale, int64_t scale_rows,
                  nb::handle slots, nb::handle layout, nb::handle kv_format, nb::handle context) {
  const bool bthd = Is(layout, "bthd");
  if (!bthd && !Is(layout, "bhtd")) throw nb::value_error("layout is 'bhtd' or 'bthd'");
  Context* ctx = context.is_none() ? &DefaultContext() : nb::cast<Context*>(context);
  const octattn_tensor ts = ViewOf(RawOf(src, "src"), "src", bthd);
  octattn_tensor td = ViewOf(CacheOf(dst, "dst", FormatOf(kv_format)), "dst", bthd), tsc{};
  if (!scale.is_none()) tsc = ViewOf(RawOf(scale, "scale"), "scale", bthd);
  const int64_t* sl = nullptr;
  if (!slots.is_none())
    sl = static_cast<const int64_t*>(Ints(slots, 64, ts.shape[0] * ts.shape[2], "slots"));
  ctx->KvStore(ts, &td, scale.is_none() ? nullptr : &tsc, scale_rows, sl);
}

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
  m.def("_set_error_class", [](nb::object cls) { error_class = cls.release(); });
  m.def("_set_helpers", [](nb::object empty, nb::object convert) {
    numpy_empty = empty.release();
    per_head = convert.release();
  });
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
      .def("follow_threads", &Context::FollowThreads)
      .def("set_threads", &Context::SetThreads)
      .def("threads", &Context::Threads)
      .def("set_target", &Context::SetTarget)
      .def("set_memory_limit", &Context::SetMemoryLimit)
      .def("last_run", &Context::LastRun)
      .def("workspace_size", &Context::WorkspaceSize, nb::arg("q"), nb::arg("k"), nb::arg("v"),
           nb::arg("o"), nb::arg("bthd"), nb::arg("causal"), nb::arg("window"), nb::arg("stride"),
           nb::arg("q_start").none(), nb::arg("k_start"), nb::arg("chunk"), nb::arg("algorithm"))
      .def("backward", &Context::Backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
           nb::arg("lse"), nb::arg("dout"), nb::arg("dlse").none(), nb::arg("dq"), nb::arg("dk"),
           nb::arg("dv"), nb::arg("dsinks").none(), nb::arg("dbias").none(), nb::arg("bthd"),
           nb::arg("causal"), nb::arg("window"), nb::arg("stride"), nb::arg("q_start").none(),
           nb::arg("k_start"), nb::arg("scale").none(), nb::arg("chunk"), nb::arg("softcap"),
           nb::arg("alibi").none(), nb::arg("sinks").none(), nb::arg("bias").none(),
           nb::arg("mask").none(), nb::arg("algorithm"), nb::arg("q_starts").none(),
           nb::arg("kv_starts").none(), nb::arg("kv_lens").none(),
           nb::arg("tree").none() = nb::none(), nb::arg("blocks").none() = nb::none(),
           nb::arg("key_indices").none() = nb::none(), nb::arg("key_counts").none() = nb::none(),
           nb::arg("key_indices2").none() = nb::none(), nb::arg("key_counts2").none() = nb::none())
      .def("scores", &Context::Scores)
      .def("scale", &Context::Scale)
      .def("mask", &Context::Mask, nb::arg("scores"), nb::arg("causal"), nb::arg("window"),
           nb::arg("stride"), nb::arg("q_start").none(), nb::arg("k_start"), nb::arg("chunk"),
           nb::arg("mask").none(), nb::arg("key_indices").none() = nb::none(),
           nb::arg("key_counts").none() = nb::none(), nb::arg("key_indices2").none() = nb::none(),
           nb::arg("key_counts2").none() = nb::none())
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
  m.def("_default_context", &DefaultContext, nb::rv_policy::reference);
  m.def("_operator_context_source", [] { return reinterpret_cast<uintptr_t>(&OperatorContext); });
  m.def("_is_torch", [](nb::handle h) { return IsTorch(h); });
  m.def("attention", &AttentionEntry, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::kw_only(),
        nb::arg("causal") = true, nb::arg("window") = 0, nb::arg("stride") = 0,
        nb::arg("scale").none() = nb::none(), nb::arg("q_start").none() = nb::none(),
        nb::arg("k_start") = 0, nb::arg("chunk") = 0, nb::arg("softcap") = 0.0f,
        nb::arg("alibi_slopes").none() = nb::none(), nb::arg("sinks").none() = nb::none(),
        nb::arg("bias").none() = nb::none(), nb::arg("mask").none() = nb::none(),
        nb::arg("out").none() = nb::none(), nb::arg("return_lse") = false,
        nb::arg("return_weights") = false, nb::arg("algorithm") = "auto",
        nb::arg("layout") = "bhtd", nb::arg("context").none() = nb::none(),
        nb::arg("q_starts").none() = nb::none(), nb::arg("kv_starts").none() = nb::none(),
        nb::arg("kv_lens").none() = nb::none(), nb::arg("cu_seqlens_q").none() = nb::none(),
        nb::arg("cu_seqlens_k").none() = nb::none(), nb::arg("block_table").none() = nb::none(),
        nb::arg("k_scale").none() = nb::none(), nb::arg("v_scale").none() = nb::none(),
        nb::arg("k_scale_rows") = 0, nb::arg("v_scale_rows") = 0,
        nb::arg("kv_format").none() = nb::none(), nb::arg("qk") = "exact",
        nb::arg("tree").none() = nb::none(), nb::arg("blocks").none() = nb::none(),
        nb::arg("return_key_scores") = false, nb::arg("key_indices").none() = nb::none(),
        nb::arg("key_counts").none() = nb::none(), nb::arg("key_indices2").none() = nb::none(),
        nb::arg("key_counts2").none() = nb::none(),
        R"doc(o = softmax(scale * q k^T + M) v, as octattn_attention (include/octattn.h).

q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] (layout="bthd": [B, T, H, D]
each), any strides; Hq % Hkv == 0 (grouped queries, no copies). q, k and v each float32,
bfloat16 or float16 (computed in float32 on the exact widened values); o (new or out)
in q's dtype or float32; lse and weights float32.
causal/window/stride/chunk: the mask; q_start/k_start: positions (q_start None: the
queries are the newest tokens); scale None: 1/sqrt(D); softcap, alibi_slopes [Hq],
sinks [Hq], bias [B, Hq, Tq, Tk] and mask [B, Hq, Tq, Tk] (bool; broadcast with
stride 0): the score modifiers. out: the output to write (same layout as q).
Returns o, or (o[, lse][, weights][, key_scores]) as asked (lse [B, Hq, Tq], weights
[B, Hq, Tq, Tk]: naive algorithm only; key_scores [B, Hkv, Tk]: each key's attention
received, summed over its group's heads and the query rows, for KV-cache eviction; ragged
[Hkv, total keys], paged [sequences, Hkv, block_table columns * block_size]).
Sequences (int64 arrays, one entry per sequence): kv_starts, kv_lens (the valid key rows
of each batch entry: left and right padding), q_starts (each sequence's first query
position). Ragged: cu_seqlens_q, cu_seqlens_k (n + 1 offsets) with q, k, v and o
[total, H, D] (lse [Hq, total]). Paged: block_table (int32 [sequences, blocks]) with k, v
pools [blocks, block_size, Hkv, D] (layout="bthd", vLLM's) or [blocks, Hkv, block_size,
D], kv_lens the context lengths.
Quantized caches (include/octattn.h, Quantized caches): k and v int8 (torch or numpy)
with k_scale and v_scale ([B, Hkv, R, D / G] in k's layout, sizes of 1 broadcast;
k_scale_rows: rows per scale row), torch.float8_e4m3fn / float8_e5m2 (optional scales),
or uint8 arrays with kv_format "q8_0" / "q4_0" (ggml's blocks: the last dimension the
row's bytes), "fp8_e4m3" / "fp8_e5m2" (codes) or "fp8_ds_mla" (DeepSeek V3.2's latent
rows of 656 bytes: k the rows, v the rows or their first 512 bytes, value_dim 512).
qk="int8" (int8, q8_0 and q4_0 keys):
q . k as int8 dot products, q rounded to int8 in blocks (OCTATTN_QK_INT8).
tree: a tree of draft tokens (speculative decoding's verification; include/octattn.h,
Trees): uint8 [rows, bytes] (every batch entry's, or a ragged batch's rows) or [B, rows,
bytes] from octattn.pack_tree; row i reads every key before the sequence's last Tq (its
tree) and the tree columns its bits keep. Not with mask.
blocks: a block mask (include/octattn.h, Block masks): (counts, indices, full_counts,
full_indices, block_q, block_kv), flex_attention's kv_num_blocks, kv_indices,
full_kv_num_blocks, full_kv_indices (None, None: no full blocks; int32, read in place)
and BLOCK_SIZE; mask (if any) decides the partial blocks' pairs.
octattn.block_mask(flex BlockMask) gives both.
key_indices: token-sparse attention (include/octattn.h, Key lists; DeepSeek's indexer
top-k): int32 [Tq, n] (every batch entry's and head's; a ragged batch's rows), [B, Tq, n]
or [B, Hkv, Tq, n], each row's key rows (counted from its sequence's first valid key; -1:
none; any order, duplicates read once); key_counts (the same less n: entries used; None:
all n); key_indices2, key_counts2: a second list joined to the first (a local window).
Every algorithm (return_key_scores: naive or reference); not with blocks.)doc");
  m.def("kv_store", &KvStoreEntry, nb::arg("src"), nb::arg("dst"),
        nb::arg("scale").none() = nb::none(), nb::kw_only(), nb::arg("scale_rows") = 0,
        nb::arg("slots").none() = nb::none(), nb::arg("layout") = "bhtd",
        nb::arg("kv_format").none() = nb::none(), nb::arg("context").none() = nb::none(),
        R"doc(Writes src's rows into a KV cache of any dtype (octattn_kv_store, include/octattn.h).

src [B, H, T, D] float32/bfloat16/float16 (layout="bthd": [B, T, H, D]); dst: a view of
the cache rows that receive them (src's shape), or with slots (int64 [B * T], vLLM's slot
mapping, -1 skips) a pool [blocks, H, block_size, D] ([blocks, block_size, H, D] bthd).
dst float32/bfloat16/float16, int8 (scale: its output, [B, H, T / scale_rows, D / G]),
float8 (scale: an input, or None), or uint8 with kv_format "q8_0"/"q4_0"/"fp8_*" (D 576
for "fp8_ds_mla": rows of 656 bytes).)doc");
}
