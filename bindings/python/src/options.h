// The options of a call as both of the package's modules (the extension and the torch
// operators) set them from their arguments.
#pragma once

#include <cstdint>
#include <optional>

#include "octattn.h"

namespace octattn_python {

// The defaults of this header's struct, then the mask, positions, scale and softcap of
// a call (q_start absent: the queries are the newest rows; scale 0: 1/sqrt(head_dim)).
inline void SetOptions(octattn_attention_options* o, bool causal, int64_t window, int64_t stride,
                       std::optional<int64_t> q_start, int64_t k_start, float scale, int64_t chunk,
                       float softcap, int32_t algorithm) {
  octattn_attention_options_init_size(o, sizeof(*o));
  o->causal = causal ? 1 : 0;
  o->window = window;
  o->stride = stride;
  if (q_start) o->q_start = *q_start;
  o->k_start = k_start;
  o->scale = scale;
  o->chunk = chunk;
  o->softcap = softcap;
  o->algorithm = algorithm;
}

}  // namespace octattn_python
