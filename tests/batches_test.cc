// Padded and ragged batches (options.kv_starts, kv_lens, q_starts; sequences with
// cu_seqlens_q and cu_seqlens_k): each sequence's bytes equal those of a call of its own
// on the views of its rows, hostile values in padding and in other sequences never reach
// it, and every bad array gets a status and a message with nothing written.
#include <algorithm>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "support.h"

using namespace octtest;

namespace {

// One sequence of a random batch: its query rows, its key rows (padded: the batch's
// kv_len; ragged: its segment), the valid range inside them and its q_start.
struct Seq {
  int64_t q_len, rows, kv_start, kv_len;
  int64_t q_start;  // OCTATTN_Q_START_DEFAULT: bottom-right
};

struct Mods {
  int64_t window = 0, stride = 0, chunk = 0;
  int32_t causal = 1;
  float softcap = 0;
  bool alibi = false, sinks = false, bias = false, mask = false;
};

// A batch of sequences and its tensors: padded ([B, H, T, D], BHTD) or ragged ([1, H,
// total, D] in the BTHD layout: [total, H, D] in memory, as frameworks pack them).
struct Batch {
  bool ragged;
  std::vector<Seq> seqs;
  int64_t hq, hkv, d, dv;
  Mods mods;
  std::vector<int64_t> q_rows, k_rows, cu_q, cu_k, kv_starts, kv_lens, q_starts;
  Tensor q, k, v;
  std::vector<float> slopes, sinks;
  Tensor bias;
  std::unique_ptr<BoolTensor> mask;
  int64_t tq = 0, tk = 0;

  Batch(bool ragged_, std::vector<Seq> seqs_, int64_t hq_, int64_t hkv_, int64_t d_, int64_t dv_,
        Mods m, uint32_t seed)
      : ragged(ragged_), seqs(std::move(seqs_)), hq(hq_), hkv(hkv_), d(d_), dv(dv_), mods(m) {
    const int64_t n = static_cast<int64_t>(seqs.size());
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (const Seq& s : seqs) {
      q_rows.push_back(ragged ? cu_q.back() : 0);
      k_rows.push_back(ragged ? cu_k.back() : 0);
      cu_q.push_back(cu_q.back() + s.q_len);
      cu_k.push_back(cu_k.back() + s.rows);
      kv_starts.push_back(s.kv_start);
      kv_lens.push_back(s.kv_len);
      q_starts.push_back(s.q_start);
    }
    tq = ragged ? cu_q.back() : seqs[0].q_len;
    tk = ragged ? cu_k.back() : seqs[0].rows;
    const int64_t b = ragged ? 1 : n;
    const Layout layout = ragged ? Layout::kBTHD : Layout::kBHTD;
    q = Tensor(b, hq, tq, d, layout);
    k = Tensor(b, hkv, tk, d, layout);
    v = Tensor(b, hkv, tk, dv, layout);
    q.Fill(seed, -2, 2);
    k.Fill(seed + 1, -2, 2);
    v.Fill(seed + 2);
    std::mt19937 rng(seed + 3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t h = 0; h < hq; ++h) {
      slopes.push_back(0.25f * u(rng));
      sinks.push_back(h % 3 == 2 ? -INFINITY : u(rng));
    }
    if (mods.bias) {  // per batch and row, broadcast over heads
      bias = Tensor(b, 1, tq, tk);
      bias.Fill(seed + 4, -1, 1);
      bias.ForEach([&](int64_t a, int64_t c, int64_t i, int64_t j) {
        if ((i * 7 + j * 3 + a) % 11 == 0) bias.at(a, c, i, j) = -INFINITY;
      });
    }
    if (mods.mask) {
      const int64_t s[4] = {b, hq, tq, tk};
      mask = std::make_unique<BoolTensor>(s);
      for (uint8_t& x : mask->buf) x = (rng() % 5) != 0;
    }
  }

  int64_t Batches() const { return ragged ? 1 : static_cast<int64_t>(seqs.size()); }
  int64_t BatchOf(size_t s) const { return ragged ? 0 : static_cast<int64_t>(s); }
  Tensor Out() const { return Tensor(Batches(), hq, tq, dv); }
  Tensor Lse() const { return Tensor(Batches(), hq, tq, 1); }
  Tensor Weights() const { return Tensor(Batches(), hq, tq, tk); }

