// The one harness of the tests and the fuzz targets: tensors in their own buffers in
// several layouts, bool tensors, 16-bit calls of f32 tensors, and byte comparisons.
// Public API only, but for the library's exact 16-bit conversions (lib/base/dtype.h):
// a 16-bit call's inputs are the f32 tensors narrowed the library's way. The tests add
// Catch2's calls (tests/support.h), the fuzz targets the input's parsing
// (fuzz/fuzz_support.h).
#ifndef OCTATTN_TESTS_HARNESS_TENSORS_H_
#define OCTATTN_TESTS_HARNESS_TENSORS_H_

#include <stddef.h>
#include <stdint.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lib/base/dtype.h"
#include "octattn.h"

// The tensors' plumbing (element loops, copies, comparisons of outputs) carries no
// coverage instrumentation in libFuzzer builds: its comparisons are of indices and
// bytes, never of the input's choices, and a callback on each cost a fifth of a
// backward input.
#if defined(__clang__)
#define HARNESS_PLUMBING __attribute__((no_sanitize("coverage")))
#else
#define HARNESS_PLUMBING
#endif

namespace octattn_harness {

// Blocks of a megabyte or more are kept for the next tensors (a few): a fresh one costs a
// page fault a page, which took most of a long fuzz input's time.
class BigBlocks {
 public:
  static constexpr size_t kBig = size_t{1} << 18;  // floats
  ~BigBlocks() {
    for (const Block& b : free_) delete[] b.p;
  }
  HARNESS_PLUMBING float* Take(size_t n, size_t* cap) {
    if (n >= kBig)
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].cap >= n && free_[i].cap / 2 <= n) {
          float* p = free_[i].p;
          *cap = free_[i].cap;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return p;
        }
    *cap = n;
    return new float[n > 0 ? n : 1];
  }
  HARNESS_PLUMBING void Give(float* p, size_t cap) {
    if (!p) return;
    if (cap >= kBig && free_.size() < 6) {
      free_.push_back({p, cap});
      return;
    }
    delete[] p;
  }
  static BigBlocks& Get() {
    static BigBlocks blocks;
    return blocks;
  }

 private:
  struct Block {
    float* p;
    size_t cap;
  };
  std::vector<Block> free_;
};

// A zeroed buffer of floats, made and copied with memset and memcpy: tensors reach
// megabytes (decode's rows 4 KiB apart), and element loops carry libFuzzer's comparison
// callbacks, one an element (std::vector's fill and copy loops among them).
class Floats {
 public:
  Floats() = default;
  explicit Floats(size_t n) : n_(n), p_(BigBlocks::Get().Take(n, &cap_)) {
    std::memset(p_, 0, n * 4);
  }
  Floats(const Floats& o) { *this = o; }
  Floats& operator=(const Floats& o) {
    if (this != &o) Assign(o.p_, o.n_);
    return *this;
  }
  Floats(Floats&& o) noexcept : n_(o.n_), cap_(o.cap_), p_(o.p_) { o.p_ = nullptr; }
  Floats& operator=(Floats&& o) noexcept {
    if (this == &o) return *this;
    BigBlocks::Get().Give(p_, cap_);
    n_ = o.n_;
    cap_ = o.cap_;
    p_ = o.p_;
    o.p_ = nullptr;
    return *this;
  }
  ~Floats() { BigBlocks::Get().Give(p_, cap_); }
  // As a vector and from one (the tests' snapshots of a buffer).
  Floats& operator=(const std::vector<float>& v) {
    Assign(v.data(), v.size());
    return *this;
  }
  operator std::vector<float>() const { return std::vector<float>(p_, p_ + n_); }
  // Element by element, as std::vector's == (NaN equals nothing).
  bool operator==(const std::vector<float>& v) const {
    if (v.size() != n_) return false;
    for (size_t i = 0; i < n_; ++i)
      if (!(p_[i] == v[i])) return false;
    return true;
  }
  bool operator==(const Floats& o) const { return *this == static_cast<std::vector<float>>(o); }
  float* data() { return p_; }
  const float* data() const { return p_; }
  size_t size() const { return n_; }
  HARNESS_PLUMBING float& operator[](size_t i) { return p_[i]; }
  HARNESS_PLUMBING const float& operator[](size_t i) const { return p_[i]; }
  float* begin() { return p_; }
  float* end() { return p_ + n_; }
  const float* begin() const { return p_; }
  const float* end() const { return p_ + n_; }

