// The header's byte invariants on the reference, naive and fused paths of every target: causality
// (with NaN and Inf edits), thread, layout and shard invariance, byte for byte.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <limits>
#include <random>

#include "lib/base/dtype.h"
#include "support.h"

using namespace octtest;

namespace {

struct Path {
  octattn_algorithm algorithm;
  Target target;
  std::string Name() const {
    return std::string(octattn_algorithm_name(algorithm)) + " " + target.Name();
  }
};

std::vector<Path> AllPaths() {
  std::vector<Path> out{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) {
    out.push_back({OCTATTN_ALGORITHM_NAIVE, t});
    out.push_back({OCTATTN_ALGORITHM_FUSED, t});
  }
  return out;
}

struct MaskCase {
  int64_t window, stride;
};
const MaskCase kMasks[] = {{0, 0}, {5, 0}, {6, 4}, {1, 0}};

const float kEdits[] = {
    std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 1e30f, -3.5f, 0.0f};

}  // namespace

TEST_CASE("causality: editing position p leaves every earlier row byte-identical",
          "[invariants][dispatch]") {
  for (const Path& path : AllPaths()) {
    for (const MaskCase& m : kMasks) {
      if (Emulated() && (m.window == 5 || m.window == 1)) continue;
      for (int64_t kv_len : {23, 40}) {  // square, and 17 queries at the end of 40 keys
        const int64_t q_len = 23;
        Problem base(2, 4, 2, q_len, kv_len, 16, 16, 77);
        Context ctx(path.target);
        const octattn_attention_options opt = Options(1, m.window, m.stride, path.algorithm);
        Tensor ref = base.Out();
        Attend(ctx, opt, base.q, base.k, base.v, ref);
        const int64_t q_start = kv_len - q_len;
        for (int64_t p : {int64_t{0}, int64_t{7}, kv_len - 9, kv_len - 1}) {
          if (Emulated() && (p == 0 || p == kv_len - 9)) continue;
          for (float edit : kEdits) {
            if (Emulated() && std::isfinite(edit) && edit != -3.5f) continue;
            INFO(path.Name() << " window " << m.window << " stride " << m.stride << " kv_len "
                             << kv_len << " p " << p << " edit " << edit);
            Problem e = base;
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t d = 0; d < 16; ++d) {
                e.k.at(1, h, p, d) = edit;
                e.v.at(1, h, p, d) = edit;
              }
            if (p - q_start >= 0)
              for (int64_t h = 0; h < 4; ++h)
                for (int64_t d = 0; d < 16; ++d) e.q.at(1, h, p - q_start, d) = edit;
            Tensor out = e.Out();
            Attend(ctx, opt, e.q, e.k, e.v, out);
            for (int64_t h = 0; h < 4; ++h)
              for (int64_t i = 0; i < q_len; ++i) {
                // Batch 0 is untouched everywhere; batch 1 before position p.
                REQUIRE(RowBytesEqual(out, ref, 0, h, i));
                if (q_start + i < p) REQUIRE(RowBytesEqual(out, ref, 1, h, i));
              }
          }
        }
      }
    }
  }
}

TEST_CASE("a masked NaN never reaches the output, an allowed one does", "[invariants]") {
  for (const Path& path : AllPaths()) {
    INFO(path.Name());
    Problem p(1, 1, 1, 12, 12, 8, 8, 4);
    for (int64_t d = 0; d < 8; ++d) p.v.at(0, 0, 3, d) = NAN;
    Context ctx(path.target);
    Tensor o = p.Out();
    Attend(ctx, Options(1, 2, 0, path.algorithm), p.q, p.k, p.v, o);  // window 2
    for (int64_t i = 0; i < 12; ++i) {
      const bool reads_3 = i == 3 || i == 4;
      for (int64_t d = 0; d < 8; ++d) CHECK(std::isnan(o.at(0, 0, i, d)) == reads_3);
    }
  }
}

TEST_CASE("thread count does not change a byte", "[invariants]") {
  Problem p(3, 4, 2, 45, 45, 32, 32, 5);
  for (const Path& path : AllPaths()) {
    INFO(path.Name());
    Context one(path.target, 1), two(path.target, 2), all(path.target, 0);
    Tensor a = p.Out(), b = p.Out(), c = p.Out();
    const auto opt = Options(1, 9, 4, path.algorithm);
    Attend(one, opt, p.q, p.k, p.v, a);
    Attend(two, opt, p.q, p.k, p.v, b);
    Attend(all, opt, p.q, p.k, p.v, c);
    CHECK(BytesEqual(a, b));
    CHECK(BytesEqual(a, c));
  }
}