  // The options every call shares (scalars, per-head arrays).
  octattn_attention_options Common(octattn_algorithm algorithm) const {
    octattn_attention_options o = Options(mods.causal, mods.window, mods.stride, algorithm);
    o.chunk = mods.chunk;
    o.softcap = mods.softcap;
    if (mods.alibi) o.alibi_slopes = slopes.data();
    if (mods.sinks) o.sinks = sinks.data();
    return o;
  }
  // The batched call's options: `bias_t` and `mask_v` are the views to pass.
  octattn_attention_options Batched(octattn_algorithm algorithm, bool with_q_starts) const {
    octattn_attention_options o = Common(algorithm);
    o.kv_starts = kv_starts.data();
    o.kv_lens = kv_lens.data();
    if (with_q_starts) o.q_starts = q_starts.data();
    if (ragged) {
      o.sequences = static_cast<int64_t>(seqs.size());
      o.cu_seqlens_q = cu_q.data();
      o.cu_seqlens_k = cu_k.data();
    }
    return o;
  }
};

// A view of rows [row, row + rows) of batch entry b (dim 2), columns [col, col + cols)
// of dim 3 when `cols` > 0.
octattn_tensor View(const octattn_tensor& t, int64_t b, int64_t row, int64_t rows, int64_t col = 0,
                    int64_t cols = 0) {
  octattn_tensor v = t;
  const size_t elem = t.dtype == OCTATTN_DTYPE_BOOL ? 1 : 4;
  const int64_t at =
      (t.shape[0] == 1 ? 0 : b) * t.stride[0] + row * t.stride[2] + col * t.stride[3];
  v.data = static_cast<char*>(t.data) + at * static_cast<int64_t>(elem);
  v.shape[0] = 1;
  v.shape[2] = t.shape[2] == 1 ? 1 : rows;
  if (cols > 0) v.shape[3] = cols;
  return v;
}

// The views of the bias and mask tensors that sequence s's own call takes.
void OwnTensors(const Batch& bt, size_t s, octattn_attention_options* opt, octattn_tensor* bias,
                octattn_tensor* mask) {
  const Seq& sq = bt.seqs[s];
  const int64_t b = bt.BatchOf(s), q0 = bt.q_rows[s], k0 = bt.k_rows[s] + sq.kv_start;
  if (bt.mods.bias) {
    *bias = View(bt.bias.t, b, q0, sq.q_len, k0, sq.kv_len);
    opt->bias = bias;
  }
  if (bt.mods.mask) {
    *mask = View(bt.mask->t, b, q0, sq.q_len, k0, sq.kv_len);
    opt->mask = mask;
  }
}

bool FloatBytesEqual(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Runs the batch as one call and each sequence as a call of its own, and requires the
// same bytes in o, lse, key scores and (naive, reference) weights, zeros outside each
// sequence.
void CheckAgainstOwnCalls(const Batch& bt, octattn_algorithm algorithm, const Target* target,
                          int threads, bool with_q_starts) {
  Context ctx(threads), own(1);
  if (target) {
    ctx.Use(*target);
    own.Use(*target);
  }
  const bool weights = algorithm != OCTATTN_ALGORITHM_FUSED;
  Tensor o = bt.Out(), lse = bt.Lse(), w = bt.Weights(), ks(bt.Batches(), bt.hkv, bt.tk, 1);
  ks.Fill(5);  // every element is written
  octattn_attention_options opt = bt.Batched(algorithm, with_q_starts);
  if (bt.mods.bias) opt.bias = bt.bias.ptr();
  if (bt.mods.mask) opt.mask = &bt.mask->t;
  opt.key_scores = ks.ptr();
  std::vector<bool> owned(static_cast<size_t>(bt.Batches() * bt.tk), false);
  {
    const octattn_status st =
        octattn_attention(ctx, &opt, bt.q.ptr(), bt.k.ptr(), bt.v.ptr(), o.ptr(), lse.ptr(),
                          weights ? w.ptr() : nullptr, nullptr, 0);
    INFO(ctx.Error());
    REQUIRE(st == OCTATTN_OK);
  }
  for (size_t s = 0; s < bt.seqs.size(); ++s) {
    const Seq& sq = bt.seqs[s];
    if (sq.q_len == 0) continue;
    INFO("sequence " << s << ": q_len " << sq.q_len << ", keys " << sq.kv_start << " + "
                     << sq.kv_len << " of " << sq.rows);
    const int64_t b = bt.BatchOf(s), q0 = bt.q_rows[s], k0 = bt.k_rows[s] + sq.kv_start;
    if (sq.kv_len == 0) {  // only empty rows
      for (int64_t h = 0; h < bt.hq; ++h)
        for (int64_t i = q0; i < q0 + sq.q_len; ++i) {
          for (int64_t dd = 0; dd < bt.dv; ++dd) REQUIRE(FloatBytesEqual(o.at(b, h, i, dd), 0.0f));
          const float want = bt.mods.sinks ? bt.sinks[static_cast<size_t>(h)] : -INFINITY;
          REQUIRE(FloatBytesEqual(lse.at(b, h, i, 0), want));
          if (weights)
            for (int64_t j = 0; j < bt.tk; ++j) REQUIRE(FloatBytesEqual(w.at(b, h, i, j), 0.0f));
        }
      continue;
    }
    const octattn_tensor qv = View(bt.q.t, b, q0, sq.q_len);
    const octattn_tensor kv = View(bt.k.t, b, k0, sq.kv_len);
    const octattn_tensor vv = View(bt.v.t, b, k0, sq.kv_len);
    Tensor so(1, bt.hq, sq.q_len, bt.dv), slse(1, bt.hq, sq.q_len, 1),
        sw(1, bt.hq, sq.q_len, sq.kv_len), sks(1, bt.hkv, sq.kv_len, 1);
    octattn_attention_options sopt = bt.Common(algorithm);
    sopt.key_scores = sks.ptr();
    if (with_q_starts) sopt.q_start = sq.q_start;
    octattn_tensor bias_v, mask_v;
    OwnTensors(bt, s, &sopt, &bias_v, &mask_v);
    const octattn_status st = octattn_attention(own, &sopt, &qv, &kv, &vv, so.ptr(), slse.ptr(),
                                                weights ? sw.ptr() : nullptr, nullptr, 0);
    INFO(own.Error());
    REQUIRE(st == OCTATTN_OK);
    for (int64_t g = 0; g < bt.hkv; ++g)
      for (int64_t j = 0; j < sq.kv_len; ++j) {
        INFO("key scores: kv head " << g << " key " << j);
        REQUIRE(FloatBytesEqual(ks.at(b, g, k0 + j, 0), sks.at(0, g, j, 0)));
        owned[static_cast<size_t>(b * bt.tk + k0 + j)] = true;
      }
    for (int64_t h = 0; h < bt.hq; ++h)
      for (int64_t i = 0; i < sq.q_len; ++i) {
        INFO("head " << h << " row " << i);
        for (int64_t dd = 0; dd < bt.dv; ++dd)
          REQUIRE(FloatBytesEqual(o.at(b, h, q0 + i, dd), so.at(0, h, i, dd)));
        REQUIRE(FloatBytesEqual(lse.at(b, h, q0 + i, 0), slse.at(0, h, i, 0)));
        if (!weights) continue;
        for (int64_t j = 0; j < bt.tk; ++j) {
          const bool in = j >= k0 && j < k0 + sq.kv_len;
          REQUIRE(FloatBytesEqual(w.at(b, h, q0 + i, j), in ? sw.at(0, h, i, j - k0) : 0.0f));
        }
      }
  }
  // Keys no sequence with query rows reads: 0.
  for (int64_t b = 0; b < bt.Batches(); ++b)
    for (int64_t g = 0; g < bt.hkv; ++g)
      for (int64_t j = 0; j < bt.tk; ++j)
        if (!owned[static_cast<size_t>(b * bt.tk + j)])
          REQUIRE(FloatBytesEqual(ks.at(b, g, j, 0), 0.0f));
}

// A random batch: `n` sequences, some empty or without valid keys, of lengths up to
// `max_len`; decode-shaped ones (one query row, over 1024 keys) when `long_keys`.
Batch RandomBatch(std::mt19937& rng, bool ragged, int64_t n, int64_t max_len, bool long_keys,
                  const Mods& mods, int64_t hq, int64_t hkv) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Seq> seqs;
  const int64_t pad_q = long_keys ? pick(1, 3) : pick(1, max_len),
                pad_k = pick(1, max_len) + (long_keys ? 1100 : 0);
  for (int64_t s = 0; s < n; ++s) {
    Seq q{};
    q.rows = ragged ? pick(0, max_len) + (long_keys && s % 2 ? 1100 : 0) : pad_k;
    q.q_len = ragged ? pick(0, 3) == 0 ? 1 : pick(0, max_len) : pad_q;
    q.kv_start = pick(0, q.rows);
    q.kv_len = pick(0, 4) == 0 ? 0 : pick(0, q.rows - q.kv_start);
    if (pick(0, 3) == 0) q.kv_len = q.rows - q.kv_start;
    if (long_keys && q.rows > 1024 && s % 3 != 2) {  // decode-shaped: keys split into units
      q.kv_start = pick(0, 3);
      q.kv_len = q.rows - q.kv_start - pick(0, 3);
      if (ragged) q.q_len = pick(1, 3);
    }
    q.q_start = pick(0, 2) == 0 ? OCTATTN_Q_START_DEFAULT : pick(-3, q.kv_len + 3);
    seqs.push_back(q);
  }
  if (!ragged) {  // a padded batch has one q_len and one kv_len
    for (Seq& q : seqs) q.q_len = pad_q;
  }
  // Tensors have at least one row (sizes are >= 1): the last sequence takes one.
  int64_t total_q = 0, total_k = 0;
  for (const Seq& q : seqs) total_q += q.q_len, total_k += q.rows;
  if (total_q == 0) seqs.back().q_len = 1;
  if (total_k == 0) seqs.back().rows = 1;
  const int64_t d = pick(0, 1) ? 16 : 24;
  return Batch(ragged, seqs, hq, hkv, d, pick(0, 1) ? d : 8, mods, static_cast<uint32_t>(rng()));
}

Mods RandomMods(std::mt19937& rng) {
  Mods m;
  switch (rng() % 6) {
    case 0:
      break;
    case 1:
      m.window = 1 + rng() % 9;
      m.stride = rng() % 2 ? 0 : 2 + rng() % 4;
      break;
    case 2:
      m.chunk = 2 + rng() % 12;
      break;
    case 3:
      m.causal = 0;
      break;
    case 4:
      m.softcap = 5.0f;
      m.alibi = true;
      m.sinks = true;
      break;
    default:
      m.bias = true;
      m.mask = true;
      m.sinks = true;
      break;
  }
  return m;
}

// Random batches of one kind (padded or ragged), every algorithm, 1-3 threads.
void CheckRandomBatches(bool ragged, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 60; ++iter) {
    const bool q_starts = iter % 3 == 0;
    const octattn_algorithm algo = iter % 4 == 0   ? OCTATTN_ALGORITHM_NAIVE
                                   : iter % 4 == 1 ? OCTATTN_ALGORITHM_REFERENCE
                                                   : OCTATTN_ALGORITHM_FUSED;
    const Mods mods = RandomMods(rng);
    const int64_t hkv = 1 + rng() % 2, hq = hkv * (1 + rng() % (ragged ? 4 : 3));
    const Batch bt =
        RandomBatch(rng, ragged, 1 + rng() % (ragged ? 6 : 4), 40, iter % 5 == 4, mods, hq, hkv);
    INFO("iteration " << iter << " algorithm " << algo);
    CheckAgainstOwnCalls(bt, algo, nullptr, 1 + iter % 3, q_starts);
  }
}

}  // namespace

