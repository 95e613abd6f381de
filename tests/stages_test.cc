// The stage entry points on every target against the reference stages, their
// composition against the composed call, and the head layout copies.
#include <catch2/catch.hpp>

#include "lib/reference/reference.h"
#include "support.h"

using namespace octtest;

namespace {

// Head (b, h) of a test tensor as the reference stages take it.
octattn::kernels::Matrix HeadOf(Tensor& x, int64_t b, int64_t h) {
  return {x.buf.data() + b * x.t.stride[0] + h * x.t.stride[1], x.t.stride[2], x.t.stride[3]};
}
octattn::kernels::ConstMatrix ConstHeadOf(const Tensor& x, int64_t b, int64_t h) {
  return {x.buf.data() + b * x.t.stride[0] + h * x.t.stride[1], x.t.stride[2], x.t.stride[3]};
}

}  // namespace

TEST_CASE("scores, scale, mask, softmax and weighted sum match the reference on every target",
          "[stages][dispatch]") {
  const int64_t B = 2, Hq = 4, Hkv = 2, Tq = 13, Tk = 21, D = 24, Dv = 20;
  Problem p(B, Hq, Hkv, Tq, Tk, D, Dv, 21);
  Tensor want_s(B, Hq, Tq, Tk), want_p(B, Hq, Tq, Tk), want_o(B, Hq, Tq, Dv),
      want_lse(B, Hq, Tq, 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      octattn::reference::ScoresHead(ConstHeadOf(p.q, b, h), ConstHeadOf(p.k, b, h / 2),
                                     HeadOf(want_s, b, h), Tq, Tk, D);
  const float scale = 0.37f;
  Tensor scaled = want_s;
  scaled.ForEach(
      [&](int64_t a, int64_t b, int64_t c, int64_t d) { scaled.at(a, b, c, d) *= scale; });
  const auto opt = Options(1, 6, 4);
  octattn::base::Mask mask{1, 6, 4, Tk - Tq, 0};
  Tensor masked = scaled;
  want_p = scaled;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      float* head = masked.buf.data() + b * masked.t.stride[0] + h * masked.t.stride[1];
      octattn::reference::MaskHead(head, Tk, 1, Tq, Tk, mask);
      float* ph = want_p.buf.data() + b * want_p.t.stride[0] + h * want_p.t.stride[1];
      octattn::reference::MaskHead(ph, Tk, 1, Tq, Tk, mask);
      for (int64_t i = 0; i < Tq; ++i)
        octattn::reference::SoftmaxRow(ph + i * Tk, Tk, 1, &want_lse.at(b, h, i, 0));
      octattn::reference::WeightedSumHead(ConstHeadOf(want_p, b, h), ConstHeadOf(p.v, b, h / 2),
                                          HeadOf(want_o, b, h), Tq, Tk, Dv);
    }

  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    Context ctx(t);
    Tensor s(B, Hq, Tq, Tk), lse(B, Hq, Tq, 1), o(B, Hq, Tq, Dv);
    REQUIRE(octattn_scores(ctx, p.q.ptr(), p.k.ptr(), s.ptr()) == OCTATTN_OK);
    CHECK(MaxDiff(s, want_s) <= 2e-6 * D);
    s = want_s;  // continue from exact inputs so each stage is checked on its own
    REQUIRE(octattn_scale(ctx, s.ptr(), scale) == OCTATTN_OK);
    CHECK(BytesEqual(s, scaled));
    REQUIRE(octattn_mask(ctx, &opt, s.ptr()) == OCTATTN_OK);
    CHECK(BytesEqual(s, masked));
    REQUIRE(octattn_softmax(ctx, s.ptr(), lse.ptr()) == OCTATTN_OK);
    CHECK(MaxDiff(s, want_p) <= 1e-6);
    CHECK(MaxDiff(lse, want_lse) <= 2e-6);
    REQUIRE(octattn_weighted_sum(ctx, want_p.ptr(), p.v.ptr(), o.ptr()) == OCTATTN_OK);
    CHECK(MaxDiff(o, want_o) <= kTolerance * p.v.MaxAbs());

    // The stages composed equal the composed call.
    Tensor s2(B, Hq, Tq, Tk, Layout::kDimSlowest), o2(B, Hq, Tq, Dv), o3(B, Hq, Tq, Dv);
    REQUIRE(octattn_scores(ctx, p.q.ptr(), p.k.ptr(), s2.ptr()) == OCTATTN_OK);
    REQUIRE(octattn_scale(ctx, s2.ptr(), 1.0f / std::sqrt(float(D))) == OCTATTN_OK);
    REQUIRE(octattn_mask(ctx, &opt, s2.ptr()) == OCTATTN_OK);
    REQUIRE(octattn_softmax(ctx, s2.ptr(), nullptr) == OCTATTN_OK);
    REQUIRE(octattn_weighted_sum(ctx, s2.ptr(), p.v.ptr(), o2.ptr()) == OCTATTN_OK);
    Attend(ctx, opt, p.q, p.k, p.v, o3);
    CHECK(MaxDiff(o2, o3) <= kTolerance * p.v.MaxAbs());
  }
}

