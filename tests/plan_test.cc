// The plan layer: schedules (tasks, order, scratch, partial layout) and tile
// classification, as pure functions of a call's shape.
#include <catch2/catch.hpp>

#include <set>
#include <tuple>

#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "lib/plan/schedule.h"

namespace base = octattn::base;
namespace plan = octattn::plan;
namespace kernels = octattn::kernels;

namespace {

plan::CallShape Shape(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t q_len,
                      int64_t kv_len, int64_t dim, base::Mask mask) {
  plan::CallShape c{};
  c.batch = batch;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.head_dim = c.value_dim = dim;
  c.v_dim = 1;
  c.mask = mask;
  return c;
}

// Brute force: does any pair of rows [q0, q1) x keys [j0, j1) pass the mask? all?
void Pairs(const base::Mask& m, int64_t q0, int64_t q1, int64_t j0, int64_t j1, bool* any,
           bool* all) {
  *any = false;
  *all = true;
  for (int64_t q = q0; q < q1; ++q)
    for (int64_t j = j0; j < j1; ++j) {
      const bool a = base::Allowed(m, q, j);
      *any |= a;
      *all &= a;
    }
}

}  // namespace

TEST_CASE("tile classification is exact for dense masks and skips every unread tile", "[plan]") {
  // Without strided columns the allowed set of a tile is a band: Classify must say Empty
  // exactly when no pair is allowed and Full exactly when all are. (A classifier that
  // always answered Partial would fail here.)
  int64_t empty = 0, full = 0;
  for (int64_t window : {0, 1, 4, 9, 40})
    for (int64_t q_start : {-5, 0, 6, 30}) {
      const base::Mask m{1, window, 0, q_start, 0};
      const int64_t kv_len = 61;
      for (int64_t r0 = 0; r0 < 40; r0 += 5)
        for (int64_t j0 = 0; j0 < kv_len; j0 += 8) {
          const int64_t j1 = base::MinI(j0 + 8, kv_len);
          bool any, all;
          Pairs(m, q_start + r0, q_start + r0 + 5, j0, j1, &any, &all);
          const base::TileKind kind =
              base::Classify(m, q_start + r0, q_start + r0 + 5, j0, j1, kv_len);
          INFO("window " << window << " q_start " << q_start << " rows " << r0 << " keys " << j0);
          CHECK((kind == base::kTileEmpty) == !any);
          CHECK((kind == base::kTileFull) == all);
          empty += kind == base::kTileEmpty;
          full += kind == base::kTileFull;
        }
    }
  CHECK(empty > 100);
  CHECK(full > 100);
}

TEST_CASE("tile classification with strided columns: conservative, and still skips", "[plan]") {
  // Strided columns make the allowed set sparse: Empty and Full stay exact claims, and a
  // tile between strided columns that no window reaches is still skipped.
  const base::Mask m{1, 4, 16, 0, 0};
  const int64_t kv_len = 200;
  int64_t empty = 0;
  for (int64_t r0 = 100; r0 < 200; r0 += 4)
    for (int64_t j0 = 0; j0 < kv_len; j0 += 4) {
      const int64_t j1 = j0 + 4;
      bool any, all;
      Pairs(m, r0, r0 + 4, j0, j1, &any, &all);
      const base::TileKind kind = base::Classify(m, r0, r0 + 4, j0, j1, kv_len);
      if (kind == base::kTileEmpty) CHECK(!any);
      if (kind == base::kTileFull) CHECK(all);
      // Keys [17, 31) hold no strided column and lie far below these rows' windows.
      if (j0 >= 20 && j1 <= 32) CHECK(kind == base::kTileEmpty);
      empty += kind == base::kTileEmpty;
    }
  CHECK(empty > 200);
}

TEST_CASE("key bounds: KeyBegin and KeyEnd bound what any row may read", "[plan]") {
  for (int64_t window : {0, 3, 10})
    for (int64_t stride : {0, 4})
      for (int64_t q_start : {-4, 0, 7, 50}) {
        const base::Mask m{1, window, window ? stride : 0, q_start, 0};
        const int64_t kv_len = 60, q_len = 9;
        const int64_t begin = base::KeyBegin(m, q_start),
                      end = base::KeyEnd(m, q_start + q_len, kv_len);
        const base::StridedColumns below = base::StridedBelow(m, q_start);
        bool begin_read = false;
        for (int64_t i = 0; i < q_len; ++i)
          for (int64_t j = 0; j < kv_len; ++j) {
            const bool a = base::Allowed(m, q_start + i, j);
            if (j >= end) CHECK(!a);
            if (j < begin) CHECK((!a || below.Has(j)));
            if (j == begin && a) begin_read = true;
          }
        // The bounds are tight: the first row reads key `begin` when it reads anything.
        if (q_start >= 0 && begin < end) CHECK(begin_read);
      }
  const base::Mask full{0, 0, 0, 0, 0};
  CHECK(base::KeyBegin(full, 5) == 0);
  CHECK(base::KeyEnd(full, 5, 60) == 60);
}

