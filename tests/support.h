// Test support: seeded tensors in any layout, the targets to sweep, and calls of the
// public API that fail the test with the library's message.
#ifndef OCTATTN_TESTS_SUPPORT_H_
#define OCTATTN_TESTS_SUPPORT_H_

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "octattn.h"

namespace octtest {

// The [dispatch] tests also run under qemu (tests/CMakeLists.txt sets
// OCTATTN_TEST_EMULATED there), 10-500x slower than a real core: there they take small
// shapes, since their job is to prove dispatch and per-target results, not to sweep.
inline bool Emulated() {
  static const bool emulated = std::getenv("OCTATTN_TEST_EMULATED") != nullptr;
  return emulated;
}
inline int64_t Sized(int64_t native, int64_t emulated) { return Emulated() ? emulated : native; }

// A logical [d0, d1, d2, d3] f32 tensor in its own buffer, in one of several layouts.
enum class Layout { kBHTD, kBTHD, kPadded, kTransposedDim };

struct Tensor {
  std::vector<float> buf;
  octattn_tensor t{};
  int64_t shape[4] = {0, 0, 0, 0};

  Tensor() = default;
  Tensor(const int64_t s[4], Layout layout = Layout::kBHTD) { Reset(s, layout); }
  Tensor(int64_t a, int64_t b, int64_t c, int64_t d, Layout layout = Layout::kBHTD) {
    const int64_t s[4] = {a, b, c, d};
    Reset(s, layout);
  }
  Tensor(const Tensor& o) : buf(o.buf), t(o.t) {
    std::memcpy(shape, o.shape, sizeof(shape));
    t.data = buf.data();
  }
  Tensor& operator=(const Tensor& o) {
    buf = o.buf;
    t = o.t;
    std::memcpy(shape, o.shape, sizeof(shape));
    t.data = buf.data();
    return *this;
  }

  void Reset(const int64_t s[4], Layout layout) {
    std::memcpy(shape, s, sizeof(shape));
    t.dtype = OCTATTN_DTYPE_F32;
    t.reserved = 0;
    for (int d = 0; d < 4; ++d) t.shape[d] = s[d];
    int64_t* st = t.stride;
    switch (layout) {
      case Layout::kBHTD:
        st[3] = 1, st[2] = s[3], st[1] = s[2] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
      case Layout::kBTHD:
        st[3] = 1, st[1] = s[3], st[2] = s[1] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
      case Layout::kPadded:  // rows padded by 3 elements, heads by one extra row
        st[3] = 1, st[2] = s[3] + 3, st[1] = (s[2] + 1) * (s[3] + 3), st[0] = s[1] * st[1] + 5;
        break;
      case Layout::kTransposedDim:  // dim is the slowest axis inside a head
        st[2] = 1, st[3] = s[2], st[1] = s[2] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
    }
    int64_t span = 1;
    for (int d = 0; d < 4; ++d) span += (s[d] - 1) * st[d];
    buf.assign(static_cast<size_t>(span), 0.0f);
    t.data = buf.data();
  }

  float& at(int64_t a, int64_t b, int64_t c, int64_t d) {
    return buf[a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3]];
  }
  float at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return buf[a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3]];
  }
  octattn_tensor* ptr() { return &t; }
  const octattn_tensor* ptr() const { return &t; }

  void Fill(uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) { at(a, b, c, d) = dist(rng); });
  }
  void CopyValuesFrom(const Tensor& o) {
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) { at(a, b, c, d) = o.at(a, b, c, d); });
  }
  template <class F>
  void ForEach(F&& f) const {
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c)
          for (int64_t d = 0; d < shape[3]; ++d) f(a, b, c, d);
  }
  float MaxAbs() const {
    float m = 0;
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      m = std::fmax(m, std::fabs(at(a, b, c, d)));
    });
    return m;
  }
};

