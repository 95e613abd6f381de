// Score modifiers and mask options: softcap, ALiBi, bias and mask tensors, sinks and
// chunked attention, alone and combined, on every algorithm, backend and target against
// the fp64 reference; their invariants (decode equals prefill, causality with hostile
// values where pairs are masked, threads and layouts); their stages; their bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "support.h"

using namespace octtest;

namespace {

constexpr int64_t kDef = OCTATTN_Q_START_DEFAULT;
const float kInf = std::numeric_limits<float>::infinity();

// The modifiers of one call, owning their arrays and tensors.
struct Mods {
  float softcap = 0;
  bool alibi = false, sinks = false, bias = false;
  int64_t chunk = 0;
  // Mask tensor: 0 none, 1 random holes (per batch and head), 2 broadcast holes (one
  // [1, 1, Tq, Tk] mask), 3 some keys masked for every row (padding).
  int mask = 0;
  bool bias_broadcast = false;  // bias [1, Hq, 1, Tk]
};

struct Owned {
  std::vector<float> slopes, sinks;
  std::unique_ptr<Tensor> bias;
  std::unique_ptr<BoolTensor> mask;
};

std::string Describe(const Mods& m) {
  return "softcap " + std::to_string(m.softcap) + " alibi " + std::to_string(m.alibi) + " sinks " +
         std::to_string(m.sinks) + " bias " + std::to_string(m.bias) +
         (m.bias_broadcast ? " (broadcast)" : "") + " chunk " + std::to_string(m.chunk) + " mask " +
         std::to_string(m.mask);
}

// ALiBi's slopes for `heads` heads (the paper's geometric sequence from 2^(-8 / heads)).
std::vector<float> AlibiSlopes(int64_t heads) {
  std::vector<float> s;
  for (int64_t h = 0; h < heads; ++h)
    s.push_back(std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(heads)));
  return s;
}

void Apply(const Mods& m, const Problem& p, uint32_t seed, Owned* own,
           octattn_attention_options* opt) {
  const int64_t B = p.q.shape[0], H = p.q.shape[1], Tq = p.q.shape[2], Tk = p.k.shape[2];
  std::mt19937 rng(seed);
  opt->softcap = m.softcap;
  opt->chunk = m.chunk;
  if (m.alibi) {
    own->slopes = AlibiSlopes(H);
    opt->alibi_slopes = own->slopes.data();
  }
  if (m.sinks) {
    std::uniform_real_distribution<float> d(-1.0f, 2.0f);
    own->sinks.clear();
    for (int64_t h = 0; h < H; ++h) own->sinks.push_back(h == 1 ? -kInf : d(rng));
    opt->sinks = own->sinks.data();
  }
  if (m.bias) {
    own->bias = std::make_unique<Tensor>(m.bias_broadcast ? 1 : B, H, m.bias_broadcast ? 1 : Tq, Tk,
                                         Layout::kPadded);
    own->bias->Fill(seed + 7, -2.0f, 2.0f);
    opt->bias = own->bias->ptr();
  }
  if (m.mask) {
    const int64_t s[4] = {m.mask == 1 ? B : 1, m.mask == 1 ? H : 1, m.mask == 3 ? 1 : Tq, Tk};
    own->mask = std::make_unique<BoolTensor>(s);
    std::uniform_int_distribution<int> d(0, 3);
    for (auto& x : own->mask->buf) x = m.mask == 3 ? 1 : (d(rng) == 0 ? 0 : 1 + d(rng));
    if (m.mask == 3)
      for (int64_t j = 0; j < Tk; j += 5) own->mask->at(0, 0, 0, j) = 0;
    opt->mask = &own->mask->t;
  }
}

// The header's bound with S bounded from above: the largest |scaled score|, capped by
// softcap, plus the largest ALiBi term and |bias|.
double ModBound(const Problem& p, const Owned& own, const octattn_attention_options& opt) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.q.shape[3]));
  const ScoreRange r = Scores(p.q, p.k, scale);
  double s = opt.softcap > 0 ? std::min(r.s, static_cast<double>(opt.softcap)) : r.s;
  if (opt.alibi_slopes) {
    double slope = 0;
    for (float x : own.slopes) slope = std::max(slope, std::fabs(static_cast<double>(x)));
    const int64_t q0 = opt.q_start == kDef ? p.k.shape[2] - p.q.shape[2] : opt.q_start;
    const double far = static_cast<double>(
        std::max(std::llabs(q0) + p.k.shape[2], std::llabs(q0 + p.q.shape[2]) + p.k.shape[2]));
    s += slope * far;
  }
  if (own.bias) s += own.bias->MaxAbs();
  return p.v.MaxAbs() * (kTolerance * std::max(1.0, s) + kCancelTolerance * r.c);
}

