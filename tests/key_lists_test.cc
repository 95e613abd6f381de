// Key lists (options.key_indices ...): each query row reads the key rows its lists name,
// shared by its kv head's query heads. The reference over lists gives the bytes of the
// reference over the mask tensor of the same pairs; the fused path is within the accuracy
// bound of it on every target; a row's bytes depend on its set of keys only (order,
// duplicates, padding, the split between two lists), on no thread count or layout, and a
// decode row's are its prefill row's; an unlisted key never reaches a row; every bad list
// is a status with nothing written (the backward over lists: backward_test.cc).
#include <algorithm>
#include <limits>

#include "lib/api/context.h"
#include "lib/base/dtype.h"
#include "support.h"

namespace octtest {
namespace {

// A tensor's values rounded to bf16, as a tensor of its shape and strides (f32: itself).
struct Typed {
  std::vector<uint16_t> bits;
  octattn_tensor t{};
  Typed(const Tensor& src, octattn_dtype type) : t(src.t) {
    if (type == OCTATTN_DTYPE_F32) return;
    bits.resize(src.buf.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = octattn::base::F32ToBf16(src.buf[i]);
    t.data = bits.data();
    t.dtype = type;
  }
  Typed(const Typed&) = delete;
  Typed& operator=(const Typed&) = delete;
  const octattn_tensor* ptr() const { return &t; }
};

struct Case {
  int64_t batch, hq, hkv, tq, tk, d, dv, n;
  int32_t causal;
  int64_t window, stride, chunk;
  bool heads;  // a list per kv head (else one for all)
  int mods;    // 1 softcap, 2 ALiBi, 4 bias, 8 mask tensor, 16 sinks
};

std::string Name(const Case& c) {
  return "B " + std::to_string(c.batch) + " Hq " + std::to_string(c.hq) + " Hkv " +
         std::to_string(c.hkv) + " T " + std::to_string(c.tq) + "x" + std::to_string(c.tk) + " D " +
         std::to_string(c.d) + "/" + std::to_string(c.dv) + " n " + std::to_string(c.n) +
         " causal " + std::to_string(c.causal) + " window " + std::to_string(c.window) + "+" +
         std::to_string(c.stride) + " chunk " + std::to_string(c.chunk) + " heads " +
         std::to_string(c.heads) + " mods " + std::to_string(c.mods);
}

// Random lists: up to n entries a row, keys from the whole cache (past the causal bound
// too), unsorted, with duplicates and -1 padding.
Lists RandomLists(const Case& c, uint32_t seed) {
  Lists l(c.batch, c.heads ? c.hkv : 1, c.tq, c.n);
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < l.e; ++b)
    for (int64_t g = 0; g < l.h; ++g)
      for (int64_t i = 0; i < c.tq; ++i) {
        const int64_t cnt = rng() % 5 == 0 ? c.n : static_cast<int64_t>(rng() % (c.n + 1));
        l.count(b, g, i) = static_cast<int32_t>(cnt);
        for (int64_t x = 0; x < cnt; ++x) {
          const uint32_t r = rng() % 16;
          l.at(b, g, i, x) = r == 0            ? -1
                             : r == 1 && x > 0 ? l.at(b, g, i, rng() % x)
                                               : static_cast<int32_t>(rng() % c.tk);
        }
      }
  return l;
}

// A problem with its lists and the modifiers a case asks for; `pairs`: the mask tensor of
// the listed pairs (and the case's own mask tensor's).
struct ListCall {
  Problem p;
  Lists lists;
  BoolTensor own, pairs;
  Tensor bias;
  std::vector<float> slopes, sinks;
  ListCall(const Case& c, uint32_t seed)
      : p(c.batch, c.hq, c.hkv, c.tq, c.tk, c.d, c.dv, seed, 2.0f),
        lists(RandomLists(c, seed + 11)),
        own(c.batch, c.hq, c.tq, c.tk),
        pairs(c.batch, c.hq, c.tq, c.tk),
        bias(c.batch, c.hq, c.tq, c.tk) {
    std::mt19937 rng(seed + 12);
    bias.Fill(seed + 13, -1.0f, 1.0f);
    for (int64_t h = 0; h < c.hq; ++h) {
      slopes.push_back(0.01f * static_cast<float>(h + 1));
      sinks.push_back(0.5f * static_cast<float>(h) - 1.0f);
    }
    const int64_t group = c.hq / c.hkv;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t i = 0; i < c.tq; ++i)
          for (int64_t j = 0; j < c.tk; ++j) {
            const bool bit = !(c.mods & 8) || rng() % 5 != 0;
            own.at(b, h, i, j) = bit;
            pairs.at(b, h, i, j) = bit && lists.Has(b, c.heads ? h / group : 0, i, j);
          }
  }
  octattn_attention_options Options(const Case& c, octattn_algorithm algo, bool listed) const {
    octattn_attention_options o = octtest::Options(c.causal, c.window, c.stride, algo);
    o.chunk = c.chunk;
    if (c.mods & 1) o.softcap = 15.0f;
    if (c.mods & 2) o.alibi_slopes = slopes.data();
    if (c.mods & 4) o.bias = &bias.t;
    if (c.mods & 16) o.sinks = sinks.data();
    if (listed) {
      o.key_indices = &lists.ti;
      o.key_counts = &lists.tc;
      if (c.mods & 8) o.mask = &own.t;
    } else {
      o.mask = &pairs.t;
    }
    return o;
  }
};

const Case kCases[] = {
    {1, 1, 1, 1, 1, 16, 16, 1, 1, 0, 0, 0, false, 0},
    {2, 4, 2, 40, 300, 32, 32, 24, 1, 0, 0, 0, true, 0},
    {1, 8, 2, 33, 700, 64, 64, 300, 1, 0, 0, 0, false, 16},
    {2, 4, 4, 50, 530, 32, 48, 64, 1, 100, 16, 0, true, 1 | 2},
    {1, 4, 1, 30, 400, 32, 32, 40, 0, 0, 0, 0, false, 4 | 8},
    {1, 2, 1, 64, 600, 64, 64, 100, 1, 0, 0, 128, true, 2 | 4 | 16},
    {1, 16, 1, 2, 2600, 64, 48, 1500, 1, 0, 0, 0, false, 0},  // many units, split keys
};

TEST_CASE("the reference over key lists: the mask tensor's bytes, fused within its bound",
          "[lists]") {
  uint32_t seed = 100;
  for (const Case& c : kCases)
    for (int threads : {1, 2}) {
      INFO(Name(c) << " threads " << threads);
      const ListCall lc(c, ++seed);
      Context ctx(threads);
      RequireSameOutputs(ctx, lc.Options(c, OCTATTN_ALGORITHM_REFERENCE, true),
                         lc.Options(c, OCTATTN_ALGORITHM_REFERENCE, false), lc.p);
      RequireWithinReference(ctx, lc.Options(c, OCTATTN_ALGORITHM_FUSED, true), lc.p);
    }
}

// The same sets of keys written otherwise: sorted, without duplicates or padding, split
// between two lists (one of them without counts).
TEST_CASE("key lists are sets: order, duplicates, padding and two lists change no byte",
          "[lists]") {
  uint32_t seed = 200;
  for (const Case& c : kCases) {
    INFO(Name(c));
    const ListCall lc(c, ++seed);
    Context ctx(2);
    const octattn_attention_options opt = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
    Lists a(lc.lists.e, lc.lists.h, c.tq, c.n), b(lc.lists.e, lc.lists.h, c.tq, c.n + 3);
    for (int64_t e = 0; e < a.e; ++e)
      for (int64_t g = 0; g < a.h; ++g)
        for (int64_t i = 0; i < c.tq; ++i) {
          std::vector<int32_t> keys;
          for (int64_t x = 0; x < lc.lists.count(e, g, i); ++x)
            if (lc.lists.idx[((e * a.h + g) * c.tq + i) * c.n + x] >= 0)
              keys.push_back(lc.lists.idx[((e * a.h + g) * c.tq + i) * c.n + x]);
          std::sort(keys.begin(), keys.end(), std::greater<int32_t>());
          keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
          // The first half (descending) on list a, counted; the rest and the first key
          // again on list b, all n + 3 entries read (-1 past them).
          const size_t half = keys.size() / 2;
          a.count(e, g, i) = static_cast<int32_t>(half);
          for (size_t x = 0; x < half; ++x) a.at(e, g, i, static_cast<int64_t>(x)) = keys[x];
          int64_t y = 0;
          for (size_t x = half; x < keys.size(); ++x) b.at(e, g, i, y++) = keys[x];
          if (!keys.empty() && y < b.n) b.at(e, g, i, y++) = keys[0];
        }
    octattn_attention_options two = opt;
    two.key_indices = &a.ti;
    two.key_counts = &a.tc;
    two.key_indices2 = &b.ti;
    RequireSameOutputs(ctx, opt, two, lc.p);
  }
}

TEST_CASE("key lists: thread count and layouts change no byte", "[lists][invariants]") {
  uint32_t seed = 300;
  for (const Case& c : kCases) {
    INFO(Name(c));
    const ListCall lc(c, ++seed);
    RequireThreadAndLayoutInvariance(lc.Options(c, OCTATTN_ALGORITHM_FUSED, true), lc.p);
  }
}

// Decode equals prefill: a row alone (q_len 1 at its position, its list as row 0's) gives
// the prefill row's bytes, MLA's shape (one latent kv head, v a view of k) included.
// (bf16: the weighted sums on bf16 pairs where the target has them, FlashPairsV.)
TEST_CASE("key lists: a decode row's bytes are its prefill row's", "[lists]") {
  for (octattn_dtype type : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16})
    for (const Case& c : {Case{1, 8, 2, 40, 3000, 64, 64, 1100, 1, 0, 0, 0, true, 2 | 16},
                          Case{1, 32, 1, 6, 2200, 96, 64, 2100, 1, 0, 0, 0, false, 0}}) {
      INFO(Name(c) << " dtype " << type);
      const ListCall lc(c, 9);
      Problem p = lc.p;
      const bool view = c.hkv == 1;  // v: k's first dv columns
      const Typed q(p.q, type), k(p.k, type), v(p.v, type);
      octattn_tensor vk = k.t;
      vk.shape[3] = c.dv;
      Context ctx(2);
      octattn_attention_options opt = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
      Tensor o = p.Out(), lse = p.Lse();
      REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), view ? &vk : v.ptr(), o.ptr(),
                                lse.ptr(), nullptr, nullptr, 0) == OCTATTN_OK);
      for (int64_t i : {int64_t{0}, c.tq / 2, c.tq - 1}) {
        INFO("row " << i);
        Problem one(1, c.hq, c.hkv, 1, c.tk, c.d, c.dv, 1);
        one.k.CopyValuesFrom(p.k);
        one.v.CopyValuesFrom(p.v);
        one.q.ForEach([&](int64_t, int64_t h, int64_t, int64_t x) {
          one.q.at(0, h, 0, x) = p.q.at(0, h, i, x);
        });
        const Typed oq(one.q, type), ok(one.k, type), ov(one.v, type);
        octattn_tensor ovk = ok.t;
        ovk.shape[3] = c.dv;
        Lists row(1, lc.lists.h, 1, c.n);
        for (int64_t g = 0; g < row.h; ++g) {
          const Lists& src = lc.lists;
          row.count(0, g, 0) = src.count(0, g, i);
          for (int64_t x = 0; x < c.n; ++x) row.at(0, g, 0, x) = src.at(0, g, i, x);
        }
        octattn_attention_options dopt = opt;
        dopt.q_start = c.tk - c.tq + i;
        dopt.key_indices = &row.ti;
        dopt.key_counts = &row.tc;
        for (int threads : {1, 2}) {
          Context dctx(threads);
          Tensor d = one.Out(), dlse = one.Lse();
          REQUIRE(octattn_attention(dctx, &dopt, oq.ptr(), ok.ptr(), view ? &ovk : ov.ptr(),
                                    d.ptr(), dlse.ptr(), nullptr, nullptr, 0) == OCTATTN_OK);
          for (int64_t h = 0; h < c.hq; ++h) {
            REQUIRE(std::memcmp(&dlse.at(0, h, 0, 0), &lse.at(0, h, i, 0), 4) == 0);
            for (int64_t x = 0; x < c.dv; ++x)
              REQUIRE(std::memcmp(&d.at(0, h, 0, x), &o.at(0, h, i, x), 4) == 0);
          }
        }
      }
    }
}

