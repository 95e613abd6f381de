// The fused path beyond the sweeps of attention_test: shapes around its tile and key span
// sizes, prefix invariance, decode equal to prefill byte for byte, decode with GQA,
// every value of the core-dependent tuning giving the same bytes, and its memory
// staying flat.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "lib/api/context.h"
#include "lib/base/dtype.h"
#include "support.h"

using namespace octtest;

namespace {

void CheckFusedAgainstReference(const Problem& p, const octattn_attention_options& base,
                                const std::vector<Target>& targets) {
  octattn_attention_options opt = base;
  opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  Context ref_ctx;
  Tensor ref = p.Out(), ref_lse = p.Lse();
  Attend(ref_ctx, opt, p.q, p.k, p.v, ref, &ref_lse);
  opt.algorithm = OCTATTN_ALGORITHM_FUSED;
  for (const Target& t : targets) {
    INFO(t.Name());
    Context ctx(t);
    Tensor o = p.Out(), lse = p.Lse();
    Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
    CHECK(MaxDiff(o, ref) <= kTolerance * p.v.MaxAbs());
    CHECK(MaxDiff(lse, ref_lse) <= 4e-6);
  }
}

// The best target of each backend (the sweeps of attention_test cover all of them).
std::vector<Target> BestTargets() {
  std::vector<Target> out;
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD})
    out.push_back({b, OCTATTN_TARGET_AUTO});
  return out;
}

}  // namespace

TEST_CASE("fused matches the reference around tile and key span sizes", "[fused]") {
  const auto targets = BestTargets();
  // Past the first key span, the small runs (emulated, sanitized) take the last 40 rows
  // of the prefill (a chunked prefill: still the prefill path).
  for (int64_t t : {63, 64, 65, 255, 256, 257, 1023, 1024, 1025, 2100}) {
    if (Small() && t > 1025) continue;
    INFO("T " << t);
    const int64_t rows = Small() && t > 1000 ? 40 : t;
    CheckFusedAgainstReference(Problem(1, 2, 1, rows, t, 32, 32, 3), Options(), targets);
  }
  for (int64_t d : {64, 80, 128}) {
    INFO("D " << d);
    CheckFusedAgainstReference(Problem(1, 4, 1, 300, 300, d, d, 4), Options(), targets);
  }
}

TEST_CASE("fused: decode and chunked prefill shapes, windows, full attention",
          "[fused][dispatch]") {
  const auto targets = AllTargets();
  // Past one key span (1024) natively; under emulation just past it, with fewer heads.
  const int64_t kv = Sized(2500, 1100), heads = Sized(8, 4);
  INFO("decode, GQA 4, key spans");
  CheckFusedAgainstReference(Problem(2, heads, heads / 4, 1, kv, 64, 64, 5), Options(), targets);
  INFO("chunked prefill: 5 new rows after cached keys");
  CheckFusedAgainstReference(Problem(1, 4, 2, 5, kv, 32, 32, 6), Options(), targets);
  INFO("window 300, stride 97, across key spans");
  // Under emulation the last 40 rows only (a chunked prefill: still the prefill path).
  const int64_t t = Sized(2300, 1100);
  CheckFusedAgainstReference(Problem(1, 2, Sized(2, 1), Sized(t, 40), t, 16, 16, 7),
                             Options(1, 300, 97), targets);
  INFO("decode with a window");
  CheckFusedAgainstReference(Problem(1, 4, 1, 2, Sized(3000, 1300), 16, 16, 8),
                             Options(1, 100, 1000), targets);
  INFO("full attention, decode-shaped");
  CheckFusedAgainstReference(Problem(1, 4, 4, 3, Sized(2100, 1100), 16, 16, 9), Options(0),
                             targets);
}

TEST_CASE("fused prefix invariance: rows of T = n equal rows of T = N > n", "[fused][invariants]") {
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    Context ctx(t);
    // Past one key span (1024) either way; the small runs take a shorter N.
    const int64_t N = SmallSized(1500, 1100);
    Problem big(1, 4, 2, N, N, 32, 32, 10);
    Tensor out_big = big.Out();
    Attend(ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED), big.q, big.k, big.v, out_big);
    for (int64_t n : {1, 70, 1024, 1100}) {
      if (n >= N) continue;
      Problem small(1, 4, 2, n, n, 32, 32, 0);
      small.q.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
        small.q.at(a, b, c, d) = big.q.at(a, b, c, d);
      });
      small.k.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
        small.k.at(a, b, c, d) = big.k.at(a, b, c, d);
      });
      small.v.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
        small.v.at(a, b, c, d) = big.v.at(a, b, c, d);
      });
      Tensor out = small.Out();
      Attend(ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED), small.q, small.k, small.v, out);
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < n; ++i) REQUIRE(RowBytesEqual(out, out_big, 0, h, i));
    }
  }
}

