// Quantized KV caches: the formats' values against independent oracles, every path's bytes
// against the f32 call on the dequantized cache (contiguous, [T, H, D], paged, ragged),
// rows no query reads kept out whatever they hold, the store's conversions, slots and
// determinism, and the statuses of bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "lib/base/dtype.h"
#include "lib/kernels/kernels.h"
#include "support.h"

using namespace octtest;
namespace base = octattn::base;

namespace {

// fp8 by its definition (OCP 8-bit floats), in double.
double Fp8Definition(uint8_t b, octattn_dtype type) {
  const bool e4m3 = type == OCTATTN_DTYPE_FP8_E4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emax = e4m3 ? 15 : 31;
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b & 0x7F) >> mbits, m = b & ((1 << mbits) - 1);
  if (e4m3 && e == emax && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && e == emax) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - mbits);
  return sign * std::ldexp((1 << mbits) + m, e - bias - mbits);
}

bool Blocked(octattn_dtype t) { return t == OCTATTN_DTYPE_Q8_0 || t == OCTATTN_DTYPE_Q4_0; }
bool Scaled(octattn_dtype t) {
  return t == OCTATTN_DTYPE_INT8 || t == OCTATTN_DTYPE_FP8_E4M3 || t == OCTATTN_DTYPE_FP8_E5M2;
}
int64_t UnitBytes(octattn_dtype t) {
  return t == OCTATTN_DTYPE_Q8_0 ? 34 : t == OCTATTN_DTYPE_Q4_0 ? 18 : 1;
}

// One format as a test names it: the dtype, channels per scale (0: one scale per kv head;
// -1: one per tensor) and rows per scale.
struct Format {
  octattn_dtype type;
  int64_t group = 0, rows = 1;
  std::string Name() const {
    return std::to_string(type) + "/g" + std::to_string(group) + "/r" + std::to_string(rows);
  }
};

// A quantized cache [B, H, T, D] in its own bytes (layout kBHTD or kBTHD), its scales (an
// f32 tensor, or none), and its values by the header's definition as an f32 tensor.
struct Cache {
  Format f;
  std::vector<uint8_t> bytes;
  octattn_tensor t{};
  Tensor scale;
  bool has_scale = false;
  Tensor values;

  // Stores `x` (f32) with octattn_kv_store (INT8: scales computed; FP8: the scales given
  // by `fp8_scale`, drawn in [0.5, 2)).
  Cache(Context& ctx, const Tensor& x, Format fmt, int layout, uint32_t seed) : f(fmt) {
    const int64_t B = x.shape[0], H = x.shape[1], T = x.shape[2], D = x.shape[3];
    const int64_t units = Blocked(f.type) ? D / 32 : D;
    int64_t* st = t.stride;
    if (layout == kBTHD) {
      st[3] = 1, st[1] = units, st[2] = H * units, st[0] = T * H * units;
    } else {
      st[3] = 1, st[2] = units, st[1] = T * units, st[0] = H * T * units;
    }
    bytes.assign(static_cast<size_t>(B * H * T * units * UnitBytes(f.type) + 2), 0xEE);
    t.data = bytes.data();
    t.dtype = f.type;
    for (int d = 0; d < 4; ++d) t.shape[d] = x.shape[d];
    octattn_tensor* sc = nullptr;
    if (Scaled(f.type)) {
      const int64_t per = f.group > 0 ? D / f.group : 1;
      if (f.type == OCTATTN_DTYPE_INT8) {
        scale = Tensor(B, H, T / f.rows, per);
      } else {
        scale = f.group < 0 ? Tensor(1, 1, 1, 1) : Tensor(1, H, 1, per);
        scale.Fill(seed, 0.5f, 2.0f);
      }
      has_scale = true;
      sc = scale.ptr();
    }
    REQUIRE(octattn_kv_store(ctx, x.ptr(), &t, sc, f.type == OCTATTN_DTYPE_INT8 ? f.rows : 0,
                             nullptr) == OCTATTN_OK);
    values = Tensor(B, H, T, D);
    Revalue();
  }
  // `values` after the bytes changed.
  void Revalue() {
    values.ForEach([&](int64_t b, int64_t h, int64_t j, int64_t d) {
      values.at(b, h, j, d) = Value(b, h, j, d);
    });
  }
  // Head h's codes (one-byte formats): *n, *n + 7, ... (odd steps: every code in 256),
  // each as `code(c)` gives it (the callers replace NaN and infinity codes).
  template <class F>
  void SetCodes(int64_t h, uint32_t* n, F code) {
    for (int64_t j = 0; j < t.shape[2]; ++j)
      for (int64_t u = 0; u < t.shape[3]; ++u) {
        bytes[static_cast<size_t>(Unit(0, h, j, u) - bytes.data())] =
            code(static_cast<uint8_t>(*n));
        *n += 7;
      }
  }
  const uint8_t* Unit(int64_t b, int64_t h, int64_t j, int64_t u) const {
    return bytes.data() +
           (b * t.stride[0] + h * t.stride[1] + j * t.stride[2] + u) * UnitBytes(f.type);
  }
  float ScaleOf(int64_t b, int64_t h, int64_t j, int64_t d) const {
    const int64_t* s = scale.shape;
    const int64_t g = t.shape[3] / s[3];
    return scale.at(s[0] == 1 ? 0 : b, s[1] == 1 ? 0 : h, s[2] == 1 ? 0 : j / f.rows, d / g);
  }
  // The header's definition of element (b, h, j, d).
  float Value(int64_t b, int64_t h, int64_t j, int64_t d) const {
    if (Blocked(f.type)) {
      const uint8_t* blk = Unit(b, h, j, d / 32);
      uint16_t dh;
      std::memcpy(&dh, blk, 2);
      const float scale16 = base::F16ToF32(dh);
      const int i = static_cast<int>(d % 32);
      const int q = f.type == OCTATTN_DTYPE_Q8_0
                        ? static_cast<int8_t>(blk[2 + i])
                        : (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
      return scale16 * static_cast<float>(q);
    }
    const uint8_t c = *Unit(b, h, j, d);
    const float x = f.type == OCTATTN_DTYPE_INT8 ? static_cast<float>(static_cast<int8_t>(c))
                                                 : static_cast<float>(Fp8Definition(c, f.type));
    return has_scale ? ScaleOf(b, h, j, d) * x : x;
  }
  octattn_tensor* ptr() { return &t; }
  const octattn_tensor* ScalePtr() const { return has_scale ? scale.ptr() : nullptr; }
};

const Format kFormats[] = {
    {OCTATTN_DTYPE_INT8, 32, 1},    {OCTATTN_DTYPE_INT8, 0, 1},
    {OCTATTN_DTYPE_INT8, 1, 16},    {OCTATTN_DTYPE_FP8_E4M3, -1, 1},
    {OCTATTN_DTYPE_FP8_E4M3, 0, 1}, {OCTATTN_DTYPE_FP8_E5M2, 16, 1},
    {OCTATTN_DTYPE_Q8_0, 0, 1},     {OCTATTN_DTYPE_Q4_0, 0, 1},
};

// A problem whose k and v are quantized caches of f's format (v: per-token scales where
// k is KIVI's by-channel), with the f32 tensors of their values.
struct QuantProblem {
  Problem p;
  Cache k, v;
  QuantProblem(Context& ctx, int64_t B, int64_t Hq, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D,
               Format f, int layout, uint32_t seed)
      : p(B, Hq, Hkv, Tq, Tk, D, D, seed, 1.0f, layout),
        k(ctx, p.k, f, layout, seed + 7),
        v(ctx, p.v, f.rows > 1 ? Format{f.type, 32, 1} : f, layout, seed + 8) {}
  octattn_attention_options Options(octattn_attention_options o) const {
    o.k_scale = k.ScalePtr();
    o.v_scale = v.ScalePtr();
    o.k_scale_rows = k.f.rows;
    o.v_scale_rows = v.f.rows;
    return o;
  }
};

// The integer key formats of OCTATTN_QK_INT8 and the blocks q is rounded in there.
const Format kIntFormats[] = {
    {OCTATTN_DTYPE_INT8, 32, 1}, {OCTATTN_DTYPE_INT8, 0, 1}, {OCTATTN_DTYPE_INT8, 16, 1},
    {OCTATTN_DTYPE_INT8, 1, 16}, {OCTATTN_DTYPE_Q8_0, 0, 1}, {OCTATTN_DTYPE_Q4_0, 0, 1},
};
int64_t QkBlock(const Format& f, int64_t head_dim) {
  if (Blocked(f.type)) return 32;
  const int64_t g = f.group > 0 ? f.group : head_dim;
  int64_t b = 32;
  while (g % b != 0) b /= 2;
  return b;
}

// q rounded as the header defines OCTATTN_QK_INT8, by this test's own arithmetic: per
// block, u = max|x| / 127 in f32 and n = round-half-even(x * 127 / max|x|); u * n.
Tensor RoundedQ(const Tensor& q, int64_t block) {
  Tensor r = q;
  const int64_t D = q.shape[3];
  for (int64_t b = 0; b < q.shape[0]; ++b)
    for (int64_t h = 0; h < q.shape[1]; ++h)
      for (int64_t i = 0; i < q.shape[2]; ++i)
        for (int64_t d0 = 0; d0 < D; d0 += block) {
          float amax = 0;
          for (int64_t d = d0; d < d0 + block; ++d)
            amax = std::fmax(amax, std::fabs(q.at(b, h, i, d)));
          const float u = amax / 127.0f;
          for (int64_t d = d0; d < d0 + block; ++d) {
            const double n = amax == 0 ? 0.0 : std::nearbyint(q.at(b, h, i, d) * 127.0 / amax);
            r.at(b, h, i, d) = u * static_cast<float>(std::fmax(-127.0, std::fmin(127.0, n)));
          }
        }
  return r;
}

// The quantized call's o and lse, and the f32 call's on the dequantized cache: the same
// bytes (same algorithm and target).
void ExpectAsDequantized(Context& ctx, QuantProblem& qp, const octattn_attention_options& opt) {
  Tensor o = qp.p.Out(), lse = qp.p.Lse(), o32 = qp.p.Out(), lse32 = qp.p.Lse();
  const octattn_attention_options qopt = qp.Options(opt);
  REQUIRE(octattn_attention(ctx, &qopt, qp.p.q.ptr(), qp.k.ptr(), qp.v.ptr(), o.ptr(), lse.ptr(),
                            nullptr, nullptr, 0) == OCTATTN_OK);
  Attend(ctx, opt, qp.p.q, qp.k.values, qp.v.values, o32, &lse32);
  CHECK(BytesEqual(o, o32));
  CHECK(BytesEqual(lse, lse32));
}

}  // namespace

