// bf16 and f16 tensors: the conversions against independent oracles, every path's bytes
// against the f32 call on the widened values, paged 16-bit caches, causality with
// 16-bit NaN and Inf patterns, and the statuses of bad 16-bit input.
#include <catch2/catch.hpp>
#if defined(__x86_64__)
#include <immintrin.h>  // the AMX oracle
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>

#include "lib/base/dtype.h"
#include "support.h"

using namespace octtest;
namespace base = octattn::base;

namespace {

// The oracles: the formats' definitions in double arithmetic.
double WidenDefinition(uint16_t h, octattn_dtype type) {
  if (type == OCTATTN_DTYPE_BF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}

// The definition over all 65536 patterns of each format, evaluated once: the narrowing
// search below asks for about 16 values an element, and the tests narrow millions of
// elements (under qemu, where every ldexp is emulated, that was most of their time).
double WidenOracle(uint16_t h, octattn_dtype type) {
  auto table = [](octattn_dtype ty) {
    std::vector<double> t(65536);
    for (uint32_t i = 0; i < t.size(); ++i) t[i] = WidenDefinition(static_cast<uint16_t>(i), ty);
    return t;
  };
  static const std::vector<double> bf16 = table(OCTATTN_DTYPE_BF16), f16 = table(OCTATTN_DTYPE_F16);
  return (type == OCTATTN_DTYPE_BF16 ? bf16 : f16)[h];
}

// Round to nearest even by search: the finite neighbours of x, nearer one wins, a tie
// goes to the even pattern; beyond the largest finite value plus half a step: inf.
uint16_t NarrowOracle(float x, octattn_dtype type) {
  if (std::isnan(x)) return type == OCTATTN_DTYPE_BF16 ? 0x7FC0 : 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  const uint16_t inf = type == OCTATTN_DTYPE_BF16 ? 0x7F80 : 0x7C00;
  uint16_t lo = 0, hi = inf;  // patterns of |x|: values increase with them
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (WidenOracle(mid, type) <= a)
      lo = mid;
    else
      hi = mid;
  }
  const double top = WidenOracle(inf - 1, type);
  const double half_step = (top - WidenOracle(inf - 2, type)) / 2;
  if (a >= top + half_step) return sign | inf;  // the tie goes to inf: top is odd
  if (lo == inf - 1) return sign | lo;
  const double dl = a - WidenOracle(lo, type), dh = WidenOracle(hi, type) - a;
  const uint16_t r = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | r;
}

// A 16-bit tensor with the strides of an f32 one.
struct Tensor16 {
  std::vector<uint16_t> buf;
  octattn_tensor t{};
  Tensor16() = default;
  Tensor16(const Tensor& x, octattn_dtype type) : buf(x.buf.size()), t(x.t) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = NarrowOracle(x.buf[i], type);
    t.dtype = type;
    t.data = buf.data();
  }
  Tensor16(const Tensor16& o) : buf(o.buf), t(o.t) { t.data = buf.data(); }
  Tensor16& operator=(const Tensor16& o) {
    buf = o.buf;
    t = o.t;
    t.data = buf.data();
    return *this;
  }
  // The f32 tensor of the widened values (same strides).
  Tensor Widened(const Tensor& like) const {
    Tensor w = like;
    for (size_t i = 0; i < buf.size(); ++i)
      w.buf[i] = static_cast<float>(WidenOracle(buf[i], t.dtype));
    return w;
  }
};

// An operand in its dtype: f32 (the tensor itself) or 16-bit.
struct Operand {
  octattn_dtype type;
  Tensor f32;  // f32: the data; 16-bit: the widened values
  Tensor16 h;
  Operand(const Tensor& x, octattn_dtype ty) : type(ty), f32(x) {
    if (type != OCTATTN_DTYPE_F32) {
      h = Tensor16(x, type);
      f32 = h.Widened(x);
    }
  }
  const octattn_tensor* ptr() const { return type == OCTATTN_DTYPE_F32 ? f32.ptr() : &h.t; }
};

// o of a 16-bit call against the f32 call's o rounded by the oracle (NaN: NaN).
bool SameNarrowed(const Tensor16& o, const Tensor& o32) {
  bool same = true;
  o32.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t i = a * o.t.stride[0] + b * o.t.stride[1] + c * o.t.stride[2] + d * o.t.stride[3];
    const float x = o32.at(a, b, c, d);
    const uint16_t got = o.buf[static_cast<size_t>(i)];
    if (std::isnan(x)) {
      same &= std::isnan(WidenOracle(got, o.t.dtype));
    } else {
      same &= got == NarrowOracle(x, o.t.dtype);
    }
  });
  return same;
}

const char* DtypeName(octattn_dtype t) {
  return t == OCTATTN_DTYPE_F32 ? "f32" : t == OCTATTN_DTYPE_BF16 ? "bf16" : "f16";
}

struct Types {
  octattn_dtype q, k, v;
};
const Types kTypes[] = {{OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16},
                        {OCTATTN_DTYPE_F16, OCTATTN_DTYPE_F16, OCTATTN_DTYPE_F16},
                        {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16},
                        {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_F16, OCTATTN_DTYPE_F16},
                        {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16, OCTATTN_DTYPE_BF16},
                        {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}};

// Whether a call runs q.k on vdpbf16ps or AMX tiles (the header's avx512_bf16 and
// amx_bf16 rule): its own bytes.
bool DotBf16(octattn_target target, octattn_algorithm algo, const Types& ty, int64_t head_dim) {
  return (target == OCTATTN_TARGET_AVX512_BF16 || target == OCTATTN_TARGET_AMX_BF16) &&
         algo != OCTATTN_ALGORITHM_REFERENCE && algo != OCTATTN_ALGORITHM_NAIVE &&
         ty.q == OCTATTN_DTYPE_BF16 && ty.k == OCTATTN_DTYPE_BF16 && head_dim % 2 == 0;
}
// The header's term for such a call whose v is bf16 too (weights rounded to bf16; the
// weighted sums on vdpbf16ps where the call has no modifier and no strided columns).
double PairsTerm(octattn_target target, octattn_algorithm algo, const Types& ty, int64_t head_dim,
                 const Tensor& v) {
  return DotBf16(target, algo, ty, head_dim) && ty.v == OCTATTN_DTYPE_BF16 ? 0x1p-8 * v.MaxAbs()
                                                                           : 0.0;
}

}  // namespace

