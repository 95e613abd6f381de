// The C entry points: validate completely, then plan tasks and run them on the pool.
// Nothing here computes; nothing below here knows about statuses.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/kernels/kernels.h"
#include "lib/kernels/layout/layout.h"
#include "lib/plan/plan.h"
#include "lib/reference/reference.h"
#include "octattn.h"

using octattn::api::Check;
using octattn::api::CheckDisjoint;
using octattn::api::CheckSize;
using octattn::api::Fail;
using octattn::api::Guard;
using octattn::api::Role;
using octattn::api::TensorInfo;
using octattn::api::ValidateTensor;
namespace kernels = octattn::kernels;
namespace plan = octattn::plan;

namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

Check NeedContext(const octattn_context* ctx) {
  if (!ctx) return Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
  return Check();
}

// An attention call that passed validation.
struct AttentionCall {
  TensorInfo q, k, v, o, lse, weights;
  bool has_lse = false, has_weights = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0,
          value_dim = 0;
  plan::Mask mask{};
  float scale = 0;
  octattn_algorithm algorithm = OCTATTN_ALGORITHM_AUTO;
  const kernels::Table* table = nullptr;  // null for the reference
};

Check ValidateAttention(octattn_context* ctx, const octattn_attention_options* options,
                        const octattn_tensor* q, const octattn_tensor* k, const octattn_tensor* v,
                        const octattn_tensor* o, const octattn_tensor* lse,
                        const octattn_tensor* weights, AttentionCall* c) {
  OCTATTN_CHECK(NeedContext(ctx));
  octattn_attention_options opt;
  OCTATTN_CHECK(octattn::api::ValidateOptions(options, &opt));
  OCTATTN_CHECK(ValidateTensor(q, "q", Role::kInput, false, &c->q));
  OCTATTN_CHECK(ValidateTensor(k, "k", Role::kInput, false, &c->k));
  OCTATTN_CHECK(ValidateTensor(v, "v", Role::kInput, false, &c->v));
  OCTATTN_CHECK(ValidateTensor(o, "o", Role::kOutput, false, &c->o));
  c->has_lse = lse != nullptr;
  c->has_weights = weights != nullptr;
  if (lse) OCTATTN_CHECK(ValidateTensor(lse, "lse", Role::kOutput, false, &c->lse));
  if (weights) OCTATTN_CHECK(ValidateTensor(weights, "weights", Role::kOutput, false, &c->weights));

  c->batch = c->q.shape[0];
  c->q_heads = c->q.shape[1];
  c->q_len = c->q.shape[2];
  c->head_dim = c->q.shape[3];
  c->kv_heads = c->k.shape[1];
  c->kv_len = c->k.shape[2];
  c->value_dim = c->v.shape[3];
  OCTATTN_CHECK(CheckSize(c->k, "k", 0, c->batch, "batch of q"));
  OCTATTN_CHECK(CheckSize(c->k, "k", 3, c->head_dim, "head_dim of q"));
  OCTATTN_CHECK(CheckSize(c->v, "v", 0, c->batch, "batch of q"));
  OCTATTN_CHECK(CheckSize(c->v, "v", 1, c->kv_heads, "kv_heads of k"));
  OCTATTN_CHECK(CheckSize(c->v, "v", 2, c->kv_len, "kv_len of k"));
  OCTATTN_CHECK(CheckSize(c->o, "o", 0, c->batch, "batch of q"));
  OCTATTN_CHECK(CheckSize(c->o, "o", 1, c->q_heads, "q_heads of q"));
  OCTATTN_CHECK(CheckSize(c->o, "o", 2, c->q_len, "q_len of q"));
  OCTATTN_CHECK(CheckSize(c->o, "o", 3, c->value_dim, "value_dim of v"));
  if (c->q_heads % c->kv_heads != 0)
    return Fail(OCTATTN_ERROR_INVALID_SHAPE,
                "q_heads (" + std::to_string(c->q_heads) + ") is not a multiple of kv_heads (" +
                    std::to_string(c->kv_heads) + ")");
  if (c->has_lse) {
    OCTATTN_CHECK(CheckSize(c->lse, "lse", 0, c->batch, "batch of q"));
    OCTATTN_CHECK(CheckSize(c->lse, "lse", 1, c->q_heads, "q_heads of q"));
    OCTATTN_CHECK(CheckSize(c->lse, "lse", 2, c->q_len, "q_len of q"));
    OCTATTN_CHECK(CheckSize(c->lse, "lse", 3, 1, "one value per row"));
  }
  if (c->has_weights) {
    OCTATTN_CHECK(CheckSize(c->weights, "weights", 0, c->batch, "batch of q"));
    OCTATTN_CHECK(CheckSize(c->weights, "weights", 1, c->q_heads, "q_heads of q"));
    OCTATTN_CHECK(CheckSize(c->weights, "weights", 2, c->q_len, "q_len of q"));
    OCTATTN_CHECK(CheckSize(c->weights, "weights", 3, c->kv_len, "kv_len of k"));
  }
  const struct {
    const TensorInfo* t;
    const char* name;
    bool present;
  } outs[] = {{&c->o, "o", true}, {&c->lse, "lse", c->has_lse},
              {&c->weights, "weights", c->has_weights}},
    ins[] = {{&c->q, "q", true}, {&c->k, "k", true}, {&c->v, "v", true}};
  for (const auto& out : outs) {
    if (!out.present) continue;
    for (const auto& in : ins) OCTATTN_CHECK(CheckDisjoint(*out.t, out.name, *in.t, in.name));
    for (const auto& other : outs)
      if (other.present && other.t < out.t)
        OCTATTN_CHECK(CheckDisjoint(*out.t, out.name, *other.t, other.name));
  }

  c->algorithm = opt.algorithm;
  if (c->algorithm == OCTATTN_ALGORITHM_AUTO)
    c->algorithm = c->has_weights ? OCTATTN_ALGORITHM_NAIVE : OCTATTN_ALGORITHM_FUSED;
  if (c->algorithm == OCTATTN_ALGORITHM_FUSED && c->has_weights)
    return Fail(OCTATTN_ERROR_UNSUPPORTED,
                "the fused algorithm never holds the weights: use naive to get them");
  if (c->algorithm != OCTATTN_ALGORITHM_REFERENCE) {
    c->table = octattn::api::SelectTable(*ctx);
    if (!c->table)
      return Fail(OCTATTN_ERROR_UNSUPPORTED, "the context's SIMD target is not available");
  }
  c->mask.causal = opt.causal;
  c->mask.window = opt.window;
  c->mask.stride = opt.stride;
  c->mask.q_start = !opt.causal ? 0
                    : opt.q_start == OCTATTN_Q_START_DEFAULT ? c->kv_len - c->q_len
                                                             : opt.q_start;
  c->scale = opt.scale != 0.0f ? opt.scale
                               : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c->head_dim)));
  return Check();
}

