// The cache store: each (batch entry, head) of a contiguous store is a task; a paged
// store's tasks are heads, each writing its rows in order, so that two rows sent to one
// slot leave the later one's bytes whatever the thread count.
#include "lib/run/store.h"

#include <string.h>

#include <cmath>

#include "lib/base/dtype.h"

namespace octattn {
namespace run {

namespace {

using base::Dtype;

float Source(const StoreCall& c, const float* row, int64_t d) {
  return base::LoadElem(row, d * c.src.stride[3], c.src.type);
}

// round half to even, clamped to [lo, hi]; x finite.
int RoundClamp(float x, int lo, int hi) {
  const float r = std::nearbyint(x);
  return r < static_cast<float>(lo) ? lo : r > static_cast<float>(hi) ? hi : static_cast<int>(r);
}

// One ggml block of 32 values x into dst (type Q8_0 or Q4_0).
void StoreBlock(const float* x, Dtype t, uint8_t* dst) {
  bool finite = true;
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < base::kQuantBlock; ++i) {
    finite = finite && std::isfinite(x[i]);
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), m = x[i];
  }
  const uint16_t h =
      !finite ? 0x7E00 : base::F32ToF16(t == base::kQ8_0 ? amax / 127.0f : m / -8.0f);
  memcpy(dst, &h, 2);
  const float d = base::F16ToF32(h);
  if (t == base::kQ8_0) {
    for (int i = 0; i < base::kQuantBlock; ++i)
      dst[2 + i] = static_cast<uint8_t>(
          static_cast<int8_t>(!finite || d == 0.0f ? 0 : RoundClamp(x[i] / d, -127, 127)));
    return;
  }
  int nib[base::kQuantBlock];
  for (int i = 0; i < base::kQuantBlock; ++i)
    nib[i] = !finite || d == 0.0f ? 8 : RoundClamp(x[i] / d + 8.0f, 0, 15);
  for (int i = 0; i < 16; ++i) dst[2 + i] = static_cast<uint8_t>(nib[i] | (nib[i + 16] << 4));
}

// Rows [t0, t0 + n) of (b, h), n = scale_rows (one scale row of an INT8 cache) or 1; `out`
// their destination rows (null: skipped), `sc` the scale row of the first of them (null:
// none).
void StoreRows(const StoreCall& c, int64_t b, int64_t h, int64_t t0, int64_t n, float* const* out,
               const void* sc) {
  const TensorInfo &src = c.src, &dst = c.dst;
  const int64_t dim = src.shape[3];
  const Dtype t = dst.type;
  const float* rows[kMaxStoreScaleRows];
  for (int64_t r = 0; r < n; ++r)
    rows[r] = base::ElemAt(
        src.data, b * src.stride[0] + h * src.stride[1] + (t0 + r) * src.stride[2], src.type);
  if (t == base::kI8) {
    float* s = const_cast<float*>(static_cast<const float*>(sc));
    for (int64_t g0 = 0; g0 < dim; g0 += c.group) {
      bool finite = true;
      float amax = 0.0f;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d) {
          const float x = Source(c, rows[r], d);
          finite = finite && std::isfinite(x);
          amax = std::fmax(amax, std::fabs(x));
        }
      const int64_t at = g0 / c.group * c.scale.stride[3];
      base::StoreElem(s, at, c.scale.type, finite ? amax / 127.0f : __builtin_nanf(""));
      const float sv = base::LoadElem(s, at, c.scale.type);  // as the cache reads it
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d) {
          const int i =
              !finite || sv == 0.0f ? 0 : RoundClamp(Source(c, rows[r], d) / sv, -127, 127);
          reinterpret_cast<int8_t*>(out[r])[d * dst.stride[3]] = static_cast<int8_t>(i);
        }
    }
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    if (!out[r]) continue;
    if (base::Blocked(t)) {
      float x[base::kQuantBlock];
      for (int64_t k = 0; k < dim / base::kQuantBlock; ++k) {
        for (int i = 0; i < base::kQuantBlock; ++i)
          x[i] = Source(c, rows[r], k * base::kQuantBlock + i);
        StoreBlock(x, t, reinterpret_cast<uint8_t*>(base::ElemAt(out[r], k, t)));
      }
    } else if (base::Scaled(t)) {  // fp8
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
void StoreHead(const StoreCall& c, int64_t b, int64_t h) {
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
    StoreRows(c, b, h, t0, n, out, s);
  }
}

}  // namespace

void Store(parallel::Pool& pool, const StoreCall& c) {
  const int64_t batch = c.src.shape[0], heads = c.src.shape[1];
  const int64_t values = batch * heads * c.src.shape[2] * c.src.shape[3];
  // A decode step's few rows cost less than waking the pool.
  const bool alone = values < (int64_t{1} << 16) || pool.threads() == 1;
  if (c.slots) {  // heads: each writes its rows in order
    if (alone) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t b = 0; b < batch; ++b) StoreHead(c, b, h);
      return;
    }
    pool.Run(heads, [&](int64_t h, int) {
      for (int64_t b = 0; b < batch; ++b) StoreHead(c, b, h);
    });
    return;
  }
  if (alone) {
    for (int64_t i = 0; i < batch * heads; ++i) StoreHead(c, i / heads, i % heads);
    return;
  }
  pool.Run(batch * heads, [&](int64_t i, int) { StoreHead(c, i / heads, i % heads); });
}

}  // namespace run
}  // namespace octattn