TEST_CASE("bf16 and f16: exact widening, round to nearest even", "[dtype]") {
  for (octattn_dtype type : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    INFO(DtypeName(type));
    const auto widen = [&](uint16_t h) {
      return type == OCTATTN_DTYPE_BF16 ? base::Bf16ToF32(h) : base::F16ToF32(h);
    };
    const auto narrow = [&](float x) {
      return type == OCTATTN_DTYPE_BF16 ? base::F32ToBf16(x) : base::F32ToF16(x);
    };
    for (uint32_t p = 0; p < 65536; ++p) {
      const uint16_t h = static_cast<uint16_t>(p);
      const double want = WidenOracle(h, type);
      const float got = widen(h);
      INFO("pattern " << p);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
        REQUIRE(std::isnan(widen(narrow(got))));  // NaN stays NaN
        continue;
      }
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == ((h & 0x8000) != 0));
      REQUIRE(narrow(got) == h);  // every value round-trips
      // The midpoint to the next pattern (exact in f32 for both formats): ties to even.
      if ((h & 0x7FFF) < (type == OCTATTN_DTYPE_BF16 ? 0x7F7F : 0x7BFF)) {
        const float mid =
            static_cast<float>((want + WidenOracle(static_cast<uint16_t>(h + 1), type)) / 2);
        REQUIRE(narrow(mid) == NarrowOracle(mid, type));
        REQUIRE(narrow(std::nextafter(mid, 0.0f)) == NarrowOracle(std::nextafter(mid, 0.0f), type));
        REQUIRE(narrow(std::nextafter(mid, INFINITY)) ==
                NarrowOracle(std::nextafter(mid, INFINITY), type));
      }
    }
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    for (int i = 0; i < 200000; ++i) {
      const float x =
          std::ldexp(mant(rng), static_cast<int>(rng() % 80) - 40) * (rng() % 2 ? 1 : -1);
      INFO("x " << x);
      REQUIRE(narrow(x) == NarrowOracle(x, type));
    }
    for (float x : {65504.0f, 65519.99f, 65520.0f, 1e30f, 3.4e38f, INFINITY, -INFINITY, 0.0f, -0.0f,
                    1e-8f, 2.98e-8f, 2.9802322e-8f, 1e-40f})
      REQUIRE(narrow(x) == NarrowOracle(x, type));
  }
}

// (On avx512_bf16, bf16 q and k on the fused path: within the bound instead, below.)
TEST_CASE("16-bit q, k, v and o give the bytes of the f32 call on the widened values",
          "[dtype][dispatch]") {
  struct Shape {
    int64_t hq, hkv, q_len, kv_len, d, dv;
    Layout layout;
    int32_t causal;
    int64_t window, stride;
  };
  // The small runs: a decode and a short padded prefill; the sanitized one also a long
  // decode whose tasks cover kv heads that share rows.
  std::vector<Shape> shapes =
      Small() ? std::vector<Shape>{{4, 2, 1, 300, 64, 64, Layout::kBHTD, 1, 0, 0},
                                   {2, 1, 20, 40, 24, 16, Layout::kPadded, 1, 0, 0}}
              : std::vector<Shape>{{8, 2, 1, 700, 64, 64, Layout::kBHTD, 1, 0, 0},
                                   {4, 1, 2, 1100, 128, 128, Layout::kBTHD, 1, 0, 0},
                                   {4, 2, 1, 600, 64, 64, Layout::kPadded, 0, 0, 0},
                                   {2, 2, 300, 300, 72, 48, Layout::kPadded, 1, 0, 0},
                                   {4, 2, 1, 600, 24, 16, Layout::kDimSlowest, 1, 0, 0},
                                   {2, 1, 90, 1300, 32, 32, Layout::kBHTD, 1, 200, 64},
                                   // kv heads sharing rows: decode tasks cover them all
                                   {8, 4, 1, 4500, 64, 64, Layout::kBTHD, 1, 0, 0}};
  if (Sanitized()) shapes.push_back({8, 4, 1, 2100, 64, 64, Layout::kBTHD, 1, 0, 0});
  const std::vector<Target> targets = AllTargets();
  for (const Shape& sh : shapes)
    for (const Types& ty : kTypes) {
      // The operands once per shape and types, for every target.
      Problem p(1, sh.hq, sh.hkv, sh.q_len, sh.kv_len, sh.d, sh.dv, 31, 2.0f, sh.layout);
      const Operand q(p.q, ty.q), k(p.k, ty.k), v(p.v, ty.v);
      for (const Target& t : targets)
        for (octattn_algorithm algo :
             {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
          if (algo == OCTATTN_ALGORITHM_REFERENCE && sh.q_len * sh.kv_len > 100000) continue;
          INFO(t.Name() << " " << octattn_algorithm_name(algo) << " q " << DtypeName(ty.q) << " k "
                        << DtypeName(ty.k) << " v " << DtypeName(ty.v) << " D " << sh.d << " Tq "
                        << sh.q_len << " Tk " << sh.kv_len);
          Context ctx(t, 2);
          const auto opt = Options(sh.causal, sh.window, sh.stride, algo);
          Tensor o32 = p.Out(sh.layout), lse32 = p.Lse();
          Attend(ctx, opt, q.f32, k.f32, v.f32, o32, &lse32);
          // o in f32, then in q's dtype.
          Tensor o = p.Out(sh.layout), lse = p.Lse();
          REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), lse.ptr(),
                                    nullptr, nullptr, 0) == OCTATTN_OK);
          const bool native = DotBf16(t.target, algo, ty, sh.d);
          if (native) {  // its own rounding: both within the bound of the reference
            CHECK(MaxDiff(o, o32) <=
                  2 * Bound(q.f32, k.f32, v.f32) + PairsTerm(t.target, algo, ty, sh.d, v.f32));
          } else {
            CHECK(BytesEqual(o, o32));
            CHECK(BytesEqual(lse, lse32));
          }
          if (ty.q == OCTATTN_DTYPE_F32) continue;
          Tensor16 o16(p.Out(sh.layout), ty.q);
          REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), &o16.t, nullptr, nullptr,
                                    nullptr, 0) == OCTATTN_OK);
          CHECK(SameNarrowed(o16, native ? o : o32));
        }
    }
}

TEST_CASE("16-bit results stay within the f32 bound of the reference on the widened values",
          "[dtype]") {
  Problem p(1, 4, 2, 77, 300, 64, 40, 9, 3.0f);
  for (const Types& ty : kTypes) {
    INFO("q " << DtypeName(ty.q) << " k " << DtypeName(ty.k));
    const Operand q(p.q, ty.q), k(p.k, ty.k), v(p.v, ty.v);
    Context ctx;
    Tensor ref = p.Out(), o = p.Out();
    Attend(ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE), q.f32, k.f32, v.f32, ref);
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
      const auto opt = Options(1, 0, 0, algo);
      REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), nullptr, nullptr,
                                nullptr, 0) == OCTATTN_OK);
      octattn_run_info info{};
      info.struct_size = sizeof(info);
      REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
      CHECK(MaxDiff(o, ref) <=
            Bound(q.f32, k.f32, v.f32) + PairsTerm(info.target, algo, ty, p.q.shape[3], v.f32));
    }
  }
}