kernels::HeadTask MakeTask(const AttentionCall& c, int64_t index) {
  const int64_t b = index / c.q_heads, h = index % c.q_heads;
  const int64_t kvh = h / (c.q_heads / c.kv_heads);
  kernels::HeadTask t{};
  t.q = c.q.data + b * c.q.stride[0] + h * c.q.stride[1];
  t.q_row = c.q.stride[2];
  t.q_dim = c.q.stride[3];
  t.k = c.k.data + b * c.k.stride[0] + kvh * c.k.stride[1];
  t.k_row = c.k.stride[2];
  t.k_dim = c.k.stride[3];
  t.v = c.v.data + b * c.v.stride[0] + kvh * c.v.stride[1];
  t.v_row = c.v.stride[2];
  t.v_dim = c.v.stride[3];
  t.o = c.o.data + b * c.o.stride[0] + h * c.o.stride[1];
  t.o_row = c.o.stride[2];
  t.o_dim = c.o.stride[3];
  if (c.has_lse) {
    t.lse = c.lse.data + b * c.lse.stride[0] + h * c.lse.stride[1];
    t.lse_row = c.lse.stride[2];
  }
  if (c.has_weights) {
    t.weights = c.weights.data + b * c.weights.stride[0] + h * c.weights.stride[1];
    t.w_row = c.weights.stride[2];
    t.w_col = c.weights.stride[3];
  }
  t.q_len = c.q_len;
  t.kv_len = c.kv_len;
  t.head_dim = c.head_dim;
  t.value_dim = c.value_dim;
  t.scale = c.scale;
  t.mask = c.mask;
  return t;
}

