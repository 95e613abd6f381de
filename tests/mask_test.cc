// The mask formula: literal tables from the reference model's attention_mask(), the key
// ranges and tile classification derived from it, and what the weights show of it.
#include <catch2/catch.hpp>

#include "lib/base/mask.h"
#include "lib/base/sizes.h"
#include "support.h"

using namespace octtest;
namespace base = octattn::base;

namespace {

struct Table8 {
  int64_t window, stride;
  const char* rows[8];
};

// Printed by the reference model's attention_mask(8, window, stride); 'x' = allowed.
const Table8 kTables[] = {
    {0,
     0,
     {"x.......", "xx......", "xxx.....", "xxxx....", "xxxxx...", "xxxxxx..", "xxxxxxx.",
      "xxxxxxxx"}},
    {0,
     3,
     {"x.......", "xx......", "xxx.....", "xxxx....", "xxxxx...", "xxxxxx..", "xxxxxxx.",
      "xxxxxxxx"}},
    {3,
     0,
     {"x.......", "xx......", "xxx.....", ".xxx....", "..xxx...", "...xxx..", "....xxx.",
      ".....xxx"}},
    {3,
     2,
     {"x.......", "xx......", "xxx.....", "xxxx....", "x.xxx...", "x.xxxx..", "x.x.xxx.",
      "x.x.xxxx"}},
    {2,
     3,
     {"x.......", "xx......", "xxx.....", "x.xx....", "x..xx...", "x..xxx..", "x..x.xx.",
      "x..x..xx"}},
    {1,
     0,
     {"x.......", ".x......", "..x.....", "...x....", "....x...", ".....x..", "......x.",
      ".......x"}},
    {1,
     4,
     {"x.......", "xx......", "x.x.....", "x..x....", "x...x...", "x...xx..", "x...x.x.",
      "x...x..x"}},
    {8,
     0,
     {"x.......", "xx......", "xxx.....", "xxxx....", "xxxxx...", "xxxxxx..", "xxxxxxx.",
      "xxxxxxxx"}},
    {4,
     4,
     {"x.......", "xx......", "xxx.....", "xxxx....", "xxxxx...", "x.xxxx..", "x..xxxx.",
      "x...xxxx"}},
};

bool InKeys(const base::RowKeys& r, int64_t j) {
  if (j >= r.lo && j < r.hi) return true;
  return r.stride > 0 && j < r.strided_end && j % r.stride == 0;
}

}  // namespace

TEST_CASE("mask formula matches the reference model's tables", "[mask][dispatch]") {
  for (const Table8& table : kTables) {
    const base::Mask m{1, table.window, table.stride, 0, 0};
    for (int64_t i = 0; i < 8; ++i) {
      for (int64_t j = 0; j < 8; ++j) {
        INFO("window " << table.window << " stride " << table.stride << " row " << i << " col "
                       << j);
        const bool want = table.rows[i][j] == 'x';
        CHECK(base::Allowed(m, i, j) == want);
        CHECK(InKeys(base::KeysOf(m, i, 8), j) == want);
      }
    }
  }
}

TEST_CASE("key ranges and counts agree with the formula everywhere", "[mask]") {
  for (int64_t window : {0, 1, 2, 5, 16, 100})
    for (int64_t stride : {0, 1, 3, 7})
      for (int64_t q_start : {-5, 0, 3, 40}) {
        const base::Mask m{1, window, stride, q_start, 0};
        const int64_t kv_len = 37;
        for (int64_t i = 0; i < 30; ++i) {
          const base::RowKeys r = base::KeysOf(m, q_start + i, kv_len);
          int64_t count = 0;
          for (int64_t j = 0; j < kv_len; ++j) {
            const bool want = base::Allowed(m, q_start + i, j);
            count += want;
            REQUIRE(InKeys(r, j) == want);
          }
          REQUIRE(base::AllowedCount(r) == count);
        }
      }
}

TEST_CASE("tile classification never lies", "[mask]") {
  for (int64_t window : {0, 1, 4, 9})
    for (int64_t stride : {0, 2, 5})
      for (int64_t q_start : {-3, 0, 6}) {
        const base::Mask m{1, window, stride, q_start, 0};
        const int64_t kv_len = 29;
        for (int64_t r0 = 0; r0 < 24; r0 += 3)
          for (int64_t j0 = 0; j0 < kv_len; j0 += 4) {
            const int64_t j1 = base::MinI(j0 + 4, kv_len);
            const base::TileKind kind =
                base::Classify(m, q_start + r0, q_start + r0 + 3, j0, j1, kv_len);
            bool any = false, all = true;
            for (int64_t i = r0; i < r0 + 3; ++i)
              for (int64_t j = j0; j < j1; ++j) {
                const bool a = base::Allowed(m, q_start + i, j);
                any |= a;
                all &= a;
              }
            if (kind == base::kTileEmpty) REQUIRE(!any);
            if (kind == base::kTileFull) REQUIRE(all);
          }
      }
}

TEST_CASE("weights show the mask: row 0 reads itself, nothing above the diagonal, rows sum to 1",
          "[mask]") {
  Problem p(1, 2, 2, 8, 8, 8, 8, 11);
  for (const Table8& table : kTables) {
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE}) {
      Context ctx;
      Tensor o = p.Out(), w = p.Weights();
      Attend(ctx, Options(1, table.window, table.stride, algo), p.q, p.k, p.v, o, nullptr, &w);
      for (int64_t h = 0; h < 2; ++h) {
        CHECK(w.at(0, h, 0, 0) == 1.0f);
        for (int64_t i = 0; i < 8; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < 8; ++j) {
            const float x = w.at(0, h, i, j);
            sum += x;
            if (table.rows[i][j] == '.')
              CHECK(x == 0.0f);
            else
              CHECK(x > 0.0f);
          }
          CHECK(sum == Approx(1.0).epsilon(1e-6));
        }
      }
    }
  }
}