TEST_CASE("saturating sizes: a product that does not fit is SIZE_MAX", "[plan]") {
  CHECK(base::SatMul(size_t{1} << 40, size_t{1} << 30) == SIZE_MAX);
  CHECK(base::SatMul(size_t{1} << 20, size_t{1} << 30) == size_t{1} << 50);
  CHECK(base::SatAdd(SIZE_MAX - 1, 2) == SIZE_MAX);
  CHECK(base::RoundUp(SIZE_MAX - 3, 64) == SIZE_MAX);
  CHECK(base::RoundUp(65, 64) == 128);
  CHECK(base::Count(-3) == 0);
}

TEST_CASE("schedules: tasks, order, scratch and the decode partial layout", "[plan]") {
  const kernels::Table* table = kernels::HighwayBest();
  REQUIRE(table != nullptr);
  SECTION("prefill: one task per (batch, kv head, query tile), pair by pair, last tiles first") {
    const plan::CallShape c = Shape(2, 8, 2, 300, 300, 64, base::Mask{1, 0, 0, 0, 0});
    const plan::Schedule s = plan::MakeSchedule(c, plan::Algorithm::kFused, table);
    CHECK_FALSE(s.decode);
    CHECK(s.q_tile == 66);  // group of 4: 64 rows per head, in whole blocks of 6
    CHECK(plan::QueryTile(1) == 258);
    CHECK(plan::QueryTile(3) == 90);
    CHECK(plan::QueryTile(1000) == 6);
    CHECK(s.q_tiles == 5);
    REQUIRE(s.tasks == 2 * 2 * 5);
    std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
    for (int64_t i = 0; i < s.tasks; ++i) {
      const plan::PrefillIndex x = plan::PrefillTaskAt(s, c, i);
      CHECK(x.batch * 2 + x.kv_head == i / s.q_tiles);  // one pair's tasks together
      CHECK(x.row_begin == (s.q_tiles - 1 - i % s.q_tiles) * s.q_tile);  // last tiles first
      CHECK(x.row_end - x.row_begin == (x.row_begin == 264 ? 36 : 66));
      seen.insert({x.batch, x.kv_head, x.row_begin});
    }
    CHECK(seen.size() == static_cast<size_t>(s.tasks));  // each exactly once
    CHECK(s.slot_bytes > 0);
    CHECK(s.shared_bytes == 0);
    // The scratch of a prefill slot does not grow with the sequence.
    const plan::Schedule longer =
        plan::MakeSchedule(Shape(2, 8, 2, 30000, 30000, 64, base::Mask{1, 0, 0, 0, 0}),
                           plan::Algorithm::kFused, table);
    CHECK(longer.slot_bytes == s.slot_bytes);
  }
  SECTION("decode: key units per (batch, kv head), gathered columns first, partials disjoint") {
    const plan::CallShape c = Shape(2, 8, 2, 1, 3000, 64, base::Mask{1, 500, 64, 2999, 0});
    const plan::Schedule s = plan::MakeSchedule(c, plan::Algorithm::kFused, table);
    REQUIRE(s.decode);
    CHECK(s.gathered);
    CHECK(s.units == 3 + 1);  // 3000 keys: 3 key spans, and the gathered columns
    REQUIRE(s.tasks == 2 * 2 * s.units);
    const size_t rows = 4 * 1;  // GQA group of 4 heads, one row each
    for (int64_t i = 0; i < s.tasks; ++i) {
      const plan::DecodeIndex x = plan::DecodeTaskAt(s, c, i);
      CHECK(x.gathered == (x.unit == 0));
      if (!x.gathered) CHECK(x.span == x.unit - 1);
      CHECK(plan::PartialOffset(s, c, x.pair, x.unit) ==
            static_cast<size_t>(i) * rows * s.state_floats);
    }
    CHECK(s.shared_bytes >= static_cast<size_t>(s.tasks) * rows * s.state_floats * sizeof(float));
    // Past the decode threshold (16 rows per kv head) the keys split as decode's only in a
    // call of fewer than kSplitPairs (sequence, kv head) pairs, each one query tile
    // (QueryTile) of rows whose partials fit in kSplitBytes; else they run as prefill.
    plan::CallShape wide = Shape(2, 8, 2, 5, 3000, 64, base::Mask{1, 0, 0, 2995, 0});
    const plan::Schedule split = plan::MakeSchedule(wide, plan::Algorithm::kFused, table);
    CHECK(split.decode);
    CHECK(split.units == 3);
    CHECK(split.tasks == 4 * 3);
    CHECK(split.kv_per_task == 1);
    wide.call_pairs = plan::kSplitPairs;  // a plan of a call of more sequences
    CHECK_FALSE(plan::MakeSchedule(wide, plan::Algorithm::kFused, table).decode);
    wide.call_pairs = plan::kSplitPairs - 1;
    CHECK(plan::MakeSchedule(wide, plan::Algorithm::kFused, table).decode);
    const plan::CallShape tall = Shape(1, 8, 2, 67, 3000, 64, base::Mask{1, 0, 0, 2933, 0});
    CHECK(plan::QueryTile(4) == 66);
    CHECK_FALSE(plan::MakeSchedule(tall, plan::Algorithm::kFused, table).decode);
    // MLA's absorbed decode: 128 query heads on one latent kv head, split up to the
    // partials' bound (about 2 KiB a row and unit at value_dim 512).
    plan::CallShape mla = Shape(1, 128, 1, 1, 32768, 576, base::Mask{1, 0, 0, 32767, 0});
    mla.value_dim = 512;
    const plan::Schedule m = plan::MakeSchedule(mla, plan::Algorithm::kFused, table);
    CHECK(m.decode);
    CHECK(m.tasks == 32);
    CHECK(m.shared_bytes <= plan::kSplitBytes + 64);
    mla.kv_len = 1 << 20;
    mla.mask.q_start = mla.kv_len - 1;
    CHECK_FALSE(plan::MakeSchedule(mla, plan::Algorithm::kFused, table).decode);
    // A single unit is never split.
    const plan::Schedule short_kv = plan::MakeSchedule(
        Shape(1, 8, 2, 1, 900, 64, base::Mask{1, 0, 0, 899, 0}), plan::Algorithm::kFused, table);
    CHECK_FALSE(short_kv.decode);
  }
  SECTION("naive and reference: one task per (batch, query head); sizes saturate") {
    const plan::CallShape c = Shape(3, 4, 2, 50, 70, 16, base::Mask{1, 0, 0, 20, 0});
    for (plan::Algorithm a : {plan::Algorithm::kNaive, plan::Algorithm::kReference}) {
      const plan::Schedule s = plan::MakeSchedule(c, a, table);
      CHECK(s.tasks == 12);
      const plan::HeadIndex x = plan::HeadTaskAt(c, 7);
      CHECK(x.batch == 1);
      CHECK(x.head == 3);
    }
    // q_len = kv_len = 2^31: the naive scores alone are 2^64 bytes.
    const plan::CallShape huge =
        Shape(1, 1, 1, int64_t{1} << 31, int64_t{1} << 31, 64, base::Mask{1, 0, 0, 0, 0});
    const plan::Schedule s = plan::MakeSchedule(huge, plan::Algorithm::kNaive, table);
    CHECK(s.slot_bytes == SIZE_MAX);
    CHECK(plan::WorkspaceBytes(s, 2) == SIZE_MAX);
  }
}