// Decode-shaped calls (few query rows per kv head) split the keys into chunks that run
// as parallel tasks; the split changes no byte (see kernels::kChunkKeys).
constexpr int64_t kDecodeRows = 16;

// How a call runs: per-slot scratch, plus shared bytes (the decode partials).
struct Plan {
  size_t slot_bytes = 0, shared_bytes = 0;
  bool decode = false;
  int64_t units = 0, q_tiles = 0;  // decode: key units (gathered columns, chunks)
  bool gathered = false;
};

kernels::FlashTask FlashBase(const AttentionCall& c, int64_t b, int64_t kvh) {
  const int64_t group = c.q_heads / c.kv_heads;
  // The group's first query head, as a naive task sees it, plus the head strides.
  const kernels::HeadTask h = MakeTask(c, b * c.q_heads + kvh * group);
  kernels::FlashTask t{};
  t.q = h.q;
  t.q_head = c.q.stride[1];
  t.q_row = h.q_row;
  t.q_dim = h.q_dim;
  t.k = h.k;
  t.k_row = h.k_row;
  t.k_dim = h.k_dim;
  t.v = h.v;
  t.v_row = h.v_row;
  t.v_dim = h.v_dim;
  t.o = h.o;
  t.o_head = c.o.stride[1];
  t.o_row = h.o_row;
  t.o_dim = h.o_dim;
  t.lse = h.lse;
  t.lse_head = c.has_lse ? c.lse.stride[1] : 0;
  t.lse_row = h.lse_row;
  t.heads = group;
  t.row_begin = 0;
  t.row_end = c.q_len;
  t.q_len = c.q_len;
  t.kv_len = c.kv_len;
  t.head_dim = c.head_dim;
  t.value_dim = c.value_dim;
  t.scale = c.scale;
  t.mask = c.mask;
  t.gathered = 1;
  t.chunk_begin = 0;
  t.chunk_end = (c.kv_len + kernels::kChunkKeys - 1) / kernels::kChunkKeys;
  return t;
}

int64_t KeyLimit(const AttentionCall& c) {
  if (!c.mask.causal) return c.kv_len;
  return std::max<int64_t>(0, std::min(c.kv_len, c.mask.q_start + c.q_len));
}

Plan MakePlan(const AttentionCall& c) {
  Plan p;
  if (c.algorithm == OCTATTN_ALGORITHM_REFERENCE) {
    p.slot_bytes = RoundUp(octattn::reference::HeadScratchDoubles(MakeTask(c, 0)) * sizeof(double));
  } else if (c.algorithm == OCTATTN_ALGORITHM_NAIVE) {
    p.slot_bytes = RoundUp(c.table->naive_scratch_floats(MakeTask(c, 0)) * sizeof(float));
  } else {
    kernels::FlashTask t = FlashBase(c, 0, 0);
    const int64_t group = c.q_heads / c.kv_heads;
    const int64_t chunks = (KeyLimit(c) + kernels::kChunkKeys - 1) / kernels::kChunkKeys;
    p.gathered = c.mask.causal && c.mask.window > 0 && c.mask.stride > 0;
    p.units = chunks + (p.gathered ? 1 : 0);
    p.decode = group * c.q_len <= kDecodeRows && p.units > 1;
    if (p.decode) {
      const size_t state = c.table->flash_state_floats(t);
      const size_t merge = state + RoundUp(static_cast<size_t>(c.value_dim) * sizeof(float) + kAlign);
      p.slot_bytes = RoundUp(std::max(c.table->flash_scratch_floats(t) * sizeof(float), merge));
      p.shared_bytes = RoundUp(static_cast<size_t>(c.batch * c.kv_heads * p.units * group * c.q_len) *
                               state * sizeof(float));
    } else {
      p.q_tiles = (c.q_len + kernels::kQueryTile - 1) / kernels::kQueryTile;
      t.row_end = std::min(c.q_len, kernels::kQueryTile);
      p.slot_bytes = RoundUp(c.table->flash_scratch_floats(t) * sizeof(float));
    }
  }
  return p;
}