TEST_CASE("fp8: every code widens to its definition and narrows back") {
  for (octattn_dtype type : {OCTATTN_DTYPE_FP8_E4M3, OCTATTN_DTYPE_FP8_E5M2}) {
    const base::Dtype t = static_cast<base::Dtype>(type);
    for (int c = 0; c < 256; ++c) {
      const double want = Fp8Definition(static_cast<uint8_t>(c), type);
      const float got = base::Fp8ToF32(static_cast<uint8_t>(c), t);
      INFO(type << " code " << c);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        CHECK(std::isnan(base::Fp8ToF32(base::F32ToFp8(got, t), t)));
        continue;
      }
      CHECK(static_cast<double>(got) == want);
      if (std::isinf(want)) continue;
      CHECK(base::F32ToFp8(got, t) == c);
    }
  }
}

TEST_CASE("fp8: narrowing rounds to nearest even and saturates") {
  for (octattn_dtype type : {OCTATTN_DTYPE_FP8_E4M3, OCTATTN_DTYPE_FP8_E5M2}) {
    const base::Dtype t = static_cast<base::Dtype>(type);
    const uint8_t top = type == OCTATTN_DTYPE_FP8_E4M3 ? 0x7E : 0x7B;
    // Between consecutive positive codes: below the midpoint, the midpoint, above it.
    for (int c = 0; c < top; ++c) {
      const double a = Fp8Definition(static_cast<uint8_t>(c), type);
      const double b = Fp8Definition(static_cast<uint8_t>(c + 1), type);
      const float mid = static_cast<float>((a + b) / 2);  // exact in f32
      INFO(type << " between " << c << " and " << c + 1);
      CHECK(base::F32ToFp8(std::nextafter(mid, static_cast<float>(a)), t) == c);
      CHECK(base::F32ToFp8(std::nextafter(mid, static_cast<float>(b)), t) == c + 1);
      CHECK(base::F32ToFp8(mid, t) == (c % 2 == 0 ? c : c + 1));
      CHECK(base::F32ToFp8(-mid, t) == (0x80 | (c % 2 == 0 ? c : c + 1)));
    }
    CHECK(base::F32ToFp8(1e30f, t) == top);
    CHECK(base::F32ToFp8(-1e30f, t) == (0x80 | top));
    CHECK(std::isnan(base::Fp8ToF32(base::F32ToFp8(NAN, t), t)));
    CHECK(base::F32ToFp8(1e-30f, t) == 0);
  }
  CHECK(std::isnan(base::Fp8ToF32(base::F32ToFp8(INFINITY, base::kE4m3), base::kE4m3)));
  CHECK(std::isinf(base::Fp8ToF32(base::F32ToFp8(INFINITY, base::kE5m2), base::kE5m2)));
}

TEST_CASE("quantized caches: every path computes on the dequantized values, byte for byte",
          "[dispatch]") {
  const auto targets = AllTargets();
  const int64_t kv = SmallSized(1104, 304);  // whole blocks of KIVI's 16 rows
  int n = 0;
  for (const Format& f : kFormats) {
    // The small runs (emulated CPUs, sanitizers) take one layout a format, in turn, and
    // leave out the square problem's windows and full attention (the native run's).
    const bool small = Small();
    for (int layout : {kBHTD, kBTHD}) {
      if (small && layout != (n % 2 ? kBTHD : kBHTD)) continue;
      Context ctx;
      // Decode (a GQA group stacked: four rows a kv head; thirteen, a block of eight and
      // five padded to eight; seven padded to eight, where AVX2 sums blocks of four), a
      // chunked prefill over a cached prefix, a prefill.
      QuantProblem decode(ctx, 2, 8, 2, 1, kv, 64, f, layout, 11);
      QuantProblem decode13(ctx, 1, 13, 1, 1, kv, 64, f, layout, 13);
      QuantProblem decode7(ctx, 1, 7, 1, 1, kv, 64, f, layout, 7);
      QuantProblem chunk(ctx, 1, 4, 2, 37, kv, 64, f, layout, 23);
      QuantProblem square(ctx, 1, 2, 1, 160, 160, 64, f, layout, 31);
      for (const Target& tg : targets) {
        INFO(f.Name() << " layout " << layout << " " << tg.Name());
        ctx.Use(tg);
        ExpectAsDequantized(ctx, decode, Options());
        ExpectAsDequantized(ctx, decode, Options(1, 100, 64));
        ExpectAsDequantized(ctx, decode13, Options());
        ExpectAsDequantized(ctx, decode7, Options());
        ExpectAsDequantized(ctx, chunk, Options());
        if (!small) {
          ExpectAsDequantized(ctx, square, Options(1, 48, 16));
          ExpectAsDequantized(ctx, square, Options(0));
        }
        ExpectAsDequantized(ctx, square, Options(1, 0, 0, OCTATTN_ALGORITHM_NAIVE));
        octattn_attention_options mods = Options();
        std::vector<float> sinks = {0.5f, -1.0f}, slopes = {0.01f, 0.02f};
        mods.sinks = sinks.data();
        mods.alibi_slopes = slopes.data();
        mods.softcap = 20.0f;
        ExpectAsDequantized(ctx, square, mods);
      }
      if (!small) ExpectAsDequantized(ctx, chunk, Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE));
    }
    ++n;
  }
}

TEST_CASE("quantized caches: fp8 caches of every finite code compute on their values",
          "[dispatch]") {
  // Every finite code (subnormals, zeros of both signs, the largest) at positions a
  // decode step reads, on every target (the eight-lane AVX targets widen fp8 through
  // F16C): the bytes of the f32 call on the values.
  const auto targets = AllTargets();
  for (const Format& f : kFormats) {
    if (f.type != OCTATTN_DTYPE_FP8_E4M3 && f.type != OCTATTN_DTYPE_FP8_E5M2) continue;
    const bool e4 = f.type == OCTATTN_DTYPE_FP8_E4M3;
    Context ctx;
    const int64_t T = 300, D = 64;
    QuantProblem qp(ctx, 1, 4, 1, 1, T, D, f, kBHTD, 17);
    uint32_t n = 1;
    for (Cache* c : {&qp.k, &qp.v}) {
      c->SetCodes(0, &n, [&](uint8_t code) {
        const bool special = e4 ? (code & 0x7F) == 0x7F : (code & 0x7F) >= 0x7C;
        return special ? static_cast<uint8_t>((code & 0x80) | 0x01) : code;
      });
      c->Revalue();
    }
    for (const Target& tg : targets) {
      INFO(f.Name() << " " << tg.Name());
      ctx.Use(tg);
      ExpectAsDequantized(ctx, qp, Options());
    }
  }
}

