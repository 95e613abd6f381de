// The cache store: each (batch entry, head) of a contiguous store is a task; a paged
// store's tasks are heads, each writing its rows in order, so that two rows sent to one
// slot leave the later one's bytes whatever the thread count.
#include "lib/run/store.h"

#include <string.h>

#include <algorithm>

#include "lib/base/dtype.h"

namespace octattn {
namespace run {

namespace {

using base::Dtype;

float Source(const StoreCall& c, const float* row, int64_t d) {
  return base::LoadElem(row, d * c.src.stride[3], c.src.type);
}

// Values a row is widened into before the target's kernel stores them, at most.
constexpr int64_t kChunk = 2048;

// Row `row` (n == 1) of a store through the target's kernel (Table::store_row), in chunks
// of whole scale groups (INT8; FP8 with scales) or blocks that fit kChunk values. Returns
// false where it does not apply: a destination's elements strided, a group wider than a
// chunk (those take the scalar definitions below, the same bytes).
bool StoreRowKernel(const kernels::Table& table, const StoreCall& c, const float* row, void* out,
                    void* sc) {
  const int64_t dim = c.src.shape[3];
  const Dtype t = c.dst.type;
  const bool grouped = t == base::kI8 || (base::Scaled(t) && sc);
  const int64_t unit = grouped ? c.group : base::Blocked(t) ? base::kQuantBlock : 1;
  if (c.dst.stride[3] != 1 || unit > kChunk) return false;
  const int64_t chunk = kChunk / unit * unit;
  float x[kChunk];
  // Contiguous f32 rows are read where they are.
  const bool in_place = c.src.type == base::kF32 && c.src.stride[3] == 1;
  for (int64_t d0 = 0; d0 < dim; d0 += chunk) {
    const int64_t n = base::MinI(chunk, dim - d0);
    const float* src = base::ElemAt(row, d0 * c.src.stride[3], c.src.type);
    if (!in_place) base::WidenRow(src, c.src.stride[3], c.src.type, n, x);
    kernels::StoreRow r;
    r.x = in_place ? src : x;
    r.n = n;
    r.t = t;
    r.out = base::ElemAt(out, base::Blocked(t) ? d0 / base::kQuantBlock : d0, t);
    r.sc = sc ? base::ElemAt(sc, d0 / unit * c.scale.stride[3], c.scale.type) : nullptr;
    r.sc_type = c.scale.type;
    r.sc_col = c.scale.stride[3];
    r.group = grouped ? c.group : n;
    table.store_row(r);
  }
  return true;
}

// Rows [t0, t0 + n) of (b, h), n = scale_rows (one scale row of an INT8 cache) or 1; `out`
// their destination rows (null: skipped), `sc` the scale row of the first of them (null:
// none).
void StoreRows(const kernels::Table& table, const StoreCall& c, int64_t b, int64_t h, int64_t t0,
               int64_t n, float* const* out, const void* sc) {
  const TensorInfo &src = c.src, &dst = c.dst;
  const int64_t dim = src.shape[3];
  const Dtype t = dst.type;
  const float* rows[kMaxStoreScaleRows];
  for (int64_t r = 0; r < n; ++r)
    rows[r] = base::ElemAt(
        src.data, b * src.stride[0] + h * src.stride[1] + (t0 + r) * src.stride[2], src.type);
  if (n == 1 && out[0] && StoreRowKernel(table, c, rows[0], out[0], const_cast<void*>(sc))) return;
  if (t == base::kI8) {
    float* s = const_cast<float*>(static_cast<const float*>(sc));
    for (int64_t g0 = 0; g0 < dim; g0 += c.group) {
      // The largest |x| of the block as its bits (the kernel's StoreInt8 on n rows).
      uint32_t top = 0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d)
          top = std::max(top, base::AbsBits(Source(c, rows[r], d)));
      const bool finite = top < 0x7F800000u;
      const int64_t at = g0 / c.group * c.scale.stride[3];
      base::StoreElem(s, at, c.scale.type,
                      finite ? base::FloatOf(top) / 127.0f : __builtin_nanf(""));
      const float sv = base::LoadElem(s, at, c.scale.type);  // as the cache reads it
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d) {
          const int i = !finite || sv == 0.0f ? 0
                                              : base::RoundClamp(Source(c, rows[r], d) / sv, -127,
                                                                 127, base::RoundMagic());
          reinterpret_cast<int8_t*>(out[r])[d * dst.stride[3]] = static_cast<int8_t>(i);
        }
    }
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    if (!out[r]) continue;
    if (base::Scaled(t)) {  // fp8 (blocked rows are contiguous: the kernel's)
      uint8_t* o = reinterpret_cast<uint8_t*>(out[r]);
      for (int64_t d = 0; d < dim; ++d) {
        const float s =
            sc ? base::LoadElem(sc, d / c.group * c.scale.stride[3], c.scale.type) : 1.0f;
        o[d * dst.stride[3]] = base::F32ToFp8(Source(c, rows[r], d) / s, t);
      }
    } else {
      for (int64_t d = 0; d < dim; ++d)
        base::StoreElem(out[r], d * dst.stride[3], t, Source(c, rows[r], d));
    }
  }
}

// The rows of (b, h) in order, a scale row's rows at a time.
void StoreHead(const kernels::Table& table, const StoreCall& c, int64_t b, int64_t h) {
  const TensorInfo &dst = c.dst, &sc = c.scale;
  const int64_t rows = c.src.shape[2], n = c.dst.type == base::kI8 ? c.scale_rows : 1;
  for (int64_t t0 = 0; t0 < rows; t0 += n) {
    float* out[kMaxStoreScaleRows];
    int64_t block = b, row = t0;  // where row t0 goes: (block or batch entry, row)
    if (c.slots) {
      const int64_t slot = c.slots[b * rows + t0];
      if (slot < 0) continue;  // (a scale row's slots are all negative or none: validated)
      block = slot / c.block_size;
      row = slot % c.block_size;
    }
    for (int64_t r = 0; r < n; ++r)
      out[r] = base::ElemAt(dst.data,
                            block * dst.stride[0] + h * dst.stride[1] + (row + r) * dst.stride[2],
                            dst.type);
    // Scale row of rows that start a scale row (INT8), or of each row (FP8: broadcast).
    const void* s = nullptr;
    if (sc.hi != 0)
      s = base::ElemAt(sc.data,
                       block * sc.stride[0] + h * sc.stride[1] + row / c.scale_rows * sc.stride[2],
                       sc.type);
    StoreRows(table, c, b, h, t0, n, out, s);
  }
}

}  // namespace

void Store(parallel::Pool& pool, const kernels::Table& table, const StoreCall& c) {
  const int64_t batch = c.src.shape[0], heads = c.src.shape[1];
  const int64_t values = batch * heads * c.src.shape[2] * c.src.shape[3];
  // A decode step's few rows cost less than waking the pool.
  const bool alone = values < (int64_t{1} << 16) || pool.threads() == 1;
  if (c.slots) {  // heads: each writes its rows in order
    if (alone) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t b = 0; b < batch; ++b) StoreHead(table, c, b, h);
      return;
    }
    pool.Run(heads, [&](int64_t h, int) {
      for (int64_t b = 0; b < batch; ++b) StoreHead(table, c, b, h);
    });
    return;
  }
  if (alone) {
    for (int64_t i = 0; i < batch * heads; ++i) StoreHead(table, c, i / heads, i % heads);
    return;
  }
  pool.Run(batch * heads, [&](int64_t i, int) { StoreHead(table, c, i / heads, i % heads); });
}

}  // namespace run
}  // namespace octattn