TEST_CASE("a padded batch gives each sequence the bytes of its own call", "[batches]") {
  CheckRandomBatches(false, 11);
}

TEST_CASE("a ragged batch gives each sequence the bytes of its own call", "[batches]") {
  CheckRandomBatches(true, 12);
}

TEST_CASE("batches on every target: own-call bytes, reference within the bound",
          "[batches][dispatch]") {
  std::mt19937 rng(13);
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    for (int iter = 0; iter < 4; ++iter) {
      const Mods mods = RandomMods(rng);
      const Batch bt =
          RandomBatch(rng, iter % 2 == 1, 3, Sized(33, 12), iter == 3 && !Emulated(), mods, 4, 2);
      for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED})
        CheckAgainstOwnCalls(bt, algo, &t, 2, iter % 2 == 0);
      // Fused against the reference, both batched.
      Context ctx(t, 2);
      Tensor o = bt.Out(), ref = bt.Out();
      octattn_attention_options opt = bt.Batched(OCTATTN_ALGORITHM_FUSED, true);
      if (bt.mods.bias) opt.bias = bt.bias.ptr();
      if (bt.mods.mask) opt.mask = &bt.mask->t;
      Attend(ctx, opt, bt.q, bt.k, bt.v, o);
      opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
      Attend(ctx, opt, bt.q, bt.k, bt.v, ref);
      const double bound = Bound(bt.q, bt.k, bt.v) + bt.v.MaxAbs() * kTolerance * 8;
      CHECK(MaxDiff(o, ref) <= bound);
    }
  }
}

