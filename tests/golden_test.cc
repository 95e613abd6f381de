// Golden data from PyTorch (tests/golden/make_golden.py): every path and target agrees
// with scaled_dot_product_attention on the write-up's walkthrough and three variants, with
// explicit torch operations on six cases of score modifiers, and with SDPA on two padded
// batches given as a boolean mask (the library gets the sequences' lengths instead), and
// with SDPA on bf16 and f16 tensors (float64 on their values, and PyTorch's own kernel).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "lib/base/dtype.h"
#include "support.h"

using namespace octtest;

namespace {

struct Golden {
  std::string name;
  int64_t batch, q_heads, kv_heads, q_len, kv_len, dim, window, stride;
  std::vector<float> q, k, v, o;
  float softcap = 0;
  int64_t chunk = 0;
  std::vector<float> slopes, sinks, bias, mask;
  std::vector<int64_t> kv_starts, kv_lens;
  std::string dtype = "f32";
  std::vector<float> o16;  // PyTorch's 16-bit kernel
};

std::vector<Golden> Load() {
  std::ifstream in(OCTATTN_GOLDEN_FILE);
  REQUIRE(in.good());
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string tag;
    s >> tag;
    if (tag == "case") {
      Golden g;
      s >> g.name >> g.batch >> g.q_heads >> g.kv_heads >> g.q_len >> g.kv_len >> g.dim >>
          g.window >> g.stride;
      out.push_back(g);
      continue;
    }
    REQUIRE(!out.empty());
    Golden& g = out.back();
    if (tag == "softcap") {
      s >> g.softcap;
      continue;
    }
    if (tag == "chunk") {
      s >> g.chunk;
      continue;
    }
    if (tag == "dtype") {
      s >> g.dtype;
      continue;
    }
    if (tag == "kv_starts" || tag == "kv_lens") {
      std::vector<int64_t>& lens = tag == "kv_starts" ? g.kv_starts : g.kv_lens;
      int64_t n;
      while (s >> n) lens.push_back(n);
      REQUIRE(static_cast<int64_t>(lens.size()) == g.batch);
      continue;
    }
    std::vector<float>* dst = tag == "q"        ? &g.q
                              : tag == "k"      ? &g.k
                              : tag == "v"      ? &g.v
                              : tag == "slopes" ? &g.slopes
                              : tag == "sinks"  ? &g.sinks
                              : tag == "bias"   ? &g.bias
                              : tag == "mask"   ? &g.mask
                              : tag == "o16"    ? &g.o16
                                                : &g.o;
    REQUIRE((tag == "o" || dst != &g.o));
    float x;
    while (s >> x) dst->push_back(x);
  }
  return out;
}

Tensor Make(int64_t a, int64_t b, int64_t c, int64_t d, const std::vector<float>& values) {
  Tensor t(a, b, c, d);
  REQUIRE(values.size() == t.buf.size());
  t.buf = values;
  t.t.data = t.buf.data();
  return t;
}

}  // namespace

TEST_CASE("PyTorch golden outputs", "[golden][dispatch]") {
  const auto cases = Load();
  REQUIRE(cases.size() == 16);
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) paths.push_back({OCTATTN_ALGORITHM_AUTO, t});
  for (const Golden& g : cases) {
    if (g.dtype != "f32") continue;  // the next test
    Tensor q = Make(g.batch, g.q_heads, g.q_len, g.dim, g.q);
    Tensor k = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.k);
    Tensor v = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.v);
    Tensor want = Make(g.batch, g.q_heads, g.q_len, g.dim, g.o);
    Tensor bias;
    std::vector<uint8_t> mask_bytes(g.mask.begin(), g.mask.end());
    octattn_tensor mask{};
    if (!g.bias.empty()) bias = Make(g.batch, g.q_heads, g.q_len, g.kv_len, g.bias);
    if (!g.mask.empty()) {
      const int64_t shape[4] = {g.batch, g.q_heads, g.q_len, g.kv_len};
      REQUIRE(octattn_tensor_init(&mask, mask_bytes.data(), shape, OCTATTN_LAYOUT_BHTD) ==
              OCTATTN_OK);
      mask.dtype = OCTATTN_DTYPE_BOOL;
    }
    for (const auto& path : paths) {
      INFO(g.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      Tensor o(g.batch, g.q_heads, g.q_len, g.dim);
      octattn_attention_options opt = Options(1, g.window, g.stride, path.first);
      opt.softcap = g.softcap;
      opt.chunk = g.chunk;
      if (!g.slopes.empty()) opt.alibi_slopes = g.slopes.data();
      if (!g.sinks.empty()) opt.sinks = g.sinks.data();
      if (!g.bias.empty()) opt.bias = bias.ptr();
      if (!g.mask.empty()) opt.mask = &mask;
      if (!g.kv_starts.empty()) opt.kv_starts = g.kv_starts.data();
      if (!g.kv_lens.empty()) opt.kv_lens = g.kv_lens.data();
      Attend(ctx, opt, q, k, v, o);
      CHECK(MaxDiff(o, want) <= 1e-6);
    }
  }
}

