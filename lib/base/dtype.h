// Element types of the tensors and their exact conversions. bf16 and f16 widen to f32
// exactly (every value, subnormals, infinities and NaN payloads' top bits), so a call on
// 16-bit data is the f32 computation on the widened values; outputs narrow to 16 bits
// by round to nearest even (NaN stays NaN). Scalar and branch-light: the reference, the
// boundary and the per-target kernels share them (compiled for each target, the loops
// that call them vectorize there).
#ifndef OCTATTN_LIB_BASE_DTYPE_H_
#define OCTATTN_LIB_BASE_DTYPE_H_

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace octattn {
namespace base {

// Numbering matches OCTATTN_DTYPE_*.
enum Dtype : int32_t { kF32 = 1, kBf16 = 2, kF16 = 3 };

namespace {  // internal linkage: mask.h says why

inline int64_t DtypeBytes(Dtype t) { return t == kF32 ? 4 : 2; }

inline uint32_t BitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
inline float FloatOf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Bf16ToF32(uint16_t h) { return FloatOf(static_cast<uint32_t>(h) << 16); }

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return FloatOf(sign | 0x7F800000u | (m << 13));  // inf, NaN
  if (e != 0) return FloatOf(sign | ((e + 112) << 23) | (m << 13));
  // Zero and subnormals: m * 2^-24, exact in f32 (a normal number unless 0).
  return FloatOf(sign | BitsOf(static_cast<float>(m) * 0x1p-24f));
}

inline uint16_t F32ToBf16(float f) {
  const uint32_t x = BitsOf(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline uint16_t F32ToF16(float f) {
  const uint32_t x = BitsOf(f), ax = x & 0x7FFFFFFFu;
  const uint32_t sign = (x >> 16) & 0x8000u;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (ax < 0x38800000u) {                                               // below 2^-14
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);           // <= 2^-25: zero
    const uint32_t shift = 126 - (ax >> 23);  // to units of 2^-24: 14 .. 24
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t rebased = ax - 0x38000000u;  // exponent 127 -> 15
  uint32_t h = rebased >> 13;
  const uint32_t rem = rebased & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach the exponent
  return static_cast<uint16_t>(sign | h);
}

// Element i of typed data as f32, and f32 stored as element i.
inline float LoadElem(const void* p, int64_t i, Dtype t) {
  if (t == kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == kBf16 ? Bf16ToF32(h) : F16ToF32(h);
}
inline void StoreElem(void* p, int64_t i, Dtype t, float x) {
  if (t == kF32) {
    static_cast<float*>(p)[i] = x;
    return;
  }
  static_cast<uint16_t*>(p)[i] = t == kBf16 ? F32ToBf16(x) : F32ToF16(x);
}

// n elements of typed data, `stride` elements apart, widened into dst[0, n).
inline void WidenRow(const void* src, int64_t stride, Dtype t, int64_t n, float* dst) {
  if (t == kF32) {
    const float* s = static_cast<const float*>(src);
    for (int64_t d = 0; d < n; ++d) dst[d] = s[d * stride];
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (t == kBf16) {
    for (int64_t d = 0; d < n; ++d) dst[d] = Bf16ToF32(s[d * stride]);
  } else {
    for (int64_t d = 0; d < n; ++d) dst[d] = F16ToF32(s[d * stride]);
  }
}

// Pointer arithmetic in elements of a type.
template <class P>
inline P* ElemAt(P* p, int64_t i, Dtype t) {
  using Byte = typename std::conditional<std::is_const<P>::value, const char, char>::type;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(p) + i * DtypeBytes(t));
}

}  // namespace
}  // namespace base
}  // namespace octattn

#endif  // OCTATTN_LIB_BASE_DTYPE_H_