namespace {

// vdpbf16ps as the header states it: per pair of dimensions one FMA with 2p + 1, then
// one with 2p, bf16 subnormals read as zero, subnormal sums flushed to zero (keeping the
// sign); the head dimension in blocks of 64, the blocks added in order.
float FlushSubnormal(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}
float DotBf16Oracle(const uint16_t* q, int64_t q_dim, const uint16_t* k, int64_t k_dim, int64_t d) {
  auto at = [](const uint16_t* x, int64_t i) {
    return FlushSubnormal(static_cast<float>(WidenOracle(x[i], OCTATTN_DTYPE_BF16)));
  };
  float total = 0.0f;
  for (int64_t b0 = 0; b0 < d; b0 += 64) {
    float acc = 0.0f;
    for (int64_t e = b0; e < std::min(d, b0 + 64); e += 2) {
      acc = FlushSubnormal(std::fma(at(q, (e + 1) * q_dim), at(k, (e + 1) * k_dim), acc));
      acc = FlushSubnormal(std::fma(at(q, e * q_dim), at(k, e * k_dim), acc));
    }
    total = b0 == 0 ? acc : total + acc;
  }
  return total;
}

bool HasTarget(octattn_target target) {
  for (const Target& t : AllTargets())
    if (t.backend == OCTATTN_BACKEND_HIGHWAY && t.target == target) return true;
  return false;
}

}  // namespace