TEST_CASE("key lists on every target: within the reference's bound", "[lists][dispatch]") {
  const Case c{2, 4, 2, Sized(60, 12), Sized(500, 90), 32, 32, Sized(80, 20), 1,
               0, 0, 0, true,          2 | 16};
  const ListCall lc(c, 7);
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    Context ctx(t, 2);
    RequireWithinReference(ctx, lc.Options(c, OCTATTN_ALGORITHM_FUSED, true), lc.p);
  }
}

// A kv head's few rows read a list's tiles in place (DirectTile::keys), more rows pack
// them: the same bytes, whatever the tuning, on every target, f32 and 16-bit, over a
// [T, H, D] cache (rows 4 KiB apart: staged or read in place) with lists of runs with
// gaps (tiles read in place: ListedDirect) and of scattered keys (tiles gathered).
TEST_CASE("key lists: every tuning value gives the same bytes on every target",
          "[lists][dispatch]") {
  const int64_t kv = SmallSized(1500, 600), n = SmallSized(700, 300);
  Problem p(1, 16, 8, 2, kv, 128, 128, 43, 1.0f, Layout::kBTHD);
  Lists l(1, 8, 2, n);
  std::mt19937 rng(5);
  for (int64_t g = 0; g < 8; ++g)
    for (int64_t i = 0; i < 2; ++i) {
      l.count(0, g, i) = static_cast<int32_t>(n);
      for (int64_t x = 0; x < n; ++x)  // runs with a gap every 8 keys, then scattered keys
        l.at(0, g, i, x) = static_cast<int32_t>(x < n / 2 ? x + x / 8 + 10 : rng() % (kv - 1));
    }
  for (octattn_dtype type : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16}) {
    const Typed q(p.q, type), k(p.k, type), v(p.v, type);
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    opt.key_indices = &l.ti;
    opt.key_counts = &l.tc;
    for (const Target& t : AllTargets()) {
      INFO("dtype " << type << " " << t.Name());
      Tensor first = p.Out();
      bool have_first = false;
      for (int tuning = 0; tuning < 8; ++tuning) {
        const int direct_rows = tuning & 4 ? 1 : 16;  // 1: a kv head's two rows pack
        INFO("in_place_rows " << (tuning & 1) << " vendor_fetch " << (tuning >> 1 & 1)
                              << " direct_rows " << direct_rows);
        Context ctx(t, 2);
        octattn_context* raw = ctx;
        raw->tuning.in_place_rows = tuning & 1;
        raw->tuning.vendor_fetch = tuning >> 1 & 1;
        raw->tuning.direct_rows = direct_rows;
        Tensor o = p.Out();
        REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), nullptr, nullptr,
                                  nullptr, 0) == OCTATTN_OK);
        if (!have_first) {
          first = o;
          have_first = true;
        }
        CHECK(BytesEqual(o, first));
      }
    }
  }
}