TEST_CASE("quantized caches: fp8 NaN and infinity codes a decode step reads give the f32 bytes",
          "[dispatch]") {
  // Codes of every kind around a few specials (e4m3's NaN, e5m2's infinities and NaNs):
  // in value rows (the keys around them read as usual) and in one key row (every score
  // of it NaN), so that the steps without specials (e4m3 on the 16-lane targets) and
  // the ones with them meet in one tile: the bytes of the f32 call on the values.
  const auto targets = AllTargets();
  for (const Format& f : kFormats) {
    if (f.type != OCTATTN_DTYPE_FP8_E4M3 && f.type != OCTATTN_DTYPE_FP8_E5M2) continue;
    const bool e4 = f.type == OCTATTN_DTYPE_FP8_E4M3;
    const std::vector<uint8_t> specials =
        e4 ? std::vector<uint8_t>{0x7F, 0xFF} : std::vector<uint8_t>{0x7C, 0xFC, 0x7E, 0xFD};
    for (const bool in_keys : {false, true}) {
      Context ctx;
      const int64_t T = 300, D = 64;
      QuantProblem qp(ctx, 1, 4, 1, 1, T, D, f, kBHTD, 29);
      uint32_t n = 5;
      for (Cache* c : {&qp.k, &qp.v})
        c->SetCodes(0, &n, [&](uint8_t code) {
          return (e4 ? (code & 0x7F) == 0x7F : (code & 0x7F) >= 0x7C) ? uint8_t{0x11} : code;
        });
      Cache& c = in_keys ? qp.k : qp.v;
      // (each value dimension's special in one key: each output element shows its own)
      const std::vector<std::pair<int64_t, int64_t>> at =
          in_keys ? std::vector<std::pair<int64_t, int64_t>>{{77, 0}, {77, 40}, {77, D - 1}}
                  : std::vector<std::pair<int64_t, int64_t>>{{3, 0},  {40, 17},  {41, D - 1},
                                                             {41, 5}, {130, 33}, {299, 30}};
      size_t i = 0;
      for (const auto& [j, u] : at)
        *const_cast<uint8_t*>(c.Unit(0, 0, j, u)) = specials[i++ % specials.size()];
      for (Cache* cc : {&qp.k, &qp.v})
        cc->values.ForEach([&](int64_t b, int64_t h, int64_t j, int64_t d) {
          float x = cc->Value(b, h, j, d);
          if (std::isnan(x)) {  // the NaN the library widens the code to (base::Fp8ToF32)
            x = base::Fp8ToF32(*cc->Unit(b, h, j, d), static_cast<base::Dtype>(f.type));
            if (cc->has_scale) x = cc->ScaleOf(b, h, j, d) * x;
          }
          cc->values.at(b, h, j, d) = x;
        });
      for (const Target& tg : targets) {
        INFO(f.Name() << (in_keys ? " keys " : " values ") << tg.Name());
        ctx.Use(tg);
        ExpectAsDequantized(ctx, qp, Options());
      }
    }
  }
}

TEST_CASE("quantized caches: fp8 scales at the edges of float's range compute on their values",
          "[dispatch]") {
  // One e4m3 scale for the tensor and one per head (decode reads each once, and takes the
  // 2^-8 of F16C's widened codes into it where that stays exact) at the ends of float's
  // range: the bytes of the f32 call on the values, on every target. Codes of magnitude
  // below 2^-4 under the large scales keep the scores finite.
  const auto targets = AllTargets();
  for (const Format& f : kFormats) {
    if (f.type != OCTATTN_DTYPE_FP8_E4M3) continue;
    for (const float s : {0.75f, 0x1p-126f, 0x1p-130f, 0.0f, -0.0f, 0x1.fffffep119f, 0x1p120f,
                          0x1p121f, -0x1.8p-3f}) {
      INFO(f.Name() << " scale " << s);
      Context ctx;
      const int64_t T = 320, D = 64;
      QuantProblem qp(ctx, 1, 8, 2, 1, T, D, f, kBHTD, 23);
      const bool big = std::fabs(s) >= 0x1p100f;
      uint32_t n = 3;
      for (Cache* c : {&qp.k, &qp.v}) {
        c->scale.ForEach(
            [&](int64_t b, int64_t h, int64_t j, int64_t d) { c->scale.at(b, h, j, d) = s; });
        for (int64_t h = 0; h < 2; ++h)
          c->SetCodes(h, &n, [&](uint8_t code) {
            if (big) code &= 0x97;  // exponent field at most 2
            return (code & 0x7F) == 0x7F ? uint8_t{0x01} : code;
          });
        c->Revalue();
      }
      for (const Target& tg : targets) {
        INFO(tg.Name());
        ctx.Use(tg);
        ExpectAsDequantized(ctx, qp, Options());
      }
    }
  }
}

