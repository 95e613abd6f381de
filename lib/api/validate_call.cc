// The checks of a whole attention call: its options, tensors and sequences against each
// other, into a run::Call. Nothing has been written when one fails.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "lib/reference/reference.h"
#include "octattn.h"

namespace octattn {
namespace api {

namespace {

// Sequence n of checked sequences, for the runners (run::SequenceSource).
void ResolveChecked(const void* arrays, int64_t n, plan::Sequence* out) {
  ResolveSequence(*static_cast<const Sequences*>(arrays), n, out);  // cannot fail
}

// The byte range of `n` floats at p (p non-null).
api::TensorInfo ArrayExtent(const float* p, int64_t n) {
  api::TensorInfo t;
  t.lo = reinterpret_cast<uintptr_t>(p);
  t.hi = t.lo + static_cast<uintptr_t>(n) * sizeof(float);
  return t;
}

api::Check SameShape(const api::TensorInfo& t, const char* name, const api::TensorInfo& like,
                     const char* like_name) {
  for (int d = 0; d < 4; ++d)
    if (t.shape[d] != like.shape[d])
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       std::string(name) + ": shape[" + std::to_string(d) + "] is " +
                           std::to_string(t.shape[d]) + ", expected " +
                           std::to_string(like.shape[d]) + " (as " + like_name + ")");
  return api::Check();
}

// Key lists: their tensors (INT32 [batch, 1 or kv_heads, q_len, n], counts [.., 1]) into
// the call's modifiers.
api::Check ValidateKeyLists(const octattn_attention_options& opt, run::Call* c) {
  const octattn_tensor* ts[4] = {opt.key_indices, opt.key_counts, opt.key_indices2,
                                 opt.key_counts2};
  static const char* const kNames[4] = {"options.key_indices", "options.key_counts",
                                        "options.key_indices2", "options.key_counts2"};
  for (int l = 1; l < 4; ++l)
    if (ts[l] && !ts[l / 2 * 2])
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                       std::string(kNames[l]) + " needs " + kNames[l / 2 * 2]);
  if (!opt.key_indices) return api::Check();  // (c may be null then)
  if (opt.block_counts)
    return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                     "a call takes key lists (options.key_indices) or a block mask, not both");
  plan::CallShape& sh = c->shape;
  static const char* const kDims[4] = {"batch", "kv_heads", "q_len", "1"};
  for (int l = 0; l < 4; ++l) {
    if (!ts[l]) continue;
    api::TensorInfo& in = c->lists[l];
    OCTATTN_CHECK(
        api::ValidateTensor(ts[l], kNames[l], api::Role::kInput, false, &in, OCTATTN_DTYPE_INT32));
    const int64_t want[4] = {sh.batch, sh.kv_heads, sh.q_len, 1};
    for (int d = 0; d < 4; ++d) {
      if (d == 3 && l % 2 == 0) continue;  // a list's capacity
      if (d < 2 && in.shape[d] == 1) {
        in.stride[d] = 0;  // broadcast
        continue;
      }
      if (in.shape[d] != want[d])
        return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                         std::string(kNames[l]) + ": shape[" + std::to_string(d) + "] is " +
                             std::to_string(in.shape[d]) + ", expected " + std::to_string(want[d]) +
                             " (" + kDims[d] + ")" + (d < 2 ? " or 1" : ""));
    }
  }
  for (int x = 0; x < 2; ++x) {
    const api::TensorInfo &ii = c->lists[2 * x], &ci = c->lists[2 * x + 1];
    if (!ts[2 * x]) continue;
    kernels::Mods::KeyList& k = sh.mods.keys[x];
    k.idx = static_cast<const int32_t*>(ts[2 * x]->data);
    k.n = ii.shape[3];
    k.idx_entry = ii.stride[0];
    k.idx_head = ii.stride[1];
    k.idx_row = ii.stride[2];
    k.idx_col = ii.stride[3];
    if (!ts[2 * x + 1]) continue;
    k.count = static_cast<const int32_t*>(ts[2 * x + 1]->data);
    k.count_entry = ci.stride[0];
    k.count_head = ci.stride[1];
    k.count_row = ci.stride[2];
  }
  return api::Check();
}

