// The xsimd backend for the sse2 target (this file's own -m flags, see CMakeLists.txt).
#define OCTATTN_XSIMD_ARCH xsimd::sse2
#define OCTATTN_XSIMD_NS xsimd_sse2
#define OCTATTN_XSIMD_TARGET kSse2
#define OCTATTN_XSIMD_REGS 16
#include "lib/kernels/xsimd/xsimd-arch-inl.h"
