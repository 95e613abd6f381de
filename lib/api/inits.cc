// The versioned initializers of the public structs and their layouts: what a caller built
// against any published header, or resolving symbols at run time, uses to fill them.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lib/api/context.h"
#include "lib/api/validate.h"
#include "octattn.h"

namespace api = octattn::api;

namespace {

// The defaults of the options' first `size` bytes (a struct of that size).
octattn_status InitOptions(octattn_attention_options* options, size_t size) {
  if (!options) return OCTATTN_ERROR_NULL_POINTER;
  octattn_attention_options defaults;
  std::memset(&defaults, 0, sizeof(defaults));
  defaults.struct_size = size;
  defaults.causal = 1;
  defaults.algorithm = OCTATTN_ALGORITHM_AUTO;
  defaults.q_start = OCTATTN_Q_START_DEFAULT;
  defaults.k_start = 0;
  std::memcpy(options, &defaults, size);
  return OCTATTN_OK;
}

// One public struct's size and field offsets, for octattn_struct_layout.
struct FieldOffset {
  const char* name;
  size_t offset;
};
struct StructLayout {
  const char* name;
  size_t size;
  const FieldOffset* fields;
  size_t count;
};
#define OCTATTN_FIELD(type, field) \
  FieldOffset { #field, offsetof(type, field) }
constexpr FieldOffset kTensorFields[] = {
    OCTATTN_FIELD(octattn_tensor, data), OCTATTN_FIELD(octattn_tensor, dtype),
    OCTATTN_FIELD(octattn_tensor, reserved), OCTATTN_FIELD(octattn_tensor, shape),
    OCTATTN_FIELD(octattn_tensor, stride)};
constexpr FieldOffset kOptionsFields[] = {
    OCTATTN_FIELD(octattn_attention_options, struct_size),
    OCTATTN_FIELD(octattn_attention_options, causal),
    OCTATTN_FIELD(octattn_attention_options, algorithm),
    OCTATTN_FIELD(octattn_attention_options, window),
    OCTATTN_FIELD(octattn_attention_options, stride),
    OCTATTN_FIELD(octattn_attention_options, q_start),
    OCTATTN_FIELD(octattn_attention_options, scale),
    OCTATTN_FIELD(octattn_attention_options, reserved),
    OCTATTN_FIELD(octattn_attention_options, k_start),
    OCTATTN_FIELD(octattn_attention_options, chunk),
    OCTATTN_FIELD(octattn_attention_options, softcap),
    OCTATTN_FIELD(octattn_attention_options, reserved2),
    OCTATTN_FIELD(octattn_attention_options, alibi_slopes),
    OCTATTN_FIELD(octattn_attention_options, sinks),
    OCTATTN_FIELD(octattn_attention_options, bias),
    OCTATTN_FIELD(octattn_attention_options, mask),
    OCTATTN_FIELD(octattn_attention_options, q_starts),
    OCTATTN_FIELD(octattn_attention_options, kv_starts),
    OCTATTN_FIELD(octattn_attention_options, kv_lens),
    OCTATTN_FIELD(octattn_attention_options, sequences),
    OCTATTN_FIELD(octattn_attention_options, cu_seqlens_q),
    OCTATTN_FIELD(octattn_attention_options, cu_seqlens_k),
    OCTATTN_FIELD(octattn_attention_options, block_table),
    OCTATTN_FIELD(octattn_attention_options, block_table_cols),
    OCTATTN_FIELD(octattn_attention_options, k_scale),
    OCTATTN_FIELD(octattn_attention_options, v_scale),
    OCTATTN_FIELD(octattn_attention_options, k_scale_rows),
    OCTATTN_FIELD(octattn_attention_options, v_scale_rows),
    OCTATTN_FIELD(octattn_attention_options, qk_precision),
    OCTATTN_FIELD(octattn_attention_options, reserved3),
    OCTATTN_FIELD(octattn_attention_options, tree),
    OCTATTN_FIELD(octattn_attention_options, tree_row_bytes),
    OCTATTN_FIELD(octattn_attention_options, tree_stride),
    OCTATTN_FIELD(octattn_attention_options, block_counts),
    OCTATTN_FIELD(octattn_attention_options, block_indices),
    OCTATTN_FIELD(octattn_attention_options, full_block_counts),
    OCTATTN_FIELD(octattn_attention_options, full_block_indices),
    OCTATTN_FIELD(octattn_attention_options, block_q),
    OCTATTN_FIELD(octattn_attention_options, block_kv),
    OCTATTN_FIELD(octattn_attention_options, key_scores),
    OCTATTN_FIELD(octattn_attention_options, key_indices),
    OCTATTN_FIELD(octattn_attention_options, key_counts),
    OCTATTN_FIELD(octattn_attention_options, key_indices2),
    OCTATTN_FIELD(octattn_attention_options, key_counts2)};
constexpr FieldOffset kRunInfoFields[] = {
    OCTATTN_FIELD(octattn_run_info, struct_size), OCTATTN_FIELD(octattn_run_info, algorithm),
    OCTATTN_FIELD(octattn_run_info, backend),     OCTATTN_FIELD(octattn_run_info, target),
    OCTATTN_FIELD(octattn_run_info, threads),     OCTATTN_FIELD(octattn_run_info, shared_kv_rows)};
#undef OCTATTN_FIELD
template <size_t N>
constexpr StructLayout Layout(const char* name, size_t size, const FieldOffset (&fields)[N]) {
  return StructLayout{name, size, fields, N};
}
constexpr StructLayout kLayouts[] = {
    Layout("octattn_tensor", sizeof(octattn_tensor), kTensorFields),
    Layout("octattn_attention_options", sizeof(octattn_attention_options), kOptionsFields),
    Layout("octattn_run_info", sizeof(octattn_run_info), kRunInfoFields)};

}  // namespace

extern "C" {

octattn_status octattn_struct_layout(const char* type, const char* field, size_t* out) {
  if (!type || !out) return OCTATTN_ERROR_NULL_POINTER;
  for (const StructLayout& s : kLayouts) {
    if (std::strcmp(s.name, type) != 0) continue;
    if (!field) {
      *out = s.size;
      return OCTATTN_OK;
    }
    for (size_t i = 0; i < s.count; ++i)
      if (std::strcmp(s.fields[i].name, field) == 0) {
        *out = s.fields[i].offset;
        return OCTATTN_OK;
      }
  }
  return OCTATTN_ERROR_INVALID_OPTION;
}

octattn_status octattn_tensor_init(octattn_tensor* tensor, void* data, const int64_t shape[4],
                                   octattn_layout layout) {
  return api::Guard(nullptr, [&]() -> api::Check {
    if (!tensor || !shape) return api::Fail(OCTATTN_ERROR_NULL_POINTER, "tensor or shape is NULL");
    if (layout != OCTATTN_LAYOUT_BHTD && layout != OCTATTN_LAYOUT_BTHD)
      return api::Fail(OCTATTN_ERROR_INVALID_OPTION, "unknown layout");
    for (int d = 0; d < 4; ++d) {
      if (shape[d] < 1) return api::Fail(OCTATTN_ERROR_INVALID_SHAPE, "sizes must be positive");
      if (shape[d] > octattn::api::kMaxSize)
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "size too large");
    }
    int64_t s3 = 1, s2, s1, s0;
    const int64_t d = shape[3];
    if (layout == OCTATTN_LAYOUT_BHTD) {
      if (__builtin_mul_overflow(d, shape[2], &s1) || __builtin_mul_overflow(s1, shape[1], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s2 = d;
    } else {  // memory order [B, T, H, D]
      if (__builtin_mul_overflow(d, shape[1], &s2) || __builtin_mul_overflow(s2, shape[2], &s0) ||
          __builtin_mul_overflow(s0, shape[0], &s3))
        return api::Fail(OCTATTN_ERROR_OVERFLOW, "element count overflows");
      s1 = d;
    }
    tensor->data = data;
    tensor->dtype = OCTATTN_DTYPE_F32;
    tensor->reserved = 0;
    for (int k = 0; k < 4; ++k) tensor->shape[k] = shape[k];
    tensor->stride[0] = s0;
    tensor->stride[1] = s1;
    tensor->stride[2] = s2;
    tensor->stride[3] = 1;
    return api::Check();
  });
}

// Five versions of octattn_attention_options_init, all named by .symver directives (the
// symver attribute is GCC-only): the default (OCTATTN_0.11 on) writes the current struct,
// which programs linked now get, statically too; @OCTATTN_0.6, @OCTATTN_0.3, @OCTATTN_0.2
// and @OCTATTN_0.1 write the 168, 104, 56 and 48 bytes of those versions for programs
// linked against them, whose structs are that size.
__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_11(
    octattn_attention_options* options) {
  return InitOptions(options, sizeof(*options));
}
__asm__(
    ".symver octattn_attention_options_init_0_11, octattn_attention_options_init@@OCTATTN_0.11");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_6(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_6);
}
__asm__(".symver octattn_attention_options_init_0_6, octattn_attention_options_init@OCTATTN_0.6");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_3(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_3);
}
__asm__(".symver octattn_attention_options_init_0_3, octattn_attention_options_init@OCTATTN_0.3");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_2(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_2);
}
__asm__(".symver octattn_attention_options_init_0_2, octattn_attention_options_init@OCTATTN_0.2");

__attribute__((visibility("default"))) octattn_status octattn_attention_options_init_0_1(
    octattn_attention_options* options) {
  return InitOptions(options, octattn::api::kOptionsSize_0_1);
}
__asm__(".symver octattn_attention_options_init_0_1, octattn_attention_options_init@OCTATTN_0.1");

// The defaults of the caller's struct of struct_size bytes, whatever version declared it:
// the one init a caller that resolves symbols at run time can call safely.
octattn_status octattn_attention_options_init_size(octattn_attention_options* options,
                                                   size_t struct_size) {
  if (!options) return OCTATTN_ERROR_NULL_POINTER;
  if (struct_size < octattn::api::kOptionsSize_0_1) return OCTATTN_ERROR_STRUCT_SIZE;
  const size_t known = sizeof(*options);
  InitOptions(options, struct_size < known ? struct_size : known);
  if (struct_size > known)
    std::memset(reinterpret_cast<char*>(options) + known, 0, struct_size - known);
  options->struct_size = struct_size;
  return OCTATTN_OK;
}

}  // extern "C"