void CheckMods(const Problem& p, octattn_attention_options opt, const Mods& m,
               const std::vector<Target>& targets, uint32_t seed) {
  INFO(Describe(m));
  Owned own;
  Apply(m, p, seed, &own, &opt);
  const double bound = ModBound(p, own, opt);
  Context ref_ctx;
  Tensor ref = p.Out(), ref_lse = p.Lse(), ref_w = p.Weights();
  opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  Attend(ref_ctx, opt, p.q, p.k, p.v, ref, &ref_lse, &ref_w);
  const double lse_tol =
      4e-6 * std::max(1.0, bound / std::max(1e-30, (double)p.v.MaxAbs()) / kTolerance);
  for (const Target& t : targets) {
    Context ctx(t);
    Tensor naive = p.Out();
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
      INFO(t.Name() << " " << octattn_algorithm_name(algo));
      opt.algorithm = algo;
      Tensor o = p.Out(), lse = p.Lse(), w = p.Weights();
      const bool with_w = algo == OCTATTN_ALGORITHM_NAIVE;
      Attend(ctx, opt, p.q, p.k, p.v, o, &lse, with_w ? &w : nullptr);
      CHECK(MaxDiff(o, ref) <= bound);
      CHECK(MaxDiff(lse, ref_lse) <= lse_tol);
      if (with_w) {
        CHECK(MaxDiff(w, ref_w) <= lse_tol);
        naive = o;
      } else {
        CHECK(MaxDiff(o, naive) <= 2 * bound);
      }
    }
  }
}

std::vector<Mods> Singles() {
  std::vector<Mods> out;
  Mods m;
  m.softcap = 0.7f;
  out.push_back(m);
  m = Mods{};
  m.softcap = 30.0f;
  out.push_back(m);
  m = Mods{};
  m.alibi = true;
  out.push_back(m);
  m = Mods{};
  m.sinks = true;
  out.push_back(m);
  m = Mods{};
  m.bias = true;
  out.push_back(m);
  m.bias_broadcast = true;
  out.push_back(m);
  for (int mask : {1, 2, 3}) {
    m = Mods{};
    m.mask = mask;
    out.push_back(m);
  }
  for (int64_t chunk : {1, 7, 16}) {
    m = Mods{};
    m.chunk = chunk;
    out.push_back(m);
  }
  m = Mods{};  // everything at once
  m.softcap = 2.0f;
  m.alibi = m.sinks = m.bias = true;
  m.chunk = 11;
  m.mask = 1;
  out.push_back(m);
  return out;
}

}  // namespace

TEST_CASE("modifiers alone and combined match the reference", "[modifiers][dispatch]") {
  const auto targets = AllTargets();
  const int64_t t = Sized(45, 21);
  const struct {
    int32_t causal;
    int64_t window, stride, q_start, q_len, kv_len;
  } masks[] = {{1, 0, 0, kDef, t, t}, {0, 0, 0, kDef, t, t}, {1, 6, 4, kDef, t, t},
               {1, 0, 0, kDef, 3, t}, {1, 0, 0, -5, 9, t},   {1, 0, 0, t - 2, 9, t}};
  uint32_t seed = 1;
  for (const auto& mk : masks) {
    INFO("causal " << mk.causal << " window " << mk.window << " stride " << mk.stride << " q_start "
                   << mk.q_start << " Tq " << mk.q_len);
    const Problem p(2, 4, 2, mk.q_len, mk.kv_len, 16, 8, seed, 2.0f);
    for (const Mods& m : Singles()) {
      if (Emulated() && m.mask && m.mask != 1) continue;
      CheckMods(p, Options(mk.causal, mk.window, mk.stride, OCTATTN_ALGORITHM_AUTO, mk.q_start), m,
                targets, seed++);
    }
  }
}

