// octattn_merge: partials over key shards (k_start) merged by LSE against one call over
// all keys, the byte-exact case, associativity, empty and hostile partials, in place,
// and every bad input.
#include <catch2/catch.hpp>

#include <limits>

#include "support.h"

using namespace octtest;

namespace {

// (o, lse) of `p`'s queries against keys [begin, end) only, as a shard with k_start.
void Shard(Context& ctx, const Problem& p, octattn_attention_options opt, int64_t begin,
           int64_t end, Tensor* o, Tensor* lse) {
  octattn_tensor k = p.k.t, v = p.v.t;
  k.data = static_cast<float*>(k.data) + begin * k.stride[2];
  v.data = static_cast<float*>(v.data) + begin * v.stride[2];
  k.shape[2] = v.shape[2] = end - begin;
  const int64_t q_len = p.q.shape[2], kv_len = p.k.shape[2];
  if (opt.q_start == OCTATTN_Q_START_DEFAULT) opt.q_start = kv_len - q_len;  // the whole call's
  opt.k_start = begin;
  *o = p.Out();
  *lse = p.Lse();
  INFO(ctx.Error());
  REQUIRE(octattn_attention(ctx, &opt, p.q.ptr(), &k, &v, o->ptr(), lse->ptr(), nullptr, nullptr,
                            0) == OCTATTN_OK);
}

octattn_status Merge(Context& ctx, std::vector<const Tensor*> os, std::vector<const Tensor*> lses,
                     Tensor* o, Tensor* lse) {
  std::vector<octattn_tensor> ov, lv;
  for (const Tensor* t : os) ov.push_back(t->t);
  for (const Tensor* t : lses) lv.push_back(t->t);
  return octattn_merge(ctx, ov.size(), ov.data(), lv.data(), o->ptr(), lse ? lse->ptr() : nullptr);
}

struct MergeCase {
  int64_t q_heads, kv_heads, q_len, kv_len, window, stride;
  std::vector<int64_t> cuts;  // shard boundaries inside [0, kv_len)
};

}  // namespace

TEST_CASE("merged shards equal one call over all keys within twice the bound", "[merge]") {
  const MergeCase cases[] = {
      {4, 2, 70, 70, 0, 0, {23, 50}},       // causal GQA, uneven shards
      {2, 2, 90, 90, 20, 7, {31, 32, 64}},  // window + strided columns, a one-key shard
      {4, 1, 3, 200, 0, 0, {100}},          // decode-shaped rows against a cache
      {2, 1, 40, 97, 10, 6, {13, 45, 80}},  // queries at the end, strided phase per shard
  };
  for (const MergeCase& m : cases)
    for (const Target& t : AllTargets())
      for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
        INFO(t.Name() << " " << octattn_algorithm_name(algo) << " kv_len " << m.kv_len << " window "
                      << m.window << " stride " << m.stride);
        Problem p(1, m.q_heads, m.kv_heads, m.q_len, m.kv_len, 16, 12, 51);
        Context ctx(t);
        const auto opt = Options(1, m.window, m.stride, algo);
        Tensor whole = p.Out(), whole_lse = p.Lse();
        Attend(ctx, opt, p.q, p.k, p.v, whole, &whole_lse);
        std::vector<int64_t> edges{0};
        edges.insert(edges.end(), m.cuts.begin(), m.cuts.end());
        edges.push_back(m.kv_len);
        std::vector<Tensor> os(edges.size() - 1), lses(edges.size() - 1);
        std::vector<const Tensor*> po, pl;
        for (size_t s = 0; s + 1 < edges.size(); ++s) {
          Shard(ctx, p, opt, edges[s], edges[s + 1], &os[s], &lses[s]);
          po.push_back(&os[s]);
          pl.push_back(&lses[s]);
        }
        Tensor o = p.Out(), lse = p.Lse();
        REQUIRE(Merge(ctx, po, pl, &o, &lse) == OCTATTN_OK);
        CHECK(MaxDiff(o, whole) <= 2 * Bound(p.q, p.k, p.v));
        CHECK(MaxDiff(lse, whole_lse) <= 8e-6);
        // Associativity: ((0, 1), 2, ...) against all at once.
        Tensor o01 = p.Out(), lse01 = p.Lse(), o2 = p.Out();
        REQUIRE(Merge(ctx, {po[0], po[1]}, {pl[0], pl[1]}, &o01, &lse01) == OCTATTN_OK);
        std::vector<const Tensor*> rest_o{&o01}, rest_l{&lse01};
        for (size_t s = 2; s < po.size(); ++s) rest_o.push_back(po[s]), rest_l.push_back(pl[s]);
        REQUIRE(Merge(ctx, rest_o, rest_l, &o2, nullptr) == OCTATTN_OK);
        CHECK(MaxDiff(o2, o) <= 2 * Bound(p.q, p.k, p.v));
      }
}