// Every count and entry of every row of every sequence of a call of key lists, read once
// here so that no kernel meets a bad one (an entry at or past its sequence's valid keys
// would read another sequence's rows, or past a paged one's blocks).
api::Check CheckKeyListEntries(const run::Call* c, const Sequences& seqs) {
  static const char* const kNames[4] = {"options.key_indices", "options.key_counts",
                                        "options.key_indices2", "options.key_counts2"};
  const plan::CallShape& sh = c->shape;
  if (!sh.mods.Listed()) return api::Check();
  const int64_t count = seqs.count > 0 ? seqs.count : sh.batch;
  for (int64_t s = 0; s < count; ++s) {
    plan::Sequence seq;
    if (seqs.count > 0) {
      OCTATTN_CHECK(api::ResolveSequence(seqs, s, &seq));
    } else {
      seq = plan::Sequence{};
      seq.batch = s;
      seq.q_len = sh.q_len;
      seq.kv_len = sh.kv_len;
    }
    for (int x = 0; x < 2; ++x) {
      const kernels::Mods::KeyList& k = sh.mods.keys[x];
      if (!k.idx) continue;
      const int64_t heads = k.idx_head == 0 && k.count_head == 0 ? 1 : sh.kv_heads;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = seq.q_row; i < seq.q_row + seq.q_len; ++i) {
          const std::string at = "[" + std::to_string(seq.batch) + ", " + std::to_string(h) + ", " +
                                 std::to_string(i) + "]";
          int64_t n = k.n;
          if (k.count) {
            n = k.count[seq.batch * k.count_entry + h * k.count_head + i * k.count_row];
            if (n < 0 || n > k.n)
              return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                               std::string(kNames[2 * x + 1]) + at + " is " + std::to_string(n) +
                                   ", must be in [0, " + std::to_string(k.n) + "] (" +
                                   kNames[2 * x] + "'s shape[3])");
          }
          const int32_t* e = k.idx + seq.batch * k.idx_entry + h * k.idx_head + i * k.idx_row;
          for (int64_t y = 0; y < n; ++y) {
            const int64_t j = e[y * k.idx_col];
            if (j < -1 || j >= seq.kv_len)
              return api::Fail(OCTATTN_ERROR_INVALID_OPTION,
                               std::string(kNames[2 * x]) + at + "[" + std::to_string(y) + "] is " +
                                   std::to_string(j) + ", outside the " +
                                   std::to_string(seq.kv_len) +
                                   " valid key rows of its sequence (or -1 for none)");
          }
        }
    }
  }
  return api::Check();
}

}  // namespace

api::Check ValidateStageKeyLists(const octattn_attention_options& opt, const int64_t shape[4],
                                 kernels::Mods* mods, TensorInfo lists[4], int64_t* group) {
  *group = 0;
  if (!opt.key_indices) return ValidateKeyLists(opt, nullptr);  // (counts without lists)
  // The lists' heads stand for the kv heads: one (every head's) or a divisor of q_heads.
  const int64_t heads = opt.key_indices->shape[1];
  if (heads < 1 || shape[1] % heads != 0)
    return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "options.key_indices: shape[1] is " +
                                                      std::to_string(heads) +
                                                      ", expected 1 or a divisor of the scores' " +
                                                      std::to_string(shape[1]) + " heads");
  run::Call c;
  c.shape.batch = shape[0];
  c.shape.q_heads = shape[1];
  c.shape.kv_heads = heads;
  c.shape.q_len = shape[2];
  c.shape.kv_len = shape[3];
  OCTATTN_CHECK(ValidateKeyLists(opt, &c));
  OCTATTN_CHECK(CheckKeyListEntries(&c, Sequences{}));
  for (int x = 0; x < 2; ++x) mods->keys[x] = c.shape.mods.keys[x];
  for (int l = 0; l < 4; ++l) lists[l] = c.lists[l];
  *group = shape[1] / heads;
  return api::Check();
}

