// Boundary checks: sizes, strides, overflow, aliasing, alignment, option structs.
#include "lib/api/validate.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <utility>

namespace octattn {
namespace api {

Check Fail(octattn_status code, std::string message) {
  Check c;
  c.code = code;
  c.message = std::move(message);
  return c;
}

namespace {

std::string Name(const char* name, const char* what) { return std::string(name) + ": " + what; }

// True when no two elements of the view share an address: with the dimensions sorted by
// stride, each stride exceeds the span of all smaller ones.
bool ElementsDisjoint(const int64_t* shape, const int64_t* stride, int dims) {
  int order[4];
  int n = 0;
  for (int d = 0; d < dims; ++d)
    if (shape[d] > 1) order[n++] = d;
  for (int i = 1; i < n; ++i)  // insertion sort by stride (at most 4 entries)
    for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; --j) {
      const int tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  int64_t span = 0;  // largest offset reachable with the dimensions seen so far
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    if (stride[d] <= span) return false;
    span += (shape[d] - 1) * stride[d];  // no overflow: checked by the extent before
  }
  return true;
}

}  // namespace

Check ValidateTensor(const octattn_tensor* t, const char* name, Role role, bool sequence,
                     TensorInfo* out, octattn_dtype dtype) {
  if (!t) return Fail(OCTATTN_ERROR_NULL_POINTER, Name(name, "tensor is NULL"));
  if (!t->data) return Fail(OCTATTN_ERROR_NULL_POINTER, Name(name, "data is NULL"));
  if (dtype == OCTATTN_DTYPE_BOOL) {
    if (t->dtype != OCTATTN_DTYPE_BOOL)
      return Fail(OCTATTN_ERROR_INVALID_OPTION, Name(name, "a mask tensor's dtype must be bool"));
  } else if (t->dtype == OCTATTN_DTYPE_BOOL) {
    return Fail(OCTATTN_ERROR_INVALID_OPTION, Name(name, "bool data is for mask tensors only"));
  } else if (dtype == OCTATTN_DTYPE_INT32) {
    if (t->dtype != OCTATTN_DTYPE_INT32)
      return Fail(OCTATTN_ERROR_INVALID_OPTION,
                  Name(name, "a block mask's or key list's dtype must be int32"));
  } else if (t->dtype == OCTATTN_DTYPE_INT32) {
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                Name(name, "int32 data is for block masks and key lists only"));
  } else if ((t->dtype >= OCTATTN_DTYPE_INT8 && t->dtype <= OCTATTN_DTYPE_Q4_0) ||
             t->dtype == OCTATTN_DTYPE_FP8_DS_MLA) {
    if (dtype != kCache)
      return Fail(OCTATTN_ERROR_UNSUPPORTED,
                  Name(name, "quantized dtypes are for KV caches (k and v) only"));
  } else if (t->dtype != OCTATTN_DTYPE_F32 && t->dtype != OCTATTN_DTYPE_BF16 &&
             t->dtype != OCTATTN_DTYPE_F16) {
    return Fail(OCTATTN_ERROR_INVALID_OPTION, Name(name, "unknown dtype"));
  } else if (t->dtype != OCTATTN_DTYPE_F32 && dtype != kFloating && dtype != kCache) {
    return Fail(OCTATTN_ERROR_UNSUPPORTED, Name(name, "this tensor takes f32 data only"));
  }
  const bool other = dtype == OCTATTN_DTYPE_BOOL || dtype == OCTATTN_DTYPE_INT32;
  const base::Dtype type = other ? base::kF32 : static_cast<base::Dtype>(t->dtype);
  const uint64_t elem = dtype == OCTATTN_DTYPE_BOOL ? 1
                        : dtype == OCTATTN_DTYPE_INT32
                            ? 4
                            : static_cast<uint64_t>(base::DtypeBytes(type));
  if (t->reserved != 0) return Fail(OCTATTN_ERROR_INVALID_OPTION, Name(name, "reserved is not 0"));
  const int dims = sequence ? 3 : 4;
  if (sequence && t->shape[3] != 1)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE, Name(name, "a [B, T, C] tensor needs shape[3] == 1"));
  for (int d = 0; d < dims; ++d) {
    if (t->shape[d] < 1)
      return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                  Name(name, ("shape[" + std::to_string(d) + "] is not positive").c_str()));
    if (t->shape[d] > kMaxSize)
      return Fail(OCTATTN_ERROR_OVERFLOW,
                  Name(name, ("shape[" + std::to_string(d) + "] exceeds 2^60").c_str()));
    if (t->stride[d] < 0)
      return Fail(OCTATTN_ERROR_INVALID_STRIDE,
                  Name(name, ("stride[" + std::to_string(d) + "] is negative").c_str()));
  }
  // Blocked dtypes: a row is shape[3] / 32 consecutive blocks; strides count blocks.
  int64_t units[4] = {t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
  if (base::Blocked(type)) {
    if (t->shape[3] % base::kQuantBlock != 0)
      return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                  Name(name, "a Q8_0 or Q4_0 row (shape[3]) must be a multiple of 32 values"));
    if (t->stride[3] != 1)
      return Fail(OCTATTN_ERROR_INVALID_STRIDE,
                  Name(name, "a Q8_0 or Q4_0 row's blocks must be consecutive (stride[3] 1)"));
    units[3] = t->shape[3] / base::kQuantBlock;
  }
  // FP8_DS_MLA: a row of 656 bytes holds 576 values, of which a tensor reads shape[3].
  if (type == base::kDsMla) {
    if (t->shape[3] > base::kDsMlaValues)
      return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                  Name(name, "an FP8_DS_MLA row (shape[3]) holds at most 576 values"));
    if (t->stride[3] != 1)
      return Fail(OCTATTN_ERROR_INVALID_STRIDE,
                  Name(name, "an FP8_DS_MLA tensor reads whole rows (stride[3] 1)"));
    units[3] = 1;
  }
  int64_t span = 0;
  for (int d = 0; d < dims; ++d) {
    int64_t part;
    if (__builtin_mul_overflow(units[d] - 1, t->stride[d], &part) ||
        __builtin_add_overflow(span, part, &span))
      return Fail(OCTATTN_ERROR_OVERFLOW, Name(name, "the strides' extent overflows int64_t"));
  }
  uint64_t bytes;
  uintptr_t hi;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t->data);
  if (__builtin_mul_overflow(static_cast<uint64_t>(span) + 1, elem, &bytes) ||
      bytes > SIZE_MAX / 2 || __builtin_add_overflow(lo, static_cast<uintptr_t>(bytes), &hi))
    return Fail(OCTATTN_ERROR_OVERFLOW, Name(name, "the extent in bytes overflows size_t"));
  const uint64_t align = elem > 4 ? 2 : elem;  // blocks: their f16 scale
  if (lo % align != 0)
    return Fail(OCTATTN_ERROR_MISALIGNED,
                Name(name, align == 4 ? "data is not aligned to 4 bytes"
                                      : "16-bit data is not aligned to 2 bytes"));
  if (role == Role::kOutput && !ElementsDisjoint(units, t->stride, dims))
    return Fail(OCTATTN_ERROR_INVALID_STRIDE, Name(name, "output elements overlap each other"));
  out->data = static_cast<float*>(t->data);
  out->type = type;
  for (int d = 0; d < 4; ++d) {
    out->shape[d] = t->shape[d];
    out->stride[d] = d < dims ? t->stride[d] : 0;
  }
  out->lo = lo;
  out->hi = hi;
  return Check();
}