TEST_CASE("chunks: key ranges, classification and bounds agree with the formula", "[plan]") {
  // Every (causal, window, stride, chunk, phase, q_start): KeysOf describes exactly the
  // allowed keys of each row, Classify is exact without strided columns and a sound claim
  // with them, and KeyBegin / KeyEnd / StridedBelow bound what rows from a position read.
  int64_t empty = 0, full = 0;
  for (int32_t causal : {1, 0})
    for (int64_t window : {0, 3, 10})
      for (int64_t stride : {0, 4})
        for (int64_t chunk : {1, 5, 16})
          for (int64_t chunk_phase : {int64_t{0}, chunk - 1})
            for (int64_t q_start : {-7, 0, 13, 70}) {
              if (!causal && (window || stride)) continue;
              const base::Mask m{causal, window, window ? stride : 0, q_start,
                                 0,      chunk,  chunk_phase};
              const int64_t kv_len = 61;
              INFO("causal " << causal << " window " << window << " stride " << stride << " chunk "
                             << chunk << " phase " << chunk_phase << " q_start " << q_start);
              for (int64_t i = 0; i < 30; ++i) {
                const base::RowKeys r = base::KeysOf(m, q_start + i, kv_len);
                int64_t count = 0;
                for (int64_t j = 0; j < kv_len; ++j) {
                  const bool dense = j >= r.lo && j < r.hi;
                  const bool column = r.stride > 0 && j >= r.strided_begin && j < r.strided_end &&
                                      j % r.stride == r.phase;
                  INFO("row " << i << " key " << j);
                  REQUIRE((dense || column) == base::Allowed(m, q_start + i, j));
                  count += dense || column;
                }
                CHECK(base::AllowedCount(r) == count);
              }
              const int64_t begin = base::KeyBegin(m, q_start),
                            end = base::KeyEnd(m, q_start + 30, kv_len);
              const base::StridedColumns below = base::StridedBelow(m, q_start);
              for (int64_t i = 0; i < 30; ++i)
                for (int64_t j = 0; j < kv_len; ++j)
                  if (base::Allowed(m, q_start + i, j)) {
                    CHECK(j < end);
                    CHECK((j >= begin || below.Has(j)));
                  }
              for (int64_t r0 = 0; r0 < 30; r0 += 6)
                for (int64_t j0 = 0; j0 < kv_len; j0 += 8) {
                  const int64_t j1 = base::MinI(j0 + 8, kv_len);
                  bool any, all;
                  Pairs(m, q_start + r0, q_start + r0 + 6, j0, j1, &any, &all);
                  const base::TileKind kind =
                      base::Classify(m, q_start + r0, q_start + r0 + 6, j0, j1, kv_len);
                  if (kind == base::kTileEmpty) CHECK(!any);
                  if (kind == base::kTileFull) CHECK(all);
                  if (!m.stride) CHECK((kind == base::kTileEmpty) == !any);
                  if (!m.stride) CHECK((kind == base::kTileFull) == all);
                  empty += kind == base::kTileEmpty;
                  full += kind == base::kTileFull;
                }
            }
  CHECK(empty > 1000);
  CHECK(full > 20);
}