namespace {

// 16-bit copy of exactly representable values, and the widened values of one.
std::vector<uint16_t> Narrow(const std::vector<float>& x, octattn_dtype type) {
  std::vector<uint16_t> h;
  for (float f : x) {
    h.push_back(type == OCTATTN_DTYPE_BF16 ? octattn::base::F32ToBf16(f)
                                           : octattn::base::F32ToF16(f));
    REQUIRE((type == OCTATTN_DTYPE_BF16 ? octattn::base::Bf16ToF32(h.back())
                                        : octattn::base::F16ToF32(h.back())) == f);
  }
  return h;
}
octattn_tensor View16(std::vector<uint16_t>& h, const int64_t shape[4], octattn_dtype type) {
  octattn_tensor t;
  REQUIRE(octattn_tensor_init(&t, h.data(), shape, OCTATTN_LAYOUT_BHTD) == OCTATTN_OK);
  t.dtype = type;
  return t;
}

}  // namespace

// The library's 16-bit o is its f32 result rounded to 16 bits: within the f32 bound plus
// half a unit in the last place (2^-8 of |o| for bf16, 2^-11 for f16) of float64 SDPA on
// the same values. PyTorch's 16-bit kernel rounds o (and, for bf16, its weights) too:
// the two agree to a unit of the 16-bit type at max|v| (2^-7 and 2^-10 of it).
TEST_CASE("PyTorch golden outputs in bf16 and f16", "[golden][dtype][dispatch]") {
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) {
    paths.push_back({OCTATTN_ALGORITHM_NAIVE, t});
    paths.push_back({OCTATTN_ALGORITHM_FUSED, t});
  }
  int seen = 0;
  for (const Golden& g : Load()) {
    if (g.dtype == "f32") continue;
    ++seen;
    const octattn_dtype type = g.dtype == "bf16" ? OCTATTN_DTYPE_BF16 : OCTATTN_DTYPE_F16;
    const double half_ulp = type == OCTATTN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    std::vector<uint16_t> q16 = Narrow(g.q, type), k16 = Narrow(g.k, type), v16 = Narrow(g.v, type);
    const int64_t qs[4] = {g.batch, g.q_heads, g.q_len, g.dim};
    const int64_t ks[4] = {g.batch, g.kv_heads, g.kv_len, g.dim};
    const octattn_tensor q = View16(q16, qs, type), k = View16(k16, ks, type),
                         v = View16(v16, ks, type);
    double max_v = 0;
    for (float x : g.v) max_v = std::max(max_v, std::fabs(static_cast<double>(x)));
    for (const auto& path : paths) {
      INFO(g.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      std::vector<uint16_t> o16(g.o.size(), 0);
      octattn_tensor o = View16(o16, qs, type);
      const octattn_attention_options opt = Options(1, 0, 0, path.first);
      REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, nullptr, 0) ==
              OCTATTN_OK);
      REQUIRE(g.o16.size() == g.o.size());
      double worst64 = 0, worst_torch = 0;
      for (size_t i = 0; i < o16.size(); ++i) {
        const double got = type == OCTATTN_DTYPE_BF16 ? octattn::base::Bf16ToF32(o16[i])
                                                      : octattn::base::F16ToF32(o16[i]);
        // avx512_bf16's and amx_bf16's fused bf16 weighted sums: weights rounded to bf16
        // (the header)
        const double pairs = type == OCTATTN_DTYPE_BF16 && path.first == OCTATTN_ALGORITHM_FUSED &&
                                     (path.second.target == OCTATTN_TARGET_AVX512_BF16 ||
                                      path.second.target == OCTATTN_TARGET_AMX_BF16)
                                 ? 0x1p-8 * max_v
                                 : 0.0;
        const double allowed =
            1e-6 * max_v + pairs + half_ulp * std::fabs(static_cast<double>(g.o[i]));
        worst64 = std::max(worst64, std::fabs(got - g.o[i]) - allowed);
        worst_torch = std::max(worst_torch, std::fabs(got - g.o16[i]));
      }
      CHECK(worst64 <= 0);
      CHECK(worst_torch <= 2 * half_ulp * max_v);
    }
  }
  CHECK(seen == 4);
}