size_t WorkspaceBytes(const octattn_context& ctx, const Plan& p) {
  return p.slot_bytes * static_cast<size_t>(ctx.pool->threads()) + p.shared_bytes + kAlign;
}

// Runs body(task, slot_scratch) for each of `tasks` on the context's pool.
template <class Body>
void RunTasks(octattn_context* ctx, int64_t tasks, void* scratch, size_t slot_bytes, Body&& body) {
  char* base = static_cast<char*>(scratch);
  ctx->pool->Run(tasks, [&](int64_t task, int slot) {
    body(task, base + static_cast<size_t>(slot) * slot_bytes);
  });
}

void RunFused(octattn_context* ctx, const AttentionCall& c, const Plan& p, void* scratch) {
  const int64_t pairs = c.batch * c.kv_heads;
  const kernels::Table* table = c.table;
  if (!p.decode) {
    // Longest first: under a causal mask the last query tiles read the most keys.
    RunTasks(ctx, pairs * p.q_tiles, scratch, p.slot_bytes, [&](int64_t i, void* s) {
      const int64_t tile = p.q_tiles - 1 - i / pairs, bk = i % pairs;
      kernels::FlashTask t = FlashBase(c, bk / c.kv_heads, bk % c.kv_heads);
      t.row_begin = tile * kernels::kQueryTile;
      t.row_end = std::min(c.q_len, t.row_begin + kernels::kQueryTile);
      table->flash_task(t, static_cast<float*>(s));
    });
    return;
  }
  float* partials = reinterpret_cast<float*>(static_cast<char*>(scratch) +
                                             p.slot_bytes * static_cast<size_t>(ctx->pool->threads()));
  const kernels::FlashTask probe = FlashBase(c, 0, 0);
  const size_t per_pair = static_cast<size_t>(p.units * probe.heads * c.q_len) *
                          table->flash_state_floats(probe);
  // One task per (batch, kv head, unit); unit 0 is the gathered columns when there are any.
  RunTasks(ctx, pairs * p.units, scratch, p.slot_bytes, [&](int64_t i, void* s) {
    const int64_t bk = i / p.units, unit = i % p.units;
    kernels::FlashTask t = FlashBase(c, bk / c.kv_heads, bk % c.kv_heads);
    const int64_t chunk = unit - (p.gathered ? 1 : 0);
    t.gathered = chunk < 0;
    t.chunk_begin = chunk < 0 ? 0 : chunk;
    t.chunk_end = chunk < 0 ? 0 : chunk + 1;
    t.partial = partials + static_cast<size_t>(bk) * per_pair +
                static_cast<size_t>(unit * t.heads * c.q_len) * table->flash_state_floats(t);
    table->flash_task(t, static_cast<float*>(s));
  });
  RunTasks(ctx, pairs, scratch, p.slot_bytes, [&](int64_t bk, void* s) {
    const kernels::FlashTask t = FlashBase(c, bk / c.kv_heads, bk % c.kv_heads);
    table->flash_merge(t, partials + static_cast<size_t>(bk) * per_pair, p.units,
                       static_cast<float*>(s));
  });
}

Check CheckWorkspaceDisjoint(const void* workspace, size_t size, const AttentionCall& c) {
  if (!workspace) return Check();
  TensorInfo ws;
  ws.lo = reinterpret_cast<uintptr_t>(workspace);
  ws.hi = ws.lo + size;
  if (ws.hi < ws.lo) return Fail(OCTATTN_ERROR_OVERFLOW, "workspace extent overflows");
  const TensorInfo* all[] = {&c.q, &c.k, &c.v, &c.o, &c.lse, &c.weights};
  const char* names[] = {"q", "k", "v", "o", "lse", "weights"};
  for (int i = 0; i < 6; ++i)
    if (all[i]->hi != 0) OCTATTN_CHECK(CheckDisjoint(ws, "workspace", *all[i], names[i]));
  return Check();
}

}  // namespace

