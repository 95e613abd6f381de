// The Highway backend's AVX-512 (F, CD, DQ, BW, VL) target (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET HWY_AVX3
#include "lib/kernels/highway/highway-unit-inl.h"
