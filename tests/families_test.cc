// The kernel families called through each target's table, below the C API: the fused
// task, the naive head, the backward task and the stage kernels at the edges of their
// blocks (rows around
// the micro-kernel's block height, keys around a vector, a K panel, a tile and a key
// chunk, head dimensions around a transpose block), against the reference's own entries.
// A family's bug shows here, in its own test, with the target and the shape that found
// it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lib/kernels/kernels.h"
#include "lib/reference/reference.h"

namespace base = octattn::base;
namespace kernels = octattn::kernels;
namespace reference = octattn::reference;

namespace {

struct Named {
  const kernels::Table* table;
  std::string name;
};

// Every table this CPU runs, both backends.
std::vector<Named> Tables() {
  std::vector<Named> out;
  for (int t = kernels::kScalar; t <= kernels::kLastTarget; ++t) {
    const auto target = static_cast<kernels::Target>(t);
    if (const kernels::Table* h = kernels::HighwayTable(target))
      out.push_back({h, "highway/" + std::to_string(t)});
    if (const kernels::Table* x = kernels::XsimdTable(target))
      out.push_back({x, "xsimd/" + std::to_string(t)});
  }
  return out;
}

// 64-byte aligned floats (the kernels' scratch slots are).
struct Buffer {
  explicit Buffer(size_t n) : p(static_cast<float*>(std::aligned_alloc(64, (n + 16) / 16 * 64))) {
    std::memset(p.get(), 0, (n + 16) / 16 * 64);
  }
  float* get() const { return p.get(); }
  struct Free {
    void operator()(float* f) const { std::free(f); }
  };
  std::unique_ptr<float, Free> p;
};

// `heads` query heads of one kv head, contiguous rows: q [heads][q_len][d], k [kv_len][d],
// v [kv_len][dv], o [heads][q_len][dv], lse [heads][q_len].
struct Group {
  int64_t heads, q_len, kv_len, d, dv;
  std::vector<float> q, k, v;
  Group(int64_t heads_, int64_t q_len_, int64_t kv_len_, int64_t d_, int64_t dv_, uint32_t seed)
      : heads(heads_), q_len(q_len_), kv_len(kv_len_), d(d_), dv(dv_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    q.resize(heads * q_len * d);
    k.resize(kv_len * d);
    v.resize(kv_len * dv);
    for (float& x : q) x = u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
  }
  // Bottom-right aligned: row i at position kv_len - q_len + i.
  base::Mask CausalMask(int64_t window = 0, int64_t stride = 0) const {
    return base::Mask{1, window, stride, kv_len - q_len, 0};
  }
  kernels::Operands Op(const base::Mask& mask, float* o, float* lse) const {
    kernels::Operands t{};
    t.q = q.data();
    t.q_head = q_len * d;
    t.q_row = d;
    t.q_dim = 1;
    t.k = k.data();
    t.k_row = d;
    t.k_dim = 1;
    t.v = v.data();
    t.v_row = dv;
    t.v_dim = 1;
    t.o = o;
    t.o_head = q_len * dv;
    t.o_row = dv;
    t.o_dim = 1;
    t.lse = lse;
    t.lse_head = q_len;
    t.lse_row = 1;
    t.q_len = q_len;
    t.kv_len = kv_len;
    t.head_dim = d;
    t.value_dim = dv;
    t.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    t.mask = mask;
    return t;
  }
  // Head h's operands (o and lse at their head h too).
  kernels::Operands HeadOp(const base::Mask& mask, float* o, float* lse, int64_t h) const {
    kernels::Operands t = Op(mask, o, lse);
    t.q += h * t.q_head;
    t.o += h * t.o_head;
    t.lse += h * t.lse_head;
    return t;
  }
};

// o and lse of every head by the reference's table (the oracle).
void Reference(const Group& g, const base::Mask& mask, float* o, float* lse) {
  const kernels::Table* ref = reference::Table();
  for (int64_t h = 0; h < g.heads; ++h) {
    const kernels::Operands op = g.HeadOp(mask, o, lse, h);
    Buffer scratch(ref->naive_scratch_floats(op));
    ref->naive_head(op, scratch.get());
  }
}

// The fused task of rows [r0, r1) of every head: o and lse written where they are.
void Fused(const kernels::Table& table, const Group& g, const base::Mask& mask, int64_t r0,
           int64_t r1, float* o, float* lse) {
  kernels::FlashTask t{};
  t.op = g.Op(mask, o, lse);
  t.heads = g.heads;
  t.row_begin = r0;
  t.row_end = r1;
  t.gathered = 1;
  t.span_begin = 0;
  t.span_end = (g.kv_len + kernels::kSpanKeys - 1) / kernels::kSpanKeys;
  t.tuning = kernels::DefaultTuning();
  Buffer scratch(table.flash_scratch_floats(t));
  table.flash_task(t, scratch.get());
}

double MaxDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    m = std::fmax(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// The edges: rows around the block height (kBlockRows) and decode's 1, 2 and 4; keys
// around a vector (4, 8, 16 lanes), a K panel, a tile (kTileKeys) and a key span; head
// dimensions around the 8-dimension transpose block.
const int64_t kRowEdges[] = {1, 2, 4, 5, 6, 7, 12, 13};
const int64_t kKeyEdges[] = {1, 3, 4, 5, 8, 9, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257};
const int64_t kDimEdges[] = {1, 7, 8, 9, 16, 17};

// Inputs in [-1, 1] and max|v| <= 1: the header's bound (5e-7 * max(1, S) + 1e-8 * C,
// S and C at most sqrt(d) here) with room for the reference's own float rounding.
double Tolerance(int64_t d) { return 5e-7 * std::fmax(1.0, std::sqrt(double(d))) + 1e-6; }

}  // namespace

TEST_CASE("each table's fused task equals the reference at block, vector and tile edges") {
  for (const Named& tb : Tables()) {
    for (int64_t rows : kRowEdges)
      for (int64_t keys : kKeyEdges)
        for (int64_t d : {int64_t{9}, int64_t{64}}) {
          if (rows > keys) continue;
          const Group g(2, rows, keys, d, d == 9 ? 17 : 64,
                        static_cast<uint32_t>(rows * 1000 + keys));
          for (const base::Mask& mask :
               {g.CausalMask(), g.CausalMask(5, 4), base::Mask{0, 0, 0, keys - rows, 0}}) {
            const size_t n = static_cast<size_t>(g.heads * rows * g.dv), nl = g.heads * rows;
            std::vector<float> o(n), lse(nl), ro(n), rl(nl);
            Fused(*tb.table, g, mask, 0, rows, o.data(), lse.data());
            Reference(g, mask, ro.data(), rl.data());
            INFO(tb.name << " rows " << rows << " keys " << keys << " d " << d << " causal "
                         << mask.causal << " window " << mask.window);
            REQUIRE(MaxDiff(o.data(), ro.data(), n) <= Tolerance(d));
            REQUIRE(MaxDiff(lse.data(), rl.data(), nl) <= 1e-5);
          }
        }
  }
}

TEST_CASE("each table's fused task gives a row the same bytes whatever block it is in") {
  // Rows run alone (decode's one-row blocks) and all together (blocks of kBlockRows
  // and the rest's 4, 2 and 1), across a tile and a key span.
  for (const Named& tb : Tables())
    for (int64_t keys : {int64_t{300}, int64_t{1100}})
      for (int64_t d : kDimEdges) {
        const int64_t rows = 13;
        const Group g(2, rows, keys, d, d + 3, static_cast<uint32_t>(keys + d));
        const base::Mask mask = g.CausalMask();
        const size_t n = static_cast<size_t>(g.heads * rows * g.dv);
        std::vector<float> all(n), alone(n), lse(g.heads * rows), lse1(g.heads * rows);
        Fused(*tb.table, g, mask, 0, rows, all.data(), lse.data());
        for (int64_t r = 0; r < rows; ++r)
          Fused(*tb.table, g, mask, r, r + 1, alone.data(), lse1.data());
        INFO(tb.name << " keys " << keys << " d " << d);
        REQUIRE(std::memcmp(all.data(), alone.data(), n * sizeof(float)) == 0);
        REQUIRE(std::memcmp(lse.data(), lse1.data(), lse.size() * sizeof(float)) == 0);
      }
}

TEST_CASE("each table's naive head equals the reference at vector edges, weights included") {
  for (const Named& tb : Tables())
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{7}})
      for (int64_t keys : kKeyEdges)
        for (int64_t d : kDimEdges) {
          if (rows > keys) continue;
          const Group g(1, rows, keys, d, d, static_cast<uint32_t>(rows + keys * 7 + d));
          const base::Mask mask = g.CausalMask(3, 2);
          const size_t n = static_cast<size_t>(rows * d), nw = static_cast<size_t>(rows * keys);
          std::vector<float> o(n), lse(rows), w(nw), ro(n), rl(rows), rw(nw);
          kernels::Operands op = g.Op(mask, o.data(), lse.data());
          op.weights = w.data();
          op.w_row = keys;
          op.w_col = 1;
          Buffer scratch(tb.table->naive_scratch_floats(op));
          tb.table->naive_head(op, scratch.get());
          kernels::Operands rop = g.Op(mask, ro.data(), rl.data());
          rop.weights = rw.data();
          rop.w_row = keys;
          rop.w_col = 1;
          const kernels::Table* ref = reference::Table();
          Buffer rs(ref->naive_scratch_floats(rop));
          ref->naive_head(rop, rs.get());
          INFO(tb.name << " rows " << rows << " keys " << keys << " d " << d);
          REQUIRE(MaxDiff(o.data(), ro.data(), n) <= Tolerance(d));
          REQUIRE(MaxDiff(w.data(), rw.data(), nw) <= 1e-6);
        }
}

