// The boundary: arbitrary option structs, tensor views (sizes, strides, overflow,
// aliasing, alignment, dtypes), workspaces and entry points. Every call either fails
// with a status and a message and leaves all memory as it was, or succeeds and writes
// nothing outside its outputs' extents. All tensors live in one canary-filled arena.
#include <algorithm>

#include "fuzz_support.h"

using namespace fuzz;

namespace {

constexpr size_t kArenaFloats = 8192;
constexpr uint32_t kCanary = 0x7fc0dead;  // a NaN no computation produces

const int64_t kSizes[] = {1,
                          2,
                          3,
                          4,
                          5,
                          7,
                          8,
                          16,
                          17,
                          0,
                          -1,
                          -7,
                          int64_t{1} << 60,
                          (int64_t{1} << 60) + 1,
                          INT64_MAX,
                          INT64_MIN,
                          1000000,
                          33};
const int64_t kStrides[] = {0,
                            1,
                            2,
                            3,
                            4,
                            8,
                            16,
                            17,
                            64,
                            256,
                            1000,
                            -1,
                            -64,
                            INT64_MAX / 2,
                            INT64_MAX,
                            INT64_MIN,
                            int64_t{1} << 40,
                            5};

struct View {
  octattn_tensor t{};
  bool null = false;
  bool valid_looking = true;  // sizes > 0, strides >= 0, extent computable
  uint64_t lo = 0, hi = 0;    // byte range, if valid-looking
};

View ReadView(Input& in, float* arena) {
  View v;
  const uint8_t mode = in.Byte();
  v.null = mode % 23 == 0;
  const size_t offset = in.Range(0, kArenaFloats - 1);
  char* base = reinterpret_cast<char*>(arena + offset);
  v.t.data = mode % 29 == 1 ? nullptr : base + (mode % 31 == 2 ? 1 + mode % 3 : 0);
  v.t.dtype = mode % 37 == 3 ? static_cast<int32_t>(in.Range(-1, 10)) : OCTATTN_DTYPE_F32;
  v.t.reserved = mode % 41 == 4 ? 1 : 0;
  for (int d = 0; d < 4; ++d) {
    const uint8_t b = in.Byte();
    v.t.shape[d] = b < 200 ? 1 + b % 9 : kSizes[b % (sizeof(kSizes) / sizeof(kSizes[0]))];
    const uint8_t s = in.Byte();
    v.t.stride[d] = s < 200 ? s % 70 : kStrides[s % (sizeof(kStrides) / sizeof(kStrides[0]))];
  }
  // The extent as the header defines it: units of the dtype (blocks of 32 values for Q8_0
  // and Q4_0, whose strides count blocks), at most 4 bytes for the others.
  const bool blocked = v.t.dtype == OCTATTN_DTYPE_Q8_0 || v.t.dtype == OCTATTN_DTYPE_Q4_0;
  const uint64_t unit = v.t.dtype == OCTATTN_DTYPE_Q8_0   ? 34
                        : v.t.dtype == OCTATTN_DTYPE_Q4_0 ? 18
                                                          : 4;
  int64_t span = 0;
  for (int d = 0; d < 4; ++d) {
    int64_t part;
    const int64_t n =
        blocked && d == 3 && v.t.shape[3] % 32 == 0 ? v.t.shape[3] / 32 : v.t.shape[d];
    if (v.t.shape[d] < 1 || v.t.stride[d] < 0 ||
        __builtin_mul_overflow(n - 1, v.t.stride[d], &part) ||
        __builtin_add_overflow(span, part, &span))
      v.valid_looking = false;
  }
  if (v.valid_looking && v.t.data) {
    // (An extent past 2^64 reaches past the arena, as any past its end.)
    v.lo = reinterpret_cast<uint64_t>(v.t.data);
    uint64_t bytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(span) + 1, unit, &bytes) ||
        __builtin_add_overflow(v.lo, bytes, &v.hi))
      v.hi = UINT64_MAX;
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  static std::vector<float> arena_store(kArenaFloats + 64);
  float* arena = arena_store.data();
  const uint64_t arena_lo = reinterpret_cast<uint64_t>(arena);
  const uint64_t arena_hi = arena_lo + kArenaFloats * 4;
  for (size_t i = 0; i < arena_store.size(); ++i) std::memcpy(&arena[i], &kCanary, 4);

  const int call = static_cast<int>(in.Range(0, 10));
  View views[4];
  for (View& v : views) v = ReadView(in, arena);
  // A view that looks valid but reaches past the arena would be a caller's bug, not a
  // library's: such calls are not made.
  double work = 1;
  for (const View& v : views) {
    if (v.null || !v.t.data || !v.valid_looking) continue;
    if (v.lo < arena_lo || v.hi > arena_hi) return 0;
    double n = 1;
    for (int d = 0; d < 4; ++d) n *= static_cast<double>(v.t.shape[d]);
    work = std::max(work, n);
  }
  // Broadcast (stride-0) views of huge sizes are valid. Such a call must either fail fast
  // (its scratch does not fit: OVERFLOW, or OUT_OF_MEMORY under the limit below) or be
  // one whose run would take too long for a fuzz input: the latter are only sized.
  const bool huge = work > 1e5;