 private:
  HARNESS_PLUMBING void Assign(const float* src, size_t n) {
    BigBlocks::Get().Give(p_, cap_);
    n_ = n;
    p_ = BigBlocks::Get().Take(n_, &cap_);
    if (n_ > 0) std::memcpy(p_, src, n_ * 4);  // (an empty tensor's src may be null)
  }
  size_t n_ = 0, cap_ = 0;
  float* p_ = nullptr;
};

// The layouts of a logical [d0, d1, d2, d3] tensor. kPadded: rows padded by 3 elements,
// heads by one extra row; kDimSlowest: dim the slowest axis inside a head; kRows4K:
// [B, T, H, D] with rows 2048 elements apart (8 KiB of f32, 4 KiB of 16-bit elements:
// every row of a head in the same L1 sets, the rows decode copies a group at a time).
enum Layout : int { kBHTD = 0, kBTHD = 1, kPadded = 2, kDimSlowest = 3, kRows4K = 4 };

// A logical [d0, d1, d2, d3] f32 tensor in its own buffer.
struct Tensor {
  Floats buf;
  octattn_tensor t{};
  int64_t shape[4] = {0, 0, 0, 0};

  Tensor() = default;
  Tensor(const int64_t s[4], int layout = kBHTD) { Reset(s, layout); }
  Tensor(int64_t a, int64_t b, int64_t c, int64_t d, int layout = kBHTD) {
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
  Tensor(Tensor&& o) noexcept : buf(std::move(o.buf)), t(o.t) {
    std::memcpy(shape, o.shape, sizeof(shape));
    t.data = buf.data();
  }
  Tensor& operator=(Tensor&& o) noexcept {
    buf = std::move(o.buf);
    t = o.t;
    std::memcpy(shape, o.shape, sizeof(shape));
    t.data = buf.data();
    return *this;
  }

  void Reset(const int64_t s[4], int layout) {
    std::memcpy(shape, s, sizeof(shape));
    t.dtype = OCTATTN_DTYPE_F32;
    t.reserved = 0;
    for (int d = 0; d < 4; ++d) t.shape[d] = s[d];
    int64_t* st = t.stride;
    switch (layout) {
      case kBTHD:
        st[3] = 1, st[1] = s[3], st[2] = s[1] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
      case kPadded:
        st[3] = 1, st[2] = s[3] + 3, st[1] = (s[2] + 1) * (s[3] + 3), st[0] = s[1] * st[1] + 5;
        break;
      case kDimSlowest:
        st[2] = 1, st[3] = s[2], st[1] = s[2] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
      case kRows4K:
        st[3] = 1, st[1] = s[3], st[2] = (s[1] * s[3] + 2047) / 2048 * 2048, st[0] = s[2] * st[2];
        break;
      default:
        st[3] = 1, st[2] = s[3], st[1] = s[2] * s[3], st[0] = s[1] * s[2] * s[3];
        break;
    }
    int64_t span = 1;
    for (int d = 0; d < 4; ++d) span += (s[d] - 1) * st[d];
    buf = Floats(static_cast<size_t>(span));
    t.data = buf.data();
  }

  HARNESS_PLUMBING float& at(int64_t a, int64_t b, int64_t c, int64_t d) {
    return buf[a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3]];
  }
  HARNESS_PLUMBING const float& at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return buf[a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3]];
  }
  octattn_tensor* ptr() { return &t; }
  const octattn_tensor* ptr() const { return &t; }

  template <class F>
  HARNESS_PLUMBING void ForEach(F&& f) const {
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c)
          for (int64_t d = 0; d < shape[3]; ++d) f(a, b, c, d);
  }
  // Seeded uniform values in [lo, hi).
  void Fill(uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) { at(a, b, c, d) = dist(rng); });
  }
  // The logical values of a tensor of the same shape in any layout.
  HARNESS_PLUMBING void CopyValuesFrom(const Tensor& o) {
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) { at(a, b, c, d) = o.at(a, b, c, d); });
  }
  float MaxAbs() const {
    float m = 0;
    ForEach([&](int64_t a, int64_t b, int64_t c, int64_t d) {
      m = std::fmax(m, std::fabs(at(a, b, c, d)));
    });
    return m;
  }
  // Row (a, b, c) of two same-shaped tensors, byte for byte.
  HARNESS_PLUMBING bool RowEquals(const Tensor& o, int64_t a, int64_t b, int64_t c) const {
    for (int64_t d = 0; d < shape[3]; ++d) {
      const float x = at(a, b, c, d), y = o.at(a, b, c, d);
      if (std::memcmp(&x, &y, sizeof(float)) != 0) return false;
    }
    return true;
  }
};

