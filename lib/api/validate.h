// Validation at the boundary: every check of a call runs here, before anything is
// written, and yields a status with a message that names the argument.
#ifndef OCTATTN_LIB_API_VALIDATE_H_
#define OCTATTN_LIB_API_VALIDATE_H_

#include <stdint.h>

#include <string>

#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "lib/kernels/kernels.h"
#include "lib/plan/schedule.h"
#include "lib/run/call.h"
#include "octattn.h"

namespace octattn {
namespace api {

struct Check {
  octattn_status code = OCTATTN_OK;
  std::string message;
  bool failed() const { return code != OCTATTN_OK; }
};

Check Fail(octattn_status code, std::string message);

#define OCTATTN_CHECK(expr)              \
  do {                                   \
    ::octattn::api::Check check_ = expr; \
    if (check_.failed()) return check_;  \
  } while (0)

// Sizes above this are refused (OVERFLOW): it keeps every position and index sum of
// the mask formula far from int64_t overflow.
constexpr int64_t kMaxSize = int64_t{1} << 60;
constexpr int64_t kMaxPosition = int64_t{1} << 62;

// A tensor that passed validation (the runners' type).
using run::TensorInfo;

enum class Role { kInput, kOutput };

// `sequence`: a [B, T, C] tensor stored as shape {B, T, C, 1}; stride[3] is ignored.
// `dtype`: the one dtype accepted (f32 or, for mask tensors, bool), or kFloating: f32,
// bf16 or f16 (data aligned to its element).
constexpr octattn_dtype kFloating = -1;
// kCache: kFloating or a quantized cache format (k and v; octattn_kv_store's dst).
constexpr octattn_dtype kCache = -2;
Check ValidateTensor(const octattn_tensor* t, const char* name, Role role, bool sequence,
                     TensorInfo* out, octattn_dtype dtype = OCTATTN_DTYPE_F32);
// ALIASING if the two byte ranges overlap.
Check CheckDisjoint(const TensorInfo& a, const char* a_name, const TensorInfo& b,
                    const char* b_name);
// INVALID_SHAPE unless t.shape[dim] == want.
Check CheckSize(const TensorInfo& t, const char* name, int dim, int64_t want, const char* what);
// INVALID_SHAPE unless q_heads is a multiple of kv_heads (grouped queries).
Check CheckGroups(int64_t q_heads, int64_t kv_heads);

// Options with defaults resolved; q_start still possibly OCTATTN_Q_START_DEFAULT.
// Checks every range, so that positions and their differences stay within +-2^62.
Check ValidateOptions(const octattn_attention_options* in, octattn_attention_options* out);

// INVALID_OPTION unless q_start and q_start - k_start are within +-2^62 (the message
// names `option`, with [index] when index >= 0).
Check CheckQStart(int64_t q_start, int64_t k_start, const char* option, int64_t index = -1);

// Whether validated options describe sequences (padded or ragged batches).
bool HasSequences(const octattn_attention_options& opt);
// The sequences of a call (count 0 when the options describe none: each batch entry is
// a sequence with every row), kept as the options that describe them: a call resolves
// them one at a time (ResolveSequence) into its scratch, so that it holds no container
// of its own and a caller's workspace is all the memory it uses.
struct Sequences {
  octattn_attention_options opt{};
  int64_t count = 0;
  int64_t q_len = 0, kv_len = 0;           // the tensors' rows (paged: a sequence's logical rows)
  int64_t num_blocks = 0, block_size = 0;  // paged: the pools' block count and size
  int64_t k_block = 0, v_block = 0;        // paged: the pools' block strides
  bool ragged = false, paged = false;
  bool checked = false;  // every sequence passed ResolveSequence's checks once
};
// Checks every sequence of a call whose tensors have these sizes against them. A paged
// call (options.block_table) passes its pools' block count and size; the caller sets
// the block strides after.
Check ResolveSequences(const octattn_attention_options& opt, int64_t batch, int64_t q_len,
                       int64_t kv_len, int64_t num_blocks, int64_t block_size, Sequences* out);
// Sequence s of checked sequences (it cannot fail for them).
Check ResolveSequence(const Sequences& all, int64_t s, plan::Sequence* out);

// The sizes of the public structs as version 0.1 published them: the smallest
// struct_size a caller may pass, forever (a caller built against 0.1 passes these).
constexpr size_t kOptionsSize_0_1 = 48;
constexpr size_t kOptionsSize_0_2 = 56;    // k_start appended
constexpr size_t kOptionsSize_0_3 = 104;   // chunk and the score modifiers appended
constexpr size_t kOptionsSize_0_6 = 168;   // sequences: padded, ragged and paged batches
constexpr size_t kOptionsSize_0_11 = 320;  // quantized caches' scales, qk_precision; trees;
                                           // block masks; key scores; key lists
constexpr size_t kRunInfoSize_0_1 = 24;
constexpr size_t kRunInfoSize_0_11 = 32;  // shared_kv_rows appended

// STRUCT_SIZE if `given` is below `first` (the first published size), or if bytes of
// `base` past `known` (this library's size) up to `given` are not zero (libbpf's rule).
// The mask of validated options in the coordinates of the call's keys (base::Mask):
// default alignment resolved, q_start relative to k_start, the strided columns' phase.
base::Mask ResolveMask(const octattn_attention_options& opt, int64_t q_len, int64_t kv_len);

Check ValidateStructSize(size_t given, size_t first, size_t known, const void* base,
                         const char* name);

// The score modifiers of validated options for scores of logical shape `shape` ([B,
// q_heads, q_len, kv_len]): arrays checked (q_heads entries), tensors validated and
// broadcast (sizes of 1 get stride 0), `mods` pointing at batch 0, head 0. The tensors'
// extents go to *bias and *mask (hi == 0 when absent), for the aliasing checks.
// A block mask's four tensors' extents go to blocks[0..3] (counts, indices, full counts,
// full indices), where given.
Check ValidateMods(const octattn_attention_options& opt, const int64_t shape[4],
                   kernels::Mods* mods, TensorInfo* bias, TensorInfo* mask,
                   TensorInfo* blocks = nullptr);
// INVALID_OPTION if a sequence of `rows` query rows has more tree columns than
// options.tree_row_bytes holds bits; INVALID_SHAPE if a block mask has fewer query
// blocks than they fill (nothing without either).
Check CheckTreeRows(const octattn_attention_options& opt, int64_t rows);
// The scale tensor of cache operand `cache` ("k" or "v"; options.k_scale or v_scale and its
// rows option): present exactly where its dtype takes one (INT8 must, FP8 may), of the
// shape SEMANTICS gives (sizes of 1 broadcast: stride 0), into *out (hi == 0: none).
Check ValidateScales(const octattn_tensor* scale, int64_t rows, const TensorInfo& cache,
                     const char* name, bool paged, run::ScaleInfo* out);
// The key lists of a stage over scores [batch, q_heads, q_len, kv_len] (octattn_mask):
// checked as octattn_attention checks them, every entry included, the lists' head
// dimension 1 or a divisor of q_heads (a list shared by a group of heads: *group heads,
// group 0 for one list for every head), into mods->keys (at batch 0, list head 0) and
// their extents lists[0..3].
Check ValidateStageKeyLists(const octattn_attention_options& opt, const int64_t shape[4],
                            kernels::Mods* mods, TensorInfo lists[4], int64_t* group);
// NULL_POINTER if the context is NULL.
Check NeedContext(const octattn_context* ctx);

// Every check of octattn_attention's arguments (lse and weights may be NULL), into c;
// a padded, ragged or paged call's sequences are kept in *seqs, which c resolves them
// from (it must outlive c). The backward passes o and lse as inputs (o_role kInput):
// then they are checked as inputs are, and its own checks keep its outputs apart from
// them.
Check ValidateAttention(octattn_context* ctx, const octattn_attention_options* options,
                        const octattn_tensor* q, const octattn_tensor* k, const octattn_tensor* v,
                        const octattn_tensor* o, const octattn_tensor* lse,
                        const octattn_tensor* weights, run::Call* c, Sequences* seqs,
                        Role o_role = Role::kOutput);
// ALIASING if a caller's workspace overlaps any tensor of the call.
Check CheckWorkspaceDisjoint(const void* workspace, size_t size, const run::Call& c);
// Every check of octattn_attention_backward's arguments: the forward call's, then the
// gradients' own.
Check ValidateBackward(octattn_context* ctx, const octattn_attention_options* options,
                       const octattn_tensor* q, const octattn_tensor* k, const octattn_tensor* v,
                       const octattn_tensor* o, const octattn_tensor* lse,
                       const octattn_tensor* dout, const octattn_tensor* dlse,
                       const octattn_tensor* dq, const octattn_tensor* dk, const octattn_tensor* dv,
                       const float* dsinks, const octattn_tensor* dbias, run::BackwardCall* c,
                       Sequences* seqs);
Check CheckBackwardWorkspaceDisjoint(const void* workspace, size_t size,
                                     const run::BackwardCall& c);

}  // namespace api
}  // namespace octattn

#endif  // OCTATTN_LIB_API_VALIDATE_H_
