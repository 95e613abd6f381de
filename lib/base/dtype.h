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

// Numbering matches OCTATTN_DTYPE_*. The quantized ones (kI8 on) are cache formats: k and
// v only. kQ8_0 and kQ4_0 are ggml's blocks of kQuantBlock values; their tensors count
// strides in blocks.
enum Dtype : int32_t {
  kF32 = 1,
  kBf16 = 2,
  kF16 = 3,
  kI8 = 5,
  kE4m3 = 6,
  kE5m2 = 7,
  kQ8_0 = 8,
  kQ4_0 = 9,
  kDsMla = 11,
};
constexpr int64_t kQuantBlock = 32;
// kDsMla: DeepSeek V3.2's fp8 latent cache (vLLM's fp8_ds_mla), one whole row a unit: its
// first kDsMlaFp8 values as e4m3 bytes, then one f32 scale per kDsMlaGroup of them, then
// the last kDsMlaValues - kDsMlaFp8 values (the rope part) as bf16: 656 bytes.
constexpr int64_t kDsMlaValues = 576, kDsMlaFp8 = 512, kDsMlaGroup = 128;
constexpr int64_t kDsMlaScales = kDsMlaFp8, kDsMlaRope = kDsMlaFp8 + 4 * kDsMlaFp8 / kDsMlaGroup;
constexpr int64_t kDsMlaBytes = kDsMlaRope + 2 * (kDsMlaValues - kDsMlaFp8);

namespace {  // internal linkage: mask.h says why

// Bytes of one element (of one block for kQ8_0 and kQ4_0: an f16 scale and 32 values; of
// one row for kDsMla).
inline int64_t DtypeBytes(Dtype t) {
  static constexpr int16_t kBytes[12] = {0, 4, 2, 2, 1, 1, 1, 1, 34, 18, 0, kDsMlaBytes};
  return kBytes[t];
}
inline bool Quantized(Dtype t) { return t >= kI8; }
inline bool Blocked(Dtype t) { return t == kQ8_0 || t == kQ4_0; }
// Whether values carry a scale of their own tensor (options.k_scale, v_scale).
inline bool Scaled(Dtype t) { return t == kI8 || t == kE4m3 || t == kE5m2; }
// Bytes of a row of n values stored contiguously (n a multiple of kQuantBlock if blocked;
// kDsMla: the whole row, whatever n <= kDsMlaValues of it a tensor reads).
inline int64_t RowBytes(Dtype t, int64_t n) {
  if (t == kDsMla) return kDsMlaBytes;
  return Blocked(t) ? n / kQuantBlock * DtypeBytes(t) : n * DtypeBytes(t);
}

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

// fp8 (OCP): e4m3fn (bias 7, no infinities, S.1111.111 NaN, largest 448) and e5m2
// (bias 15, IEEE infinities and NaNs, largest 57344), widened exactly.
inline float Fp8ToF32(uint8_t b, Dtype t) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const int mbits = t == kE4m3 ? 3 : 2, bias = t == kE4m3 ? 7 : 15;
  const uint32_t e = (b & 0x7Fu) >> mbits, m = b & ((1u << mbits) - 1);
  if (t == kE4m3 && e == 15 && m == 7) return FloatOf(sign | 0x7FC00000u);
  if (t == kE5m2 && e == 31) return FloatOf(sign | 0x7F800000u | (m << 21));
  if (e == 0)  // zero and subnormals: m * 2^(1 - bias - mbits), exact
    return FloatOf(sign | BitsOf(static_cast<float>(m) * FloatOf((127u + 1 - bias - mbits) << 23)));
  return FloatOf(sign | ((e + 127 - bias) << 23) | (m << (23 - mbits)));
}

// f32 to fp8, rounded to nearest even; finite values beyond the largest finite one
// saturate to it (vLLM's convention), NaN stays NaN, and an infinity becomes NaN in e4m3fn
// (which has none) and stays one in e5m2.
inline uint8_t F32ToFp8(float f, Dtype t) {
  const bool e4 = t == kE4m3;
  const uint32_t mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
  const uint32_t x = BitsOf(f), sign = (x >> 24) & 0x80u, ax = x & 0x7FFFFFFFu;
  const uint32_t nan = e4 ? 0x7Fu : 0x7Eu, inf = e4 ? 0x7Fu : 0x7Cu;
  const uint32_t top = e4 ? 0x7Eu : 0x7Bu;                  // the largest finite's code
  const uint32_t largest = e4 ? 0x43E00000u : 0x47600000u;  // its value: 448, 57344
  const uint32_t min_normal = (128u - bias) << 23;          // 2^(1 - bias)
  // Below the smallest normal: a + 2^(23 + 1 - bias - mbits) puts the subnormal quantum
  // at the sum's last bit, so the sum's rounding (to nearest even) is the fp8's, and its
  // low bits are the code (8 where it rounds up to the smallest normal).
  const uint32_t magic = (127u + 24u - bias - mbits) << 23;
  const uint32_t sub = BitsOf(FloatOf(ax) + FloatOf(magic)) - magic;
  // Normals: the exponent rebiased and the mantissa rounded to mbits bits, half to even
  // (a carry into the exponent is the next binade's code).
  const uint32_t half = (1u << (22 - mbits)) - 1, odd = (ax >> (23 - mbits)) & 1u;
  const uint32_t normal = (ax - ((127u - bias) << 23) + half + odd) >> (23 - mbits);
  // Every case computed and picked by masks, not branches: a loop of them runs in vectors.
  auto pick = [](bool c, uint32_t a, uint32_t b) {
    const uint32_t m = 0u - static_cast<uint32_t>(c);
    return (a & m) | (b & ~m);
  };
  uint32_t code = pick(ax < min_normal, sub, normal);
  code = pick(ax >= largest, top, code);
  code = pick(ax == 0x7F800000u, inf, code);
  code = pick(ax > 0x7F800000u, nan, code);
  return static_cast<uint8_t>(sign | code);
}

