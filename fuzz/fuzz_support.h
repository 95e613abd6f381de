// Shared by the fuzz targets: reading parameters from the input's prefix, building
// tensors in several layouts, and calling the public API. Assertions are always on.
#ifndef OCTATTN_FUZZ_FUZZ_SUPPORT_H_
#define OCTATTN_FUZZ_FUZZ_SUPPORT_H_

#include <stddef.h>
#include <stdint.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "octattn.h"
#include "tests/harness/tensors.h"

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// The plumbing (loops over elements, comparisons of outputs) carries no coverage
// instrumentation (tests/harness/tensors.h says why); the input's parsing keeps it.
#define FUZZ_PLUMBING HARNESS_PLUMBING

namespace fuzz {

using namespace octattn_harness;  // NOLINT(google-build-using-namespace): the one harness

// Reads the input front to back; past its end every read returns zeros.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(Byte()) << (8 * i);
    return v;
  }
  uint64_t U64() { return U32() | static_cast<uint64_t>(U32()) << 32; }
  // An integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>((span > 255 ? U32() : Byte()) % span);
  }
  bool Bool() { return Byte() & 1; }
  // Moderate finite values: (int8) / 16.
  float Small() { return static_cast<int8_t>(Byte()) / 16.0f; }
  // Any bit pattern: NaN, infinities, denormals, huge values.
  float AnyBits() {
    const uint32_t bits = U32();
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  size_t remaining() const { return pos_ < size_ ? size_ - pos_ : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Key lists (options.key_indices ...): int32 entries [1, heads, q_len, n] and counts,
// a second list with or without counts; opt points into it.
struct KeyLists {
  std::vector<int32_t> idx[2], cnt[2];
  octattn_tensor ti[2]{}, tc[2]{};
};

// The score modifiers a fuzzed problem draws; opt points into it (shared by copies).
struct ModData {
  std::vector<float> slopes, sinks;
  std::unique_ptr<Tensor> bias;
  std::unique_ptr<BoolTensor> mask;
};

// A fuzzed attention problem: sizes, mask and how to run it.
struct Problem {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
  octattn_attention_options opt;
  int layout;
  octattn_backend backend;
  octattn_target target;  // AUTO or one this CPU runs
  int32_t threads;
  bool lse, weights;  // request the optional outputs (weights never with FUSED)
  std::shared_ptr<ModData> mods;
  Dtypes types;  // f32 unless ReadTypes draws others

  // Half of the inputs (and any past its end) all f32; the others q's and the cache's
  // dtypes (f32, bf16, f16) and o in q's dtype where `o16` allows.
  void ReadTypes(Input& in, bool o16) {
    const uint8_t b = in.Byte();
    if (!(b & 0x80)) return;
    const octattn_dtype pick[4] = {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16,
                                   OCTATTN_DTYPE_BF16};
    types.q = pick[b & 3];
    types.kv = pick[(b >> 2) & 3];
    types.o = o16 && (b & 16) ? types.q : OCTATTN_DTYPE_F32;
  }

  static Problem Read(Input& in, int64_t max_len) {
    Problem p;
    p.batch = in.Range(1, 2);
    p.kv_heads = in.Range(1, 3);
    // Up to eight query heads a kv head: decode's blocks of five to eight rows (padded
    // to eight over quantized caches) as well as of one to four.
    p.q_heads = p.kv_heads * in.Range(1, 8);
    p.kv_len = in.Range(1, max_len);
    p.q_len = in.Bool() ? p.kv_len : in.Range(1, max_len);
    p.head_dim = in.Range(1, 64);
    p.value_dim = in.Bool() ? p.head_dim : in.Range(1, 64);
    octattn_attention_options_init(&p.opt);
    p.opt.causal = in.Range(0, 7) != 0;
    if (p.opt.causal) {
      p.opt.window = in.Bool() ? 0 : in.Range(1, max_len);
      p.opt.stride = in.Bool() ? 0 : in.Range(1, 9);
      if (in.Range(0, 3) == 0) p.opt.q_start = in.Range(-8, max_len);
    }
    const uint8_t algorithm = in.Byte();  // AUTO, or reference, naive, fused
    p.opt.algorithm = (algorithm & 0x80) ? OCTATTN_ALGORITHM_AUTO
                                         : static_cast<octattn_algorithm>(1 + algorithm % 3);
    p.layout = static_cast<int>(in.Range(0, 3));
    p.backend = in.Bool() ? OCTATTN_BACKEND_XSIMD : OCTATTN_BACKEND_HIGHWAY;
    octattn_target list[8];
    size_t n = 0;
    octattn_available_targets(p.backend, list, 8, &n);
    const int64_t pick = in.Range(0, static_cast<int64_t>(n));
    p.target = pick == 0 ? OCTATTN_TARGET_AUTO : list[pick - 1];
    const uint8_t flags = in.Byte();
    p.threads = 1 + (flags & 1);
    p.lse = flags & 2;
    p.weights = (flags & 4) && p.opt.algorithm != OCTATTN_ALGORITHM_FUSED;
    if (flags & 8) p.opt.k_start = (flags >> 4) * 7 - 30;  // keys at other positions
    p.ReadMods(in, max_len);
    return p;
  }
  // Score modifiers: one byte of switches (0, also past the input's end: none). Without
  // `tensors`, no bias or mask tensor (their switches are ignored).
  void ReadMods(Input& in, int64_t max_len, bool tensors = true) {
    mods = std::make_shared<ModData>();
    opt.softcap = 0;
    opt.chunk = 0;
    opt.alibi_slopes = opt.sinks = nullptr;
    opt.bias = opt.mask = nullptr;
    const uint8_t m = in.Byte();
    if (m & 1) opt.softcap = static_cast<float>(in.Range(1, 64)) / 8.0f;
    if (m & 2) {
      for (int64_t h = 0; h < q_heads; ++h) mods->slopes.push_back(in.Small() / 4.0f);
      opt.alibi_slopes = mods->slopes.data();
    }
    if (m & 4) {
      for (int64_t h = 0; h < q_heads; ++h)
        mods->sinks.push_back(in.Range(0, 7) == 0 ? -std::numeric_limits<float>::infinity()
                                                  : in.Small());
      opt.sinks = mods->sinks.data();
    }
    if (m & 8) opt.chunk = in.Range(1, max_len);
    if (!tensors) return;
    if (m & 16) {  // sizes of 1 broadcast
      const uint8_t b = in.Byte();
      mods->bias = std::make_unique<Tensor>((b & 1) ? 1 : batch, (b & 2) ? 1 : q_heads,
                                            (b & 4) ? 1 : q_len, kv_len, layout);
      Tensor& t = *mods->bias;
      for (int64_t a = 0; a < t.t.shape[0]; ++a)
        for (int64_t h = 0; h < t.t.shape[1]; ++h)
          for (int64_t i = 0; i < t.t.shape[2]; ++i)
            for (int64_t j = 0; j < kv_len; ++j)
              t.at(a, h, i, j) =
                  in.Range(0, 15) == 0 ? -std::numeric_limits<float>::infinity() : in.Small();
      opt.bias = &t.t;
    }
    if (m & 32) {
      const uint8_t b = in.Byte();
      mods->mask = std::make_unique<BoolTensor>((b & 1) ? 1 : batch, (b & 2) ? 1 : q_heads,
                                                (b & 4) ? 1 : q_len, kv_len);
      for (uint8_t& x : mods->mask->buf) x = in.Range(0, 3) == 0 ? 0 : in.Byte() | 1;
      opt.mask = &mods->mask->t;
    }
  }
  // A tree of draft tokens over the last q_len keys for a problem without a mask
  // tensor, drawn in a quarter of the inputs (none past the input's end): random bits,
  // rows of row_bytes, batch entries stride apart (0: one tree for both), into *bits,
  // which opt points at.
  void ReadTree(Input& in, std::vector<uint8_t>* bits) {
    if (opt.mask || in.Range(0, 3) != 3) return;
    const int64_t row_bytes = (q_len + 7) / 8 + in.Range(0, 1);
    const int64_t stride = in.Bool() ? 0 : q_len * row_bytes;
    bits->resize(static_cast<size_t>((batch - 1) * stride + q_len * row_bytes));
    for (uint8_t& x : *bits) x = in.Byte();
    opt.tree = bits->data();
    opt.tree_row_bytes = row_bytes;
    opt.tree_stride = stride;
  }
  // A block mask in a quarter of the inputs (none past the input's end): block sizes up
  // to past the rows and keys, one list per query head or one for all (every batch entry
  // the same), random kinds (unlisted, partial, full), into *bm, which opt points at.
  void ReadBlocks(Input& in, BlockMask* bm) {
    if (in.Range(0, 3) != 3) return;
    const int64_t bq = in.Range(1, q_len + 1),
                  bkv = in.Range(1, std::min<int64_t>(kv_len + 1, 300));
    const int64_t heads = in.Bool() ? q_heads : 1;
    *bm = BlockMask(1, heads, (q_len + bq - 1) / bq, (kv_len + bkv - 1) / bkv, bq, bkv);
    const int64_t dense = in.Range(1, 3);  // the chance of a listed block, in quarters
    for (uint8_t& k : bm->kinds)
      k = in.Range(0, 3) < dense ? static_cast<uint8_t>(in.Range(1, 2)) : 0;
    bm->Build(in.Range(1, 2));
    bm->Into(&opt, in.Bool());
  }
  // Key lists in a quarter of the inputs without a block mask or weights (none past the
  // input's end): one list a row for every batch entry, per kv head or for all, entries
  // in [-1, kv_len) (unsorted, duplicates, past the causal bound), counts from 0, and a
  // second list in half of them; into *kl, which opt points at. The naive algorithm
  // takes none: it becomes fused.
  void ReadLists(Input& in, KeyLists* kl) {
    if (weights || opt.block_counts || in.Range(0, 3) != 3) return;
    if (opt.algorithm == OCTATTN_ALGORITHM_NAIVE) opt.algorithm = OCTATTN_ALGORITHM_FUSED;
    const int64_t heads = in.Bool() ? kv_heads : 1;
    const int lists = in.Bool() ? 2 : 1;
    for (int l = 0; l < lists; ++l) {
      const int64_t n = in.Range(1, 2 * kv_len + 2);
      const bool counts = l == 0 || in.Bool();
      kl->idx[l].resize(static_cast<size_t>(heads * q_len * n));
      for (int32_t& x : kl->idx[l]) x = static_cast<int32_t>(in.Range(-1, kv_len - 1));
      const int64_t is[4] = {1, heads, q_len, n}, cs[4] = {1, heads, q_len, 1};
      octattn_tensor_init(&kl->ti[l], kl->idx[l].data(), is, OCTATTN_LAYOUT_BHTD);
      kl->ti[l].dtype = OCTATTN_DTYPE_INT32;
      (l == 0 ? opt.key_indices : opt.key_indices2) = &kl->ti[l];
      if (!counts) continue;
      kl->cnt[l].resize(static_cast<size_t>(heads * q_len));
      for (int32_t& x : kl->cnt[l]) x = static_cast<int32_t>(in.Range(0, n));
      octattn_tensor_init(&kl->tc[l], kl->cnt[l].data(), cs, OCTATTN_LAYOUT_BHTD);
      kl->tc[l].dtype = OCTATTN_DTYPE_INT32;
      (l == 0 ? opt.key_counts : opt.key_counts2) = &kl->tc[l];
    }
  }
  // An upper bound of |s| after the modifiers, from the largest |scaled score|.
  double ModifiedScoreBound(double s) const {
    if (opt.softcap > 0) s = std::fmin(s, opt.softcap);
    double slope = 0;
    for (float x : mods->slopes) slope = std::fmax(slope, std::fabs(x));
    const int64_t qs =
        opt.q_start == OCTATTN_Q_START_DEFAULT ? kv_len - q_len : opt.q_start - opt.k_start;
    const double far = static_cast<double>(std::llabs(qs) + q_len + kv_len);
    s += slope * far;
    if (mods->bias) {
      double b = 0;
      for (float x : mods->bias->buf)
        if (std::isfinite(x)) b = std::fmax(b, std::fabs(x));
      s += b;
    }
    return s;
  }
  // The first query's position relative to key row 0 (k_start subtracted).
  int64_t q_start() const {
    if (!opt.causal) return 0;
    return opt.q_start == OCTATTN_Q_START_DEFAULT ? kv_len - q_len : opt.q_start - opt.k_start;
  }
};

struct Tensors {
  Tensor q, k, v, o, lse, w;
  bool has_lse, has_w;
  Dtypes types;
  Tensors(const Problem& p, int layout)
      : q(p.batch, p.q_heads, p.q_len, p.head_dim, layout),
        k(p.batch, p.kv_heads, p.kv_len, p.head_dim, layout),
        v(p.batch, p.kv_heads, p.kv_len, p.value_dim, layout),
        o(p.batch, p.q_heads, p.q_len, p.value_dim, layout),
        lse(p.batch, p.q_heads, p.q_len, 1, layout),
        w(p.batch, p.q_heads, p.q_len, p.weights ? p.kv_len : 1, layout),
        has_lse(p.lse),
        has_w(p.weights),
        types(p.types) {}
  // Logical values from `from` (any layout).
  FUZZ_PLUMBING void CopyFrom(const Tensors& from) {
    q.CopyValuesFrom(from.q);
    k.CopyValuesFrom(from.k);
    v.CopyValuesFrom(from.v);
  }
};

FUZZ_PLUMBING inline void FillSmall(Input& in, Tensor& x) {
  for (int64_t a = 0; a < x.t.shape[0]; ++a)
    for (int64_t b = 0; b < x.t.shape[1]; ++b)
      for (int64_t c = 0; c < x.t.shape[2]; ++c)
        for (int64_t d = 0; d < x.t.shape[3]; ++d) x.at(a, b, c, d) = in.Small();
}

// A tensor's values replaced by those of `type` (round to nearest even): the numbers a
// 16-bit call reads, so bounds computed from the tensor hold for it.
FUZZ_PLUMBING inline void Quantize(Tensor& x, octattn_dtype type) {
  if (type == OCTATTN_DTYPE_F32) return;
  for (float& f : x.buf) f = Widen(Narrow(f, type), type);
}

// q, k, v of a problem from the input, in that order, holding values of their dtypes.
inline void FillInputs(Input& in, Tensors& t) {
  FillSmall(in, t.q);
  FillSmall(in, t.k);
  FillSmall(in, t.v);
  Quantize(t.q, t.types.q);
  Quantize(t.k, t.types.kv);
  Quantize(t.v, t.types.kv);
}

// The context of a problem's backend and target with a thread cap: one per (backend,
// target, threads), made on first use and kept for the process. A fresh context per
// input cost more than most inputs (its pool's threads started, its scratch mapped and
// faulted in anew: a fifth of the decode target's inputs a second); a kept one reuses
// its scratch, whose contents no call's bytes may depend on.
class Context {
 public:
  Context(const Problem& p, int32_t threads) : ctx_(Get(p.backend, p.target, threads)) {}
  operator octattn_context*() const { return ctx_; }

 private:
  static octattn_context* Get(octattn_backend backend, octattn_target target, int32_t threads) {
    struct Kept {
      octattn_backend backend;
      octattn_target target;
      int32_t threads;
      octattn_context* ctx;
    };
    static std::vector<Kept>* kept = new std::vector<Kept>();  // reachable until exit
    for (const Kept& k : *kept)
      if (k.backend == backend && k.target == target && k.threads == threads) return k.ctx;
    octattn_context* ctx = nullptr;
    FUZZ_CHECK(octattn_context_create(&ctx) == OCTATTN_OK);
    FUZZ_CHECK(octattn_context_set_threads(ctx, threads) == OCTATTN_OK);
    FUZZ_CHECK(octattn_context_set_target(ctx, backend, target) == OCTATTN_OK);
    kept->push_back({backend, target, threads, ctx});
    return ctx;
  }
  octattn_context* ctx_;
};

// Whether the last call on ctx ran bf16 q.k on vdpbf16ps or AMX tiles (the header's
// avx512_bf16 and amx_bf16 rule): its bytes are its own, not those of the f32 call on
// the widened values.
inline bool RanDotBf16(octattn_context* ctx, const Problem& p) {
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  FUZZ_CHECK(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  return (info.target == OCTATTN_TARGET_AVX512_BF16 || info.target == OCTATTN_TARGET_AMX_BF16) &&
         info.algorithm == OCTATTN_ALGORITHM_FUSED && p.types.q == OCTATTN_DTYPE_BF16 &&
         p.types.kv == OCTATTN_DTYPE_BF16 && p.head_dim % 2 == 0;
}

inline octattn_status Attend(octattn_context* ctx, const octattn_attention_options& opt,
                             Tensors& t) {
  return Run(t.types, ctx, &opt, &t.q.t, &t.k.t, &t.v.t, &t.o.t, t.has_lse ? &t.lse.t : nullptr,
             t.has_w ? &t.w.t : nullptr);
}

// A quantized cache the input may draw for k and v (their f32 values stored by
// octattn_kv_store): INT8 with per-token scales of G channels (keys: or KIVI's by channel
// within blocks of 2 or 4 rows), FP8 e4m3 with per-head scales, FP8 e5m2 without, Q8_0 or
// Q4_0 where the dimensions are whole blocks; the integer ones with q . k in int8 or not.
struct QuantCache {
  octattn_dtype type = OCTATTN_DTYPE_F32;
  int64_t group = 1, k_rows = 1;
  octattn_qk_precision qk = OCTATTN_QK_EXACT;
  std::vector<uint8_t> kb, vb;
  octattn_tensor kt{}, vt{};
  std::unique_ptr<Tensor> ks, vs;  // scales (null: none)

  static int64_t Unit(octattn_dtype t) {
    return t == OCTATTN_DTYPE_Q8_0         ? 34
           : t == OCTATTN_DTYPE_Q4_0       ? 18
           : t == OCTATTN_DTYPE_FP8_DS_MLA ? 656
                                           : 1;
  }
  // The layout: [B, H, T, D] with rows of D values (blocked: D / 32 blocks; FP8_DS_MLA:
  // one 656-byte row).
  static octattn_tensor View(const Tensor& x, octattn_dtype type, std::vector<uint8_t>* buf) {
    octattn_tensor t = x.t;
    t.dtype = type;
    const bool blocked = type == OCTATTN_DTYPE_Q8_0 || type == OCTATTN_DTYPE_Q4_0;
    const int64_t units = blocked                            ? t.shape[3] / 32
                          : type == OCTATTN_DTYPE_FP8_DS_MLA ? 1
                                                             : t.shape[3];
    t.stride[3] = 1, t.stride[2] = units, t.stride[1] = t.shape[2] * units;
    t.stride[0] = t.shape[1] * t.stride[1];
    buf->assign(static_cast<size_t>(t.shape[0] * t.stride[0] * Unit(type)), 0);
    t.data = buf->data();
    return t;
  }
  // FP8_DS_MLA rows of fewer than 576 values (which octattn_kv_store does not write): each
  // value's e4m3 code from its sign and magnitude (never the NaN code), the four scales 1.
  static void FillDsMla(const Tensor& x, octattn_tensor* t) {
    uint8_t* rows = static_cast<uint8_t*>(t->data);
    const float one = 1.0f;
    for (int64_t b = 0; b < x.t.shape[0]; ++b)
      for (int64_t h = 0; h < x.t.shape[1]; ++h)
        for (int64_t j = 0; j < x.t.shape[2]; ++j) {
          uint8_t* r = rows + (b * t->stride[0] + h * t->stride[1] + j * t->stride[2]) * 656;
          for (int64_t d = 0; d < x.t.shape[3]; ++d) {
            const float f = x.at(b, h, j, d);
            const long m = std::lrint(std::fmin(std::fabs(f) * 8.0f, 119.0f));
            r[d] = static_cast<uint8_t>((f < 0 ? 0x80 : 0) | static_cast<int>(m));
          }
          for (int g = 0; g < 4; ++g) std::memcpy(r + 512 + 4 * g, &one, 4);
        }
  }
  void Store(octattn_context* ctx, const Tensor& k, const Tensor& v) {
    kt = View(k, type, &kb);
    vt = View(v, type, &vb);
    if (type == OCTATTN_DTYPE_FP8_DS_MLA) {
      FillDsMla(k, &kt);
      FillDsMla(v, &vt);
      return;
    }
    if (type == OCTATTN_DTYPE_INT8) {
      ks = std::make_unique<Tensor>(k.t.shape[0], k.t.shape[1], k.t.shape[2] / k_rows,
                                    k_rows > 1 ? k.t.shape[3] : k.t.shape[3] / group);
      vs = std::make_unique<Tensor>(v.t.shape[0], v.t.shape[1], v.t.shape[2], 1);
    } else if (type == OCTATTN_DTYPE_FP8_E4M3) {
      ks = std::make_unique<Tensor>(1, k.t.shape[1], 1, 1);
      vs = std::make_unique<Tensor>(1, v.t.shape[1], 1, 1);
      for (float& x : ks->buf) x = 0.75f;
      for (float& x : vs->buf) x = 1.5f;
    }
    const int64_t rows = type == OCTATTN_DTYPE_INT8 ? k_rows : 0;
    FUZZ_CHECK(octattn_kv_store(ctx, &k.t, &kt, ks ? &ks->t : nullptr, rows, nullptr) ==
               OCTATTN_OK);
    FUZZ_CHECK(octattn_kv_store(ctx, &v.t, &vt, vs ? &vs->t : nullptr, 0, nullptr) == OCTATTN_OK);
  }
  QuantCache Copy() const {
    QuantCache c;
    c.type = type, c.group = group, c.k_rows = k_rows, c.qk = qk;
    c.kb = kb, c.vb = vb, c.kt = kt, c.vt = vt;
    c.kt.data = c.kb.data();
    c.vt.data = c.vb.data();
    if (ks) c.ks = std::make_unique<Tensor>(*ks);
    if (vs) c.vs = std::make_unique<Tensor>(*vs);
    return c;
  }
  // Row pos of (b, h) of every operand and the scales read with it alone, overwritten
  // with `bytes` (any patterns: NaN and Inf codes and blocks, NaN, Inf and zero scales).
  void Edit(int64_t b, int64_t h, int64_t pos, const uint8_t* bytes, size_t n) {
    size_t i = 0;
    for (octattn_tensor* t : {&kt, &vt}) {
      uint8_t* row = static_cast<uint8_t*>(t->data) +
                     (b * t->stride[0] + h * t->stride[1] + pos * t->stride[2]) * Unit(type);
      for (int64_t e = 0; e < t->stride[2] * Unit(type); ++e) row[e] = bytes[i++ % n];
    }
    float f[4];
    std::memcpy(f, bytes, sizeof(f));
    if (type == OCTATTN_DTYPE_INT8) {
      for (int64_t g = 0; g < vs->t.shape[3]; ++g) vs->at(b, h, pos, g) = f[g % 4];
      if (pos % k_rows == 0)  // a scale row of keys pos and on only
        for (int64_t g = 0; g < ks->t.shape[3]; ++g) ks->at(b, h, pos / k_rows, g) = f[(g + 1) % 4];
    }
  }
  // Views of the cache's first n rows (a decode's keys 0 .. n - 1) and of their scales in
  // *view, and the options that pass those scales.
  struct Rows {
    octattn_tensor k, v, ks, vs;
  };
  octattn_attention_options RowsOptions(int64_t n, Rows* view, octattn_attention_options o) const {
    view->k = kt, view->v = vt;
    view->k.shape[2] = view->v.shape[2] = n;
    o = Options(o);
    if (type == OCTATTN_DTYPE_INT8) {
      view->ks = ks->t, view->vs = vs->t;
      view->ks.shape[2] = (n + k_rows - 1) / k_rows;
      view->vs.shape[2] = n;
      o.k_scale = &view->ks;
      o.v_scale = &view->vs;
    }
    return o;
  }
  octattn_attention_options Options(octattn_attention_options o) const {
    o.k_scale = ks ? &ks->t : nullptr;
    o.v_scale = vs ? &vs->t : nullptr;
    o.k_scale_rows = type == OCTATTN_DTYPE_INT8 ? k_rows : 0;
    o.qk_precision = qk;
    return o;
  }
};

// The format from one byte (F32: none), where the problem's sizes allow it.
inline QuantCache ReadQuant(Input& in, const Problem& p) {
  QuantCache c;
  const uint8_t b = in.Byte();
  if (!(b & 0x80)) return c;
  const octattn_dtype pick[5] = {OCTATTN_DTYPE_INT8, OCTATTN_DTYPE_FP8_E4M3, OCTATTN_DTYPE_FP8_E5M2,
                                 OCTATTN_DTYPE_Q8_0, OCTATTN_DTYPE_Q4_0};
  c.type = pick[b % 5];
  // DeepSeek's latent rows in half of the e5m2 draws (rows of up to 576 values).
  if (c.type == OCTATTN_DTYPE_FP8_E5M2 && (b & 4) && p.head_dim <= 576 && p.value_dim <= 576)
    c.type = OCTATTN_DTYPE_FP8_DS_MLA;
  const bool blocks = p.head_dim % 32 == 0 && p.value_dim % 32 == 0;
  if ((c.type == OCTATTN_DTYPE_Q8_0 || c.type == OCTATTN_DTYPE_Q4_0) && !blocks)
    c.type = OCTATTN_DTYPE_INT8;
  if (c.type == OCTATTN_DTYPE_INT8) {
    c.group = (b & 8) && p.head_dim % 8 == 0 ? 8 : p.head_dim;
    c.k_rows = (b & 16) && p.kv_len % 4 == 0 ? ((b & 32) ? 4 : 2) : 1;
  }
  // q . k in int8: integer keys, on the algorithms that take it (not naive).
  const bool naive = p.opt.algorithm == OCTATTN_ALGORITHM_NAIVE ||
                     (p.opt.algorithm == OCTATTN_ALGORITHM_AUTO && p.weights);
  if ((b & 64) && !naive &&
      (c.type == OCTATTN_DTYPE_INT8 || c.type == OCTATTN_DTYPE_Q8_0 ||
       c.type == OCTATTN_DTYPE_Q4_0))
    c.qk = OCTATTN_QK_INT8;
  return c;
}

// Row (a, b, c) of every output the call wrote, byte for byte.
FUZZ_PLUMBING inline bool OutputRowsEqual(const Tensors& x, const Tensors& y, int64_t a, int64_t b,
                                          int64_t c) {
  return x.o.RowEquals(y.o, a, b, c) && (!x.has_lse || x.lse.RowEquals(y.lse, a, b, c)) &&
         (!x.has_w || x.w.RowEquals(y.w, a, b, c));
}

}  // namespace fuzz

#endif  // OCTATTN_FUZZ_FUZZ_SUPPORT_H_
