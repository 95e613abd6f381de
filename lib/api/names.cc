// The names of the library's enums and its version.
#include "octattn.h"

extern "C" {

uint32_t octattn_version_number(void) { return OCTATTN_VERSION_NUMBER; }

const char* octattn_version_string(void) {
#define OCTATTN_STR2(x) #x
#define OCTATTN_STR(x) OCTATTN_STR2(x)
  return OCTATTN_STR(OCTATTN_VERSION_MAJOR) "." OCTATTN_STR(OCTATTN_VERSION_MINOR) "." OCTATTN_STR(
      OCTATTN_VERSION_PATCH);
}

const char* octattn_status_string(octattn_status status) {
  switch (status) {
    case OCTATTN_OK:
      return "ok";
    case OCTATTN_ERROR_NULL_POINTER:
      return "null pointer";
    case OCTATTN_ERROR_INVALID_SHAPE:
      return "invalid shape";
    case OCTATTN_ERROR_INVALID_STRIDE:
      return "invalid stride";
    case OCTATTN_ERROR_OVERFLOW:
      return "size overflow";
    case OCTATTN_ERROR_ALIASING:
      return "output overlaps another tensor";
    case OCTATTN_ERROR_INVALID_OPTION:
      return "invalid option";
    case OCTATTN_ERROR_STRUCT_SIZE:
      return "invalid struct_size";
    case OCTATTN_ERROR_WORKSPACE_TOO_SMALL:
      return "workspace too small";
    case OCTATTN_ERROR_UNSUPPORTED:
      return "unsupported";
    case OCTATTN_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case OCTATTN_ERROR_MISALIGNED:
      return "misaligned data";
    case OCTATTN_ERROR_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

const char* octattn_backend_name(octattn_backend backend) {
  switch (backend) {
    case OCTATTN_BACKEND_AUTO:
      return "auto";
    case OCTATTN_BACKEND_HIGHWAY:
      return "highway";
    case OCTATTN_BACKEND_XSIMD:
      return "xsimd";
    default:
      return "unknown";
  }
}

const char* octattn_target_name(octattn_target target) {
  switch (target) {
    case OCTATTN_TARGET_AUTO:
      return "auto";
    case OCTATTN_TARGET_SCALAR:
      return "scalar";
    case OCTATTN_TARGET_SSE2:
      return "sse2";
    case OCTATTN_TARGET_SSSE3:
      return "ssse3";
    case OCTATTN_TARGET_SSE4:
      return "sse4";
    case OCTATTN_TARGET_AVX2:
      return "avx2";
    case OCTATTN_TARGET_AVX512:
      return "avx512";
    case OCTATTN_TARGET_NEON:
      return "neon";
    case OCTATTN_TARGET_SVE2_128:
      return "sve2_128";
    case OCTATTN_TARGET_SVE_256:
      return "sve_256";
    case OCTATTN_TARGET_AVX512_BF16:
      return "avx512_bf16";
    case OCTATTN_TARGET_AMX_BF16:
      return "amx_bf16";
    default:
      return "unknown";
  }
}

const char* octattn_algorithm_name(octattn_algorithm algorithm) {
  switch (algorithm) {
    case OCTATTN_ALGORITHM_AUTO:
      return "auto";
    case OCTATTN_ALGORITHM_REFERENCE:
      return "reference";
    case OCTATTN_ALGORITHM_NAIVE:
      return "naive";
    case OCTATTN_ALGORITHM_FUSED:
      return "fused";
    default:
      return "unknown";
  }
}

}  // extern "C"