TEST_CASE("each table's scores and weighted sums equal the reference's at vector edges") {
  for (const Named& tb : Tables())
    for (int64_t keys : kKeyEdges)
      for (int64_t d : kDimEdges) {
        const int64_t rows = 5;
        const Group g(1, rows, keys, d, d, static_cast<uint32_t>(keys * 31 + d));
        std::vector<float> s(rows * keys), rs(rows * keys);
        Buffer scratch(tb.table->scores_scratch_floats(keys, d));
        tb.table->scores_head({g.q.data(), d, 1}, {g.k.data(), d, 1}, {s.data(), keys, 1}, rows,
                              keys, d, scratch.get());
        reference::ScoresHead({g.q.data(), d, 1}, {g.k.data(), d, 1}, {rs.data(), keys, 1}, rows,
                              keys, d);
        INFO(tb.name << " keys " << keys << " d " << d);
        REQUIRE(MaxDiff(s.data(), rs.data(), s.size()) <= 1e-6 * double(d));
        // Weighted sums of the same keys' values by weights in [0, 1).
        for (float& x : s) x = std::fabs(x) / (1.0f + std::fabs(x));
        std::vector<float> o(rows * d), ro(rows * d);
        Buffer avs(tb.table->weighted_sum_scratch_floats(keys, d, 1));
        tb.table->weighted_sum_head({s.data(), keys, 1}, {g.v.data(), d, 1}, {o.data(), d, 1}, rows,
                                    keys, d, avs.get());
        reference::WeightedSumHead({s.data(), keys, 1}, {g.v.data(), d, 1}, {ro.data(), d, 1}, rows,
                                   keys, d);
        REQUIRE(MaxDiff(o.data(), ro.data(), o.size()) <= 1e-6 * double(keys));
      }
}

