// The backward: the fused gradients against the fp64 reference on every target, with
// every mask and modifier; the reference against finite differences; determinism
// (threads, layouts, batch subsets); gradient causality with NaN and Inf; bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>

#include "support.h"

using namespace octtest;

namespace {

constexpr int64_t kDef = OCTATTN_Q_START_DEFAULT;
// R of the header's backward bound, per unit of max(1, S).
constexpr double kBackwardTolerance = 1e-6;
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The modifiers of a case, owning their arrays and tensors.
struct Mods {
  float softcap = 0;
  bool alibi = false, sinks = false, bias = false, mask = false;
  int64_t chunk = 0;
  std::vector<float> slopes, sink_values;
  std::unique_ptr<Tensor> bias_t;
  std::unique_ptr<BoolTensor> mask_t;

  void Apply(const Problem& p, uint32_t seed, octattn_attention_options* opt) {
    const int64_t B = p.q.shape[0], H = p.q.shape[1], Tq = p.q.shape[2], Tk = p.k.shape[2];
    std::mt19937 rng(seed);
    opt->softcap = softcap;
    opt->chunk = chunk;
    if (alibi) {
      slopes.clear();
      for (int64_t h = 0; h < H; ++h) slopes.push_back(std::pow(2.0f, -8.0f * (h + 1) / H));
      opt->alibi_slopes = slopes.data();
    }
    if (sinks) {
      std::uniform_real_distribution<float> d(-1.0f, 2.0f);
      sink_values.clear();
      for (int64_t h = 0; h < H; ++h) sink_values.push_back(h == 1 ? -kInf : d(rng));
      opt->sinks = sink_values.data();
    }
    if (bias) {
      bias_t = std::make_unique<Tensor>(B, H, Tq, Tk, Layout::kPadded);
      bias_t->Fill(seed + 7, -2.0f, 2.0f);
      opt->bias = bias_t->ptr();
    }
    if (mask) {
      const int64_t s[4] = {B, H, Tq, Tk};
      mask_t = std::make_unique<BoolTensor>(s);
      std::uniform_int_distribution<int> d(0, 3);
      for (auto& x : mask_t->buf) x = d(rng) == 0 ? 0 : 1;
      opt->mask = &mask_t->t;
    }
  }
};

// The gradients of one call.
struct Grads {
  Tensor dq, dk, dv, dbias;
  std::vector<float> dsinks;
  bool with_dbias = false, with_dsinks = false;
  Grads(const Problem& p, bool want_dbias, bool want_dsinks, Layout layout = Layout::kBHTD)
      : dq(p.q.shape, layout),
        dk(p.k.shape, layout),
        dv(p.v.shape, layout),
        with_dbias(want_dbias),
        with_dsinks(want_dsinks) {
    if (want_dbias) dbias = p.Weights();
    if (want_dsinks) dsinks.assign(static_cast<size_t>(p.q.shape[1]), 0.0f);
  }
};

octattn_status Backward(Context& ctx, const octattn_attention_options& opt, const Problem& p,
                        const Tensor& o, const Tensor& lse, const Tensor& dout, Grads& g,
                        const Tensor* dlse = nullptr) {
  return octattn_attention_backward(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                                    dout.ptr(), dlse ? dlse->ptr() : nullptr, g.dq.ptr(),
                                    g.dk.ptr(), g.dv.ptr(),
                                    g.with_dsinks ? g.dsinks.data() : nullptr,
                                    g.with_dbias ? g.dbias.ptr() : nullptr, nullptr, 0);
}

void RequireBackward(Context& ctx, const octattn_attention_options& opt, const Problem& p,
                     const Tensor& o, const Tensor& lse, const Tensor& dout, Grads& g,
                     const Tensor* dlse = nullptr) {
  const octattn_status st = Backward(ctx, opt, p, o, lse, dout, g, dlse);
  INFO(ctx.Error());
  REQUIRE(st == OCTATTN_OK);
}

// The header's accuracy bounds, from the reference weights (P_j, per (batch, kv head,
// key)) and the largest |score| S (bounded from above as modifiers_test does).
struct Bounds {
  double r = 0, g = 0, scale = 0, max_dout = 0, max_q = 0, max_k = 0, rows = 0;
  // The header's avx512_bf16 terms for sums over rows and keys on bf16 pairs: 2^-8.
  double pairs = 0;
  std::vector<double> weight;  // [b][kvh][j]: max(1, sum over the group's rows of p_ij)
  int64_t kv_heads = 0, kv_len = 0;
  double Key(int64_t b, int64_t kvh, int64_t j) const {
    return weight[static_cast<size_t>((b * kv_heads + kvh) * kv_len + j)];
  }
};

Bounds MakeBounds(const Problem& p, const Mods& m, const octattn_attention_options& opt,
                  const Tensor& dout, const Tensor* dlse) {
  Bounds b;
  const int64_t B = p.q.shape[0], Hq = p.q.shape[1], Tq = p.q.shape[2], Tk = p.k.shape[2];
  const int64_t Hkv = p.k.shape[1], group = Hq / Hkv;
  b.scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(p.q.shape[3]));
  double s = Scores(p.q, p.k, b.scale).s;
  if (opt.softcap > 0) s = std::min(s, static_cast<double>(opt.softcap));
  if (m.alibi)
    s += static_cast<double>(Tq + Tk + std::llabs(opt.q_start == kDef ? 0 : opt.q_start));
  if (m.bias_t) s += m.bias_t->MaxAbs();
  b.r = kBackwardTolerance * std::max(1.0, s);
  b.max_dout = dout.MaxAbs();
  b.max_q = p.q.MaxAbs();
  b.max_k = p.k.MaxAbs();
  b.g = static_cast<double>(p.v.shape[3]) * b.max_dout * p.v.MaxAbs() + (dlse ? dlse->MaxAbs() : 0);
  b.rows = static_cast<double>(B * Tq);
  Context ctx;
  octattn_attention_options ref = opt;
  ref.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  Tensor o = p.Out(), w = p.Weights();
  Attend(ctx, ref, p.q, p.k, p.v, o, nullptr, &w);
  b.kv_heads = Hkv;
  b.kv_len = Tk;
  b.weight.assign(static_cast<size_t>(B * Hkv * Tk), 0.0);
  for (int64_t x = 0; x < B; ++x)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j)
          b.weight[static_cast<size_t>((x * Hkv + h / group) * Tk + j)] += w.at(x, h, i, j);
  for (double& x : b.weight) x = std::max(1.0, x);
  return b;
}

