// Key scores (options.key_scores): each key's sum of the weights the rows of its kv
// head's group gave it. Every algorithm agrees with the sums of the reference's weights;
// the bytes do not depend on threads, layouts, a paged cache or a shared prefix; a key no
// row reads gets 0 whatever its bits; every bad tensor is a status with nothing written.
#include <functional>
#include <limits>
#include <vector>

#include "support.h"

namespace octtest {
namespace {

struct Case {
  int64_t batch, hq, hkv, tq, tk, d;
  int32_t causal;
  int64_t window, stride, chunk;
  float softcap;
  bool sinks, alibi, mask;
  int64_t q_start = OCTATTN_Q_START_DEFAULT;
};

std::string Name(const Case& c) {
  return "B " + std::to_string(c.batch) + " Hq " + std::to_string(c.hq) + " Hkv " +
         std::to_string(c.hkv) + " T " + std::to_string(c.tq) + "x" + std::to_string(c.tk) + " D " +
         std::to_string(c.d) + " causal " + std::to_string(c.causal) + " window " +
         std::to_string(c.window) + " stride " + std::to_string(c.stride) + " chunk " +
         std::to_string(c.chunk) + " softcap " + std::to_string(c.softcap) + " sinks " +
         std::to_string(c.sinks) + " alibi " + std::to_string(c.alibi) + " mask " +
         std::to_string(c.mask);
}

// Prefill, decode (one row over several key spans, split into units), the gathered
// strided columns, chunks, GQA, full attention, and each modifier.
const Case kCases[] = {
    {1, 1, 1, 1, 1, 16, 1, 0, 0, 0, 0.0f, false, false, false},
    {2, 4, 2, 37, 53, 16, 1, 0, 0, 0, 0.0f, false, false, false},
    {1, 4, 1, 300, 300, 32, 1, 0, 0, 0, 0.0f, true, false, false},
    {1, 2, 1, 520, 700, 24, 1, 64, 16, 0, 0.0f, false, false, false},
    {1, 4, 2, 1, 3000, 32, 1, 0, 0, 0, 0.0f, false, false, false},
    {2, 8, 2, 2, 2600, 16, 1, 300, 64, 0, 5.0f, true, false, false},
    {1, 2, 2, 3, 2100, 16, 1, 0, 0, 700, 0.0f, false, true, false},
    {1, 3, 1, 90, 40, 16, 0, 0, 0, 0, 0.0f, false, false, true},
    {1, 2, 1, 200, 450, 64, 1, 100, 0, 0, 3.0f, false, true, true},
    {1, 1, 1, 64, 1500, 16, 1, 0, 0, 0, 0.0f, true, false, false, 700},
};

// A case's problem, its options' arrays and tensors.
struct KeyCall {
  Problem p;
  std::vector<float> sinks, slopes;
  BoolTensor bits;
  explicit KeyCall(const Case& c, uint32_t seed, int layout = kBHTD)
      : p(c.batch, c.hq, c.hkv, c.tq, c.tk, c.d, c.d, seed, 2.0f, layout),
        bits(c.batch, c.hq, c.tq, c.tk) {
    std::mt19937 rng(seed);
    for (int64_t h = 0; h < c.hq; ++h) {
      sinks.push_back(h % 3 == 2 ? -INFINITY : 0.5f * static_cast<float>(rng() % 5));
      slopes.push_back(0.05f * static_cast<float>(rng() % 5));
    }
    for (uint8_t& x : bits.buf) x = rng() % 4 != 0;
  }
  octattn_attention_options Options(const Case& c, octattn_algorithm algorithm) const {
    octattn_attention_options o =
        octtest::Options(c.causal, c.window, c.stride, algorithm, c.q_start);
    o.chunk = c.chunk;
    o.softcap = c.softcap;
    if (c.sinks) o.sinks = sinks.data();
    if (c.alibi) o.alibi_slopes = slopes.data();
    if (c.mask) o.mask = &bits.t;
    return o;
  }
  Tensor Scores() const { return Tensor(p.q.shape[0], p.k.shape[1], p.k.shape[2], 1); }
};

// The key scores of a call (also filling o and lse), every element first set to a sentinel
// that the call must overwrite.
Tensor KeyScores(Context& ctx, octattn_attention_options opt, const KeyCall& kc,
                 Tensor* o = nullptr, Tensor* lse = nullptr) {
  Tensor ks = kc.Scores(), out = kc.p.Out(), l = kc.p.Lse();
  for (float& x : ks.buf) x = -7.0f;
  opt.key_scores = ks.ptr();
  Attend(ctx, opt, kc.p.q, kc.p.k, kc.p.v, o ? *o : out, lse ? lse : &l);
  for (int64_t b = 0; b < ks.shape[0]; ++b)
    for (int64_t g = 0; g < ks.shape[1]; ++g)
      for (int64_t j = 0; j < ks.shape[2]; ++j) REQUIRE(ks.at(b, g, j, 0) != -7.0f);
  return ks;
}

// The expected scores: the reference's weights summed over each group's heads and rows.
std::vector<double> ExpectedScores(Context& ctx, const Case& c, const KeyCall& kc) {
  Tensor o = kc.p.Out(), w = kc.p.Weights();
  octattn_attention_options opt = kc.Options(c, OCTATTN_ALGORITHM_REFERENCE);
  Attend(ctx, opt, kc.p.q, kc.p.k, kc.p.v, o, nullptr, &w);
  const int64_t group = c.hq / c.hkv;
  std::vector<double> want(static_cast<size_t>(c.batch * c.hkv * c.tk), 0.0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.tq; ++i)
        for (int64_t j = 0; j < c.tk; ++j)
          want[static_cast<size_t>((b * c.hkv + h / group) * c.tk + j)] += w.at(b, h, i, j);
  return want;
}

// The bound the header states: 1e-5 of the sum plus 2^-31 per task (at most one per row).
void RequireNear(const Tensor& ks, const std::vector<double>& want, const Case& c) {
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.hkv; ++g)
      for (int64_t j = 0; j < c.tk; ++j) {
        const double w = want[static_cast<size_t>((b * c.hkv + g) * c.tk + j)];
        const float got = ks.at(b, g, j, 0);
        INFO("entry " << b << " kv head " << g << " key " << j << ": " << got << " vs " << w);
        if (w == 0.0) {
          REQUIRE(got == 0.0f);  // unread keys: exactly 0
          continue;
        }
        REQUIRE(std::fabs(got - w) <= 1e-5 * w + static_cast<double>(c.tq) * 0x1p-31 + 1e-7);
      }
}

TEST_CASE("key scores agree with the sums of the reference's weights, every algorithm",
          "[key_scores]") {
  for (const Case& c : kCases) {
    INFO(Name(c));
    const KeyCall kc(c, 11);
    Context ctx(2);
    const std::vector<double> want = ExpectedScores(ctx, c, kc);
    for (octattn_algorithm a :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO("algorithm " << a);
      Tensor o = kc.p.Out(), lse = kc.p.Lse(), plain = kc.p.Out(), plain_lse = kc.p.Lse();
      const Tensor ks = KeyScores(ctx, kc.Options(c, a), kc, &o, &lse);
      RequireNear(ks, want, c);
      // Asking for them changes no byte of o and lse.
      Attend(ctx, kc.Options(c, a), kc.p.q, kc.p.k, kc.p.v, plain, &plain_lse);
      REQUIRE(BytesEqual(o, plain));
      REQUIRE(BytesEqual(lse, plain_lse));
    }
  }
}

TEST_CASE("key scores on every target agree with the reference", "[key_scores][dispatch]") {
  const Case cases[] = {kCases[2], kCases[4], kCases[5]};
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    for (Case c : cases) {
      if (Emulated()) c.tk = std::min<int64_t>(c.tk, 1100), c.tq = std::min<int64_t>(c.tq, 40);
      INFO(Name(c));
      const KeyCall kc(c, 3);
      Context ref(1), ctx(t, 2);
      RequireNear(KeyScores(ctx, kc.Options(c, OCTATTN_ALGORITHM_FUSED), kc),
                  ExpectedScores(ref, c, kc), c);
    }
  }
}

