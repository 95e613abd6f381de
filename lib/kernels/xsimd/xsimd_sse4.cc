// The xsimd backend for the sse4 target (this file's own -m flags, see CMakeLists.txt).
#define OCTATTN_XSIMD_ARCH xsimd::sse4_2
#define OCTATTN_XSIMD_NS xsimd_sse4
#define OCTATTN_XSIMD_TARGET kSse4
#define OCTATTN_XSIMD_REGS 16
#include "lib/kernels/xsimd/xsimd-arch-inl.h"
