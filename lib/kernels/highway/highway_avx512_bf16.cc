// The Highway backend's avx512_bf16 target: Highway's AVX3 target compiled once more,
// with AVX512_BF16, so that the kernels' bf16 dot products run on vdpbf16ps
// (OCTATTN_DOT_BF16, avx_bf16-inl.h). This unit's flags (lib/CMakeLists.txt) make
// AVX3 Highway's static target, so no foreach_target; its code sits in namespace
// octattn::kernels::bf16, apart from highway.cc's AVX3 copy, and runs only where
// highway.cc's dispatch finds AVX3 and a CPU with AVX512_BF16.
#define OCTATTN_DOT_BF16 1

#include <immintrin.h>  // the AVX block transpose and vdpbf16ps of the vocabulary

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

#if HWY_TARGET != HWY_AVX3 || !defined(__AVX512BF16__)
#error "octattn: highway_avx512_bf16.cc needs its flags from lib/CMakeLists.txt"
#endif

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace bf16 {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace bf16
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();