TEST_CASE("key scores keep their bytes across threads and layouts", "[key_scores]") {
  for (const Case& c : kCases) {
    INFO(Name(c));
    for (octattn_algorithm a : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE}) {
      const KeyCall kc(c, 21);
      Context one(1);
      const Tensor ks = KeyScores(one, kc.Options(c, a), kc);
      for (int threads : {2, 3})
        for (int layout : {kBHTD, kBTHD, kPadded}) {
          INFO("algorithm " << a << " threads " << threads << " layout " << layout);
          KeyCall other(c, 21, layout);
          other.p.q.CopyValuesFrom(kc.p.q);
          other.p.k.CopyValuesFrom(kc.p.k);
          other.p.v.CopyValuesFrom(kc.p.v);
          Context ctx(threads);
          Tensor strided(c.batch, c.hkv, c.tk, 1, layout);  // the output in that layout too
          octattn_attention_options opt = other.Options(c, a);
          opt.mask = c.mask ? &kc.bits.t : nullptr;
          opt.key_scores = strided.ptr();
          Tensor o = other.p.Out(layout);
          Attend(ctx, opt, other.p.q, other.p.k, other.p.v, o);
          Tensor back = kc.Scores();
          back.CopyValuesFrom(strided);
          REQUIRE(BytesEqual(ks, back));
        }
    }
  }
}

