// `octattn demo`: the write-up's walkthrough through the public API, step by step,
// then the causality check. Uses only octattn.h.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "octattn.h"
#include "tool.h"

namespace {

constexpr int64_t kT = 8, kC = 16, kHeads = 2, kDim = kC / kHeads;

struct Buffer {
  std::vector<float> data;
  octattn_tensor t{};
  Buffer(int64_t a, int64_t b, int64_t c, int64_t d) : data(static_cast<size_t>(a * b * c * d)) {
    const int64_t shape[4] = {a, b, c, d};
    octattn_tensor_init(&t, data.data(), shape, OCTATTN_LAYOUT_BHTD);
  }
  float at(int64_t h, int64_t i, int64_t j) const {
    return data[(h * t.shape[2] + i) * t.shape[3] + j];
  }
};

void PrintMatrix(const char* title, const Buffer& m, int64_t head, bool mask_view) {
  std::printf("  %s\n        ", title);
  for (int64_t j = 0; j < m.t.shape[3]; ++j)
    std::printf(mask_view ? "  t%-2lld" : "     t%-2lld", (long long)j);
  std::printf("\n");
  for (int64_t i = 0; i < m.t.shape[2]; ++i) {
    std::printf("    t%lld  ", (long long)i);
    for (int64_t j = 0; j < m.t.shape[3]; ++j) {
      const float x = m.at(head, i, j);
      if (mask_view)
        std::printf("  %-3s", std::isinf(x) && x < 0 ? " . " : " 1 ");
      else if (std::isinf(x) && x < 0)
        std::printf("     -inf");
      else
        std::printf(" %8.4f", x);
    }
    std::printf("\n");
  }
}

octattn_status Check(octattn_context* ctx, octattn_status st, const char* what) {
  if (st != OCTATTN_OK)
    std::fprintf(stderr, "%s failed: %s: %s\n", what, octattn_status_string(st),
                 octattn_context_last_error(ctx));
  return st;
}
#define TRY(call) \
  if (Check(ctx, (call), #call) != OCTATTN_OK) return 1

// Runs the composed call on packed [1, T, 3C] input; out is [1, T, C] merged.
int Attend(octattn_context* ctx, Buffer& packed, int causal, Buffer& merged) {
  Buffer q(1, kHeads, kT, kDim), k(1, kHeads, kT, kDim), v(1, kHeads, kT, kDim),
      o(1, kHeads, kT, kDim);
  TRY(octattn_split_qkv(ctx, &packed.t, kHeads, kHeads, &q.t, &k.t, &v.t));
  octattn_attention_options opt;
  octattn_attention_options_init(&opt);
  opt.causal = causal;
  TRY(octattn_attention(ctx, &opt, &q.t, &k.t, &v.t, &o.t, nullptr, nullptr, nullptr, 0));
  TRY(octattn_merge_heads(ctx, &o.t, &merged.t));
  return 0;
}

}  // namespace

int RunDemo(int, char**) {
  octattn_context* ctx = nullptr;
  if (octattn_context_create(&ctx) != OCTATTN_OK) return 1;
  std::printf(
      "Causal self-attention, step by step: B=1, T=%lld, C=%lld, %lld heads of width %lld.\n",
      (long long)kT, (long long)kC, (long long)kHeads, (long long)kDim);
  std::printf(
      "The inputs are a seeded packed projection [1, T, 3C] (q heads, k heads, v heads).\n\n");

  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffer packed(1, kT, 3 * kC, 1);
  for (float& x : packed.data) x = normal(rng);

  Buffer q(1, kHeads, kT, kDim), k(1, kHeads, kT, kDim), v(1, kHeads, kT, kDim);
  TRY(octattn_split_qkv(ctx, &packed.t, kHeads, kHeads, &q.t, &k.t, &v.t));
  std::printf(
      "1. split the projection into heads: q, k, v are [1, %lld, %lld, %lld] (octattn_split_qkv)\n",
      (long long)kHeads, (long long)kT, (long long)kDim);

  Buffer scores(1, kHeads, kT, kT), lse(1, kHeads, kT, 1), o(1, kHeads, kT, kDim);
  TRY(octattn_scores(ctx, &q.t, &k.t, &scores.t));
  Buffer raw = scores;
  raw.t.data = raw.data.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  TRY(octattn_scale(ctx, &scores.t, scale));
  Buffer scaled = scores;
  scaled.t.data = scaled.data.data();
  octattn_attention_options opt;
  octattn_attention_options_init(&opt);
  TRY(octattn_mask(ctx, &opt, &scores.t));
  Buffer masked = scores;
  masked.t.data = masked.data.data();
  TRY(octattn_softmax(ctx, &scores.t, &lse.t));
  TRY(octattn_weighted_sum(ctx, &scores.t, &v.t, &o.t));

  for (int64_t h = 0; h < kHeads; ++h) {
    std::printf("\n== head %lld ==\n", (long long)h);
    PrintMatrix("2. scores = q k^T (octattn_scores)", raw, h, false);
    std::printf("\n");
    PrintMatrix("3. scaled by 1/sqrt(8) = 0.3536 (octattn_scale)", scaled, h, false);
    std::printf("\n");
    PrintMatrix("4. mask: 1 = may read, . = masked (octattn_mask)", masked, h, true);
    std::printf("\n");
    PrintMatrix("5. masked scores (octattn_mask)", masked, h, false);
    std::printf("\n");
    PrintMatrix("6. weights = softmax by row (octattn_softmax)", scores, h, false);
    std::printf("     every row sums to 1:");
    for (int64_t i = 0; i < kT; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < kT; ++j) sum += scores.at(h, i, j);
      std::printf(" %.6f", sum);
    }
    std::printf("\n\n");
    PrintMatrix("7. output = weights v (octattn_weighted_sum)", o, h, false);
  }

  // The composed call gives the same output.
  Buffer o2(1, kHeads, kT, kDim);
  TRY(octattn_attention(ctx, &opt, &q.t, &k.t, &v.t, &o2.t, nullptr, nullptr, nullptr, 0));
  double diff = 0;
  for (size_t i = 0; i < o.data.size(); ++i)
    diff = std::fmax(diff, std::fabs(o.data[i] - o2.data[i]));
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  octattn_context_last_run(ctx, &info);
  std::printf(
      "\n8. octattn_attention in one call (%s, %s/%s): max |difference| from the steps = %.3g\n",
      octattn_algorithm_name(info.algorithm), octattn_backend_name(info.backend),
      octattn_target_name(info.target), diff);

  // Causality: edit the last token's q, k and v; compare every row before and after.
  std::printf("\n9. causality: change the last token (t7) and compare every output row\n");
  for (int causal = 1; causal >= 0; --causal) {
    Buffer before(1, kT, kC, 1), after(1, kT, kC, 1);
    if (Attend(ctx, packed, causal, before)) return 1;
    Buffer edited = packed;
    edited.t.data = edited.data.data();
    for (int64_t c = 0; c < 3 * kC; ++c) edited.data[(kT - 1) * 3 * kC + c] = normal(rng) * 3.0f;
    if (Attend(ctx, edited, causal, after)) return 1;
    std::printf("   %s:\n", causal ? "with the causal mask" : "without a mask (full attention)");
    int changed_before_last = 0;
    for (int64_t i = 0; i < kT; ++i) {
      double d = 0;
      bool bytes_equal =
          std::memcmp(&before.data[i * kC], &after.data[i * kC], kC * sizeof(float)) == 0;
      for (int64_t c = 0; c < kC; ++c)
        d = std::fmax(d, std::fabs(before.data[i * kC + c] - after.data[i * kC + c]));
      if (i < kT - 1 && !bytes_equal) ++changed_before_last;
      std::printf("     row t%lld: max |change| = %-10.6g %s\n", (long long)i, d,
                  bytes_equal ? "(byte-identical)" : "");
    }
    if (causal)
      std::printf("   => %s\n",
                  changed_before_last == 0
                      ? "every row before t7 changed by exactly 0: no position reads the future."
                      : "ROWS BEFORE t7 CHANGED: causality is broken.");
    else
      std::printf("   => %d of 7 earlier rows changed: without the mask, t0 reads t7.\n",
                  changed_before_last);
    if (causal && changed_before_last != 0) return 1;
  }
  octattn_context_destroy(ctx);
  return 0;
}