TEST_CASE("merge: one non-empty partial gives its bytes, and empty partials are never read",
          "[merge]") {
  // Queries at positions 0..9 against shards [0, 10) and [10, 40): the second shard
  // allows nothing (lse -inf), whatever its o holds.
  Problem p(1, 2, 2, 10, 40, 8, 8, 53);
  Context ctx;
  auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED, 0);
  Tensor o0, l0, o1, l1;
  Shard(ctx, p, opt, 0, 10, &o0, &l0);
  Shard(ctx, p, opt, 10, 40, &o1, &l1);
  for (float x : l1.buf) REQUIRE(x == -INFINITY);
  for (float& x : o1.buf) x = std::numeric_limits<float>::quiet_NaN();
  for (bool empty_first : {false, true}) {
    Tensor o = p.Out(), lse = p.Lse();
    if (empty_first)
      REQUIRE(Merge(ctx, {&o1, &o0}, {&l1, &l0}, &o, &lse) == OCTATTN_OK);
    else
      REQUIRE(Merge(ctx, {&o0, &o1}, {&l0, &l1}, &o, &lse) == OCTATTN_OK);
    CHECK(BytesEqual(o, o0));
    CHECK(BytesEqual(lse, l0));
  }
  // Every partial empty: zeros and -inf, as one call's empty rows.
  Tensor o = p.Out(), lse = p.Lse();
  REQUIRE(Merge(ctx, {&o1, &o1}, {&l1, &l1}, &o, &lse) == OCTATTN_OK);
  for (float x : o.buf) CHECK(x == 0.0f);
  for (float x : lse.buf) CHECK(x == -INFINITY);
  // NaN in a partial's lse makes its row NaN.
  Tensor lnan = l0;
  lnan.at(0, 1, 4, 0) = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(Merge(ctx, {&o0, &o1}, {&lnan, &l1}, &o, &lse) == OCTATTN_OK);
  CHECK(std::isnan(o.at(0, 1, 4, 0)));
  CHECK(std::isnan(lse.at(0, 1, 4, 0)));
  CHECK(RowBytesEqual(o, o0, 0, 1, 3));
}

TEST_CASE("merge in place: a running result absorbs the next shard", "[merge]") {
  Problem p(2, 4, 2, 30, 90, 16, 16, 55);
  Context ctx;
  const auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
  Tensor run, run_lse, next, next_lse, all = p.Out(), all_lse = p.Lse();
  Attend(ctx, opt, p.q, p.k, p.v, all, &all_lse);
  Shard(ctx, p, opt, 0, 30, &run, &run_lse);
  for (int64_t begin : {30, 60}) {
    Shard(ctx, p, opt, begin, begin + 30, &next, &next_lse);
    REQUIRE(Merge(ctx, {&run, &next}, {&run_lse, &next_lse}, &run, &run_lse) == OCTATTN_OK);
  }
  CHECK(MaxDiff(run, all) <= 2 * Bound(p.q, p.k, p.v));
  CHECK(MaxDiff(run_lse, all_lse) <= 8e-6);
}

