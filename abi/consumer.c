/* A C99 program that includes the public header, takes the address of every declared
 * function and runs one small attention through the shared library. */
#include <stdio.h>
#include <string.h>

#include "octattn.h"

typedef void (*any_fn)(void);

int main(void) {
  const any_fn functions[] = {
      (any_fn)&octattn_algorithm_name,
      (any_fn)&octattn_attention,
      (any_fn)&octattn_attention_options_init,
      (any_fn)&octattn_attention_workspace_size,
      (any_fn)&octattn_available_targets,
      (any_fn)&octattn_backend_name,
      (any_fn)&octattn_context_create,
      (any_fn)&octattn_context_destroy,
      (any_fn)&octattn_context_get_threads,
      (any_fn)&octattn_context_last_error,
      (any_fn)&octattn_context_last_run,
      (any_fn)&octattn_context_set_memory_limit,
      (any_fn)&octattn_context_set_target,
      (any_fn)&octattn_context_set_threads,
      (any_fn)&octattn_mask,
      (any_fn)&octattn_merge_heads,
      (any_fn)&octattn_scale,
      (any_fn)&octattn_scores,
      (any_fn)&octattn_softmax,
      (any_fn)&octattn_split_heads,
      (any_fn)&octattn_split_qkv,
      (any_fn)&octattn_status_string,
      (any_fn)&octattn_target_name,
      (any_fn)&octattn_tensor_init,
      (any_fn)&octattn_version_number,
      (any_fn)&octattn_version_string,
      (any_fn)&octattn_weighted_sum,
  };
  size_t i;
  float q[2 * 3 * 4], k[2 * 3 * 4], v[2 * 3 * 4], o[2 * 3 * 4];
  const int64_t shape[4] = {1, 2, 3, 4};
  octattn_tensor tq, tk, tv, to;
  octattn_context* ctx = NULL;
  octattn_status st;
  for (i = 0; i < sizeof(functions) / sizeof(functions[0]); ++i) {
    if (!functions[i]) return 1;
  }
  for (i = 0; i < 24; ++i) {
    q[i] = (float)i / 24.0f;
    k[i] = 1.0f - (float)i / 24.0f;
    v[i] = (float)i;
  }
  if (octattn_version_number() != OCTATTN_VERSION_NUMBER) return 2;
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
  if (memcmp(o, v, 4 * sizeof(float)) != 0) return 5;
  octattn_context_destroy(ctx);
  printf("%u functions linked, version %s\n", (unsigned)(sizeof(functions) / sizeof(functions[0])),
         octattn_version_string());
  return 0;
}
