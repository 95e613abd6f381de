// Cascade decode: decode-shaped sequences whose leading key spans are the same rows (a
// paged cache's shared blocks, a contiguous cache's same rows) read those spans once for
// all of them. The bytes are those of the same call over copies of the rows (which
// shares nothing), on every dtype, modifier, mask and thread count; run_info counts the
// rows read once for several sequences.
#include "support.h"

namespace octtest {
namespace {

constexpr int64_t kSpan = 1024;  // the fused path's key spans (kernels::kSpanKeys)

// A paged batch of sequences built from logical keys: sequence s's keys are `prefix`'s
// first share[s] rows (block-aligned) followed by rows of its own. Shared: the prefix's
// blocks are one set that every sequence's table points at; copied: each sequence has
// its own blocks holding the same values.
struct Batch {
  int64_t hkv, d, bs;
  std::vector<int64_t> lens, share;
  Tensor k, v;  // the blocks [blocks, hkv, bs, d]
  std::vector<int32_t> table;
  int64_t cols = 0;

  Batch(int64_t hkv_, int64_t d_, int64_t bs_, std::vector<int64_t> lens_,
        std::vector<int64_t> share_, const Tensor& pk, const Tensor& pv, bool shared, uint32_t seed)
      : hkv(hkv_), d(d_), bs(bs_), lens(std::move(lens_)), share(std::move(share_)) {
    const int64_t n = static_cast<int64_t>(lens.size());
    int64_t longest = 0;
    for (int64_t len : lens) longest = std::max(longest, len);
    cols = (longest + bs - 1) / bs;
    const int64_t prefix_blocks = pk.shape[2] / bs;
    const int64_t blocks = prefix_blocks + n * cols;
    k = Tensor(blocks, hkv, bs, d, kBTHD);
    v = Tensor(blocks, hkv, bs, d, kBTHD);
    table.assign(static_cast<size_t>(n * cols), 0);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t blk = 0; blk < prefix_blocks; ++blk)
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t r = 0; r < bs; ++r)
          for (int64_t x = 0; x < d; ++x) {
            k.at(blk, h, r, x) = pk.at(0, h, blk * bs + r, x);
            v.at(blk, h, r, x) = pv.at(0, h, blk * bs + r, x);
          }
    for (int64_t s = 0; s < n; ++s)
      for (int64_t c = 0; c < cols; ++c) {
        const bool from_prefix = (c + 1) * bs <= share[static_cast<size_t>(s)];
        const int64_t own = prefix_blocks + s * cols + c;
        table[static_cast<size_t>(s * cols + c)] =
            static_cast<int32_t>(from_prefix && shared ? c : own);
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t r = 0; r < bs; ++r)
            for (int64_t x = 0; x < d; ++x) {
              k.at(own, h, r, x) = from_prefix ? pk.at(0, h, c * bs + r, x) : dist(rng);
              v.at(own, h, r, x) = from_prefix ? pv.at(0, h, c * bs + r, x) : dist(rng);
            }
      }
  }
  void Into(octattn_attention_options* opt) const {
    opt->kv_lens = lens.data();
    opt->block_table = table.data();
    opt->block_table_cols = cols;
  }
};

// The rows run_info reports for sequences sharing spans with sequence 0 of their group:
// `whole[s]` leading spans each reads whole, `same[s]` spans it shares with the lead
// (the lead: its own whole spans). Per span, m sequences read it in ceil(m / 16) tasks.
int64_t ExpectedRows(const std::vector<int64_t>& same, int64_t hkv) {
  int64_t spans = 0;
  for (size_t s = 1; s < same.size(); ++s) spans = std::max(spans, same[s]);
  int64_t rows = 0;
  for (int64_t c = 0; c < spans; ++c) {
    int64_t m = 0;
    for (int64_t x : same) m += x > c ? 1 : 0;
    rows += (m - (m + 15) / 16) * kSpan * hkv;
  }
  return rows;
}

int64_t SharedRows(Context& ctx) {
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  return info.shared_kv_rows;
}

