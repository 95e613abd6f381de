// The xsimd backend for the neon target (ARM64: NEON is part of the baseline).
#define OCTATTN_XSIMD_ARCH xsimd::neon64
#define OCTATTN_XSIMD_NS xsimd_neon64
#define OCTATTN_XSIMD_TARGET kNeon
#define OCTATTN_XSIMD_REGS 32
#include "lib/kernels/xsimd/xsimd-arch-inl.h"