TEST_CASE("fused decode at position i equals prefill row i, byte for byte",
          "[fused][invariants][dispatch]") {
  for (const Target& t : AllTargets()) {
    for (int64_t window : {0, 200}) {
      INFO(t.Name() << " window " << window);
      Context ctx(t);
      const int64_t N = SmallSized(2200, 1100), Hq = SmallSized(8, 4), Hkv = 2;
      Problem p(1, Hq, Hkv, N, N, 32, 32, 11);
      const auto opt = Options(1, window, window ? 64 : 0, OCTATTN_ALGORITHM_FUSED);
      // The prefill rows [first, N) against keys [0, N): the whole prefill natively; in the
      // small runs (emulated, sanitized) its last 9 rows (a chunked prefill, itself
      // promised equal to prefill).
      const int64_t first = SmallSized(0, N - 9);
      octattn_tensor pq = p.q.t;
      pq.data = static_cast<float*>(pq.data) + first * pq.stride[2];
      pq.shape[2] = N - first;
      Tensor prefill(1, Hq, N - first, 32);
      REQUIRE(octattn_attention(ctx, &opt, &pq, p.k.ptr(), p.v.ptr(), prefill.ptr(), nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      const std::vector<int64_t> positions = Small()
                                                 ? std::vector<int64_t>{N - 9, N - 5, N - 1}
                                                 : std::vector<int64_t>{0, 5, 1023, 1024, N - 1};
      for (int64_t i : positions) {
        for (int64_t rows : {1, 3}) {  // decode, and a short chunked prefill ending at i
          if (i + 1 - rows < first) continue;
          INFO("position " << i << " rows " << rows);
          // Views: q rows [i + 1 - rows, i], keys [0, i]; default alignment puts the
          // last query row at position i.
          octattn_tensor q = p.q.t, k = p.k.t, v = p.v.t;
          q.data = static_cast<float*>(q.data) + (i + 1 - rows) * q.stride[2];
          q.shape[2] = rows;
          k.shape[2] = v.shape[2] = i + 1;
          Tensor o(1, Hq, rows, 32);
          REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr, 0) ==
                  OCTATTN_OK);
          for (int64_t h = 0; h < Hq; ++h)
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t d = 0; d < 32; ++d) {
                const float a = o.at(0, h, r, d), b = prefill.at(0, h, i + 1 - rows + r - first, d);
                REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
              }
        }
      }
    }
  }
}

