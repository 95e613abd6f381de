// The cache store (octattn_kv_store): new key or value rows converted to a cache's dtype,
// the quantized ones with their scales. Each stored value depends only on its source rows'
// values in its scale's block (the same bytes for any thread count).
#ifndef OCTATTN_LIB_RUN_STORE_H_
#define OCTATTN_LIB_RUN_STORE_H_

#include <stdint.h>

#include "lib/parallel/parallel.h"
#include "lib/run/call.h"

namespace octattn {
namespace run {

// A validated store: src [batch, heads, rows, dim]; dst src's shape, or with slots a pool
// [num_blocks, heads, block_size, dim]; scale (hi == 0: none) of dst's scale rows, one
// per `group` channels and `scale_rows` rows (broadcast strides 0 for an fp8 input).
struct StoreCall {
  TensorInfo src, dst, scale;
  int64_t scale_rows = 1, group = 1;
  const int64_t* slots = nullptr;
  int64_t block_size = 0;  // slots: dst's rows per block
};

// The most rows one INT8 scale of a store may cover (KIVI's blocks are 32 to 128 rows).
constexpr int64_t kMaxStoreScaleRows = 256;

// Contiguous rows go through `table`'s store_rows (the same bytes on every target).
void Store(parallel::Pool& pool, const kernels::Table& table, const StoreCall& c);

}  // namespace run
}  // namespace octattn

#endif  // OCTATTN_LIB_RUN_STORE_H_