// One cache [1, hkv, t, d] seen by B batch entries (k0, v0: k and v with batch stride 0,
// every entry's rows the same rows) and its values copied for each entry (kb, vb).
struct SharedCache {
  Tensor k, v, kb, vb;
  octattn_tensor k0{}, v0{};
  SharedCache(int64_t B, int64_t hkv, int64_t t, int64_t d, uint32_t seed)
      : k(1, hkv, t, d), v(1, hkv, t, d), kb(B, hkv, t, d), vb(B, hkv, t, d) {
    k.Fill(seed), v.Fill(seed + 1);
    kb.ForEach([&](int64_t b, int64_t h, int64_t r, int64_t x) {
      kb.at(b, h, r, x) = k.at(0, h, r, x);
      vb.at(b, h, r, x) = v.at(0, h, r, x);
    });
    k0 = *k.ptr(), v0 = *v.ptr();
    k0.shape[0] = v0.shape[0] = B;
    k0.stride[0] = v0.stride[0] = 0;
  }
  SharedCache(const SharedCache&) = delete;
};

TEST_CASE("cascade decode: shared blocks give the bytes of copied ones", "[cascade][batches]") {
  const int64_t hq = 8, hkv = 2, d = 64, bs = 64;
  // Two prefixes; sequences 0-4 and 8-14 start with A (4 ending early or diverging),
  // 5-6 with B, 7 with neither.
  Tensor pa(1, hkv, 3264, d), pva(1, hkv, 3264, d), pb(1, hkv, 2112, d), pvb(1, hkv, 2112, d);
  pa.Fill(1), pva.Fill(2), pb.Fill(3), pvb.Fill(4);
  // Prefix B's rows follow A's in one tensor, so that one set of blocks holds both.
  Tensor pk(1, hkv, 3264 + 2112, d), pv(1, hkv, 3264 + 2112, d);
  for (int64_t h = 0; h < hkv; ++h)
    for (int64_t r = 0; r < 3264 + 2112; ++r)
      for (int64_t x = 0; x < d; ++x) {
        pk.at(0, h, r, x) = r < 3264 ? pa.at(0, h, r, x) : pb.at(0, h, r - 3264, x);
        pv.at(0, h, r, x) = r < 3264 ? pva.at(0, h, r, x) : pvb.at(0, h, r - 3264, x);
      }
  const std::vector<int64_t> lens = {3210, 3500, 3201, 1500, 2500, 2150, 2177, 4000,
                                     3300, 3264, 3205, 3290, 3230, 3400, 3333};
  const std::vector<int64_t> share = {3200, 3264, 3200, 1472, 1088, 2048, 2048, 0,
                                      3264, 3264, 3200, 3264, 3200, 3264, 3264};
  const bool b_prefix[] = {false, false, false, false, false, true,  true, false,
                           false, false, false, false, false, false, false};
  const int64_t n = static_cast<int64_t>(lens.size());
  // Sequences 5 and 6 read prefix B: their shared blocks are B's (offset by A's blocks).
  auto build = [&](bool shared, uint32_t seed) {
    Batch b(hkv, d, bs, lens, share, pk, pv, shared, seed);
    const int64_t off = 3264 / bs;
    for (int64_t s = 0; s < n; ++s) {
      if (!b_prefix[s]) continue;
      for (int64_t c = 0; c * bs + bs <= share[static_cast<size_t>(s)]; ++c) {
        const int64_t own = 3264 / bs + 2112 / bs + s * b.cols + c;
        if (shared) b.table[static_cast<size_t>(s * b.cols + c)] = static_cast<int32_t>(off + c);
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t r = 0; r < bs; ++r)
            for (int64_t x = 0; x < d; ++x) {
              b.k.at(own, h, r, x) = pb.at(0, h, c * bs + r, x);
              b.v.at(own, h, r, x) = pvb.at(0, h, c * bs + r, x);
            }
      }
    }
    return b;
  };
  // (Prefix B's blocks sit after A's in Batch's prefix blocks: the tensors above.)
  const Batch shared = build(true, 7), copied = build(false, 7);
  struct Variant {
    const char* name;
    int64_t q_len;
    int64_t window;
    float softcap;
    bool sinks;
    octattn_dtype dtype;
  };
  const Variant variants[] = {
      {"decode", 1, 0, 0.0f, false, OCTATTN_DTYPE_F32},
      {"two rows, softcap and sinks", 2, 0, 30.0f, true, OCTATTN_DTYPE_F32},
      {"a window that drops some sequences' first span", 1, 3300, 0.0f, false, OCTATTN_DTYPE_F32},
      {"bf16", 1, 0, 0.0f, false, OCTATTN_DTYPE_BF16},
  };
  std::vector<float> sinks(static_cast<size_t>(hq));
  for (int64_t h = 0; h < hq; ++h) sinks[static_cast<size_t>(h)] = 0.5f - 0.25f * h;
  for (const Variant& var : variants)
    for (int threads : {1, 2}) {
      DYNAMIC_SECTION(var.name << ", " << threads << " threads") {
        Tensor q(n, hq, var.q_len, d);
        q.Fill(11);
        octattn_attention_options opt = Options(1, var.window, 0, OCTATTN_ALGORITHM_FUSED);
        opt.softcap = var.softcap;
        if (var.sinks) opt.sinks = sinks.data();
        Context ctx(threads);
        const Dtypes ty{var.dtype, var.dtype, OCTATTN_DTYPE_F32};
        Tensor o_shared(n, hq, var.q_len, d), o_copied(n, hq, var.q_len, d);
        Tensor lse_shared(n, hq, var.q_len, 1), lse_copied(n, hq, var.q_len, 1);
        shared.Into(&opt);
        REQUIRE(Run(ty, ctx, &opt, q.ptr(), shared.k.ptr(), shared.v.ptr(), o_shared.ptr(),
                    lse_shared.ptr(), nullptr) == OCTATTN_OK);
        const int64_t rows = SharedRows(ctx);
        copied.Into(&opt);
        REQUIRE(Run(ty, ctx, &opt, q.ptr(), copied.k.ptr(), copied.v.ptr(), o_copied.ptr(),
                    lse_copied.ptr(), nullptr) == OCTATTN_OK);
        REQUIRE(SharedRows(ctx) == 0);
        REQUIRE(BytesEqual(o_shared, o_copied));
        REQUIRE(BytesEqual(lse_shared, lse_copied));
        // The rows shared: group A is the sequences on prefix A that read their first
        // span whole, led by the first of them; group B likewise.
        auto whole = [&](int64_t s) {
          const int64_t first = lens[static_cast<size_t>(s)] - var.q_len;  // first row's position
          const int64_t last = lens[static_cast<size_t>(s)] - 1;
          if (var.window > 0 && last - var.window + 1 > 0) return int64_t{0};
          return (first + 1) / kSpan;
        };
        int64_t want = 0;
        for (bool on_b : {false, true}) {
          std::vector<int64_t> same;
          int64_t lead = -1;
          for (int64_t s = 0; s < n; ++s) {
            if (b_prefix[s] != on_b || share[static_cast<size_t>(s)] < bs || whole(s) == 0)
              continue;
            if (lead < 0) {
              lead = s;
              same.push_back(whole(s));
              continue;
            }
            const int64_t common =
                std::min(share[static_cast<size_t>(s)], share[static_cast<size_t>(lead)]) / kSpan;
            const int64_t x = std::min({whole(s), whole(lead), common});
            if (x > 0) same.push_back(x);
          }
          if (same.size() > 1) want += ExpectedRows(same, hkv);
        }
        CHECK(want > 0);
        REQUIRE(rows == want);
      }
    }
}