// Element-wise comparison against the reference gradients with the header's bounds.
void CheckAgainst(const Grads& got, const Grads& ref, const Bounds& b) {
  double worst = 0;  // the largest error as a fraction of its bound
  auto frac = [&](float x, float y, double bound) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) == std::isnan(y) ? 0.0 : INFINITY;
    return x == y ? 0.0 : std::fabs(static_cast<double>(x) - y) / bound;
  };
  ref.dv.ForEach([&](int64_t x, int64_t h, int64_t j, int64_t d) {
    worst = std::max(worst, frac(got.dv.at(x, h, j, d), ref.dv.at(x, h, j, d),
                                 (b.r + b.pairs) * b.max_dout * b.Key(x, h, j)));
  });
  ref.dk.ForEach([&](int64_t x, int64_t h, int64_t j, int64_t d) {
    worst = std::max(worst, frac(got.dk.at(x, h, j, d), ref.dk.at(x, h, j, d),
                                 (b.r * 4 + b.pairs) * b.scale * b.max_q * b.g * b.Key(x, h, j)));
  });
  ref.dq.ForEach([&](int64_t x, int64_t h, int64_t i, int64_t d) {
    worst = std::max(worst, frac(got.dq.at(x, h, i, d), ref.dq.at(x, h, i, d),
                                 (b.r * 4 + b.pairs) * b.scale * b.max_k * b.g));
  });
  if (ref.with_dbias)
    ref.dbias.ForEach([&](int64_t x, int64_t h, int64_t i, int64_t j) {
      worst =
          std::max(worst, frac(got.dbias.at(x, h, i, j), ref.dbias.at(x, h, i, j), b.r * b.g * 4));
    });
  for (size_t h = 0; h < ref.dsinks.size(); ++h)
    worst = std::max(worst, frac(got.dsinks[h], ref.dsinks[h], b.r * b.g * 2 * b.rows));
  INFO("largest error / bound: " << worst);
  CHECK(worst <= 1.0);
}

struct Case {
  int64_t batch, hq, hkv, tq, tk, d, dv;
  int32_t causal;
  int64_t window, stride, q_start;
  float range = 1.0f;  // of q and k: scores grow with its square
};

std::string Describe(const Case& c) {
  return "B" + std::to_string(c.batch) + " H" + std::to_string(c.hq) + "/" + std::to_string(c.hkv) +
         " T" + std::to_string(c.tq) + "x" + std::to_string(c.tk) + " D" + std::to_string(c.d) +
         "/" + std::to_string(c.dv) + " causal " + std::to_string(c.causal) + " window " +
         std::to_string(c.window) + " stride " + std::to_string(c.stride) + " q_start " +
         (c.q_start == kDef ? std::string("default") : std::to_string(c.q_start));
}

// The fused backward on every target against the reference, o and lse from the fused
// forward of the same target.
// With `dbias`, also dL/dlse (a random dlse) and the gradient of the scores.
void CheckCase(const Case& c, Mods& m, const std::vector<Target>& targets, uint32_t seed,
               bool dbias = false) {
  INFO(Describe(c));
  Problem p(c.batch, c.hq, c.hkv, c.tq, c.tk, c.d, c.dv, seed, c.range);
  octattn_attention_options opt =
      Options(c.causal, c.window, c.stride, OCTATTN_ALGORITHM_AUTO, c.q_start);
  m.Apply(p, seed, &opt);
  Tensor dout = p.Out();
  dout.Fill(seed + 3);
  const bool dsinks = m.sinks;
  Tensor dlse_t = p.Lse();
  dlse_t.Fill(seed + 4);
  const Tensor* dlse = dbias ? &dlse_t : nullptr;
  const Bounds bounds = MakeBounds(p, m, opt, dout, dlse);
  Grads ref(p, dbias, dsinks);
  {
    Context ctx;
    octattn_attention_options r = opt;
    r.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    Tensor o = p.Out(), lse = p.Lse();
    Attend(ctx, r, p.q, p.k, p.v, o, &lse);
    RequireBackward(ctx, r, p, o, lse, dout, ref, dlse);
  }
  for (const Target& t : targets) {
    INFO(t.Name());
    Context ctx(t);
    Tensor o = p.Out(), lse = p.Lse();
    Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
    Grads g(p, dbias, dsinks);
    RequireBackward(ctx, opt, p, o, lse, dout, g, dlse);
    CheckAgainst(g, ref, bounds);
  }
}

}  // namespace

TEST_CASE("backward matches the reference on every target", "[backward][dispatch]") {
  const auto targets = AllTargets();
  const int64_t t = Sized(150, 70);
  const Case cases[] = {
      {1, 2, 2, t, t, 16, 16, 1, 0, 0, kDef},          // causal, square, tiles not whole
      {2, 4, 2, 70, 70, 8, 12, 1, 0, 0, kDef},         // GQA 2, value_dim != head_dim
      {1, 4, 1, 33, 100, 32, 32, 1, 0, 0, kDef},       // GQA 4, queries at the tail
      {1, 2, 1, 1, t, 64, 64, 1, 0, 0, kDef},          // decode
      {1, 2, 2, t, t, 8, 8, 1, 16, 0, kDef},           // window
      {1, 2, 2, t, t, 8, 8, 1, 9, 7, kDef},            // window and stride
      {1, 2, 2, 40, 30, 8, 8, 1, 0, 0, kDef},          // more queries than keys: empty rows
      {1, 2, 2, 50, 90, 8, 8, 0, 0, 0, kDef},          // full attention
      {1, 2, 2, 20, 90, 8, 8, 1, 0, 0, 30},            // q_start inside the keys
      {1, 1, 1, 65, 129, 3, 5, 1, 0, 0, kDef},         // odd dims
      {1, 2, 1, 70, 70, 32, 32, 1, 0, 0, kDef, 4.0f},  // scores in the tens
      {1, 2, 2, 70, 70, 128, 64, 1, 0, 0, kDef},       // a model's head size
  };
  for (const Case& c : cases) {
    Mods none;
    CheckCase(c, none, targets, 11);
  }
}