TEST_CASE("modifiers across the fused path's tiles and key spans", "[modifiers]") {
  std::vector<Target> targets;
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD})
    targets.push_back({b, OCTATTN_TARGET_AUTO});
  uint32_t seed = 100;
  for (const Mods& base : Singles()) {
    Mods m = base;
    if (m.chunk) m.chunk *= 37;  // chunks across tile (256) and key chunk (1024) edges
    // Prefill over several tiles (in the small runs one tile and its tail), a decode row
    // and a chunked prefill past 1024 keys.
    const int64_t t = SmallSized(530, 280);
    CheckMods(Problem(1, 2, 1, t, t, 16, 16, seed), Options(), m, targets, seed);
    ++seed;
    CheckMods(Problem(1, 8, 2, 2, 1300, 32, 32, seed), Options(1, 0, 0), m, targets, seed);
    ++seed;
    CheckMods(Problem(1, 2, 1, SmallSized(100, 24), 1300, 16, 16, seed), Options(1, 400, 150), m,
              targets, seed);
    ++seed;
  }
}

TEST_CASE("chunked attention: keys of the row's chunk only, positions from k_start",
          "[modifiers]") {
  const auto targets = AllTargets();
  // A shard of the keys at k_start 5 with chunk 8: chunk edges sit at positions 8, 16...
  Problem p(1, 2, 2, 30, 30, 16, 16, 31);
  octattn_attention_options opt = Options();
  opt.k_start = 5;
  opt.chunk = 8;
  Context ctx;
  Tensor want = p.Out(), got = p.Out();
  opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  Attend(ctx, opt, p.q, p.k, p.v, want);
  // Row 3 sits at position 8: its chunk starts there, so it reads only key 3: v row 3.
  for (int64_t d = 0; d < 16; ++d) CHECK(want.at(0, 0, 3, d) == p.v.at(0, 0, 3, d));
  for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
    opt.algorithm = algo;
    Attend(ctx, opt, p.q, p.k, p.v, got);
    CHECK(MaxDiff(got, want) <= Bound(p.q, p.k, p.v));
  }
}

TEST_CASE("softcap and ALiBi keep their formulas at large scores", "[modifiers]") {
  // Scores far past the cap: every row's weights come from c * tanh(s / c).
  const auto targets = AllTargets();
  Problem p(1, 2, 1, 40, 40, 32, 32, 41, 8.0f);
  Mods m;
  m.softcap = 5.0f;
  CheckMods(p, Options(), m, targets, 41);
  m.alibi = true;
  CheckMods(p, Options(1, 0, 0, OCTATTN_ALGORITHM_AUTO, 1000), m, targets, 42);
}

// A bias or mask tensor viewed from query row r0 for `rows` rows and `kv` keys (a
// broadcast row stays broadcast); null for none.
const octattn_tensor* RowsView(const octattn_tensor* t, int64_t elem_bytes, int64_t r0,
                               int64_t rows, int64_t kv, octattn_tensor* view) {
  if (!t) return nullptr;
  *view = *t;
  if (view->shape[2] > 1) {
    view->data = static_cast<char*>(view->data) + r0 * view->stride[2] * elem_bytes;
    view->shape[2] = rows;
  }
  view->shape[3] = kv;
  return view;
}

// The call's query rows [r0, r0 + rows) against keys [0, kv): views of p's tensors and of
// the modifiers' bias and mask, into o and lse.
void AttendRows(const Context& ctx, octattn_attention_options opt, const Problem& p, int64_t r0,
                int64_t rows, int64_t kv, Tensor* o, Tensor* lse) {
  octattn_tensor q = p.q.t, k = p.k.t, v = p.v.t, bias, mask;
  q.data = static_cast<float*>(q.data) + r0 * q.stride[2];
  q.shape[2] = rows;
  k.shape[2] = v.shape[2] = kv;
  opt.bias = RowsView(opt.bias, sizeof(float), r0, rows, kv, &bias);
  opt.mask = RowsView(opt.mask, sizeof(uint8_t), r0, rows, kv, &mask);
  *o = Tensor(p.q.shape[0], p.q.shape[1], rows, p.v.shape[3]);
  *lse = Tensor(p.q.shape[0], p.q.shape[1], rows, 1);
  REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, o->ptr(), lse->ptr(), nullptr, nullptr, 0) ==
          OCTATTN_OK);
}