// Bitwise equality of a row (c fixed), and of every element, of same-shaped tensors.
HARNESS_PLUMBING inline bool RowBytesEqual(const Tensor& x, const Tensor& y, int64_t a, int64_t b,
                                           int64_t c) {
  return x.RowEquals(y, a, b, c);
}
HARNESS_PLUMBING inline bool BytesEqual(const Tensor& x, const Tensor& y) {
  for (int64_t a = 0; a < x.shape[0]; ++a)
    for (int64_t b = 0; b < x.shape[1]; ++b)
      for (int64_t c = 0; c < x.shape[2]; ++c)
        if (!x.RowEquals(y, a, b, c)) return false;
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

// A bool tensor (a mask) in its own buffer, every entry 1: logical [d0, d1, d2, d3],
// dimensions of size 1 broadcast.
struct BoolTensor {
  std::vector<uint8_t> buf;
  octattn_tensor t{};
  explicit BoolTensor(const int64_t s[4]) { Reset(s); }
  BoolTensor(int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t s[4] = {a, b, c, d};
    Reset(s);
  }
  void Reset(const int64_t s[4]) {
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
  HARNESS_PLUMBING uint8_t& at(int64_t a, int64_t b, int64_t c, int64_t d) {
    return buf[(a % t.shape[0]) * t.stride[0] + (b % t.shape[1]) * t.stride[1] +
               (c % t.shape[2]) * t.stride[2] + (d % t.shape[3]) * t.stride[3]];
  }
};

// A block mask (options.block_counts ...) built from each query block's kinds of key
// blocks (0 unlisted, 1 partial, 2 full) over [entries, heads, q_blocks, key_blocks]:
// the lists ascending, `spare` unused entries after each list (filled with -1, never
// read).
struct BlockMask {
  int64_t e = 0, h = 0, qb = 0, kb = 0, n = 0, block_q = 1, block_kv = 1;
  std::vector<uint8_t> kinds;
  std::vector<int32_t> counts[2], indices[2];
  octattn_tensor t[4]{};
  BlockMask() = default;
  BlockMask(int64_t entries, int64_t heads, int64_t q_blocks, int64_t key_blocks, int64_t bq,
            int64_t bkv)
      : e(entries), h(heads), qb(q_blocks), kb(key_blocks), block_q(bq), block_kv(bkv) {
    kinds.assign(static_cast<size_t>(e * h * qb * kb), 0);
  }
  HARNESS_PLUMBING uint8_t& at(int64_t a, int64_t b, int64_t c, int64_t d) {
    return kinds[static_cast<size_t>(((a * h + b) * qb + c) * kb + d)];
  }
  HARNESS_PLUMBING uint8_t kind(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return kinds[static_cast<size_t>((((a % e) * h + b % h) * qb + c) * kb + d)];
  }
  // The tensors, from the kinds (call after the last change); as_partial: the full
  // blocks listed as partial (the same pairs where no mask tensor applies), no full list.
  void Build(int64_t spare = 1, bool as_partial = false) {
    auto list_of = [&](uint8_t k) -> int { return k == 0 ? -1 : (as_partial ? 0 : k - 1); };
    n = 1;
    for (int64_t x = 0; x < e * h * qb; ++x)
      for (int l = 0; l < 2; ++l) {
        int64_t c = 0;
        for (int64_t d = 0; d < kb; ++d) c += list_of(kinds[static_cast<size_t>(x * kb + d)]) == l;
        n = c + spare > n ? c + spare : n;
      }
    for (int l = 0; l < 2; ++l) {
      counts[l].assign(static_cast<size_t>(e * h * qb), 0);
      indices[l].assign(static_cast<size_t>(e * h * qb * n), -1);
      for (int64_t x = 0; x < e * h * qb; ++x) {
        int32_t c = 0;
        for (int64_t d = 0; d < kb; ++d)
          if (list_of(kinds[static_cast<size_t>(x * kb + d)]) == l)
            indices[l][static_cast<size_t>(x * n + c++)] = static_cast<int32_t>(d);
        counts[l][static_cast<size_t>(x)] = c;
      }
      const int64_t cs[4] = {e, h, qb, 1}, is[4] = {e, h, qb, n};
      for (int w = 0; w < 2; ++w) {
        octattn_tensor& v = t[2 * l + w];
        v = octattn_tensor{};
        v.dtype = OCTATTN_DTYPE_INT32;
        v.data = w ? static_cast<void*>(indices[l].data()) : static_cast<void*>(counts[l].data());
        int64_t stride = 1;
        for (int d = 3; d >= 0; --d) {
          v.shape[d] = w ? is[d] : cs[d];
          v.stride[d] = stride;
          stride *= v.shape[d];
        }
      }
    }
  }
  // Into a call's options (with_full false: no full list).
  void Into(octattn_attention_options* opt, bool with_full = true) const {
    opt->block_counts = &t[0];
    opt->block_indices = &t[1];
    opt->full_block_counts = with_full ? &t[2] : nullptr;
    opt->full_block_indices = with_full ? &t[3] : nullptr;
    opt->block_q = block_q;
    opt->block_kv = block_kv;
  }
  // Whether row i reads key j by the lists alone (partial: `partial_bit` decides).
  HARNESS_PLUMBING bool Reads(int64_t a, int64_t b, int64_t i, int64_t j, bool partial_bit) const {
    const uint8_t k = kind(a, b, i / block_q, j / block_kv);
    return k == 2 || (k == 1 && partial_bit);
  }
};

// The element types a call passes q, k and v (and o) in. The tensors stay f32 buffers;
// Run narrows copies.
struct Dtypes {
  octattn_dtype q = OCTATTN_DTYPE_F32, kv = OCTATTN_DTYPE_F32, o = OCTATTN_DTYPE_F32;
  bool F32() const {
    return q == OCTATTN_DTYPE_F32 && kv == OCTATTN_DTYPE_F32 && o == OCTATTN_DTYPE_F32;
  }
};

HARNESS_PLUMBING inline uint16_t Narrow(float x, octattn_dtype type) {
  return type == OCTATTN_DTYPE_BF16 ? octattn::base::F32ToBf16(x) : octattn::base::F32ToF16(x);
}
HARNESS_PLUMBING inline float Widen(uint16_t h, octattn_dtype type) {
  return type == OCTATTN_DTYPE_BF16 ? octattn::base::Bf16ToF32(h) : octattn::base::F16ToF32(h);
}
// Elements a view spans (from its first to one past its last, in elements).
inline int64_t Span(const octattn_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < 4; ++i) n += (t.shape[i] - 1) * t.stride[i];
  return n;
}
// An f32 view's elements narrowed into buf, as a view of the same strides (f32: the view
// itself); the elements between them (padding, which no call reads) are zero.
HARNESS_PLUMBING inline octattn_tensor Narrowed(const octattn_tensor& t, octattn_dtype type,
                                                std::vector<uint16_t>* buf) {
  if (type == OCTATTN_DTYPE_F32) return t;
  buf->assign(static_cast<size_t>(Span(t)), 0);
  const float* src = static_cast<const float*>(t.data);
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d) {
          const int64_t i = a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3];
          (*buf)[static_cast<size_t>(i)] = Narrow(src[i], type);
        }
  octattn_tensor r = t;
  r.data = buf->data();
  r.dtype = type;
  return r;
}