TEST_CASE("each table's backward task equals the reference's at block and tile edges") {
  // The forward's o and lse from the reference; the gradients of the group (2 query
  // heads of one kv head) by each table's backward_task against the reference table's.
  const kernels::Table* ref = reference::Table();
  for (const Named& tb : Tables())
    for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{6}, int64_t{7}, int64_t{13}})
      for (int64_t keys : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{17}, int64_t{64},
                           int64_t{65}, int64_t{257}})
        for (int64_t d : {int64_t{9}, int64_t{64}}) {
          if (rows > keys) continue;
          const Group g(2, rows, keys, d, d, static_cast<uint32_t>(rows * 77 + keys + d));
          const base::Mask mask = g.CausalMask();
          const size_t nq = static_cast<size_t>(g.heads * rows);
          std::vector<float> o(nq * d), lse(nq), dout(nq * d);
          Reference(g, mask, o.data(), lse.data());
          std::mt19937 rng(static_cast<uint32_t>(keys));
          std::uniform_real_distribution<float> u(-1.0f, 1.0f);
          for (float& x : dout) x = u(rng);
          struct Grads {
            std::vector<float> dq, dk, dv;
          };
          auto run = [&](const kernels::Table& table, Grads* gr) {
            gr->dq.assign(nq * d, 7.0f);  // every entry written: none keeps its 7
            gr->dk.assign(static_cast<size_t>(keys * d), 7.0f);
            gr->dv.assign(static_cast<size_t>(keys * d), 7.0f);
            kernels::BackwardTask t{};
            t.op = g.Op(mask, o.data(), lse.data());
            t.heads = g.heads;
            t.dout = dout.data();
            t.do_head = rows * d;
            t.do_row = d;
            t.do_dim = 1;
            t.dq = gr->dq.data();
            t.dq_head = rows * d;
            t.dq_row = d;
            t.dq_dim = 1;
            t.dk = gr->dk.data();
            t.dk_row = d;
            t.dk_dim = 1;
            t.dv = gr->dv.data();
            t.dv_row = d;
            t.dv_dim = 1;
            Buffer scratch(table.backward_scratch_floats(t));
            table.backward_task(t, scratch.get());
          };
          Grads got, want;
          run(*tb.table, &got);
          run(*ref, &want);
          INFO(tb.name << " rows " << rows << " keys " << keys << " d " << d);
          // Inputs in [-1, 1]: gradients of order rows * d at most; the header's bound
          // (1e-6 relative, times the weights' sums) well inside 1e-5 of that.
          const double tol = 1e-5 * static_cast<double>(rows * d);
          REQUIRE(MaxDiff(got.dq.data(), want.dq.data(), got.dq.size()) <= tol);
          REQUIRE(MaxDiff(got.dk.data(), want.dk.data(), got.dk.size()) <= tol);
          REQUIRE(MaxDiff(got.dv.data(), want.dv.data(), got.dv.size()) <= tol);
        }
}