TEST_CASE("key lists over bf16 and int8 caches: the fused path within the reference",
          "[lists][dtypes]") {
  const Case c{1, 4, 2, 20, 400, 64, 64, 50, 1, 0, 0, 0, true, 0};
  const ListCall lc(c, 17);
  for (octattn_dtype dt : {OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_INT8}) {
    INFO("dtype " << dt);
    // k and v as the cache's dtype (int8: one scale per row and kv head, the absmax's).
    std::vector<uint16_t> k16, v16;
    std::vector<int8_t> k8, v8;
    std::vector<float> ks, vs;
    Tensor kw = lc.p.k, vw = lc.p.v;  // the values the cache holds, widened
    auto quant = [&](const Tensor& src, Tensor& wide, std::vector<uint16_t>& b16,
                     std::vector<int8_t>& b8, std::vector<float>& sc) -> octattn_tensor {
      const int64_t rows = src.shape[0] * src.shape[1] * src.shape[2], dim = src.shape[3];
      octattn_tensor t = octattn_tensor{};
      t.dtype = dt;
      for (int d = 0; d < 4; ++d) t.shape[d] = src.shape[d];
      t.stride[3] = 1;
      t.stride[2] = dim;
      t.stride[1] = dim * src.shape[2];
      t.stride[0] = t.stride[1] * src.shape[1];
      b16.resize(rows * dim);
      b8.resize(rows * dim);
      sc.resize(rows);
      int64_t r = 0;
      for (int64_t a = 0; a < src.shape[0]; ++a)
        for (int64_t h = 0; h < src.shape[1]; ++h)
          for (int64_t i = 0; i < src.shape[2]; ++i, ++r) {
            float m = 0;
            for (int64_t x = 0; x < dim; ++x) m = std::fmax(m, std::fabs(src.at(a, h, i, x)));
            sc[r] = m / 127.0f;
            for (int64_t x = 0; x < dim; ++x) {
              const float f = src.at(a, h, i, x);
              if (dt == OCTATTN_DTYPE_BF16) {
                uint32_t bits;
                std::memcpy(&bits, &f, 4);
                b16[r * dim + x] =
                    static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
                const uint32_t back = static_cast<uint32_t>(b16[r * dim + x]) << 16;
                std::memcpy(&wide.at(a, h, i, x), &back, 4);
              } else {
                const int8_t q = static_cast<int8_t>(std::nearbyint(f / sc[r]));
                b8[r * dim + x] = q;
                wide.at(a, h, i, x) = sc[r] * static_cast<float>(q);
              }
            }
          }
      t.data =
          dt == OCTATTN_DTYPE_BF16 ? static_cast<void*>(b16.data()) : static_cast<void*>(b8.data());
      return t;
    };
    const octattn_tensor kt = quant(lc.p.k, kw, k16, k8, ks);
    const octattn_tensor vt = quant(lc.p.v, vw, v16, v8, vs);
    octattn_tensor kst{}, vst{};
    for (auto [t, sc] : {std::pair<octattn_tensor*, std::vector<float>*>{&kst, &ks},
                         std::pair<octattn_tensor*, std::vector<float>*>{&vst, &vs}}) {
      t->data = sc->data();
      t->dtype = OCTATTN_DTYPE_F32;
      const int64_t s[4] = {1, c.hkv, c.tk, 1};
      for (int d = 0; d < 4; ++d) t->shape[d] = s[d];
      t->stride[3] = 1;
      t->stride[2] = 1;
      t->stride[1] = c.tk;
      t->stride[0] = c.tk * c.hkv;
    }
    Context ctx(2);
    octattn_attention_options opt = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
    if (dt == OCTATTN_DTYPE_INT8) {
      opt.k_scale = &kst;
      opt.v_scale = &vst;
    }
    octattn_attention_options ropt = lc.Options(c, OCTATTN_ALGORITHM_REFERENCE, true);
    Tensor o = lc.p.Out(), ro = lc.p.Out();
    REQUIRE(octattn_attention(ctx, &opt, lc.p.q.ptr(), &kt, &vt, o.ptr(), nullptr, nullptr, nullptr,
                              0) == OCTATTN_OK);
    Attend(ctx, ropt, lc.p.q, kw, vw, ro);  // the reference over the widened values
    REQUIRE(MaxDiff(o, ro) <= Bound(lc.p.q, kw, vw));
  }
}

