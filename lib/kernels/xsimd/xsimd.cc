// xsimd dispatch, compiled for the baseline: which arch tables this CPU can run.
#include "lib/kernels/xsimd/xsimd.h"

namespace octattn {
namespace kernels {

#if defined(__aarch64__)
const Table* XsimdBest() { return XsimdTables{}(xsimd::neon64{}); }

const Table* XsimdTable(Target target) {
  return target == kNeon ? XsimdTables{}(xsimd::neon64{}) : nullptr;
}
#else
// xsimd 8.1 reads its SSE2 bit from CPUID.1:ECX (XSAVE) instead of EDX, so a CPU
// without XSAVE looks like it lacks SSE2. SSE2 is part of x86-64 itself.
bool Sse2Detected() { return xsimd::available_architectures().best >= xsimd::sse2::version(); }

const Table* XsimdBest() {
  static const Table* const best =
      Sse2Detected() ? xsimd::dispatch<XsimdArchs>(XsimdTables{})() : XsimdTables{}(xsimd::sse2{});
  return best;
}

const Table* XsimdTable(Target target) {
  const auto cpu = xsimd::available_architectures();
  const XsimdTables tables;
  switch (target) {
#ifndef OCTATTN_NO_XSIMD_AVX512
    case kAvx512:
      return cpu.avx512bw ? tables(xsimd::avx512bw{}) : nullptr;
#endif
    case kAvx2:
      return cpu.fma3_avx2 ? tables(xsimd::fma3<xsimd::avx2>{}) : nullptr;
#ifndef OCTATTN_NO_SSE4
    case kSse4:
      return cpu.sse4_2 ? tables(xsimd::sse4_2{}) : nullptr;
#endif
    case kSse2:
      return tables(xsimd::sse2{});  // baseline of x86-64 (see Sse2Detected)
    default:
      return nullptr;
  }
}
#endif  // __aarch64__

}  // namespace kernels
}  // namespace octattn