// Decode-sized row lists read whole tiles of keys and values in place (no packing copy);
// longer row lists pack them. A query head's bytes must not depend on which: one call
// with 20 query heads on one kv head (packed) against calls of 1, 2, 3, 4, 6, 7, 8 and 13
// of its heads (in place: blocks of one to eight rows).
TEST_CASE("fused tiles read in place equal packed tiles, byte for byte",
          "[fused][invariants][dispatch]") {
  struct Shape {
    int64_t head_dim, value_dim, kv_len, q_len;
    Layout layout;
  };
  const std::vector<Shape> shapes =
      Emulated() ? std::vector<Shape>{{64, 64, 600, 1, Layout::kBHTD}}
                 : std::vector<Shape>{
                       {128, 128, 2300, 1, Layout::kBHTD}, {128, 128, 1100, 2, Layout::kBTHD},
                       {8, 16, 700, 1, Layout::kBHTD},     {72, 48, 513, 1, Layout::kBTHD},
                       {256, 256, 1300, 1, Layout::kBHTD}, {40, 32, 256, 3, Layout::kPadded}};
  struct Mask {
    int32_t causal;
    int64_t window, stride, chunk;
  };
  const Mask masks[] = {
      {1, 0, 0, 0}, {0, 0, 0, 0}, {1, 400, 0, 0}, {1, 300, 128, 0}, {1, 0, 0, 512}};
  const int64_t Hq = 20;
  for (const Target& t : AllTargets())
    for (const Shape& sh : shapes)
      for (const Mask& m : masks)
        for (int threads : {1, 3}) {
          if (Sanitized() && threads == 1) continue;  // the more task edges only
          INFO(t.Name() << " D " << sh.head_dim << " Dv " << sh.value_dim << " kv " << sh.kv_len
                        << " q " << sh.q_len << " mask " << m.causal << "/" << m.window << "/"
                        << m.stride << "/" << m.chunk << " threads " << threads);
          Context ctx(t, threads);
          Problem p(1, Hq, 1, sh.q_len, sh.kv_len, sh.head_dim, sh.value_dim, 21, 1.0f, sh.layout);
          auto opt = Options(m.causal, m.window, m.stride, OCTATTN_ALGORITHM_FUSED);
          opt.chunk = m.chunk;
          Tensor all = p.Out(), all_lse = p.Lse();
          Attend(ctx, opt, p.q, p.k, p.v, all, &all_lse);
          for (int64_t heads : {1, 2, 3, 4, 6, 7, 8, 13})
            for (int64_t h0 = 0; h0 + heads <= Hq; h0 += 7) {
              octattn_tensor q = p.q.t;
              q.data = static_cast<float*>(q.data) + h0 * q.stride[1];
              q.shape[1] = heads;
              Tensor o(1, heads, sh.q_len, sh.value_dim), lse(1, heads, sh.q_len, 1);
              REQUIRE(octattn_attention(ctx, &opt, &q, p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                                        nullptr, nullptr, 0) == OCTATTN_OK);
              for (int64_t h = 0; h < heads; ++h)
                for (int64_t i = 0; i < sh.q_len; ++i) {
                  INFO("head " << h0 + h << " row " << i);
                  for (int64_t d = 0; d < sh.value_dim; ++d) {
                    const float a = o.at(0, h, i, d), b = all.at(0, h0 + h, i, d);
                    REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
                  }
                  const float a = lse.at(0, h, i, 0), b = all_lse.at(0, h0 + h, i, 0);
                  REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
                }
            }
        }
}

TEST_CASE("fused workspace stays bounded as T grows", "[fused]") {
  Context ctx(1);
  size_t last = 0;
  for (int64_t t : {1024, 4096, 16384, 65536}) {
    octattn_tensor q, o;
    const int64_t shape[4] = {1, 8, t, 128};
    // Sizes only: the workspace query reads and writes no data, so the addresses are
    // placeholders far enough apart not to overlap.
    void* in_addr = reinterpret_cast<void*>(uintptr_t{1} << 40);
    void* out_addr = reinterpret_cast<void*>(uintptr_t{1} << 41);
    REQUIRE(octattn_tensor_init(&q, in_addr, shape, OCTATTN_LAYOUT_BHTD) == OCTATTN_OK);
    REQUIRE(octattn_tensor_init(&o, out_addr, shape, OCTATTN_LAYOUT_BHTD) == OCTATTN_OK);
    size_t bytes = 0;
    const auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    REQUIRE(octattn_attention_workspace_size(ctx, &opt, &q, &q, &q, &o, nullptr, nullptr, &bytes) ==
            OCTATTN_OK);
    INFO("T " << t << ": " << bytes << " bytes");
    CHECK(bytes < (size_t{4} << 20));
    if (last) CHECK(bytes == last);
    last = bytes;
  }
}