// The naive algorithm and the reference over lists: o, lse, the weights and the key
// scores of the mask tensor of the same pairs, byte for byte; auto with weights or key
// scores runs naive; octattn_mask over lists: the mask tensor's bytes.
TEST_CASE("naive, key scores and octattn_mask over key lists: the mask tensor's bytes", "[lists]") {
  uint32_t seed = 250;
  for (const Case& c : kCases) {
    INFO(Name(c));
    const ListCall lc(c, ++seed);
    Context ctx(2);
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_AUTO}) {
      INFO("algorithm " << algo);
      Tensor o[2] = {lc.p.Out(), lc.p.Out()}, lse[2] = {lc.p.Lse(), lc.p.Lse()},
             w[2] = {lc.p.Weights(), lc.p.Weights()};
      Tensor ks[2] = {Tensor(c.batch, c.hkv, c.tk, 1), Tensor(c.batch, c.hkv, c.tk, 1)};
      for (int m = 0; m < 2; ++m) {
        octattn_attention_options opt = lc.Options(c, algo, m == 0);
        opt.key_scores = ks[m].ptr();
        Attend(ctx, opt, lc.p.q, lc.p.k, lc.p.v, o[m], &lse[m], &w[m]);
        if (algo == OCTATTN_ALGORITHM_AUTO) {
          octattn_run_info info{};
          info.struct_size = sizeof(info);
          REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
          CHECK(info.algorithm == OCTATTN_ALGORITHM_NAIVE);
        }
      }
      CHECK(BytesEqual(o[0], o[1]));
      CHECK(BytesEqual(lse[0], lse[1]));
      CHECK(BytesEqual(w[0], w[1]));
      CHECK(BytesEqual(ks[0], ks[1]));
    }
    // Key scores alone (no weights): auto runs naive over lists, the same bytes.
    Tensor o = lc.p.Out(), ks = Tensor(c.batch, c.hkv, c.tk, 1), ks_naive = ks;
    octattn_attention_options opt = lc.Options(c, OCTATTN_ALGORITHM_AUTO, true);
    opt.key_scores = ks.ptr();
    Attend(ctx, opt, lc.p.q, lc.p.k, lc.p.v, o);
    opt.algorithm = OCTATTN_ALGORITHM_NAIVE;
    opt.key_scores = ks_naive.ptr();
    Attend(ctx, opt, lc.p.q, lc.p.k, lc.p.v, o);
    CHECK(BytesEqual(ks, ks_naive));
    Tensor scores[2] = {lc.p.Weights(), lc.p.Weights()};
    for (int m = 0; m < 2; ++m) {
      scores[m].Fill(seed + 5, -3.0f, 3.0f);
      const octattn_attention_options mopt = lc.Options(c, OCTATTN_ALGORITHM_AUTO, m == 0);
      REQUIRE(octattn_mask(ctx, &mopt, scores[m].ptr()) == OCTATTN_OK);
    }
    CHECK(BytesEqual(scores[0], scores[1]));
  }
}

