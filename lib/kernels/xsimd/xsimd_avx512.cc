// The xsimd backend for the avx512 target (this file's own -m flags, see CMakeLists.txt).
#define OCTATTN_XSIMD_ARCH xsimd::avx512bw
#define OCTATTN_XSIMD_NS xsimd_avx512
#define OCTATTN_XSIMD_TARGET kAvx512
#define OCTATTN_XSIMD_REGS 32
#include "lib/kernels/xsimd/xsimd-arch-inl.h"