Check CheckDisjoint(const TensorInfo& a, const char* a_name, const TensorInfo& b,
                    const char* b_name) {
  if (a.lo < b.hi && b.lo < a.hi)
    return Fail(OCTATTN_ERROR_ALIASING, std::string(a_name) + " overlaps " + b_name + " in memory");
  return Check();
}

Check CheckSize(const TensorInfo& t, const char* name, int dim, int64_t want, const char* what) {
  if (t.shape[dim] != want)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE, std::string(name) + ": shape[" + std::to_string(dim) +
                                                 "] is " + std::to_string(t.shape[dim]) +
                                                 ", expected " + std::to_string(want) + " (" +
                                                 what + ")");
  return Check();
}

Check CheckGroups(int64_t q_heads, int64_t kv_heads) {
  if (kv_heads < 1 || q_heads % kv_heads != 0)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE, "q_heads (" + std::to_string(q_heads) +
                                                 ") is not a multiple of kv_heads (" +
                                                 std::to_string(kv_heads) + ")");
  return Check();
}

Check ValidateStructSize(size_t given, size_t first, size_t known, const void* base,
                         const char* name) {
  if (given < first)
    return Fail(OCTATTN_ERROR_STRUCT_SIZE, std::string(name) + ": struct_size " +
                                               std::to_string(given) + " is smaller than " +
                                               std::to_string(first) + " (version 0.1)");
  const unsigned char* bytes = static_cast<const unsigned char*>(base);
  for (size_t i = known; i < given; ++i)
    if (bytes[i] != 0)
      return Fail(OCTATTN_ERROR_STRUCT_SIZE,
                  std::string(name) + ": unknown field at byte " + std::to_string(i) + " is not 0");
  return Check();
}