TEST_CASE("naive over key lists on every target: the mask tensor's bytes", "[lists][dispatch]") {
  const Case cases[] = {{2, 4, 2, 12, Sized(300, 90), 32, 32, 24, 1, 0, 0, 0, true, 0},
                        {1, 4, 1, 10, Sized(400, 90), 32, 16, 40, 0, 0, 0, 0, false, 4 | 8}};
  uint32_t seed = 280;
  for (const Case& c : cases) {
    const ListCall lc(c, ++seed);
    for (const Target& t : AllTargets()) {
      INFO(Name(c) << " " << t.Name());
      Context ctx(t, 2);
      RequireSameOutputs(ctx, lc.Options(c, OCTATTN_ALGORITHM_NAIVE, true),
                         lc.Options(c, OCTATTN_ALGORITHM_NAIVE, false), lc.p);
    }
  }
}

TEST_CASE("a key no list names never reaches a row, whatever its bits", "[lists]") {
  const Case c{1, 4, 2, 24, 900, 32, 32, 60, 1, 0, 0, 0, true, 0};
  const ListCall lc(c, 31);
  Context ctx(2);
  for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE})
    for (int64_t i = 0; i < c.tq; i += 5) {
      INFO("algorithm " << algo << " row " << i);
      const octattn_attention_options opt = lc.Options(c, algo, true);
      Tensor o = lc.p.Out(), lse = lc.p.Lse();
      Attend(ctx, opt, lc.p.q, lc.p.k, lc.p.v, o, &lse);
      Problem hostile = lc.p;
      for (int64_t g = 0; g < c.hkv; ++g)
        for (int64_t j = 0; j < c.tk; ++j) {
          if (lc.lists.Has(0, g, i, j)) continue;
          const float bad = j % 2 ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
          for (int64_t x = 0; x < c.d; ++x) {
            hostile.k.at(0, g, j, x) = bad;
            hostile.v.at(0, g, j, x) = -bad;
          }
        }
      Tensor ho = lc.p.Out(), hlse = lc.p.Lse();
      Attend(ctx, opt, hostile.q, hostile.k, hostile.v, ho, &hlse);
      for (int64_t h = 0; h < c.hq; ++h) {
        REQUIRE(RowBytesEqual(o, ho, 0, h, i));
        REQUIRE(RowBytesEqual(lse, hlse, 0, h, i));
      }
    }
}

