// A validated attention call, shared by the forward and backward entry points.
#ifndef OCTATTN_LIB_API_CALL_H_
#define OCTATTN_LIB_API_CALL_H_

#include "lib/api/validate.h"
#include "lib/kernels/kernels.h"
#include "lib/plan/schedule.h"
#include "octattn.h"

namespace octattn {
namespace api {

// An attention call that passed validation.
struct AttentionCall {
  TensorInfo q, k, v, o, lse, weights;
  TensorInfo bias, mask;  // of the modifiers (hi == 0: absent)
  bool has_lse = false, has_weights = false;
  plan::CallShape shape{};
  float scale = 0;
  octattn_algorithm algorithm = OCTATTN_ALGORITHM_AUTO;
  plan::Algorithm plan_algorithm = plan::Algorithm::kFused;
  const kernels::Table* table = nullptr;  // null for the reference
  kernels::Tuning tuning;                 // the context's
  // The sequences of a padded, ragged or paged batch (count 0: each batch entry with
  // every row), and once the call holds its scratch their entries there (BindSequences).
  Sequences sequences;
  plan::Sequence* seqs = nullptr;
};

// Every check of octattn_attention's arguments (lse and weights may be NULL). The
// backward passes o and lse as inputs (o_role kInput): then they are checked as inputs
// are, and its own checks keep its outputs apart from them.
Check ValidateAttention(octattn_context* ctx, const octattn_attention_options* options,
                        const octattn_tensor* q, const octattn_tensor* k, const octattn_tensor* v,
                        const octattn_tensor* o, const octattn_tensor* lse,
                        const octattn_tensor* weights, AttentionCall* c,
                        Role o_role = Role::kOutput);
// Resolves the call's sequences into `tables` (c->sequences.count entries, in the call's
// scratch) and points c->seqs at them.
void BindSequences(AttentionCall* c, void* tables);
// The operands of query head `h` of batch `b` (k and v those of its kv head).
kernels::Operands OperandsOf(const AttentionCall& c, int64_t b, int64_t h);
// The operands of query head `h` of sequence `seq`: its rows' views, sizes and mask.
kernels::Operands OperandsOf(const AttentionCall& c, const plan::Sequence& seq, int64_t h);

}  // namespace api
}  // namespace octattn

#endif  // OCTATTN_LIB_API_CALL_H_
