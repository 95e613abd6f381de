// xsimd dispatch, compiled for the baseline: which arch tables this CPU can run.
#include "lib/kernels/xsimd/xsimd.h"

namespace octattn {
namespace kernels {

const Table* XsimdBest() {
  static const Table* const best = xsimd::dispatch<XsimdArchs>(XsimdTables{})();
  return best;
}

const Table* XsimdTable(Target target) {
  const auto cpu = xsimd::available_architectures();
  const XsimdTables tables;
  switch (target) {
    case kAvx512:
      return cpu.avx512bw ? tables(xsimd::avx512bw{}) : nullptr;
    case kAvx2:
      return cpu.fma3_avx2 ? tables(xsimd::fma3<xsimd::avx2>{}) : nullptr;
    case kSse4:
      return cpu.sse4_2 ? tables(xsimd::sse4_2{}) : nullptr;
    case kSse2:
      return cpu.sse2 ? tables(xsimd::sse2{}) : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace kernels
}  // namespace octattn