// Decode over layouts whose kv heads share key rows ([T, H, D], vLLM's pools) runs tasks
// covering every kv head, reading the heads' slices of each row together; each head's
// bytes must be those of the [H, T, D] layout of the same numbers, whose tasks take one
// kv head each.
TEST_CASE("decode tasks covering every kv head give each head's own bytes",
          "[fused][invariants][dispatch]") {
  struct Shape {
    int64_t batch, hq, hkv, q_len, kv_len, dim;
  };
  const std::vector<Shape> shapes = Emulated() ? std::vector<Shape>{{1, 4, 2, 1, 4200, 16}}
                                               : std::vector<Shape>{{1, 8, 4, 1, 4500, 64},
                                                                    {1, 16, 8, 2, 3100, 128},
                                                                    {4, 4, 2, 1, 700, 32},
                                                                    {2, 6, 3, 1, 2500, 40}};
  struct Mask {
    int32_t causal;
    int64_t window, stride, chunk;
  };
  const Mask masks[] = {
      {1, 0, 0, 0}, {0, 0, 0, 0}, {1, 1000, 0, 0}, {1, 700, 256, 0}, {1, 0, 0, 2048}};
  const std::vector<Target> targets = AllTargets();
  for (const Shape& sh : shapes) {
    // The same numbers in both layouts, made once per shape.
    Problem rows(sh.batch, sh.hq, sh.hkv, sh.q_len, sh.kv_len, sh.dim, sh.dim, 5, 1.0f,
                 Layout::kBTHD);
    Problem heads(sh.batch, sh.hq, sh.hkv, sh.q_len, sh.kv_len, sh.dim, sh.dim, 5, 1.0f,
                  Layout::kBHTD);
    heads.q.CopyValuesFrom(rows.q);
    heads.k.CopyValuesFrom(rows.k);
    heads.v.CopyValuesFrom(rows.v);
    for (const Target& t : targets)
      for (const Mask& m : masks)
        for (int threads : {1, 3}) {
          if (Sanitized() && threads == 1) continue;  // the more task edges only
          INFO(t.Name() << " B " << sh.batch << " Hq " << sh.hq << " Hkv " << sh.hkv << " q "
                        << sh.q_len << " kv " << sh.kv_len << " D " << sh.dim << " mask "
                        << m.causal << "/" << m.window << "/" << m.stride << "/" << m.chunk
                        << " threads " << threads);
          Context ctx(t, threads);
          auto opt = Options(m.causal, m.window, m.stride, OCTATTN_ALGORITHM_FUSED);
          opt.chunk = m.chunk;
          Tensor o_rows = rows.Out(), lse_rows = rows.Lse(), o_heads = heads.Out(),
                 lse_heads = heads.Lse();
          Attend(ctx, opt, rows.q, rows.k, rows.v, o_rows, &lse_rows);
          Attend(ctx, opt, heads.q, heads.k, heads.v, o_heads, &lse_heads);
          CHECK(BytesEqual(o_rows, o_heads));
          CHECK(BytesEqual(lse_rows, lse_heads));
        }
  }
}

// Calls of many rows per kv head over few (sequence, kv head) pairs (MLA's absorbed
// decode, a chunk of prompt over a long cache) split their keys into units as decode does
// (plan::kSplitPairs); as entry 0 of a batch of 16 the same rows run unsplit. Both must
// give the same bytes (o, lse, key scores), also with v a view of k's first value_dim
// columns (MLA's latent rows).
TEST_CASE("fused: keys split over few pairs give the unsplit bytes",
          "[fused][invariants][dispatch]") {
  struct Shape {
    int64_t hq, hkv, q_len, kv_len, dim, value_dim;
    bool v_of_k;
  };
  const std::vector<Shape> shapes = Emulated() ? std::vector<Shape>{{24, 1, 1, 1300, 32, 16, true}}
                                               : std::vector<Shape>{{32, 1, 1, 2600, 64, 48, true},
                                                                    {8, 2, 5, 2100, 32, 32, false},
                                                                    {20, 1, 3, 1500, 96, 64, true}};
  struct Mask {
    int32_t causal;
    int64_t window, stride, chunk;
  };
  const Mask masks[] = {{1, 0, 0, 0}, {1, 600, 128, 0}, {1, 0, 0, 512}};
  const int64_t batch = 16;
  for (const Shape& sh : shapes) {
    Problem p(batch, sh.hq, sh.hkv, sh.q_len, sh.kv_len, sh.dim, sh.v_of_k ? 1 : sh.value_dim, 9);
    octattn_tensor v = p.v.t;
    if (sh.v_of_k) {
      v = p.k.t;
      v.shape[3] = sh.value_dim;
    }
    // Entry 0 alone: views of the batch's tensors.
    octattn_tensor q1 = p.q.t, k1 = p.k.t, v1 = v;
    q1.shape[0] = k1.shape[0] = v1.shape[0] = 1;
    for (const Target& t : AllTargets())
      for (const Mask& m : masks)
        for (int threads : {1, 3}) {
          if (Sanitized() && threads == 1) continue;  // the more task edges only
          INFO(t.Name() << " Hq " << sh.hq << " Hkv " << sh.hkv << " q " << sh.q_len << " kv "
                        << sh.kv_len << " D " << sh.dim << "/" << sh.value_dim << " mask "
                        << m.causal << "/" << m.window << "/" << m.stride << "/" << m.chunk
                        << " threads " << threads);
          Context ctx(t, threads);
          auto opt = Options(m.causal, m.window, m.stride, OCTATTN_ALGORITHM_FUSED);
          opt.chunk = m.chunk;
          Tensor o(batch, sh.hq, sh.q_len, sh.value_dim), lse = p.Lse();
          Tensor ks(batch, sh.hkv, sh.kv_len, 1);
          opt.key_scores = ks.ptr();
          REQUIRE(octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), &v, o.ptr(), lse.ptr(),
                                    nullptr, nullptr, 0) == OCTATTN_OK);
          Tensor o1(1, sh.hq, sh.q_len, sh.value_dim), lse1(1, sh.hq, sh.q_len, 1);
          Tensor ks1(1, sh.hkv, sh.kv_len, 1);
          opt.key_scores = ks1.ptr();
          REQUIRE(octattn_attention(ctx, &opt, &q1, &k1, &v1, o1.ptr(), lse1.ptr(), nullptr,
                                    nullptr, 0) == OCTATTN_OK);
          for (int64_t h = 0; h < sh.hq; ++h)
            for (int64_t i = 0; i < sh.q_len; ++i) {
              INFO("head " << h << " row " << i);
              for (int64_t d = 0; d < sh.value_dim; ++d) {
                const float a = o1.at(0, h, i, d), b = o.at(0, h, i, d);
                REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
              }
              const float a = lse1.at(0, h, i, 0), b = lse.at(0, h, i, 0);
              REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
            }
          for (int64_t g = 0; g < sh.hkv; ++g)
            for (int64_t j = 0; j < sh.kv_len; ++j) {
              const float a = ks1.at(0, g, j, 0), b = ks.at(0, g, j, 0);
              REQUIRE(std::memcmp(&a, &b, sizeof(float)) == 0);
            }
        }
  }
}