TEST_CASE("cascade decode over the same rows of a contiguous cache", "[cascade][batches]") {
  // Every batch entry's keys are one tensor's (batch stride 0), each entry reading its
  // own number of them: the entries share their common leading spans.
  const int64_t B = 5, hq = 4, hkv = 1, d = 32, t = 2600;
  const SharedCache c(B, hkv, t, d, 21);
  Tensor q(B, hq, 1, d);
  q.Fill(23);
  const std::vector<int64_t> lens = {2600, 1900, 2500, 700, 2049};
  for (int threads : {1, 2}) {
    Context ctx(threads);
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    opt.kv_lens = lens.data();
    Tensor o1(B, hq, 1, d), o2(B, hq, 1, d);
    REQUIRE(octattn_attention(ctx, &opt, q.ptr(), &c.k0, &c.v0, o1.ptr(), nullptr, nullptr, nullptr,
                              0) == OCTATTN_OK);
    // Entries 0, 1, 2 and 4 read span 0 whole (entry 3 is not decode-shaped), 0, 2
    // and 4 span 1.
    REQUIRE(SharedRows(ctx) == (4 - 1) * kSpan + (3 - 1) * kSpan);
    Attend(ctx, opt, q, c.kb, c.vb, o2);
    REQUIRE(SharedRows(ctx) == 0);
    REQUIRE(BytesEqual(o1, o2));
  }
}