namespace {

using ScoreOracle = float (*)(const uint16_t* q, int64_t q_dim, const uint16_t* k, int64_t k_dim,
                              int64_t d);

// With one key, lse is the scaled score itself: the scores of bf16 q and k on `target`
// against `oracle`, bit for bit, over patterns that reach the instruction's edges
// (subnormals, cancellation, overflow, Inf, NaN).
void CheckScoresBitForBit(octattn_target target, std::initializer_list<int64_t> dims,
                          ScoreOracle oracle) {
  std::mt19937 rng(17);
  for (int64_t d : dims) {
    for (Layout layout : {Layout::kBHTD, Layout::kDimSlowest}) {
      INFO("D " << d);
      const int64_t heads = 64;
      Problem p(1, heads, heads, 1, 1, d, 16, 5, 1.0f, layout);
      Tensor16 q(p.q, OCTATTN_DTYPE_BF16), k(p.k, OCTATTN_DTYPE_BF16);
      auto pattern = [&](int64_t h) -> uint16_t {
        const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
        switch (h % 8) {
          case 0:  // subnormals and zeros among normal values
            return rng() % 3
                       ? static_cast<uint16_t>(sign | (rng() & 0x7F))
                       : static_cast<uint16_t>(sign | ((100 + rng() % 40) << 7) | (rng() & 0x7F));
          case 1:  // large: products overflow f32
            return static_cast<uint16_t>(sign | ((200 + rng() % 54) << 7) | (rng() & 0x7F));
          case 2:  // tiny: sums near the subnormal range
            return static_cast<uint16_t>(sign | ((1 + rng() % 70) << 7) | (rng() & 0x7F));
          case 3:  // a few Inf and NaN
            return rng() % 40
                       ? static_cast<uint16_t>(sign | ((120 + rng() % 16) << 7) | (rng() & 0x7F))
                       : static_cast<uint16_t>(rng() % 2 ? 0x7F80 | sign : 0x7FC1);
          default:  // ordinary values of mixed magnitude
            return static_cast<uint16_t>(sign | ((110 + rng() % 30) << 7) | (rng() & 0x7F));
        }
      };
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t e = 0; e < d; ++e) {
          q.buf[static_cast<size_t>(h * q.t.stride[1] + e * q.t.stride[3])] = pattern(h);
          k.buf[static_cast<size_t>(h * k.t.stride[1] + e * k.t.stride[3])] = pattern(h);
        }
      // Cancellation: key e of heads 4 and 5 is minus the query's partner of e ^ 1.
      for (int64_t h : {4, 5})
        for (int64_t e = 0; e < d; ++e)
          k.buf[static_cast<size_t>(h * k.t.stride[1] + e * k.t.stride[3])] = static_cast<uint16_t>(
              q.buf[static_cast<size_t>(h * q.t.stride[1] + (e ^ 1) * q.t.stride[3])] ^ 0x8000);
      Tensor16 v(p.v, OCTATTN_DTYPE_BF16);
      Tensor o = p.Out(), lse = p.Lse();
      Context ctx(Target{OCTATTN_BACKEND_HIGHWAY, target}, 1);
      auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
      opt.scale = 1.0f;
      REQUIRE(octattn_attention(ctx, &opt, &q.t, &k.t, &v.t, o.ptr(), lse.ptr(), nullptr, nullptr,
                                0) == OCTATTN_OK);
      for (int64_t h = 0; h < heads; ++h) {
        const float want = oracle(q.buf.data() + h * q.t.stride[1], q.t.stride[3],
                                  k.buf.data() + h * k.t.stride[1], k.t.stride[3], d);
        const float got = lse.at(0, h, 0, 0);
        INFO("head " << h << " want " << want << " got " << got);
        if (std::isnan(want) || want == INFINITY) {
          // NaN or +Inf scores: the row's softmax is NaN (lse NaN)
          CHECK(std::isnan(got));
        } else if (want == -INFINITY) {
          CHECK(got == -INFINITY);  // the one key is masked out by its -inf score: an empty row
        } else if (want == 0.0f) {
          CHECK(got == 0.0f);  // lse = score + log(1): a -0 score comes back +0
        } else {
          CHECK(std::memcmp(&want, &got, sizeof(float)) == 0);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("avx512_bf16: bf16 scores are vdpbf16ps's chains, bit for bit", "[dtype]") {
  if (!HasTarget(OCTATTN_TARGET_AVX512_BF16)) {
    SUCCEED("this CPU has no AVX512_BF16");
    return;
  }
  CheckScoresBitForBit(OCTATTN_TARGET_AVX512_BF16, {2, 16, 64, 72, 128, 256}, DotBf16Oracle);
}

#if defined(__x86_64__)
namespace {

// AMX's sums as the header states them: each block of 64 dimensions the sum of its two
// 32-dimension tdpbf16ps steps from zero, the blocks added in order; here each score on a
// tile of one row and one column (the kernel's tiles hold up to 16 rows and 16 keys: an
// element's sum depends on its row and column alone).
__attribute__((target("amx-tile,amx-bf16"))) float AmxOracle(const uint16_t* q, int64_t q_dim,
                                                             const uint16_t* k, int64_t k_dim,
                                                             int64_t d) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;
  cfg[16] = 4, cfg[48] = 1;   // tile 0: the sum, 1 x 1
  cfg[18] = 64, cfg[49] = 1;  // tile 1: q's 16 pairs, 1 row
  cfg[20] = 4, cfg[50] = 16;  // tile 2: k's 16 pairs, a column
  _tile_loadconfig(cfg);
  alignas(64) uint16_t a[32], b[16][2];
  float total = 0.0f;
  for (int64_t b0 = 0; b0 < d; b0 += 64) {
    _tile_zero(0);
    for (int64_t e0 = b0; e0 < std::min(d, b0 + 64); e0 += 32) {
      for (int64_t e = 0; e < 32; ++e) {
        a[e] = q[(e0 + e) * q_dim];
        b[e / 2][e % 2] = k[(e0 + e) * k_dim];
      }
      _tile_loadd(1, a, 64);
      _tile_loadd(2, b, 4);
      _tile_dpbf16ps(0, 1, 2);
    }
    alignas(64) float acc[16];
    _tile_stored(0, acc, 4);
    total = b0 == 0 ? acc[0] : total + acc[0];
  }
  _tile_release();
  return total;
}

}  // namespace

TEST_CASE("amx_bf16: bf16 scores are AMX's sums, bit for bit", "[dtype]") {
  if (!HasTarget(OCTATTN_TARGET_AMX_BF16)) {
    SUCCEED("this CPU has no AMX-BF16 (or Linux did not grant its tiles)");
    return;
  }
  // head_dim a multiple of 32 on AMX tiles; 72 (other head_dims) on vdpbf16ps's chains.
  CheckScoresBitForBit(OCTATTN_TARGET_AMX_BF16, {32, 64, 96, 128, 256}, AmxOracle);
  CheckScoresBitForBit(OCTATTN_TARGET_AMX_BF16, {2, 72}, DotBf16Oracle);
}
#endif

// With every key the same, every weight is 1 (rounded to bf16: 1): o is the plain sum of
// the value rows, in vdpbf16ps's pair order, over kv_len. Packed tiles (kv 4, 300) and
// tiles read in place (a decode over 512 keys) against that chain, bit for bit.
namespace {

// A column's values (val(j), bf16 subnormals read as zero) summed with weights of 1 over
// kv keys: the bytes a target's weighted sums give.
using SumOracle = float (*)(const std::function<float(int64_t)>& val, int64_t kv);

// vdpbf16ps's pair chain: key 2m + 1, then 2m; an odd last key alone.
float PairChain(const std::function<float(int64_t)>& val, int64_t j0, int64_t j1, float acc) {
  for (int64_t j = j0; j + 1 < j1; j += 2) {
    acc = FlushSubnormal(std::fma(1.0f, val(j + 1), acc));
    acc = FlushSubnormal(std::fma(1.0f, val(j), acc));
  }
  if ((j1 - j0) % 2) acc = FlushSubnormal(std::fma(1.0f, val(j1 - 1), acc));
  return acc;
}
float PairChainOracle(const std::function<float(int64_t)>& val, int64_t kv) {
  return PairChain(val, 0, kv, 0.0f);
}

// With every key the same, every weight is 1 (rounded to bf16: 1): o is the plain sum of
// the value rows, in the target's order (`oracle`), over kv_len. Packed tiles (kv 4, 300)
// and tiles read in place (a decode over 512 keys) against that order, bit for bit.
void CheckSumsBitForBit(octattn_target target, SumOracle oracle) {
  for (int64_t n : {4, 7, 40, 300, 512}) {
    INFO("kv " << n);
    const int64_t d = 64, heads = 4;
    Problem p(1, heads, heads, 1, n, d, d, 8, 1.0f);
    for (int64_t h = 0; h < heads; ++h)  // every key row of a head the same
      for (int64_t j = 1; j < n; ++j)
        for (int64_t e = 0; e < d; ++e) p.k.at(0, h, j, e) = p.k.at(0, h, 0, e);
    Tensor16 q(p.q, OCTATTN_DTYPE_BF16), k(p.k, OCTATTN_DTYPE_BF16), v(p.v, OCTATTN_DTYPE_BF16);
    Tensor o = p.Out();
    Context ctx(Target{OCTATTN_BACKEND_HIGHWAY, target}, 1);
    const auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    REQUIRE(octattn_attention(ctx, &opt, &q.t, &k.t, &v.t, o.ptr(), nullptr, nullptr, nullptr, 0) ==
            OCTATTN_OK);
    bool same = true;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < d; ++e) {
        const std::function<float(int64_t)> val = [&](int64_t j) {
          return FlushSubnormal(static_cast<float>(WidenOracle(
              v.buf[static_cast<size_t>(h * v.t.stride[1] + j * v.t.stride[2] + e * v.t.stride[3])],
              OCTATTN_DTYPE_BF16)));
        };
        const float want = oracle(val, n) * (1.0f / static_cast<float>(n)), got = o.at(0, h, 0, e);
        same &= std::memcmp(&want, &got, sizeof(float)) == 0;
      }
    CHECK(same);
  }
}

}  // namespace

TEST_CASE("avx512_bf16: bf16 weighted sums are vdpbf16ps's pair chains, bit for bit", "[dtype]") {
  if (!HasTarget(OCTATTN_TARGET_AVX512_BF16)) {
    SUCCEED("this CPU has no AVX512_BF16");
    return;
  }
  CheckSumsBitForBit(OCTATTN_TARGET_AVX512_BF16, PairChainOracle);
}

#if defined(__x86_64__)
namespace {

// amx_bf16's sums: per tile of 256 keys, each whole group of 32 keys one tdpbf16ps step
// (here on a tile of one row and one column) continuing the sum, the keys after the
// last whole group on vdpbf16ps's pair chain.
__attribute__((target("amx-tile,amx-bf16"))) float AmxSumOracle(
    const std::function<float(int64_t)>& val, int64_t kv) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;
  cfg[16] = 4, cfg[48] = 1;   // tile 0: the sum, 1 x 1
  cfg[18] = 64, cfg[49] = 1;  // tile 1: 16 weight pairs of 1, 1 row
  cfg[20] = 4, cfg[50] = 16;  // tile 2: 16 value pairs, a column
  _tile_loadconfig(cfg);
  alignas(64) uint16_t ones[32], b[16][2];
  for (uint16_t& x : ones) x = 0x3F80;
  auto bits = [](float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    return static_cast<uint16_t>(u >> 16);  // exact: x is a widened bf16
  };
  alignas(64) float acc[16] = {};
  for (int64_t t0 = 0; t0 < kv; t0 += 256) {
    const int64_t t1 = std::min(kv, t0 + 256), g1 = t0 + (t1 - t0) / 32 * 32;
    for (int64_t g = t0; g < g1; g += 32) {
      for (int64_t e = 0; e < 32; ++e) b[e / 2][e % 2] = bits(val(g + e));
      _tile_loadd(0, acc, 4);
      _tile_loadd(1, ones, 64);
      _tile_loadd(2, b, 4);
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, acc, 4);
    }
    acc[0] = PairChain(val, g1, t1, acc[0]);
  }
  _tile_release();
  return acc[0];
}

}  // namespace

TEST_CASE("amx_bf16: bf16 weighted sums are AMX's steps and pair chains, bit for bit", "[dtype]") {
  if (!HasTarget(OCTATTN_TARGET_AMX_BF16)) {
    SUCCEED("this CPU has no AMX-BF16 (or Linux did not grant its tiles)");
    return;
  }
  CheckSumsBitForBit(OCTATTN_TARGET_AMX_BF16, AmxSumOracle);
}
#endif

namespace {

// Every dtype on every target: a decode step (tiles read in place where the shape
// allows) equals the prefill row (packed tiles), byte for byte, for a GQA group's heads
// together and for one alone.
struct DecodeShape {
  int64_t d, kv_len;
  Layout layout;
  int64_t window, stride;
};

}  // namespace

TEST_CASE("16-bit decode equals prefill, and in-place tiles packed ones, on every target",
          "[dtype][invariants][dispatch]") {
  const std::vector<DecodeShape> shapes =
      Emulated() ? std::vector<DecodeShape>{{64, 300, Layout::kBHTD, 0, 0}}
                 : std::vector<DecodeShape>{{128, 600, Layout::kBHTD, 0, 0},
                                            {72, 520, Layout::kBTHD, 0, 0},
                                            {64, 800, Layout::kBTHD, 300, 128},
                                            {32, 700, Layout::kBHTD, 333, 0}};
  // Emulated: the first three type sets (bf16 throughout, f16 throughout, f32 q with bf16
  // k and v); the test above covers the others' conversions on the same decode shape.
  const int64_t Hq = Emulated() ? 4 : 8, Hkv = 1;
  const size_t n_types = Emulated() ? 3 : std::size(kTypes);
  const std::vector<Target> targets = AllTargets();
  for (const DecodeShape& sh : shapes)
    for (const Types& ty : std::vector<Types>(kTypes, kTypes + n_types)) {
      // The operands once per shape and types, for every target.
      const int64_t n = sh.kv_len;
      Problem p(1, Hq, Hkv, n, n, sh.d, sh.d, 41, 1.5f, sh.layout);
      const Operand q(p.q, ty.q), k(p.k, ty.k), v(p.v, ty.v);
      for (const Target& t : targets) {
        INFO(t.Name() << " q " << DtypeName(ty.q) << " k " << DtypeName(ty.k) << " v "
                      << DtypeName(ty.v) << " D " << sh.d << " kv " << sh.kv_len);
        Context ctx(t, 2);
        const auto opt = Options(1, sh.window, sh.stride, OCTATTN_ALGORITHM_FUSED);
        // The prefill's rows [first, n): all natively; in the small runs (emulated,
        // sanitized) the last 9, a chunked prefill (itself promised equal to prefill).
        const int64_t first = Small() ? n - 9 : 0;
        const int64_t bytes = ty.q == OCTATTN_DTYPE_F32 ? 4 : 2;
        octattn_tensor pq = *q.ptr();
        pq.data = static_cast<char*>(pq.data) + first * pq.stride[2] * bytes;
        pq.shape[2] = n - first;
        Tensor prefill(1, Hq, n - first, sh.d, sh.layout);
        REQUIRE(octattn_attention(ctx, &opt, &pq, k.ptr(), v.ptr(), prefill.ptr(), nullptr, nullptr,
                                  nullptr, 0) == OCTATTN_OK);
        for (int64_t heads : {Hq, Hq - 1, int64_t{1}}) {
          // The last row alone, of every head, of all but one (a block of seven or three
          // rows) or of one (decode: tiles read in place where the shape allows; the
          // prefill's rows pack them).
          octattn_tensor qv = *q.ptr();
          qv.data = static_cast<char*>(qv.data) + (n - 1) * qv.stride[2] * bytes;
          qv.shape[2] = 1;
          qv.shape[1] = heads;
          Tensor o(1, heads, 1, sh.d);
          REQUIRE(octattn_attention(ctx, &opt, &qv, k.ptr(), v.ptr(), o.ptr(), nullptr, nullptr,
                                    nullptr, 0) == OCTATTN_OK);
          for (int64_t h = 0; h < heads; ++h) {
            bool same = true;
            for (int64_t e = 0; e < sh.d; ++e) {
              const float a = o.at(0, h, 0, e), b = prefill.at(0, h, n - 1 - first, e);
              same &= std::memcmp(&a, &b, sizeof(float)) == 0;
            }
            INFO("heads " << heads << " head " << h);
            CHECK(same);
          }
        }
      }
    }
}

TEST_CASE("a paged 16-bit cache gives the bytes of contiguous 16-bit keys", "[dtype]") {
  const int64_t hq = 4, hkv = 2, d = 64, bs = 16, seqs = 2, rows = 704;
  const int64_t lens[seqs] = {700, 300};
  std::mt19937 rng(3);
  for (octattn_dtype type : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16})
    for (int64_t q_len : {1, 5}) {
      INFO(DtypeName(type) << " q_len " << q_len);
      Problem p(seqs, hq, hkv, q_len, rows, d, d, 41);
      const int64_t cols = rows / bs, blocks = seqs * cols + 2;
      std::vector<int32_t> ids(static_cast<size_t>(blocks));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int32_t> table(ids.begin(), ids.begin() + seqs * cols);
      Tensor kp(blocks, hkv, bs, d, Layout::kBTHD), vp(blocks, hkv, bs, d, Layout::kBTHD);
      for (int64_t s = 0; s < seqs; ++s)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t h = 0; h < hkv; ++h)
            for (int64_t e = 0; e < d; ++e) {
              const int32_t blk = table[static_cast<size_t>(s * cols + r / bs)];
              kp.at(blk, h, r % bs, e) = p.k.at(s, h, r, e);
              vp.at(blk, h, r % bs, e) = p.v.at(s, h, r, e);
            }
      const Operand q(p.q, type), k(p.k, type), v(p.v, type), kpool(kp, type), vpool(vp, type);
      Context ctx(2);
      auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
      opt.kv_lens = lens;
      Tensor16 contiguous(p.Out(), type), paged(p.Out(), type);
      REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), &contiguous.t, nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      opt.block_table = table.data();
      opt.block_table_cols = cols;
      REQUIRE(octattn_attention(ctx, &opt, q.ptr(), kpool.ptr(), vpool.ptr(), &paged.t, nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      CHECK(paged.buf == contiguous.buf);
    }
}

