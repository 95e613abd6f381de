// Differential: naive, fused and AUTO against the fp64 reference within the documented
// tolerance, lse and weights too when requested, with any score modifiers the input
// draws; the same bytes for 1 and 2 threads, for another layout of the same numbers,
// for one batch computed alone, and for a second run. Then the same problem as a padded
// batch (per-batch kv_starts, kv_lens and q_starts the input draws): against the
// reference with the same arrays, and the same bytes for 1 and 2 threads; batch entry 0
// as a ragged batch and from a paged cache: the same bytes, within the bound. All in the
// dtypes the input draws for q, k and v; with 16-bit ones, also the bytes of the f32
// call on the same (widened) values.
#include <algorithm>
#include <limits>
#include <vector>

#include "fuzz_support.h"

using namespace fuzz;

namespace {

// S, the largest |scaled score|, and C, the largest scale * sum_d |q_d k_d|, of the
// problem: the accuracy bound's two terms (tests/README.md).
FUZZ_PLUMBING void ScoreRange(const Problem& p, const Tensors& t, double* s_max, double* c_max) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  const int64_t group = p.q_heads / p.kv_heads;
  *s_max = *c_max = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        for (int64_t j = 0; j < p.kv_len; ++j) {
          double s = 0, c = 0;
          for (int64_t d = 0; d < p.head_dim; ++d) {
            const double x = double(t.q.at(b, h, i, d)) * t.k.at(b, h / group, j, d);
            s += x;
            c += std::fabs(x);
          }
          *s_max = std::max(*s_max, std::fabs(s * scale));
          *c_max = std::max(*c_max, c * scale);
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Problem p = Problem::Read(in, 40);
  p.ReadTypes(in, false);  // o in f32: the bound below is the f32 one
  if (p.opt.algorithm == OCTATTN_ALGORITHM_REFERENCE) p.opt.algorithm = OCTATTN_ALGORITHM_AUTO;
  const int other_layout = static_cast<int>(in.Range(0, 3));
  Tensors t(p, p.layout);
  FillInputs(in, t);
  std::vector<uint8_t> tree;
  p.ReadTree(in, &tree);
  BlockMask block_mask;  // one list for every batch entry: the shard below reads the same
  p.ReadBlocks(in, &block_mask);
  KeyLists lists;  // the same
  p.ReadLists(in, &lists);
  // (Key lists' entries are the call's keys: the padded, ragged and key-score calls
  // below, whose sequences hold fewer, or which take no lists, are left out.)
  const bool listed = p.opt.key_indices != nullptr;

  Context one(p, 1), two(p, 2);
  FUZZ_CHECK(Attend(one, p.opt, t) == OCTATTN_OK);
  const bool dot_bf16 = RanDotBf16(one, p);
  Tensors again = t, threads = t, ref = t;
  FUZZ_CHECK(Attend(one, p.opt, again) == OCTATTN_OK);
  auto same_outputs = [&](const Tensors& x) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_len; ++i)
          if (!OutputRowsEqual(x, t, b, h, i)) return false;
    return true;
  };
  FUZZ_CHECK(same_outputs(again));  // determinism
  FUZZ_CHECK(Attend(two, p.opt, threads) == OCTATTN_OK);
  FUZZ_CHECK(same_outputs(threads));  // thread invariance

  Tensors laid(p, other_layout);
  laid.CopyFrom(t);
  FUZZ_CHECK(Attend(one, p.opt, laid) == OCTATTN_OK);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        FUZZ_CHECK(OutputRowsEqual(laid, t, b, h, i));  // layout

  if (p.batch == 2) {  // batch 1 alone, as views of the same buffers
    Tensors shard = t;
    // The weights too when the call asked for them: AUTO runs naive then, fused without.
    octattn_tensor q = shard.q.t, k = shard.k.t, v = shard.v.t, o = shard.o.t, w = shard.w.t;
    for (octattn_tensor* x : {&q, &k, &v, &o, &w}) {
      x->data = static_cast<float*>(x->data) + x->stride[0];
      x->shape[0] = 1;
    }
    octattn_attention_options opt = p.opt;
    octattn_tensor bias{}, mask{};
    if (opt.bias && opt.bias->shape[0] == 2) {
      bias = *opt.bias;
      bias.data = static_cast<float*>(bias.data) + bias.stride[0];
      bias.shape[0] = 1;
      opt.bias = &bias;
    }
    if (opt.mask && opt.mask->shape[0] == 2) {
      mask = *opt.mask;
      mask.data = static_cast<uint8_t*>(mask.data) + mask.stride[0];
      mask.shape[0] = 1;
      opt.mask = &mask;
    }
    if (opt.tree) opt.tree += opt.tree_stride;
    FUZZ_CHECK(Run(p.types, one, &opt, &q, &k, &v, &o, nullptr, shard.has_w ? &w : nullptr) ==
               OCTATTN_OK);
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i) FUZZ_CHECK(shard.o.RowEquals(t.o, 1, h, i));
  }

  octattn_attention_options ref_opt = p.opt;
  ref_opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  FUZZ_CHECK(Attend(one, ref_opt, ref) == OCTATTN_OK);
  float max_v = 0;
  for (float x : t.v.buf) max_v = std::max(max_v, std::fabs(x));
  double s_max, c_max;
  ScoreRange(p, t, &s_max, &c_max);
  s_max = std::max(1.0, p.ModifiedScoreBound(s_max));
  // avx512_bf16 or amx_bf16 with bf16 q, k (and v): the header's term for weights
  // rounded to bf16. Each call's own (RanDotBf16 after it): AUTO may run the padded and
  // ragged calls below with another algorithm than the first.
  auto bound_of = [&](bool dot) {
    return max_v * (5e-7 * s_max + 1e-8 * c_max + (dot ? 0x1p-8 : 0.0));
  };
  const double bound = bound_of(dot_bf16);
  // lse and weights within the tests' bounds (tests/README.md).
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i) {
        if (p.lse) {
          const float x = t.lse.at(b, h, i, 0), y = ref.lse.at(b, h, i, 0);
          FUZZ_CHECK(x == y || std::fabs(double(x) - y) <= 4e-6 * s_max);
        }
        if (p.weights)
          for (int64_t j = 0; j < p.kv_len; ++j)
            FUZZ_CHECK(std::fabs(double(t.w.at(b, h, i, j)) - ref.w.at(b, h, i, j)) <=
                       2e-6 * s_max);
      }
  auto within_bound = [&](const Tensors& x, const Tensors& r, double limit) {
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_len; ++i)
          for (int64_t d = 0; d < p.value_dim; ++d) {
            const double diff = std::fabs(double(x.o.at(b, h, i, d)) - r.o.at(b, h, i, d));
            if (!(diff <= limit)) {
              std::fprintf(stderr, "row %lld dim %lld: %.9g vs reference %.9g (bound %.3g)\n",
                           (long long)i, (long long)d, x.o.at(b, h, i, d), r.o.at(b, h, i, d),
                           limit);
              FUZZ_CHECK(diff <= limit);
            }
          }
  };
  within_bound(t, ref, bound);

  if (listed) return 0;
  // A padded batch: each batch entry a sequence with its own valid keys and positions.
  std::vector<int64_t> starts, lens, q_starts;
  for (int64_t b = 0; b < p.batch; ++b) {
    starts.push_back(in.Range(0, p.kv_len));
    lens.push_back(in.Range(0, p.kv_len - starts.back()));
    q_starts.push_back(in.Bool() ? OCTATTN_Q_START_DEFAULT : in.Range(-4, p.kv_len + 4));
  }
  octattn_attention_options padded = p.opt;
  padded.kv_starts = starts.data();
  padded.kv_lens = lens.data();
  if (in.Bool()) padded.q_starts = q_starts.data();
  Tensors seq1 = t, seq2 = t, seq_ref = t;
  FUZZ_CHECK(Attend(one, padded, seq1) == OCTATTN_OK);
  const double padded_bound = bound_of(RanDotBf16(one, p));
  FUZZ_CHECK(Attend(two, padded, seq2) == OCTATTN_OK);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i) FUZZ_CHECK(OutputRowsEqual(seq1, seq2, b, h, i));
  padded.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  FUZZ_CHECK(Attend(one, padded, seq_ref) == OCTATTN_OK);
  within_bound(seq1, seq_ref, padded_bound);

  // Batch entry 0's rows as a ragged batch of up to four sequences, and the same keys in
  // a paged cache of a drawn block size (ids reversed, NaN in every unowned pool row;
  // no modifier tensors, ALiBi or block mask): paged gives the ragged call's bytes, both within the
  // bound of the reference.
  if (p.opt.algorithm != OCTATTN_ALGORITHM_NAIVE) {  // naive takes no paged cache
    const int64_t n = in.Range(1, 4), bs = in.Range(1, 20);
    std::vector<int64_t> cu_q{0}, cu_k{0};
    for (int64_t s = 1; s < n; ++s) {
      cu_q.push_back(in.Range(cu_q.back(), p.q_len));
      cu_k.push_back(in.Range(cu_k.back(), p.kv_len));
    }
    cu_q.push_back(p.q_len);
    cu_k.push_back(p.kv_len);
    octattn_attention_options rag = p.opt;
    rag.bias = rag.mask = nullptr;
    rag.alibi_slopes = nullptr;
    // (A block mask counts key blocks of the call's rows: the paged call's logical rows,
    // whole blocks, differ.)
    rag.block_counts = rag.block_indices = rag.full_block_counts = rag.full_block_indices = nullptr;
    rag.block_q = rag.block_kv = 0;
    rag.sequences = n;
    rag.cu_seqlens_q = cu_q.data();
    rag.cu_seqlens_k = cu_k.data();
    octattn_tensor q0 = t.q.t, k0 = t.k.t, v0 = t.v.t;
    q0.shape[0] = k0.shape[0] = v0.shape[0] = 1;
    Tensor ro(1, p.q_heads, p.q_len, p.value_dim, 0), po = ro, rr = ro;
    FUZZ_CHECK(Run(p.types, two, &rag, &q0, &k0, &v0, &ro.t, nullptr, nullptr) == OCTATTN_OK);
    const double ragged_bound = bound_of(RanDotBf16(two, p));
    int64_t cols = 1;
    for (int64_t s = 0; s < n; ++s) cols = std::max(cols, (cu_k[s + 1] - cu_k[s] + bs - 1) / bs);
    const int64_t blocks = n * cols;
    Tensor kp(blocks, p.kv_heads, bs, p.head_dim, kBTHD),
        vp(blocks, p.kv_heads, bs, p.value_dim, kBTHD);
    for (float& x : kp.buf) x = std::numeric_limits<float>::quiet_NaN();
    for (float& x : vp.buf) x = std::numeric_limits<float>::quiet_NaN();
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::vector<int64_t> ctx_lens;
    for (int64_t s = 0; s < n; ++s) {
      ctx_lens.push_back(cu_k[s + 1] - cu_k[s]);
      for (int64_t c = 0; c < cols; ++c)
        table[static_cast<size_t>(s * cols + c)] =
            static_cast<int32_t>(blocks - 1 - (s * cols + c));
      for (int64_t r = 0; r < ctx_lens.back(); ++r)
        for (int64_t h = 0; h < p.kv_heads; ++h) {
          const int64_t blk = table[static_cast<size_t>(s * cols + r / bs)];
          for (int64_t d = 0; d < p.head_dim; ++d)
            kp.at(blk, h, r % bs, d) = t.k.at(0, h, cu_k[s] + r, d);
          for (int64_t d = 0; d < p.value_dim; ++d)
            vp.at(blk, h, r % bs, d) = t.v.at(0, h, cu_k[s] + r, d);
        }
    }
    octattn_attention_options pag = rag;
    pag.cu_seqlens_k = nullptr;
    pag.block_table = table.data();
    pag.block_table_cols = cols;
    pag.kv_lens = ctx_lens.data();
    FUZZ_CHECK(Run(p.types, one, &pag, &q0, &kp.t, &vp.t, &po.t, nullptr, nullptr) == OCTATTN_OK);
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i) FUZZ_CHECK(po.RowEquals(ro, 0, h, i));
    rag.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    FUZZ_CHECK(Run(p.types, one, &rag, &q0, &k0, &v0, &rr.t, nullptr, nullptr) == OCTATTN_OK);
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        for (int64_t d = 0; d < p.value_dim; ++d)
          FUZZ_CHECK(std::fabs(double(ro.at(0, h, i, d)) - rr.at(0, h, i, d)) <= ragged_bound);
  }

  // Key scores, when the input asks: the same bytes on 1 and 2 threads, o's bytes
  // unchanged, and within (1e-5 + 4e-6 S + 4e-8 C) of the reference's sums of its weights where
  // those are numbers.
  if (in.Bool()) {
    Tensor ks1(p.batch, p.kv_heads, p.kv_len, 1), ks2 = ks1, ksr = ks1;
    Tensors k1 = t, k2 = t, kr = t;
    octattn_attention_options ko = p.opt;
    ko.key_scores = &ks1.t;
    FUZZ_CHECK(Attend(one, ko, k1) == OCTATTN_OK);
    FUZZ_CHECK(same_outputs(k1));
    ko.key_scores = &ks2.t;
    FUZZ_CHECK(Attend(two, ko, k2) == OCTATTN_OK);
    FUZZ_CHECK(BytesEqual(ks1, ks2));
    ko.key_scores = &ksr.t;
    ko.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    FUZZ_CHECK(Attend(one, ko, kr) == OCTATTN_OK);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t g = 0; g < p.kv_heads; ++g)
        for (int64_t j = 0; j < p.kv_len; ++j) {
          const double r = ksr.at(b, g, j, 0), x = ks1.at(b, g, j, 0);
          if (!std::isfinite(r)) continue;
          FUZZ_CHECK(std::fabs(x - r) <=
                     (1e-5 + 4e-6 * s_max + 4e-8 * c_max) * r + double(p.q_len) * 0x1p-31 + 1e-6);
        }
  }

  // 16-bit dtypes: the f32 call on the same values gives the same bytes (but for
  // vdpbf16ps, its own), and an o in q's dtype is that call's o rounded.
  if (p.types.F32()) return 0;
  Tensors t32 = t;
  if (!dot_bf16) {
    t32.types = Dtypes{};
    FUZZ_CHECK(Attend(two, p.opt, t32) == OCTATTN_OK);
    FUZZ_CHECK(BytesEqual(t.o, t32.o));
    if (p.lse) FUZZ_CHECK(BytesEqual(t.lse, t32.lse));
    if (p.weights) FUZZ_CHECK(BytesEqual(t.w, t32.w));
  }
  if (p.types.q == OCTATTN_DTYPE_F32) return 0;
  Tensors t16 = t;
  t16.types.o = p.types.q;
  FUZZ_CHECK(Attend(two, p.opt, t16) == OCTATTN_OK);
  Quantize(t32.o, p.types.q);
  FUZZ_CHECK(BytesEqual(t16.o, t32.o));
  return 0;
}
