// The Highway backend's SSSE3 target (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET HWY_SSSE3
#include "lib/kernels/highway/highway-unit-inl.h"