TEST_CASE("quantized caches: decode equals prefill, and threads change no byte") {
  const int64_t T = SmallSized(1296, 208);
  // Query heads per kv head: four; two, whose decode pads a block of two rows to four;
  // seven and thirteen, whose blocks of seven and five rows run as eight (on AVX2 the
  // scores; its weighted sums in blocks of four, three padded to four, and one); nine, a
  // block of eight and one row alone.
  for (const Format& f : kFormats)
    for (int32_t qk : {OCTATTN_QK_EXACT, OCTATTN_QK_INT8})
      for (int64_t H : {4, 2, 7, 13, 9}) {
        if (qk == OCTATTN_QK_INT8 && Scaled(f.type) && f.type != OCTATTN_DTYPE_INT8) continue;
        INFO(f.Name() << " qk_precision " << qk << " heads " << H);
        Context one(1), two(2);
        QuantProblem qp(one, 1, H, 1, T, T, 64, f, kBTHD, 5);
        Tensor full = qp.p.Out(), full2 = qp.p.Out();
        octattn_attention_options opt = qp.Options(Options());
        opt.qk_precision = qk;
        REQUIRE(octattn_attention(one, &opt, qp.p.q.ptr(), qp.k.ptr(), qp.v.ptr(), full.ptr(),
                                  nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
        REQUIRE(octattn_attention(two, &opt, qp.p.q.ptr(), qp.k.ptr(), qp.v.ptr(), full2.ptr(),
                                  nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
        CHECK(BytesEqual(full, full2));
        for (int64_t i : {int64_t{0}, T / 2, T - 1}) {
          // Query row i alone, over keys 0..i of the same cache (a view of its first rows).
          octattn_tensor q1 = qp.p.q.t, k1 = qp.k.t, v1 = qp.v.t;
          q1.shape[2] = 1;
          q1.data = &qp.p.q.at(0, 0, i, 0);
          k1.shape[2] = v1.shape[2] = i + 1;
          Tensor o1(1, H, 1, 64);
          octattn_attention_options o = opt;
          Tensor ks, vs;  // INT8 scales: the rows of the view's keys
          octattn_tensor kst, vst;
          if (qp.k.f.type == OCTATTN_DTYPE_INT8) {
            kst = qp.k.scale.t;
            kst.shape[2] = (i + 1 + qp.k.f.rows - 1) / qp.k.f.rows;
            vst = qp.v.scale.t;
            vst.shape[2] = i + 1;
            o.k_scale = &kst;
            o.v_scale = &vst;
          }
          INFO("row " << i);
          REQUIRE(octattn_attention(two, &o, &q1, &k1, &v1, o1.ptr(), nullptr, nullptr, nullptr,
                                    0) == OCTATTN_OK);
          bool same = true;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < 64; ++d)
              same = same && std::memcmp(&o1.at(0, h, 0, d), &full.at(0, h, i, d), 4) == 0;
          CHECK(same);
        }
      }
}

TEST_CASE("q . k in int8: every target within the bound of the rounded q's reference",
          "[dispatch]") {
  const auto targets = AllTargets();
  const int64_t kv = SmallSized(1104, 304);
  for (const Format& f : kIntFormats)
    for (int layout : {kBHTD, kBTHD}) {
      if (Small() && layout == kBHTD) continue;
      Context ctx;
      // Decode (a GQA group stacked) and a chunked prefill over a cached prefix, with a
      // window and strided columns (the gathered unit's packed tiles).
      QuantProblem decode(ctx, 2, 8, 2, 1, kv, 64, f, layout, 11);
      QuantProblem chunk(ctx, 1, 4, 2, 37, kv, 64, f, layout, 23);
      for (QuantProblem* qp : {&decode, &chunk})
        for (const octattn_attention_options& mask : {Options(), Options(1, 100, 64)}) {
          // The reference on this test's rounded q and the dequantized cache; the bound
          // of the f32 path on those values.
          const Tensor qr = RoundedQ(qp->p.q, QkBlock(f, 64));
          Tensor want = qp->p.Out();
          octattn_attention_options ref = mask;
          ref.algorithm = OCTATTN_ALGORITHM_REFERENCE;
          Attend(ctx, ref, qr, qp->k.values, qp->v.values, want);
          const double bound = Bound(qr, qp->k.values, qp->v.values);
          octattn_attention_options opt = qp->Options(mask);
          opt.qk_precision = OCTATTN_QK_INT8;
          // Highway's avx512 and avx512_bf16 (its vpdpbusd) give the same bytes, so that
          // auto may run such calls on either (kernels::HighwayQkInt8).
          Tensor plain, dot, plain16, dot16;  // (16: q and o in bf16)
          for (const Target& tg : targets) {
            INFO(f.Name() << " layout " << layout << " q_len " << qp->p.q.shape[2] << " window "
                          << mask.window << " " << tg.Name());
            ctx.Use(tg);
            Tensor o = qp->p.Out();
            REQUIRE(octattn_attention(ctx, &opt, qp->p.q.ptr(), qp->k.ptr(), qp->v.ptr(), o.ptr(),
                                      nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
            CHECK(MaxDiff(o, want) <= bound);
            if (tg.backend != OCTATTN_BACKEND_HIGHWAY ||
                (tg.target != OCTATTN_TARGET_AVX512 && tg.target != OCTATTN_TARGET_AVX512_BF16))
              continue;
            Tensor o16 = qp->p.Out();
            const Dtypes bf16{OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16};
            REQUIRE(Run(bf16, ctx, &opt, qp->p.q.ptr(), qp->k.ptr(), qp->v.ptr(), o16.ptr(),
                        nullptr, nullptr) == OCTATTN_OK);
            (tg.target == OCTATTN_TARGET_AVX512 ? plain : dot) = o;
            (tg.target == OCTATTN_TARGET_AVX512 ? plain16 : dot16) = o16;
          }
          if (plain.buf.size() && dot.buf.size()) {
            CHECK(BytesEqual(plain, dot));
            CHECK(BytesEqual(plain16, dot16));
          }
          opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;  // the library's reference: the same q
          Tensor o = qp->p.Out();
          REQUIRE(octattn_attention(ctx, &opt, qp->p.q.ptr(), qp->k.ptr(), qp->v.ptr(), o.ptr(),
                                    nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
          CHECK(MaxDiff(o, want) <= bound);
        }
    }
}

TEST_CASE("q . k in int8: auto runs it on the CPU's int8 dot products", "[dispatch]") {
  namespace k = octattn::kernels;
  // The choice itself: avx512_bf16's table for the plain avx512 unit where the CPU runs
  // it, any other table its own.
  const k::Table* plain = k::HighwayTable(k::kAvx512);
  const k::Table* dot = k::HighwayTable(k::kAvx512Bf16);
  if (plain) CHECK(k::HighwayQkInt8(plain) == (dot ? dot : plain));
  if (dot) CHECK(k::HighwayQkInt8(dot) == dot);
  for (k::Target t : {k::kScalar, k::kAvx2, k::kAmxBf16})
    if (const k::Table* other = k::HighwayTable(t)) CHECK(k::HighwayQkInt8(other) == other);
  CHECK(k::HighwayQkInt8(nullptr) == nullptr);
  // What a context runs: under auto, an exact call the context's target and an int8 one
  // HighwayQkInt8's; with a target set, that target for both.
  Context ctx;
  REQUIRE(octattn_context_set_target(ctx, OCTATTN_BACKEND_AUTO, OCTATTN_TARGET_AUTO) == OCTATTN_OK);
  QuantProblem qp(ctx, 1, 4, 1, 1, 96, 64, {OCTATTN_DTYPE_INT8, 32, 1}, kBHTD, 3);
  auto ran = [&](int32_t qk) {
    octattn_attention_options opt = qp.Options(Options());
    opt.qk_precision = qk;
    Tensor o = qp.p.Out();
    REQUIRE(octattn_attention(ctx, &opt, qp.p.q.ptr(), qp.k.ptr(), qp.v.ptr(), o.ptr(), nullptr,
                              nullptr, nullptr, 0) == OCTATTN_OK);
    octattn_run_info info{};
    info.struct_size = sizeof(info);
    REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
    return info.target;
  };
  const k::Table* best = k::HighwayBest();
  REQUIRE(best != nullptr);
  CHECK(ran(OCTATTN_QK_EXACT) == static_cast<octattn_target>(best->target));
  CHECK(ran(OCTATTN_QK_INT8) == static_cast<octattn_target>(k::HighwayQkInt8(best)->target));
  const octattn_target chosen = static_cast<octattn_target>(best->target);
  REQUIRE(octattn_context_set_target(ctx, OCTATTN_BACKEND_HIGHWAY, chosen) == OCTATTN_OK);
  CHECK(ran(OCTATTN_QK_INT8) == chosen);
  REQUIRE(octattn_context_set_target(ctx, OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO) ==
          OCTATTN_OK);
  CHECK(ran(OCTATTN_QK_INT8) == static_cast<octattn_target>(k::HighwayQkInt8(best)->target));
}

TEST_CASE("quantized caches: paged and ragged batches equal their contiguous calls") {
  const int64_t kv = SmallSized(700, 130), bs = 16, blocks_per = (kv + bs - 1) / bs;
  for (const Format& f : kFormats) {
    INFO(f.Name());
    Context ctx;
    const int64_t B = 2, H = 2, D = 64;
    Problem p(B, 4, H, 1, kv, D, D, 3);
    // The pool: [B * blocks_per, H, bs, D], sequence b's block i at id (i * B + b)
    // (interleaved), with the same logical rows as p's k and v.
    Tensor kpool(B * blocks_per, H, bs, D), vpool(B * blocks_per, H, bs, D);
    std::vector<int32_t> table(static_cast<size_t>(B * blocks_per));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < blocks_per; ++i)
        table[b * blocks_per + i] = static_cast<int32_t>(i * B + b);
    kpool.Fill(9);
    vpool.Fill(10);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < kv; ++j)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t id = table[b * blocks_per + j / bs];
            kpool.at(id, h, j % bs, d) = p.k.at(b, h, j, d);
            vpool.at(id, h, j % bs, d) = p.v.at(b, h, j, d);
          }
    const Format vf = f.rows > 1 ? Format{f.type, 32, 1} : f;
    Cache kq(ctx, kpool, f, kBHTD, 1), vq(ctx, vpool, vf, kBHTD, 2);
    octattn_attention_options paged = Options();
    paged.block_table = table.data();
    paged.block_table_cols = blocks_per;
    std::vector<int64_t> lens = {kv, kv - 37};
    paged.kv_lens = lens.data();
    paged.k_scale = kq.ScalePtr();
    paged.v_scale = vq.ScalePtr();
    paged.k_scale_rows = f.rows;
    Tensor o = p.Out(), o32 = p.Out();
    REQUIRE(octattn_attention(ctx, &paged, p.q.ptr(), kq.ptr(), vq.ptr(), o.ptr(), nullptr, nullptr,
                              nullptr, 0) == OCTATTN_OK);
    octattn_attention_options plain = paged;
    plain.k_scale = plain.v_scale = nullptr;
    plain.k_scale_rows = 0;
    Attend(ctx, plain, p.q, kq.values, vq.values, o32);
    CHECK(BytesEqual(o, o32));
  }
  // Ragged: two sequences packed along the rows of batch entry 0.
  for (const Format& f : kFormats) {
    INFO("ragged " << f.Name());
    Context ctx;
    const int64_t rows = SmallSized(608, 160);
    QuantProblem qp(ctx, 1, 4, 2, rows, rows, 64, f, kBTHD, 17);
    std::vector<int64_t> cu = {0, rows / 3, rows};
    octattn_attention_options opt = Options();
    opt.sequences = 2;
    opt.cu_seqlens_q = cu.data();
    opt.cu_seqlens_k = cu.data();
    ExpectAsDequantized(ctx, qp, opt);
  }
}

TEST_CASE("quantized caches: rows no query reads never reach an output") {
  // Row 0 at position p reads keys 0..p; the rows after p hold every hostile pattern:
  // NaN and Inf codes, NaN, zero and Inf scales.
  const int64_t T = 304, p = 170;
  for (const Format& f : kFormats) {
    INFO(f.Name());
    Context ctx;
    QuantProblem clean(ctx, 1, 2, 1, 1, T, 64, f, kBHTD, 41);
    QuantProblem dirty = clean;
    dirty.k.t.data = dirty.k.bytes.data();
    dirty.v.t.data = dirty.v.bytes.data();
    for (Cache* c : {&dirty.k, &dirty.v}) {
      const int64_t units = Blocked(f.type) ? 2 : 64;
      for (int64_t j = p + 1; j < T; ++j)
        for (int64_t u = 0; u < units; ++u) {
          uint8_t* at = const_cast<uint8_t*>(c->Unit(0, 0, j, u));
          if (Blocked(f.type)) {
            const uint16_t nan = j % 2 ? 0x7E00 : 0x7C00;
            std::memcpy(at, &nan, 2);
          } else {
            *at = f.type == OCTATTN_DTYPE_FP8_E5M2 ? (j % 2 ? 0x7C : 0x7F) : 0x7F;
          }
        }
      // Scales of rows after p alone (per-token ones), hostile too.
      if (c->has_scale && c->scale.shape[2] > 1 && c->f.rows == 1)
        for (int64_t j = p + 1; j < T; ++j)
          for (int64_t g = 0; g < c->scale.shape[3]; ++g)
            c->scale.at(0, 0, j, g) = j % 3 == 0 ? NAN : j % 3 == 1 ? 0.0f : INFINITY;
    }
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_AUTO, p);
    const bool ints = !Scaled(f.type) || f.type == OCTATTN_DTYPE_INT8;
    for (int run = 0; run < (ints ? 5 : 3); ++run) {
      // Each algorithm, then fused and reference with q . k in int8.
      const octattn_algorithm algorithms[] = {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE,
                                              OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_FUSED,
                                              OCTATTN_ALGORITHM_REFERENCE};
      opt.algorithm = algorithms[run];
      opt.qk_precision = run >= 3 ? OCTATTN_QK_INT8 : OCTATTN_QK_EXACT;
      Tensor o1 = clean.p.Out(), o2 = clean.p.Out();
      const octattn_attention_options c1 = clean.Options(opt), c2 = dirty.Options(opt);
      REQUIRE(octattn_attention(ctx, &c1, clean.p.q.ptr(), clean.k.ptr(), clean.v.ptr(), o1.ptr(),
                                nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
      REQUIRE(octattn_attention(ctx, &c2, dirty.p.q.ptr(), dirty.k.ptr(), dirty.v.ptr(), o2.ptr(),
                                nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
      CHECK(BytesEqual(o1, o2));
      CHECK(std::isfinite(o1.at(0, 0, 0, 0)));
    }
  }
}

TEST_CASE("kv store: each format's values are within its quantization error") {
  Context ctx;
  Tensor x(2, 3, 64, 64);
  x.Fill(77, -3.0f, 3.0f);
  for (int64_t j = 0; j < 64; ++j) x.at(1, 2, j, 5) = 40.0f;  // an outlier channel
  for (const Format& f : kFormats) {
    INFO(f.Name());
    Cache c(ctx, x, f, kBHTD, 3);
    bool ok = true;
    x.ForEach([&](int64_t b, int64_t h, int64_t j, int64_t d) {
      const double v = x.at(b, h, j, d), got = c.values.at(b, h, j, d);
      double bound = 0;
      if (f.type == OCTATTN_DTYPE_INT8) {
        bound = c.ScaleOf(b, h, j, d) * 0.5 * (1 + 1e-6);
      } else if (Blocked(f.type)) {
        // Q4_0's levels are -8 .. 7 times d: the value opposite the largest one's sign
        // may be a whole step off.
        uint16_t dh;
        std::memcpy(&dh, c.Unit(b, h, j, d / 32), 2);
        const double step = f.type == OCTATTN_DTYPE_Q4_0 ? 1.0 : 0.5;
        bound = std::fabs(base::F16ToF32(dh)) * step * (1 + 1e-6);
      } else {
        const double s = c.ScaleOf(b, h, j, d);
        const double rel = f.type == OCTATTN_DTYPE_FP8_E4M3 ? 1.0 / 16 : 1.0 / 8;
        bound =
            std::fabs(v) * rel + s * std::ldexp(1.0, f.type == OCTATTN_DTYPE_FP8_E4M3 ? -10 : -17);
      }
      if (!(std::fabs(got - v) <= bound)) ok = false;
    });
    CHECK(ok);
    if (f.type == OCTATTN_DTYPE_INT8 && f.rows == 1 && f.group == 32) {
      // s = max|x| / 127 of its group, exactly.
      float m = 0;
      for (int64_t d = 0; d < 32; ++d) m = std::fmax(m, std::fabs(x.at(0, 1, 7, d)));
      CHECK(c.scale.at(0, 1, 7, 0) == m / 127.0f);
    }
    if (f.type == OCTATTN_DTYPE_Q4_0) {  // the largest magnitude is exactly -8 d
      float m = 0;
      for (int64_t d = 0; d < 32; ++d)
        if (std::fabs(x.at(0, 0, 3, d)) > std::fabs(m)) m = x.at(0, 0, 3, d);
      uint16_t dh;
      std::memcpy(&dh, c.Unit(0, 0, 3, 0), 2);
      CHECK(dh == base::F32ToF16(m / -8.0f));
    }
  }
  // 16-bit and f32 caches: the rounding of each value.
  for (octattn_dtype t : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    std::vector<uint8_t> buf(static_cast<size_t>(2 * 3 * 64 * 64 * 4));
    octattn_tensor dst = x.t;
    dst.data = buf.data();
    dst.dtype = t;
    REQUIRE(octattn_kv_store(ctx, x.ptr(), &dst, nullptr, 0, nullptr) == OCTATTN_OK);
    bool ok = true;
    x.ForEach([&](int64_t b, int64_t h, int64_t j, int64_t d) {
      const int64_t i = b * x.t.stride[0] + h * x.t.stride[1] + j * x.t.stride[2] + d;
      const float v = x.at(b, h, j, d);
      if (t == OCTATTN_DTYPE_F32) {
        ok = ok && std::memcmp(buf.data() + 4 * i, &v, 4) == 0;
      } else {
        uint16_t h16;
        std::memcpy(&h16, buf.data() + 2 * i, 2);
        ok = ok && h16 == Narrow(v, t);
      }
    });
    CHECK(ok);
  }
}

TEST_CASE("kv store: every target writes the bytes of the scalar definitions", "[dispatch]") {
  // Rows of hostile values: normal ones, a NaN and an infinity in one group each, zeros,
  // f32 subnormals, values past every format's range, halfway points of int8 steps, a
  // row whose last group alone is zero (the vector stores take four groups at a time),
  // and bf16's rounding edges; stored as 6 rows a head (a decode step's few rows, whose
  // whole lines go past the caches) and as 24 (a prefill's, cached stores).
  constexpr int64_t D = 128, kRows = 24;
  Tensor x(1, 2, kRows, D);
  x.Fill(31, -3.0f, 3.0f);
  for (int64_t d = 96; d < D; ++d) x.at(0, 1, 1, d) = 0.0f;
  for (int64_t d = 0; d < D; ++d) {
    x.at(0, 0, 1, d) = d == 7 ? NAN : static_cast<float>(d) - 20.5f;
    x.at(0, 0, 2, d) = d == 40 ? -INFINITY : 0.25f * static_cast<float>(d);
    x.at(0, 0, 3, d) = 0.0f;
    x.at(0, 0, 4, d) = std::ldexp(static_cast<float>(d + 1), -140);
    x.at(0, 1, 5, d) = (d % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, static_cast<int>(d % 40) - 12);
  }
  x.at(0, 1, 0, 3) = 1e30f;
  // bf16's edges (row 2 of head 1): ties to even down and up, a tie up to infinity,
  // NaNs with low payloads and the sign, subnormals with and without a carry.
  const uint32_t edges[] = {0x3F808000u, 0x3F818000u, 0x7F7F8000u, 0xFF7F8000u, 0x7F800001u,
                            0xFFC12345u, 0x7F810000u, 0x80008000u, 0x00018000u, 0x0000FFFFu,
                            0x807FFFFFu, 0x3F80FFFFu, 0x7F800000u, 0x80000000u};
  for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); ++e)
    std::memcpy(&x.at(0, 1, 2, static_cast<int64_t>(3 * e)), &edges[e], 4);
  std::vector<uint16_t> bf(D * 2 * kRows);  // the same rows as bf16 values (widened first)
  x.ForEach([&](int64_t, int64_t h, int64_t j, int64_t d) {
    bf[static_cast<size_t>((h * kRows + j) * D + d)] = base::F32ToBf16(x.at(0, h, j, d));
  });
  octattn_tensor src16 = x.t;
  src16.data = bf.data();
  src16.dtype = OCTATTN_DTYPE_BF16;
  src16.stride[3] = 1, src16.stride[2] = D, src16.stride[1] = kRows * D;
  src16.stride[0] = 2 * kRows * D;
  // (dtype, scale channels: 0 none, -1 one per kv head)
  const std::pair<octattn_dtype, int64_t> kinds[] = {
      {OCTATTN_DTYPE_F32, 0},       {OCTATTN_DTYPE_BF16, 0},      {OCTATTN_DTYPE_F16, 0},
      {OCTATTN_DTYPE_INT8, 8},      {OCTATTN_DTYPE_INT8, 16},     {OCTATTN_DTYPE_INT8, 32},
      {OCTATTN_DTYPE_INT8, 64},     {OCTATTN_DTYPE_INT8, 128},    {OCTATTN_DTYPE_FP8_E4M3, 0},
      {OCTATTN_DTYPE_FP8_E4M3, -1}, {OCTATTN_DTYPE_FP8_E5M2, 32}, {OCTATTN_DTYPE_Q8_0, 0},
      {OCTATTN_DTYPE_Q4_0, 0}};
  for (const auto& kind : kinds) {
    const octattn_dtype type = kind.first;  // (lambdas cannot capture structured bindings)
    const int64_t group = kind.second;
    for (const octattn_tensor& whole : {x.t, src16})
      for (const int64_t rows : {int64_t{6}, kRows}) {
        octattn_tensor view = whole;  // the first `rows` rows of each head
        view.shape[2] = rows;
        const octattn_tensor* src = &view;
        const int64_t n = 2 * rows;  // rows in all
        INFO("dtype " << type << " group " << group << " src " << src->dtype << " rows " << rows);
        const bool blocked = Blocked(type);
        const int64_t units = blocked ? D / 32 : D,
                      elem = blocked                     ? UnitBytes(type)
                             : type == OCTATTN_DTYPE_F32 ? 4
                             : type == OCTATTN_DTYPE_BF16 || type == OCTATTN_DTYPE_F16 ? 2
                                                                                       : 1;
        // The store into rows of contiguous elements (the target's kernel), `shift` bytes
        // past a line, adjacent or with a line between them (or two blocks: rows that lie
        // apart take streamed stores where lines are whole), or, step 2, into rows whose
        // elements lie two apart (the scalar definitions); its bytes and scales, element by
        // element.
        auto store = [&](Context& ctx, int64_t step, int64_t shift, bool apart,
                         std::vector<uint8_t>* out, Tensor* sc_out) {
          const int64_t pitch = units * step + (apart ? (blocked ? 2 : 64 / elem) : 0);
          std::vector<uint8_t> buf(static_cast<size_t>(n * pitch * elem + 128), 0xEE);
          uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) + shift;
          octattn_tensor dst{};
          dst.data = base;
          dst.dtype = type;
          for (int d = 0; d < 4; ++d) dst.shape[d] = src->shape[d];
          dst.stride[3] = step, dst.stride[2] = pitch, dst.stride[1] = rows * pitch;
          dst.stride[0] = n * pitch;
          Tensor sc = type == OCTATTN_DTYPE_INT8 ? Tensor(1, 2, rows, D / group)
                      : group != 0               ? Tensor(1, 2, 1, group < 0 ? 1 : D / group)
                                                 : Tensor(1, 1, 1, 1);
          if (type != OCTATTN_DTYPE_INT8) sc.Fill(9, 0.5f, 2.0f);
          REQUIRE(octattn_kv_store(ctx, src, &dst, group != 0 ? sc.ptr() : nullptr, 0, nullptr) ==
                  OCTATTN_OK);
          out->clear();
          for (int64_t i = 0; i < n; ++i)
            for (int64_t e = 0; e < units; ++e)
              out->insert(out->end(), base + (i * pitch + e * step) * elem,
                          base + (i * pitch + e * step + 1) * elem);
          *sc_out = sc;
        };
        std::vector<uint8_t> want, got;
        Tensor want_sc, got_sc;
        {
          Context ctx;
          store(ctx, blocked ? 1 : 2, 0, false, &want, &want_sc);
        }
        for (const Target& t : AllTargets())
          for (const int64_t shift : {0, 16})
            for (const bool apart : {false, true}) {
              INFO(t.Name() << " shift " << shift << " apart " << apart);
              Context ctx(t, 1);
              store(ctx, 1, shift, apart, &got, &got_sc);
              CHECK(got == want);
              if (type == OCTATTN_DTYPE_INT8) CHECK(BytesEqual(got_sc, want_sc));
            }
      }
  }
}

TEST_CASE("kv store: quotients at the halfway points of their rounding on every target",
          "[dispatch]") {
  // Groups whose values over the group's scale fall on, just below and just above the
  // halfway points between integers, for scales of many binades: where a target divides by
  // the scale's inverse (Q4_0 on the AVX targets), it must round as the division does.
  // Each group of 32 leads with its largest magnitude t (Q4_0: -t or t, so d has either
  // sign), the scale INT8 (groups of 32), Q8_0 or Q4_0 derives from it.
  constexpr int64_t R = 64, D = 128;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> binade(-30, 30), half8(-125, 124), half4(-8, 7), side(0, 2);
  const octattn_dtype types[] = {OCTATTN_DTYPE_INT8, OCTATTN_DTYPE_Q8_0, OCTATTN_DTYPE_Q4_0};
  for (const octattn_dtype type : types) {
    INFO("dtype " << type);
    Tensor x(1, 2, R, D);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t g = 0; g < D / 32; ++g) {
          const float t = std::ldexp(mant(rng), binade(rng));
          const bool q4 = type == OCTATTN_DTYPE_Q4_0, neg = q4 && (r + g) % 2 == 0;
          const float s = type == OCTATTN_DTYPE_INT8 ? t / 127.0f
                          : q4 ? base::F16ToF32(base::F32ToF16((neg ? -t : t) / -8.0f))
                               : base::F16ToF32(base::F32ToF16(t / 127.0f));
          x.at(0, h, r, g * 32) = neg ? -t : t;
          for (int64_t i = 1; i < 32; ++i) {
            const float v = s * (static_cast<float>(q4 ? half4(rng) : half8(rng)) + 0.5f);
            const int k = side(rng);
            x.at(0, h, r, g * 32 + i) =
                k == 1 ? v : std::nextafter(v, k == 0 ? -INFINITY : INFINITY);
          }
        }
    const bool blocked = Blocked(type);
    const int64_t units = blocked ? D / 32 : D;
    const size_t bytes = static_cast<size_t>(2 * R * units * UnitBytes(type));
    auto store = [&](const Target& t, std::vector<uint8_t>* out, Tensor* sc) {
      Context ctx(t, 1);
      out->assign(bytes, 0xEE);
      octattn_tensor dst{};
      dst.data = out->data();
      dst.dtype = type;
      for (int d = 0; d < 4; ++d) dst.shape[d] = x.shape[d];
      dst.stride[3] = 1, dst.stride[2] = units, dst.stride[1] = R * units,
      dst.stride[0] = 2 * R * units;
      *sc = Tensor(1, 2, R, D / 32);
      REQUIRE(octattn_kv_store(ctx, x.ptr(), &dst, type == OCTATTN_DTYPE_INT8 ? sc->ptr() : nullptr,
                               0, nullptr) == OCTATTN_OK);
    };
    std::vector<uint8_t> want, got;
    Tensor want_sc, got_sc;
    store(Target{OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_SCALAR}, &want, &want_sc);
    for (const Target& t : AllTargets()) {
      INFO(t.Name());
      store(t, &got, &got_sc);
      CHECK(got == want);
      if (type == OCTATTN_DTYPE_INT8) CHECK(BytesEqual(got_sc, want_sc));
    }
  }
}

TEST_CASE("kv store: slots write pools as the contiguous store writes rows, at any thread count") {
  const int64_t B = 3, H = 4, T = 32, D = 64, bs = 16, nb = 12;
  Tensor x(B, H, T, D);
  x.Fill(5);
  for (const Format& f : kFormats) {
    INFO(f.Name());
    Context one(1), two(2);
    Cache rows(one, x, f, kBHTD, 9);  // the contiguous store
    // The pool: sequence b's rows at blocks (2 * b + 1, 2 * b + 6) (slot = block * bs + row).
    const int64_t units = Blocked(f.type) ? D / 32 : D, ub = UnitBytes(f.type);
    std::vector<uint8_t> pool(static_cast<size_t>(nb * H * bs * units * ub), 0x5A), pool2;
    octattn_tensor dst{};
    dst.data = pool.data();
    dst.dtype = f.type;
    const int64_t shape[4] = {nb, H, bs, D};
    for (int d = 0; d < 4; ++d) dst.shape[d] = shape[d];
    dst.stride[3] = 1, dst.stride[2] = units, dst.stride[1] = bs * units,
    dst.stride[0] = H * bs * units;
    std::vector<int64_t> slots(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        slots[b * T + t] = (t < bs ? 2 * b + 1 : 2 * b + 6) * bs + t % bs;
    for (int64_t t = 0; t < bs; ++t) slots[T + t] = -1;  // skipped: batch entry 1's first block
    Tensor scale;
    octattn_tensor* sc = nullptr;
    if (f.type == OCTATTN_DTYPE_INT8) {
      scale = Tensor(nb, H, bs / f.rows, f.group > 0 ? D / f.group : 1);
      sc = scale.ptr();
    } else if (rows.has_scale) {
      scale = rows.scale;
      sc = scale.ptr();
    }
    const int64_t srows = f.type == OCTATTN_DTYPE_INT8 ? f.rows : 0;
    REQUIRE(octattn_kv_store(two, x.ptr(), &dst, sc, srows, slots.data()) == OCTATTN_OK);
    pool2 = pool;
    std::fill(pool.begin(), pool.end(), 0x5A);
    REQUIRE(octattn_kv_store(one, x.ptr(), &dst, sc, srows, slots.data()) == OCTATTN_OK);
    CHECK(pool == pool2);
    bool same = true, skipped = true;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t slot = (t < bs ? 2 * b + 1 : 2 * b + 6) * bs + t % bs;
          const uint8_t* at =
              pool.data() +
              ((slot / bs) * dst.stride[0] + h * dst.stride[1] + (slot % bs) * dst.stride[2]) * ub;
          if (b == 1 && t < bs) {
            for (int64_t i = 0; i < units * ub; ++i) skipped = skipped && at[i] == 0x5A;
            continue;
          }
          same =
              same && std::memcmp(at, rows.Unit(b, h, t, 0), static_cast<size_t>(units * ub)) == 0;
        }
    CHECK(same);
    CHECK(skipped);
  }
  // Big enough for the pool (2^16 values): the same bytes on one thread and two.
  Tensor big(SmallSized(4, 2), 8, SmallSized(256, 64), 128);
  big.Fill(6);
  Context one(1), two(2);
  for (const Format& f : kFormats) {
    Cache a(one, big, f, kBTHD, 4), b(two, big, f, kBTHD, 4);
    CHECK(a.bytes == b.bytes);
  }
}

TEST_CASE("quantized caches: bad input gets a status and writes nothing") {
  Context ctx;
  QuantProblem qp(ctx, 1, 2, 1, 4, 64, 64, {OCTATTN_DTYPE_INT8, 32, 1}, kBHTD, 1);
  Tensor o = qp.p.Out();
  for (float& x : o.buf) x = 7.0f;
  const Tensor canary = o;
  auto attend = [&](const octattn_attention_options& opt, const octattn_tensor* q,
                    const octattn_tensor* k, const octattn_tensor* v, octattn_tensor* out) {
    const octattn_status s =
        octattn_attention(ctx, &opt, q, k, v, out, nullptr, nullptr, nullptr, 0);
    CHECK(BytesEqual(o, canary));
    return s;
  };
  const octattn_attention_options good = qp.Options(Options());
  octattn_tensor q = qp.p.q.t, k = qp.k.t, v = qp.v.t;
  REQUIRE(octattn_attention(ctx, &good, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr, 0) ==
          OCTATTN_OK);
  for (float& x : o.buf) x = 7.0f;
  octattn_attention_options bad = good;
  bad.k_scale = nullptr;  // INT8 needs its scale
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_NULL_POINTER);
  bad = good;
  bad.k_scale_rows = -1;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  Tensor wrong(1, 1, 64, 3);  // 3 does not divide 64
  bad = good;
  bad.k_scale = wrong.ptr();
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  Tensor rows(1, 1, 63, 2);  // 63 scale rows for 64 keys
  bad.k_scale = rows.ptr();
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  Tensor b16 = qp.k.scale;  // a bool scale tensor
  octattn_tensor bool_scale = b16.t;
  bool_scale.dtype = OCTATTN_DTYPE_BOOL;
  bad.k_scale = &bool_scale;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  bad = good;  // a scale for an f32 k
  CHECK(attend(bad, &q, qp.p.k.ptr(), &v, o.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  bad = good;  // a scale overlapping o
  octattn_tensor over = qp.k.scale.t;
  over.data = o.buf.data();
  bad.k_scale = &over;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_ALIASING);
  octattn_tensor qq = k;  // a quantized q; a quantized o
  qq.shape[2] = 4;
  CHECK(attend(good, &qq, &k, &v, o.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  std::vector<uint8_t> obytes(4096);
  octattn_tensor oq = o.t;
  oq.data = obytes.data();
  oq.dtype = OCTATTN_DTYPE_INT8;
  CHECK(octattn_attention(ctx, &good, &q, &k, &v, &oq, nullptr, nullptr, nullptr, 0) ==
        OCTATTN_ERROR_UNSUPPORTED);
  // Q4_0 and Q8_0: rows of whole blocks, consecutive, aligned to their f16.
  QuantProblem q4(ctx, 1, 2, 1, 4, 64, 64, {OCTATTN_DTYPE_Q4_0, 0, 1}, kBHTD, 2);
  octattn_tensor k4 = q4.k.t;
  k4.shape[3] = 48;
  octattn_tensor q48 = q4.p.q.t;
  q48.shape[3] = 48;
  CHECK(attend(Options(), &q48, &k4, q4.v.ptr(), o.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  k4 = q4.k.t;
  k4.stride[3] = 2;
  k4.stride[2] = 4, k4.stride[1] = 256;
  CHECK(attend(Options(), q4.p.q.ptr(), &k4, q4.v.ptr(), o.ptr()) == OCTATTN_ERROR_INVALID_STRIDE);
  k4 = q4.k.t;
  k4.data = q4.k.bytes.data() + 1;
  CHECK(attend(Options(), q4.p.q.ptr(), &k4, q4.v.ptr(), o.ptr()) == OCTATTN_ERROR_MISALIGNED);
  // q . k in int8: a known precision, integer keys, and not the naive algorithm.
  bad = good;
  bad.qk_precision = 2;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  bad = good;
  bad.reserved3 = 1;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  bad = good;
  bad.qk_precision = OCTATTN_QK_INT8;
  bad.algorithm = OCTATTN_ALGORITHM_NAIVE;
  CHECK(attend(bad, &q, &k, &v, o.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  bad.algorithm = OCTATTN_ALGORITHM_AUTO;  // with weights: naive
  Tensor w = qp.p.Weights();
  CHECK(octattn_attention(ctx, &bad, &q, &k, &v, o.ptr(), nullptr, w.ptr(), nullptr, 0) ==
        OCTATTN_ERROR_UNSUPPORTED);
  CHECK(BytesEqual(o, canary));
  bad = Options();  // f32 keys; fp8 keys
  bad.qk_precision = OCTATTN_QK_INT8;
  CHECK(attend(bad, &q, qp.p.k.ptr(), qp.p.v.ptr(), o.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  QuantProblem e4(ctx, 1, 2, 1, 4, 64, 64, {OCTATTN_DTYPE_FP8_E4M3, -1, 1}, kBHTD, 3);
  bad = e4.Options(bad);
  CHECK(attend(bad, &q, e4.k.ptr(), e4.v.ptr(), o.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  // The backward and the stages take no quantized tensors.
  Tensor lse = qp.p.Lse(), g = qp.p.Out(), dq = qp.p.q, dk = qp.p.k, dv = qp.p.v;
  CHECK(octattn_attention_backward(ctx, &good, &q, &k, &v, o.ptr(), lse.ptr(), g.ptr(), nullptr,
                                   dq.ptr(), dk.ptr(), dv.ptr(), nullptr, nullptr, nullptr,
                                   0) == OCTATTN_ERROR_UNSUPPORTED);
  Tensor scores(1, 2, 4, 64);
  CHECK(octattn_scores(ctx, &q, &k, scores.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
}

namespace {

// DeepSeek V3.2's fp8 latent cache [B, 1, T] of 656-byte rows, stored from f32 latent
// rows by octattn_kv_store, and its values by the header's definition.
struct DsMlaCache {
  std::vector<uint8_t> bytes;
  octattn_tensor k{}, v{};  // k: all 576 values; v: the first 512 (the same rows)
  Tensor values, value_rows;
  DsMlaCache(Context& ctx, const Tensor& x) {
    const int64_t B = x.shape[0], T = x.shape[2];
    bytes.assign(static_cast<size_t>(B * T * 656), 0xEE);
    k.data = bytes.data();
    k.dtype = OCTATTN_DTYPE_FP8_DS_MLA;
    const int64_t shape[4] = {B, 1, T, 576}, stride[4] = {T, T, 1, 1};
    for (int d = 0; d < 4; ++d) k.shape[d] = shape[d], k.stride[d] = stride[d];
    REQUIRE(octattn_kv_store(ctx, x.ptr(), &k, nullptr, 0, nullptr) == OCTATTN_OK);
    v = k;
    v.shape[3] = 512;
    values = Tensor(B, 1, T, 576);
    value_rows = Tensor(B, 1, T, 512);
    values.ForEach([&](int64_t b, int64_t, int64_t j, int64_t d) {
      values.at(b, 0, j, d) = Value(b, j, d);
      if (d < 512) value_rows.at(b, 0, j, d) = values.at(b, 0, j, d);
    });
  }
  const uint8_t* Row(int64_t b, int64_t j) const {
    return bytes.data() + (b * k.stride[0] + j) * 656;
  }
  float Scale(int64_t b, int64_t j, int64_t g) const {
    float s;
    std::memcpy(&s, Row(b, j) + 512 + 4 * g, 4);
    return s;
  }
  float Value(int64_t b, int64_t j, int64_t d) const {
    if (d >= 512) {
      uint16_t h;
      std::memcpy(&h, Row(b, j) + 528 + 2 * (d - 512), 2);
      uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    return Scale(b, j, d / 128) *
           static_cast<float>(Fp8Definition(Row(b, j)[d], OCTATTN_DTYPE_FP8_E4M3));
  }
};

}  // namespace

// FP8_DS_MLA: the store's scales are max|x| / 448 and its values within e4m3's error of
// the latent rows (rope values: bf16's); k (576 values) and v (its first 512, the same
// rows) give every path and target, and paged pools, the bytes of the f32 call on the
// defined values.
TEST_CASE("FP8_DS_MLA latent caches: stored within e4m3's error, read as their values",
          "[dispatch]") {
  const int64_t T = SmallSized(700, 200);
  Context ctx;
  Tensor x(2, 1, T, 576);
  x.Fill(41, -2.0f, 2.0f);
  for (int64_t j = 0; j < T; j += 7) x.at(1, 0, j, 130) = 60.0f;  // an outlier channel
  const DsMlaCache c(ctx, x);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < T; ++j) {
      for (int64_t g = 0; g < 4; ++g) {
        float amax = 0.0f;
        for (int64_t d = 128 * g; d < 128 * (g + 1); ++d)
          amax = std::fmax(amax, std::fabs(x.at(b, 0, j, d)));
        REQUIRE(c.Scale(b, j, g) == amax / 448.0f);
      }
      for (int64_t d = 0; d < 576; ++d) {
        const double want = x.at(b, 0, j, d), got = c.Value(b, j, d);
        const double bound = d < 512 ? std::fabs(want) * 0x1p-4 + c.Scale(b, j, d / 128) * 0x1p-9
                                     : std::fabs(want) * 0x1p-8;
        if (std::fabs(got - want) > bound) FAIL("value " << b << "," << j << "," << d);
      }
    }
  for (const Target& tg : AllTargets()) {
    ctx.Use(tg);
    // Decode with 16 heads (stacked for the micro-kernel) and with 4 (direct tiles), a
    // chunked prefill over the cache, and the naive path.
    for (const int64_t hq : {int64_t{16}, int64_t{4}})
      for (const int64_t tq : {int64_t{1}, int64_t{37}}) {
        INFO(tg.Name() << " Hq " << hq << " Tq " << tq);
        Tensor q(2, hq, tq, 576);
        q.Fill(43, -1.0f, 1.0f);
        for (octattn_algorithm algo : {OCTATTN_ALGORITHM_AUTO, OCTATTN_ALGORITHM_NAIVE}) {
          if (algo == OCTATTN_ALGORITHM_NAIVE && tq == 1 && hq == 4) continue;
          const octattn_attention_options opt = Options(1, 0, 0, algo);
          Tensor o(2, hq, tq, 512), lse(2, hq, tq, 1), o32 = o, lse32 = lse;
          REQUIRE(octattn_attention(ctx, &opt, q.ptr(), &c.k, &c.v, o.ptr(), lse.ptr(), nullptr,
                                    nullptr, 0) == OCTATTN_OK);
          Attend(ctx, opt, q, c.values, c.value_rows, o32, &lse32);
          CHECK(BytesEqual(o, o32));
          CHECK(BytesEqual(lse, lse32));
        }
      }
  }
  {
    // Paged: vLLM's pools of latent rows, two sequences' blocks interleaved; the f32
    // call on the pools' values.
    const int64_t bs = 16, per = (T + bs - 1) / bs;
    Tensor xp(2 * per, 1, bs, 576);
    xp.Fill(47, -2.0f, 2.0f);
    const DsMlaCache pool(ctx, xp);
    std::vector<int32_t> table(static_cast<size_t>(2 * per));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < per; ++i) table[b * per + i] = static_cast<int32_t>(i * 2 + b);
    octattn_attention_options paged = Options();
    paged.block_table = table.data();
    paged.block_table_cols = per;
    std::vector<int64_t> lens = {T, T - 37};
    paged.kv_lens = lens.data();
    Tensor q(2, 16, 1, 576), o(2, 16, 1, 512), o32(2, 16, 1, 512);
    q.Fill(49, -1.0f, 1.0f);
    REQUIRE(octattn_attention(ctx, &paged, q.ptr(), &pool.k, &pool.v, o.ptr(), nullptr, nullptr,
                              nullptr, 0) == OCTATTN_OK);
    Attend(ctx, paged, q, pool.values, pool.value_rows, o32);
    CHECK(BytesEqual(o, o32));
  }
  // Bad input: more than 576 values a row, strided values, a store of other than whole rows.
  octattn_tensor wide = c.k;
  wide.shape[3] = 577;
  Tensor q(1, 4, 1, 577), o(1, 4, 1, 512);
  octattn_attention_options opt = Options();
  CHECK(octattn_attention(ctx, &opt, q.ptr(), &wide, &c.v, o.ptr(), nullptr, nullptr, nullptr, 0) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  octattn_tensor strided = c.v;
  strided.stride[3] = 2;
  Tensor q576(1, 4, 1, 576);
  CHECK(octattn_attention(ctx, &opt, q576.ptr(), &c.k, &strided, o.ptr(), nullptr, nullptr, nullptr,
                          0) == OCTATTN_ERROR_INVALID_STRIDE);
  Tensor x512(2, 1, T, 512);
  octattn_tensor dst = c.v;
  std::vector<uint8_t> keep = c.bytes;
  CHECK(octattn_kv_store(ctx, x512.ptr(), &dst, nullptr, 0, nullptr) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(keep == c.bytes);
}

TEST_CASE("kv store: bad input gets a status and writes nothing") {
  Context ctx;
  Tensor x(1, 2, 8, 64);
  x.Fill(1);
  std::vector<uint8_t> buf(2 * 8 * 64 + 64, 0x33);
  const std::vector<uint8_t> canary = buf;
  octattn_tensor dst = x.t;
  dst.data = buf.data();
  dst.dtype = OCTATTN_DTYPE_INT8;
  Tensor scale(1, 2, 8, 2);
  CHECK(octattn_kv_store(nullptr, x.ptr(), &dst, scale.ptr(), 0, nullptr) ==
        OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_kv_store(ctx, x.ptr(), &dst, nullptr, 0, nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_kv_store(ctx, x.ptr(), nullptr, scale.ptr(), 0, nullptr) ==
        OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_kv_store(ctx, x.ptr(), &dst, scale.ptr(), -1, nullptr) ==
        OCTATTN_ERROR_INVALID_OPTION);
  CHECK(octattn_kv_store(ctx, x.ptr(), &dst, scale.ptr(), 3, nullptr) ==
        OCTATTN_ERROR_INVALID_SHAPE);  // 8 rows are no multiple of 3
  Tensor s3(1, 2, 8, 3);
  CHECK(octattn_kv_store(ctx, x.ptr(), &dst, s3.ptr(), 0, nullptr) == OCTATTN_ERROR_INVALID_SHAPE);
  octattn_tensor short_dst = dst;
  short_dst.shape[2] = 7;
  CHECK(octattn_kv_store(ctx, x.ptr(), &short_dst, scale.ptr(), 0, nullptr) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  octattn_tensor self = dst;  // dst overlapping src
  self.data = x.buf.data();
  CHECK(octattn_kv_store(ctx, x.ptr(), &self, scale.ptr(), 0, nullptr) == OCTATTN_ERROR_ALIASING);
  octattn_tensor src16 = dst;  // a quantized src
  std::vector<uint8_t> other(buf.size());
  src16.data = other.data();
  CHECK(octattn_kv_store(ctx, &src16, &dst, scale.ptr(), 0, nullptr) == OCTATTN_ERROR_UNSUPPORTED);
  octattn_tensor q8 = dst;  // a scale for a dtype that takes none
  q8.dtype = OCTATTN_DTYPE_Q8_0;
  q8.stride[2] = 2, q8.stride[1] = 16;
  CHECK(octattn_kv_store(ctx, x.ptr(), &q8, scale.ptr(), 0, nullptr) ==
        OCTATTN_ERROR_INVALID_OPTION);
  octattn_tensor clash = dst;  // dst elements overlapping each other
  clash.stride[2] = 0;
  CHECK(octattn_kv_store(ctx, x.ptr(), &clash, scale.ptr(), 0, nullptr) ==
        OCTATTN_ERROR_INVALID_STRIDE);
  // Slots: out of range; INT8 scale blocks misaligned.
  octattn_tensor pool = dst;
  pool.shape[0] = 1, pool.shape[2] = 8;
  std::vector<int64_t> slots(8);
  for (int64_t i = 0; i < 8; ++i) slots[i] = i;
  slots[5] = 8;
  CHECK(octattn_kv_store(ctx, x.ptr(), &pool, scale.ptr(), 0, slots.data()) ==
        OCTATTN_ERROR_INVALID_OPTION);
  Tensor s4(1, 2, 2, 2);
  for (int64_t i = 0; i < 8; ++i) slots[i] = (i + 1) % 8;
  CHECK(octattn_kv_store(ctx, x.ptr(), &pool, s4.ptr(), 4, slots.data()) ==
        OCTATTN_ERROR_INVALID_OPTION);
  CHECK(buf == canary);
}
