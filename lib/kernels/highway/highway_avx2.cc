// The Highway backend's AVX2 with FMA target (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET HWY_AVX2
#include "lib/kernels/highway/highway-unit-inl.h"