TEST_CASE("layout does not change a byte: BHTD, BTHD, padded, strided dim, packed QKV",
          "[invariants]") {
  const int64_t B = 2, Hq = 4, Hkv = 2, T = 19, D = 12;
  Problem base(B, Hq, Hkv, T, T, D, D, 6);
  // The packed projection output [B, T, (Hq + 2 Hkv) D], viewed as q, k and v.
  std::vector<float> packed(static_cast<size_t>(B * T * (Hq + 2 * Hkv) * D));
  const int64_t C = (Hq + 2 * Hkv) * D;
  auto view = [&](int64_t heads, int64_t offset) {
    octattn_tensor t{};
    t.data = packed.data() + offset;
    t.dtype = OCTATTN_DTYPE_F32;
    const int64_t shape[4] = {B, heads, T, D}, stride[4] = {T * C, D, C, 1};
    for (int d = 0; d < 4; ++d) t.shape[d] = shape[d], t.stride[d] = stride[d];
    return t;
  };
  const octattn_tensor pq = view(Hq, 0), pk = view(Hkv, Hq * D), pv = view(Hkv, (Hq + Hkv) * D);
  auto put = [&](const Tensor& src, const octattn_tensor& dst) {
    src.ForEach([&](int64_t b, int64_t h, int64_t t, int64_t d) {
      static_cast<float*>(dst.data)[b * dst.stride[0] + h * dst.stride[1] + t * dst.stride[2] + d] =
          src.at(b, h, t, d);
    });
  };
  put(base.q, pq);
  put(base.k, pk);
  put(base.v, pv);

  for (const Path& path : AllPaths()) {
    INFO(path.Name());
    Context ctx(path.target);
    const auto opt = Options(1, 7, 3, path.algorithm);
    Tensor ref = base.Out();
    Attend(ctx, opt, base.q, base.k, base.v, ref);
    for (Layout layout : {Layout::kBTHD, Layout::kPadded, Layout::kDimSlowest}) {
      Problem other(B, Hq, Hkv, T, T, D, D, 6, 1.0f, layout);
      other.q.CopyValuesFrom(base.q);
      other.k.CopyValuesFrom(base.k);
      other.v.CopyValuesFrom(base.v);
      Tensor out = base.Out(layout);
      Attend(ctx, opt, other.q, other.k, other.v, out);
      CHECK(BytesEqual(out, ref));
    }
    Tensor out = base.Out(Layout::kBTHD);
    REQUIRE(octattn_attention(ctx, &opt, &pq, &pk, &pv, out.ptr(), nullptr, nullptr, nullptr, 0) ==
            OCTATTN_OK);
    CHECK(BytesEqual(out, ref));
  }
}

TEST_CASE("a subset of batches or heads gives the same bytes", "[invariants]") {
  Problem p(3, 4, 2, 26, 26, 16, 16, 9);
  for (const Path& path : AllPaths()) {
    INFO(path.Name());
    Context ctx(path.target);
    const auto opt = Options(1, 0, 0, path.algorithm);
    Tensor full = p.Out();
    Attend(ctx, opt, p.q, p.k, p.v, full);
    // Batch 1 alone, and q heads 2..3 (kv head 1) alone, as views of the same buffers.
    for (int shard = 0; shard < 2; ++shard) {
      Problem s = p;
      Tensor out = p.Out();
      octattn_tensor q = s.q.t, k = s.k.t, v = s.v.t, o = out.t;
      if (shard == 0) {
        for (octattn_tensor* t : {&q, &k, &v, &o}) {
          t->data = static_cast<float*>(t->data) + t->stride[0];
          t->shape[0] = 1;
        }
      } else {
        q.data = static_cast<float*>(q.data) + 2 * q.stride[1];
        o.data = static_cast<float*>(o.data) + 2 * o.stride[1];
        k.data = static_cast<float*>(k.data) + k.stride[1];
        v.data = static_cast<float*>(v.data) + v.stride[1];
        q.shape[1] = o.shape[1] = 2;
        k.shape[1] = v.shape[1] = 1;
      }
      REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, nullptr, 0) ==
              OCTATTN_OK);
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t h = 0; h < 4; ++h) {
          const bool inside = shard == 0 ? b == 1 : h >= 2;
          if (!inside) continue;
          for (int64_t i = 0; i < 26; ++i) CHECK(RowBytesEqual(out, full, b, h, i));
        }
    }
  }
}