api::Check NeedContext(const octattn_context* ctx) {
  if (!ctx) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "context is NULL");
  return api::Check();
}

// The call's shape from its validated tensors, checked against each other (paged: the
// pools' block count and size, a sequence's rows from the block table's width).
static api::Check CheckShapes(const octattn_attention_options& opt, run::Call* c,
                              int64_t* num_blocks, int64_t* block_size) {
  const bool paged = opt.block_table != nullptr;
  plan::CallShape& sh = c->shape;
  sh.batch = c->q.shape[0];
  sh.q_heads = c->q.shape[1];
  sh.q_len = c->q.shape[2];
  sh.head_dim = c->q.shape[3];
  sh.kv_heads = c->k.shape[1];
  sh.kv_len = c->k.shape[2];
  sh.value_dim = c->v.shape[3];
  sh.v_dim = c->v.stride[3];
  sh.shared_rows = c->k.stride[1] < c->k.stride[2] && c->v.stride[1] < c->v.stride[2];
  sh.q_type = c->q.type;
  sh.k_type = c->k.type;
  sh.v_type = c->v.type;
  sh.o_type = c->o.type;
  // A paged cache: k and v are pools [num_blocks, kv_heads, block_size, dim], and a
  // sequence's logical key rows are block_table_cols blocks.
  *num_blocks = paged ? c->k.shape[0] : 0;
  *block_size = paged ? c->k.shape[2] : 0;
  OCTATTN_CHECK(api::CheckSize(c->k, "k", 3, sh.head_dim, "head_dim of q"));
  OCTATTN_CHECK(api::CheckSize(c->v, "v", 1, sh.kv_heads, "kv_heads of k"));
  if (paged) {
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 0, *num_blocks, "num_blocks of k"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 2, *block_size, "block_size of k"));
    if (__builtin_mul_overflow(opt.block_table_cols, *block_size, &sh.kv_len) ||
        sh.kv_len > api::kMaxSize)
      return api::Fail(OCTATTN_ERROR_OVERFLOW,
                       "options.block_table_cols * block_size (a sequence's rows) is too large");
  } else {
    OCTATTN_CHECK(api::CheckSize(c->k, "k", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->v, "v", 2, sh.kv_len, "kv_len of k"));
  }
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 0, sh.batch, "batch of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 1, sh.q_heads, "q_heads of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 2, sh.q_len, "q_len of q"));
  OCTATTN_CHECK(api::CheckSize(c->o, "o", 3, sh.value_dim, "value_dim of v"));
  OCTATTN_CHECK(api::CheckGroups(sh.q_heads, sh.kv_heads));
  if (c->has_lse) {
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 1, sh.q_heads, "q_heads of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 2, sh.q_len, "q_len of q"));
    OCTATTN_CHECK(api::CheckSize(c->lse, "lse", 3, 1, "one value per row"));
  }
  if (c->has_weights) {
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 1, sh.q_heads, "q_heads of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 2, sh.q_len, "q_len of q"));
    OCTATTN_CHECK(api::CheckSize(c->weights, "weights", 3, sh.kv_len, "kv_len of k"));
  }
  if (c->has_key_scores) {
    const char* name = "options.key_scores";
    // A ragged paged call's sequences each have their own logical rows: one entry each.
    if (paged && opt.sequences > 0)
      OCTATTN_CHECK(api::CheckSize(c->key_scores, name, 0, opt.sequences, "options.sequences"));
    else
      OCTATTN_CHECK(api::CheckSize(c->key_scores, name, 0, sh.batch, "batch of q"));
    OCTATTN_CHECK(api::CheckSize(c->key_scores, name, 1, sh.kv_heads, "kv_heads of k"));
    OCTATTN_CHECK(
        api::CheckSize(c->key_scores, name, 2, sh.kv_len,
                       paged ? "a sequence's rows, block_table_cols * block_size" : "kv_len of k"));
    OCTATTN_CHECK(api::CheckSize(c->key_scores, name, 3, 1, "one value per key"));
    // Each key's sum stays below the fixed-point NaN mark (kernels::kKeyScoreNaN).
    if (sh.q_len * (sh.q_heads / sh.kv_heads) >= (int64_t{1} << 30))
      return api::Fail(OCTATTN_ERROR_INVALID_SHAPE,
                       "options.key_scores sums fewer than 2^30 query rows and heads per key: "
                       "q_len times q_heads / kv_heads is too large");
  }
  return api::Check();
}