Check ValidateOptions(const octattn_attention_options* in, octattn_attention_options* out) {
  octattn_attention_options_init(out);
  if (!in) return Check();
  OCTATTN_CHECK(ValidateStructSize(in->struct_size, kOptionsSize_0_1,
                                   sizeof(octattn_attention_options), in, "options"));
  // Only fields wholly inside the caller's struct_size are read (the sizes of the
  // published versions); the others (an older caller's) keep their defaults.
  const size_t covered = in->struct_size >= kOptionsSize_0_11  ? kOptionsSize_0_11
                         : in->struct_size >= kOptionsSize_0_6 ? kOptionsSize_0_6
                         : in->struct_size >= kOptionsSize_0_3 ? kOptionsSize_0_3
                         : in->struct_size >= kOptionsSize_0_2 ? kOptionsSize_0_2
                                                               : kOptionsSize_0_1;
  std::memcpy(out, in, covered);
  out->struct_size = sizeof(octattn_attention_options);
  if (out->causal != 0 && out->causal != 1)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.causal must be 0 or 1");
  if (out->algorithm < OCTATTN_ALGORITHM_AUTO || out->algorithm > OCTATTN_ALGORITHM_FUSED)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.algorithm is unknown");
  if (out->window < 0 || out->window > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.window must be in [0, 2^62]");
  if (out->stride < 0 || out->stride > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.stride must be in [0, 2^62]");
  if (!out->causal && (out->window != 0 || out->stride != 0))
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.window and options.stride need causal attention");
  if (out->k_start < -kMaxPosition || out->k_start > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.k_start must be in [-2^62, 2^62]");
  if (out->q_start != OCTATTN_Q_START_DEFAULT)
    OCTATTN_CHECK(CheckQStart(out->q_start, out->k_start, "options.q_start"));
  if (!std::isfinite(out->scale))
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.scale is not finite");
  if (out->reserved != 0) return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.reserved is not 0");
  if (out->chunk < 0 || out->chunk > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.chunk must be in [0, 2^62]");
  if (!std::isfinite(out->softcap) || out->softcap < 0.0f)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.softcap must be finite and >= 0");
  if (out->reserved2 != 0) return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.reserved2 is not 0");
  if (out->sequences < 0)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.sequences is negative");
  if (out->sequences == 0 && (out->cu_seqlens_q || out->cu_seqlens_k))
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.cu_seqlens_q and cu_seqlens_k describe a ragged batch: they need "
                "options.sequences > 0");
  if (out->sequences > 0 && !out->cu_seqlens_q)
    return Fail(OCTATTN_ERROR_NULL_POINTER,
                "a ragged batch (options.sequences > 0) needs options.cu_seqlens_q");
  if (out->sequences > 0 && !out->cu_seqlens_k && !out->block_table)
    return Fail(OCTATTN_ERROR_NULL_POINTER,
                "a ragged batch (options.sequences > 0) needs options.cu_seqlens_k, or a "
                "paged cache (options.block_table)");
  if (out->block_table && out->cu_seqlens_k)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "a paged cache holds no packed keys: options.cu_seqlens_k must be NULL with "
                "options.block_table (kv_lens gives each sequence's keys)");
  if (out->block_table && out->block_table_cols < 1)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.block_table_cols must be >= 1, not " +
                                                  std::to_string(out->block_table_cols));
  if (!out->block_table && out->block_table_cols != 0)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.block_table_cols needs options.block_table");
  if (out->k_scale_rows < 0 || out->v_scale_rows < 0 || out->k_scale_rows > kMaxSize ||
      out->v_scale_rows > kMaxSize)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.k_scale_rows and v_scale_rows must be in [0, 2^60] (0: 1)");
  if (out->qk_precision != OCTATTN_QK_EXACT && out->qk_precision != OCTATTN_QK_INT8)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.qk_precision must be OCTATTN_QK_EXACT (0) or OCTATTN_QK_INT8 (1)");
  if (out->reserved3 != 0) return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.reserved3 is not 0");
  return Check();
}

namespace {

// `n` + 1 row offsets that run from 0 to `rows` and never decrease.
Check CheckOffsets(const int64_t* cu, int64_t n, int64_t rows, const char* name, const char* what) {
  if (cu[0] != 0)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                std::string(name) + "[0] is " + std::to_string(cu[0]) + ", must be 0");
  for (int64_t s = 0; s < n; ++s)
    if (cu[s + 1] < cu[s])
      return Fail(OCTATTN_ERROR_INVALID_OPTION,
                  std::string(name) + " decreases: [" + std::to_string(s + 1) + "] is " +
                      std::to_string(cu[s + 1]) + ", below [" + std::to_string(s) +
                      "] = " + std::to_string(cu[s]));
  if (cu[n] != rows)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, std::string(name) + "[" + std::to_string(n) +
                                                  "] is " + std::to_string(cu[n]) + ", must be " +
                                                  what + " (" + std::to_string(rows) + ")");
  return Check();
}

}  // namespace