// A ragged batch reads its lists at q's packed rows (entry 0), each entry counted from
// its sequence's first key: each sequence gets its own call's bytes; a paged cache the
// bytes of the same keys contiguous.
TEST_CASE("key lists over ragged and paged batches: each sequence's own call", "[lists][batches]") {
  const int64_t hq = 4, hkv = 2, d = 32, n = 40;
  const std::vector<int64_t> tq = {7, 1, 12}, tk = {70, 130, 33};
  std::vector<int64_t> cu_q = {0}, cu_k = {0};
  for (size_t s = 0; s < tq.size(); ++s) {
    cu_q.push_back(cu_q.back() + tq[s]);
    cu_k.push_back(cu_k.back() + tk[s]);
  }
  Problem all(1, hq, hkv, cu_q.back(), cu_k.back(), d, d, 41);
  Lists lists(1, 1, cu_q.back(), n);
  std::mt19937 rng(3);
  for (size_t s = 0; s < tq.size(); ++s)
    for (int64_t i = cu_q[s]; i < cu_q[s + 1]; ++i) {
      lists.count(0, 0, i) = static_cast<int32_t>(rng() % (n + 1));
      for (int64_t x = 0; x < n; ++x) lists.at(0, 0, i, x) = static_cast<int32_t>(rng() % tk[s]);
    }
  Context ctx(2);
  octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
  opt.sequences = static_cast<int64_t>(tq.size());
  opt.cu_seqlens_q = cu_q.data();
  opt.cu_seqlens_k = cu_k.data();
  opt.key_indices = &lists.ti;
  opt.key_counts = &lists.tc;
  Tensor o = all.Out();
  Attend(ctx, opt, all.q, all.k, all.v, o);
  for (size_t s = 0; s < tq.size(); ++s) {
    INFO("sequence " << s);
    Problem one(1, hq, hkv, tq[s], tk[s], d, d, 1);
    one.q.ForEach([&](int64_t, int64_t h, int64_t i, int64_t x) {
      one.q.at(0, h, i, x) = all.q.at(0, h, cu_q[s] + i, x);
    });
    one.k.ForEach([&](int64_t, int64_t h, int64_t j, int64_t x) {
      one.k.at(0, h, j, x) = all.k.at(0, h, cu_k[s] + j, x);
      one.v.at(0, h, j, x) = all.v.at(0, h, cu_k[s] + j, x);
    });
    Lists own(1, 1, tq[s], n);
    for (int64_t i = 0; i < tq[s]; ++i) {
      own.count(0, 0, i) = lists.count(0, 0, cu_q[s] + i);
      for (int64_t x = 0; x < n; ++x) own.at(0, 0, i, x) = lists.at(0, 0, cu_q[s] + i, x);
    }
    octattn_attention_options sopt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    sopt.key_indices = &own.ti;
    sopt.key_counts = &own.tc;
    Tensor so = one.Out();
    Attend(ctx, sopt, one.q, one.k, one.v, so);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < tq[s]; ++i)
        REQUIRE(std::memcmp(&so.at(0, h, i, 0), &o.at(0, h, cu_q[s] + i, 0), 4 * d) == 0);

    // The sequence's keys in a pool of blocks of 16 rows, in reverse block order.
    const int64_t bs = 16, blocks = (tk[s] + bs - 1) / bs;
    Tensor pk(blocks, hkv, bs, d), pv(blocks, hkv, bs, d);
    std::vector<int32_t> table(blocks);
    for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(blocks - 1 - b);
    for (int64_t j = 0; j < tk[s]; ++j)
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t x = 0; x < d; ++x) {
          pk.at(table[j / bs], h, j % bs, x) = one.k.at(0, h, j, x);
          pv.at(table[j / bs], h, j % bs, x) = one.v.at(0, h, j, x);
        }
    const int64_t kv_len = tk[s];
    octattn_attention_options popt = sopt;
    popt.block_table = table.data();
    popt.block_table_cols = blocks;
    popt.kv_lens = &kv_len;
    popt.sequences = 0;
    Tensor po = one.Out();
    Attend(ctx, popt, one.q, pk, pv, po);
    REQUIRE(BytesEqual(so, po));
  }
}

