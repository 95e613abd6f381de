// Runtime dispatch: Highway's own target loop drives the auto choice, and the best
// target of each backend is the one the CPU (or an emulated CPU) can run.
#include <catch2/catch.hpp>

#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "lib/kernels/kernels.h"
#include "support.h"

using namespace octtest;

namespace {

// The library's target when Highway reports only `t`. On ARM64 Highway's vector-length
// agnostic SVE targets are not compiled (the SVE units have fixed lengths): a CPU with
// only those runs the scalar target here, as nothing else is supported.
octattn_target FromHighway(int64_t t) {
  switch (t) {
#if HWY_ARCH_ARM_A64
    case HWY_SVE_256:
      return OCTATTN_TARGET_SVE_256;
    case HWY_SVE2_128:
      return OCTATTN_TARGET_SVE2_128;
    case HWY_NEON:
      return OCTATTN_TARGET_NEON;
#else
    case HWY_AVX3:
      return OCTATTN_TARGET_AVX512;
    case HWY_AVX2:
      return OCTATTN_TARGET_AVX2;
    case HWY_SSE4:
      return OCTATTN_TARGET_SSE4;
    case HWY_SSSE3:
      return OCTATTN_TARGET_SSSE3;
#endif
    default:
      return OCTATTN_TARGET_SCALAR;
  }
}

// The target a context of `backend` under auto runs a small call on.
octattn_target AutoRuns(octattn_backend backend) {
  Context ctx;
  REQUIRE(octattn_context_set_target(ctx, backend, OCTATTN_TARGET_AUTO) == OCTATTN_OK);
  Problem p(1, 1, 1, 3, 3, 4, 4, 1);
  Tensor o = p.Out();
  Attend(ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_NAIVE), p.q, p.k, p.v, o);
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  return info.target;
}

}  // namespace

TEST_CASE("auto follows hwy::SetSupportedTargetsForTest over every compiled target", "[dispatch]") {
  Problem p(1, 2, 1, 29, 29, 24, 24, 31);
  Context ref_ctx;
  Tensor ref = p.Out();
  Attend(ref_ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE), p.q, p.k, p.v, ref);
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  // The library's own list (a tree may leave targets out: OCTATTN_LEAN_TARGETS); a CPU
  // with only a target the library lacks runs the scalar one.
  octattn_target compiled[16];
  size_t n = 0;
  REQUIRE(octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, compiled, 16, &n) == OCTATTN_OK);
  for (int64_t t : targets) {
    INFO(hwy::TargetName(t));
    octattn_target expected = FromHighway(t);
    // AVX3 on a CPU with AVX512_BF16 (which Highway does not know): avx512_bf16 where
    // auto takes the bf16 dot product (AMD cores; auto never picks amx_bf16: it runs when
    // asked for; a lean tree without the plain avx512 unit takes avx512_bf16 anyway).
    const bool plain = std::find(compiled, compiled + n, OCTATTN_TARGET_AVX512) != compiled + n;
    if (expected == OCTATTN_TARGET_AVX512 && (octattn::kernels::AutoTakesBf16Dot() || !plain) &&
        std::find(compiled, compiled + n, OCTATTN_TARGET_AVX512_BF16) != compiled + n)
      expected = OCTATTN_TARGET_AVX512_BF16;
    if (std::find(compiled, compiled + n, expected) == compiled + n)
      expected = OCTATTN_TARGET_SCALAR;
    hwy::SetSupportedTargetsForTest(t);
    Context ctx;  // backend and target auto
    Tensor o = p.Out();
    Attend(ctx, Options(1, 0, 0, OCTATTN_ALGORITHM_NAIVE), p.q, p.k, p.v, o);
    octattn_run_info info{};
    info.struct_size = sizeof(info);
    REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
    CHECK(info.backend == OCTATTN_BACKEND_HIGHWAY);
    CHECK(info.target == expected);
    CHECK(MaxDiff(o, ref) <= kTolerance * p.v.MaxAbs());
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST_CASE("auto takes avx512_bf16 only where the core's choice says so", "[dispatch]") {
  namespace k = octattn::kernels;
  const k::Table* with = k::HighwayBest(true);
  const k::Table* without = k::HighwayBest(false);
  REQUIRE(with != nullptr);
  REQUIRE(without != nullptr);
  CHECK(with->target != k::kAmxBf16);
  CHECK(without->target != k::kAmxBf16);
  if (const k::Table* bf16 = k::HighwayTable(k::kAvx512Bf16)) {
    CHECK(with == bf16);
    // The plain avx512 unit where it is compiled (a lean tree's 16 lanes are bf16's).
    const k::Table* plain = k::HighwayTable(k::kAvx512);
    CHECK(without == (plain ? plain : bf16));
  } else {
    CHECK(with == without);
  }
#if defined(__x86_64__)
  // The choice is the vendor's: Intel cores ran bf16 faster widened.
  __builtin_cpu_init();
  CHECK(k::AutoTakesBf16Dot() == !__builtin_cpu_is("intel"));
#endif
  // What a context under auto runs, and what the list names first.
  const k::Table* chosen = k::AutoTakesBf16Dot() ? with : without;
  const octattn_target ran = AutoRuns(OCTATTN_BACKEND_HIGHWAY);
  CHECK(ran == static_cast<octattn_target>(chosen->target));
  octattn_target list[16];
  size_t n = 0;
  REQUIRE(octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, list, 16, &n) == OCTATTN_OK);
  REQUIRE(n >= 1);
  REQUIRE(n <= 16);
  std::vector<octattn_target> v(list, list + n);
  CHECK(v[0] == ran);
  // Every target the CPU runs listed once, amx_bf16 (if it runs) last.
  if (std::find(v.begin(), v.end(), OCTATTN_TARGET_AMX_BF16) != v.end())
    CHECK(v.back() == OCTATTN_TARGET_AMX_BF16);
  if (k::HighwayTable(k::kAvx512Bf16))
    CHECK(std::find(v.begin(), v.end(), OCTATTN_TARGET_AVX512_BF16) != v.end());
  std::sort(v.begin(), v.end());
  CHECK(std::adjacent_find(v.begin(), v.end()) == v.end());
}

TEST_CASE("the best target of each backend is the expected one for this CPU", "[dispatch]") {
  // Set by the qemu tests, which know the emulated CPU; natively, the list's head.
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD}) {
    const char* env = std::getenv(b == OCTATTN_BACKEND_HIGHWAY ? "OCTATTN_EXPECT_HIGHWAY"
                                                               : "OCTATTN_EXPECT_XSIMD");
    octattn_target list[8];
    size_t n = 0;
    REQUIRE(octattn_available_targets(b, list, 8, &n) == OCTATTN_OK);
    REQUIRE(n >= 1);
    const octattn_target ran = AutoRuns(b);
    INFO(octattn_backend_name(b) << " picked " << octattn_target_name(ran));
    CHECK(ran == list[0]);
    if (env) CHECK(std::string(octattn_target_name(ran)) == env);
  }
}
