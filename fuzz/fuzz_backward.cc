// The backward: the fused gradients (dq, dk, dv, and dsinks and dbias when the input
// draws sinks and a bias) within the header's bound of the fp64 reference, with any
// mask, alignment, GQA ratio, layout, target and score modifier; the same bytes for 1
// and 2 threads and for another layout; and gradient causality: any bits written into
// key p's k and v leave dk and dv of the other keys and dq of the rows before p
// byte-identical, and any bits in query row r's q, o, lse, dout and dlse leave dq of
// the other rows and dk, dv of the keys after r byte-identical. Key lists (unsorted,
// duplicates, -1, counts of 0, entries past the causal bound) may narrow what every row
// reads. q, k and v may be bf16 or f16 (dout in q's dtype): bf16 ones on avx512_bf16 take
// the header's added terms of the bound.
#include <algorithm>

#include "fuzz_support.h"

using namespace fuzz;

namespace {

// Gradients of a problem, in a layout.
struct Grads {
  Tensor dq, dk, dv, dbias;
  std::vector<float> dsinks;
  Grads(const Problem& p, int layout)
      : dq(p.batch, p.q_heads, p.q_len, p.head_dim, layout),
        dk(p.batch, p.kv_heads, p.kv_len, p.head_dim, layout),
        dv(p.batch, p.kv_heads, p.kv_len, p.value_dim, layout),
        dbias(p.batch, p.q_heads, p.q_len, p.kv_len, layout),
        dsinks(static_cast<size_t>(p.q_heads), 0.0f) {}
};

// The backward's inputs besides q, k and v.
struct Seeds {
  Tensor dout, dlse;
};

// q, k and v in the problem's dtypes, dout in q's (16-bit copies of their values), o f32.
octattn_status Backward(octattn_context* ctx, const Problem& p,
                        const octattn_attention_options& opt, Tensors& t, Seeds& s, Grads& g) {
  const bool sinks = opt.sinks != nullptr;
  std::vector<uint16_t> qb, kb, vb, db;
  const octattn_tensor q = Narrowed(t.q.t, t.types.q, &qb), k = Narrowed(t.k.t, t.types.kv, &kb),
                       v = Narrowed(t.v.t, t.types.kv, &vb),
                       dout = Narrowed(s.dout.t, t.types.q, &db);
  return octattn_attention_backward(ctx, &opt, &q, &k, &v, &t.o.t, &t.lse.t, &dout, &s.dlse.t,
                                    &g.dq.t, &g.dk.t, &g.dv.t, sinks ? g.dsinks.data() : nullptr,
                                    p.opt.bias ? &g.dbias.t : nullptr, nullptr, 0);
}

FUZZ_PLUMBING bool SameGrads(const Grads& x, const Grads& y, const Problem& p) {
  return BytesEqual(x.dq, y.dq) && BytesEqual(x.dk, y.dk) && BytesEqual(x.dv, y.dv) &&
         (!p.opt.bias || BytesEqual(x.dbias, y.dbias)) &&
         std::memcmp(x.dsinks.data(), y.dsinks.data(), x.dsinks.size() * sizeof(float)) == 0;
}

// The largest |scale * q.k| over every (row, key) pair.
FUZZ_PLUMBING double MaxScore(const Problem& p, const Tensors& t, double scale) {
  double s_max = 0;
  const int64_t group = p.q_heads / p.kv_heads;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        for (int64_t j = 0; j < p.kv_len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.head_dim; ++d)
            dot += double(t.q.at(b, h, i, d)) * t.k.at(b, h / group, j, d);
          s_max = std::max(s_max, std::fabs(dot * scale));
        }
  return s_max;
}