TEST_CASE("backward with every modifier matches the reference", "[backward][dispatch]") {
  const auto targets = AllTargets();
  const int64_t t = Sized(100, 40);
  const Case square{1, 4, 2, t, t, 16, 16, 1, 0, 0, kDef};
  for (int which = 0; which < 7; ++which) {
    Mods m;
    m.softcap = which == 0 || which == 6 ? 1.5f : 0.0f;
    m.alibi = which == 1 || which == 6;
    m.sinks = which == 2 || which == 6;
    m.bias = which == 3 || which == 6;
    m.mask = which == 4 || which == 6;
    m.chunk = which == 5 || which == 6 ? 13 : 0;
    INFO("modifier set " << which);
    CheckCase(square, m, targets, 21 + which, /*dbias=*/true);
  }
  Mods sinks;  // rows with no key: o = 0, lse = the sink; only dlse reaches the sink
  sinks.sinks = true;
  CheckCase({1, 2, 2, 40, 25, 8, 8, 1, 0, 0, kDef}, sinks, targets, 5, true);
}

TEST_CASE("reference backward agrees with finite differences", "[backward]") {
  // L = sum(dout * o) + sum(dlse * lse): its derivative by central differences in double precision
  // of the reference forward (f32 outputs, so h is large and the tolerance loose).
  Problem p(1, 2, 1, 6, 7, 4, 3, 91);
  octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE);
  Mods m;
  m.softcap = 1.2f;
  m.alibi = m.sinks = m.bias = true;
  m.Apply(p, 91, &opt);
  Tensor dout = p.Out(), dlse = p.Lse();
  dout.Fill(94);
  dlse.Fill(95);
  Context ctx;
  Tensor o = p.Out(), lse = p.Lse();
  Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
  Grads g(p, true, true);
  RequireBackward(ctx, opt, p, o, lse, dout, g, &dlse);
  auto loss = [&]() {
    Tensor out = p.Out(), out_lse = p.Lse();
    Attend(ctx, opt, p.q, p.k, p.v, out, &out_lse);
    double l = 0;
    out.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      l += static_cast<double>(out.at(a, b, c, d)) * dout.at(a, b, c, d);
    });
    out_lse.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      l += static_cast<double>(out_lse.at(a, b, c, d)) * dlse.at(a, b, c, d);
    });
    return l;
  };
  const float h = 1e-2f;
  auto numeric = [&](float& x) {
    const float keep = x;
    x = keep + h;
    const double up = loss();
    x = keep - h;
    const double down = loss();
    x = keep;
    return (up - down) / (2.0 * h);
  };
  auto check = [&](Tensor& in, const Tensor& grad, const char* name) {
    in.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      INFO(name << "[" << a << "," << b << "," << c << "," << d << "]");
      CHECK(numeric(in.at(a, b, c, d)) == Approx(grad.at(a, b, c, d)).margin(2e-4).epsilon(2e-3));
    });
  };
  check(p.q, g.dq, "dq");
  check(p.k, g.dk, "dk");
  check(p.v, g.dv, "dv");
  check(*m.bias_t, g.dbias, "dbias");
  for (size_t x = 0; x < m.sink_values.size(); ++x) {
    if (m.sink_values[x] == -kInf) {
      CHECK(g.dsinks[x] == 0.0f);
      continue;
    }
    INFO("dsinks[" << x << "]");
    CHECK(numeric(m.sink_values[x]) == Approx(g.dsinks[x]).margin(2e-4).epsilon(2e-3));
  }
}

namespace {

// p's gradients under opt (from the o, lse and dout given) keep the bytes of base (one
// thread, BHTD, with dbias) on 2 and 3 threads and, on one, in each of `layouts`;
// target null: the context's own.
void RequireGradientInvariance(const Target* target, const octattn_attention_options& opt,
                               const Problem& p, const Tensor& o, const Tensor& lse,
                               const Tensor& dout, const Grads& base,
                               std::initializer_list<Layout> layouts) {
  auto context = [&](int threads) {
    return target ? std::make_unique<Context>(*target, threads)
                  : std::make_unique<Context>(threads);
  };
  for (int threads : {2, 3}) {
    INFO("threads " << threads);
    const auto ctx = context(threads);
    Grads g(p, true, false);
    RequireBackward(*ctx, opt, p, o, lse, dout, g);
    CHECK(BytesEqual(g.dq, base.dq));
    CHECK(BytesEqual(g.dk, base.dk));
    CHECK(BytesEqual(g.dv, base.dv));
    CHECK(BytesEqual(g.dbias, base.dbias));
  }
  const auto one = context(1);
  for (Layout layout : layouts) {
    INFO("layout " << layout);
    Problem l(p.q.shape[0], p.q.shape[1], p.k.shape[1], p.q.shape[2], p.k.shape[2], p.q.shape[3],
              p.v.shape[3], 1, 1.0f, layout);
    l.q.CopyValuesFrom(p.q);
    l.k.CopyValuesFrom(p.k);
    l.v.CopyValuesFrom(p.v);
    Tensor lo(o.shape, layout), ll(lse.shape, layout), ld(dout.shape, layout);
    lo.CopyValuesFrom(o);
    ll.CopyValuesFrom(lse);
    ld.CopyValuesFrom(dout);
    Grads g(l, false, false, layout);
    RequireBackward(*one, opt, l, lo, ll, ld, g);
    CHECK(BytesEqual(g.dq, base.dq));
    CHECK(BytesEqual(g.dk, base.dk));
    CHECK(BytesEqual(g.dv, base.dv));
  }
}

}  // namespace