// Every way a call of key lists fails: its status, and neither o nor lse written.
TEST_CASE("bad key lists: a status, nothing written", "[lists][api]") {
  const Case c{2, 4, 2, 6, 50, 16, 16, 8, 1, 0, 0, 0, true, 0};
  const ListCall lc(c, 51);
  Context ctx(2);
  auto fails = [&](octattn_attention_options opt, octattn_status want, const char* what,
                   octattn_tensor* weights = nullptr) {
    INFO(what);
    Tensor o = lc.p.Out(), lse = lc.p.Lse();
    o.Fill(99);
    lse.Fill(98);
    const Tensor o0 = o, lse0 = lse;
    const octattn_status st = octattn_attention(ctx, &opt, lc.p.q.ptr(), lc.p.k.ptr(), lc.p.v.ptr(),
                                                o.ptr(), lse.ptr(), weights, nullptr, 0);
    INFO(ctx.Error());
    REQUIRE(st == want);
    REQUIRE(BytesEqual(o, o0));
    REQUIRE(BytesEqual(lse, lse0));
  };
  const octattn_attention_options base = lc.Options(c, OCTATTN_ALGORITHM_AUTO, true);
  {
    Lists l = lc.lists;
    l.count(1, 1, 5) = 3;
    l.at(1, 1, 5, 2) = static_cast<int32_t>(c.tk);  // one past the cache
    octattn_attention_options o = base;
    o.key_indices = &l.ti;
    o.key_counts = &l.tc;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "an entry past the cache");
    l.at(1, 1, 5, 2) = -2;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "an entry below -1");
    l.at(1, 1, 5, 2) = 0;
    l.at(1, 1, 5, 6) = 1000;  // past the count: never read, so fine
    octattn_attention_options ok = o;
    Tensor out = lc.p.Out();
    Attend(ctx, ok, lc.p.q, lc.p.k, lc.p.v, out);
    l.count(0, 0, 0) = static_cast<int32_t>(c.n + 1);
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "a count past the list");
    l.count(0, 0, 0) = -1;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "a negative count");
  }
  {
    Lists l = lc.lists;
    octattn_attention_options o = base;
    o.key_indices = &l.ti;
    o.key_counts = nullptr;  // every entry read, the -1 padding included: valid
    Tensor out = lc.p.Out();
    Attend(ctx, o, lc.p.q, lc.p.k, lc.p.v, out);
    octattn_tensor wrong = l.ti;
    wrong.dtype = OCTATTN_DTYPE_F32;
    o.key_indices = &wrong;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "a list of f32");
    wrong = l.ti;
    wrong.shape[2] = c.tq + 1;
    o.key_indices = &wrong;
    fails(o, OCTATTN_ERROR_INVALID_SHAPE, "a list of the wrong rows");
    wrong = l.ti;
    wrong.shape[1] = 3;
    o.key_indices = &wrong;
    fails(o, OCTATTN_ERROR_INVALID_SHAPE, "a list of the wrong heads");
    o.key_indices = &l.ti;
    wrong = l.tc;
    wrong.shape[3] = 2;
    o.key_counts = &wrong;
    fails(o, OCTATTN_ERROR_INVALID_SHAPE, "counts of the wrong shape");
    o = base;
    o.key_indices = nullptr;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "counts without a list");
    o = base;
    o.key_counts2 = &l.tc;
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "key_counts2 without key_indices2");
  }
  {
    octattn_attention_options o = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
    Tensor w = lc.p.Weights();
    fails(o, OCTATTN_ERROR_UNSUPPORTED, "weights, fused", w.ptr());
    BlockMask bm(1, 1, 1, 1, c.tq, c.tk);
    bm.at(0, 0, 0, 0) = 1;
    bm.Build();
    o = base;
    bm.Into(&o);
    fails(o, OCTATTN_ERROR_INVALID_OPTION, "a block mask too");
    Tensor ks(c.batch, c.hkv, c.tk, 1);
    o = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
    o.key_scores = ks.ptr();
    fails(o, OCTATTN_ERROR_UNSUPPORTED, "key scores, fused");
  }
  {
    // o's extent over a list: ALIASING.
    Lists l = lc.lists;
    octattn_attention_options o = base;
    Tensor out = lc.p.Out();
    octattn_tensor alias = l.ti;
    alias.data = out.buf.data();
    o.key_indices = &alias;
    o.key_counts = nullptr;
    std::fill(out.buf.begin(), out.buf.end(), 0.0f);  // entries 0: valid keys
    const octattn_status st = octattn_attention(ctx, &o, lc.p.q.ptr(), lc.p.k.ptr(), lc.p.v.ptr(),
                                                out.ptr(), nullptr, nullptr, nullptr, 0);
    REQUIRE(st == OCTATTN_ERROR_ALIASING);
  }
  {
    // The backward checks every entry as the forward does (nothing written).
    Tensor o = lc.p.Out(), lse = lc.p.Lse(), dout = lc.p.Out();
    octattn_attention_options fused = lc.Options(c, OCTATTN_ALGORITHM_FUSED, true);
    Attend(ctx, fused, lc.p.q, lc.p.k, lc.p.v, o, &lse);
    Lists l = lc.lists;
    l.count(1, 1, 5) = 3;
    l.at(1, 1, 5, 2) = static_cast<int32_t>(c.tk);  // one past the cache
    fused.key_indices = &l.ti;
    fused.key_counts = &l.tc;
    Tensor dq = lc.p.q, dk = lc.p.k, dv = lc.p.v;
    const Tensor dq0 = dq, dk0 = dk, dv0 = dv;
    REQUIRE(octattn_attention_backward(ctx, &fused, lc.p.q.ptr(), lc.p.k.ptr(), lc.p.v.ptr(),
                                       o.ptr(), lse.ptr(), dout.ptr(), nullptr, dq.ptr(), dk.ptr(),
                                       dv.ptr(), nullptr, nullptr, nullptr,
                                       0) == OCTATTN_ERROR_INVALID_OPTION);
    REQUIRE(BytesEqual(dq, dq0));
    REQUIRE(BytesEqual(dk, dk0));
    REQUIRE(BytesEqual(dv, dv0));
    // octattn_mask checks them as well: a bad entry, lists for heads that do not divide
    // the scores' heads.
    Tensor scores(c.batch, c.hq, c.tq, c.tk);
    scores.Fill(7);
    const Tensor scores0 = scores;
    REQUIRE(octattn_mask(ctx, &fused, scores.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
    REQUIRE(BytesEqual(scores, scores0));
    Lists three(c.batch, 3, c.tq, c.n);
    fused.key_indices = &three.ti;
    fused.key_counts = &three.tc;
    REQUIRE(octattn_mask(ctx, &fused, scores.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
    REQUIRE(BytesEqual(scores, scores0));
  }
}

}  // namespace
}  // namespace octtest
