// Golden data from PyTorch (tests/golden/make_golden.py): every path and target agrees
// with scaled_dot_product_attention on the write-up's walkthrough and three variants.
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
    std::vector<float>* dst = tag == "q"   ? &out.back().q
                              : tag == "k" ? &out.back().k
                              : tag == "v" ? &out.back().v
                                           : &out.back().o;
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
  REQUIRE(cases.size() == 4);
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) paths.push_back({OCTATTN_ALGORITHM_AUTO, t});
  for (const Golden& g : cases) {
    Tensor q = Make(g.batch, g.q_heads, g.q_len, g.dim, g.q);
    Tensor k = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.k);
    Tensor v = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.v);
    Tensor want = Make(g.batch, g.q_heads, g.q_len, g.dim, g.o);
    for (const auto& path : paths) {
      INFO(g.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      Tensor o(g.batch, g.q_heads, g.q_len, g.dim);
      Attend(ctx, Options(1, g.window, g.stride, path.first), q, k, v, o);
      CHECK(MaxDiff(o, want) <= 1e-6);
    }
  }
}
