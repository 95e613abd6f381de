/* A C99 program that includes the public header, pins the layout of every public
 * struct at compile time, calls every declared function and runs one small attention
 * through the shared library. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "octattn.h"

/* C99 has no _Static_assert: a negative array size fails the build instead. */
#define PIN(name, cond) typedef char pin_##name[(cond) ? 1 : -1]

/* The layouts (the same numbers are checked by the Python, Rust and Go consumers).
 * Structs only grow at their end, so an offset never changes once published; 0.2
 * appended k_start to the options (48 -> 56 bytes), 0.3 chunk and the score modifiers
 * (56 -> 104), 0.6 the sequences of padded, ragged and paged batches (104 -> 168), 0.11
 * the scales of quantized caches, qk_precision, the tree, block masks and key scores
 * and key lists (168 -> 320). */
PIN(tensor_size, sizeof(octattn_tensor) == 80);
PIN(tensor_data, offsetof(octattn_tensor, data) == 0);
PIN(tensor_dtype, offsetof(octattn_tensor, dtype) == 8);
PIN(tensor_reserved, offsetof(octattn_tensor, reserved) == 12);
PIN(tensor_shape, offsetof(octattn_tensor, shape) == 16);
PIN(tensor_stride, offsetof(octattn_tensor, stride) == 48);
PIN(options_size, sizeof(octattn_attention_options) == 320);
PIN(options_struct_size, offsetof(octattn_attention_options, struct_size) == 0);
PIN(options_causal, offsetof(octattn_attention_options, causal) == 8);
PIN(options_algorithm, offsetof(octattn_attention_options, algorithm) == 12);
PIN(options_window, offsetof(octattn_attention_options, window) == 16);
PIN(options_stride, offsetof(octattn_attention_options, stride) == 24);
PIN(options_q_start, offsetof(octattn_attention_options, q_start) == 32);
PIN(options_scale, offsetof(octattn_attention_options, scale) == 40);
PIN(options_reserved, offsetof(octattn_attention_options, reserved) == 44);
PIN(options_k_start, offsetof(octattn_attention_options, k_start) == 48);
PIN(options_chunk, offsetof(octattn_attention_options, chunk) == 56);
PIN(options_softcap, offsetof(octattn_attention_options, softcap) == 64);
PIN(options_reserved2, offsetof(octattn_attention_options, reserved2) == 68);
PIN(options_alibi_slopes, offsetof(octattn_attention_options, alibi_slopes) == 72);
PIN(options_sinks, offsetof(octattn_attention_options, sinks) == 80);
PIN(options_bias, offsetof(octattn_attention_options, bias) == 88);
PIN(options_mask, offsetof(octattn_attention_options, mask) == 96);
PIN(options_q_starts, offsetof(octattn_attention_options, q_starts) == 104);
PIN(options_kv_starts, offsetof(octattn_attention_options, kv_starts) == 112);
PIN(options_kv_lens, offsetof(octattn_attention_options, kv_lens) == 120);
PIN(options_sequences, offsetof(octattn_attention_options, sequences) == 128);
PIN(options_cu_seqlens_q, offsetof(octattn_attention_options, cu_seqlens_q) == 136);
PIN(options_cu_seqlens_k, offsetof(octattn_attention_options, cu_seqlens_k) == 144);
PIN(options_block_table, offsetof(octattn_attention_options, block_table) == 152);
PIN(options_block_table_cols, offsetof(octattn_attention_options, block_table_cols) == 160);
PIN(options_k_scale, offsetof(octattn_attention_options, k_scale) == 168);
PIN(options_v_scale, offsetof(octattn_attention_options, v_scale) == 176);
PIN(options_k_scale_rows, offsetof(octattn_attention_options, k_scale_rows) == 184);
PIN(options_v_scale_rows, offsetof(octattn_attention_options, v_scale_rows) == 192);
PIN(options_qk_precision, offsetof(octattn_attention_options, qk_precision) == 200);
PIN(options_reserved3, offsetof(octattn_attention_options, reserved3) == 204);
PIN(options_tree, offsetof(octattn_attention_options, tree) == 208);
PIN(options_tree_row_bytes, offsetof(octattn_attention_options, tree_row_bytes) == 216);
PIN(options_tree_stride, offsetof(octattn_attention_options, tree_stride) == 224);
PIN(options_block_counts, offsetof(octattn_attention_options, block_counts) == 232);
PIN(options_block_indices, offsetof(octattn_attention_options, block_indices) == 240);
PIN(options_full_block_counts, offsetof(octattn_attention_options, full_block_counts) == 248);
PIN(options_full_block_indices, offsetof(octattn_attention_options, full_block_indices) == 256);
PIN(options_block_q, offsetof(octattn_attention_options, block_q) == 264);
PIN(options_block_kv, offsetof(octattn_attention_options, block_kv) == 272);
PIN(options_key_scores, offsetof(octattn_attention_options, key_scores) == 280);
PIN(options_key_indices, offsetof(octattn_attention_options, key_indices) == 288);
PIN(options_key_counts, offsetof(octattn_attention_options, key_counts) == 296);
PIN(options_key_indices2, offsetof(octattn_attention_options, key_indices2) == 304);
PIN(options_key_counts2, offsetof(octattn_attention_options, key_counts2) == 312);
PIN(run_info_size, sizeof(octattn_run_info) == 32);
PIN(run_info_struct_size, offsetof(octattn_run_info, struct_size) == 0);
PIN(run_info_algorithm, offsetof(octattn_run_info, algorithm) == 8);
PIN(run_info_backend, offsetof(octattn_run_info, backend) == 12);
PIN(run_info_target, offsetof(octattn_run_info, target) == 16);
PIN(run_info_threads, offsetof(octattn_run_info, threads) == 20);
PIN(run_info_shared_kv_rows, offsetof(octattn_run_info, shared_kv_rows) == 24);

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

