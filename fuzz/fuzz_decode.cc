// Decode: a one-row decode at position i (and a short chunked prefill ending at i)
// equals prefill row i byte for byte on the fused path, as the header promises, with
// the score modifiers the input draws (the bias and mask tensors viewed at the rows), in
// the dtypes it draws, and over the quantized caches it draws (the decode reading the first
// rows of the same cache and scales), and with key lists (each row's entries within its
// causal bound, as a decode step's keys hold them: unsorted, duplicates, -1, counts of 0;
// long sequences' lists cross the 1024-key units), the decode reading its rows' lists.
#include <algorithm>
#include <utility>

#include "fuzz_support.h"

using namespace fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Problem p = Problem::Read(in, 40);
  p.ReadTypes(in, true);
  p.opt.algorithm = OCTATTN_ALGORITHM_FUSED;
  p.weights = false;  // the fused path never holds them
  QuantCache quant = ReadQuant(in, p);
  p.opt.causal = 1;
  p.opt.q_start = OCTATTN_Q_START_DEFAULT;
  // Long sequences cross the fused path's 1024-key spans: one input in 32 draws one
  // (their prefill costs a hundred short inputs: libFuzzer keeps many of them, for the
  // features only they reach).
  const bool long_seq = in.Range(0, 31) == 0;
  int64_t n = long_seq ? in.Range(1000, 2600) : p.kv_len;
  // A quarter of them (drawn from n, so that the corpus keeps its meaning) keep keys and
  // values in rows 4 KiB (16-bit) or 8 KiB (f32) apart, which decode copies a group at a
  // time before reading: shorter, as each row takes a page.
  const bool rows4k = long_seq && n % 4 == 0;
  if (rows4k) n = std::min<int64_t>(n, 1300);
  if (long_seq) {  // keep an input fast: small heads, a GQA group or several kv heads
    // Not on Highway's scalar target (EMU128): under the sanitizers its emulated lanes
    // cost ten times a vector target's on such a prefill; fused_test crosses key spans
    // on it, decode included, on every target.
    if (p.backend == OCTATTN_BACKEND_HIGHWAY && p.target == OCTATTN_TARGET_SCALAR)
      p.target = OCTATTN_TARGET_AUTO;
    // Two sequences of a [B, T, H, D] layout past one chunk make decode tasks that cover
    // every kv head (the kv heads' slices of one key row read together).
    if (p.batch == 1 || p.kv_heads == 1) {
      p.q_heads = std::min<int64_t>(p.q_heads / p.kv_heads, 2);
      p.kv_heads = 1;
    } else {
      p.q_heads = p.kv_heads = 2;
    }
    p.head_dim = std::min<int64_t>(p.head_dim, 16);
    p.value_dim = std::min<int64_t>(p.value_dim, 16);
  }
  p.q_len = p.kv_len = n;
  p.ReadMods(in, n, !long_seq);  // long: no [n, n] bias or mask tensors, too slow per input
  // Key lists in a quarter of the inputs: [1, 1 or kv_heads, n, cap], row i's entries in
  // [-1, i] (a decode step over keys 0 .. i holds no other), counted. A row's entries come
  // from a generator its bytes seed, and past the input's end its list is full: a long
  // sequence's rows then list more than a 1024-key unit of distinct keys.
  KeyLists lists;
  if (in.Range(0, 3) == 3) {
    const int64_t heads = in.Bool() ? p.kv_heads : 1;
    const int64_t cap = in.Range(1, std::min<int64_t>(n + 8, 2600));
    lists.idx[0].resize(static_cast<size_t>(heads * n * cap));
    lists.cnt[0].resize(static_cast<size_t>(heads * n));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i) {
        lists.cnt[0][static_cast<size_t>(h * n + i)] = static_cast<int32_t>(cap - in.Range(0, cap));
        uint32_t x = in.U32() | 1;  // xorshift32
        int32_t* row = lists.idx[0].data() + (h * n + i) * cap;
        for (int64_t e = 0; e < cap; ++e) {
          x ^= x << 13;
          x ^= x >> 17;
          x ^= x << 5;
          row[e] = static_cast<int32_t>(x % static_cast<uint32_t>(i + 2)) - 1;
        }
      }
    const int64_t is[4] = {1, heads, n, cap}, cs[4] = {1, heads, n, 1};
    octattn_tensor_init(&lists.ti[0], lists.idx[0].data(), is, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&lists.tc[0], lists.cnt[0].data(), cs, OCTATTN_LAYOUT_BHTD);
    lists.ti[0].dtype = lists.tc[0].dtype = OCTATTN_DTYPE_INT32;
    p.opt.key_indices = &lists.ti[0];
    p.opt.key_counts = &lists.tc[0];
  }
  // The options of rows [first, first + rows) of the call's lists.
  octattn_tensor rows_ti, rows_tc;
  auto list_rows = [&](octattn_attention_options o, int64_t first, int64_t rows) {
    if (!o.key_indices) return o;
    rows_ti = lists.ti[0];
    rows_tc = lists.tc[0];
    rows_ti.data = static_cast<int32_t*>(rows_ti.data) + first * rows_ti.stride[2];
    rows_tc.data = static_cast<int32_t*>(rows_tc.data) + first * rows_tc.stride[2];
    rows_ti.shape[2] = rows_tc.shape[2] = rows;
    o.key_indices = &rows_ti;
    o.key_counts = &rows_tc;
    return o;
  };
  // A quantized cache: k and v in a format the sizes still allow, q and o as drawn.
  if (p.head_dim % quant.group) quant.group = p.head_dim;
  if (n % quant.k_rows) quant.k_rows = 1;
  if (rows4k || ((quant.type == OCTATTN_DTYPE_Q8_0 || quant.type == OCTATTN_DTYPE_Q4_0) &&
                 (p.head_dim % 32 || p.value_dim % 32)))
    quant = QuantCache{};
  if (quant.type != OCTATTN_DTYPE_F32) p.types.kv = OCTATTN_DTYPE_F32;
  Tensors full(p, p.layout);
  FillInputs(in, full);
  if (rows4k) {
    Tensor k(p.batch, p.kv_heads, n, p.head_dim, kRows4K),
        v(p.batch, p.kv_heads, n, p.value_dim, kRows4K);
    k.CopyValuesFrom(full.k);
    v.CopyValuesFrom(full.v);
    full.k = std::move(k);
    full.v = std::move(v);
  }
  Context ctx(p, p.threads);
  const bool quantized = quant.type != OCTATTN_DTYPE_F32;
  if (quantized) quant.Store(ctx, full.k, full.v);
  // The call over the first `keys` rows of k and v (a quantized cache: views of its first
  // rows and of their scales; the f32 or 16-bit k and v views come in).
  auto run = [&](const octattn_attention_options& o, const octattn_tensor* q,
                 const octattn_tensor* k, const octattn_tensor* v, octattn_tensor* out,
                 int64_t keys) {
    if (!quantized) return Run(p.types, ctx, &o, q, k, v, out, nullptr, nullptr);
    QuantCache::Rows view;
    const octattn_attention_options qo = quant.RowsOptions(keys, &view, o);
    return Run(p.types, ctx, &qo, q, &view.k, &view.v, out, nullptr, nullptr);
  };
  // A short sequence's prefill runs once, whole; a long one's only over the rows a probe
  // reads and the kPrefillRows before them (a prefill-shaped call still: more rows than
  // decode's), so that a long input costs a few short ones, not a hundred.
  constexpr int64_t kPrefillRows = 20;
  if (!long_seq)
    FUZZ_CHECK(run(p.opt, &full.q.t, &full.k.t, &full.v.t, &full.o.t, n) == OCTATTN_OK);
  std::vector<int64_t> probed;  // the rows of the prefill's o that a probe computed
  for (int probe = 0; probe < 3; ++probe) {
    const int64_t i = in.Range(0, n - 1);
    probed.push_back(i);
    const int64_t rows = in.Range(1, std::min<int64_t>(i + 1, 4));
    octattn_tensor q = full.q.t, k = full.k.t, v = full.v.t;
    k.shape[2] = v.shape[2] = i + 1;
    if (long_seq) {  // rows [first, i] of the prefill into full.o's rows
      const int64_t first = std::max<int64_t>(0, i + 1 - kPrefillRows);
      octattn_tensor qp = q, op = full.o.t;
      qp.data = static_cast<float*>(qp.data) + first * qp.stride[2];
      op.data = static_cast<float*>(op.data) + first * op.stride[2];
      qp.shape[2] = op.shape[2] = i + 1 - first;
      FUZZ_CHECK(run(list_rows(p.opt, first, i + 1 - first), &qp, &k, &v, &op, i + 1) ==
                 OCTATTN_OK);
    }
    q.data = static_cast<float*>(q.data) + (i + 1 - rows) * q.stride[2];
    q.shape[2] = rows;
    Tensor o(p.batch, p.q_heads, rows, p.value_dim, kBHTD);
    octattn_attention_options opt = list_rows(p.opt, i + 1 - rows, rows);
    octattn_tensor bias{}, mask{};
    if (opt.bias) {  // rows i + 1 - rows .. i, keys 0 .. i of the same memory
      bias = *opt.bias;
      if (bias.shape[2] > 1) {
        bias.data = static_cast<float*>(bias.data) + (i + 1 - rows) * bias.stride[2];
        bias.shape[2] = rows;
      }
      bias.shape[3] = i + 1;
      opt.bias = &bias;
    }
    if (opt.mask) {
      mask = *opt.mask;
      if (mask.shape[2] > 1) {
        mask.data = static_cast<uint8_t*>(mask.data) + (i + 1 - rows) * mask.stride[2];
        mask.shape[2] = rows;
      }
      mask.shape[3] = i + 1;
      opt.mask = &mask;
    }
    FUZZ_CHECK(run(opt, &q, &k, &v, &o.t, i + 1) == OCTATTN_OK);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t d = 0; d < p.value_dim; ++d) {
            const float x = o.at(b, h, r, d), y = full.o.at(b, h, i + 1 - rows + r, d);
            FUZZ_CHECK(std::memcmp(&x, &y, sizeof(float)) == 0);
          }
  }
  // Cascade: decode steps of prefill rows (the probes' and the sequence's last rows) as
  // one padded batch over batch entry 0's keys (k and v with batch stride 0: the entries'
  // leading key spans are the same rows, which a long sequence's entries read once for
  // all), each entry's row the prefill's. Not over a quantized cache (its views take the
  // scales' rows) nor with modifier tensors (their rows are per entry).
  if (quantized || p.opt.bias || p.opt.mask || p.opt.key_indices) return 0;
  if (long_seq) {  // rows [n - kPrefillRows, n) of the prefill into full.o's rows
    const int64_t first = std::max<int64_t>(0, n - kPrefillRows);
    octattn_tensor qp = full.q.t, op = full.o.t;
    qp.data = static_cast<float*>(qp.data) + first * qp.stride[2];
    op.data = static_cast<float*>(op.data) + first * op.stride[2];
    qp.shape[2] = op.shape[2] = n - first;
    FUZZ_CHECK(run(p.opt, &qp, &full.k.t, &full.v.t, &op, n) == OCTATTN_OK);
  }
  std::vector<int64_t> lens;  // each entry's keys: its row's position + 1
  for (int64_t i : probed) lens.push_back(i + 1);
  for (int64_t back : {int64_t{0}, int64_t{1}, int64_t{6}, kPrefillRows - 1})
    lens.push_back(std::max<int64_t>(0, n - 1 - back) + 1);
  const int64_t e = static_cast<int64_t>(lens.size());
  Tensor qe(e, p.q_heads, 1, p.head_dim, kBHTD), oe(e, p.q_heads, 1, p.value_dim, kBHTD);
  for (int64_t x = 0; x < e; ++x)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t d = 0; d < p.head_dim; ++d)
        qe.at(x, h, 0, d) = full.q.at(0, h, lens[static_cast<size_t>(x)] - 1, d);
  octattn_tensor k = full.k.t, v = full.v.t;
  k.shape[0] = v.shape[0] = e;
  k.stride[0] = v.stride[0] = 0;
  octattn_attention_options opt = p.opt;
  opt.kv_lens = lens.data();
  FUZZ_CHECK(Run(p.types, ctx, &opt, &qe.t, &k, &v, &oe.t, nullptr, nullptr) == OCTATTN_OK);
  for (int64_t x = 0; x < e; ++x)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t d = 0; d < p.value_dim; ++d) {
        const float a = oe.at(x, h, 0, d);
        const float b = full.o.at(0, h, lens[static_cast<size_t>(x)] - 1, d);
        FUZZ_CHECK(std::memcmp(&a, &b, sizeof(float)) == 0);
      }
  return 0;
}
