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
  // What auto runs for each element type of q, k and v, each tried on a one-token call
  // (the context's target serves them all; which arithmetic it runs depends on the type).
  std::printf("auto, per element type of q, k and v (o: f32 or q's; computed in f32):\n");
  const uint16_t halves[2] = {0x3F80, 0x3C00};  // 1.0 in bf16 and in f16
  bool amx_runs = false, dot_runs = false;
  {
    octattn_target targets[8];
    size_t n = 0;
    octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, targets, 8, &n);
    for (size_t i = 0; i < n && i < 8; ++i) {
      amx_runs |= targets[i] == OCTATTN_TARGET_AMX_BF16;
      dot_runs |= targets[i] == OCTATTN_TARGET_AVX512_BF16;
    }
  }
  for (octattn_dtype t : {OCTATTN_DTYPE_F32, OCTATTN_DTYPE_BF16, OCTATTN_DTYPE_F16}) {
    uint16_t h = t == OCTATTN_DTYPE_BF16 ? halves[0] : halves[1], h_out = 0;
    octattn_tensor qt = q, ot = o;
    if (t != OCTATTN_DTYPE_F32) {
      qt.data = &h;
      ot.data = &h_out;
      qt.dtype = ot.dtype = t;
    }
    const char* name = t == OCTATTN_DTYPE_F32 ? "f32" : t == OCTATTN_DTYPE_BF16 ? "bf16" : "f16";
    if (octattn_attention(ctx, nullptr, &qt, &qt, &qt, &ot, nullptr, nullptr, nullptr, 0) !=
        OCTATTN_OK) {
      std::printf("  %-5s not taken here\n", name);
      continue;
    }
    octattn_run_info ti{};
    ti.struct_size = sizeof(ti);
    octattn_context_last_run(ctx, &ti);
    const bool dot =
        ti.target == OCTATTN_TARGET_AVX512_BF16 || ti.target == OCTATTN_TARGET_AMX_BF16;
    const char* how = "f32 FMAs";
    if (t == OCTATTN_DTYPE_F16) how = "widened to f32 as it is read";
    if (t == OCTATTN_DTYPE_BF16)
      how = ti.target == OCTATTN_TARGET_AMX_BF16
                ? "fused q.k and weighted sums on AMX tiles where head_dim is a multiple of 32, "
                  "else vdpbf16ps"
            : dot ? "fused q.k on vdpbf16ps, the weighted sums too where v is bf16 and no score "
                    "modifier or strided column applies (the header's bound for it)"
            : dot_runs && ti.target == OCTATTN_TARGET_AVX512
                ? "widened to f32 as it is read: auto passes over avx512_bf16 on Intel cores, "
                  "where vdpbf16ps ran bf16 prefill and decode slower than widening "
                  "(OCTATTN_TARGET=avx512_bf16 asks for it)"
                : "widened to f32 as it is read (this target has no bf16 dot product)";
    std::printf("  %-5s %s %s: %s\n", name, octattn_backend_name(ti.backend),
                octattn_target_name(ti.target), how);
  }
  {
    // q . k in int8 (OCTATTN_QK_INT8) over an int8 cache, which auto may run on another
    // target than the context's: the one whose int8 dot products it takes.
    int8_t code = 1;
    float scale = 1.0f;
    octattn_tensor kt = q, st = q;
    kt.data = &code;
    kt.dtype = OCTATTN_DTYPE_INT8;
    st.data = &scale;
    octattn_attention_options opt;
    octattn_attention_options_init(&opt);
    opt.qk_precision = OCTATTN_QK_INT8;
    opt.k_scale = opt.v_scale = &st;
    if (octattn_attention(ctx, &opt, &q, &kt, &kt, &o, nullptr, nullptr, nullptr, 0) ==
        OCTATTN_OK) {
      octattn_run_info ti{};
      ti.struct_size = sizeof(ti);
      octattn_context_last_run(ctx, &ti);
      const bool dot =
          ti.target == OCTATTN_TARGET_AVX512_BF16 || ti.target == OCTATTN_TARGET_AMX_BF16;
      std::printf("  q . k in int8 (OCTATTN_QK_INT8) %s %s: %s\n", octattn_backend_name(ti.backend),
                  octattn_target_name(ti.target),
                  !dot ? "integer sums on f32 FMAs (this target has no int8 dot product)"
                  : ti.target != info.target
                      ? "vpdpbusd: auto runs these calls on the target with int8 dot products "
                        "(the same bytes)"
                      : "vpdpbusd");
    }
  }
  if (amx_runs && info.target != OCTATTN_TARGET_AMX_BF16)
    std::printf(
        "amx_bf16 runs here only when asked for (OCTATTN_TARGET=amx_bf16): on an Intel host its "
        "bf16 prefill ran 1.7-1.8x the widened path, its decode 0.72-0.88x avx512_bf16's "
        "(docs/PERFORMANCE.md)\n");
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
