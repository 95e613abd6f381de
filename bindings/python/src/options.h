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

// A key list's int32 array (indices [Tq, n], [B, Tq, n] or [B, Hkv, Tq, n]; `counts`:
// the same less n) as the [B, Hkv, Tq, n] tensor ([.., 1] for counts) the header takes:
// [Tq, ...] is (1, 1, Tq, ...), [B, Tq, ...] is (B, 1, Tq, ...), the dimensions it lacks
// of size 1 (stride 0). False, with nothing set, where ndim is none of those.
inline bool KeyListView(void* data, size_t ndim, const int64_t* shape, const int64_t* stride,
                        bool counts, octattn_tensor* v) {
  const size_t lo = counts ? 1 : 2;
  if (ndim < lo || ndim > lo + 2) return false;
  *v = octattn_tensor{};
  v->data = data;
  v->dtype = OCTATTN_DTYPE_INT32;
  const size_t rows = ndim - lo;  // its dimensions before Tq: 0, 1 or 2
  const int map[3][4] = {{-1, -1, 0, 1}, {0, -1, 1, 2}, {0, 1, 2, 3}};
  for (size_t d = 0; d < 4; ++d) {
    const int from = map[rows][d];
    const bool in = from >= 0 && static_cast<size_t>(from) < ndim;
    v->shape[d] = in ? shape[from] : 1;
    v->stride[d] = in ? stride[from] : 0;
  }
  return true;
}

}  // namespace octattn_python