TEST_CASE("padding and other sequences' rows never reach a sequence, whatever their bits",
          "[batches][invariants]") {
  std::mt19937 rng(14);
  const float hostile[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 3e38f};
  for (int iter = 0; iter < 24; ++iter) {
    const bool ragged = iter % 2 == 1;
    const Mods mods = RandomMods(rng);
    Batch bt = RandomBatch(rng, ragged, 2 + rng() % 3, 30, iter % 6 == 5, mods, 2, 1);
    Context ctx(2);
    octattn_attention_options opt = bt.Batched(OCTATTN_ALGORITHM_FUSED, true);
    if (bt.mods.bias) opt.bias = bt.bias.ptr();
    if (bt.mods.mask) opt.mask = &bt.mask->t;
    Tensor o = bt.Out();
    Attend(ctx, opt, bt.q, bt.k, bt.v, o);
    // Poison every key and value row outside every sequence's valid range, and all of
    // sequence 0's rows (q, k, v): the other sequences' outputs keep their bytes.
    const float bad = hostile[iter % 4];
    for (int64_t b = 0; b < bt.Batches(); ++b)
      for (int64_t h = 0; h < bt.hkv; ++h)
        for (int64_t j = 0; j < bt.tk; ++j) {
          bool valid = false;
          for (size_t s = 0; s < bt.seqs.size(); ++s) {
            const int64_t k0 = bt.k_rows[s] + bt.seqs[s].kv_start;
            valid |= bt.BatchOf(s) == b && s != 0 && j >= k0 && j < k0 + bt.seqs[s].kv_len;
          }
          if (valid) continue;
          for (int64_t dd = 0; dd < bt.d; ++dd) bt.k.at(b, h, j, dd) = bad;
          for (int64_t dd = 0; dd < bt.dv; ++dd) bt.v.at(b, h, j, dd) = bad;
        }
    for (int64_t h = 0; h < bt.hq; ++h)
      for (int64_t i = bt.q_rows[0]; i < bt.q_rows[0] + bt.seqs[0].q_len; ++i)
        for (int64_t dd = 0; dd < bt.d; ++dd) bt.q.at(0, h, i, dd) = bad;
    Tensor o2 = bt.Out();
    Attend(ctx, opt, bt.q, bt.k, bt.v, o2);
    for (size_t s = 1; s < bt.seqs.size(); ++s)
      for (int64_t h = 0; h < bt.hq; ++h)
        for (int64_t i = bt.q_rows[s]; i < bt.q_rows[s] + bt.seqs[s].q_len; ++i) {
          INFO("iteration " << iter << " sequence " << s << " head " << h << " row " << i);
          REQUIRE(RowBytesEqual(o, o2, bt.BatchOf(s), h, i));
        }
  }
}

TEST_CASE("a left-padded batch equals the dense call with a padding mask", "[batches]") {
  // Two prompts, lengths 5 and 9, left-padded to 9, as a tokenizer pads them: padded
  // queries have no key (zeros), the others see their own prompt's keys at positions
  // counted from its first token. The dense call spells the same with a bool mask and
  // q_start/k_start per sequence, so it runs one sequence at a time.
  const int64_t t = 9, lens[2] = {5, 9};
  Problem p(2, 2, 1, t, t, 16, 16, 21);
  const int64_t starts[2] = {t - lens[0], t - lens[1]}, kv_lens[2] = {lens[0], lens[1]};
  octattn_attention_options opt = Options();
  opt.kv_starts = starts;
  opt.kv_lens = kv_lens;
  Context ctx;
  Tensor o = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
  for (int64_t b = 0; b < 2; ++b) {
    // The same rows as one sequence: query i sits at position i - starts[b], key j too.
    const int64_t s4[4] = {1, 1, t, t};
    BoolTensor m(s4);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) m.at(0, 0, i, j) = j >= starts[b];
    octattn_attention_options dense = Options();
    dense.q_start = -starts[b];
    dense.k_start = -starts[b];
    dense.mask = &m.t;
    dense.algorithm = OCTATTN_ALGORITHM_REFERENCE;
    const octattn_tensor qv = View(p.q.t, b, 0, t), kv = View(p.k.t, b, 0, t),
                         vv = View(p.v.t, b, 0, t);
    Tensor ref(1, 2, t, 16);
    REQUIRE(octattn_attention(ctx, &dense, &qv, &kv, &vv, ref.ptr(), nullptr, nullptr, nullptr,
                              0) == OCTATTN_OK);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t dd = 0; dd < 16; ++dd) {
          INFO("batch " << b << " head " << h << " row " << i);
          if (i < starts[b]) {
            REQUIRE(FloatBytesEqual(o.at(b, h, i, dd), 0.0f));
            REQUIRE(FloatBytesEqual(ref.at(0, h, i, dd), 0.0f));
          } else {
            REQUIRE(std::fabs(o.at(b, h, i, dd) - ref.at(0, h, i, dd)) <= 1e-6);
          }
        }
  }
}

