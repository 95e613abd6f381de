// The xsimd backend's per-arch entry points: one overload per arch, each defined in
// that arch's translation unit, so xsimd::dispatch can pick the best one.
#ifndef OCTATTN_LIB_KERNELS_XSIMD_XSIMD_H_
#define OCTATTN_LIB_KERNELS_XSIMD_XSIMD_H_

#include <xsimd/xsimd.hpp>

#include "lib/kernels/kernels.h"

namespace octattn {
namespace kernels {

#if defined(__aarch64__)
struct XsimdTables {
  const Table* operator()(xsimd::neon64) const;
};

// NEON is part of ARM64 itself: the one arch.
using XsimdArchs = xsimd::arch_list<xsimd::neon64>;
#else
struct XsimdTables {
  const Table* operator()(xsimd::avx512bw) const;
  const Table* operator()(xsimd::fma3<xsimd::avx2>) const;
  const Table* operator()(xsimd::sse4_2) const;
  const Table* operator()(xsimd::sse2) const;
};

// OCTATTN_NO_XSIMD_AVX512: a build that compiles no xsimd AVX-512 code
// (OCTATTN_HOST_TARGETS_ONLY on a machine without it, OCTATTN_LEAN_TARGETS on one with
// it); OCTATTN_NO_SSE4: none for SSE4 (OCTATTN_LEAN_TARGETS).
#if defined(OCTATTN_NO_XSIMD_AVX512) && defined(OCTATTN_NO_SSE4)
using XsimdArchs = xsimd::arch_list<xsimd::fma3<xsimd::avx2>, xsimd::sse2>;
#elif defined(OCTATTN_NO_XSIMD_AVX512)
using XsimdArchs = xsimd::arch_list<xsimd::fma3<xsimd::avx2>, xsimd::sse4_2, xsimd::sse2>;
#elif defined(OCTATTN_NO_SSE4)
using XsimdArchs = xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>;
#else
using XsimdArchs =
    xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse4_2, xsimd::sse2>;
#endif
#endif  // __aarch64__

}  // namespace kernels
}  // namespace octattn

#endif  // OCTATTN_LIB_KERNELS_XSIMD_XSIMD_H_
