// The xsimd backend for the avx2 target (this file's own -m flags, see CMakeLists.txt).
#define OCTATTN_XSIMD_ARCH xsimd::fma3<xsimd::avx2>
#define OCTATTN_XSIMD_NS xsimd_avx2
#define OCTATTN_XSIMD_TARGET kAvx2
#define OCTATTN_XSIMD_REGS 16
#include "lib/kernels/xsimd/xsimd-arch-inl.h"