namespace {

// A [1, 1, kv_len, dim] tensor whose rows below `first` (or, if first is 0, from `last`
// on) lie on inaccessible pages: a call that loads any of them crashes the test.
class GuardedRows {
 public:
  GuardedRows(int64_t kv_len, int64_t dim, int64_t first, int64_t last, uint32_t seed,
              octattn_dtype type = OCTATTN_DTYPE_F32) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t elem = type == OCTATTN_DTYPE_F32 ? 4 : 2;
    const size_t row = static_cast<size_t>(dim) * elem;
    // Row `first` starts on a page boundary; rows from `last` on start a PROT_NONE page.
    const size_t before = (static_cast<size_t>(first) * row + page - 1) / page * page;
    const size_t readable = (static_cast<size_t>(last - first) * row + page - 1) / page * page;
    const size_t after = (static_cast<size_t>(kv_len - last) * row + page - 1) / page * page + page;
    size_ = before + readable + after + page;
    base_ = static_cast<char*>(mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(base_ != MAP_FAILED);
    // Row `first` starts the readable pages (rows below it are on the guard pages), or,
    // when there are no such rows, row `last` starts the guard page after them.
    char* first_row = base_ + before + page;
    if (first == 0) first_row += readable - static_cast<size_t>(last - first) * row;
    REQUIRE(mprotect(base_ + before + page, readable, PROT_READ | PROT_WRITE) == 0);
    char* data = first_row - static_cast<size_t>(first) * row;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = first * dim; i < last * dim; ++i) {
      const float x = dist(rng);
      if (type == OCTATTN_DTYPE_F32)
        reinterpret_cast<float*>(data)[i] = x;
      else
        reinterpret_cast<uint16_t*>(data)[i] =
            type == OCTATTN_DTYPE_BF16 ? octattn::base::F32ToBf16(x) : octattn::base::F32ToF16(x);
    }
    t_.data = data;
    t_.dtype = type;
    const int64_t shape[4] = {1, 1, kv_len, dim}, stride[4] = {kv_len * dim, kv_len * dim, dim, 1};
    for (int d = 0; d < 4; ++d) t_.shape[d] = shape[d], t_.stride[d] = stride[d];
  }
  ~GuardedRows() { munmap(base_, size_); }
  const octattn_tensor* ptr() const { return &t_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  octattn_tensor t_{};
};

}  // namespace

TEST_CASE("key and value rows no query of the call may read are never loaded", "[invariants]") {
  // Rows outside [first, last) of k and v sit on inaccessible pages. Cases: a decode
  // step and a chunked prefill under a sliding window (rows below the first query's
  // window), and a causal call with an explicit q_start (rows past the last query);
  // the last two read whole key tiles in place (decode-sized rows, dim 64).
  struct GuardCase {
    int64_t q_len, kv_len, window, q_start, first, last;
  };
  const int64_t rows = Sized(300, 40);  // emulated: 40 prefill rows
  const GuardCase cases[] = {
      {1, 5000, 100, 4999, 4900, 5000},                        // decode: rows below 4900 unread
      {rows, 5000, 100, 5000 - rows, 5000 - rows - 99, 5000},  // prefill rows at 5000 - rows..4999
      {3, 5000, 0, 100, 0, 103},                               // plain causal: rows past 102 unread
      {1, 5000, 600, 4999, 4400, 5000},                        // decode, window over whole tiles
      {2, 5000, 0, 1300, 0, 1302},                             // two queries: rows past 1301 unread
  };
  // Keys and values in f32, and as a bf16 and an f16 cache (widened as they are read).
  const octattn_dtype types[] = {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16};
  for (const GuardCase& g : cases)
    for (int64_t dim : {64, 20})  // 20: value rows are packed copies, not direct
      for (octattn_dtype type : types) {
        INFO("q_len " << g.q_len << " window " << g.window << " dim " << dim << " dtype " << type);
        GuardedRows k(g.kv_len, dim, g.first, g.last, 1, type),
            v(g.kv_len, dim, g.first, g.last, 2, type);
        Tensor q(1, 2, g.q_len, dim);
        q.Fill(3);
        const auto opt = Options(1, g.window, 0, OCTATTN_ALGORITHM_REFERENCE, g.q_start);
        Tensor ref(1, 2, g.q_len, dim);
        {
          Context ctx;
          REQUIRE(octattn_attention(ctx, &opt, q.ptr(), k.ptr(), v.ptr(), ref.ptr(), nullptr,
                                    nullptr, nullptr, 0) == OCTATTN_OK);
        }
        for (const Target& t : AllTargets())
          for (octattn_algorithm algo : {OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_FUSED}) {
            INFO(t.Name() << " " << octattn_algorithm_name(algo));
            Context ctx(t);
            auto o_opt = opt;
            o_opt.algorithm = algo;
            Tensor o(1, 2, g.q_len, dim);
            REQUIRE(octattn_attention(ctx, &o_opt, q.ptr(), k.ptr(), v.ptr(), o.ptr(), nullptr,
                                      nullptr, nullptr, 0) == OCTATTN_OK);
            CHECK(MaxDiff(o, ref) <= 2 * kTolerance);
          }
      }
}
