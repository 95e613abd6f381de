// The Highway backend's amx_bf16 target: the avx512_bf16 unit's code compiled once more
// with AMX-TILE and AMX-BF16, so that the fused path's bf16 Q K^T runs on AMX tiles
// (OCTATTN_AMX_BF16: avx_amx-inl.h's Amx* and qk-inl.h's AmxQkStore); everything
// else is the avx512_bf16 target's code. Its own namespace, octattn::kernels::amx; it
// runs only where highway.cc's dispatch finds AVX3, AVX512_BF16, AMX and Linux's grant
// of the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM).
#define OCTATTN_DOT_BF16 1
#define OCTATTN_AMX_BF16 1

#include <immintrin.h>  // the AVX block transpose, vdpbf16ps and the AMX tiles

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

#if HWY_TARGET != HWY_AVX3 || !defined(__AVX512BF16__) || \
    !(defined(__AMX_BF16__) || defined(__AMXBF16__))  // GCC's spelling, clang's
#error "octattn: highway_amx_bf16.cc needs its flags from lib/CMakeLists.txt"
#endif

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace amx {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace amx
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();