// octattn_attention with f32 views, run with q, k, v and o in `ty`: 16-bit copies of the
// same strides are passed, and a 16-bit o is widened back into its view's elements.
HARNESS_PLUMBING inline octattn_status Run(const Dtypes& ty, octattn_context* ctx,
                                           const octattn_attention_options* opt,
                                           const octattn_tensor* q, const octattn_tensor* k,
                                           const octattn_tensor* v, octattn_tensor* o,
                                           octattn_tensor* lse, octattn_tensor* w) {
  if (ty.F32()) return octattn_attention(ctx, opt, q, k, v, o, lse, w, nullptr, 0);
  std::vector<uint16_t> qb, kb, vb, ob;
  const octattn_tensor q16 = Narrowed(*q, ty.q, &qb), k16 = Narrowed(*k, ty.kv, &kb),
                       v16 = Narrowed(*v, ty.kv, &vb);
  octattn_tensor o16 = Narrowed(*o, ty.o, &ob);
  const octattn_status st = octattn_attention(ctx, opt, &q16, &k16, &v16, &o16, lse, w, nullptr, 0);
  if (st != OCTATTN_OK || ty.o == OCTATTN_DTYPE_F32) return st;
  float* dst = static_cast<float*>(o->data);
  for (int64_t a = 0; a < o->shape[0]; ++a)
    for (int64_t b = 0; b < o->shape[1]; ++b)
      for (int64_t c = 0; c < o->shape[2]; ++c)
        for (int64_t d = 0; d < o->shape[3]; ++d) {
          const int64_t i =
              a * o->stride[0] + b * o->stride[1] + c * o->stride[2] + d * o->stride[3];
          dst[i] = Widen(ob[static_cast<size_t>(i)], ty.o);
        }
  return st;
}

}  // namespace octattn_harness

#endif  // OCTATTN_TESTS_HARNESS_TENSORS_H_