// The backward of a batch: each sequence's dq rows, its valid keys' dk and dv rows and
// its dbias block have the bytes of the backward of its own call; every other key row and
// dbias entry is 0; dsinks is the sum of the sequences' (within rounding).
void CheckBackwardAgainstOwnCalls(const Batch& bt, octattn_algorithm algorithm, int threads) {
  Context ctx(threads), own(1);
  octattn_attention_options opt = bt.Batched(algorithm, true);
  if (bt.mods.bias) opt.bias = bt.bias.ptr();
  if (bt.mods.mask) opt.mask = &bt.mask->t;
  Tensor o = bt.Out(), lse = bt.Lse(), dout = bt.Out(), dlse = bt.Lse();
  dout.Fill(91);
  dlse.Fill(92);
  Attend(ctx, opt, bt.q, bt.k, bt.v, o, &lse);
  Tensor dq = bt.q, dk = bt.k, dv = bt.v, dbias = bt.Weights();
  for (Tensor* t : {&dq, &dk, &dv, &dbias})
    for (float& x : t->buf) x = 9.0f;  // every element must be written
  std::vector<float> dsinks(static_cast<size_t>(bt.hq), 9.0f);
  {
    const octattn_status st = octattn_attention_backward(
        ctx, &opt, bt.q.ptr(), bt.k.ptr(), bt.v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), dlse.ptr(),
        dq.ptr(), dk.ptr(), dv.ptr(), bt.mods.sinks ? dsinks.data() : nullptr, dbias.ptr(), nullptr,
        0);
    INFO(ctx.Error());
    REQUIRE(st == OCTATTN_OK);
  }
  Tensor key_seen = bt.k;  // 1 where a sequence's own call wrote the row
  for (float& x : key_seen.buf) x = 0.0f;
  std::vector<double> sink_sum(static_cast<size_t>(bt.hq), 0.0);
  for (size_t s = 0; s < bt.seqs.size(); ++s) {
    const Seq& sq = bt.seqs[s];
    const int64_t b = bt.BatchOf(s), q0 = bt.q_rows[s], k0 = bt.k_rows[s] + sq.kv_start;
    INFO("sequence " << s << ": q_len " << sq.q_len << ", keys " << sq.kv_start << " + "
                     << sq.kv_len << " of " << sq.rows);
    for (int64_t h = 0; h < bt.hq; ++h)
      for (int64_t i = q0; i < q0 + sq.q_len; ++i) {
        if (sq.kv_len == 0) {
          for (int64_t d = 0; d < bt.d; ++d) REQUIRE(FloatBytesEqual(dq.at(b, h, i, d), 0.0f));
          if (bt.mods.sinks && bt.sinks[static_cast<size_t>(h)] != -INFINITY)
            sink_sum[static_cast<size_t>(h)] += dlse.at(b, h, i, 0);
        }
        for (int64_t j = 0; j < bt.tk; ++j)
          if (sq.kv_len == 0 || j < k0 || j >= k0 + sq.kv_len)
            REQUIRE(FloatBytesEqual(dbias.at(b, h, i, j), 0.0f));
      }
    if (sq.q_len == 0 || sq.kv_len == 0) continue;
    const octattn_tensor qv = View(bt.q.t, b, q0, sq.q_len), kv = View(bt.k.t, b, k0, sq.kv_len),
                         vv = View(bt.v.t, b, k0, sq.kv_len), ov = View(o.t, b, q0, sq.q_len),
                         lv = View(lse.t, b, q0, sq.q_len), dov = View(dout.t, b, q0, sq.q_len),
                         dlv = View(dlse.t, b, q0, sq.q_len);
    Tensor sdq(1, bt.hq, sq.q_len, bt.d), sdk(1, bt.hkv, sq.kv_len, bt.d),
        sdv(1, bt.hkv, sq.kv_len, bt.dv), sdb(1, bt.hq, sq.q_len, sq.kv_len);
    std::vector<float> sds(static_cast<size_t>(bt.hq));
    octattn_attention_options sopt = bt.Common(algorithm);
    sopt.q_start = sq.q_start;
    octattn_tensor bias_v, mask_v;
    OwnTensors(bt, s, &sopt, &bias_v, &mask_v);
    const octattn_status st = octattn_attention_backward(
        own, &sopt, &qv, &kv, &vv, &ov, &lv, &dov, &dlv, sdq.ptr(), sdk.ptr(), sdv.ptr(),
        bt.mods.sinks ? sds.data() : nullptr, sdb.ptr(), nullptr, 0);
    INFO(own.Error());
    REQUIRE(st == OCTATTN_OK);
    for (int64_t h = 0; h < bt.hq; ++h) {
      sink_sum[static_cast<size_t>(h)] += sds[static_cast<size_t>(h)];
      for (int64_t i = 0; i < sq.q_len; ++i) {
        for (int64_t d = 0; d < bt.d; ++d)
          REQUIRE(FloatBytesEqual(dq.at(b, h, q0 + i, d), sdq.at(0, h, i, d)));
        for (int64_t j = 0; j < sq.kv_len; ++j)
          REQUIRE(FloatBytesEqual(dbias.at(b, h, q0 + i, k0 + j), sdb.at(0, h, i, j)));
      }
    }
    for (int64_t h = 0; h < bt.hkv; ++h)
      for (int64_t j = 0; j < sq.kv_len; ++j) {
        if (sq.q_len > 0) key_seen.at(b, h, k0 + j, 0) = 1.0f;
        for (int64_t d = 0; d < bt.d; ++d)
          REQUIRE(FloatBytesEqual(dk.at(b, h, k0 + j, d), sdk.at(0, h, j, d)));
        for (int64_t d = 0; d < bt.dv; ++d)
          REQUIRE(FloatBytesEqual(dv.at(b, h, k0 + j, d), sdv.at(0, h, j, d)));
      }
  }
  for (int64_t b = 0; b < bt.Batches(); ++b)
    for (int64_t h = 0; h < bt.hkv; ++h)
      for (int64_t j = 0; j < bt.tk; ++j) {
        if (key_seen.at(b, h, j, 0) != 0.0f) continue;
        INFO("key row " << j << " of no sequence");
        for (int64_t d = 0; d < bt.d; ++d) REQUIRE(FloatBytesEqual(dk.at(b, h, j, d), 0.0f));
        for (int64_t d = 0; d < bt.dv; ++d) REQUIRE(FloatBytesEqual(dv.at(b, h, j, d), 0.0f));
      }
  if (bt.mods.sinks)
    for (int64_t h = 0; h < bt.hq; ++h)
      CHECK(std::fabs(dsinks[static_cast<size_t>(h)] - sink_sum[static_cast<size_t>(h)]) <=
            1e-5 * (1.0 + std::fabs(sink_sum[static_cast<size_t>(h)])));
}

TEST_CASE("the backward of a padded or ragged batch: each sequence's own gradients", "[batches]") {
  std::mt19937 rng(16);
  for (int iter = 0; iter < 40; ++iter) {
    const Mods mods = RandomMods(rng);
    const int64_t hkv = 1 + rng() % 2, hq = hkv * (1 + rng() % 3);
    const Batch bt = RandomBatch(rng, iter % 2 == 1, 1 + rng() % 4, 24, false, mods, hq, hkv);
    INFO("iteration " << iter);
    CheckBackwardAgainstOwnCalls(
        bt, iter % 4 == 3 ? OCTATTN_ALGORITHM_REFERENCE : OCTATTN_ALGORITHM_FUSED, 1 + iter % 3);
  }
}