Check CheckQStart(int64_t q_start, int64_t k_start, const char* option, int64_t index) {
  auto name = [&] {
    return std::string(option) + (index < 0 ? "" : "[" + std::to_string(index) + "]");
  };
  if (q_start < -kMaxPosition || q_start > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, name() + " must be in [-2^62, 2^62]");
  // Each is within +-2^62; their difference can reach 2^63, which int64_t does not hold.
  int64_t relative = 0;
  if (__builtin_sub_overflow(q_start, k_start, &relative) || relative < -kMaxPosition ||
      relative > kMaxPosition)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                name() + " - options.k_start must be in [-2^62, 2^62]");
  return Check();
}

bool HasSequences(const octattn_attention_options& opt) {
  return opt.sequences > 0 || opt.q_starts || opt.kv_starts || opt.kv_lens || opt.block_table;
}

Check ResolveSequences(const octattn_attention_options& opt, int64_t batch, int64_t q_len,
                       int64_t kv_len, int64_t num_blocks, int64_t block_size, Sequences* out) {
  *out = Sequences();
  if (!HasSequences(opt)) return Check();
  const bool ragged = opt.sequences > 0;
  const bool paged = opt.block_table != nullptr;
  if (ragged && batch != 1)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                "a ragged batch (options.sequences > 0) packs its sequences in batch entry 0: "
                "the tensors' batch size must be 1, not " +
                    std::to_string(batch));
  const int64_t n = ragged ? opt.sequences : batch;
  if (ragged) {
    OCTATTN_CHECK(CheckOffsets(opt.cu_seqlens_q, n, q_len, "options.cu_seqlens_q", "q_len"));
    if (!paged)
      OCTATTN_CHECK(CheckOffsets(opt.cu_seqlens_k, n, kv_len, "options.cu_seqlens_k", "kv_len"));
  }
  Sequences s;
  s.opt = opt;
  s.count = n;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.num_blocks = num_blocks;
  s.block_size = block_size;
  s.ragged = ragged;
  s.paged = paged;
  plan::Sequence one;
  for (int64_t i = 0; i < n; ++i) OCTATTN_CHECK(ResolveSequence(s, i, &one));
  s.checked = true;  // later resolutions skip the block ids' range checks
  *out = s;
  return Check();
}

Check ResolveSequence(const Sequences& all, int64_t s, plan::Sequence* out) {
  const octattn_attention_options& opt = all.opt;
  const bool ragged = all.ragged, paged = all.paged;
  // Messages are built only on failure: this runs per sequence on every call.
  auto at = [s] { return "[" + std::to_string(s) + "]"; };
  plan::Sequence q;
  q.batch = ragged ? 0 : s;
  q.entry = s;
  q.q_row = ragged ? opt.cu_seqlens_q[s] : 0;
  q.q_len = ragged ? opt.cu_seqlens_q[s + 1] - q.q_row : all.q_len;
  const int64_t rows0 = ragged && !paged ? opt.cu_seqlens_k[s] : 0;
  const int64_t rows = ragged && !paged ? opt.cu_seqlens_k[s + 1] - rows0 : all.kv_len;
  const int64_t start = opt.kv_starts ? opt.kv_starts[s] : 0;
  if (start < 0 || start > rows)
    return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.kv_starts" + at() + " is " +
                                                  std::to_string(start) + ", must be in [0, " +
                                                  std::to_string(rows) + "]");
  const int64_t len = opt.kv_lens ? opt.kv_lens[s] : rows - start;
  if (len < 0 || len > rows - start)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.kv_lens" + at() + " is " + std::to_string(len) + ", must be in [0, " +
                    std::to_string(rows - start) + "] (the sequence's key rows from kv_starts)");
  q.k_row = rows0 + start;
  q.k_col = q.k_row;
  q.kv_len = len;
  q.seg_row = rows0;
  q.seg_len = rows;
  if (paged) {
    const int64_t size = all.block_size;
    const int32_t* row = opt.block_table + s * opt.block_table_cols;
    for (int64_t b = start / size; !all.checked && len > 0 && b <= (start + len - 1) / size; ++b)
      if (row[b] < 0 || row[b] >= all.num_blocks)
        return Fail(OCTATTN_ERROR_INVALID_OPTION,
                    "options.block_table" + at() + "[" + std::to_string(b) + "] is " +
                        std::to_string(row[b]) + ", not a block of k (" +
                        std::to_string(all.num_blocks) + " blocks)");
    q.paging = kernels::Paging{row, size, start, all.k_block, all.v_block};
    q.paging.shift = base::Log2IfPow2(size);
  }
  octattn_attention_options seq_opt = opt;
  if (opt.q_starts) {
    if (opt.q_starts[s] != OCTATTN_Q_START_DEFAULT)
      OCTATTN_CHECK(CheckQStart(opt.q_starts[s], opt.k_start, "options.q_starts", s));
    seq_opt.q_start = opt.q_starts[s];
  }
  q.mask = ResolveMask(seq_opt, q.q_len, q.kv_len);
  *out = q;
  return Check();
}