/* Every function with a NULL context or out-pointer answers NULL_POINTER (or its
 * documented value): each symbol is the function the header declares. */
static void call_every_function(void) {
  octattn_tensor t;
  const int64_t shape[4] = {1, 1, 1, 1};
  int32_t threads = 0;
  size_t count = 0, bytes = 0;
  octattn_target targets[8];
  octattn_run_info info;
  const octattn_status null = OCTATTN_ERROR_NULL_POINTER;
  expect(octattn_version_number() == OCTATTN_VERSION_NUMBER, "octattn_version_number");
  expect(octattn_version_number() >= 400 && strchr(octattn_version_string(), '.') != NULL,
         "octattn_version_string");
  expect(
      strcmp(octattn_status_string(OCTATTN_ERROR_ALIASING), "output overlaps another tensor") == 0,
      "octattn_status_string");
  expect(strcmp(octattn_backend_name(OCTATTN_BACKEND_XSIMD), "xsimd") == 0, "octattn_backend_name");
  expect(strcmp(octattn_target_name(OCTATTN_TARGET_AVX2), "avx2") == 0, "octattn_target_name");
  expect(strcmp(octattn_target_name(OCTATTN_TARGET_NEON), "neon") == 0 &&
             strcmp(octattn_target_name(OCTATTN_TARGET_SVE2_128), "sve2_128") == 0 &&
             strcmp(octattn_target_name(OCTATTN_TARGET_SVE_256), "sve_256") == 0,
         "octattn_target_name (ARM64)");
  expect(strcmp(octattn_target_name(OCTATTN_TARGET_AVX512_BF16), "avx512_bf16") == 0 &&
             strcmp(octattn_target_name(OCTATTN_TARGET_AMX_BF16), "amx_bf16") == 0 &&
             strcmp(octattn_target_name(OCTATTN_TARGET_AMX_BF16 + 1), "unknown") == 0,
         "octattn_target_name (avx512_bf16, amx_bf16)");
  expect(strcmp(octattn_algorithm_name(OCTATTN_ALGORITHM_FUSED), "fused") == 0,
         "octattn_algorithm_name");
  expect(octattn_tensor_init(NULL, NULL, shape, OCTATTN_LAYOUT_BHTD) == null,
         "octattn_tensor_init");
  expect(octattn_tensor_init(&t, &t, shape, 7) == OCTATTN_ERROR_INVALID_OPTION,
         "octattn_tensor_init layout");
  expect(octattn_context_create(NULL) == null, "octattn_context_create");
  octattn_context_destroy(NULL);
  expect(octattn_context_set_threads(NULL, 1) == null, "octattn_context_set_threads");
  expect(octattn_context_get_threads(NULL, &threads) == null, "octattn_context_get_threads");
  expect(octattn_context_set_target(NULL, 0, 0) == null, "octattn_context_set_target");
  expect(octattn_context_set_memory_limit(NULL, 0) == null, "octattn_context_set_memory_limit");
  expect(strcmp(octattn_context_last_error(NULL), "") == 0, "octattn_context_last_error");
  info.struct_size = sizeof(info);
  expect(octattn_context_last_run(NULL, &info) == null, "octattn_context_last_run");
  expect(octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, targets, 8, NULL) == null,
         "octattn_available_targets");
  expect(octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, targets, 8, &count) == OCTATTN_OK &&
             count >= 1,
         "octattn_available_targets count");
  expect(octattn_attention_options_init(NULL) == null, "octattn_attention_options_init");
  expect(octattn_attention_options_init_size(NULL, 48) == null,
         "octattn_attention_options_init_size");
  expect(octattn_attention_workspace_size(NULL, NULL, &t, &t, &t, &t, NULL, NULL, &bytes) == null,
         "octattn_attention_workspace_size");
  expect(octattn_attention(NULL, NULL, &t, &t, &t, &t, NULL, NULL, NULL, 0) == null,
         "octattn_attention");
  expect(octattn_scores(NULL, &t, &t, &t) == null, "octattn_scores");
  expect(octattn_scale(NULL, &t, 1.0f) == null, "octattn_scale");
  expect(octattn_mask(NULL, NULL, &t) == null, "octattn_mask");
  expect(octattn_softmax(NULL, &t, NULL) == null, "octattn_softmax");
  expect(octattn_modify_scores(NULL, NULL, &t) == null, "octattn_modify_scores");
  expect(octattn_softmax_sinks(NULL, &t, NULL, NULL) == null, "octattn_softmax_sinks");
  expect(octattn_weighted_sum(NULL, &t, &t, &t) == null, "octattn_weighted_sum");
  expect(octattn_split_heads(NULL, &t, 1, &t) == null, "octattn_split_heads");
  expect(octattn_merge_heads(NULL, &t, &t) == null, "octattn_merge_heads");
  expect(octattn_split_qkv(NULL, &t, 1, 1, &t, &t, &t) == null, "octattn_split_qkv");
  expect(octattn_merge(NULL, 1, &t, &t, &t, NULL) == null, "octattn_merge");
  expect(octattn_kv_store(NULL, &t, &t, NULL, 0, NULL) == null, "octattn_kv_store");
  expect(octattn_struct_layout("octattn_tensor", NULL, &bytes) == OCTATTN_OK && bytes == sizeof(t),
         "octattn_struct_layout");
  expect(octattn_attention_backward(NULL, NULL, &t, &t, &t, &t, &t, &t, NULL, &t, &t, &t, NULL,
                                    NULL, NULL, 0) == null,
         "octattn_attention_backward");
  expect(octattn_attention_backward_workspace_size(NULL, NULL, &t, &t, &t, &t, &t, &t, NULL, &t, &t,
                                                   &t, NULL, NULL, &bytes) == null,
         "octattn_attention_backward_workspace_size");
}