extern "C" {

uint32_t octattn_version_number(void) { return OCTATTN_VERSION_NUMBER; }

const char* octattn_version_string(void) {
#define OCTATTN_STR2(x) #x
#define OCTATTN_STR(x) OCTATTN_STR2(x)
  return OCTATTN_STR(OCTATTN_VERSION_MAJOR) "." OCTATTN_STR(OCTATTN_VERSION_MINOR) "." OCTATTN_STR(
      OCTATTN_VERSION_PATCH);
}

const char* octattn_status_string(octattn_status status) {
  switch (status) {
    case OCTATTN_OK: return "ok";
    case OCTATTN_ERROR_NULL_POINTER: return "null pointer";
    case OCTATTN_ERROR_INVALID_SHAPE: return "invalid shape";
    case OCTATTN_ERROR_INVALID_STRIDE: return "invalid stride";
    case OCTATTN_ERROR_OVERFLOW: return "size overflow";
    case OCTATTN_ERROR_ALIASING: return "output overlaps another tensor";
    case OCTATTN_ERROR_INVALID_OPTION: return "invalid option";
    case OCTATTN_ERROR_STRUCT_SIZE: return "invalid struct_size";
    case OCTATTN_ERROR_WORKSPACE_TOO_SMALL: return "workspace too small";
    case OCTATTN_ERROR_UNSUPPORTED: return "unsupported";
    case OCTATTN_ERROR_OUT_OF_MEMORY: return "out of memory";
    case OCTATTN_ERROR_MISALIGNED: return "misaligned data";
    case OCTATTN_ERROR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

const char* octattn_backend_name(octattn_backend backend) {
  switch (backend) {
    case OCTATTN_BACKEND_AUTO: return "auto";
    case OCTATTN_BACKEND_HIGHWAY: return "highway";
    case OCTATTN_BACKEND_XSIMD: return "xsimd";
    default: return "unknown";
  }
}

const char* octattn_target_name(octattn_target target) {
  switch (target) {
    case OCTATTN_TARGET_AUTO: return "auto";
    case OCTATTN_TARGET_SCALAR: return "scalar";
    case OCTATTN_TARGET_SSE2: return "sse2";
    case OCTATTN_TARGET_SSSE3: return "ssse3";
    case OCTATTN_TARGET_SSE4: return "sse4";
    case OCTATTN_TARGET_AVX2: return "avx2";
    case OCTATTN_TARGET_AVX512: return "avx512";
    default: return "unknown";
  }
}

const char* octattn_algorithm_name(octattn_algorithm algorithm) {
  switch (algorithm) {
    case OCTATTN_ALGORITHM_AUTO: return "auto";
    case OCTATTN_ALGORITHM_REFERENCE: return "reference";
    case OCTATTN_ALGORITHM_NAIVE: return "naive";
    case OCTATTN_ALGORITHM_FUSED: return "fused";
    default: return "unknown";
  }
}

octattn_status octattn_tensor_init(octattn_tensor* tensor, void* data, const int64_t shape[4],
                                   octattn_layout layout) {
  return Guard(nullptr, [&]() -> Check {
    if (!tensor || !shape) return Fail(OCTATTN_ERROR_NULL_POINTER, "tensor or shape is NULL");
    if (layout != OCTATTN_LAYOUT_BHTD && layout != OCTATTN_LAYOUT_BTHD)
      return Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown layout");
    for (int d = 0; d < 4; ++d) {
      if (shape[d] < 1) return Fail(OCTATTN_ERROR_INVALID_SHAPE, "sizes must be positive");
      if (shape[d] > octattn::api::kMaxSize) return Fail(OCTATTN_ERROR_OVERFLOW, "size too large");
    }
    int64_t s3 = 1, s2, s1, s0;
    const int64_t d = shape[3];
    if (layout == OCTATTN_LAYOUT_BHTD) {
      if (__builtin_mul_overflow(d, shape[2], &s1) || __builtin_mul_overflow(s1, shape[1], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s2 = d;
    } else {  // memory order [B, T, H, D]
      if (__builtin_mul_overflow(d, shape[1], &s2) || __builtin_mul_overflow(s2, shape[2], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s1 = d;
    }
    tensor->data = data;
    tensor->dtype = OCTATTN_DTYPE_F32;
    tensor->reserved = 0;
    for (int k = 0; k < 4; ++k) tensor->shape[k] = shape[k];
    tensor->stride[0] = s0;
    tensor->stride[1] = s1;
    tensor->stride[2] = s2;
    tensor->stride[3] = 1;
    return Check();
  });
}

octattn_status octattn_context_create(octattn_context** out) {
  return Guard(nullptr, [&]() -> Check {
    if (!out) return Fail(OCTATTN_ERROR_NULL_POINTER, "out is NULL");
    auto ctx = std::make_unique<octattn_context>();
    ctx->pool = std::make_unique<octattn::parallel::Pool>(0);
    const char* backend = std::getenv("OCTATTN_BACKEND");
    const char* target = std::getenv("OCTATTN_TARGET");
    octattn_backend b = OCTATTN_BACKEND_AUTO;
    octattn_target t = OCTATTN_TARGET_AUTO;
    if (backend)
      for (octattn_backend i = OCTATTN_BACKEND_HIGHWAY; i <= OCTATTN_BACKEND_XSIMD; ++i)
        if (std::strcmp(backend, octattn_backend_name(i)) == 0) b = i;
    if (target)
      for (octattn_target i = OCTATTN_TARGET_SCALAR; i <= OCTATTN_TARGET_AVX512; ++i)
        if (std::strcmp(target, octattn_target_name(i)) == 0) t = i;
    const kernels::Table* table;
    if (!octattn::api::ResolveTarget(b, t, &table).failed()) {
      ctx->backend = b;
      ctx->target = t;
    } else if (!octattn::api::ResolveTarget(b, OCTATTN_TARGET_AUTO, &table).failed()) {
      ctx->backend = b;
    }
    *out = ctx.release();
    return Check();
  });
}

void octattn_context_destroy(octattn_context* ctx) { delete ctx; }

octattn_status octattn_context_set_threads(octattn_context* ctx, int32_t threads) {
  return Guard(ctx, [&]() -> Check {
    OCTATTN_CHECK(NeedContext(ctx));
    if (threads < 0) return Fail(OCTATTN_ERROR_INVALID_OPTION, "threads is negative");
    ctx->pool = std::make_unique<octattn::parallel::Pool>(threads);
    return Check();
  });
}

octattn_status octattn_context_get_threads(const octattn_context* ctx, int32_t* out) {
  if (!ctx || !out) return OCTATTN_ERROR_NULL_POINTER;
  *out = ctx->pool->threads();
  return OCTATTN_OK;
}

octattn_status octattn_context_set_target(octattn_context* ctx, octattn_backend backend,
                                          octattn_target target) {
  return Guard(ctx, [&]() -> Check {
    OCTATTN_CHECK(NeedContext(ctx));
    const kernels::Table* table;
    OCTATTN_CHECK(octattn::api::ResolveTarget(backend, target, &table));
    ctx->backend = backend;
    ctx->target = target;
    return Check();
  });
}

octattn_status octattn_context_set_memory_limit(octattn_context* ctx, uint64_t bytes) {
  if (!ctx) return OCTATTN_ERROR_NULL_POINTER;
  ctx->memory_limit = bytes;
  return OCTATTN_OK;
}

const char* octattn_context_last_error(const octattn_context* ctx) {
  return ctx ? ctx->last_error.c_str() : "";
}

octattn_status octattn_context_last_run(const octattn_context* ctx, octattn_run_info* info) {
  if (!ctx || !info) return OCTATTN_ERROR_NULL_POINTER;
  if (info->struct_size < octattn::api::kRunInfoSize_0_1) return OCTATTN_ERROR_STRUCT_SIZE;
  // Only the bytes the caller's struct has: an older caller's struct is shorter.
  const size_t size = info->struct_size;
  const size_t n = std::min(size, sizeof(octattn_run_info));
  std::memcpy(info, &ctx->last_run, n);
  info->struct_size = size;
  return OCTATTN_OK;
}

octattn_status octattn_available_targets(octattn_backend backend, octattn_target* targets,
                                         size_t capacity, size_t* count) {
  return Guard(nullptr, [&]() -> Check {
    if (!count) return Fail(OCTATTN_ERROR_NULL_POINTER, "count is NULL");
    if (capacity > 0 && !targets) return Fail(OCTATTN_ERROR_NULL_POINTER, "targets is NULL");
    if (backend < OCTATTN_BACKEND_AUTO || backend > OCTATTN_BACKEND_XSIMD)
      return Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown backend");
    size_t n = 0;
    for (octattn_target t = OCTATTN_TARGET_AVX512; t >= OCTATTN_TARGET_SCALAR; --t) {
      const kernels::Table* table;
      if (octattn::api::ResolveTarget(backend, t, &table).failed()) continue;
      if (n < capacity) targets[n] = t;
      ++n;
    }
    *count = n;
    return Check();
  });
}

octattn_status octattn_attention_options_init(octattn_attention_options* options) {
  if (!options) return OCTATTN_ERROR_NULL_POINTER;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->causal = 1;
  options->algorithm = OCTATTN_ALGORITHM_AUTO;
  options->q_start = OCTATTN_Q_START_DEFAULT;
  return OCTATTN_OK;
}

octattn_status octattn_attention_workspace_size(octattn_context* ctx,
                                                const octattn_attention_options* options,
                                                const octattn_tensor* q, const octattn_tensor* k,
                                                const octattn_tensor* v, const octattn_tensor* o,
                                                const octattn_tensor* lse,
                                                const octattn_tensor* weights, size_t* bytes) {
  return Guard(ctx, [&]() -> Check {
    AttentionCall c;
    OCTATTN_CHECK(ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c));
    if (!bytes) return Fail(OCTATTN_ERROR_NULL_POINTER, "bytes is NULL");
    *bytes = WorkspaceBytes(*ctx, MakePlan(c));
    return Check();
  });
}

octattn_status octattn_attention(octattn_context* ctx, const octattn_attention_options* options,
                                 const octattn_tensor* q, const octattn_tensor* k,
                                 const octattn_tensor* v, octattn_tensor* o, octattn_tensor* lse,
                                 octattn_tensor* weights, void* workspace, size_t workspace_size) {
  return Guard(ctx, [&]() -> Check {
    AttentionCall c;
    OCTATTN_CHECK(ValidateAttention(ctx, options, q, k, v, o, lse, weights, &c));
    OCTATTN_CHECK(CheckWorkspaceDisjoint(workspace, workspace_size, c));
    const Plan plan = MakePlan(c);
    void* scratch = nullptr;
    OCTATTN_CHECK(octattn::api::AcquireScratch(ctx, WorkspaceBytes(*ctx, plan), workspace,
                                               workspace_size, &scratch));
    const int64_t heads = c.batch * c.q_heads;
    if (c.algorithm == OCTATTN_ALGORITHM_REFERENCE) {
      RunTasks(ctx, heads, scratch, plan.slot_bytes, [&](int64_t i, void* s) {
        octattn::reference::AttentionHead(MakeTask(c, i), static_cast<double*>(s));
      });
    } else if (c.algorithm == OCTATTN_ALGORITHM_NAIVE) {
      RunTasks(ctx, heads, scratch, plan.slot_bytes, [&](int64_t i, void* s) {
        c.table->naive_head(MakeTask(c, i), static_cast<float*>(s));
      });
    } else {
      RunFused(ctx, c, plan, scratch);
    }
    octattn::api::RecordRun(ctx, c.algorithm, c.table);
    return Check();
  });
}

}  // extern "C"