namespace {

// A modifier tensor of logical shape `shape`: each size equal to it or 1 (broadcast).
Check ValidateModTensor(const octattn_tensor* t, const char* name, octattn_dtype dtype,
                        const int64_t shape[4], TensorInfo* out) {
  OCTATTN_CHECK(ValidateTensor(t, name, Role::kInput, false, out, dtype));
  static const char* const kDims[4] = {"batch", "q_heads", "q_len", "kv_len"};
  for (int d = 0; d < 4; ++d) {
    if (out->shape[d] == 1 && shape[d] != 1) {
      out->stride[d] = 0;  // broadcast
      continue;
    }
    if (out->shape[d] != shape[d])
      return Fail(OCTATTN_ERROR_INVALID_SHAPE, std::string(name) + ": shape[" + std::to_string(d) +
                                                   "] is " + std::to_string(out->shape[d]) +
                                                   ", expected " + std::to_string(shape[d]) + " (" +
                                                   kDims[d] + ") or 1");
  }
  return Check();
}

// A block mask's tensors (validated, broadcast) and every list they hold: counts within
// [0, n], entries strictly ascending key blocks of the call, no block on both lists.
Check ValidateBlocks(const octattn_attention_options& opt, const int64_t shape[4],
                     kernels::Mods* mods, TensorInfo* infos) {
  const bool partial = opt.block_counts || opt.block_indices;
  const bool full = opt.full_block_counts || opt.full_block_indices;
  if (!partial && !full && opt.block_q == 0 && opt.block_kv == 0) return Check();
  if (!opt.block_counts || !opt.block_indices)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "a block mask needs options.block_counts and options.block_indices");
  if (full && (!opt.full_block_counts || !opt.full_block_indices))
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.full_block_counts and options.full_block_indices come together");
  if (opt.block_q < 1 || opt.block_q > kMaxSize || opt.block_kv < 1 || opt.block_kv > kMaxSize)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.block_q and options.block_kv must be in [1, 2^60] with a block mask");
  const int64_t entries = opt.sequences > 0 ? opt.sequences : shape[0];
  const int64_t key_blocks = (shape[3] + opt.block_kv - 1) / opt.block_kv;
  const octattn_tensor* ts[4] = {opt.block_counts, opt.block_indices, opt.full_block_counts,
                                 opt.full_block_indices};
  static const char* const kNames[4] = {"options.block_counts", "options.block_indices",
                                        "options.full_block_counts", "options.full_block_indices"};
  static const char* const kDims[4] = {"entries", "q_heads", "q_blocks", "1"};
  for (int l = 0; l < (full ? 4 : 2); ++l) {
    TensorInfo& in = infos[l];
    OCTATTN_CHECK(ValidateTensor(ts[l], kNames[l], Role::kInput, false, &in, OCTATTN_DTYPE_INT32));
    const int64_t want[4] = {entries, shape[1], ts[0]->shape[2], 1};
    for (int d = 0; d < 4; ++d) {
      if (d == 3 && l % 2 == 1) continue;  // a list's capacity
      if (in.shape[d] == 1 && d < 2) {
        in.stride[d] = 0;  // broadcast
        continue;
      }
      if (in.shape[d] != want[d])
        return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                    std::string(kNames[l]) + ": shape[" + std::to_string(d) + "] is " +
                        std::to_string(in.shape[d]) + ", expected " + std::to_string(want[d]) +
                        " (" + kDims[d] + ")" + (d < 2 ? " or 1" : ""));
    }
  }
  if (!opt.cu_seqlens_q) OCTATTN_CHECK(CheckTreeRows(opt, shape[2]));
  // Every list, read once here so that no kernel meets a bad entry.
  auto at = [](int64_t e, int64_t h, int64_t b) {
    return "[" + std::to_string(e) + ", " + std::to_string(h) + ", " + std::to_string(b) + "]";
  };
  struct List {
    const int32_t* idx;
    int64_t n, col;
  };
  // List l (0: partial, 2: full) of query block b of head h of entry e, checked.
  auto list = [&](int l, int64_t e, int64_t h, int64_t b, List* out) -> Check {
    const TensorInfo &ci = infos[l], &ii = infos[l + 1];
    const int32_t* counts = static_cast<const int32_t*>(ts[l]->data);
    const int32_t* index = static_cast<const int32_t*>(ts[l + 1]->data);
    const int64_t n = ii.shape[3];
    const int32_t c = counts[e * ci.stride[0] + h * ci.stride[1] + b * ci.stride[2]];
    if (c < 0 || c > n)
      return Fail(OCTATTN_ERROR_INVALID_OPTION, std::string(kNames[l]) + at(e, h, b) + " is " +
                                                    std::to_string(c) + ", must be in [0, " +
                                                    std::to_string(n) + "] (" + kNames[l + 1] +
                                                    "'s shape[3])");
    *out = List{index + e * ii.stride[0] + h * ii.stride[1] + b * ii.stride[2], c, ii.stride[3]};
    for (int64_t x = 0; x < c; ++x) {
      const int64_t kb = out->idx[x * out->col];
      if (kb < 0 || kb >= key_blocks)
        return Fail(OCTATTN_ERROR_INVALID_OPTION, std::string(kNames[l + 1]) + at(e, h, b) + "[" +
                                                      std::to_string(x) + "] is " +
                                                      std::to_string(kb) + ", outside the " +
                                                      std::to_string(key_blocks) + " key blocks");
      if (x > 0 && kb <= out->idx[(x - 1) * out->col])
        return Fail(OCTATTN_ERROR_INVALID_OPTION, std::string(kNames[l + 1]) + at(e, h, b) +
                                                      ": a list must be strictly ascending");
    }
    return Check();
  };
  // The distinct lists: a dimension of stride 0 in every tensor holds one (a broadcast),
  // and no call reaches a query block past its rows' (its q_len rows, or a ragged
  // call's packed rows, bound every sequence's).
  auto distinct = [&](int d, int64_t limit) {
    int64_t n = 1;
    for (int l = 0; l < (full ? 4 : 2); ++l)
      if (infos[l].stride[d] != 0) n = std::max(n, infos[l].shape[d]);
    return std::min(n, limit);
  };
  const int64_t es = distinct(0, kMaxSize), hs = distinct(1, kMaxSize),
                qbs = distinct(2, (shape[2] + opt.block_q - 1) / opt.block_q);
  for (int64_t e = 0; e < es; ++e)
    for (int64_t h = 0; h < hs; ++h)
      for (int64_t b = 0; b < qbs; ++b) {
        List p{}, f{};
        OCTATTN_CHECK(list(0, e, h, b, &p));
        if (!full) continue;
        OCTATTN_CHECK(list(2, e, h, b, &f));
        for (int64_t x = 0, y = 0; x < p.n && y < f.n;) {  // both ascending: a merge
          const int32_t a = p.idx[x * p.col], c = f.idx[y * f.col];
          if (a == c)
            return Fail(OCTATTN_ERROR_INVALID_OPTION, "key block " + std::to_string(a) +
                                                          " of query block " + at(e, h, b) +
                                                          " is on both lists");
          if (a < c)
            ++x;
          else
            ++y;
        }
      }
  mods->block_q = opt.block_q;
  mods->block_kv = opt.block_kv;
  for (int l = 0; l < (full ? 4 : 2); l += 2) {
    kernels::Mods::Lists& dst = l == 0 ? mods->partial : mods->full;
    const TensorInfo &ci = infos[l], &ii = infos[l + 1];
    dst.count = static_cast<const int32_t*>(ts[l]->data);
    dst.index = static_cast<const int32_t*>(ts[l + 1]->data);
    dst.count_entry = ci.stride[0];
    dst.count_head = ci.stride[1];
    dst.count_row = ci.stride[2];
    dst.index_entry = ii.stride[0];
    dst.index_head = ii.stride[1];
    dst.index_row = ii.stride[2];
    dst.index_col = ii.stride[3];
  }
  return Check();
}

}  // namespace