TEST_CASE("fused: every tuning value gives the same bytes on every target", "[fused][dispatch]") {
  // Decode over [T, H, D] caches, the rows the tuning is about: 8 kv heads of 128 (f32
  // rows 4 KiB apart, sharing L1 sets: staged or read in place, fetched or not; 16-bit
  // rows 2 KiB apart: fetched into L1 or L2) and 4 kv heads (rows that spread over the
  // sets). Two sequences, so that decode tasks cover every kv head of a unit too.
  const int64_t kv = SmallSized(1500, 600);
  for (int64_t hkv : {int64_t{8}, int64_t{4}})
    for (octattn_dtype type : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
      Problem p(2, hkv * 2, hkv, 1, kv, 128, 128, 41, 1.0f, Layout::kBTHD);
      // 16-bit copies of q, k and v with the same strides (dims contiguous).
      std::vector<uint16_t> q16(p.q.buf.size()), k16(p.k.buf.size()), v16(p.v.buf.size());
      octattn_tensor q = p.q.t, k = p.k.t, v = p.v.t;
      if (type != OCTATTN_DTYPE_F32) {
        auto narrow = [&](const std::vector<float>& src, std::vector<uint16_t>& dst,
                          octattn_tensor* t) {
          for (size_t i = 0; i < src.size(); ++i)
            dst[i] = type == OCTATTN_DTYPE_BF16 ? octattn::base::F32ToBf16(src[i])
                                                : octattn::base::F32ToF16(src[i]);
          t->data = dst.data();
          t->dtype = type;
        };
        narrow(p.q.buf, q16, &q);
        narrow(p.k.buf, k16, &k);
        narrow(p.v.buf, v16, &v);
      }
      for (const Target& t : AllTargets()) {
        INFO("kv heads " << hkv << " dtype " << type << " " << t.Name());
        const octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
        Tensor first = p.Out();
        bool have_first = false;
        for (int tuning = 0; tuning < 8; ++tuning)
          for (int threads : {1, 2}) {
            if (Small() && threads == 1) continue;  // the small runs: two threads only
            // direct_rows 1: the two rows of each kv head pack their tiles.
            const int direct_rows = tuning & 4 ? 1 : 16;
            INFO("in_place_rows " << (tuning & 1) << " vendor_fetch " << (tuning >> 1 & 1)
                                  << " direct_rows " << direct_rows << " threads " << threads);
            Context ctx(t, threads);
            octattn_context* raw = ctx;
            raw->tuning.in_place_rows = tuning & 1;
            raw->tuning.vendor_fetch = tuning >> 1 & 1;
            raw->tuning.direct_rows = direct_rows;
            Tensor o = p.Out();
            REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr,
                                      0) == OCTATTN_OK);
            if (!have_first) {
              first = o;
              have_first = true;
            }
            CHECK(BytesEqual(o, first));
          }
      }
    }
}
