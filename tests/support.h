// Test support: the shared harness (harness/tensors.h: tensors in any layout, 16-bit
// calls, byte comparisons), the targets to sweep, and calls of the public API that fail
// the test with the library's message.
#ifndef OCTATTN_TESTS_SUPPORT_H_
#define OCTATTN_TESTS_SUPPORT_H_

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "harness/tensors.h"
#include "octattn.h"

namespace octtest {

// Tensors, layouts, 16-bit calls and byte comparisons: the harness the fuzz targets share.
using namespace octattn_harness;  // NOLINT(google-build-using-namespace)

// The [dispatch] tests also run under qemu (tests/CMakeLists.txt sets
// OCTATTN_TEST_EMULATED there), 10-500x slower than a real core: there they take small
// shapes, since their job is to prove dispatch and per-target results, not to sweep.
inline bool Emulated() {
  static const bool emulated = std::getenv("OCTATTN_TEST_EMULATED") != nullptr;
  return emulated;
}
inline int64_t Sized(int64_t native, int64_t emulated) { return Emulated() ? emulated : native; }

// The sanitizer tree (ASan + UBSan) runs the kernels several times slower than a release
// build. Its job is memory and undefined-behaviour errors in every family, which the
// small shapes reach as well, so its widest sweeps take them too (the release tree
// sweeps every shape).
inline bool Sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}
inline bool Small() { return Emulated() || Sanitized(); }
inline int64_t SmallSized(int64_t native, int64_t small) { return Small() ? small : native; }

struct Target {
  octattn_backend backend;
  octattn_target target;
  std::string Name() const {
    return std::string(octattn_backend_name(backend)) + "/" + octattn_target_name(target);
  }
};

// Every compiled target of both backends that this CPU runs. An emulated CPU whose
// smaller targets another run covers (OCTATTN_TEST_BEST_TARGETS, tests/CMakeLists.txt)
// sweeps only the best of each backend, the one it adds; OCTATTN_TEST_BACKENDS=highway
// leaves out xsimd where its best is another run's (NEON on an SVE CPU).
inline std::vector<Target> AllTargets() {
  static const bool best_only = std::getenv("OCTATTN_TEST_BEST_TARGETS") != nullptr;
  static const char* backends = std::getenv("OCTATTN_TEST_BACKENDS");
  std::vector<Target> out;
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD}) {
    if (backends && std::string(backends) != octattn_backend_name(b)) continue;
    octattn_target list[8];
    size_t n = 0;
    REQUIRE(octattn_available_targets(b, list, 8, &n) == OCTATTN_OK);
    for (size_t i = 0; i < (best_only ? std::min<size_t>(n, 1) : n); ++i)
      out.push_back({b, list[i]});
  }
  return out;
}

// An owning context.
class Context {
 public:
  explicit Context(int threads = 0) {
    REQUIRE(octattn_context_create(&ctx_) == OCTATTN_OK);
    REQUIRE(octattn_context_set_threads(ctx_, threads) == OCTATTN_OK);
  }
  Context(const Target& t, int threads = 0) : Context(threads) { Use(t); }
  ~Context() { octattn_context_destroy(ctx_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void Use(const Target& t) {
    REQUIRE(octattn_context_set_target(ctx_, t.backend, t.target) == OCTATTN_OK);
  }
  operator octattn_context*() const { return ctx_; }
  std::string Error() const { return octattn_context_last_error(ctx_); }

 private:
  octattn_context* ctx_ = nullptr;
};

inline octattn_attention_options Options(int32_t causal = 1, int64_t window = 0, int64_t stride = 0,
                                         octattn_algorithm algorithm = OCTATTN_ALGORITHM_AUTO,
                                         int64_t q_start = OCTATTN_Q_START_DEFAULT) {
  octattn_attention_options o;
  octattn_attention_options_init(&o);
  o.causal = causal;
  o.window = window;
  o.stride = stride;
  o.algorithm = algorithm;
  o.q_start = q_start;
  return o;
}

// Runs attention and requires success; lse and weights optional.
inline void Attend(Context& ctx, const octattn_attention_options& opt, const Tensor& q,
                   const Tensor& k, const Tensor& v, Tensor& o, Tensor* lse = nullptr,
                   Tensor* weights = nullptr) {
  const octattn_status st =
      octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), lse ? lse->ptr() : nullptr,
                        weights ? weights->ptr() : nullptr, nullptr, 0);
  INFO(ctx.Error());
  REQUIRE(st == OCTATTN_OK);
}