TEST_CASE("backward bytes do not depend on threads, layouts or the batch", "[backward][dispatch]") {
  const int64_t t = Sized(140, 70);
  for (const Target& target : AllTargets()) {
    INFO(target.Name());
    Problem p(3, 4, 2, t, t, 16, 16, 31);
    octattn_attention_options opt = Options(1, 40, 9);
    Tensor dout = p.Out();
    dout.Fill(34);
    Context one(target, 1);
    Tensor o = p.Out(), lse = p.Lse();
    Attend(one, opt, p.q, p.k, p.v, o, &lse);
    Grads base(p, true, false);
    RequireBackward(one, opt, p, o, lse, dout, base);
    RequireGradientInvariance(&target, opt, p, o, lse, dout, base,
                              {Layout::kBTHD, Layout::kPadded, Layout::kDimSlowest});
    // Batch item 1 alone.
    Problem s(1, 4, 2, t, t, 16, 16, 31);
    Tensor so = s.Out(), sl = s.Lse(), sd = s.Out();
    auto slice = [](Tensor& dst, const Tensor& src) {
      dst.ForEach([&](int64_t, int64_t h, int64_t i, int64_t d) {
        dst.at(0, h, i, d) = src.at(1, h, i, d);
      });
    };
    slice(s.q, p.q);
    slice(s.k, p.k);
    slice(s.v, p.v);
    slice(so, o);
    slice(sl, lse);
    slice(sd, dout);
    Grads g(s, false, false);
    RequireBackward(one, opt, s, so, sl, sd, g);
    bool same = true;
    g.dq.ForEach([&](int64_t, int64_t h, int64_t i, int64_t d) {
      same &= std::memcmp(&g.dq.at(0, h, i, d), &base.dq.at(1, h, i, d), 4) == 0;
    });
    g.dk.ForEach([&](int64_t, int64_t h, int64_t i, int64_t d) {
      same &= std::memcmp(&g.dk.at(0, h, i, d), &base.dk.at(1, h, i, d), 4) == 0;
      same &= std::memcmp(&g.dv.at(0, h, i, d), &base.dv.at(1, h, i, d), 4) == 0;
    });
    CHECK(same);
  }
}

namespace {

// Which keys row i of head h reads under opt (the analytic mask, q_start resolved).
bool Reads(const octattn_attention_options& opt, int64_t tq, int64_t tk, int64_t i, int64_t j) {
  const int64_t qpos = (opt.q_start == kDef ? tk - tq : opt.q_start) + i, d = qpos - j;
  if (!opt.causal) return true;
  if (d < 0) return false;
  return opt.window == 0 || d < opt.window || (opt.stride > 0 && j % opt.stride == 0);
}

}  // namespace

namespace {

// The backward with q, k, v, o and dout given in the case's 16-bit dtypes (copies of the
// f32 tensors' values, which each dtype holds exactly); the gradients f32.
struct Dtypes16 {
  octattn_dtype q, kv, o, dout;
};
octattn_status Backward16(Context& ctx, const octattn_attention_options& opt, const Problem& p,
                          const Tensor& o, const Tensor& lse, const Tensor& dout, const Dtypes16& c,
                          Grads& g) {
  std::vector<uint16_t> qb, kb, vb, ob, db;
  const octattn_tensor q16 = Narrowed(*p.q.ptr(), c.q, &qb), k16 = Narrowed(*p.k.ptr(), c.kv, &kb),
                       v16 = Narrowed(*p.v.ptr(), c.kv, &vb), o16 = Narrowed(*o.ptr(), c.o, &ob),
                       d16 = Narrowed(*dout.ptr(), c.dout, &db);
  return octattn_attention_backward(ctx, &opt, &q16, &k16, &v16, &o16, lse.ptr(), &d16, nullptr,
                                    g.dq.ptr(), g.dk.ptr(), g.dv.ptr(),
                                    g.with_dsinks ? g.dsinks.data() : nullptr,
                                    g.with_dbias ? g.dbias.ptr() : nullptr, nullptr, 0);
}

}  // namespace

TEST_CASE("backward over 16-bit q, k, v, o and dout: the f32 call's bytes on their values",
          "[backward][dispatch][dtype]") {
  const octattn_dtype F = OCTATTN_DTYPE_F32, B = OCTATTN_DTYPE_BF16, H = OCTATTN_DTYPE_F16;
  const Dtypes16 cases[] = {{B, B, B, B}, {H, H, H, H}, {B, F, F, B}, {F, H, F, F},
                            {F, F, F, H}, {B, B, F, F}, {F, B, F, B}};
  const int64_t t = Sized(75, 41);
  for (const Target& target : AllTargets()) {
    INFO(target.Name());
    // The header's avx512_bf16 rule: q . k of bf16 q and k, dout . v of bf16 dout and v on
    // vdpbf16ps (even dimensions, as here), with their own bytes within the bound.
    const bool dot =
        target.backend == OCTATTN_BACKEND_HIGHWAY &&
        (target.target == OCTATTN_TARGET_AVX512_BF16 || target.target == OCTATTN_TARGET_AMX_BF16);
    for (const Dtypes16& c : cases) {
      INFO("dtypes " << c.q << " " << c.kv << " " << c.o << " " << c.dout);
      const bool pairs = dot && c.kv == B && (c.q == B || c.dout == B);
      // causal with sinks and dbias; a window and stride; full attention (whole tiles,
      // the last of 20 keys)
      for (int mode : {0, 1, 2}) {
        INFO("mode " << mode);
        const bool sparse = mode != 0;
        Problem p(2, 4, 2, t, t + 9 + (mode == 2 ? 11 : 0), 24, 20, 81);
        auto round = [](Tensor& x, octattn_dtype type) {
          if (type == OCTATTN_DTYPE_F32) return;
          for (float& y : x.buf) y = Widen(Narrow(y, type), type);
        };
        round(p.q, c.q);
        round(p.k, c.kv);
        round(p.v, c.kv);
        octattn_attention_options opt =
            mode == 1 ? Options(1, 13, 5) : Options(mode == 0 ? 1 : 0, 0, 0);
        std::vector<float> sinks = {0.5f, -1.0f, 0.0f, 1.5f};
        if (!sparse) opt.sinks = sinks.data();
        Context ctx(target, 1);
        Tensor o = p.Out(), lse = p.Lse();
        Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
        round(o, c.o);
        Tensor dout = p.Out();
        dout.Fill(82);
        round(dout, c.dout);
        for (octattn_algorithm algo : {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_FUSED}) {
          INFO("algorithm " << algo);
          opt.algorithm = algo;
          Grads g32(p, !sparse, !sparse), g16(p, !sparse, !sparse);
          RequireBackward(ctx, opt, p, o, lse, dout, g32);
          {
            const octattn_status st = Backward16(ctx, opt, p, o, lse, dout, c, g16);
            INFO(ctx.Error());
            REQUIRE(st == OCTATTN_OK);
          }
          if (pairs && algo == OCTATTN_ALGORITHM_FUSED) {
            // Against the f32 call on the same o (which may be rounded, so that the
            // reference, which recomputes o, is not the one to meet): each is within the
            // bound of the gradients of these inputs.
            Mods none;
            Bounds b = MakeBounds(p, none, opt, dout, nullptr);
            b.r *= 2;
            if (c.q == B && c.dout == B) b.pairs = 0x1p-8;  // every sum on pairs
            CheckAgainst(g16, g32, b);
          } else {
            CHECK(BytesEqual(g16.dq, g32.dq));
            CHECK(BytesEqual(g16.dk, g32.dk));
            CHECK(BytesEqual(g16.dv, g32.dv));
            CHECK(BytesEqual(g16.dbias, g32.dbias));
            CHECK(g16.dsinks == g32.dsinks);
          }
          // Another layout on two threads: the same bytes.
          Problem l(2, 4, 2, t, p.k.shape[2], 24, 20, 1, 1.0f, Layout::kPadded);
          l.q.CopyValuesFrom(p.q);
          l.k.CopyValuesFrom(p.k);
          l.v.CopyValuesFrom(p.v);
          Tensor lo(o.shape, Layout::kPadded), ld(dout.shape, Layout::kPadded);
          lo.CopyValuesFrom(o);
          ld.CopyValuesFrom(dout);
          Context two(target, 2);
          Grads gl(l, !sparse, !sparse, Layout::kPadded);
          REQUIRE(Backward16(two, opt, l, lo, lse, ld, c, gl) == OCTATTN_OK);
          CHECK(BytesEqual(gl.dq, g16.dq));
          CHECK(BytesEqual(gl.dk, g16.dk));
          CHECK(BytesEqual(gl.dv, g16.dv));
          CHECK(BytesEqual(gl.dbias, g16.dbias));
          CHECK(gl.dsinks == g16.dsinks);
        }
      }
    }
  }
}