// Key rows a multiple of 4 KiB apart (16 kv heads of 128 in [T, H, D]) are copied a
// group at a time before the in-place tiles read them (their value rows are read in
// place); the same rows in a vLLM pool are read where they are (on AVX-512 one key
// vector a step), as are the [H, T, D] layout's: all three the same bytes. Groups of 7
// query heads: blocks of 4, 2 and 1 rows.
TEST_CASE("rows 4 KiB apart, [T, H, D] and paged, give the bytes of [H, T, D], every target",
          "[dtype][invariants][dispatch]") {
  // The small runs (qemu, hundreds of times slower; the sanitizers): a GQA group of 2, not
  // 7, and one full tile of keys and its tail.
  const int64_t hq = SmallSized(112, 32), hkv = 16, d = 128, n = SmallSized(600, 264);
  const Types types[] = {{OCTATTN_DTYPE_F32, OCTATTN_DTYPE_F32, OCTATTN_DTYPE_F32},
                         {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16},
                         {OCTATTN_DTYPE_F16, OCTATTN_DTYPE_F16, OCTATTN_DTYPE_F16},
                         {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_BF16}};
  const int64_t block_sizes[] = {16, 3};
  std::mt19937 rng(29);
  Problem rows(1, hq, hkv, 1, n, d, d, 43, 1.0f, Layout::kBTHD);
  Problem heads(1, hq, hkv, 1, n, d, d, 43, 1.0f, Layout::kBHTD);
  heads.q.CopyValuesFrom(rows.q);
  heads.k.CopyValuesFrom(rows.k);
  heads.v.CopyValuesFrom(rows.v);
  for (const Types& ty : types) {
    const Operand q(rows.q, ty.q), k(rows.k, ty.k), v(rows.v, ty.v);
    const Operand hq_(heads.q, ty.q), hk(heads.k, ty.k), hv(heads.v, ty.v);
    // The pools: blocks of bs rows in shuffled order, [blocks, bs, hkv, d] in memory.
    struct Pool {
      std::vector<int32_t> table;
      Operand k, v;
    };
    std::vector<Pool> pools;
    for (int64_t bs : block_sizes) {
      const int64_t cols = (n + bs - 1) / bs, blocks = cols + 3;
      std::vector<int32_t> ids(static_cast<size_t>(blocks));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<int32_t> table(ids.begin(), ids.begin() + cols);
      Tensor kp(blocks, hkv, bs, d, Layout::kBTHD), vp(blocks, hkv, bs, d, Layout::kBTHD);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t e = 0; e < d; ++e) {
            const int32_t blk = table[static_cast<size_t>(r / bs)];
            kp.at(blk, h, r % bs, e) = rows.k.at(0, h, r, e);
            vp.at(blk, h, r % bs, e) = rows.v.at(0, h, r, e);
          }
      pools.push_back(Pool{table, Operand(kp, ty.k), Operand(vp, ty.v)});
    }
    for (const Target& t : AllTargets()) {
      INFO(t.Name() << " q " << DtypeName(ty.q) << " k, v " << DtypeName(ty.k));
      Context ctx(t, 2);
      auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
      Tensor o_rows = rows.Out(), o_heads = heads.Out();
      REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o_rows.ptr(), nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      REQUIRE(octattn_attention(ctx, &opt, hq_.ptr(), hk.ptr(), hv.ptr(), o_heads.ptr(), nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      CHECK(BytesEqual(o_rows, o_heads));
      for (size_t i = 0; i < pools.size(); ++i) {
        INFO("block " << block_sizes[i]);
        const int64_t len = n;
        opt.kv_lens = &len;
        opt.block_table = pools[i].table.data();
        opt.block_table_cols = static_cast<int64_t>(pools[i].table.size());
        Tensor o_paged = rows.Out();
        REQUIRE(octattn_attention(ctx, &opt, q.ptr(), pools[i].k.ptr(), pools[i].v.ptr(),
                                  o_paged.ptr(), nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
        CHECK(BytesEqual(o_paged, o_heads));
      }
    }
  }
}

TEST_CASE("causality with 16-bit NaN and Inf patterns at the edited position",
          "[dtype][invariants]") {
  const int64_t T = Sized(260, 40), hq = 4, hkv = 2, d = 32;
  for (octattn_dtype type : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    const uint16_t nan = type == OCTATTN_DTYPE_BF16 ? 0x7FC1 : 0x7E01;
    const uint16_t inf = type == OCTATTN_DTYPE_BF16 ? 0x7F80 : 0x7C00;
    const uint16_t patterns[] = {nan, inf, static_cast<uint16_t>(inf | 0x8000), 0x7BFF};
    Problem p(1, hq, hkv, T, T, d, d, 13);
    const Operand q(p.q, type), k(p.k, type), v(p.v, type);
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED})
      for (const Target& t : AllTargets()) {
        Context ctx(t, 2);
        const auto opt = Options(1, 0, 0, algo);
        Tensor16 base(p.Out(), type);
        REQUIRE(octattn_attention(ctx, &opt, &q.h.t, &k.h.t, &v.h.t, &base.t, nullptr, nullptr,
                                  nullptr, 0) == OCTATTN_OK);
        for (int64_t pos : {int64_t{0}, T / 3, T - 1})
          for (uint16_t pat : patterns) {
            INFO(t.Name() << " " << octattn_algorithm_name(algo) << " " << DtypeName(type)
                          << " position " << pos << " pattern " << pat);
            Tensor16 q2 = q.h, k2 = k.h, v2 = v.h, o(p.Out(), type);
            for (int64_t h = 0; h < hq; ++h)
              for (int64_t e = 0; e < d; ++e)
                q2.buf[static_cast<size_t>(h * q2.t.stride[1] + pos * q2.t.stride[2] + e)] = pat;
            for (int64_t h = 0; h < hkv; ++h)
              for (int64_t e = 0; e < d; ++e) {
                k2.buf[static_cast<size_t>(h * k2.t.stride[1] + pos * k2.t.stride[2] + e)] = pat;
                v2.buf[static_cast<size_t>(h * v2.t.stride[1] + pos * v2.t.stride[2] + e)] = pat;
              }
            REQUIRE(octattn_attention(ctx, &opt, &q2.t, &k2.t, &v2.t, &o.t, nullptr, nullptr,
                                      nullptr, 0) == OCTATTN_OK);
            for (int64_t h = 0; h < hq; ++h)
              for (int64_t i = 0; i < pos; ++i)
                for (int64_t e = 0; e < d; ++e) {
                  const size_t at = static_cast<size_t>(h * o.t.stride[1] + i * o.t.stride[2] + e);
                  REQUIRE(o.buf[at] == base.buf[at]);
                }
          }
      }
  }
}

TEST_CASE("bad 16-bit input: a status and a message, nothing written", "[dtype][api]") {
  Problem p(1, 2, 1, 5, 9, 8, 8, 3);
  const Operand q(p.q, OCTATTN_DTYPE_BF16), k(p.k, OCTATTN_DTYPE_BF16), v(p.v, OCTATTN_DTYPE_BF16);
  Context ctx;
  const auto opt = Options();
  auto expect = [&](octattn_status status, const octattn_tensor* qt, const octattn_tensor* kt,
                    octattn_tensor* ot, octattn_tensor* w) {
    const auto before = *static_cast<const uint32_t*>(ot->data);
    const octattn_status got =
        octattn_attention(ctx, &opt, qt, kt, v.ptr(), ot, nullptr, w, nullptr, 0);
    INFO(ctx.Error());
    CHECK(got == status);
    CHECK(!ctx.Error().empty());
    CHECK(*static_cast<const uint32_t*>(ot->data) == before);
  };
  Tensor o = p.Out();
  o.Fill(1);
  // 16-bit data at an odd address.
  Tensor16 odd = k.h;
  odd.buf.push_back(0);
  odd.t.data = reinterpret_cast<char*>(odd.buf.data()) + 1;
  expect(OCTATTN_ERROR_MISALIGNED, q.ptr(), &odd.t, o.ptr(), nullptr);
  // o neither f32 nor q's dtype.
  Tensor16 o16(p.Out(), OCTATTN_DTYPE_F16);
  expect(OCTATTN_ERROR_UNSUPPORTED, q.ptr(), k.ptr(), &o16.t, nullptr);
  // weights are f32.
  Tensor16 w16(p.Weights(), OCTATTN_DTYPE_BF16);
  expect(OCTATTN_ERROR_UNSUPPORTED, q.ptr(), k.ptr(), o.ptr(), &w16.t);
  // an unknown dtype.
  octattn_tensor unknown = *k.ptr();
  unknown.dtype = 42;
  expect(OCTATTN_ERROR_INVALID_OPTION, q.ptr(), &unknown, o.ptr(), nullptr);
  // The backward reads 16-bit inputs but writes f32 gradients only.
  Tensor lse = p.Lse(), dq(1, 2, 5, 8), dk(1, 1, 9, 8), dv(1, 1, 9, 8);
  Attend(ctx, opt, q.f32, k.f32, v.f32, o, &lse);
  const float first = dk.buf[0];
  Tensor16 dq16(dq, OCTATTN_DTYPE_BF16);
  CHECK(octattn_attention_backward(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), lse.ptr(),
                                   o.ptr(), nullptr, &dq16.t, dk.ptr(), dv.ptr(), nullptr, nullptr,
                                   nullptr, 0) == OCTATTN_ERROR_UNSUPPORTED);
  CHECK(!ctx.Error().empty());
  CHECK(dk.buf[0] == first);
}