// The keys and values of a batch moved into a paged cache: pools [blocks, H, block_size,
// D] in vLLM's memory order ([blocks, block_size, H, D]), each sequence's logical rows
// (padded: the entry's rows; ragged: its segment's, from 0) in blocks of shuffled ids,
// sequence 1's first block shared with sequence 0 (their first rows made equal first).
// Every pool row outside a valid range is NaN: a read would show.
struct Paged {
  int64_t bs, cols, num_blocks;
  std::vector<int32_t> table;
  Tensor k, v, bias;
  std::unique_ptr<BoolTensor> mask;
  Paged(Batch& bt, int64_t block_size, std::mt19937& rng) : bs(block_size) {
    const size_t n = bt.seqs.size();
    int64_t cap = 1;
    for (const Seq& sq : bt.seqs) cap = std::max(cap, sq.rows);
    cols = (cap + bs - 1) / bs;
    const bool share = n >= 2 && bt.seqs[0].rows >= bs && bt.seqs[1].rows >= bs;
    if (share)  // sequence 1's first block holds sequence 0's first rows
      for (int64_t h = 0; h < bt.hkv; ++h)
        for (int64_t r = 0; r < bs; ++r) {
          for (int64_t d = 0; d < bt.d; ++d)
            bt.k.at(bt.BatchOf(1), h, bt.k_rows[1] + r, d) =
                bt.k.at(bt.BatchOf(0), h, bt.k_rows[0] + r, d);
          for (int64_t d = 0; d < bt.dv; ++d)
            bt.v.at(bt.BatchOf(1), h, bt.k_rows[1] + r, d) =
                bt.v.at(bt.BatchOf(0), h, bt.k_rows[0] + r, d);
        }
    num_blocks = static_cast<int64_t>(n) * cols + 3;  // 3 never used
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(n * static_cast<size_t>(cols), 0);
    for (size_t i = 0; i < table.size(); ++i) table[i] = ids[i];
    if (share) table[static_cast<size_t>(cols)] = table[0];
    k = Tensor(num_blocks, bt.hkv, bs, bt.d, Layout::kBTHD);
    v = Tensor(num_blocks, bt.hkv, bs, bt.dv, Layout::kBTHD);
    for (float& x : k.buf) x = std::numeric_limits<float>::quiet_NaN();
    for (float& x : v.buf) x = std::numeric_limits<float>::quiet_NaN();
    for (size_t s = 0; s < n; ++s) {
      const Seq& sq = bt.seqs[s];
      for (int64_t r = sq.kv_start; r < sq.kv_start + sq.kv_len; ++r) {
        const int64_t blk = table[s * static_cast<size_t>(cols) + static_cast<size_t>(r / bs)];
        for (int64_t h = 0; h < bt.hkv; ++h) {
          for (int64_t d = 0; d < bt.d; ++d)
            k.at(blk, h, r % bs, d) = bt.k.at(bt.BatchOf(s), h, bt.k_rows[s] + r, d);
          for (int64_t d = 0; d < bt.dv; ++d)
            v.at(blk, h, r % bs, d) = bt.v.at(bt.BatchOf(s), h, bt.k_rows[s] + r, d);
        }
      }
    }
    // The modifier tensors in logical columns (cols * bs of them).
    const int64_t width = cols * bs;
    if (bt.mods.bias) {
      bias = Tensor(bt.Batches(), 1, bt.tq, width);
      for (size_t s = 0; s < n; ++s)
        for (int64_t i = bt.q_rows[s]; i < bt.q_rows[s] + bt.seqs[s].q_len; ++i)
          for (int64_t r = 0; r < bt.seqs[s].rows; ++r)
            bias.at(bt.BatchOf(s), 0, i, r) = bt.bias.at(bt.BatchOf(s), 0, i, bt.k_rows[s] + r);
    }
    if (bt.mods.mask) {
      const int64_t shape[4] = {bt.Batches(), bt.hq, bt.tq, width};
      mask = std::make_unique<BoolTensor>(shape);
      for (size_t s = 0; s < n; ++s)
        for (int64_t h = 0; h < bt.hq; ++h)
          for (int64_t i = bt.q_rows[s]; i < bt.q_rows[s] + bt.seqs[s].q_len; ++i)
            for (int64_t r = 0; r < bt.seqs[s].rows; ++r)
              mask->at(bt.BatchOf(s), h, i, r) = bt.mask->at(bt.BatchOf(s), h, i, bt.k_rows[s] + r);
    }
  }
  octattn_attention_options Options(const Batch& bt, octattn_algorithm algorithm) const {
    octattn_attention_options o = bt.Batched(algorithm, true);
    o.cu_seqlens_k = nullptr;
    o.block_table = table.data();
    o.block_table_cols = cols;
    if (bt.mods.bias) o.bias = bias.ptr();
    if (bt.mods.mask) o.mask = &mask->t;
    return o;
  }
};

TEST_CASE("a paged cache gives the bytes of contiguous keys, blocks read in place", "[batches]") {
  std::mt19937 rng(17);
  const int64_t sizes[] = {1, 3, 16, 256, 5};
  for (int iter = 0; iter < 40; ++iter) {
    const Mods mods = RandomMods(rng);
    const int64_t hkv = 1 + rng() % 2, hq = hkv * (1 + rng() % 3);
    Batch bt = RandomBatch(rng, iter % 2 == 1, 1 + rng() % 4, 40, iter % 5 == 4, mods, hq, hkv);
    const Paged pg(bt, sizes[iter % 5], rng);
    INFO("iteration " << iter << " block size " << pg.bs);
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_REFERENCE}) {
      Context ctx(1 + iter % 3);
      octattn_attention_options opt = bt.Batched(algo, true);
      if (bt.mods.bias) opt.bias = bt.bias.ptr();
      if (bt.mods.mask) opt.mask = &bt.mask->t;
      Tensor o = bt.Out(), lse = bt.Lse(), po = bt.Out(), plse = bt.Lse();
      Attend(ctx, opt, bt.q, bt.k, bt.v, o, &lse);
      const octattn_attention_options popt = pg.Options(bt, algo);
      const octattn_status st = octattn_attention(ctx, &popt, bt.q.ptr(), pg.k.ptr(), pg.v.ptr(),
                                                  po.ptr(), plse.ptr(), nullptr, nullptr, 0);
      INFO(ctx.Error());
      REQUIRE(st == OCTATTN_OK);
      REQUIRE(BytesEqual(o, po));
      REQUIRE(BytesEqual(lse, plse));
    }
  }
}

