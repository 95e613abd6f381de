// The Highway backend's dispatch. Each target's kernels are compiled in a unit of their
// own (highway_<target>.cc, see highway-unit-inl.h; on ARM64 the SVE units are compiled
// for one vector length each) and export that target's table as GetTable() in Highway's
// namespace for it. This unit lists the compiled ones (lib/CMakeLists.txt defines
// OCTATTN_HWY_<TARGET> for each) and picks among them with Highway's CPU detection,
// best first, as HWY_DYNAMIC_DISPATCH would.
#include <hwy/highway.h>
#include <hwy/targets.h>

#include "lib/kernels/kernels.h"

namespace octattn {
namespace kernels {

#define OCTATTN_HWY_UNIT(ns) \
  namespace ns {             \
  const Table* GetTable();   \
  }
#if OCTATTN_HWY_AVX3
OCTATTN_HWY_UNIT(N_AVX3)
#endif
#if OCTATTN_HWY_AVX2
OCTATTN_HWY_UNIT(N_AVX2)
#endif
#if OCTATTN_HWY_SSE4
OCTATTN_HWY_UNIT(N_SSE4)
#endif
#if OCTATTN_HWY_SSSE3
OCTATTN_HWY_UNIT(N_SSSE3)
#endif
#if OCTATTN_HWY_SVE2_128
OCTATTN_HWY_UNIT(N_SVE2_128)
#endif
#if OCTATTN_HWY_SVE_256
OCTATTN_HWY_UNIT(N_SVE_256)
#endif
#if OCTATTN_HWY_NEON
OCTATTN_HWY_UNIT(N_NEON)
#endif
#if HWY_TARGETS & HWY_SCALAR  // the scalar unit: SCALAR where the build asks for it
OCTATTN_HWY_UNIT(N_SCALAR)
#define OCTATTN_HWY_SCALAR_NS N_SCALAR
#else
OCTATTN_HWY_UNIT(N_EMU128)
#define OCTATTN_HWY_SCALAR_NS N_EMU128
#endif
#undef OCTATTN_HWY_UNIT

namespace {

struct Unit {
  Target target;
  int64_t hwy_bits;  // the Highway targets whose CPUs run it
  const Table* (*table)();
};

// Best first. Highway reports SVE_256 for SVE with 256-bit vectors and SVE2_128 for SVE2
// with 128-bit ones; any other ARM64 CPU runs NEON.
constexpr Unit kUnits[] = {
#if OCTATTN_HWY_AVX3
    {kAvx512, HWY_AVX3, &N_AVX3::GetTable},
#endif
#if OCTATTN_HWY_AVX2
    {kAvx2, HWY_AVX2, &N_AVX2::GetTable},
#endif
#if OCTATTN_HWY_SSE4
    {kSse4, HWY_SSE4, &N_SSE4::GetTable},
#endif
#if OCTATTN_HWY_SSSE3
    {kSsse3, HWY_SSSE3, &N_SSSE3::GetTable},
#endif
#if OCTATTN_HWY_SVE2_128
    {kSve2_128, HWY_SVE2_128, &N_SVE2_128::GetTable},
#endif
#if OCTATTN_HWY_SVE_256
    {kSve256, HWY_SVE_256, &N_SVE_256::GetTable},
#endif
#if OCTATTN_HWY_NEON
    {kNeon, HWY_NEON, &N_NEON::GetTable},
#endif
    {kScalar, -1, &OCTATTN_HWY_SCALAR_NS::GetTable},  // every CPU
};

}  // namespace

const Table* HighwayBest() {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (supported & u.hwy_bits) return u.table();
  return nullptr;  // not reached: the scalar unit runs everywhere
}

const Table* HighwayTable(Target target) {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (u.target == target) return (supported & u.hwy_bits) ? u.table() : nullptr;
  return nullptr;
}

}  // namespace kernels
}  // namespace octattn