// A bool tensor in its own buffer: logical [d0, d1, d2, d3], size-1 dimensions broadcast.
struct BoolTensor {
  std::vector<uint8_t> buf;
  octattn_tensor t{};
  explicit BoolTensor(const int64_t s[4]) {
    t.dtype = OCTATTN_DTYPE_BOOL;
    int64_t stride = 1;
    for (int d = 3; d >= 0; --d) {
      t.shape[d] = s[d];
      t.stride[d] = stride;
      stride *= s[d];
    }
    buf.assign(static_cast<size_t>(stride), 1);
    t.data = buf.data();
  }
  uint8_t& at(int64_t a, int64_t b, int64_t c, int64_t d) {
    return buf[(a % t.shape[0]) * t.stride[0] + (b % t.shape[1]) * t.stride[1] +
               (c % t.shape[2]) * t.stride[2] + (d % t.shape[3]) * t.stride[3]];
  }
};

// Bitwise equality of two rows (c fixed) of same-shaped tensors.
inline bool RowBytesEqual(const Tensor& x, const Tensor& y, int64_t a, int64_t b, int64_t c) {
  for (int64_t d = 0; d < x.shape[3]; ++d) {
    const float u = x.at(a, b, c, d), w = y.at(a, b, c, d);
    if (std::memcmp(&u, &w, sizeof(float)) != 0) return false;
  }
  return true;
}
inline bool BytesEqual(const Tensor& x, const Tensor& y) {
  for (int64_t a = 0; a < x.shape[0]; ++a)
    for (int64_t b = 0; b < x.shape[1]; ++b)
      for (int64_t c = 0; c < x.shape[2]; ++c)
        if (!RowBytesEqual(x, y, a, b, c)) return false;
  return true;
}

// max |x - y| over elements; NaN in exactly one of them counts as infinity.
inline double MaxDiff(const Tensor& x, const Tensor& y) {
  double m = 0;
  x.ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
    const float u = x.at(a, b, c, d), w = y.at(a, b, c, d);
    if (std::isnan(u) || std::isnan(w)) {
      if (std::isnan(u) != std::isnan(w)) m = INFINITY;
      return;
    }
    if (u == w) return;  // also equal infinities
    m = std::fmax(m, std::fabs(static_cast<double>(u) - w));
  });
  return m;
}

struct Target {
  octattn_backend backend;
  octattn_target target;
  std::string Name() const {
    return std::string(octattn_backend_name(backend)) + "/" + octattn_target_name(target);
  }
};

// Every compiled target of both backends that this CPU runs.
inline std::vector<Target> AllTargets() {
  std::vector<Target> out;
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD}) {
    octattn_target list[8];
    size_t n = 0;
    REQUIRE(octattn_available_targets(b, list, 8, &n) == OCTATTN_OK);
    for (size_t i = 0; i < n; ++i) out.push_back({b, list[i]});
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

// A full problem: q, k, v seeded; `range` scales q and k so that scores reach the
// range where an unstable softmax overflows.
struct Problem {
  Tensor q, k, v;
  Problem(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t kv_len,
          int64_t head_dim, int64_t value_dim, uint32_t seed, float range = 1.0f,
          Layout layout = Layout::kBHTD)
      : q(batch, q_heads, q_len, head_dim, layout),
        k(batch, kv_heads, kv_len, head_dim, layout),
        v(batch, kv_heads, kv_len, value_dim, layout) {
    q.Fill(seed, -range, range);
    k.Fill(seed + 1, -range, range);
    v.Fill(seed + 2);
  }
  Tensor Out(Layout layout = Layout::kBHTD) const {
    return Tensor(q.shape[0], q.shape[1], q.shape[2], v.shape[3], layout);
  }
  Tensor Lse() const { return Tensor(q.shape[0], q.shape[1], q.shape[2], 1); }
  Tensor Weights() const { return Tensor(q.shape[0], q.shape[1], q.shape[2], k.shape[2]); }
};

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

}  // namespace octtest

#endif  // OCTATTN_TESTS_SUPPORT_H_
