// The Highway backend's SSE4 target (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET HWY_SSE4
#include "lib/kernels/highway/highway-unit-inl.h"