  // Options in a larger buffer: struct_size and the tail bytes are fuzzed.
  unsigned char opt_buf[384] = {0};
  octattn_attention_options* opt = reinterpret_cast<octattn_attention_options*>(opt_buf);
  octattn_attention_options_init(opt);
  const uint8_t om = in.Byte();
  if (om & 1) opt->struct_size = static_cast<size_t>(in.Range(0, 384));
  if (om & 2)
    opt_buf[sizeof(octattn_attention_options) +
            in.Range(0, 383 - sizeof(octattn_attention_options))] = in.Byte();
  if (om & 4) opt->causal = static_cast<int32_t>(in.Range(-1, 2));
  if (om & 8) opt->algorithm = static_cast<int32_t>(in.Range(-1, 4));
  if (om & 16) opt->window = in.Bool() ? in.Range(-2, 20) : static_cast<int64_t>(in.U64());
  if (om & 32) opt->stride = in.Bool() ? in.Range(-2, 9) : static_cast<int64_t>(in.U64());
  if (om & 64) opt->q_start = in.Bool() ? in.Range(-20, 20) : static_cast<int64_t>(in.U64());
  if (om & 128) opt->scale = in.AnyBits();
  const uint8_t om2 = in.Byte();  // the 0.3 fields (arrays and tensors: other targets)
  if (om2 & 1) opt->softcap = in.AnyBits();
  if (om2 & 2) opt->chunk = in.Bool() ? in.Range(-2, 20) : static_cast<int64_t>(in.U64());
  if (om2 & 4) opt->reserved2 = in.Byte();
  // The scales of quantized caches: views of the call's (their extents checked as theirs).
  if (om2 & 8) opt->k_scale = &views[1].t;
  if (om2 & 16) opt->v_scale = &views[2].t;
  if (om2 & 32) opt->k_scale_rows = in.Range(-1, 40);
  if (om2 & 64) opt->v_scale_rows = in.Range(-1, 40);
  if (om2 & 128) {  // q . k in int8, or an unknown precision, a nonzero reserved3
    opt->qk_precision = static_cast<int32_t>(in.Range(-1, 2));
    if (in.Bool()) opt->reserved3 = in.Byte();
    if (in.Bool()) {  // a tree: its bits in the arena where the rows of q (or scores) fit
      opt->tree_row_bytes = in.Range(-1, 9);
      opt->tree_stride = in.Bool() ? in.Range(-1, 300) : 0;
      double rows = 1, entries = 1;
      for (int i : {0, 3})
        if (views[i].valid_looking) {
          rows = std::max(rows, static_cast<double>(views[i].t.shape[2]));
          entries = std::max(entries, static_cast<double>(views[i].t.shape[0]));
        }
      const double extent = (entries - 1) * std::max<int64_t>(opt->tree_stride, 0) +
                            rows * std::max<int64_t>(opt->tree_row_bytes, 1);
      const double room = kArenaFloats * 4.0 - extent;
      if (in.Bool() && room >= 0)
        opt->tree =
            reinterpret_cast<const uint8_t*>(arena) + in.Range(0, static_cast<int64_t>(room));
    }
  }
  // A block mask: the four tensors views of the call's as int32 (any bits as counts and
  // indices, any shapes), fuzzed block sizes.
  octattn_tensor lists[4];
  const uint8_t om3 = in.Byte();
  if (om3 & 1) {
    for (int l = 0; l < 4; ++l) {
      lists[l] = views[in.Range(0, 3)].t;
      if (in.Range(0, 7) != 0) lists[l].dtype = OCTATTN_DTYPE_INT32;
    }
    opt->block_counts = (om3 & 2) ? nullptr : &lists[0];
    opt->block_indices = (om3 & 4) ? nullptr : &lists[1];
    if (om3 & 8) {
      opt->full_block_counts = &lists[2];
      opt->full_block_indices = (om3 & 16) ? nullptr : &lists[3];
    }
    opt->block_q = in.Bool() ? in.Range(-1, 9) : static_cast<int64_t>(in.U64());
    opt->block_kv = in.Range(-1, 9);
  }
  // Key scores: an output, one of the views (view 3 is o: aliasing) or none.
  int key_view = -1;
  if (om3 & 32) {
    key_view = static_cast<int>(in.Range(1, 3));
    opt->key_scores = &views[key_view].t;
  }
  const bool null_opt = in.Range(0, 15) == 0;