TEST_CASE("cascade: the leading spans a decode-shaped sequence reads whole", "[plan][cascade]") {
  const int64_t span = kernels::kSpanKeys;
  const auto fused = plan::Algorithm::kFused;
  // Brute force: the leading spans every row of the shape reads whole (every pair allowed).
  auto whole = [&](const plan::CallShape& c) {
    int64_t n = 0;
    for (; (n + 1) * span <= c.kv_len; ++n) {
      bool any = false, all = false;
      Pairs(c.mask, c.mask.q_start, c.mask.q_start + c.q_len, n * span, (n + 1) * span, &any, &all);
      if (!all) break;
    }
    return n;
  };
  for (int64_t kv : {span + 1, 2 * span, 3 * span + 7, int64_t{5000}})
    for (int64_t q_len : {int64_t{1}, int64_t{2}, int64_t{4}})
      for (int64_t window : {int64_t{0}, int64_t{1500}, int64_t{4000}}) {
        const base::Mask m = base::Mask{1, window, 0, kv - q_len, 0};
        const plan::CallShape c = Shape(1, 8, 2, q_len, kv, 64, m);
        INFO("kv " << kv << " q_len " << q_len << " window " << window);
        REQUIRE(plan::WholeSpans(c, fused) == whole(c));
      }
  const base::Mask causal = base::Mask{1, 0, 0, 2999, 0};
  plan::CallShape c = Shape(1, 8, 2, 1, 3000, 64, causal);
  REQUIRE(plan::WholeSpans(c, fused) == 2);
  REQUIRE(plan::WholeSpans(c, plan::Algorithm::kNaive) == 0);
  c.mods.softcap = 30.0f;  // softcap and sinks: the same rows' operations
  REQUIRE(plan::WholeSpans(c, fused) == 2);
  const float slopes[8] = {};
  c.mods.slopes = slopes;  // ALiBi: scores that depend on the row's position
  REQUIRE(plan::WholeSpans(c, fused) == 0);
  c.mods = kernels::Mods{};
  c.q_len = 4;  // 4 heads x 4 rows per kv head: still decode-shaped
  c.mask = base::Mask{1, 0, 0, 2996, 0};
  REQUIRE(plan::WholeSpans(c, fused) == 2);
  c.q_len = 5;  // 20 rows: prefill-shaped
  c.mask = base::Mask{1, 0, 0, 2995, 0};
  REQUIRE(plan::WholeSpans(c, fused) == 0);
  c.q_len = 1;
  c.mask = base::Mask{1, 3000, 64, 2999, 0};  // strided columns
  REQUIRE(plan::WholeSpans(c, fused) == 0);
  c.kv_len = span;  // one span: not decode-shaped
  c.mask = base::Mask{1, 0, 0, span - 1, 0};
  REQUIRE(plan::WholeSpans(c, fused) == 0);
}