// Value i (0 .. kQuantBlock) of a ggml block of type t (kQ8_0: an f16 d, then 32 int8;
// kQ4_0: an f16 d, then 16 bytes whose low nibbles are values 0..15 and high nibbles
// 16..31, each nibble minus 8): d * q, rounded once to f32.
inline float BlockValue(const uint8_t* block, Dtype t, int64_t i) {
  uint16_t h;
  memcpy(&h, block, 2);
  const float d = F16ToF32(h);
  if (t == kQ8_0) return d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
  const uint8_t b = block[2 + (i & 15)];
  return d * static_cast<float>(static_cast<int>(i < 16 ? b & 15 : b >> 4) - 8);
}

// Value d (< kDsMlaValues) of a kDsMla row: below kDsMlaFp8 its e4m3 value times its
// group's f32 scale (the product rounded once), then the bf16 values widened.
inline float DsMlaValue(const uint8_t* row, int64_t d) {
  if (d >= kDsMlaFp8) {
    uint16_t h;
    memcpy(&h, row + kDsMlaRope + 2 * (d - kDsMlaFp8), 2);
    return Bf16ToF32(h);
  }
  float scale;
  memcpy(&scale, row + kDsMlaScales + 4 * (d / kDsMlaGroup), 4);
  return scale * Fp8ToF32(row[d], kE4m3);
}

// n values of a quantized row widened: elements `stride` apart (blocked: n values of
// consecutive blocks; kDsMla: the first n of the row), int8 and fp8 values times their scale, which
// for value d is element (d / group) * sc_col of `sc` (type st; null: every scale 1, the fp8 values
// as they are).
inline void DequantRow(const void* src, int64_t stride, Dtype t, int64_t n, const void* sc,
                       Dtype st, int64_t sc_col, int64_t group, float* dst) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  if (t == kDsMla) {
    for (int64_t d = 0; d < n; ++d) dst[d] = DsMlaValue(s, d);
    return;
  }
  if (Blocked(t)) {
    const int64_t bytes = DtypeBytes(t);
    for (int64_t d = 0; d < n; ++d)
      dst[d] = BlockValue(s + d / kQuantBlock * bytes, t, d % kQuantBlock);
    return;
  }
  for (int64_t d = 0; d < n; ++d) {
    const uint8_t b = s[d * stride];
    const float x = t == kI8 ? static_cast<float>(static_cast<int8_t>(b)) : Fp8ToF32(b, t);
    dst[d] = sc ? LoadElem(sc, d / group * sc_col, st) * x : x;
  }
}

// Round half to even of |x| < 2^22 by the add-and-subtract of magic = 1.5 * 2^23 (in the
// default rounding mode, which the library never changes): a loop of them runs in vectors.
inline float RoundEven(float x, float magic) { return (x + magic) - magic; }
// That magic, read once per loop and kept from being folded away.
inline float RoundMagic() {
  const volatile float magic = 12582912.0f;
  return magic;
}
// Round half to even, clamped to [lo, hi]; |x| < 2^22 (a quotient by a block's scale).
inline int RoundClamp(float x, int lo, int hi, float magic) {
  const float r = RoundEven(x, magic);
  return r < static_cast<float>(lo) ? lo : r > static_cast<float>(hi) ? hi : static_cast<int>(r);
}
// The bits of |x|: for finite values their order is the values' order, and any bits above
// 0x7F800000's are non-finite.
inline uint32_t AbsBits(float x) { return BitsOf(x) & 0x7FFFFFFFu; }

// One block of n values of a q row rounded to int8 (OCTATTN_QK_INT8): the integers into
// ni, the block's scale returned: max|x| / 127 (f32), the integers round-half-even(x * 127
// / max|x|) (in double, where no quotient overflows) clamped to [-127, 127]; zeros: 0 (and
// every integer 0); a NaN or an infinity in the block: NaN (every integer 0). The fused
// kernels and the reference round alike.
inline float QuantizeQBlock(const float* x, int64_t n, int8_t* ni) {
  uint32_t top = 0;
  for (int64_t d = 0; d < n; ++d) top = top > AbsBits(x[d]) ? top : AbsBits(x[d]);
  if (top >= 0x7F800000u || top == 0) {
    for (int64_t d = 0; d < n; ++d) ni[d] = 0;
    return top == 0 ? 0.0f : __builtin_nanf("");
  }
  float amax;
  memcpy(&amax, &top, 4);
  const double inv = 127.0 / static_cast<double>(amax);
  for (int64_t d = 0; d < n; ++d) {
    const double r = __builtin_nearbyint(static_cast<double>(x[d]) * inv);
    ni[d] = static_cast<int8_t>(r < -127.0 ? -127 : r > 127.0 ? 127 : static_cast<int>(r));
  }
  return amax / 127.0f;
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
