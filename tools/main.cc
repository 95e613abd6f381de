// The octattn command-line program: info, demo and bench, on the public header alone.
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "octattn.h"
#include "tool.h"

int RunInfo(int, char**) {
  std::printf("octattn %s\n", octattn_version_string());
  octattn_context* ctx = nullptr;
  if (octattn_context_create(&ctx) != OCTATTN_OK) return 1;
  for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD}) {
    octattn_target targets[8];
    size_t n = 0;
    octattn_available_targets(b, targets, 8, &n);
    std::printf("%-8s targets this CPU runs:", octattn_backend_name(b));
    for (size_t i = 0; i < n && i < 8; ++i) std::printf(" %s", octattn_target_name(targets[i]));
    std::printf("\n");
  }
  // What auto picks: run a one-token call and ask.
  float one = 1.0f, out = 0.0f;
  const int64_t shape[4] = {1, 1, 1, 1};
  octattn_tensor q, o;
  octattn_tensor_init(&q, &one, shape, OCTATTN_LAYOUT_BHTD);
  octattn_tensor_init(&o, &out, shape, OCTATTN_LAYOUT_BHTD);
  if (octattn_attention(ctx, nullptr, &q, &q, &q, &o, nullptr, nullptr, nullptr, 0) != OCTATTN_OK)
    return 1;
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  octattn_context_last_run(ctx, &info);
  int32_t threads = 0;
  octattn_context_get_threads(ctx, &threads);
  std::printf("auto picks: algorithm %s, backend %s, target %s\n",
              octattn_algorithm_name(info.algorithm), octattn_backend_name(info.backend),
              octattn_target_name(info.target));
  std::printf("threads: %d\n", threads);
  // The element types octattn_attention takes, each tried on a one-token call.
  std::printf("dtypes of q, k, v (o: f32 or q's), computed in f32:");
  const uint16_t halves[2] = {0x3F80, 0x3C00};  // 1.0 in bf16 and in f16
  for (octattn_dtype t : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    uint16_t h = t == OCTATTN_DTYPE_BF16 ? halves[0] : halves[1], h_out = 0;
    octattn_tensor qt = q, ot = o;
    if (t != OCTATTN_DTYPE_F32) {
      qt.data = &h;
      ot.data = &h_out;
      qt.dtype = ot.dtype = t;
    }
    if (octattn_attention(ctx, nullptr, &qt, &qt, &qt, &ot, nullptr, nullptr, nullptr, 0) ==
        OCTATTN_OK)
      std::printf(" %s", t == OCTATTN_DTYPE_F32 ? "f32" : t == OCTATTN_DTYPE_BF16 ? "bf16" : "f16");
  }
  std::printf("\n");
  if (info.target == OCTATTN_TARGET_AVX512_BF16)
    std::printf(
        "bf16 q and k (and v) on the fused path: vdpbf16ps, with the header's bound for it\n");
  if (info.target == OCTATTN_TARGET_AMX_BF16)
    std::printf(
        "bf16 q and k on the fused path: q.k and the weighted sums (bf16 v) on AMX tiles\n"
        "where head_dim is a multiple of 32 (else vdpbf16ps), with the header's bound\n");
  octattn_context_destroy(ctx);
  return 0;
}

int main(int argc, char** argv) {
  const char* cmd = argc > 1 ? argv[1] : "";
  if (!std::strcmp(cmd, "info")) return RunInfo(argc - 1, argv + 1);
  if (!std::strcmp(cmd, "demo")) return RunDemo(argc - 1, argv + 1);
  if (!std::strcmp(cmd, "bench")) return RunBench(argc - 1, argv + 1);
  std::fprintf(stderr,
               "usage: octattn info | demo | bench [options]\n"
               "  info   version, compiled targets, what auto picks, threads\n"
               "  demo   causal attention step by step, then the causality check\n"
               "  bench  timings in GFLOP/s of useful work (octattn bench --help)\n");
  return cmd[0] ? 2 : 0;
}