TEST_CASE("softmax of a row of -inf is zeros with lse -inf, and NaN spreads over its row",
          "[stages]") {
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    Context ctx(t);
    Tensor s(1, 1, 3, 21), lse(1, 1, 3, 1);
    s.Fill(3);
    for (int64_t j = 0; j < 21; ++j) s.at(0, 0, 0, j) = -INFINITY;
    s.at(0, 0, 1, 20) = NAN;
    REQUIRE(octattn_softmax(ctx, s.ptr(), lse.ptr()) == OCTATTN_OK);
    for (int64_t j = 0; j < 21; ++j) {
      CHECK(s.at(0, 0, 0, j) == 0.0f);
      CHECK(std::isnan(s.at(0, 0, 1, j)));
      CHECK(std::isfinite(s.at(0, 0, 2, j)));
    }
    CHECK(lse.at(0, 0, 0, 0) == -INFINITY);
    CHECK(std::isnan(lse.at(0, 0, 1, 0)));
  }
}

TEST_CASE("stage validation", "[stages]") {
  Context ctx;
  Tensor q(1, 2, 3, 4), k(1, 1, 5, 4), s(1, 2, 3, 5), bad(1, 2, 3, 4);
  CHECK(octattn_scores(ctx, q.ptr(), k.ptr(), bad.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(octattn_scores(nullptr, q.ptr(), k.ptr(), s.ptr()) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_scale(ctx, s.ptr(), NAN) == OCTATTN_ERROR_INVALID_OPTION);
  octattn_tensor alias = s.t;
  alias.data = q.buf.data();
  alias.shape[3] = 4;
  CHECK(octattn_scores(ctx, q.ptr(), k.ptr(), &alias) == OCTATTN_ERROR_INVALID_SHAPE);
  alias.shape[3] = 5;
  alias.shape[2] = 2;
  CHECK(octattn_scores(ctx, q.ptr(), k.ptr(), &alias) == OCTATTN_ERROR_INVALID_SHAPE);
  auto o = Options();
  o.window = -3;
  CHECK(octattn_mask(ctx, &o, s.ptr()) == OCTATTN_ERROR_INVALID_OPTION);
  Tensor lse(1, 2, 3, 2);
  CHECK(octattn_softmax(ctx, s.ptr(), lse.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  // Packed QKV with q_heads not a multiple of kv_heads: the GQA rule of attention.
  Tensor src(1, 4, 7 * 2, 1), sq(1, 3, 4, 2), sk(1, 2, 4, 2), sv(1, 2, 4, 2);
  const Tensor pristine = sq;
  CHECK(octattn_split_qkv(ctx, src.ptr(), 3, 2, sq.ptr(), sk.ptr(), sv.ptr()) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(ctx.Error().find("multiple") != std::string::npos);
  CHECK(BytesEqual(sq, pristine));
}

TEST_CASE("head split, merge and packed-QKV split are exact inverses", "[stages][layout]") {
  const int64_t B = 2, T = 7, Hq = 4, Hkv = 2, D = 5;
  Context ctx;
  Tensor x(B, T, Hq * D, 1), heads(B, Hq, T, D), back(B, T, Hq * D, 1);
  x.Fill(12);
  REQUIRE(octattn_split_heads(ctx, x.ptr(), Hq, heads.ptr()) == OCTATTN_OK);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) REQUIRE(heads.at(b, h, t, d) == x.at(b, t, h * D + d, 0));
  REQUIRE(octattn_merge_heads(ctx, heads.ptr(), back.ptr()) == OCTATTN_OK);
  CHECK(BytesEqual(x, back));

  // Strided destinations work the same (BTHD heads are a view of [B, T, H*D]).
  Tensor heads_bthd(B, Hq, T, D, Layout::kBTHD);
  REQUIRE(octattn_split_heads(ctx, x.ptr(), Hq, heads_bthd.ptr()) == OCTATTN_OK);
  CHECK(heads_bthd.buf == x.buf);

  Tensor packed(B, T, (Hq + 2 * Hkv) * D, 1), q(B, Hq, T, D), k(B, Hkv, T, D), v(B, Hkv, T, D);
  packed.Fill(13);
  REQUIRE(octattn_split_qkv(ctx, packed.ptr(), Hq, Hkv, q.ptr(), k.ptr(), v.ptr()) == OCTATTN_OK);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t h = 0; h < Hq; ++h) REQUIRE(q.at(b, h, t, d) == packed.at(b, t, h * D + d, 0));
        for (int64_t h = 0; h < Hkv; ++h) {
          REQUIRE(k.at(b, h, t, d) == packed.at(b, t, (Hq + h) * D + d, 0));
          REQUIRE(v.at(b, h, t, d) == packed.at(b, t, (Hq + Hkv + h) * D + d, 0));
        }
      }
  CHECK(octattn_split_heads(ctx, x.ptr(), 3, heads.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(octattn_split_qkv(ctx, packed.ptr(), Hq, 3, q.ptr(), k.ptr(), v.ptr()) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(octattn_split_qkv(ctx, packed.ptr(), Hq, Hkv, q.ptr(), q.ptr(), v.ptr()) ==
        OCTATTN_ERROR_INVALID_SHAPE);
  octattn_tensor kq = k.t;
  kq.data = q.buf.data();
  CHECK(octattn_split_qkv(ctx, packed.ptr(), Hq, Hkv, q.ptr(), &kq, v.ptr()) ==
        OCTATTN_ERROR_ALIASING);
  Tensor seq_bad(B, T, Hq * D, 2);
  CHECK(octattn_split_heads(ctx, seq_bad.ptr(), Hq, heads.ptr()) == OCTATTN_ERROR_INVALID_SHAPE);
}

TEST_CASE("the mask stage's kernel equals the formula pair by pair on every target", "[stages]") {
  // The stage writes runs from each row's key ranges; the reference tests every pair.
  struct M {
    int32_t causal;
    int64_t window, stride, q_start;
  };
  const M masks[] = {{1, 0, 0, OCTATTN_Q_START_DEFAULT},
                     {1, 5, 0, OCTATTN_Q_START_DEFAULT},
                     {1, 6, 4, OCTATTN_Q_START_DEFAULT},
                     {1, 3, 1, 2},
                     {1, 40, 7, 30},
                     {1, 1, 0, -3},
                     {1, 0, 0, 100},
                     {0, 0, 0, OCTATTN_Q_START_DEFAULT}};
  const int64_t B = 1, H = 2, Tq = 19, Tk = 53;
  for (Layout layout : {Layout::kBHTD, Layout::kDimSlowest}) {
    Tensor scores(B, H, Tq, Tk, layout);
    scores.Fill(8);
    for (const M& m : masks) {
      octattn_attention_options opt = Options(m.causal, m.window, m.stride);
      opt.q_start = m.q_start;
      const octattn::base::Mask mask{m.causal, m.window, m.stride,
                                     !m.causal                              ? 0
                                     : m.q_start == OCTATTN_Q_START_DEFAULT ? Tk - Tq
                                                                            : m.q_start,
                                     0};
      Tensor want = scores;
      for (int64_t h = 0; h < H; ++h) {
        octattn::kernels::Matrix w = HeadOf(want, 0, h);
        octattn::reference::MaskHead(w.data, w.row, w.col, Tq, Tk, mask);
      }
      for (const Target& t : AllTargets()) {
        INFO(t.Name() << " window " << m.window << " stride " << m.stride << " q_start "
                      << m.q_start << " causal " << m.causal);
        Context ctx(t);
        Tensor got = scores;
        REQUIRE(octattn_mask(ctx, &opt, got.ptr()) == OCTATTN_OK);
        CHECK(BytesEqual(got, want));
      }
    }
  }
}