TEST_CASE("a key no row reads scores 0 and its bits reach no score", "[key_scores]") {
  // Rows at positions 0 .. 63 of 1500 keys (q_start 0): keys from 64 on are no row's;
  // with a window of 16 and a stride of 8 the keys between the strided columns below the
  // window are no row's either.
  const Case cases[] = {
      {1, 2, 1, 64, 1500, 16, 1, 0, 0, 0, 0.0f, false, false, false, 0},
      {1, 2, 1, 1, 1500, 16, 1, 16, 8, 0, 0.0f, true, false, false},
      {1, 4, 2, 100, 1500, 16, 1, 16, 8, 0, 0.0f, false, false, false, 1300},
  };
  for (const Case& c : cases) {
    INFO(Name(c));
    for (octattn_algorithm a :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO("algorithm " << a);
      KeyCall kc(c, 31);
      Context ctx(2);
      const octattn_attention_options opt = kc.Options(c, a);
      const Tensor clean = KeyScores(ctx, opt, kc);
      // Which keys a row reads: the mask's pairs.
      Tensor w = kc.p.Weights(), o = kc.p.Out();
      octattn_attention_options ropt = kc.Options(c, OCTATTN_ALGORITHM_REFERENCE);
      Attend(ctx, ropt, kc.p.q, kc.p.k, kc.p.v, o, nullptr, &w);
      for (int64_t j = 0; j < c.tk; ++j) {
        bool read = false;
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t i = 0; i < c.tq; ++i) read |= w.at(0, h, i, j) != 0.0f;
        if (read) continue;
        for (int64_t g = 0; g < c.hkv; ++g) {
          REQUIRE(clean.at(0, g, j, 0) == 0.0f);
          for (int64_t d = 0; d < c.d; ++d) {
            kc.p.k.at(0, g, j, d) = std::numeric_limits<float>::quiet_NaN();
            kc.p.v.at(0, g, j, d) = std::numeric_limits<float>::infinity();
          }
        }
      }
      REQUIRE(BytesEqual(clean, KeyScores(ctx, opt, kc)));
    }
  }
}