FUZZ_PLUMBING double MaxAbs(const Tensor& t) {
  double m = 0;
  for (float x : t.buf)
    if (std::isfinite(x)) m = std::max(m, std::fabs(double(x)));
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Problem p = Problem::Read(in, 40);
  p.ReadTypes(in, false);
  p.opt.algorithm = OCTATTN_ALGORITHM_FUSED;
  p.lse = true;
  p.weights = false;
  const int other_layout = static_cast<int>(in.Range(0, 3));
  Tensors t(p, p.layout);
  FillInputs(in, t);
  Seeds s{Tensor(p.batch, p.q_heads, p.q_len, p.value_dim, p.layout),
          Tensor(p.batch, p.q_heads, p.q_len, 1, p.layout)};
  FillSmall(in, s.dout);
  Quantize(s.dout, t.types.q);
  FillSmall(in, s.dlse);
  KeyLists lists;
  p.ReadLists(in, &lists);

  Context one(p, 1), two(p, 2);
  {  // o and lse of the f32 forward on the same values (the bound's o and lse)
    const Dtypes types = t.types;
    t.types = Dtypes{};
    FUZZ_CHECK(Attend(one, p.opt, t) == OCTATTN_OK);
    t.types = types;
  }
  Grads g(p, p.layout);
  FUZZ_CHECK(Backward(one, p, p.opt, t, s, g) == OCTATTN_OK);
  {
    Grads threads(p, p.layout);
    FUZZ_CHECK(Backward(two, p, p.opt, t, s, threads) == OCTATTN_OK);
    FUZZ_CHECK(SameGrads(threads, g, p));
    Tensors lt(p, other_layout);
    lt.CopyFrom(t);
    lt.o.CopyValuesFrom(t.o);
    lt.lse.CopyValuesFrom(t.lse);
    Seeds ls{Tensor(p.batch, p.q_heads, p.q_len, p.value_dim, other_layout),
             Tensor(p.batch, p.q_heads, p.q_len, 1, other_layout)};
    ls.dout.CopyValuesFrom(s.dout);
    ls.dlse.CopyValuesFrom(s.dlse);
    Grads laid(p, other_layout);
    FUZZ_CHECK(Backward(one, p, p.opt, lt, ls, laid) == OCTATTN_OK);
    FUZZ_CHECK(SameGrads(laid, g, p));
  }

  // Against the reference: the header's bound (tests/README.md), P_j from the reference
  // weights.
  {
    octattn_attention_options ref_opt = p.opt;
    ref_opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    Problem wp = p;
    wp.weights = true;
    Tensors w(wp, 0);
    w.CopyFrom(t);
    FUZZ_CHECK(Attend(one, ref_opt, w) == OCTATTN_OK);
    Grads ref(p, p.layout);
    FUZZ_CHECK(Backward(one, p, ref_opt, t, s, ref) == OCTATTN_OK);
    const double scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
    const double s_max = MaxScore(p, t, scale);
    const int64_t group = p.q_heads / p.kv_heads;
    const double r = 1e-6 * std::max(1.0, p.ModifiedScoreBound(s_max));
    const double max_do = MaxAbs(s.dout), max_v = MaxAbs(t.v), max_q = MaxAbs(t.q),
                 max_k = MaxAbs(t.k);
    const double gg = static_cast<double>(p.value_dim) * max_do * max_v + MaxAbs(s.dlse);
    // bf16 tensors: the header's avx512_bf16 terms (sums on bf16 pairs), on every target.
    const double pairs =
        t.types.q == OCTATTN_DTYPE_BF16 && t.types.kv == OCTATTN_DTYPE_BF16 ? 0x1p-8 : 0.0;
    std::vector<double> weight(static_cast<size_t>(p.batch * p.kv_heads * p.kv_len), 0.0);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_len; ++i)
          for (int64_t j = 0; j < p.kv_len; ++j)
            weight[static_cast<size_t>((b * p.kv_heads + h / group) * p.kv_len + j)] +=
                w.w.at(b, h, i, j);
    auto near = [](float x, float y, double bound) {
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) == std::isnan(y);
      return x == y || std::fabs(double(x) - y) <= bound;
    };
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kv_heads; ++h)
        for (int64_t j = 0; j < p.kv_len; ++j) {
          const double pj =
              std::max(1.0, weight[static_cast<size_t>((b * p.kv_heads + h) * p.kv_len + j)]);
          for (int64_t d = 0; d < p.value_dim; ++d)
            FUZZ_CHECK(near(g.dv.at(b, h, j, d), ref.dv.at(b, h, j, d), (r + pairs) * max_do * pj));
          for (int64_t d = 0; d < p.head_dim; ++d)
            FUZZ_CHECK(near(g.dk.at(b, h, j, d), ref.dk.at(b, h, j, d),
                            (r * 4 + pairs) * scale * max_q * gg * pj));
        }
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_len; ++i) {
          for (int64_t d = 0; d < p.head_dim; ++d)
            FUZZ_CHECK(near(g.dq.at(b, h, i, d), ref.dq.at(b, h, i, d),
                            (r * 4 + pairs) * scale * max_k * gg));
          if (p.opt.bias)
            for (int64_t j = 0; j < p.kv_len; ++j)
              FUZZ_CHECK(near(g.dbias.at(b, h, i, j), ref.dbias.at(b, h, i, j), r * gg * 4));
        }
    const double rows = static_cast<double>(p.batch * p.q_len);
    for (size_t h = 0; h < g.dsinks.size(); ++h)
      FUZZ_CHECK(near(g.dsinks[h], ref.dsinks[h], r * gg * 2 * rows));
  }

  if (!p.opt.causal) return 0;
  const int64_t q0 = p.q_start();  // position of query row 0 relative to key row 0
  float bits[4];
  for (float& b : bits) b = in.AnyBits();
  int n = 0;
  {  // key pos: dk, dv of other keys, dq of rows before pos
    const int64_t pos = in.Range(0, p.kv_len - 1), b = in.Range(0, p.batch - 1);
    Tensors e = t;
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      for (int64_t d = 0; d < p.head_dim; ++d) e.k.at(b, h, pos, d) = bits[n++ % 4];
      for (int64_t d = 0; d < p.value_dim; ++d) e.v.at(b, h, pos, d) = bits[n++ % 4];
    }
    Grads ge(p, p.layout);
    FUZZ_CHECK(Backward(one, p, p.opt, e, s, ge) == OCTATTN_OK);
    for (int64_t h = 0; h < p.kv_heads; ++h)
      for (int64_t j = 0; j < p.kv_len; ++j)
        if (j != pos) {
          FUZZ_CHECK(ge.dk.RowEquals(g.dk, b, h, j));
          FUZZ_CHECK(ge.dv.RowEquals(g.dv, b, h, j));
        }
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len && q0 + i < pos; ++i)
        FUZZ_CHECK(ge.dq.RowEquals(g.dq, b, h, i));
  }
  {  // query row: dq of the other rows, dk and dv of keys after it
    const int64_t row = in.Range(0, p.q_len - 1), b = in.Range(0, p.batch - 1);
    Tensors e = t;
    Seeds es = s;
    for (int64_t h = 0; h < p.q_heads; ++h) {
      for (int64_t d = 0; d < p.head_dim; ++d) e.q.at(b, h, row, d) = bits[n++ % 4];
      for (int64_t d = 0; d < p.value_dim; ++d) {
        e.o.at(b, h, row, d) = bits[n++ % 4];
        es.dout.at(b, h, row, d) = bits[n++ % 4];
      }
      e.lse.at(b, h, row, 0) = bits[n++ % 4];
      es.dlse.at(b, h, row, 0) = bits[n++ % 4];
    }
    Grads ge(p, p.layout);
    FUZZ_CHECK(Backward(one, p, p.opt, e, es, ge) == OCTATTN_OK);
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        if (i != row) FUZZ_CHECK(ge.dq.RowEquals(g.dq, b, h, i));
    for (int64_t h = 0; h < p.kv_heads; ++h)
      for (int64_t j = std::max<int64_t>(0, q0 + row + 1); j < p.kv_len; ++j) {
        FUZZ_CHECK(ge.dk.RowEquals(g.dk, b, h, j));
        FUZZ_CHECK(ge.dv.RowEquals(g.dv, b, h, j));
      }
  }
  return 0;
}