TEST_CASE("cascade decode: what is not shared", "[cascade][batches]") {
  // ALiBi (whose scores depend on the row's position) and prefill-shaped sequences share
  // nothing.
  const int64_t B = 3, hq = 2, hkv = 1, d = 16, t = 2100;
  const SharedCache c(B, hkv, t, d, 31);
  Context ctx(2);
  const std::vector<int64_t> lens = {2100, 2100, 2090};
  SECTION("ALiBi slopes") {
    Tensor q(B, hq, 1, d), o(B, hq, 1, d);
    q.Fill(33);
    const float slopes[] = {0.5f, 0.25f};
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    opt.kv_lens = lens.data();
    opt.alibi_slopes = slopes;
    REQUIRE(octattn_attention(ctx, &opt, q.ptr(), &c.k0, &c.v0, o.ptr(), nullptr, nullptr, nullptr,
                              0) == OCTATTN_OK);
    REQUIRE(SharedRows(ctx) == 0);
  }
  SECTION("prefill-shaped sequences") {
    Tensor q(B, hq, 40, d), o(B, hq, 40, d);
    q.Fill(34);
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    opt.kv_lens = lens.data();
    REQUIRE(octattn_attention(ctx, &opt, q.ptr(), &c.k0, &c.v0, o.ptr(), nullptr, nullptr, nullptr,
                              0) == OCTATTN_OK);
    REQUIRE(SharedRows(ctx) == 0);
  }
}

TEST_CASE("cascade decode: a dense batch over one cache", "[cascade][batches]") {
  // Samples of one prompt (k and v with batch stride 0): every entry shares every span it
  // reads whole; 19 entries run in chunks of 16 and 3.
  const int64_t B = 19, hq = 8, hkv = 2, d = 48, t = 3000;
  const SharedCache c(B, hkv, t, d, 41);
  Tensor q(B, hq, 1, d);
  q.Fill(43);
  for (int threads : {1, 2}) {
    Context ctx(threads);
    octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    Tensor o1(B, hq, 1, d), o2(B, hq, 1, d), l1(B, hq, 1, 1), l2(B, hq, 1, 1);
    REQUIRE(octattn_attention(ctx, &opt, q.ptr(), &c.k0, &c.v0, o1.ptr(), l1.ptr(), nullptr,
                              nullptr, 0) == OCTATTN_OK);
    REQUIRE(SharedRows(ctx) == 2 * (B - 2) * kSpan * hkv);  // 2 spans, 2 chunks
    Attend(ctx, opt, q, c.kb, c.vb, o2, &l2);
    REQUIRE(SharedRows(ctx) == 0);
    REQUIRE(BytesEqual(o1, o2));
    REQUIRE(BytesEqual(l1, l2));
  }
}

}  // namespace
}  // namespace octtest