Check ValidateMods(const octattn_attention_options& opt, const int64_t shape[4],
                   kernels::Mods* mods, TensorInfo* bias, TensorInfo* mask, TensorInfo* blocks) {
  *mods = kernels::Mods{};
  *bias = TensorInfo{};
  *mask = TensorInfo{};
  TensorInfo own[4];
  if (!blocks) blocks = own;
  for (int l = 0; l < 4; ++l) blocks[l] = TensorInfo{};
  mods->softcap = opt.softcap;
  const int64_t heads = shape[1];
  if (opt.alibi_slopes) {
    for (int64_t h = 0; h < heads; ++h)
      if (!std::isfinite(opt.alibi_slopes[h]))
        return Fail(OCTATTN_ERROR_INVALID_OPTION,
                    "options.alibi_slopes[" + std::to_string(h) + "] is not finite");
    mods->slopes = opt.alibi_slopes;
  }
  if (opt.sinks) {
    for (int64_t h = 0; h < heads; ++h)
      if (std::isnan(opt.sinks[h]) || opt.sinks[h] == HUGE_VALF)
        return Fail(OCTATTN_ERROR_INVALID_OPTION,
                    "options.sinks[" + std::to_string(h) + "] is NaN or +inf");
    mods->sinks = opt.sinks;
  }
  if (opt.bias) {
    OCTATTN_CHECK(ValidateModTensor(opt.bias, "options.bias", OCTATTN_DTYPE_F32, shape, bias));
    mods->bias = bias->data;
    mods->bias_head = bias->stride[1];
    mods->bias_row = bias->stride[2];
    mods->bias_col = bias->stride[3];
  }
  if (opt.mask) {
    OCTATTN_CHECK(ValidateModTensor(opt.mask, "options.mask", OCTATTN_DTYPE_BOOL, shape, mask));
    mods->keep = reinterpret_cast<const uint8_t*>(mask->data);
    mods->keep_head = mask->stride[1];
    mods->keep_row = mask->stride[2];
    mods->keep_col = mask->stride[3];
  }
  if (!opt.tree && (opt.tree_row_bytes != 0 || opt.tree_stride != 0))
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.tree_row_bytes and options.tree_stride need options.tree");
  if (opt.tree) {
    if (opt.mask)
      return Fail(OCTATTN_ERROR_INVALID_OPTION,
                  "options.tree and options.mask: a call takes one of them (fold the tree's "
                  "bits into the mask tensor)");
    if (opt.tree_row_bytes < 1 || opt.tree_row_bytes > kMaxSize)
      return Fail(OCTATTN_ERROR_INVALID_OPTION, "options.tree_row_bytes must be in [1, 2^60]");
    if (opt.tree_stride < 0)
      return Fail(OCTATTN_ERROR_INVALID_STRIDE, "options.tree_stride is negative");
    // Without cu_seqlens_q every sequence has the call's q_len rows (ragged sequences are
    // checked one by one: CheckTreeRows).
    if (!opt.cu_seqlens_q) OCTATTN_CHECK(CheckTreeRows(opt, shape[2]));
    // The bits as a bool tensor [batch, 1, q_len, row_bytes]: its extent checked and kept
    // for the aliasing checks.
    octattn_tensor bits{};
    bits.data = const_cast<uint8_t*>(opt.tree);
    bits.dtype = OCTATTN_DTYPE_BOOL;
    const int64_t dims[4] = {shape[0], 1, shape[2], opt.tree_row_bytes};
    const int64_t strides[4] = {opt.tree_stride, 0, opt.tree_row_bytes, 1};
    for (int d = 0; d < 4; ++d) {
      bits.shape[d] = dims[d];
      bits.stride[d] = strides[d];
    }
    OCTATTN_CHECK(
        ValidateTensor(&bits, "options.tree", Role::kInput, false, mask, OCTATTN_DTYPE_BOOL));
    mods->keep = opt.tree;
    mods->keep_row = opt.tree_row_bytes;
    mods->keep_col = 1;
    mods->keep_bits = true;
    mods->keep_from = shape[3] - shape[2];  // a dense call's; each sequence's its own
  }
  return ValidateBlocks(opt, shape, mods, blocks);
}