TEST_CASE("backward gradients are causal, also with NaN and Inf", "[backward][dispatch]") {
  const int64_t t = Sized(150, 70);
  const octattn_dtype bf16 = OCTATTN_DTYPE_BF16;
  for (const Target& target : AllTargets()) {
    for (int64_t window : {0, 20}) {
      // f32, and bf16 q, k, v, o and dout (vdpbf16ps on avx512_bf16)
      for (bool half : {false, true}) {
        INFO(target.Name() << " window " << window << " bf16 " << half);
        Problem p(1, 2, 1, t, t, 16, 16, 41);
        octattn_attention_options opt = Options(1, window, window ? 7 : 0);
        Tensor dout = p.Out();
        dout.Fill(44);
        Context ctx(target, 2);
        Tensor o = p.Out(), lse = p.Lse();
        Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
        auto run = [&](const Problem& x, const Tensor& xo, const Tensor& xl, const Tensor& xd,
                       Grads& g) {
          if (!half) return RequireBackward(ctx, opt, x, xo, xl, xd, g);
          REQUIRE(Backward16(ctx, opt, x, xo, xl, xd, {bf16, bf16, bf16, bf16}, g) == OCTATTN_OK);
        };
        Grads base(p, true, false);
        run(p, o, lse, dout, base);
        for (float poison : {kNaN, kInf}) {
          // One row's q, o, lse and dout: dq changes only at that row, dk and dv only at the
          // keys it reads, dbias only in its row.
          for (int64_t row : {int64_t{5}, t / 2 + 3, t - 1}) {
            INFO("row " << row << " poison " << poison);
            Problem e = p;
            Tensor eo = o, el = lse, ed = dout;
            for (int64_t h = 0; h < 2; ++h) {
              for (int64_t d = 0; d < 16; ++d) {
                e.q.at(0, h, row, d) = poison;
                eo.at(0, h, row, d) = poison;
                ed.at(0, h, row, d) = poison;
              }
              el.at(0, h, row, 0) = poison;
            }
            Grads g(e, true, false);
            run(e, eo, el, ed, g);
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t i = 0; i < t; ++i) {
                if (i != row) CHECK(RowBytesEqual(g.dq, base.dq, 0, h, i));
                for (int64_t j = 0; j < t; ++j)
                  if (i != row) {
                    const float x = g.dbias.at(0, h, i, j), y = base.dbias.at(0, h, i, j);
                    if (std::memcmp(&x, &y, 4) != 0) FAIL_CHECK("dbias " << i << "," << j);
                  }
              }
            for (int64_t j = 0; j < t; ++j) {
              if (Reads(opt, t, t, row, j)) continue;
              CHECK(RowBytesEqual(g.dk, base.dk, 0, 0, j));
              CHECK(RowBytesEqual(g.dv, base.dv, 0, 0, j));
            }
          }
          // One key's k and v: dk and dv change only at that key, dq only at the rows that
          // read it, dbias only in its column.
          for (int64_t key : {int64_t{0}, t / 2, t - 2}) {
            INFO("key " << key << " poison " << poison);
            Problem e = p;
            for (int64_t d = 0; d < 16; ++d) {
              e.k.at(0, 0, key, d) = poison;
              e.v.at(0, 0, key, d) = poison;
            }
            Grads g(e, true, false);
            run(e, o, lse, dout, g);
            for (int64_t j = 0; j < t; ++j) {
              if (j == key) continue;
              CHECK(RowBytesEqual(g.dk, base.dk, 0, 0, j));
              CHECK(RowBytesEqual(g.dv, base.dv, 0, 0, j));
            }
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t i = 0; i < t; ++i)
                if (!Reads(opt, t, t, i, key)) CHECK(RowBytesEqual(g.dq, base.dq, 0, h, i));
          }
        }
      }
    }
  }
}

