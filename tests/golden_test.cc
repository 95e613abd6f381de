// Golden data from PyTorch (tests/golden/make_golden.py): every path and target agrees
// with scaled_dot_product_attention on the write-up's walkthrough and three variants, with
// explicit torch operations on six cases of score modifiers, and with SDPA on two padded
// batches given as a boolean mask (the library gets the sequences' lengths instead).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

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
  REQUIRE(cases.size() == 12);
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) paths.push_back({OCTATTN_ALGORITHM_AUTO, t});
  for (const Golden& g : cases) {
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