Check CheckTreeRows(const octattn_attention_options& opt, int64_t rows) {
  if (opt.tree && (rows + 7) / 8 > opt.tree_row_bytes)
    return Fail(OCTATTN_ERROR_INVALID_OPTION,
                "options.tree_row_bytes " + std::to_string(opt.tree_row_bytes) +
                    " holds fewer bits than a sequence's " + std::to_string(rows) +
                    " query rows (its tree's columns)");
  if (opt.block_counts && opt.block_q > 0 &&
      (rows + opt.block_q - 1) / opt.block_q > opt.block_counts->shape[2])
    return Fail(OCTATTN_ERROR_INVALID_SHAPE, "options.block_counts: shape[2] is " +
                                                 std::to_string(opt.block_counts->shape[2]) +
                                                 ", fewer query blocks than a sequence's " +
                                                 std::to_string(rows) + " rows fill");
  return Check();
}

static_assert(sizeof(octattn_attention_options) == kOptionsSize_0_11 &&
                  offsetof(octattn_attention_options, key_counts2) + 8 == kOptionsSize_0_11 &&
                  offsetof(octattn_attention_options, block_table_cols) + 8 == kOptionsSize_0_6 &&
                  offsetof(octattn_attention_options, q_starts) == kOptionsSize_0_3 &&
                  offsetof(octattn_attention_options, k_start) == kOptionsSize_0_1 &&
                  offsetof(octattn_attention_options, chunk) == kOptionsSize_0_2,
              "a field appended to octattn_attention_options needs its version's size here");
