/* A caller built against an older header (abi/v0.1, v0.2 or v0.3/octattn.h,
 * frozen; CALLER_VERSION and OPTIONS_SIZE name it) and run against the current library:
 * its structs are that version's sizes, followed here by canary bytes that the library
 * must never write, and every call must keep working. */
#include <stdio.h>
#include <string.h>

#include "octattn.h"

#define CANARY 0xA5
#ifndef CALLER_VERSION
#define CALLER_VERSION "0.1"
#define OPTIONS_SIZE 48
#endif

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

static int canary_intact(const unsigned char* p, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i)
    if (p[i] != CANARY) return 0;
  return 1;
}

int main(void) {
  /* An old struct followed by 64 canary bytes. */
  union {
    octattn_attention_options opt;
    unsigned char bytes[sizeof(octattn_attention_options) + 64];
  } o;
  union {
    octattn_run_info info;
    unsigned char bytes[sizeof(octattn_run_info) + 64];
  } r;
  float q[1 * 2 * 5 * 4], k[1 * 1 * 5 * 4], v[1 * 1 * 5 * 4], out[1 * 2 * 5 * 4], lse[10];
  const int64_t qs[4] = {1, 2, 5, 4}, ks[4] = {1, 1, 5, 4}, ls[4] = {1, 2, 5, 1};
  octattn_tensor tq, tk, tv, to, tl;
  octattn_context* ctx = NULL;
  size_t i;
  octattn_status st;
  for (i = 0; i < 40; ++i) q[i] = (float)(i % 7) * 0.25f - 0.5f;
  for (i = 0; i < 20; ++i) {
    k[i] = (float)(i % 5) * 0.3f - 0.6f;
    v[i] = (float)i;
  }
  expect(sizeof(octattn_attention_options) == OPTIONS_SIZE && sizeof(octattn_run_info) == 24,
         "the frozen header has its version's sizes");
  memset(o.bytes, CANARY, sizeof(o.bytes));
  expect(octattn_attention_options_init(&o.opt) == OCTATTN_OK, "options_init");
  expect(o.opt.struct_size == sizeof(octattn_attention_options),
         "options_init sets the caller's size");
  expect(canary_intact(o.bytes + sizeof(octattn_attention_options), 64),
         "options_init writes only the caller's struct");
  o.opt.window = 3;
  expect(octattn_context_create(&ctx) == OCTATTN_OK, "context_create");
  octattn_tensor_init(&tq, q, qs, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tk, k, ks, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tv, v, ks, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&to, out, qs, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&tl, lse, ls, OCTATTN_LAYOUT_BHTD);
  st = octattn_attention(ctx, &o.opt, &tq, &tk, &tv, &to, &tl, NULL, NULL, 0);
  if (st != OCTATTN_OK) fprintf(stderr, "%s\n", octattn_context_last_error(ctx));
  expect(st == OCTATTN_OK, "attention with an old options struct");
  /* Row 0 reads key 0 alone: its output is value row 0 and its lse the one score. */
  expect(memcmp(out, v, 4 * sizeof(float)) == 0, "row 0 is value row 0");
  memset(r.bytes, CANARY, sizeof(r.bytes));
  r.info.struct_size = sizeof(octattn_run_info);
  expect(octattn_context_last_run(ctx, &r.info) == OCTATTN_OK, "last_run");
  expect(r.info.struct_size == 24 && r.info.algorithm == OCTATTN_ALGORITHM_FUSED,
         "last_run reports the fused run");
  expect(canary_intact(r.bytes + sizeof(octattn_run_info), 64),
         "last_run writes only the 0.1 struct");
  o.opt.window = -1;
  expect(octattn_attention(ctx, &o.opt, &tq, &tk, &tv, &to, NULL, NULL, NULL, 0) ==
             OCTATTN_ERROR_INVALID_OPTION,
         "a bad option is still refused");
  o.opt.window = 0;
  o.opt.struct_size = 40;
  expect(octattn_attention(ctx, &o.opt, &tq, &tk, &tv, &to, NULL, NULL, NULL, 0) ==
             OCTATTN_ERROR_STRUCT_SIZE,
         "a struct_size below 0.1's is refused");
  octattn_context_destroy(ctx);
  if (failures) return 1;
  printf("%s caller: ok against library %s\n", CALLER_VERSION, octattn_version_string());
  return 0;
}