namespace {

// Random key lists of p: per (batch entry, kv head or one for all, row) up to n entries
// from the whole cache (past a row's causal bound too), unsorted, with duplicates and -1.
Lists RandomLists(const Problem& p, int64_t n, bool per_head, uint32_t seed) {
  const int64_t tq = p.q.shape[2], tk = p.k.shape[2];
  Lists l(p.q.shape[0], per_head ? p.k.shape[1] : 1, tq, n);
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < l.e; ++b)
    for (int64_t g = 0; g < l.h; ++g)
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t c = rng() % 6 == 0 ? n : static_cast<int64_t>(rng() % (n + 1));
        l.count(b, g, i) = static_cast<int32_t>(c);
        for (int64_t x = 0; x < c; ++x) {
          const uint32_t r = rng() % 16;
          l.at(b, g, i, x) = r == 0            ? -1
                             : r == 1 && x > 0 ? l.at(b, g, i, rng() % x)
                                               : static_cast<int32_t>(rng() % tk);
        }
      }
  return l;
}

// The bool mask tensor of the pairs lists l name (and own's bits, where given).
std::unique_ptr<BoolTensor> ListedPairs(const Problem& p, const Lists& l, BoolTensor* own) {
  const int64_t s[4] = {p.q.shape[0], p.q.shape[1], p.q.shape[2], p.k.shape[2]};
  auto pairs = std::make_unique<BoolTensor>(s);
  const int64_t group = p.q.shape[1] / p.k.shape[1];
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t i = 0; i < s[2]; ++i)
        for (int64_t j = 0; j < s[3]; ++j)
          pairs->at(b, h, i, j) =
              (!own || own->at(b, h, i, j)) && l.Has(b, l.h > 1 ? h / group : 0, i, j);
  return pairs;
}

}  // namespace

// Over key lists the reference backward gives the bytes of the reference backward over
// the mask tensor of the same pairs; the fused backward is within the header's bound of
// it on every target, several query and key tiles, modifiers and masks included.
TEST_CASE("backward over key lists: the mask tensor's reference bytes, fused within the bound",
          "[backward][lists][dispatch]") {
  const auto targets = AllTargets();
  const int64_t t = Sized(150, 70);
  struct ListCase {
    Case c;
    int64_t n;
    bool per_head;
    int mods;  // 1 softcap, 2 ALiBi, 4 bias, 8 mask tensor, 16 sinks
  };
  const ListCase cases[] = {
      {{1, 2, 2, t, t, 16, 16, 1, 0, 0, kDef}, 40, true, 0},
      {{2, 4, 2, 70, 130, 8, 12, 1, 0, 0, kDef}, 24, false, 1 | 16},
      {{1, 4, 1, 33, 300, 32, 32, 0, 0, 0, kDef}, 100, false, 2 | 4 | 8},
      {{1, 2, 2, t, t, 8, 8, 1, 9, 7, kDef}, 30, true, 16},
      {{1, 2, 1, 1, 200, 64, 64, 1, 0, 0, kDef}, 50, false, 0},  // decode
      // Sparse lists (a few keys a tile: dot products of the pairs), beside dense rows.
      {{1, 4, 2, 130, 600, 32, 32, 1, 0, 0, kDef}, 8, true, 16},
      {{1, 2, 1, 70, 400, 64, 48, 0, 0, 0, kDef}, 5, false, 1 | 4},
  };
  uint32_t seed = 600;
  for (const ListCase& lc : cases) {
    const Case& c = lc.c;
    INFO(Describe(c) << " n " << lc.n << " mods " << lc.mods);
    Problem p(c.batch, c.hq, c.hkv, c.tq, c.tk, c.d, c.dv, ++seed, c.range);
    octattn_attention_options opt =
        Options(c.causal, c.window, c.stride, OCTATTN_ALGORITHM_AUTO, c.q_start);
    Mods m;
    m.softcap = lc.mods & 1 ? 1.5f : 0.0f;
    m.alibi = lc.mods & 2;
    m.bias = lc.mods & 4;
    m.mask = lc.mods & 8;
    m.sinks = lc.mods & 16;
    m.Apply(p, seed, &opt);
    const Lists lists = RandomLists(p, lc.n, lc.per_head, seed + 1);
    const std::unique_ptr<BoolTensor> pairs = ListedPairs(p, lists, m.mask_t.get());
    octattn_attention_options listed = opt, masked = opt;
    listed.key_indices = &lists.ti;
    listed.key_counts = &lists.tc;
    masked.mask = &pairs->t;
    Tensor dout = p.Out(), dlse = p.Lse();
    dout.Fill(seed + 3);
    dlse.Fill(seed + 4);
    Context ref_ctx;
    octattn_attention_options rl = listed, rm = masked;
    rl.algorithm = rm.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    Tensor o = p.Out(), lse = p.Lse();
    Attend(ref_ctx, rl, p.q, p.k, p.v, o, &lse);
    Grads ref(p, true, m.sinks), by_mask(p, true, m.sinks);
    RequireBackward(ref_ctx, rl, p, o, lse, dout, ref, &dlse);
    RequireBackward(ref_ctx, rm, p, o, lse, dout, by_mask, &dlse);
    CHECK(BytesEqual(ref.dq, by_mask.dq));
    CHECK(BytesEqual(ref.dk, by_mask.dk));
    CHECK(BytesEqual(ref.dv, by_mask.dv));
    CHECK(BytesEqual(ref.dbias, by_mask.dbias));
    CHECK(ref.dsinks == by_mask.dsinks);
    const Bounds bounds = MakeBounds(p, m, listed, dout, &dlse);
    for (const Target& target : targets) {
      INFO(target.Name());
      Context ctx(target, 2);
      Tensor fo = p.Out(), flse = p.Lse();
      Attend(ctx, listed, p.q, p.k, p.v, fo, &flse);
      Grads g(p, true, m.sinks);
      RequireBackward(ctx, listed, p, fo, flse, dout, g, &dlse);
      CheckAgainst(g, ref, bounds);
    }
  }
}

