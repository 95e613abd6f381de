// The composed attention call: the naive path on every target of both backends against
// the fp64 reference, swept over sizes around vector and tile widths, head dims, masks,
// alignments and GQA ratios.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "support.h"

using namespace octtest;

namespace {

struct Case {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  int32_t causal;
  int64_t window, stride, q_start;
  float range;
};

std::string Describe(const Case& c) {
  return "B" + std::to_string(c.batch) + " Hq" + std::to_string(c.q_heads) + " Hkv" +
         std::to_string(c.kv_heads) + " Tq" + std::to_string(c.q_len) + " Tk" +
         std::to_string(c.kv_len) + " D" + std::to_string(c.head_dim) + " Dv" +
         std::to_string(c.value_dim) + " causal" + std::to_string(c.causal) + " w" +
         std::to_string(c.window) + " s" + std::to_string(c.stride) + " q_start" +
         (c.q_start == OCTATTN_Q_START_DEFAULT ? std::string("=default")
                                               : std::to_string(c.q_start)) +
         " range" + std::to_string(c.range);
}

// The largest |scaled score| of the problem: errors of fp32 scores grow with it.
double MaxScore(const Problem& p) {
  return Scores(p.q, p.k, 1.0 / std::sqrt(static_cast<double>(p.q.shape[3]))).s;
}

void CheckAgainstReference(const Case& c, const std::vector<Target>& targets, bool outputs = true) {
  INFO(Describe(c));
  Problem p(c.batch, c.q_heads, c.kv_heads, c.q_len, c.kv_len, c.head_dim, c.value_dim,
            static_cast<uint32_t>(c.q_len * 131 + c.head_dim * 7 + c.window), c.range);
  octattn_attention_options opt =
      Options(c.causal, c.window, c.stride, OCTATTN_ALGORITHM_REFERENCE, c.q_start);
  Context ref_ctx;
  Tensor ref_o = p.Out(), ref_lse = p.Lse(), ref_w = p.Weights();
  Attend(ref_ctx, opt, p.q, p.k, p.v, ref_o, &ref_lse, outputs ? &ref_w : nullptr);
  const double bound = Bound(p.q, p.k, p.v);
  for (const Target& t : targets) {
    Tensor naive_o = p.Out();
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
      INFO("target " << t.Name() << " " << octattn_algorithm_name(algo));
      Context ctx(t);
      Tensor o = p.Out(), lse = p.Lse(), w = p.Weights();
      opt.algorithm = algo;
      const bool with_w = outputs && algo == OCTATTN_ALGORITHM_NAIVE;
      Attend(ctx, opt, p.q, p.k, p.v, o, &lse, with_w ? &w : nullptr);
      CHECK(MaxDiff(o, ref_o) <= bound);
      if (algo == OCTATTN_ALGORITHM_NAIVE)
        naive_o = o;
      else
        CHECK(MaxDiff(o, naive_o) <= 2 * bound);  // fused against naive, same target
      CHECK(MaxDiff(lse, ref_lse) <= 4e-6 * std::max(1.0, MaxScore(p)));
      if (with_w) CHECK(MaxDiff(w, ref_w) <= 2e-6 * std::max(1.0, MaxScore(p)));
      octattn_run_info info{};
      info.struct_size = sizeof(info);
      REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
      CHECK(info.backend == t.backend);
      CHECK(info.target == t.target);
      CHECK(info.algorithm == algo);
    }
  }
}

constexpr int64_t kDef = OCTATTN_Q_START_DEFAULT;

}  // namespace

TEST_CASE("naive and fused match the reference: head dims", "[attention]") {
  const auto targets = AllTargets();
  for (int64_t d : {1, 3, 8, 16, 64, 80, 96, 128, 256})
    CheckAgainstReference({1, 2, 1, 19, 19, d, d, 1, 0, 0, kDef, 1.0f}, targets);
}

TEST_CASE("naive and fused match the reference: lengths around vector and tile widths",
          "[attention]") {
  const auto targets = AllTargets();
  for (int64_t t : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 257})
    CheckAgainstReference({1, 1, 1, t, t, 16, 16, 1, 0, 0, kDef, 1.0f}, targets);
  CheckAgainstReference({1, 2, 2, 1000, 1000, 8, 8, 1, 0, 0, kDef, 1.0f}, targets, false);
}