static_assert(sizeof(octattn_attention_options) >= kOptionsSize_0_1 &&
                  offsetof(octattn_attention_options, reserved) + sizeof(int32_t) ==
                      kOptionsSize_0_1,
              "octattn_attention_options grows only by appending");
static_assert(sizeof(octattn_run_info) >= kRunInfoSize_0_1 &&
                  offsetof(octattn_run_info, threads) + sizeof(int32_t) == kRunInfoSize_0_1,
              "octattn_run_info grows only by appending");
static_assert(sizeof(octattn_run_info) == kRunInfoSize_0_11 &&
                  offsetof(octattn_run_info, shared_kv_rows) + 8 == kRunInfoSize_0_11,
              "a field appended to octattn_run_info needs its version's size here");

Check ValidateScales(const octattn_tensor* scale, int64_t rows, const TensorInfo& cache,
                     const char* name, bool paged, run::ScaleInfo* out) {
  *out = run::ScaleInfo{};
  if (rows == 0) rows = 1;  // the default
  const std::string opt = std::string("options.") + name + "_scale";
  if (!base::Scaled(cache.type)) {
    if (scale)
      return Fail(OCTATTN_ERROR_INVALID_OPTION,
                  opt + " is given, but " + name + "'s dtype takes no scale tensor");
    if (rows != 1) return Fail(OCTATTN_ERROR_INVALID_OPTION, opt + "_rows is set without " + opt);
    return Check();
  }
  if (!scale) {
    if (cache.type == base::kI8)
      return Fail(OCTATTN_ERROR_NULL_POINTER, opt + " is NULL: an INT8 " + name + " needs it");
    if (rows != 1) return Fail(OCTATTN_ERROR_INVALID_OPTION, opt + "_rows is set without " + opt);
    return Check();
  }
  OCTATTN_CHECK(ValidateTensor(scale, opt.c_str(), Role::kInput, false, &out->t, kFloating));
  TensorInfo& t = out->t;
  const int64_t dim = cache.shape[3];
  if (dim % t.shape[3] != 0)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                opt + ": shape[3] (" + std::to_string(t.shape[3]) + ") does not divide " + name +
                    "'s " + (name[0] == 'k' ? "head_dim" : "value_dim") + " (" +
                    std::to_string(dim) + "): channels per scale must be whole");
  if (paged && cache.shape[2] % rows != 0)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE, opt + "_rows (" + std::to_string(rows) +
                                                 ") does not divide the block size (" +
                                                 std::to_string(cache.shape[2]) + ")");
  const int64_t want[3] = {cache.shape[0], cache.shape[1],
                           paged ? cache.shape[2] / rows : (cache.shape[2] + rows - 1) / rows};
  static const char* const kDims[3] = {"batch (paged: num_blocks)", "kv_heads",
                                       "scale rows: rows / scale rows, rounded up"};
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] == 1) {
      t.stride[d] = 0;  // broadcast
      continue;
    }
    if (d < 3 && t.shape[d] != want[d])
      return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                  opt + ": shape[" + std::to_string(d) + "] is " + std::to_string(t.shape[d]) +
                      ", expected " + std::to_string(want[d]) + " (" + kDims[d] + ") or 1");
  }
  out->rows = rows;
  out->group = dim / t.shape[3];
  return Check();
}

base::Mask ResolveMask(const octattn_attention_options& opt, int64_t q_len, int64_t kv_len) {
  base::Mask m{opt.causal, opt.window, opt.stride, 0, 0};
  // Key coordinates: key row j at j, the queries q_start - k_start on (full attention
  // too: ALiBi and chunks use the positions).
  m.q_start = opt.q_start == OCTATTN_Q_START_DEFAULT ? kv_len - q_len : opt.q_start - opt.k_start;
  if (opt.causal && opt.stride > 0)
    m.phase = ((-opt.k_start) % opt.stride + opt.stride) % opt.stride;
  if (opt.chunk > 0) {
    m.chunk = opt.chunk;
    m.chunk_phase = ((-opt.k_start) % opt.chunk + opt.chunk) % opt.chunk;
  }
  return m;
}

}  // namespace api
}  // namespace octattn