  octattn_context* ctx = nullptr;
  FUZZ_CHECK(octattn_context_create(&ctx) == OCTATTN_OK);
  octattn_context_set_threads(ctx, static_cast<int32_t>(in.Range(1, 2)));
  constexpr uint64_t kLimit = uint64_t{64} << 20;
  FUZZ_CHECK(octattn_context_set_memory_limit(ctx, kLimit) == OCTATTN_OK);
  // Workspace: none, or a piece of the arena of a fuzzed size.
  void* ws = nullptr;
  size_t ws_size = 0;
  if (in.Bool()) {
    ws_size = static_cast<size_t>(in.Range(0, 16384));
    const size_t ws_offset = static_cast<size_t>(in.Range(0, kArenaFloats * 4 - 1));
    if (ws_offset + ws_size <= kArenaFloats * 4) ws = reinterpret_cast<char*>(arena) + ws_offset;
  }

  auto T = [&](int i) -> octattn_tensor* { return views[i].null ? nullptr : &views[i].t; };
  octattn_status st = OCTATTN_OK;
  int outputs[4] = {0, 0, 0, 0};  // which views the call may write
  const octattn_attention_options* o = null_opt ? nullptr : opt;
  if (huge) {
    // Sized first: a call that fits the limit would run for as long as asked, so only
    // the ones that cannot fit are made, and they must fail with nothing written.
    size_t bytes = 0;
    const octattn_status sized =
        octattn_attention_workspace_size(ctx, o, T(0), T(1), T(2), T(3), nullptr, nullptr, &bytes);
    FUZZ_CHECK(octattn_status_string(sized) != nullptr && sized != OCTATTN_ERROR_INTERNAL);
    const bool fails = sized != OCTATTN_OK || bytes > kLimit;
    if (call != 1 || !fails) {
      octattn_context_destroy(ctx);
      return 0;
    }
  }
  switch (call) {
    case 0: {
      size_t bytes = 0;
      st = octattn_attention_workspace_size(ctx, o, T(0), T(1), T(2), T(3), nullptr, nullptr,
                                            &bytes);
      break;
    }
    case 1:
      st = octattn_attention(ctx, o, T(0), T(1), T(2), T(3), nullptr, nullptr, ws, ws_size);
      outputs[3] = 1;
      if (key_view >= 0 && o) outputs[key_view] = 1;
      break;
    case 2:
      st = octattn_scores(ctx, T(0), T(1), T(3));
      outputs[3] = 1;
      break;
    case 3:
      st = octattn_scale(ctx, T(3), in.AnyBits());
      outputs[3] = 1;
      break;
    case 4:
      st = octattn_mask(ctx, o, T(3));
      outputs[3] = 1;
      break;
    case 5:
      st = octattn_softmax(ctx, T(3), in.Bool() ? T(2) : nullptr);
      outputs[3] = outputs[2] = 1;
      break;
    case 6:
      st = octattn_weighted_sum(ctx, T(0), T(1), T(3));
      outputs[3] = 1;
      break;
    case 7:
      st = octattn_split_heads(ctx, T(0), in.Range(-1, 9), T(3));
      outputs[3] = 1;
      break;
    case 8:
      st = octattn_merge_heads(ctx, T(0), T(3));
      outputs[3] = 1;
      break;
    case 9:
      st = octattn_kv_store(ctx, T(0), T(3), in.Bool() ? T(1) : nullptr, in.Range(-1, 20), nullptr);
      outputs[1] = outputs[3] = 1;
      break;
    default:
      st = octattn_split_qkv(ctx, T(0), in.Range(-1, 5), in.Range(-1, 3), T(1), T(2), T(3));
      outputs[1] = outputs[2] = outputs[3] = 1;
      break;
  }
  FUZZ_CHECK(octattn_status_string(st) != nullptr);
  if (huge) FUZZ_CHECK(st != OCTATTN_OK);
  if (st != OCTATTN_OK) {
    FUZZ_CHECK(st > OCTATTN_OK && st <= OCTATTN_ERROR_INTERNAL && st != OCTATTN_ERROR_INTERNAL);
    FUZZ_CHECK(octattn_context_last_error(ctx)[0] != '\0');
    for (size_t i = 0; i < arena_store.size(); ++i)
      FUZZ_CHECK(std::memcmp(&arena[i], &kCanary, 4) == 0);
  } else {
    // Nothing outside the outputs' extents (and the workspace) changed.
    for (size_t i = 0; i < arena_store.size(); ++i) {
      const uint64_t addr = reinterpret_cast<uint64_t>(&arena[i]);
      bool inside = ws && addr >= reinterpret_cast<uint64_t>(ws) &&
                    addr < reinterpret_cast<uint64_t>(ws) + ws_size;
      for (int v = 0; v < 4; ++v)
        inside |= outputs[v] && !views[v].null && addr >= views[v].lo && addr < views[v].hi;
      if (!inside) FUZZ_CHECK(std::memcmp(&arena[i], &kCanary, 4) == 0);
    }
  }
  octattn_context_destroy(ctx);
  return 0;
}