int main(void) {
  size_t i;
  float q[2 * 3 * 4], k[2 * 3 * 4], v[2 * 3 * 4], o[2 * 3 * 4];
  const int64_t shape[4] = {1, 2, 3, 4};
  octattn_tensor tq, tk, tv, to;
  octattn_context* ctx = NULL;
  octattn_status st;
  call_every_function();
  for (i = 0; i < 24; ++i) {
    q[i] = (float)i / 24.0f;
    k[i] = 1.0f - (float)i / 24.0f;
    v[i] = (float)i;
  }
  octattn_tensor_init(&tq, q, shape, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tk, k, shape, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tv, v, shape, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&to, o, shape, OCTATTN_LAYOUT_BHTD);
  if (octattn_context_create(&ctx) != OCTATTN_OK) return 3;
  st = octattn_attention(ctx, NULL, &tq, &tk, &tv, &to, NULL, NULL, NULL, 0);
  if (st != OCTATTN_OK) {
    fprintf(stderr, "%s: %s\n", octattn_status_string(st), octattn_context_last_error(ctx));
    return 4;
  }
  /* Row 0 of head 0 reads only key 0: its output is value row 0. */
  expect(memcmp(o, v, 4 * sizeof(float)) == 0, "row 0 equals value row 0");
  {
    /* The backward of o: row 0 reads key 0 alone (p = 1), so dv of key 0 gets dout row 0
     * from it and dq of row 0 is 0 (its softmax has one entry). */
    float lse[2 * 3], dout[2 * 3 * 4], dq[2 * 3 * 4], dk[2 * 3 * 4], dv[2 * 3 * 4];
    const int64_t lse_shape[4] = {1, 2, 3, 1};
    octattn_tensor tl, tdo, tdq, tdk, tdv;
    for (i = 0; i < 24; ++i) dout[i] = (float)(i % 5) - 2.0f;
    octattn_tensor_init(&tl, lse, lse_shape, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tdo, dout, shape, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tdq, dq, shape, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tdk, dk, shape, OCTATTN_LAYOUT_BHTD);
    octattn_tensor_init(&tdv, dv, shape, OCTATTN_LAYOUT_BHTD);
    st = octattn_attention(ctx, NULL, &tq, &tk, &tv, &to, &tl, NULL, NULL, 0);
    if (st == OCTATTN_OK)
      st = octattn_attention_backward(ctx, NULL, &tq, &tk, &tv, &to, &tl, &tdo, NULL, &tdq, &tdk,
                                      &tdv, NULL, NULL, NULL, 0);
    expect(st == OCTATTN_OK, "octattn_attention_backward runs");
    expect(dq[0] == 0.0f && dq[1] == 0.0f && dq[2] == 0.0f && dq[3] == 0.0f,
           "dq of a row with one key is 0");
  }
  octattn_context_destroy(ctx);
  if (failures) return 1;
  printf("every function called, layouts pinned, version %s\n", octattn_version_string());
  return 0;
}