TEST_CASE("a NaN a row reads makes the scores of the keys it reads NaN", "[key_scores]") {
  const Case c{1, 2, 1, 1, 2100, 16, 1, 0, 0, 0, 0.0f, false, false, false};
  for (octattn_algorithm a :
       {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
    INFO("algorithm " << a);
    KeyCall kc(c, 41);
    kc.p.k.at(0, 0, 1500, 3) = std::numeric_limits<float>::quiet_NaN();
    Context ctx(2);
    const Tensor ks = KeyScores(ctx, kc.Options(c, a), kc);
    for (int64_t j : {0, 1000, 1500, 2099}) REQUIRE(std::isnan(ks.at(0, 0, j, 0)));
  }
}

TEST_CASE("key scores of a paged cache and of a shared prefix: the bytes of copies",
          "[key_scores]") {
  // Four decode rows over one 3000-row cache: as a dense batch whose k and v have batch
  // stride 0 (their spans read once for all, cascade decode), as a paged cache whose
  // sequences share every block, and as copies of the rows.
  const int64_t batch = 4, hq = 4, hkv = 2, tk = 3000, d = 32, bs = 16;
  Problem one(1, hq, hkv, 1, tk, d, d, 51, 2.0f);
  Problem copies(batch, hq, hkv, 1, tk, d, d, 52, 2.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t j = 0; j < tk; ++j)
        for (int64_t x = 0; x < d; ++x) {
          copies.k.at(b, h, j, x) = one.k.at(0, h, j, x);
          copies.v.at(b, h, j, x) = one.v.at(0, h, j, x);
        }
  Context ctx(2);
  octattn_attention_options opt = Options();
  Tensor ks(batch, hkv, tk, 1), shared_ks(batch, hkv, tk, 1), paged_ks(batch, hkv, tk, 1);
  Tensor o = copies.Out();
  opt.key_scores = ks.ptr();
  Attend(ctx, opt, copies.q, copies.k, copies.v, o);
  // Shared: stride 0 over the batch.
  octattn_tensor k0 = one.k.t, v0 = one.v.t;
  k0.shape[0] = v0.shape[0] = batch;
  k0.stride[0] = v0.stride[0] = 0;
  opt.key_scores = shared_ks.ptr();
  REQUIRE(octattn_attention(ctx, &opt, copies.q.ptr(), &k0, &v0, o.ptr(), nullptr, nullptr, nullptr,
                            0) == OCTATTN_OK);
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  REQUIRE(info.shared_kv_rows > 0);
  REQUIRE(BytesEqual(ks, shared_ks));
  // Paged: blocks of 16 rows, every sequence's table the same blocks, in reverse order.
  const int64_t cols = tk / bs + 1;
  Tensor pk(cols, hkv, bs, d, kBTHD), pv(cols, hkv, bs, d, kBTHD);
  std::vector<int32_t> table;
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t c = 0; c < cols; ++c) table.push_back(static_cast<int32_t>(cols - 1 - c));
  for (int64_t j = 0; j < tk; ++j)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t x = 0; x < d; ++x) {
        pk.at(cols - 1 - j / bs, h, j % bs, x) = one.k.at(0, h, j, x);
        pv.at(cols - 1 - j / bs, h, j % bs, x) = one.v.at(0, h, j, x);
      }
  std::vector<int64_t> lens(batch, tk);
  octattn_attention_options popt = Options();
  popt.block_table = table.data();
  popt.block_table_cols = cols;
  popt.kv_lens = lens.data();
  Tensor pks(batch, hkv, cols * bs, 1);
  popt.key_scores = pks.ptr();
  REQUIRE(octattn_attention(ctx, &popt, copies.q.ptr(), pk.ptr(), pv.ptr(), o.ptr(), nullptr,
                            nullptr, nullptr, 0) == OCTATTN_OK);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hkv; ++h) {
      for (int64_t j = 0; j < tk; ++j) paged_ks.at(b, h, j, 0) = pks.at(b, h, j, 0);
      for (int64_t j = tk; j < cols * bs; ++j) REQUIRE(pks.at(b, h, j, 0) == 0.0f);
    }
  REQUIRE(BytesEqual(ks, paged_ks));
}

