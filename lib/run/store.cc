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

// Round half to even of |x| < 2^22 by the add-and-subtract of 1.5 * 2^23 (in the default
// rounding mode, which the library never changes): a loop of them runs in vectors.
inline float Magic() {
  const volatile float magic = 12582912.0f;  // read once, kept from being folded away
  return magic;
}
inline float RoundEven(float x, float magic) { return (x + magic) - magic; }

// Round half to even, clamped to [lo, hi]; |x| < 2^22 (a quotient by a block's scale).
int RoundClamp(float x, int lo, int hi, float magic) {
  const float r = RoundEven(x, magic);
  return r < static_cast<float>(lo) ? lo : r > static_cast<float>(hi) ? hi : static_cast<int>(r);
}

// The bits of |x|: for finite values their order is the values' order, and any bits above
// 0x7F800000's are non-finite.
inline uint32_t AbsBits(float x) { return base::BitsOf(x) & 0x7FFFFFFFu; }

// One ggml block of 32 values x into dst (type Q8_0 or Q4_0).
void StoreBlock(const float* x, Dtype t, uint8_t* dst, float magic) {
  uint32_t top = 0;
  for (int i = 0; i < base::kQuantBlock; ++i) top = top > AbsBits(x[i]) ? top : AbsBits(x[i]);
  const bool finite = top < 0x7F800000u;
  float m = 0.0f;  // Q4_0: the value of largest magnitude, the first of equals
  for (int i = 0; i < base::kQuantBlock && t == base::kQ4_0; ++i)
    if (AbsBits(x[i]) == top) {
      m = x[i];
      break;
    }
  const uint16_t h =
      !finite ? 0x7E00 : base::F32ToF16(t == base::kQ8_0 ? base::FloatOf(top) / 127.0f : m / -8.0f);
  memcpy(dst, &h, 2);
  const float d = base::F16ToF32(h);
  const bool zero = !finite || d == 0.0f;
  if (t == base::kQ8_0) {
    for (int i = 0; i < base::kQuantBlock; ++i)
      dst[2 + i] = static_cast<uint8_t>(
          static_cast<int8_t>(zero ? 0 : RoundClamp(x[i] / d, -127, 127, magic)));
    return;
  }
  uint8_t nib[base::kQuantBlock];
  for (int i = 0; i < base::kQuantBlock; ++i)
    nib[i] = static_cast<uint8_t>(zero ? 8 : RoundClamp(x[i] / d + 8.0f, 0, 15, magic));
  for (int i = 0; i < 16; ++i) dst[2 + i] = static_cast<uint8_t>(nib[i] | (nib[i + 16] << 4));
}

// One row of `dim` values widened in x[0, dim) into out (dst's stride 1), and sc its
// scale row (INT8) for G-channel groups: tight loops the compiler runs in vectors.
// Returns false where it does not apply (fp8 and by-channel blocks take StoreRows).
bool StoreRowFast(const StoreCall& c, const float* x, float* out, const void* sc) {
  const int64_t dim = c.src.shape[3];
  const Dtype t = c.dst.type;
  if (t == base::kF32) {
    memcpy(out, x, static_cast<size_t>(dim) * 4);
    return true;
  }
  if (t == base::kBf16 || t == base::kF16) {
    uint16_t* o = reinterpret_cast<uint16_t*>(out);
    if (t == base::kBf16) {
      for (int64_t d = 0; d < dim; ++d) o[d] = base::F32ToBf16(x[d]);
    } else {
      for (int64_t d = 0; d < dim; ++d) o[d] = base::F32ToF16(x[d]);
    }
    return true;
  }
  const float magic = Magic();
  if (t == base::kI8) {
    float* s = const_cast<float*>(static_cast<const float*>(sc));
    int8_t* o = reinterpret_cast<int8_t*>(out);
    // (Locals: the int8 stores may alias anything, c's fields included.)
    const int64_t group = c.group, col = c.scale.stride[3];
    for (int64_t g0 = 0; g0 < dim; g0 += group) {
      const int64_t g1 = g0 + group;
      uint32_t top = 0;
      for (int64_t d = g0; d < g1; ++d) top = top > AbsBits(x[d]) ? top : AbsBits(x[d]);
      const bool finite = top < 0x7F800000u;
      const int64_t at = g0 / group * col;
      base::StoreElem(s, at, c.scale.type,
                      finite ? base::FloatOf(top) / 127.0f : __builtin_nanf(""));
      const float sv = base::LoadElem(s, at, c.scale.type);
      if (!finite || sv == 0.0f) {
        memset(o + g0, 0, static_cast<size_t>(group));
        continue;
      }
      for (int64_t d = g0; d < g1; ++d) {
        float r = RoundEven(x[d] / sv, magic);
        r = r < -127.0f ? -127.0f : r;
        r = r > 127.0f ? 127.0f : r;
        o[d] = static_cast<int8_t>(r);
      }
    }
    return true;
  }
  if (base::Blocked(t)) {
    for (int64_t k = 0; k < dim / base::kQuantBlock; ++k)
      StoreBlock(x + k * base::kQuantBlock, t, reinterpret_cast<uint8_t*>(base::ElemAt(out, k, t)),
                 magic);
    return true;
  }
  return false;
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
  constexpr int64_t kFastDim = 2048;
  if (n == 1 && dim <= kFastDim && dst.stride[3] == 1 && out[0]) {
    float x[kFastDim];
    base::WidenRow(rows[0], src.stride[3], src.type, dim, x);
    if (StoreRowFast(c, x, out[0], sc)) return;
  }
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
          const int i = !finite || sv == 0.0f
                            ? 0
                            : RoundClamp(Source(c, rows[r], d) / sv, -127, 127, Magic());
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
        StoreBlock(x, t, reinterpret_cast<uint8_t*>(base::ElemAt(out[r], k, t)), Magic());
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