TEST_CASE("merge: bad input is a status, a message, and nothing written", "[merge]") {
  Problem p(1, 2, 2, 5, 5, 8, 8, 57);
  Tensor o0 = p.Out(), o1 = p.Out(), l0 = p.Lse(), l1 = p.Lse(), o = p.Out(), lse = p.Lse();
  o0.Fill(1);
  o1.Fill(2);
  l0.Fill(3);
  l1.Fill(4);
  o.Fill(5, 7, 8);
  lse.Fill(6, 7, 8);
  const Tensor o_before = o, lse_before = lse;
  octattn_tensor ops[2] = {o0.t, o1.t}, lps[2] = {l0.t, l1.t};
  Context ctx;
  auto expect = [&](octattn_status want, octattn_context* c, size_t parts, const octattn_tensor* po,
                    const octattn_tensor* pl, octattn_tensor* out, octattn_tensor* out_lse) {
    CHECK(octattn_merge(c, parts, po, pl, out, out_lse) == want);
    if (c) CHECK(!ctx.Error().empty());
    CHECK(BytesEqual(o, o_before));
    CHECK(BytesEqual(lse, lse_before));
  };
  expect(OCTATTN_ERROR_NULL_POINTER, nullptr, 2, ops, lps, o.ptr(), lse.ptr());
  expect(OCTATTN_ERROR_NULL_POINTER, ctx, 2, nullptr, lps, o.ptr(), lse.ptr());
  expect(OCTATTN_ERROR_NULL_POINTER, ctx, 2, ops, lps, nullptr, lse.ptr());
  expect(OCTATTN_ERROR_INVALID_SHAPE, ctx, 0, ops, lps, o.ptr(), lse.ptr());
  Tensor wrong(1, 2, 5, 7);
  octattn_tensor bad_o[2] = {o0.t, wrong.t};
  expect(OCTATTN_ERROR_INVALID_SHAPE, ctx, 2, bad_o, lps, o.ptr(), lse.ptr());
  Tensor wide_lse(1, 2, 5, 2);
  octattn_tensor bad_l[2] = {l0.t, wide_lse.t};
  expect(OCTATTN_ERROR_INVALID_SHAPE, ctx, 2, ops, bad_l, o.ptr(), lse.ptr());
  // An output overlapping a partial without being that very view.
  octattn_tensor shifted = o.t;
  shifted.data = o0.buf.data() + 1;
  shifted.shape[2] = 4;
  Tensor short_o0(1, 2, 4, 8), short_l(1, 2, 4, 1);
  octattn_tensor sops[1] = {o0.t}, slps[1] = {short_l.t};
  sops[0].shape[2] = 4;
  CHECK(octattn_merge(ctx, 1, sops, slps, &shifted, nullptr) == OCTATTN_ERROR_ALIASING);
  CHECK(BytesEqual(o0, o0));
  octattn_tensor over_lse = lse.t;
  over_lse.data = o.buf.data();
  expect(OCTATTN_ERROR_ALIASING, ctx, 2, ops, lps, o.ptr(), &over_lse);
  octattn_tensor bf16 = l1.t;
  bf16.dtype = OCTATTN_DTYPE_BF16;
  octattn_tensor bf_l[2] = {l0.t, bf16};
  expect(OCTATTN_ERROR_UNSUPPORTED, ctx, 2, ops, bf_l, o.ptr(), lse.ptr());
  octattn_tensor neg = o.t;
  neg.stride[2] = -1;
  CHECK(octattn_merge(ctx, 2, ops, lps, &neg, nullptr) == OCTATTN_ERROR_INVALID_STRIDE);
  octattn_tensor odd = o.t;
  odd.data = reinterpret_cast<char*>(o.buf.data()) + 2;
  odd.shape[0] = 1;
  CHECK(octattn_merge(ctx, 2, ops, lps, &odd, nullptr) == OCTATTN_ERROR_MISALIGNED);
  CHECK(BytesEqual(o, o_before));
}