// o and lse of problem p's call under options a and under b equal bytes.
template <class P>
void RequireSameOutputs(Context& ctx, const octattn_attention_options& a,
                        const octattn_attention_options& b, const P& p) {
  Tensor o = p.Out(), lse = p.Lse(), mo = p.Out(), mlse = p.Lse();
  Attend(ctx, a, p.q, p.k, p.v, o, &lse);
  Attend(ctx, b, p.q, p.k, p.v, mo, &mlse);
  REQUIRE(BytesEqual(o, mo));
  REQUIRE(BytesEqual(lse, mlse));
}

// The backward's gradients (dq, dk, dv) of problem p under options a and under b equal
// bytes, both from the forward outputs of a's call and one seeded dout.
template <class P>
void RequireSameGradients(Context& ctx, const octattn_attention_options& a,
                          const octattn_attention_options& b, const P& p, uint32_t seed) {
  Tensor o = p.Out(), lse = p.Lse(), dout = p.Out();
  dout.Fill(seed);
  Attend(ctx, a, p.q, p.k, p.v, o, &lse);
  Tensor g[2][3] = {{p.q, p.k, p.v}, {p.q, p.k, p.v}};
  for (int m = 0; m < 2; ++m) {
    const octattn_status st = octattn_attention_backward(
        ctx, m ? &b : &a, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(), dout.ptr(), nullptr,
        g[m][0].ptr(), g[m][1].ptr(), g[m][2].ptr(), nullptr, nullptr, nullptr, 0);
    INFO(ctx.Error());
    REQUIRE(st == OCTATTN_OK);
  }
  for (int x = 0; x < 3; ++x) REQUIRE(BytesEqual(g[0][x], g[1][x]));
}

// Key lists (options.key_indices, key_counts): INT32 [entries, heads, rows, n] indices,
// -1 for none, and [entries, heads, rows, 1] counts.
struct Lists {
  int64_t e = 0, h = 0, rows = 0, n = 0;
  std::vector<int32_t> idx, cnt;
  octattn_tensor ti{}, tc{};
  Lists(int64_t entries, int64_t heads, int64_t r, int64_t cap)
      : e(entries),
        h(heads),
        rows(r),
        n(cap),
        idx(entries * heads * r * cap, -1),
        cnt(entries * heads * r, 0) {
    Build();
  }
  Lists(const Lists& o) : e(o.e), h(o.h), rows(o.rows), n(o.n), idx(o.idx), cnt(o.cnt) { Build(); }
  Lists& operator=(const Lists&) = delete;
  int32_t& at(int64_t b, int64_t g, int64_t i, int64_t x) {
    return idx[((b * h + g) * rows + i) * n + x];
  }
  int32_t& count(int64_t b, int64_t g, int64_t i) { return cnt[(b * h + g) * rows + i]; }
  int32_t count(int64_t b, int64_t g, int64_t i) const { return cnt[(b * h + g) * rows + i]; }
  int32_t at(int64_t b, int64_t g, int64_t i, int64_t x) const {
    return idx[((b * h + g) * rows + i) * n + x];
  }
  void Build() {
    const int64_t is[4] = {e, h, rows, n}, cs[4] = {e, h, rows, 1};
    for (int w = 0; w < 2; ++w) {
      octattn_tensor& t = w ? tc : ti;
      t = octattn_tensor{};
      t.dtype = OCTATTN_DTYPE_INT32;
      t.data = w ? static_cast<void*>(cnt.data()) : static_cast<void*>(idx.data());
      int64_t stride = 1;
      for (int d = 3; d >= 0; --d) {
        t.shape[d] = w ? cs[d] : is[d];
        t.stride[d] = stride;
        stride *= t.shape[d];
      }
    }
  }
  // Whether row i of entry b, kv head g lists key j.
  bool Has(int64_t b, int64_t g, int64_t i, int64_t j) const {
    const int64_t base = ((b * h + g) * rows + i) * n;
    const int64_t c = cnt[(b * h + g) * rows + i];
    for (int64_t x = 0; x < c; ++x)
      if (idx[base + x] == j) return true;
    return false;
  }
};