TEST_CASE("a paged cache on every target: the bytes of contiguous keys", "[batches][dispatch]") {
  std::mt19937 rng(19);
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    for (int iter = 0; iter < 3; ++iter) {
      Batch bt = RandomBatch(rng, iter == 1, 3, Sized(33, 12), iter == 2 && !Emulated(),
                             RandomMods(rng), 4, 2);
      const Paged pg(bt, iter == 0 ? 1 : 16, rng);
      Context ctx(t, 2);
      octattn_attention_options opt = bt.Batched(OCTATTN_ALGORITHM_FUSED, true);
      if (bt.mods.bias) opt.bias = bt.bias.ptr();
      if (bt.mods.mask) opt.mask = &bt.mask->t;
      Tensor o = bt.Out(), po = bt.Out();
      Attend(ctx, opt, bt.q, bt.k, bt.v, o);
      const octattn_attention_options popt = pg.Options(bt, OCTATTN_ALGORITHM_FUSED);
      REQUIRE(octattn_attention(ctx, &popt, bt.q.ptr(), pg.k.ptr(), pg.v.ptr(), po.ptr(), nullptr,
                                nullptr, nullptr, 0) == OCTATTN_OK);
      REQUIRE(BytesEqual(o, po));
    }
  }
}

TEST_CASE("paged calls refuse naive, the backward and bad block tables", "[batches][api]") {
  std::mt19937 rng(18);
  Batch bt = RandomBatch(rng, false, 2, 20, false, Mods{}, 2, 1);
  const Paged pg(bt, 4, rng);
  Context ctx;
  Tensor o = bt.Out(), lse = bt.Lse();
  for (float& x : o.buf) x = 7.0f;
  const std::vector<float> before = o.buf;
  auto call = [&](const octattn_attention_options& opt) {
    return octattn_attention(ctx, &opt, bt.q.ptr(), pg.k.ptr(), pg.v.ptr(), o.ptr(), nullptr,
                             nullptr, nullptr, 0);
  };
  CHECK(call(pg.Options(bt, OCTATTN_ALGORITHM_NAIVE)) == OCTATTN_ERROR_UNSUPPORTED);
  octattn_attention_options opt = pg.Options(bt, OCTATTN_ALGORITHM_FUSED);
  std::vector<int32_t> bad = pg.table;
  bad[1] = static_cast<int32_t>(pg.num_blocks);  // a block the sequence reads, out of range
  opt.block_table = bad.data();
  int64_t lens[2] = {pg.cols * pg.bs, pg.cols * pg.bs};
  opt.kv_starts = nullptr;
  opt.kv_lens = lens;
  CHECK(call(opt) == OCTATTN_ERROR_INVALID_OPTION);
  bad[1] = -1;
  CHECK(call(opt) == OCTATTN_ERROR_INVALID_OPTION);
  opt.block_table = pg.table.data();
  opt.block_table_cols = 0;
  CHECK(call(opt) == OCTATTN_ERROR_INVALID_OPTION);
  opt = pg.Options(bt, OCTATTN_ALGORITHM_FUSED);
  const int64_t cu[3] = {0, 1, 2};
  opt.cu_seqlens_k = cu;
  CHECK(call(opt) == OCTATTN_ERROR_INVALID_OPTION);
  opt = pg.Options(bt, OCTATTN_ALGORITHM_FUSED);
  opt.kv_lens = lens;
  lens[0] = pg.cols * pg.bs + 1;  // past the sequence's blocks
  CHECK(call(opt) == OCTATTN_ERROR_INVALID_OPTION);
  CHECK(o.buf == before);
  // The backward of a paged call.
  opt = pg.Options(bt, OCTATTN_ALGORITHM_FUSED);
  REQUIRE(octattn_attention(ctx, &opt, bt.q.ptr(), pg.k.ptr(), pg.v.ptr(), o.ptr(), lse.ptr(),
                            nullptr, nullptr, 0) == OCTATTN_OK);
  Tensor dq = bt.q, dk = pg.k, dv = pg.v, dout = bt.Out();
  CHECK(octattn_attention_backward(ctx, &opt, bt.q.ptr(), pg.k.ptr(), pg.v.ptr(), o.ptr(),
                                   lse.ptr(), dout.ptr(), nullptr, dq.ptr(), dk.ptr(), dv.ptr(),
                                   nullptr, nullptr, nullptr, 0) == OCTATTN_ERROR_UNSUPPORTED);
  CHECK(!ctx.Error().empty());
}

TEST_CASE("the batched call's workspace size is enough and exact", "[batches]") {
  std::mt19937 rng(15);
  const Batch bt = RandomBatch(rng, true, 5, 30, true, Mods{}, 4, 2);
  Context ctx(2);
  octattn_attention_options opt = bt.Batched(OCTATTN_ALGORITHM_FUSED, false);
  size_t bytes = 0;
  Tensor o = bt.Out(), o2 = bt.Out();
  REQUIRE(octattn_attention_workspace_size(ctx, &opt, bt.q.ptr(), bt.k.ptr(), bt.v.ptr(), o.ptr(),
                                           nullptr, nullptr, &bytes) == OCTATTN_OK);
  std::vector<char> ws(bytes);
  REQUIRE(octattn_attention(ctx, &opt, bt.q.ptr(), bt.k.ptr(), bt.v.ptr(), o.ptr(), nullptr,
                            nullptr, ws.data(), bytes) == OCTATTN_OK);
  Attend(ctx, opt, bt.q, bt.k, bt.v, o2);
  REQUIRE(BytesEqual(o, o2));
  REQUIRE(octattn_attention(ctx, &opt, bt.q.ptr(), bt.k.ptr(), bt.v.ptr(), o.ptr(), nullptr,
                            nullptr, ws.data(), bytes - 1) == OCTATTN_ERROR_WORKSPACE_TOO_SMALL);
}