TEST_CASE("naive and fused match the reference: masks and alignments", "[attention][dispatch]") {
  const auto targets = AllTargets();
  const Case cases[] = {
      {2, 2, 2, 37, 37, 16, 16, 0, 0, 0, kDef, 1.0f},  // full attention
      {1, 2, 2, 37, 37, 16, 24, 1, 5, 0, kDef, 1.0f},  // window
      {1, 2, 2, 70, 70, 16, 8, 1, 6, 4, kDef, 1.0f},   // window + strided columns
      {1, 2, 2, 40, 40, 8, 8, 1, 1, 0, kDef, 1.0f},    // window of one: the diagonal
      {1, 2, 2, 40, 40, 8, 8, 1, 3, 1, kDef, 1.0f},    // stride 1: every column global
      {1, 2, 1, 5, 300, 32, 32, 1, 0, 0, kDef, 1.0f},  // decode-shaped, bottom-right
      {1, 2, 1, 5, 300, 32, 32, 1, 17, 8, kDef, 1.0f},
      {1, 1, 1, 12, 7, 8, 8, 1, 0, 0, kDef, 1.0f},  // q_len > kv_len: empty first rows
      {1, 1, 1, 9, 20, 8, 8, 1, 0, 0, -4, 1.0f},    // explicit q_start, negative
      {1, 1, 1, 9, 20, 8, 8, 1, 4, 2, 3, 1.0f},     // explicit q_start inside
      {1, 1, 1, 9, 20, 8, 8, 1, 0, 0, 40, 1.0f},    // queries past the last key
      {1, 1, 1, 9, 20, 8, 8, 1, 0, 0, -100, 1.0f},  // no row has a key
  };
  for (const Case& c : cases) CheckAgainstReference(c, targets);
}

TEST_CASE("naive and fused match the reference: GQA ratios", "[attention]") {
  const auto targets = AllTargets();
  for (int64_t ratio : {1, 2, 4, 8})
    CheckAgainstReference({2, 8, 8 / ratio, 21, 21, 16, 16, 1, 0, 0, kDef, 1.0f}, targets);
}

TEST_CASE("scores that overflow an unstable softmax stay finite and accurate",
          "[attention][dispatch]") {
  const auto targets = AllTargets();
  CheckAgainstReference({1, 2, 2, 33, 33, 64, 64, 1, 0, 0, kDef, 12.0f}, targets);
  CheckAgainstReference({1, 1, 1, 17, 17, 128, 128, 1, 7, 3, kDef, 20.0f}, targets);
}

TEST_CASE("rows with no allowed key give zeros and lse = -inf", "[attention]") {
  Problem p(1, 2, 2, 6, 4, 8, 8, 5);  // default alignment: rows 0 and 1 sit at -2, -1
  for (octattn_algorithm algo :
       {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
    Context ctx;
    Tensor o = p.Out(), lse = p.Lse(), w = p.Weights();
    o.Fill(1, 5, 6);
    w.Fill(2, 5, 6);  // canaries: every weight of an empty row must be written as 0
    const bool fused = algo == OCTATTN_ALGORITHM_FUSED;
    Attend(ctx, Options(1, 0, 0, algo), p.q, p.k, p.v, o, &lse, fused ? nullptr : &w);
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 2; ++i) {
        CHECK(lse.at(0, h, i, 0) == -INFINITY);
        for (int64_t d = 0; d < 8; ++d) CHECK(o.at(0, h, i, d) == 0.0f);
        if (!fused)
          for (int64_t j = 0; j < 4; ++j) CHECK(w.at(0, h, i, j) == 0.0f);
      }
      CHECK(std::isfinite(lse.at(0, h, 2, 0)));
      if (!fused) CHECK(w.at(0, h, 2, 0) == 1.0f);  // row 2 sits at position 0: key 0 alone
    }
  }
}

TEST_CASE("scale option: 0 means 1/sqrt(D), other values are used as given", "[attention]") {
  Problem p(1, 1, 1, 9, 9, 16, 16, 8);
  Context ctx;
  Tensor a = p.Out(), b = p.Out(), c = p.Out();
  octattn_attention_options opt = Options();
  Attend(ctx, opt, p.q, p.k, p.v, a);
  opt.scale = 0.25f;  // 1/sqrt(16)
  Attend(ctx, opt, p.q, p.k, p.v, b);
  CHECK(BytesEqual(a, b));
  opt.scale = 1.0f;
  Attend(ctx, opt, p.q, p.k, p.v, c);
  CHECK(MaxDiff(a, c) > 1e-3);
}

TEST_CASE("dot products that cancel stay within the bound's C term", "[attention]") {
  // q = 1000 (+1, -1, +1, ...), k = 1 + 1e-3 N(0, 1), D = 256: scores of order 1 built
  // from products of order 1000, whose f32 rounding the largest |score| does not bound.
  const int64_t T = 48, D = 256;
  Problem p(1, 2, 1, T, T, D, 32, 9);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  p.q.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    p.q.at(a, b, c, d) = (d % 2 ? -1000.0f : 1000.0f) * (1.0f + 1e-3f * noise(rng));
  });
  p.k.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    p.k.at(a, b, c, d) = 1.0f + 1e-3f * noise(rng);
  });
  const ScoreRange r = Scores(p.q, p.k, 1.0 / 16);
  REQUIRE(r.c > 1000 * r.s);  // the case the C term is for
  Context ref_ctx;
  Tensor ref = p.Out();
  Attend(ref_ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE), p.q, p.k, p.v, ref);
  const double bound = Bound(p.q, p.k, p.v);
  for (const Target& t : AllTargets())
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
      INFO(t.Name() << " " << octattn_algorithm_name(algo));
      Context ctx(t);
      Tensor o = p.Out();
      Attend(ctx, Options(1, 0, 0, algo), p.q, p.k, p.v, o);
      CHECK(MaxDiff(o, ref) <= bound);
    }
}