// A full problem: q, k, v seeded; `range` scales q and k so that scores reach the
// range where an unstable softmax overflows.
struct Problem {
  Tensor q, k, v;
  Problem(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t kv_len,
          int64_t head_dim, int64_t value_dim, uint32_t seed, float range = 1.0f,
          int layout = kBHTD)
      : q(batch, q_heads, q_len, head_dim, layout),
        k(batch, kv_heads, kv_len, head_dim, layout),
        v(batch, kv_heads, kv_len, value_dim, layout) {
    q.Fill(seed, -range, range);
    k.Fill(seed + 1, -range, range);
    v.Fill(seed + 2);
  }
  Tensor Out(int layout = kBHTD) const {
    return Tensor(q.shape[0], q.shape[1], q.shape[2], v.shape[3], layout);
  }
  Tensor Lse() const { return Tensor(q.shape[0], q.shape[1], q.shape[2], 1); }
  Tensor Weights() const { return Tensor(q.shape[0], q.shape[1], q.shape[2], k.shape[2]); }
};

// p's call under opt keeps its bytes (o and lse) on 2 and 3 threads and in the BHTD,
// BTHD and padded layouts, against one thread in p's own.
template <class P>
void RequireThreadAndLayoutInvariance(const octattn_attention_options& opt, const P& p) {
  Context one(1);
  Tensor o = p.Out(), lse = p.Lse();
  Attend(one, opt, p.q, p.k, p.v, o, &lse);
  for (int threads : {2, 3})
    for (Layout layout : {Layout::kBHTD, Layout::kBTHD, Layout::kPadded}) {
      INFO("threads " << threads << " layout " << layout);
      Problem other(p.q.shape[0], p.q.shape[1], p.k.shape[1], p.q.shape[2], p.k.shape[2],
                    p.q.shape[3], p.v.shape[3], 1, 1.0f, layout);
      other.q.CopyValuesFrom(p.q);
      other.k.CopyValuesFrom(p.k);
      other.v.CopyValuesFrom(p.v);
      Context ctx(threads);
      Tensor oo = other.Out(layout), olse = other.Lse();
      Attend(ctx, opt, other.q, other.k, other.v, oo, &olse);
      Tensor back = p.Out();
      back.CopyValuesFrom(oo);
      REQUIRE(BytesEqual(o, back));
      REQUIRE(BytesEqual(lse, olse));
    }
}

// Accuracy bound against the fp64 reference, relative to max |v| (tests/README.md).
constexpr double kTolerance = 5e-7;
// The bound's term for dot products that cancel, per unit of C (below).
constexpr double kCancelTolerance = 1e-8;

// S: the largest |scaled score|; C: the largest scale * sum_d |q_d k_d|, over every
// (query, key) pair of a GQA problem (at least the maxima over the allowed pairs).
struct ScoreRange {
  double s = 0, c = 0;
};
inline ScoreRange Scores(const Tensor& q, const Tensor& k, double scale) {
  ScoreRange r;
  const int64_t group = q.shape[1] / k.shape[1];
  for (int64_t b = 0; b < q.shape[0]; ++b)
    for (int64_t h = 0; h < q.shape[1]; ++h)
      for (int64_t i = 0; i < q.shape[2]; ++i)
        for (int64_t j = 0; j < k.shape[2]; ++j) {
          double dot = 0, abs = 0;
          for (int64_t d = 0; d < q.shape[3]; ++d) {
            const double x = static_cast<double>(q.at(b, h, i, d)) * k.at(b, h / group, j, d);
            dot += x;
            abs += std::fabs(x);
          }
          r.s = std::fmax(r.s, std::fabs(dot * scale));
          r.c = std::fmax(r.c, abs * std::fabs(scale));
        }
  return r;
}
// The header's bound on |o - reference| per element:
// max|v| * (5e-7 * max(1, S) + 1e-8 * C).
inline double Bound(const Tensor& q, const Tensor& k, const Tensor& v, double scale = 0) {
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(q.shape[3]));
  const ScoreRange r = Scores(q, k, scale);
  return v.MaxAbs() * (kTolerance * std::fmax(1.0, r.s) + kCancelTolerance * r.c);
}

// p's call under opt is within the accuracy bound of the reference's.
template <class P>
void RequireWithinReference(Context& ctx, const octattn_attention_options& opt, const P& p) {
  octattn_attention_options ropt = opt;
  ropt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  Tensor o = p.Out(), ro = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
  Attend(ctx, ropt, p.q, p.k, p.v, ro);
  REQUIRE(MaxDiff(o, ro) <= Bound(p.q, p.k, p.v));
}

}  // namespace octtest

#endif  // OCTATTN_TESTS_SUPPORT_H_