// The fused backward over key lists: the same bytes on 1, 2 and 3 threads and in other
// layouts; k and v rows that no list names (NaN or Inf) change no gradient, and their own
// dk and dv are 0.
TEST_CASE("backward over key lists: threads and layouts change no byte, unlisted keys nothing",
          "[backward][lists]") {
  const int64_t t = Sized(150, 70);
  Problem p(2, 4, 2, t, t, 16, 16, 71);
  const octattn_attention_options opt = Options(1, 40, 9);
  Lists lists = RandomLists(p, 30, true, 72);
  // Keys 3 and t - 5 on no list.
  for (int32_t& x : lists.idx)
    if (x == 3 || x == t - 5) x = -1;
  octattn_attention_options listed = opt;
  listed.key_indices = &lists.ti;
  listed.key_counts = &lists.tc;
  Tensor dout = p.Out();
  dout.Fill(73);
  Context one(1);
  Tensor o = p.Out(), lse = p.Lse();
  Attend(one, listed, p.q, p.k, p.v, o, &lse);
  Grads base(p, true, false);
  RequireBackward(one, listed, p, o, lse, dout, base);
  RequireGradientInvariance(nullptr, listed, p, o, lse, dout, base,
                            {Layout::kBTHD, Layout::kPadded});
  for (float poison : {kNaN, kInf}) {
    INFO("poison " << poison);
    Problem e = p;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t g = 0; g < 2; ++g)
        for (int64_t key : {int64_t{3}, t - 5})
          for (int64_t d = 0; d < 16; ++d) {
            e.k.at(b, g, key, d) = poison;
            e.v.at(b, g, key, d) = poison;
          }
    Grads g(e, true, false);
    RequireBackward(one, listed, e, o, lse, dout, g);
    CHECK(BytesEqual(g.dq, base.dq));
    CHECK(BytesEqual(g.dbias, base.dbias));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = 0; j < t; ++j) {
          CHECK(RowBytesEqual(g.dk, base.dk, b, h, j));
          CHECK(RowBytesEqual(g.dv, base.dv, b, h, j));
          if (j == 3 || j == t - 5)
            for (int64_t d = 0; d < 16; ++d)
              CHECK((g.dk.at(b, h, j, d) == 0.0f && g.dv.at(b, h, j, d) == 0.0f));
        }
  }
}

TEST_CASE("backward scratch does not grow with the sequence", "[backward]") {
  Context ctx(2);
  size_t bytes[2] = {0, 0};
  int n = 0;
  for (int64_t t : {1024, 8192}) {
    const int64_t qs[4] = {1, 2, t, 128};
    Tensor q(qs), k(qs), v(qs), o(qs), dout(qs), dq(qs), dk(qs), dv(qs);
    Tensor lse(1, 2, t, 1);
    REQUIRE(octattn_attention_backward_workspace_size(
                ctx, nullptr, q.ptr(), k.ptr(), v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), nullptr,
                dq.ptr(), dk.ptr(), dv.ptr(), nullptr, nullptr, &bytes[n++]) == OCTATTN_OK);
  }
  CHECK(bytes[0] == bytes[1]);
  CHECK(bytes[1] < size_t{4} << 20);
}

TEST_CASE("backward reads o and lse as inputs: they may overlap other inputs", "[backward][api]") {
  // o given as q's own memory (same shape): a nonsensical o, but an input like any
  // other, so the call runs and reads the same numbers as from a copy.
  Problem p(1, 2, 2, 20, 20, 8, 8, 71);
  octattn_attention_options opt = Options();
  Tensor dout = p.Out(), lse = p.Lse();
  dout.Fill(72);
  lse.Fill(73);
  Context ctx;
  Grads shared(p, false, false), copied(p, false, false);
  RequireBackward(ctx, opt, p, p.q, lse, dout, shared);
  const Tensor o = p.q;
  RequireBackward(ctx, opt, p, o, lse, dout, copied);
  CHECK(BytesEqual(shared.dq, copied.dq));
  CHECK(BytesEqual(shared.dk, copied.dk));
  CHECK(BytesEqual(shared.dv, copied.dv));
  // An lse of stride 0 (one value for every row) is an input too.
  Tensor flat = p.Lse();
  flat.t.stride[0] = flat.t.stride[1] = flat.t.stride[2] = 0;
  Grads g(p, false, false);
  RequireBackward(ctx, opt, p, p.q, flat, dout, g);
}

TEST_CASE("backward with a caller's workspace gives the same bytes", "[backward]") {
  Problem p(2, 4, 2, 77, 77, 16, 16, 51);
  octattn_attention_options opt = Options();
  std::vector<float> sinks = {0.5f, -kInf, 1.0f, 0.0f};
  opt.sinks = sinks.data();
  Tensor dout = p.Out();
  dout.Fill(54);
  Context ctx(2);
  Tensor o = p.Out(), lse = p.Lse();
  Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
  Grads a(p, false, true), b(p, false, true);
  RequireBackward(ctx, opt, p, o, lse, dout, a);
  size_t bytes = 0;
  REQUIRE(octattn_attention_backward_workspace_size(
              ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), nullptr,
              b.dq.ptr(), b.dk.ptr(), b.dv.ptr(), b.dsinks.data(), nullptr, &bytes) == OCTATTN_OK);
  std::vector<char> ws(bytes);
  REQUIRE(octattn_attention_backward(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                                     dout.ptr(), nullptr, b.dq.ptr(), b.dk.ptr(), b.dv.ptr(),
                                     b.dsinks.data(), nullptr, ws.data(), ws.size()) == OCTATTN_OK);
  CHECK(BytesEqual(a.dq, b.dq));
  CHECK(BytesEqual(a.dk, b.dk));
  CHECK(BytesEqual(a.dv, b.dv));
  CHECK(std::memcmp(a.dsinks.data(), b.dsinks.data(), 16) == 0);
  CHECK(b.dsinks[1] == 0.0f);
  CHECK(octattn_attention_backward(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                                   dout.ptr(), nullptr, b.dq.ptr(), b.dk.ptr(), b.dv.ptr(),
                                   b.dsinks.data(), nullptr, ws.data(),
                                   ws.size() - 64) == OCTATTN_ERROR_WORKSPACE_TOO_SMALL);
}