api::Check ValidateAttention(octattn_context* ctx, const octattn_attention_options* options,
                             const octattn_tensor* q, const octattn_tensor* k,
                             const octattn_tensor* v, const octattn_tensor* o,
                             const octattn_tensor* lse, const octattn_tensor* weights, run::Call* c,
                             Sequences* seqs, Role o_role) {
  OCTATTN_CHECK(NeedContext(ctx));
  octattn_attention_options opt;
  OCTATTN_CHECK(octattn::api::ValidateOptions(options, &opt));
  OCTATTN_CHECK(api::ValidateTensor(q, "q", api::Role::kInput, false, &c->q, api::kFloating));
  OCTATTN_CHECK(api::ValidateTensor(k, "k", api::Role::kInput, false, &c->k, api::kCache));
  OCTATTN_CHECK(api::ValidateTensor(v, "v", api::Role::kInput, false, &c->v, api::kCache));
  OCTATTN_CHECK(api::ValidateTensor(o, "o", o_role, false, &c->o, api::kFloating));
  if (c->o.type != base::kF32 && c->o.type != c->q.type)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "o's dtype is neither f32 nor q's dtype");
  c->has_lse = lse != nullptr;
  c->has_weights = weights != nullptr;
  if (lse) OCTATTN_CHECK(api::ValidateTensor(lse, "lse", o_role, false, &c->lse));
  if (weights)
    OCTATTN_CHECK(api::ValidateTensor(weights, "weights", api::Role::kOutput, false, &c->weights));

  // Key scores: an output of the forward only (the backward, which reads o, ignores them).
  c->has_key_scores = opt.key_scores != nullptr && o_role == Role::kOutput;
  if (c->has_key_scores)
    OCTATTN_CHECK(api::ValidateTensor(opt.key_scores, "options.key_scores", api::Role::kOutput,
                                      false, &c->key_scores));

  int64_t num_blocks = 0, block_size = 0;
  OCTATTN_CHECK(CheckShapes(opt, c, &num_blocks, &block_size));
  c->shape.key_scores = c->has_key_scores;
  const bool paged = opt.block_table != nullptr;
  plan::CallShape& sh = c->shape;
  const int64_t scores[4] = {sh.batch, sh.q_heads, sh.q_len, sh.kv_len};
  OCTATTN_CHECK(api::ValidateMods(opt, scores, &sh.mods, &c->bias, &c->mask, c->blocks));
  OCTATTN_CHECK(api::ValidateScales(opt.k_scale, opt.k_scale_rows, c->k, "k", paged, &c->k_scale));
  OCTATTN_CHECK(api::ValidateScales(opt.v_scale, opt.v_scale_rows, c->v, "v", paged, &c->v_scale));
  OCTATTN_CHECK(ValidateKeyLists(opt, c));
  const struct {
    const api::TensorInfo* t;
    const char* name;
    bool present;
  } outs[] = {{&c->o, "o", true},
              {&c->lse, "lse", c->has_lse},
              {&c->weights, "weights", c->has_weights},
              {&c->key_scores, "options.key_scores", c->has_key_scores}},
    ins[] = {{&c->q, "q", true},
             {&c->k, "k", true},
             {&c->v, "v", true},
             {&c->bias, "options.bias", c->bias.hi != 0},
             {&c->mask, c->shape.mods.keep_bits ? "options.tree" : "options.mask", c->mask.hi != 0},
             {&c->k_scale.t, "options.k_scale", c->k_scale.t.hi != 0},
             {&c->v_scale.t, "options.v_scale", c->v_scale.t.hi != 0},
             {&c->blocks[0], "options.block_counts", c->blocks[0].hi != 0},
             {&c->blocks[1], "options.block_indices", c->blocks[1].hi != 0},
             {&c->blocks[2], "options.full_block_counts", c->blocks[2].hi != 0},
             {&c->blocks[3], "options.full_block_indices", c->blocks[3].hi != 0},
             {&c->lists[0], "options.key_indices", c->lists[0].hi != 0},
             {&c->lists[1], "options.key_counts", c->lists[1].hi != 0},
             {&c->lists[2], "options.key_indices2", c->lists[2].hi != 0},
             {&c->lists[3], "options.key_counts2", c->lists[3].hi != 0}};
  for (const auto& out : outs) {
    if (!out.present || o_role == Role::kInput) continue;
    for (const auto& in : ins)
      if (in.present) OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *in.t, in.name));
    for (const auto& other : outs)
      if (other.present && other.t < out.t)
        OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *other.t, other.name));
  }

  octattn_algorithm algorithm = opt.algorithm;
  // (Key scores over key lists: the naive algorithm's, as the weights.)
  const bool listed_scores = c->has_key_scores && sh.mods.Listed();
  if (algorithm == OCTATTN_ALGORITHM_AUTO)
    algorithm = c->has_weights || listed_scores ? OCTATTN_ALGORITHM_NAIVE : OCTATTN_ALGORITHM_FUSED;
  c->algorithm = algorithm == OCTATTN_ALGORITHM_REFERENCE ? plan::Algorithm::kReference
                 : algorithm == OCTATTN_ALGORITHM_NAIVE   ? plan::Algorithm::kNaive
                                                          : plan::Algorithm::kFused;
  if (algorithm == OCTATTN_ALGORITHM_FUSED && c->has_weights)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the fused algorithm never holds the weights: use naive to get them");
  if (algorithm == OCTATTN_ALGORITHM_FUSED && listed_scores)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "options.key_scores over key lists (options.key_indices) run naive or "
                     "reference, not fused");
  if (algorithm == OCTATTN_ALGORITHM_REFERENCE) {
    c->table = reference::Table();
  } else {
    c->table = octattn::api::SelectTable(*ctx, opt.qk_precision == OCTATTN_QK_INT8);
    c->tuning = ctx->tuning;
    if (!c->table)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED, "the context's SIMD target is not available");
  }
  sh.mask = api::ResolveMask(opt, sh.q_len, sh.kv_len);
  OCTATTN_CHECK(
      api::ResolveSequences(opt, sh.batch, sh.q_len, sh.kv_len, num_blocks, block_size, seqs));
  if (paged) {
    seqs->k_block = c->k.stride[0];
    seqs->v_block = c->v.stride[0];
  }
  c->sequences = seqs->count;
  c->source = run::SequenceSource{seqs, &ResolveChecked};
  if ((opt.tree || opt.block_counts) && opt.cu_seqlens_q)
    for (int64_t s = 0; s < seqs->count; ++s) {
      plan::Sequence seq;
      OCTATTN_CHECK(api::ResolveSequence(*seqs, s, &seq));
      OCTATTN_CHECK(api::CheckTreeRows(opt, seq.q_len));
    }
  OCTATTN_CHECK(CheckKeyListEntries(c, *seqs));
  if (paged && algorithm == OCTATTN_ALGORITHM_NAIVE)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the naive algorithm reads contiguous keys: a paged cache runs fused (no "
                     "weights) or reference");
  if (opt.qk_precision == OCTATTN_QK_INT8) {
    const base::Dtype kt = c->k.type;
    if (kt != base::kI8 && kt != base::kQ8_0 && kt != base::kQ4_0)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                       "options.qk_precision OCTATTN_QK_INT8 needs an INT8, Q8_0 or Q4_0 key "
                       "cache (k's dtype is " +
                           std::to_string(static_cast<int>(kt)) + ")");
    if (algorithm == OCTATTN_ALGORITHM_NAIVE)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                       "options.qk_precision OCTATTN_QK_INT8 runs fused (no weights) or reference, "
                       "not naive");
    // Blocks of q that lie in one scale group of every key: a divisor of 32 and of G.
    int64_t b = base::kQuantBlock;
    if (kt == base::kI8)
      while (c->k_scale.group % b != 0) b /= 2;
    sh.qk_block = b;
  }
  c->scale = opt.scale != 0.0f
                 ? opt.scale
                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim)));
  return api::Check();
}