TEST_CASE("a bad key scores tensor is a status, nothing written", "[key_scores][api]") {
  const Case c{1, 4, 2, 8, 20, 16, 1, 0, 0, 0, 0.0f, false, false, false};
  const KeyCall kc(c, 61);
  Context ctx(1);
  struct Bad {
    const char* what;
    octattn_status status;
    std::function<void(octattn_tensor*, Tensor*)> edit;
  };
  const Bad bads[] = {
      {"NULL data", OCTATTN_ERROR_NULL_POINTER,
       [](octattn_tensor* t, Tensor*) { t->data = nullptr; }},
      {"bf16", OCTATTN_ERROR_UNSUPPORTED,
       [](octattn_tensor* t, Tensor*) { t->dtype = OCTATTN_DTYPE_BF16; }},
      {"a kv head too many", OCTATTN_ERROR_INVALID_SHAPE,
       [](octattn_tensor* t, Tensor*) { t->shape[1] = 3; }},
      {"q_heads instead of kv_heads", OCTATTN_ERROR_INVALID_SHAPE,
       [](octattn_tensor* t, Tensor*) { t->shape[1] = 4, t->stride[1] = 20; }},
      {"a key short", OCTATTN_ERROR_INVALID_SHAPE,
       [](octattn_tensor* t, Tensor*) { t->shape[2] = 19; }},
      {"two values per key", OCTATTN_ERROR_INVALID_SHAPE,
       [](octattn_tensor* t, Tensor*) { t->shape[3] = 2, t->stride[2] = 2, t->stride[1] = 40; }},
      {"keys overlapping", OCTATTN_ERROR_INVALID_STRIDE,
       [](octattn_tensor* t, Tensor*) { t->stride[2] = 0; }},
      {"misaligned", OCTATTN_ERROR_MISALIGNED,
       [](octattn_tensor* t, Tensor*) { t->data = static_cast<char*>(t->data) + 1; }},
      {"o's memory", OCTATTN_ERROR_ALIASING,
       [](octattn_tensor* t, Tensor* o) { t->data = o->buf.data(); }},
  };
  for (const Bad& bad : bads) {
    INFO(bad.what);
    Tensor big(1, 4, 64, 16);  // room for every edit
    for (float& x : big.buf) x = 3.0f;
    Tensor o = kc.p.Out();
    for (float& x : o.buf) x = 3.0f;
    octattn_tensor t = kc.Scores().t;
    t.data = big.buf.data() + 16;
    bad.edit(&t, &o);
    octattn_attention_options opt = kc.Options(c, OCTATTN_ALGORITHM_FUSED);
    opt.key_scores = &t;
    REQUIRE(octattn_attention(ctx, &opt, kc.p.q.ptr(), kc.p.k.ptr(), kc.p.v.ptr(), o.ptr(), nullptr,
                              nullptr, nullptr, 0) == bad.status);
    REQUIRE(!std::string(ctx.Error()).empty());
    for (float x : big.buf) REQUIRE(x == 3.0f);
    for (float x : o.buf) REQUIRE(x == 3.0f);
  }
  // The backward reads the forward's options as they are: it ignores the output.
  Tensor o = kc.p.Out(), lse = kc.p.Lse(), dout = kc.p.Out(), ks = kc.Scores();
  for (float& x : ks.buf) x = 3.0f;
  dout.Fill(2);
  octattn_attention_options opt = kc.Options(c, OCTATTN_ALGORITHM_FUSED);
  Attend(ctx, opt, kc.p.q, kc.p.k, kc.p.v, o, &lse);
  opt.key_scores = ks.ptr();
  Tensor dq = kc.p.q, dk = kc.p.k, dv = kc.p.v;
  REQUIRE(octattn_attention_backward(ctx, &opt, kc.p.q.ptr(), kc.p.k.ptr(), kc.p.v.ptr(), o.ptr(),
                                     lse.ptr(), dout.ptr(), nullptr, dq.ptr(), dk.ptr(), dv.ptr(),
                                     nullptr, nullptr, nullptr, 0) == OCTATTN_OK);
  for (float x : ks.buf) REQUIRE(x == 3.0f);
}

}  // namespace
}  // namespace octtest