TEST_CASE("backward bad input: a status, a message, nothing written", "[backward][api]") {
  Problem p(1, 4, 2, 9, 9, 8, 8, 61);
  Tensor dout = p.Out();
  dout.Fill(62);
  Context ctx;
  octattn_attention_options opt = Options();
  std::vector<float> sinks = {0.5f, 0.1f, 1.0f, 0.0f};
  Tensor o = p.Out(), lse = p.Lse();
  Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
  Grads g(p, true, true);
  const float sentinel = 12345.0f;
  auto reset = [&]() {
    for (Tensor* x : {&g.dq, &g.dk, &g.dv, &g.dbias})
      std::fill(x->buf.begin(), x->buf.end(), sentinel);
    std::fill(g.dsinks.begin(), g.dsinks.end(), sentinel);
  };
  auto untouched = [&]() {
    for (Tensor* x : {&g.dq, &g.dk, &g.dv, &g.dbias})
      for (float y : x->buf)
        if (y != sentinel) return false;
    for (float y : g.dsinks)
      if (y != sentinel) return false;
    return true;
  };
  struct Bad {
    const char* what;
    octattn_status want;
    std::function<octattn_status()> call;
  };
  auto run = [&](const octattn_attention_options* options, const octattn_tensor* lse_t,
                 const octattn_tensor* dout_t, octattn_tensor* dq, octattn_tensor* dk,
                 octattn_tensor* dv, float* dsinks, octattn_tensor* dbias) {
    return octattn_attention_backward(ctx, options, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse_t,
                                      dout_t, nullptr, dq, dk, dv, dsinks, dbias, nullptr, 0);
  };
  octattn_attention_options with_sinks = opt;
  with_sinks.sinks = sinks.data();
  octattn_attention_options naive = Options(1, 0, 0, OCTATTN_ALGORITHM_NAIVE);
  octattn_attention_options small = opt;
  small.struct_size = 40;
  Tensor wrong(1, 4, 9, 7), bf = g.dq, huge_dq = g.dq, misaligned = g.dq;
  bf.t.dtype = OCTATTN_DTYPE_BF16;
  huge_dq.t.shape[0] = int64_t{1} << 61;
  misaligned.t.data = reinterpret_cast<char*>(misaligned.buf.data()) + 1;
  Tensor overlapping = g.dq;
  overlapping.t.stride[2] = 1;  // rows overlap each other
  octattn_tensor dq_on_q = *p.q.ptr();
  octattn_tensor dk_on_dv = *g.dv.ptr();
  Tensor db_wrong(1, 4, 9, 8);
  octattn_attention_options sinks_alias = with_sinks;
  const std::vector<Bad> bad = {
      {"no context", OCTATTN_ERROR_NULL_POINTER,
       [&] {
         return octattn_attention_backward(nullptr, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(),
                                           lse.ptr(), dout.ptr(), nullptr, g.dq.ptr(), g.dk.ptr(),
                                           g.dv.ptr(), nullptr, nullptr, nullptr, 0);
       }},
      {"lse NULL", OCTATTN_ERROR_NULL_POINTER,
       [&] {
         return run(&opt, nullptr, dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dout NULL", OCTATTN_ERROR_NULL_POINTER,
       [&] {
         return run(&opt, lse.ptr(), nullptr, g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr, nullptr);
       }},
      {"dv NULL", OCTATTN_ERROR_NULL_POINTER,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), nullptr, nullptr, nullptr);
       }},
      {"dq shape", OCTATTN_ERROR_INVALID_SHAPE,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), wrong.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dlse shape", OCTATTN_ERROR_INVALID_SHAPE,
       [&] {
         return octattn_attention_backward(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(),
                                           lse.ptr(), dout.ptr(), wrong.ptr(), g.dq.ptr(),
                                           g.dk.ptr(), g.dv.ptr(), nullptr, nullptr, nullptr, 0);
       }},
      {"dbias shape", OCTATTN_ERROR_INVALID_SHAPE,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    db_wrong.ptr());
       }},
      {"dout shape", OCTATTN_ERROR_INVALID_SHAPE,
       [&] {
         return run(&opt, lse.ptr(), wrong.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dq rows overlap", OCTATTN_ERROR_INVALID_STRIDE,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), overlapping.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dq too large", OCTATTN_ERROR_OVERFLOW,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), huge_dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dq on q", OCTATTN_ERROR_ALIASING,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), &dq_on_q, g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dk on dv", OCTATTN_ERROR_ALIASING,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), g.dq.ptr(), &dk_on_dv, g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"dsinks on sinks", OCTATTN_ERROR_ALIASING,
       [&] {
         return run(&sinks_alias, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(),
                    sinks.data() + 1, nullptr);
       }},
      {"dsinks without sinks", OCTATTN_ERROR_INVALID_OPTION,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(),
                    g.dsinks.data(), nullptr);
       }},
      {"struct size", OCTATTN_ERROR_STRUCT_SIZE,
       [&] {
         return run(&small, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"naive", OCTATTN_ERROR_UNSUPPORTED,
       [&] {
         return run(&naive, lse.ptr(), dout.ptr(), g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"bf16 dq", OCTATTN_ERROR_UNSUPPORTED,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), bf.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
      {"misaligned dq", OCTATTN_ERROR_MISALIGNED,
       [&] {
         return run(&opt, lse.ptr(), dout.ptr(), misaligned.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                    nullptr);
       }},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    reset();
    const octattn_status st = b.call();
    CHECK(st == b.want);
    CHECK(untouched());
    if (st != OCTATTN_OK && std::string(b.what) != "no context") CHECK(!ctx.Error().empty());
  }
  // Out of memory: a limit below the scratch the call needs.
  reset();
  Context limited;
  REQUIRE(octattn_context_set_memory_limit(limited, 64) == OCTATTN_OK);
  CHECK(octattn_attention_backward(limited, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(),
                                   lse.ptr(), dout.ptr(), nullptr, g.dq.ptr(), g.dk.ptr(),
                                   g.dv.ptr(), nullptr, nullptr, nullptr,
                                   0) == OCTATTN_ERROR_OUT_OF_MEMORY);
  CHECK(untouched());
  size_t bytes = 0;
  CHECK(octattn_attention_backward_workspace_size(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(),
                                                  o.ptr(), lse.ptr(), dout.ptr(), nullptr,
                                                  g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr,
                                                  nullptr, nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_attention_backward_workspace_size(
            ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), nullptr,
            g.dq.ptr(), g.dk.ptr(), g.dv.ptr(), nullptr, nullptr, &bytes) == OCTATTN_OK);
  CHECK(bytes > 0);
}