api::Check CheckWorkspaceDisjoint(const void* workspace, size_t size, const run::Call& c) {
  if (!workspace) return api::Check();
  api::TensorInfo ws;
  ws.lo = reinterpret_cast<uintptr_t>(workspace);
  ws.hi = ws.lo + size;
  if (ws.hi < ws.lo) return api::Fail(OCTATTN_ERROR_OVERFLOW, "workspace extent overflows");
  const api::TensorInfo* all[] = {&c.q,         &c.k,         &c.v,          &c.o,
                                  &c.lse,       &c.weights,   &c.bias,       &c.mask,
                                  &c.k_scale.t, &c.v_scale.t, &c.key_scores, &c.lists[0],
                                  &c.lists[1],  &c.lists[2],  &c.lists[3]};
  const char* names[] = {"q",
                         "k",
                         "v",
                         "o",
                         "lse",
                         "weights",
                         "options.bias",
                         c.shape.mods.keep_bits ? "options.tree" : "options.mask",
                         "options.k_scale",
                         "options.v_scale",
                         "options.key_scores",
                         "options.key_indices",
                         "options.key_counts",
                         "options.key_indices2",
                         "options.key_counts2"};
  for (int i = 0; i < 15; ++i)
    if (all[i]->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ws, "workspace", *all[i], names[i]));
  return api::Check();
}