TEST_CASE("every bad sequence array gets a status and a message, and nothing is written",
          "[batches][api]") {
  Problem p(2, 2, 1, 4, 6, 8, 8, 31);
  Context ctx;
  const int64_t good_starts[2] = {1, 0}, good_lens[2] = {5, 6};
  struct Case {
    const char* what;
    octattn_status want;
    std::vector<int64_t> kv_starts, kv_lens, q_starts;
    int64_t sequences;
    std::vector<int64_t> cu_q, cu_k;
    bool ragged_shape;
    int64_t k_start = 0;
  };
  const int64_t big = int64_t{1} << 62;
  const std::vector<Case> cases = {
      {"kv_starts negative", OCTATTN_ERROR_INVALID_OPTION, {-1, 0}, {}, {}, 0, {}, {}, false},
      {"kv_starts past the rows", OCTATTN_ERROR_INVALID_OPTION, {0, 7}, {}, {}, 0, {}, {}, false},
      {"kv_lens negative", OCTATTN_ERROR_INVALID_OPTION, {}, {-1, 1}, {}, 0, {}, {}, false},
      {"kv_lens past the rows", OCTATTN_ERROR_INVALID_OPTION, {1, 0}, {6, 6}, {}, 0, {}, {}, false},
      {"q_starts beyond 2^62",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {0, big + 1},
       0,
       {},
       {},
       false},
      {"q_starts - k_start beyond 2^62",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {-big, 0},
       0,
       {},
       {},
       false,
       big},
      {"negative sequences", OCTATTN_ERROR_INVALID_OPTION, {}, {}, {}, -1, {}, {}, false},
      {"cu_seqlens without sequences",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {},
       0,
       {0, 4},
       {0, 6},
       false},
      {"sequences without cu_seqlens", OCTATTN_ERROR_NULL_POINTER, {}, {}, {}, 1, {}, {}, true},
      {"ragged with batch 2",
       OCTATTN_ERROR_INVALID_SHAPE,
       {},
       {},
       {},
       2,
       {0, 2, 4},
       {0, 3, 6},
       false},
      {"cu_seqlens_q[0] not 0",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {},
       2,
       {1, 2, 4},
       {0, 3, 6},
       true},
      {"cu_seqlens_q decreasing",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {},
       2,
       {0, 3, 2, 4},
       {0, 3, 3, 6},
       true},
      {"cu_seqlens_q not ending at q_len",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {},
       2,
       {0, 2, 3},
       {0, 3, 6},
       true},
      {"cu_seqlens_k not ending at kv_len",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {},
       {},
       2,
       {0, 2, 4},
       {0, 3, 7},
       true},
      {"ragged kv_lens past a segment",
       OCTATTN_ERROR_INVALID_OPTION,
       {},
       {4, 1},
       {},
       2,
       {0, 2, 4},
       {0, 3, 6},
       true},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    // Ragged cases use batch entry 0's rows as a [1, H, T, D] call.
    const octattn_tensor q = c.ragged_shape ? View(p.q.t, 0, 0, 4) : p.q.t;
    const octattn_tensor k = c.ragged_shape ? View(p.k.t, 0, 0, 6) : p.k.t;
    const octattn_tensor v = c.ragged_shape ? View(p.v.t, 0, 0, 6) : p.v.t;
    Tensor o(c.ragged_shape ? 1 : 2, 2, 4, 8);
    for (float& x : o.buf) x = 7.0f;
    const std::vector<float> before = o.buf;
    octattn_attention_options opt = Options();
    opt.kv_starts = c.kv_starts.empty() ? nullptr : c.kv_starts.data();
    opt.kv_lens = c.kv_lens.empty() ? nullptr : c.kv_lens.data();
    opt.q_starts = c.q_starts.empty() ? nullptr : c.q_starts.data();
    opt.sequences = c.sequences;
    opt.k_start = c.k_start;
    opt.cu_seqlens_q = c.cu_q.empty() ? nullptr : c.cu_q.data();
    opt.cu_seqlens_k = c.cu_k.empty() ? nullptr : c.cu_k.data();
    const octattn_status st =
        octattn_attention(ctx, &opt, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr, 0);
    CHECK(st == c.want);
    CHECK(!ctx.Error().empty());
    CHECK(o.buf == before);
    size_t bytes = 0;
    CHECK(octattn_attention_workspace_size(ctx, &opt, &q, &k, &v, o.ptr(), nullptr, nullptr,
                                           &bytes) == c.want);
  }
  // The good arrays pass.
  octattn_attention_options opt = Options();
  opt.kv_starts = good_starts;
  opt.kv_lens = good_lens;
  Tensor o = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
}

TEST_CASE("a caller of the 0.3 struct never has its sequence fields read", "[batches][api]") {
  Problem p(1, 2, 1, 5, 7, 8, 8, 41);
  Context ctx;
  octattn_attention_options opt = Options();
  Tensor dense = p.Out(), old = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, dense);
  // Bytes from 104 on are the 0.6 fields; a 0.3 caller's struct_size does not cover them,
  // whatever they hold (here: arrays that would otherwise be refused).
  const int64_t bad[1] = {-5};
  opt.struct_size = 104;
  opt.kv_starts = bad;
  opt.sequences = -3;
  const octattn_status st = octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), old.ptr(),
                                              nullptr, nullptr, nullptr, 0);
  REQUIRE(st == OCTATTN_OK);
  REQUIRE(BytesEqual(dense, old));
}

TEST_CASE("the stages refuse sequences, writing nothing", "[batches][api]") {
  Context ctx;
  Tensor scores(2, 1, 3, 4);
  scores.Fill(51);
  const std::vector<float> before = scores.buf;
  const int64_t lens[2] = {2, 4};
  octattn_attention_options opt = Options();
  opt.kv_lens = lens;
  CHECK(octattn_mask(ctx, &opt, scores.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  CHECK(!ctx.Error().empty());
  CHECK(octattn_modify_scores(ctx, &opt, scores.ptr()) == OCTATTN_ERROR_UNSUPPORTED);
  CHECK(scores.buf == before);
}