TEST_CASE("fused decode equals prefill byte for byte with every modifier",
          "[modifiers][invariants]") {
  // Past one key span (1024): decode splits the keys into units. The best target of
  // each backend and Highway's scalar one (the others run the same code at other widths).
  // The prefill: every row natively; in the small runs (emulated, sanitized) the 9 rows
  // ending at the decoded one, a chunked prefill (itself promised equal to prefill).
  const int64_t T = 1100, chunk_rows = 9;
  std::vector<Target> targets{{OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO},
                              {OCTATTN_BACKEND_XSIMD, OCTATTN_TARGET_AUTO},
                              {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_SCALAR}};
  for (const Target& t : targets) {
    INFO(t.Name());
    Context ctx(t);
    for (Mods m : Singles()) {
      if (m.chunk) m.chunk *= 100;
      INFO(Describe(m));
      Problem p(1, 4, 2, T, T, 8, 8, 50);
      octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
      Owned own;
      Apply(m, p, 51, &own, &opt);
      Tensor full, full_lse;
      if (!Small()) AttendRows(ctx, opt, p, 0, T, T, &full, &full_lse);
      for (int64_t i : {int64_t{0}, int64_t{700}, T - 1}) {  // 700: in a chunk of 100 too
        // The prefill rows ending at i, against keys 0..i (all rows natively).
        const int64_t first = Small() ? std::max<int64_t>(0, i + 1 - chunk_rows) : 0;
        if (Small()) AttendRows(ctx, opt, p, first, i + 1 - first, i + 1, &full, &full_lse);
        // One query at position i against keys 0..i, its modifiers' row i.
        Tensor o, lse;
        AttendRows(ctx, opt, p, i, 1, i + 1, &o, &lse);
        for (int64_t h = 0; h < 4; ++h) {
          INFO("row " << i << " head " << h);
          for (int64_t e = 0; e < 8; ++e) {
            const float x = o.at(0, h, 0, e), y = full.at(0, h, i - first, e);
            REQUIRE(std::memcmp(&x, &y, 4) == 0);
          }
          const float x = lse.at(0, h, 0, 0), y = full_lse.at(0, h, i - first, 0);
          REQUIRE(std::memcmp(&x, &y, 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("hostile values where the tensors mask a pair never reach an output",
          "[modifiers][invariants][dispatch]") {
  const int64_t T = Sized(70, 30);
  for (const Target& t : AllTargets()) {
    Context ctx(t);
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
      INFO(t.Name() << " " << octattn_algorithm_name(algo));
      Problem p(1, 2, 1, T, T, 16, 16, 60);
      octattn_attention_options opt = Options(1, 0, 0, algo);
      // Padding: keys 3, 10, 17... masked for every row by the mask tensor, keys 5, 12...
      // by a -inf bias; their k and v rows, and the bias at every masked pair, are NaN.
      const int64_t s[4] = {1, 1, 1, T};
      BoolTensor mask(s);
      Tensor bias(1, 2, T, T);
      for (int64_t j = 0; j < T; ++j) {
        const bool pad_mask = j % 7 == 3, pad_bias = j % 7 == 5;
        if (pad_mask) mask.at(0, 0, 0, j) = 0;
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t i = 0; i < T; ++i)
            bias.at(0, h, i, j) = pad_bias ? -kInf : (pad_mask || j > i) ? NAN : 0.25f * h;
        if (pad_mask || pad_bias)
          for (int64_t d = 0; d < 16; ++d) p.k.at(0, 0, j, d) = p.v.at(0, 0, j, d) = NAN;
      }
      opt.mask = &mask.t;
      opt.bias = &bias.t;
      Tensor o = p.Out(), lse = p.Lse();
      Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
      o.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
        INFO("row " << c);
        REQUIRE(std::isfinite(o.at(a, b, c, d)));
      });
      // Row 3 and 5 read keys 0..2 and 0..4 minus the padding: finite, not empty.
      CHECK(std::isfinite(lse.at(0, 0, 3, 0)));
    }
  }
}

TEST_CASE("a fully masked row: zeros, lse -inf or the sink", "[modifiers]") {
  Problem p(1, 2, 2, 6, 6, 8, 8, 70);
  const int64_t s[4] = {1, 1, 6, 6};
  BoolTensor mask(s);
  for (int64_t j = 0; j < 6; ++j) mask.at(0, 0, 2, j) = 0;  // row 2 reads nothing
  const float sinks[2] = {0.5f, -kInf};
  for (octattn_algorithm algo :
       {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
    INFO(octattn_algorithm_name(algo));
    Context ctx;
    octattn_attention_options opt = Options(1, 0, 0, algo);
    opt.mask = &mask.t;
    opt.sinks = sinks;
    Tensor o = p.Out(), lse = p.Lse();
    Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
    for (int64_t d = 0; d < 8; ++d) CHECK(o.at(0, 0, 2, d) == 0.0f);
    CHECK(lse.at(0, 0, 2, 0) == 0.5f);
    CHECK(lse.at(0, 1, 2, 0) == -kInf);
    // Row 0 reads key 0 only; a sink of 0.5 takes exp(0.5) of the denominator.
    const double scale = 1.0 / std::sqrt(8.0);
    double s0 = 0;
    for (int64_t d = 0; d < 8; ++d)
      s0 += static_cast<double>(p.q.at(0, 0, 0, d)) * p.k.at(0, 0, 0, d);
    s0 *= scale;
    const double w = std::exp(s0) / (std::exp(s0) + std::exp(0.5));
    for (int64_t d = 0; d < 8; ++d)
      CHECK(std::fabs(o.at(0, 0, 0, d) - w * p.v.at(0, 0, 0, d)) < 1e-6);
  }
}

TEST_CASE("modifiers: thread count and layouts change no byte", "[modifiers][invariants]") {
  Mods m;
  m.softcap = 3.0f;
  m.alibi = m.sinks = m.bias = true;
  m.mask = 1;
  m.chunk = 100;
  for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
    INFO(octattn_algorithm_name(algo));
    Problem p(2, 4, 2, 300, 300, 32, 32, 80);
    Problem bthd(2, 4, 2, 300, 300, 32, 32, 80, 1.0f, Layout::kBTHD);
    octattn_attention_options opt = Options(1, 0, 0, algo);
    Owned own;
    Apply(m, p, 81, &own, &opt);
    Tensor one = p.Out(), many = p.Out(), other = p.Out(Layout::kDimSlowest);
    Context c1(1), c4(4);
    Attend(c1, opt, p.q, p.k, p.v, one);
    Attend(c4, opt, p.q, p.k, p.v, many);
    CHECK(BytesEqual(one, many));
    bthd.q.CopyValuesFrom(p.q);
    bthd.k.CopyValuesFrom(p.k);
    bthd.v.CopyValuesFrom(p.v);
    Tensor bias2(2, 4, 300, 300, Layout::kDimSlowest);
    bias2.CopyValuesFrom(*own.bias);
    opt.bias = bias2.ptr();
    Attend(c4, opt, bthd.q, bthd.k, bthd.v, other);
    CHECK(BytesEqual(one, other));
  }
}

TEST_CASE("stages compose the modifiers as the naive path does", "[modifiers][stages]") {
  Problem p(2, 4, 2, 33, 33, 16, 16, 90);
  octattn_attention_options opt = Options(1, 5, 4, OCTATTN_ALGORITHM_REFERENCE);
  Mods m;
  m.softcap = 1.5f;
  m.alibi = m.sinks = m.bias = true;
  m.mask = 1;
  m.chunk = 13;
  Owned own;
  Apply(m, p, 91, &own, &opt);
  Context ctx;
  Tensor want = p.Out(), want_lse = p.Lse();
  Attend(ctx, opt, p.q, p.k, p.v, want, &want_lse);
  Tensor scores = p.Weights(), lse = p.Lse(), o = p.Out();
  REQUIRE(octattn_scores(ctx, p.q.ptr(), p.k.ptr(), scores.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_scale(ctx, scores.ptr(), 0.25f) == OCTATTN_OK);
  REQUIRE(octattn_modify_scores(ctx, &opt, scores.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_mask(ctx, &opt, scores.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_softmax_sinks(ctx, scores.ptr(), own.sinks.data(), lse.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_weighted_sum(ctx, scores.ptr(), p.v.ptr(), o.ptr()) == OCTATTN_OK);
  CHECK(MaxDiff(o, want) <= ModBound(p, own, opt));
  CHECK(MaxDiff(lse, want_lse) <= 1e-4);
}

TEST_CASE("modifiers: bad input is a status, a message and nothing written", "[modifiers][api]") {
  Problem p(1, 2, 1, 4, 4, 8, 8, 95);
  Context ctx;
  auto expect = [&](octattn_attention_options opt, octattn_status want, const char* what) {
    INFO(what);
    Tensor o = p.Out();
    o.Fill(3);
    const Tensor before = o;
    CHECK(octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), nullptr, nullptr,
                            nullptr, 0) == want);
    CHECK(BytesEqual(o, before));
    CHECK(!ctx.Error().empty());
  };
  octattn_attention_options opt = Options();
  opt.chunk = -1;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "negative chunk");
  opt = Options();
  opt.softcap = kInf;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "softcap inf");
  opt.softcap = NAN;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "softcap NaN");
  opt.softcap = -1;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "negative softcap");
  opt = Options();
  opt.reserved2 = 1;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "reserved2");
  const float bad_slopes[2] = {0.5f, NAN};
  opt = Options();
  opt.alibi_slopes = bad_slopes;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "slope NaN");
  const float bad_sinks[2] = {0.5f, kInf};
  opt = Options();
  opt.sinks = bad_sinks;
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "sink +inf");
  Tensor bias(1, 2, 4, 5);
  opt = Options();
  opt.bias = bias.ptr();
  expect(opt, OCTATTN_ERROR_INVALID_SHAPE, "bias of the wrong kv_len");
  Tensor bias3(1, 3, 4, 4);
  opt.bias = bias3.ptr();
  expect(opt, OCTATTN_ERROR_INVALID_SHAPE, "bias of the wrong head count (neither 2 nor 1)");
  const int64_t s[4] = {1, 2, 4, 4};
  BoolTensor mask(s);
  opt = Options();
  opt.bias = &mask.t;  // bool data as a bias
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "bias of dtype bool");
  Tensor fmask(1, 2, 4, 4);
  opt = Options();
  opt.mask = fmask.ptr();
  expect(opt, OCTATTN_ERROR_INVALID_OPTION, "mask of dtype f32");
  mask.t.data = nullptr;
  opt.mask = &mask.t;
  expect(opt, OCTATTN_ERROR_NULL_POINTER, "mask data NULL");
  // A bias that overlaps the output.
  Tensor o = p.Out();
  octattn_tensor alias = *o.ptr();
  alias.shape[3] = 4;
  opt = Options();
  opt.bias = &alias;
  CHECK(octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), nullptr, nullptr,
                          nullptr, 0) == OCTATTN_ERROR_ALIASING);
  // The stages.
  Tensor scores = p.Weights();
  CHECK(octattn_softmax_sinks(ctx, scores.ptr(), nullptr, nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_softmax_sinks(ctx, scores.ptr(), bad_sinks, nullptr) ==
        OCTATTN_ERROR_INVALID_OPTION);
  opt = Options();
  opt.alibi_slopes = bad_slopes;
  CHECK(octattn_modify_scores(ctx, &opt, scores.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  opt = Options();
  opt.bias = scores.ptr();  // in place would alias
  CHECK(octattn_modify_scores(ctx, &opt, scores.ptr()) == OCTATTN_ERROR_ALIASING);
}

TEST_CASE("options of version 0.2's size read no modifier", "[modifiers][api]") {
  Problem p(1, 2, 1, 9, 9, 8, 8, 99);
  Context ctx;
  octattn_attention_options opt = Options();
  Tensor want = p.Out(), got = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, want);
  opt.struct_size = 56;  // a caller built against 0.2: the bytes after k_start are not its
  opt.chunk = 3;
  opt.softcap = NAN;
  opt.reserved2 = 7;
  Attend(ctx, opt, p.q, p.k, p.v, got);
  CHECK(BytesEqual(got, want));
}