api::Check ValidateBackward(octattn_context* ctx, const octattn_attention_options* options,
                            const octattn_tensor* q, const octattn_tensor* k,
                            const octattn_tensor* v, const octattn_tensor* o,
                            const octattn_tensor* lse, const octattn_tensor* dout,
                            const octattn_tensor* dlse, const octattn_tensor* dq,
                            const octattn_tensor* dk, const octattn_tensor* dv, const float* dsinks,
                            const octattn_tensor* dbias, run::BackwardCall* c, Sequences* seqs) {
  OCTATTN_CHECK(api::ValidateAttention(ctx, options, q, k, v, o, lse, nullptr, &c->fwd, seqs,
                                       api::Role::kInput));
  for (const api::TensorInfo* t : {&c->fwd.q, &c->fwd.k, &c->fwd.v, &c->fwd.o})
    if (t->type != octattn::base::kF32 && t->type != octattn::base::kBf16 &&
        t->type != octattn::base::kF16)
      return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                       "the backward pass takes f32, bf16 or f16 q, k, v and o, not a quantized "
                       "cache");
  if (seqs->paged)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the backward writes dk and dv of contiguous keys: it takes no paged cache");
  if (!lse)
    return api::Fail(OCTATTN_ERROR_NULL_POINTER, "lse is NULL: the backward reads the forward's");
  const plan::CallShape& sh = c->fwd.shape;
  OCTATTN_CHECK(
      api::ValidateTensor(dout, "dout", api::Role::kInput, false, &c->dout, api::kFloating));
  OCTATTN_CHECK(SameShape(c->dout, "dout", c->fwd.o, "o"));
  if (dlse) {
    OCTATTN_CHECK(api::ValidateTensor(dlse, "dlse", api::Role::kInput, false, &c->dlse));
    OCTATTN_CHECK(SameShape(c->dlse, "dlse", c->fwd.lse, "lse"));
  }
  OCTATTN_CHECK(api::ValidateTensor(dq, "dq", api::Role::kOutput, false, &c->dq));
  OCTATTN_CHECK(SameShape(c->dq, "dq", c->fwd.q, "q"));
  OCTATTN_CHECK(api::ValidateTensor(dk, "dk", api::Role::kOutput, false, &c->dk));
  OCTATTN_CHECK(SameShape(c->dk, "dk", c->fwd.k, "k"));
  OCTATTN_CHECK(api::ValidateTensor(dv, "dv", api::Role::kOutput, false, &c->dv));
  OCTATTN_CHECK(SameShape(c->dv, "dv", c->fwd.v, "v"));
  if (dbias) {
    OCTATTN_CHECK(api::ValidateTensor(dbias, "dbias", api::Role::kOutput, false, &c->dbias));
    const int64_t want[4] = {sh.batch, sh.q_heads, sh.q_len, sh.kv_len};
    static const char* const kDims[4] = {"batch", "q_heads", "q_len", "kv_len"};
    for (int d = 0; d < 4; ++d)
      OCTATTN_CHECK(api::CheckSize(c->dbias, "dbias", d, want[d], kDims[d]));
  }
  if (sh.mods.sinks) c->sinks = ArrayExtent(sh.mods.sinks, sh.q_heads);
  if (sh.mods.slopes) c->slopes = ArrayExtent(sh.mods.slopes, sh.q_heads);
  if (dsinks) {
    if (!sh.mods.sinks)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "dsinks needs options.sinks");
    if (reinterpret_cast<uintptr_t>(dsinks) % alignof(float) != 0)
      return api::Fail(OCTATTN_ERROR_MISALIGNED, "dsinks is not aligned to 4 bytes");
    c->dsinks = ArrayExtent(dsinks, sh.q_heads);
    c->dsinks_data = const_cast<float*>(dsinks);
  }
  if (c->fwd.algorithm == plan::Algorithm::kNaive)
    return api::Fail(OCTATTN_ERROR_UNSUPPORTED,
                     "the backward has the fused and reference algorithms, not naive");
  const struct {
    const api::TensorInfo* t;
    const char* name;
  } outs[] = {{&c->dq, "dq"},
              {&c->dk, "dk"},
              {&c->dv, "dv"},
              {&c->dbias, "dbias"},
              {&c->dsinks, "dsinks"}},
    ins[] = {{&c->fwd.q, "q"},
             {&c->fwd.k, "k"},
             {&c->fwd.v, "v"},
             {&c->fwd.o, "o"},
             {&c->fwd.lse, "lse"},
             {&c->dout, "dout"},
             {&c->dlse, "dlse"},
             {&c->fwd.bias, "options.bias"},
             {&c->fwd.mask, c->fwd.shape.mods.keep_bits ? "options.tree" : "options.mask"},
             {&c->sinks, "options.sinks"},
             {&c->slopes, "options.alibi_slopes"}};
  for (const auto& out : outs) {
    if (out.t->hi == 0) continue;
    for (const auto& in : ins)
      if (in.t->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *in.t, in.name));
    for (const auto& other : outs)
      if (other.t->hi != 0 && other.t < out.t)
        OCTATTN_CHECK(api::CheckDisjoint(*out.t, out.name, *other.t, other.name));
  }
  return api::Check();
}