// A row reading one key outputs that key's value row exactly (weight 1): with v in f32
// and o in q's 16-bit dtype, o is each value narrowed, by whatever vector conversion the
// target uses (F16C's for f16), which must give F32ToF16's bits, NaN payloads included.
TEST_CASE("16-bit o: every target narrows as the scalar conversions do", "[dtype][dispatch]") {
  const int64_t batch = 8, dv = 1024;
  std::vector<float> values;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (uint32_t h = 0; h < 0x7C00; h += 7) {  // f16 values, their midpoints and neighbours
    const float x = base::F16ToF32(static_cast<uint16_t>(h));
    const float mid = (x + base::F16ToF32(static_cast<uint16_t>(h + 1))) / 2;
    for (float y : {x, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
      values.push_back(rng() % 2 ? y : -y);
  }
  for (float y : {65504.0f, 65519.99f, 65520.0f, 1e30f, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-8f,
                  2.9802322e-8f, 2.98e-8f, 1e-40f})
    values.push_back(y);
  for (int i = 0; i < 2000; ++i) {  // NaNs: quiet and signaling, any payload, both signs
    const uint32_t bits = 0x7F800001u | (static_cast<uint32_t>(rng()) & 0x807FFFFFu);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  while (values.size() < static_cast<size_t>(batch * dv))
    values.push_back(std::ldexp(mant(rng), static_cast<int>(rng() % 60) - 40) *
                     (rng() % 2 ? 1 : -1));
  values.resize(static_cast<size_t>(batch * dv));
  Tensor v(batch, 1, 1, dv);
  v.buf = values;
  v.t.data = v.buf.data();
  for (octattn_dtype type : {OCTATTN_DTYPE_F16, OCTATTN_DTYPE_BF16}) {
    Tensor q(batch, 1, 1, 8), k(batch, 1, 1, 8);
    const Operand q16(q, type), k16(k, type);
    for (const Target& t : AllTargets())
      for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
        INFO(t.Name() << " " << octattn_algorithm_name(algo) << " " << DtypeName(type));
        Context ctx(t);
        Tensor16 o(Tensor(batch, 1, 1, dv), type);
        const auto opt = Options(1, 0, 0, algo);
        REQUIRE(octattn_attention(ctx, &opt, q16.ptr(), k16.ptr(), v.ptr(), &o.t, nullptr, nullptr,
                                  nullptr, 0) == OCTATTN_OK);
        size_t wrong = 0;
        for (size_t i = 0; i < values.size(); ++i) {
          const uint16_t want =
              type == OCTATTN_DTYPE_F16 ? base::F32ToF16(values[i]) : base::F32ToBf16(values[i]);
          wrong += o.buf[i] != want;
        }
        CHECK(wrong == 0);
      }
  }
}

// The stages where 16-bit operands make sense: q and k of octattn_scores, v of
// octattn_weighted_sum (scores, weights and o stay f32), with the bytes of the f32 stage
// on the widened values on every target; the head layout calls copy 16-bit elements bit
// for bit (src's and dst's dtype the same).
TEST_CASE("the stages take 16-bit q, k and v, and the head layout calls copy 16-bit elements",
          "[dtype][dispatch]") {
  for (const Target& t : AllTargets())
    for (Layout layout : {Layout::kBHTD, Layout::kDimSlowest})
      for (octattn_dtype ty : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
        INFO(t.Name() << " " << DtypeName(ty) << " layout " << static_cast<int>(layout));
        Context ctx(t, 2);
        Problem p(2, 4, 2, 9, 21, 24, 16, 51, 1.0f, layout);
        const Operand q(p.q, ty), k(p.k, ty), v(p.v, ty);
        Tensor s32(2, 4, 9, 21), s16 = s32, s_mixed = s32;
        REQUIRE(octattn_scores(ctx, q.f32.ptr(), k.f32.ptr(), s32.ptr()) == OCTATTN_OK);
        REQUIRE(octattn_scores(ctx, q.ptr(), k.ptr(), s16.ptr()) == OCTATTN_OK);
        REQUIRE(octattn_scores(ctx, q.f32.ptr(), k.ptr(), s_mixed.ptr()) == OCTATTN_OK);
        CHECK(BytesEqual(s16, s32));
        CHECK(BytesEqual(s_mixed, s32));
        Tensor w(2, 4, 9, 21);
        w.Fill(52, 0.0f, 1.0f);
        Tensor o32 = p.Out(), o16 = p.Out();
        REQUIRE(octattn_weighted_sum(ctx, w.ptr(), v.f32.ptr(), o32.ptr()) == OCTATTN_OK);
        REQUIRE(octattn_weighted_sum(ctx, w.ptr(), v.ptr(), o16.ptr()) == OCTATTN_OK);
        CHECK(BytesEqual(o16, o32));
      }
  // Head layout: [B, T, C] <-> [B, H, T, D] and packed QKV, bit for bit (NaN payloads too).
  for (octattn_dtype ty : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    INFO(DtypeName(ty));
    Context ctx;
    const int64_t b = 2, n = 5, hq = 4, hkv = 2, d = 6, c = (hq + 2 * hkv) * d;
    Tensor seq(b, n, c, 1);
    seq.Fill(53);
    Tensor16 src(seq, ty);
    for (size_t i = 0; i < src.buf.size(); i += 7) src.buf[i] = static_cast<uint16_t>(0x7F81 + i);
    Tensor16 heads(Tensor(b, hq + 2 * hkv, n, d), ty), back(seq, ty);
    for (uint16_t& x : back.buf) x = 0;
    REQUIRE(octattn_split_heads(ctx, &src.t, hq + 2 * hkv, &heads.t) == OCTATTN_OK);
    REQUIRE(octattn_merge_heads(ctx, &heads.t, &back.t) == OCTATTN_OK);
    CHECK(back.buf == src.buf);
    Tensor16 qh(Tensor(b, hq, n, d), ty), kh(Tensor(b, hkv, n, d), ty),
        vh(Tensor(b, hkv, n, d), ty);
    REQUIRE(octattn_split_qkv(ctx, &src.t, hq, hkv, &qh.t, &kh.t, &vh.t) == OCTATTN_OK);
    bool same = true;
    for (int64_t x = 0; x < b; ++x)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < d; ++e) {
          auto at = [&](const Tensor16& h, int64_t head) {
            return h.buf[static_cast<size_t>(x * h.t.stride[0] + head * h.t.stride[1] +
                                             t * h.t.stride[2] + e * h.t.stride[3])];
          };
          auto in = [&](int64_t ch) {
            return src.buf[static_cast<size_t>(x * src.t.stride[0] + t * src.t.stride[1] +
                                               ch * src.t.stride[2])];
          };
          for (int64_t h = 0; h < hq; ++h)
            same &= at(qh, h) == in(h * d + e) && at(heads, h) == in(h * d + e);
          for (int64_t h = 0; h < hkv; ++h) {
            same &= at(kh, h) == in((hq + h) * d + e);
            same &= at(vh, h) == in((hq + hkv + h) * d + e);
          }
        }
    CHECK(same);
    // dst of another dtype: refused, nothing written.
    Tensor f32_heads(b, hq + 2 * hkv, n, d);
    const std::vector<float> before = f32_heads.buf;
    CHECK(octattn_split_heads(ctx, &src.t, hq + 2 * hkv, f32_heads.ptr()) ==
          OCTATTN_ERROR_UNSUPPORTED);
    CHECK(f32_heads.buf == before);
    Tensor16 other(Tensor(b, hq + 2 * hkv, n, d),
                   ty == OCTATTN_DTYPE_BF16 ? OCTATTN_DTYPE_F16 : OCTATTN_DTYPE_BF16);
    CHECK(octattn_split_heads(ctx, &src.t, hq + 2 * hkv, &other.t) == OCTATTN_ERROR_UNSUPPORTED);
  }
  // Outputs of the stages stay f32: a 16-bit scores or o is refused; 16-bit input data
  // must be aligned to 2 bytes.
  Context ctx;
  Problem p(1, 2, 2, 3, 5, 8, 8, 54);
  const Operand q(p.q, OCTATTN_DTYPE_BF16), k(p.k, OCTATTN_DTYPE_BF16), v(p.v, OCTATTN_DTYPE_BF16);
  Tensor16 s16(Tensor(1, 2, 3, 5), OCTATTN_DTYPE_BF16), o16(p.Out(), OCTATTN_DTYPE_BF16);
  CHECK(octattn_scores(ctx, q.ptr(), k.ptr(), &s16.t) == OCTATTN_ERROR_UNSUPPORTED);
  Tensor w(1, 2, 3, 5);
  CHECK(octattn_weighted_sum(ctx, w.ptr(), v.ptr(), &o16.t) == OCTATTN_ERROR_UNSUPPORTED);
  std::vector<uint16_t> shifted(q.h.buf.size() + 1);
  octattn_tensor odd = q.h.t;
  odd.data = reinterpret_cast<char*>(shifted.data()) + 1;
  Tensor s(1, 2, 3, 5);
  CHECK(octattn_scores(ctx, &odd, k.ptr(), s.ptr()) == OCTATTN_ERROR_MISALIGNED);
}