TEST_CASE("k_start: keys at positions k_start + j, masked by position on every path",
          "[attention]") {
  // The reference's weights show the mask: checked against the formula in positions,
  // written here independently of the library's key coordinates.
  struct KCase {
    int64_t q_len, kv_len, window, stride, q_start, k_start;
  };
  const KCase cases[] = {
      {7, 30, 0, 0, OCTATTN_Q_START_DEFAULT, 100},  // default q_start: k_start + kv_len - q_len
      {9, 40, 6, 4, 120, 101},                      // strided columns at odd phase
      {9, 40, 6, 5, 60, 37},                        // queries inside the shard
      {5, 25, 3, 7, 10, 50},                        // every key after every query: empty
      {6, 33, 0, 0, -5, -20},                       // negative positions
  };
  const auto targets = AllTargets();
  for (const KCase& k : cases) {
    INFO("q_len " << k.q_len << " kv_len " << k.kv_len << " window " << k.window << " stride "
                  << k.stride << " q_start " << k.q_start << " k_start " << k.k_start);
    Problem p(1, 2, 1, k.q_len, k.kv_len, 16, 16, 41);
    auto opt = Options(1, k.window, k.stride, OCTATTN_ALGORITHM_REFERENCE, k.q_start);
    opt.k_start = k.k_start;
    Context ref_ctx;
    Tensor ref = p.Out(), w = p.Weights();
    Attend(ref_ctx, opt, p.q, p.k, p.v, ref, nullptr, &w);
    const int64_t q0 =
        k.q_start == OCTATTN_Q_START_DEFAULT ? k.k_start + k.kv_len - k.q_len : k.q_start;
    for (int64_t i = 0; i < k.q_len; ++i)
      for (int64_t j = 0; j < k.kv_len; ++j) {
        const int64_t qpos = q0 + i, kpos = k.k_start + j, d = qpos - kpos;
        const bool allowed =
            d >= 0 && (k.window == 0 || d < k.window ||
                       (k.stride > 0 && ((kpos % k.stride) + k.stride) % k.stride == 0));
        CHECK((w.at(0, 0, i, j) != 0.0f) == allowed);
      }
    const double bound = Bound(p.q, p.k, p.v);
    for (const Target& t : targets)
      for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
        INFO(t.Name() << " " << octattn_algorithm_name(algo));
        Context ctx(t);
        Tensor o = p.Out();
        opt.algorithm = algo;
        Attend(ctx, opt, p.q, p.k, p.v, o);
        CHECK(MaxDiff(o, ref) <= bound);
      }
  }
}

TEST_CASE("k_start: a shard's call masks as the whole call does", "[attention]") {
  // One call over keys [0, 300) against one over the shard [120, 300) with k_start 120
  // and the rows whose keys all lie in the shard: the same bytes (fused: the shard's
  // keys are its own units, so only rows whose window lies inside compare).
  Problem p(1, 2, 2, 300, 300, 16, 16, 43);
  const auto opt = Options(1, 50, 0, OCTATTN_ALGORITHM_REFERENCE);
  Context ctx;
  Tensor whole = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, whole);
  octattn_tensor k = p.k.t, v = p.v.t, q = p.q.t;
  k.data = static_cast<float*>(k.data) + 120 * k.stride[2];
  v.data = static_cast<float*>(v.data) + 120 * v.stride[2];
  k.shape[2] = v.shape[2] = 180;
  q.data = static_cast<float*>(q.data) + 200 * q.stride[2];
  q.shape[2] = 100;  // rows 200..299: windows [151, 299] inside the shard
  auto shard_opt = opt;
  shard_opt.k_start = 120;
  shard_opt.q_start = 200;
  Tensor o(1, 2, 100, 16);
  REQUIRE(octattn_attention(ctx, &shard_opt, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr, 0) ==
          OCTATTN_OK);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 100; ++i)
      for (int64_t d = 0; d < 16; ++d) {
        const float a = o.at(0, h, i, d), b = whole.at(0, h, 200 + i, d);
        CHECK(std::memcmp(&a, &b, sizeof(float)) == 0);
      }
}