api::Check CheckBackwardWorkspaceDisjoint(const void* workspace, size_t size,
                                          const run::BackwardCall& c) {
  if (!workspace) return api::Check();
  api::TensorInfo ws;
  ws.lo = reinterpret_cast<uintptr_t>(workspace);
  ws.hi = ws.lo + size;
  if (ws.hi < ws.lo) return api::Fail(OCTATTN_ERROR_OVERFLOW, "workspace extent overflows");
  const api::TensorInfo* all[] = {&c.fwd.q, &c.fwd.k,    &c.fwd.v,    &c.fwd.o, &c.fwd.lse, &c.dout,
                                  &c.dlse,  &c.fwd.bias, &c.fwd.mask, &c.dq,    &c.dk,      &c.dv,
                                  &c.dbias, &c.dsinks,   &c.sinks,    &c.slopes};
  const char* names[] = {"q",
                         "k",
                         "v",
                         "o",
                         "lse",
                         "dout",
                         "dlse",
                         "options.bias",
                         c.fwd.shape.mods.keep_bits ? "options.tree" : "options.mask",
                         "dq",
                         "dk",
                         "dv",
                         "dbias",
                         "dsinks",
                         "options.sinks",
                         "options.alibi_slopes"};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i)
    if (all[i]->hi != 0) OCTATTN_CHECK(api::CheckDisjoint(ws, "workspace", *all[i], names[i]));
  return api::Check();
}

}  // namespace api
}  // namespace octattn
