#define _POSIX_C_SOURCE 200809L
/*
 * GPU tests of the cuda backend's grouped GEMM and MoE layer (both grouped kernels: tensor cores
 * where K % 128 == 0, e.g. K 512 and H 256, the CUDA-core kernel otherwise, e.g. K 1088 and I 96; the
 * tensor-core kernel's token chunks of 8, 16 and 64 rows follow the mean rows per expert) (skipped with exit 77 and the reason
 * when it cannot run here), against the reference backend through the harness (fresh random data,
 * NaN-prefilled outputs, device memory; the streaming-kernel tests force that path with the config
 * moe.streaming): grouped GEMM W4A4/W4A16 x NVFP4/MXFP4 for T in
 * {1, 8, 64, 300}, and on the lean decode kernel's two-tile CTAs past N and its one-tile variant;
 * the MoE layer W4A4/W4A16 x NVFP4/MXFP4 x shared expert on/off x uniform, skewed
 * (a hot expert with 50% of the tokens) and duplicate routing for T in {1, 8, 64, 300}; Qwen3.5-
 * shaped layers (top-10; E and T scaled down so the double-precision reference stays fast, plus one
 * case with the real per-expert shapes w13 2048 x 4096, w2 4096 x 1024); prefill-sized layers
 * (T 1024 and 1100, skewed and uniform, all activation dtypes); the grouped large-M tiles
 * (moe_grouped_large.cu: MoE layers and grouped GEMMs with >= 16 rows per expert, W4A16 and W4A4,
 * NVFP4 and MXFP4, random and skewed routing, T >= 1024; on SM90 on the register-A wgmma tiles at the
 * width the library picks, then at each width (configs moe.prefill.wgra32 .. wgra256, and
 * moe.prefill.wgra128.bound-tiles) and on the mma.sync tiles (moe.prefill.mma64 / mma128)); the
 * device scalars (alpha_device, act_scales_device) against the same values by value, bit for bit;
 * every entry point captured in a CUDA graph and replayed against its eager result, bit for bit;
 * the bf16 SiLU*up against the f32 one on edge values, bit for bit; SiLU*up in the gate_up
 * GEMM's epilogue against the separate kernel, and the shared expert as the extra slot of the routed
 * launch against launches of its own, bit for bit; the
 * W4A4 decode inputs' one-kernel quantize to bf16 against quantize + dequantize, bit for bit; which
 * variants run (the run info's note); and the device contract for invalid expert ids (a NaN output
 * row, nothing read or written out of bounds); the lean kernel's cluster K split against the
 * reference; the routing in the gate_up launch against the routing kernel's layer, bit for bit.
 * `test_cuda_moe --library-tiles-only` skips the forced-width passes; `--cluster-only`,
 * `--shared-dense-only` and `--route-fused-only` run just the cluster split's cases, the shared
 * expert's on the dense kernels or the routing in gate_up.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4kit.h"
#include "harness.h"
#include "harness_moe.h"
#include "backends/cuda/config/moe_config.h" /* FP4_MOE_FIXED_K_LIST (plain C) */
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/moe_kernels.h"
#include "format/codec.h"
#endif

static int g_runs, g_failures, g_skips;

/* A section's tally, after the seconds since the start: the whole test takes minutes on a GPU, and
 * a run cut short by a time limit still shows where the time went. */
static struct timespec g_t0; /* when the program started */
static void progress(const char *fmt, ...) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  printf("[%6.1f s] ", (double)(t.tv_sec - g_t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - g_t0.tv_nsec));
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}
/* The config every case runs (NULL: the library's choice); the passes below set it. */
static const char *g_config;

static void run_case(fp4_context *ctx, const fp4h_case *cin, uint64_t seed) {
  fp4h_case cc = *cin;
  if (!cc.config) cc.config = g_config;
  const fp4h_case *c = &cc;
  fp4h_result r;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, c, seed, &r);
  g_runs++;
  if (r.status == FP4_OK && r.passed) return;
  /* A forced prefill variant on activations the prefill tiles do not take (f32; f16 with MXFP4) is
   * refused for the layer, as it must be: counted, not failed. */
  const int no_prefill = c->a_dtype == FP4_DTYPE_F32 || (c->a_dtype == FP4_DTYPE_F16 && c->format == FP4_FORMAT_MXFP4);
  if (r.status == FP4_ERR_UNSUPPORTED && c->config && !strncmp(c->config, "moe.prefill.", 12) && no_prefill) {
    g_skips++;
    return;
  }
  g_failures++;
  printf("FAIL %-14s [%s] %s T=%lld N/I=%lld K/H=%lld E=%lld k=%lld mode=%d shared=%d route=%d a=%s out=%s: %s (%s)\n",
         c->name, c->config ? c->config : "default", fp4_format_name(c->format), (long long)c->m, (long long)c->n, (long long)c->k,
         (long long)c->experts, (long long)c->top_k, c->moe_mode, c->shared, c->routing, fp4_dtype_name(c->a_dtype),
         fp4_dtype_name(c->out_dtype), r.message, fp4_status_str(r.status));
}

/* A case of the lean kernel's compile-time-K walk, run on both walks with the same data. The walks
 * add the same products in the same order, so their outputs, and hence their errors against the
 * reference, must be equal to the last bit; the reference bound is 1e-4 here, not the harness's 1e-5
 * for f32 outputs: at K = 7168 the tensor cores' FP32 sums reach 1.3e-5 on either walk. */
static void run_fixed_k_case(fp4_context *ctx, const fp4h_case *cin, int ksplit, uint64_t seed) {
  char generic_name[48], fixed_name[48];
  snprintf(generic_name, sizeof generic_name, "moe.lean.generic-k.r32.k%d.s1", ksplit);
  snprintf(fixed_name, sizeof fixed_name, "moe.lean.r32.k%d.s1", ksplit);
  fp4h_case c = *cin;
  fp4h_result generic, fixed;
  c.config = generic_name;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, &c, seed, &generic);
  c.config = fixed_name;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, &c, seed, &fixed);
  g_runs++;
  const int ok = generic.status == FP4_OK && fixed.status == FP4_OK && fixed.nonfinite == 0 && !fixed.all_zero &&
                 fixed.rel_err == generic.rel_err && fixed.rel_err <= 1e-4;
  if (ok) return;
  g_failures++;
  printf("FAIL %s T=%lld N=%lld K=%lld: %s / %s: rel err %.3g / %.3g (%s / %s); %s | %s\n", c.name, (long long)c.m,
         (long long)c.n, (long long)c.k, generic_name, fixed_name, generic.rel_err, fixed.rel_err,
         fp4_status_str(generic.status), fp4_status_str(fixed.status), generic.message, fixed.message);
}

static const int64_t kTokens[] = {1, 8, 64, 300};
static const fp4_dtype kDtypes[] = {FP4_DTYPE_BF16, FP4_DTYPE_F16, FP4_DTYPE_F32};
static const fp4_scale_layout kLayouts[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR};

/* A grouped GEMM case; rot rotates the scale layouts. */
static fp4h_case grouped_case(const char *name, int f, int w4a4, int rot, int64_t m, int64_t n, int64_t k, int64_t e,
                              fp4_dtype a_dtype, fp4_dtype out_dtype, fp4h_data data) {
  fp4h_case c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.op = w4a4 ? FP4H_GROUPED_MM : FP4H_GROUPED_MM_W4A16;
  c.format = (fp4_format)f;
  c.layout_a = kLayouts[rot % 2];
  c.layout_b = kLayouts[(rot + 1) % 2];
  c.m = m;
  c.n = n;
  c.k = k;
  c.a_dtype = a_dtype;
  c.out_dtype = out_dtype;
  c.data = data;
  c.experts = e;
  return c;
}

static void test_grouped(fp4_context *ctx) {
  uint64_t seed = 100;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (size_t t = 0; t < sizeof kTokens / sizeof *kTokens; t++) {
        const int rot = (int)(f * 8 + w4a4 * 4 + t);
        const fp4_dtype out = kDtypes[(rot + 2) % 3] == FP4_DTYPE_F16 ? FP4_DTYPE_F32 : kDtypes[(rot + 2) % 3];
        /* a partial N tile; more than one 1024-element K chunk, and a partial one */
        fp4h_case c = grouped_case(w4a4 ? "grouped_w4a4" : "grouped_w4a16", f, w4a4, rot, kTokens[t], t % 2 ? 200 : 256,
                                   t % 2 ? 1088 : 512, t == 3 ? 64 : 16, kDtypes[rot % 3], out,
                                   rot % 4 == 3 ? FP4H_DATA_UNIFORM : FP4H_DATA_NORMAL);
        run_case(ctx, &c, seed++);
      }
  /* The lean decode kernel (bf16 rows, K % 128 == 0, one token tile) covers two 16-row tiles per
   * CTA: with N % 32 == 16 the last CTA's second tile lies wholly past N. Then the same on its
   * one-tile variant (kept for measuring), with CTAs walking 3 groups of 32 rows (7 groups: the
   * last walk is short), and with whole K per warp or K split over 2 warps (NVFP4; MXFP4 takes the
   * 4-warp split: 128 or 64 rows per CTA, so groups start past N), alone and walking 3 such blocks:
   * the batches here are too small for the library's own rules to pick these forms. */
  static const struct {
    const char *name, *nvfp4, *mxfp4;
  } lean[] = {
      {"grouped_lean32", NULL, NULL},
      {"grouped_lean16", "moe.lean.generic-k.r16.k4.s1", "moe.lean.generic-k.r16.k4.s1"},
      {"grouped_lean_span3", "moe.lean.generic-k.r32.k4.s3", "moe.lean.generic-k.r32.k4.s3"},
      {"grouped_lean_whole", "moe.lean.generic-k.r32.k1.s1", "moe.lean.generic-k.r32.k4.s1"},
      {"grouped_lean_whole_span3", "moe.lean.generic-k.r32.k1.s3", "moe.lean.generic-k.r32.k4.s3"},
      {"grouped_lean_ksplit2", "moe.lean.generic-k.r32.k2.s1", "moe.lean.generic-k.r32.k4.s2"},
      {"grouped_lean_ksplit2_span3", "moe.lean.generic-k.r32.k2.s3", "moe.lean.generic-k.r32.k4.s4"},
  };
  for (size_t v = 0; v < sizeof lean / sizeof *lean; v++)
    for (int f = 0; f < 2; f++)
      for (size_t t = 0; t < 2; t++) {
        fp4h_case c = grouped_case(lean[v].name, f, 0, (int)(f + t), kTokens[t], 208, 512, 16, FP4_DTYPE_BF16,
                                   FP4_DTYPE_F32, FP4H_DATA_NORMAL);
        c.config = f == FP4_FORMAT_NVFP4 ? lean[v].nvfp4 : lean[v].mxfp4;
        run_case(ctx, &c, seed++);
      }
  /* The lean kernel's compile-time-K walk (lean_stream_fixed_k: the model shapes' K, NVFP4 weights
   * in the 128x4 layout, N a multiple of 128) at each K split, against the generic walk. */
#define K_ITEM(v) v,
  static const int64_t kFixedK[] = {FP4_MOE_FIXED_K_LIST(K_ITEM)}; /* every K the walk is built for */
#undef K_ITEM
  static const int kSplits[] = {4, 1, 2};
  for (size_t sp = 0; sp < 3; sp++)
    for (size_t ki = 0; ki < sizeof kFixedK / sizeof *kFixedK; ki++)
      for (size_t t = 0; t < 2; t++) {
        fp4h_case c = grouped_case("grouped_lean_fixed_k", FP4_FORMAT_NVFP4, 0, 1, kTokens[t], 256, kFixedK[ki], 16,
                                   FP4_DTYPE_BF16, FP4_DTYPE_F32, FP4H_DATA_NORMAL);
        run_fixed_k_case(ctx, &c, kSplits[sp], seed++);
      }
  /* Every streaming variant on one K % 128 shape (bf16 rows; moe.fma at K % 128 != 0 too). */
  static const char *const kStreaming[] = {"moe.mma.w1", "moe.mma.w2", "moe.mma.w4", "moe.mma.w8", "moe.fma"};
  for (size_t v = 0; v < sizeof kStreaming / sizeof *kStreaming; v++)
    for (int f = 0; f < 2; f++) {
      fp4h_case c = grouped_case("grouped_forced", f, f, f, 64, 256, v == 4 ? 1088 : 1024, 16, FP4_DTYPE_BF16,
                                 FP4_DTYPE_BF16, FP4H_DATA_NORMAL);
      c.config = kStreaming[v];
      run_case(ctx, &c, seed++);
    }
}

/* The cluster K split of the lean kernel (moe.lean.r32.k4.s1.c2 / .c4): every compile-time K it is
 * built for, alone and in the layer's fused forms (gate_up with SiLU*up, the shared expert as the
 * extra slot of gate_up and down), against the reference, at token counts that give one and several
 * row chunks per expert. A K too short for the split (fewer than one slab per warp) and a device
 * without clusters (below SM90) are refused, never run another way. */
static int device_major(fp4_context *ctx) {
  int major = 0;
#if FP4KIT_HAVE_CUDA
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, fp4_context_device(ctx));
#else
  (void)ctx;
#endif
  return major;
}

static void run_cluster_case(fp4_context *ctx, fp4h_case *c, int kparts, int64_t k, int major, uint64_t seed) {
  const int refused = major < 9 || k < 512 * kparts;
  if (!refused) {
    run_case(ctx, c, seed);
    return;
  }
  fp4h_result r;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, c, seed, &r);
  g_runs++;
  if (r.status == FP4_ERR_UNSUPPORTED && (strstr(r.message, "cluster") || strstr(r.message, "slab"))) return;
  g_failures++;
  printf("FAIL %s [%s] K=%lld: expected a refusal naming the rule, got %s: %s\n", c->name, c->config, (long long)k,
         fp4_status_str(r.status), r.message);
}

static void test_cluster_k_split(fp4_context *ctx) {
  uint64_t seed = 1500;
  const int major = device_major(ctx);
  static const char *const kCluster[] = {"moe.lean.r32.k4.s1.c2", "moe.lean.r32.k4.s1.c4"};
#define K_ITEM(v) v,
  static const int64_t kFixedK[] = {FP4_MOE_FIXED_K_LIST(K_ITEM)};
#undef K_ITEM
  static const int64_t kClusterTokens[] = {1, 8, 40};
  for (int ci = 0; ci < 2; ci++)
    for (size_t ki = 0; ki < sizeof kFixedK / sizeof *kFixedK; ki++)
      for (size_t t = 0; t < sizeof kClusterTokens / sizeof *kClusterTokens; t++) {
        fp4h_case c = grouped_case("grouped_lean_cluster", FP4_FORMAT_NVFP4, 0, 1, kClusterTokens[t], t == 2 ? 384 : 256,
                                   kFixedK[ki], t == 2 ? 4 : 16, FP4_DTYPE_BF16, t == 1 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32,
                                   FP4H_DATA_NORMAL);
        c.config = kCluster[ci];
        run_cluster_case(ctx, &c, 2 << ci, kFixedK[ki], major, seed++);
      }
  /* The layer: W4A16, NVFP4, bf16 hidden states; gate_up's K is the hidden size (2048, 4096), down's
   * the expert width (1024: refused at c4; 2048), with and without the shared expert. */
  static const struct { int64_t T, I, H, E; int shared; } kLayers[] = {
      {1, 1024, 2048, 8, 1}, {3, 2048, 4096, 4, 1}, {16, 2048, 2048, 4, 0}, {1, 2048, 4096, 4, 0}, {24, 1024, 4096, 6, 1}};
  for (int ci = 0; ci < 2; ci++)
    for (size_t l = 0; l < sizeof kLayers / sizeof *kLayers; l++) {
      fp4h_case c = fp4h_moe_case(kLayers[l].T, kLayers[l].I, kLayers[l].H, kLayers[l].E, 2, 0, FP4_FORMAT_NVFP4,
                                  kLayers[l].shared, (int)(l % 2), FP4_DTYPE_BF16);
      c.config = kCluster[ci];
      c.layout_b = FP4_LAYOUT_128X4; /* the compile-time K walk's layout, for the shared expert too */
      const int64_t kmin = kLayers[l].I < kLayers[l].H ? kLayers[l].I : kLayers[l].H;
      run_cluster_case(ctx, &c, 2 << ci, kmin, major, seed++);
    }
  /* The default rule's own choice (moe_config.c: the split where the doubled grid still fits a wave
   * and every warp keeps 4 slabs): W4A16 (gate_up with SiLU*up and the shared expert in the routed
   * launches) and W4A4 (the shared expert's gate_up on its own), K 4096. */
  for (int w4a4 = 0; w4a4 < 2; w4a4++) {
    fp4h_case c = fp4h_moe_case(2, 1024, 4096, 4, 2, w4a4, FP4_FORMAT_NVFP4, 1, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
    c.layout_b = FP4_LAYOUT_128X4;
    c.config = "moe.default";
    run_case(ctx, &c, seed++);
  }
}

static void test_moe_small(fp4_context *ctx) {
  uint64_t seed = 2000;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (int shared = 0; shared < 2; shared++)
        for (size_t t = 0; t < sizeof kTokens / sizeof *kTokens; t++) {
          const int rot = (int)(f + w4a4 + shared + t);
          const int routing = rot % 3; /* uniform, skewed, duplicates */
          const fp4_dtype dtype = rot % 2 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32;
          fp4h_case c = fp4h_moe_case(kTokens[t], 96, 256, 40, 6, w4a4, (fp4_format)f, shared, routing, dtype);
          if (!shared && t % 2) c.layout_b = FP4_LAYOUT_LINEAR; /* routed weights in both layouts */
          run_case(ctx, &c, seed++);
        }
  /* More experts than the routing kernel keeps counters for in shared memory (12032): its
   * global-memory counters, W4A16 and W4A4, skewed routing. */
  for (int w4a4 = 0; w4a4 < 2; w4a4++) {
    fp4h_case c = fp4h_moe_case(300, 32, 64, 13000, 4, w4a4, FP4_FORMAT_NVFP4, 0, 1, FP4_DTYPE_BF16);
    run_case(ctx, &c, seed++);
  }
}

/* Qwen3.5-397B's routed experts are w13 2048 x 4096, w2 4096 x 1024, 512 experts, top-10: the
 * same top-10 routing over 512 experts (scaled widths), and the real widths over fewer experts. */
static void test_moe_qwen(fp4_context *ctx) {
  uint64_t seed = 3000;
  for (int w4a4 = 0; w4a4 < 2; w4a4++)
    for (int routing = 0; routing < 2; routing++)
      for (size_t t = 0; t < 3; t++) {
        fp4h_case c = fp4h_moe_case(kTokens[t], 128, 512, 512, 10, w4a4, FP4_FORMAT_NVFP4, t == 1, routing, FP4_DTYPE_BF16);
        run_case(ctx, &c, seed++);
      }
  fp4h_case c = fp4h_moe_case(300, 128, 512, 128, 10, 1, FP4_FORMAT_NVFP4, 1, FP4H_ROUTE_SKEWED, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
  c = fp4h_moe_case(300, 128, 512, 128, 10, 0, FP4_FORMAT_MXFP4, 0, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
  c = fp4h_moe_case(2, 1024, 4096, 12, 10, 1, FP4_FORMAT_NVFP4, 0, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
  /* W4A16 decode on the lean kernel: MXFP4, and f16 hidden states with a skewed routing */
  c = fp4h_moe_case(8, 128, 512, 64, 10, 0, FP4_FORMAT_MXFP4, 0, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
  c = fp4h_moe_case(8, 128, 256, 64, 6, 0, FP4_FORMAT_NVFP4, 1, FP4H_ROUTE_SKEWED, FP4_DTYPE_F16);
  run_case(ctx, &c, seed++);
  c = fp4h_moe_case(2, 1024, 4096, 12, 10, 0, FP4_FORMAT_NVFP4, 1, FP4H_ROUTE_SKEWED, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
  /* 10-11 routed rows per expert slot (520 pairs over 48 experts): on SM90 the lean kernel past one
   * token tile of rows, uniform and skewed (expert 0 in every other token: 26 rows, more row chunks
   * than the launch's splits), W4A16 and W4A4 */
  for (int w4a4 = 0; w4a4 < 2; w4a4++)
    for (int routing = 0; routing < 2; routing++) {
      c = fp4h_moe_case(52, 128, 512, 48, 10, w4a4, FP4_FORMAT_NVFP4, routing,
                        routing ? FP4H_ROUTE_SKEWED : FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
      run_case(ctx, &c, seed++);
    }
  /* the same in the 128x4 layout, 1 and 8 tokens: the compile-time K walk, SiLU*up in the gate_up
   * epilogue and the shared expert in the routed launches (the library's rule) */
  for (int t = 0; t < 2; t++) {
    c = fp4h_moe_case(t ? 8 : 1, 1024, 4096, 12, 10, 0, FP4_FORMAT_NVFP4, 1, t ? FP4H_ROUTE_SKEWED : FP4H_ROUTE_UNIFORM,
                      FP4_DTYPE_BF16);
    c.layout_b = FP4_LAYOUT_128X4;
    run_case(ctx, &c, seed++);
  }
}

/* Prefill-sized calls: T >= 1024 gives the tensor-core kernel its widest token chunks (64 rows per
 * pass, several passes and row splits per expert, a hot expert with half of the pairs). */
static void test_moe_prefill(fp4_context *ctx) {
  static const struct {
    int64_t T, I, H, E, k;
    int w4a4, format, shared, routing;
    fp4_dtype dtype;
  } kCases[] = {
      {1024, 128, 256, 64, 8, 0, FP4_FORMAT_NVFP4, 0, FP4H_ROUTE_SKEWED, FP4_DTYPE_BF16},
      {1024, 128, 256, 64, 8, 1, FP4_FORMAT_MXFP4, 1, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16},
      {1100, 256, 128, 32, 4, 1, FP4_FORMAT_NVFP4, 0, FP4H_ROUTE_SKEWED, FP4_DTYPE_F16},
      {1024, 128, 256, 64, 8, 0, FP4_FORMAT_MXFP4, 0, FP4H_ROUTE_UNIFORM, FP4_DTYPE_F32},
  };
  uint64_t seed = 4000;
  for (size_t i = 0; i < sizeof kCases / sizeof *kCases; i++) {
    fp4h_case c = fp4h_moe_case(kCases[i].T, kCases[i].I, kCases[i].H, kCases[i].E, kCases[i].k, kCases[i].w4a4,
                                (fp4_format)kCases[i].format, kCases[i].shared, kCases[i].routing, kCases[i].dtype);
    run_case(ctx, &c, seed++);
  }
}

/* The grouped large-M path (moe_grouped_large.cu), taken from MOE_LARGE_M_MIN_ROWS (16) mean rows
 * per expert slot: T >= 1024 with few experts. 128-row tiles (mean 86) and 64-row tiles (128, 275, 256),
 * partial N tiles and K tails (H 224, I 96: K % 64 == 32), random and skewed routing (k = 1: the
 * hot expert has 50% of the rows), every activation dtype: bf16 (gate_up and down on the large
 * tiles), f16 (NVFP4: both large; MXFP4: gate_up on the streaming kernel), f32 (gate_up
 * streaming, down large on the bf16 SiLU*up), with the shared expert (T rows, its own rule). */
static void test_moe_large(fp4_context *ctx) {
  static const struct {
    int64_t T, I, H, E, k;
  } kShapes[] = {{1024, 128, 256, 32, 4}, {1024, 128, 256, 24, 2}, {1100, 96, 224, 16, 4}, {2048, 64, 128, 8, 1}};
  static const fp4_dtype kLargeDtypes[] = {FP4_DTYPE_BF16, FP4_DTYPE_F16, FP4_DTYPE_BF16, FP4_DTYPE_F32};
  uint64_t seed = 5000;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (int routing = 0; routing < 2; routing++)
        for (int s = 0; s < 2; s++) {
          const int rot = f * 4 + w4a4 * 2 + routing + s;
          const int shape = routing ? (s ? 3 : (rot % 2 ? 2 : 0)) : (s ? 1 : (rot % 2 ? 0 : 2));
          const fp4_dtype dtype = kLargeDtypes[(rot + f) % 4];
          fp4h_case c = fp4h_moe_case(kShapes[shape].T, kShapes[shape].I, kShapes[shape].H, kShapes[shape].E,
                                      kShapes[shape].k, w4a4, (fp4_format)f, rot % 3 == 0, routing, dtype);
          run_case(ctx, &c, seed++);
        }
}

/* The public grouped GEMM on the large-M tiles: T rows over 16 experts (mean 64: 128-row tiles;
 * 128: 64-row tiles). */
static void test_grouped_large(fp4_context *ctx) {
  uint64_t seed = 6000;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (int t = 0; t < 2; t++) {
        const int rot = f * 4 + w4a4 * 2 + t;
        const fp4_dtype a_dtype = f == FP4_FORMAT_NVFP4 && rot % 3 == 0 ? FP4_DTYPE_F16 : FP4_DTYPE_BF16;
        fp4h_case c = grouped_case(w4a4 ? "grouped_w4a4_large" : "grouped_w4a16_large", f, w4a4, rot, t ? 2048 : 1024,
                                   t ? 200 : 256, t ? 544 : 512, 16, a_dtype, kDtypes[rot % 3], FP4H_DATA_NORMAL);
        run_case(ctx, &c, seed++);
      }
}

#define EXPECT(cond, ...)                                                                                              \
  do {                                                                                                                 \
    g_runs++;                                                                                                          \
    if (!(cond)) {                                                                                                     \
      g_failures++;                                                                                                    \
      printf("FAIL: ");                                                                                               \
      printf(__VA_ARGS__);                                                                                             \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  } while (0)

static void *to_device(fp4_context *ctx, const void *host, size_t bytes) {
  void *d = NULL;
  if (fp4_alloc(ctx, FP4_MEMORY_DEVICE, bytes, &d)) return NULL;
  if (fp4_copy(ctx, d, FP4_MEMORY_DEVICE, host, FP4_MEMORY_HOST, bytes)) {
    fp4_free(ctx, FP4_MEMORY_DEVICE, d);
    return NULL;
  }
  return d;
}

/* Runs one W4A16 layer (random NVFP4 experts, f32 hidden states and output, routing ids as given,
 * weights 0.5) on the device; out receives [T, H], info what ran. */
/* shared: expert 0's weights are also the shared expert; hidden states f32 or (bf16) their bf16
 * roundings; ctx_ws: the context workspace fp4_moe_context_workspace_size names for the call. */
/* The layer call of run_device_layer captured in a CUDA graph (global capture mode, PDL) on a stream
 * of its own and replayed `replays` times, out NaN-filled before each: FP4_OK when every replay wrote
 * the same bits (left in out), else FP4_ERR_INTERNAL (a differing replay is printed). */
static fp4_status replay_layer(fp4_context *ctx, const fp4_moe_layer *layer, const fp4_matrix *xm,
                               const fp4_moe_routing *rt, void *ws, size_t bytes, fp4_matrix *om, fp4_options opts,
                               int replays, float *out, size_t ob) {
#if FP4KIT_HAVE_CUDA
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  float *first = malloc(ob);
  fp4_status st = first && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess ? FP4_OK : FP4_ERR_INTERNAL;
  opts.stream = s;
  opts.enable_pdl = 1;
  if (!st && cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) st = FP4_ERR_INTERNAL;
  if (!st) {
    st = fp4_moe_forward(ctx, layer, xm, rt, ws, bytes, om, &opts);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess && !st) st = FP4_ERR_INTERNAL;
  }
  if (!st && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) st = FP4_ERR_INTERNAL;
  for (int r = 0; !st && r < replays; r++) {
    if (cudaMemsetAsync(om->data, 0xFF, ob, s) != cudaSuccess || cudaGraphLaunch(exec, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      st = FP4_ERR_INTERNAL;
    if (!st) st = fp4_copy(ctx, r ? out : first, FP4_MEMORY_HOST, om->data, FP4_MEMORY_DEVICE, ob);
    if (!st && r && memcmp(out, first, ob)) {
      printf("graph replay %d of the layer differs from replay 0\n", r);
      st = FP4_ERR_INTERNAL;
    }
  }
  if (!st && replays == 1) memcpy(out, first, ob);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (s) cudaStreamDestroy(s);
  free(first);
  return st;
#else
  (void)ctx, (void)layer, (void)xm, (void)rt, (void)ws, (void)bytes, (void)om, (void)opts, (void)replays, (void)out, (void)ob;
  return FP4_ERR_UNSUPPORTED;
#endif
}

/* replays > 0: the call through replay_layer instead of once on the legacy stream. */
static fp4_status run_device_layer(fp4_context *ctx, int64_t T, int64_t K, int64_t E, int64_t H, int64_t I,
                                   const int32_t *ids, float *out, fp4_run_info *info, int shared, int bf16,
                                   size_t *ctx_ws, const char *config, int replays) {
  fp4h_rng g = {99};
  fp4_grouped_qmatrix w1, w2;
  fp4_status st = fp4h_grouped_make(&g, &w1, E, 2 * I, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4);
  if (st) return st;
  if ((st = fp4h_grouped_make(&g, &w2, E, H, I, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4))) {
    fp4h_grouped_free(&w1);
    return st;
  }
  float *tw = malloc((size_t)(T * K) * sizeof *tw), *hid = malloc((size_t)(T * H) * sizeof *hid);
  if (!tw || !hid) st = FP4_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; !st && i < T * K; i++) tw[i] = 0.5f;
  if (!st) fp4h_fill(&g, hid, T * H, FP4H_DATA_NORMAL, 16);
  if (!st && bf16) /* the first T * H * 2 bytes of hid become bf16 values, in place */
    for (int64_t i = 0; i < T * H; i++) ((uint16_t *)hid)[i] = fp4_bf16_from_f32(hid[i]);
  size_t wb1 = (size_t)(E * 2 * I * H / 2), wb2 = (size_t)(E * H * I / 2), sb1 = 0, sb2 = 0;
  fp4_scales_size(w1.format, w1.layout, w1.rows, w1.cols, &sb1);
  fp4_scales_size(w2.format, w2.layout, w2.rows, w2.cols, &sb2);
  fp4_grouped_qmatrix d1 = w1, d2 = w2;
  d1.data = d1.scales = d2.data = d2.scales = NULL;
  d1.multipliers = d2.multipliers = NULL;
  void *d_ids = NULL, *d_tw = NULL, *d_hid = NULL, *d_out = NULL, *ws = NULL;
  const size_t ob = (size_t)(T * H) * sizeof(float);
  if (!st) {
    d1.data = to_device(ctx, w1.data, wb1);
    d1.scales = to_device(ctx, w1.scales, sb1 * (size_t)E);
    d1.multipliers = to_device(ctx, w1.multipliers, (size_t)E * sizeof(float));
    d2.data = to_device(ctx, w2.data, wb2);
    d2.scales = to_device(ctx, w2.scales, sb2 * (size_t)E);
    d2.multipliers = to_device(ctx, w2.multipliers, (size_t)E * sizeof(float));
    d1.memory = d2.memory = FP4_MEMORY_DEVICE;
    d_ids = to_device(ctx, ids, (size_t)(T * K) * sizeof *ids);
    d_tw = to_device(ctx, tw, (size_t)(T * K) * sizeof *tw);
    d_hid = to_device(ctx, hid, (size_t)(T * H) * (bf16 ? sizeof(uint16_t) : sizeof *hid));
    d_out = to_device(ctx, out, ob);
    if (!d1.data || !d1.scales || !d1.multipliers || !d2.data || !d2.scales || !d2.multipliers || !d_ids || !d_tw ||
        !d_hid || !d_out)
      st = FP4_ERR_OUT_OF_MEMORY;
  }
  fp4_moe_experts se = {d1, d2, 1.0f, 1.0f, NULL};
  se.gate_up.experts = se.down.experts = 1;
  fp4_moe_layer layer = {FP4_MOE_W4A16, {d1, d2, 1.0f, 1.0f}, shared ? &se : NULL};
  fp4_moe_routing rt = {d_ids, T, K, {d_tw, T, K, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, NULL};
  fp4_matrix xm = {d_hid, T, H, 0, bf16 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, om = {d_out, T, H, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
  const fp4_options opts = {.backend = "cuda", .config = config, .info = info};
  size_t bytes = 0;
  if (!st) st = fp4_moe_workspace_size(&layer, T, K, &opts, &bytes);
  if (!st && ctx_ws) st = fp4_moe_context_workspace_size(ctx, &layer, &xm, &rt, &om, &opts, ctx_ws);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, bytes, &ws);
  if (!st && replays > 0) {
    st = replay_layer(ctx, &layer, &xm, &rt, ws, bytes, &om, opts, replays, out, ob);
  } else {
    if (!st) st = fp4_moe_forward(ctx, &layer, &xm, &rt, ws, bytes, &om, &opts);
    if (!st) st = fp4_copy(ctx, out, FP4_MEMORY_HOST, d_out, FP4_MEMORY_DEVICE, ob);
  }
  void *bufs[] = {d1.data, d1.scales, (void *)d1.multipliers, d2.data, d2.scales, (void *)d2.multipliers,
                  d_ids, d_tw, d_hid, d_out, ws};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
  free(tw);
  free(hid);
  fp4h_grouped_free(&w1);
  fp4h_grouped_free(&w2);
  return st;
}

/* docs/moe.md: device ids are not checked on the host; a token naming an expert outside [0, E)
 * gets a NaN output row and every other token its normal (finite) result. */
static void test_invalid_ids(fp4_context *ctx) {
  enum { T = 4, K = 2, E = 8, H = 64, I = 32 };
  int32_t ids[T * K] = {0, 1, 2, E, -5, 3, 4, 5}; /* token 1: E, token 2: -5 */
  float out[T * H];
  for (int i = 0; i < T * H; i++) out[i] = 0.0f;
  fp4_status st = run_device_layer(ctx, T, K, E, H, I, ids, out, NULL, 0, 0, NULL, NULL, 0);
  EXPECT(st == FP4_OK, "fp4_moe_forward: %s", fp4_last_error());
  if (!st)
    for (int t = 0; t < T; t++) {
      int nan = 0, finite = 0;
      for (int h = 0; h < H; h++) {
        nan += isnan(out[t * H + h]) != 0;
        finite += isfinite(out[t * H + h]) != 0;
      }
      const int bad = t == 1 || t == 2;
      EXPECT(bad ? nan == H : finite == H, "token %d (%s id): %d NaN, %d finite of %d", t, bad ? "invalid" : "valid",
             nan, finite, H);
    }
}

/* The routing in the routed gate_up launch (fp4_moe_route_fusable: the default path, W4A16 with
 * SiLU*up fused on the lean kernel's compile-time K walk (H 2048), tokens * top_k <= 32) against
 * the routing kernel's layer ("moe.streaming": the same GEMM kernels), bit for bit, NaN-prefilled:
 * top-10 at 1-3 tokens, top-8 at 1 and 4 (8 and 32 pairs), top-12 at 1, with and without the shared
 * expert (in the routed launches at I 1024, on its own at I 128), 12, 40 and 300 experts (the first
 * CTA writes offsets for all), an id twice in a token, invalid ids (a NaN row in both) and a token
 * with none valid; 40 pairs keep the routing kernel. Where down is on the compile-time K walk (I
 * 1024) the layer's combine runs in its launch too up to 12 pairs (fp4_moe_combine_fusable), so the
 * cases of 8-12 pairs also check that combine, with and without the shared expert, against the
 * combine kernel. The first two also captured in a CUDA graph and replayed. The run info says
 * where the routing and the combine ran. */
static void test_route_fused(fp4_context *ctx) {
  static const struct {
    int64_t T, K, E, H, I;
    int shared, ids; /* ids: 0 uniform, 1 a repeated and an invalid id, 2 none valid */
  } kCases[] = {{1, 10, 12, 2048, 1024, 1, 0}, {2, 10, 12, 2048, 1024, 0, 0}, {3, 10, 12, 2048, 1024, 1, 1},
                {4, 8, 12, 2048, 1024, 1, 0},  {1, 10, 12, 2048, 1024, 1, 2}, {3, 10, 300, 2048, 128, 1, 1},
                {4, 10, 12, 2048, 1024, 1, 0}, {1, 8, 12, 2048, 1024, 0, 0},  {1, 12, 40, 2048, 1024, 1, 0}};
  for (size_t c = 0; c < sizeof kCases / sizeof *kCases; c++) {
    const int64_t T = kCases[c].T, K = kCases[c].K, E = kCases[c].E, H = kCases[c].H, I = kCases[c].I;
    const int fused = T * K <= FP4_MOE_ROUTE_FUSED_PAIRS;
    int32_t ids[64];
    float tw[64];
    fp4h_rng g = {(uint64_t)(500 + c)};
    fp4h_routing_fill(&g, ids, tw, T, K, E, FP4H_ROUTE_UNIFORM);
    if (kCases[c].ids == 1) {
      ids[1] = ids[0];                 /* token 0 names one expert twice */
      ids[K + 2] = (int32_t)E;         /* token 1 has an invalid id: a NaN row */
    } else if (kCases[c].ids == 2) {
      for (int64_t i = 0; i < T * K; i++) ids[i] = i % 2 ? -1 : (int32_t)(E + i);
    }
    const size_t n = (size_t)(T * H);
    float *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    if (!got || !want) {
      free(got);
      free(want);
      EXPECT(0, "routing in gate_up: out of host memory");
      return;
    }
    for (size_t i = 0; i < n; i++) got[i] = want[i] = NAN;
    fp4_run_info info;
    memset(&info, 0, sizeof info);
    /* the first cases' routed layer as a CUDA graph replayed 20 times (PDL: the routing reads the ids
     * after the launch's wait), the others eagerly */
    fp4_status st = run_device_layer(ctx, T, K, E, H, I, ids, got, &info, kCases[c].shared, 1, NULL, NULL, c < 2 ? 20 : 0);
    if (!st) st = run_device_layer(ctx, T, K, E, H, I, ids, want, NULL, kCases[c].shared, 1, NULL, "moe.streaming", 0);
    EXPECT(st == FP4_OK, "routing in gate_up T=%lld k=%lld E=%lld: %s", (long long)T, (long long)K, (long long)E,
           fp4_last_error());
    if (!st) {
      EXPECT(!strstr(info.note, "+SiLU+routing") == !fused, "T=%lld k=%lld E=%lld: the routing %s in gate_up: '%s'",
             (long long)T, (long long)K, (long long)E, fused ? "should run" : "should not run", info.note);
      /* the combine goes with the routing where down (K = I) is on the compile-time K walk (I 1024),
       * up to 12 pairs */
      const int combined = fused && I == 1024 && T * K <= FP4_MOE_COMBINE_FUSED_PAIRS;
      EXPECT(!strstr(info.note, "+combine") == !combined, "T=%lld k=%lld E=%lld I=%lld: the combine %s in down: '%s'",
             (long long)T, (long long)K, (long long)E, (long long)I, combined ? "should run" : "should not run",
             info.note);
      size_t bad = 0, first = 0, nan_rows = 0;
      for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) && bad++ == 0) first = i;
      for (int64_t t = 0; t < T; t++) nan_rows += isnan(want[t * H]) != 0;
      const size_t want_nan = kCases[c].ids == 2 ? (size_t)T : kCases[c].ids == 1 ? 1 : 0;
      EXPECT(bad == 0 && nan_rows == want_nan,
             "T=%lld k=%lld E=%lld shared %d: %zu of %zu outputs differ from the routing kernel's layer (first %zu: "
             "%a against %a); %zu NaN rows, want %zu",
             (long long)T, (long long)K, (long long)E, kCases[c].shared, bad, n, first, got[first], want[first], nan_rows,
             want_nan);
    }
    free(got);
    free(want);
  }
}

/* The path is chosen from the mean rows per expert slot (prefill_min_rows: 16, 13 on SM90)
 * and named in the run info (config moe.default, the variants in the note): T = 1024, top-4 over 32
 * experts (128 rows each) runs the prefill tiles; T = 64 (8 rows each) the streaming kernels. Every
 * output is finite (NaN-prefilled). */
static void test_path_selection(fp4_context *ctx) {
  static const struct {
    int64_t T;
    int prefill;
  } kCases[] = {{1024, 1}, {64, 0}};
  enum { K = 4, E = 32, H = 128, I = 64 };
  for (size_t c = 0; c < sizeof kCases / sizeof *kCases; c++) {
    const int64_t T = kCases[c].T;
    int32_t *ids = malloc((size_t)(T * K) * sizeof *ids);
    float *tw = malloc((size_t)(T * K) * sizeof *tw), *out = malloc((size_t)(T * H) * sizeof *out);
    fp4_status st = ids && tw && out ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
    fp4_run_info info;
    memset(&info, 0, sizeof info);
    if (!st) {
      fp4h_rng g = {7};
      fp4h_routing_fill(&g, ids, tw, T, K, E, FP4H_ROUTE_UNIFORM);
      for (int64_t i = 0; i < T * H; i++) out[i] = NAN;
      st = run_device_layer(ctx, T, K, E, H, I, ids, out, &info, 0, 0, NULL, NULL, 0);
    }
    EXPECT(st == FP4_OK, "T = %lld: fp4_moe_forward: %s", (long long)T, fp4_last_error());
    if (!st) {
      /* The default picks each grouped GEMM's kernel from its own shape: at T = 1024 the tiny
       * gate_up (N = K = 128) may stream while the down projection takes a prefill tile. */
      const int prefill = strstr(info.note, "moe.prefill.") != NULL;
      EXPECT(!strcmp(info.config, "moe.default") && prefill == kCases[c].prefill,
             "T = %lld: ran config '%s' (%s), expected moe.default with %s", (long long)T, info.config,
             info.note, kCases[c].prefill ? "a prefill tile" : "no prefill tile");
      int64_t bad = 0;
      for (int64_t i = 0; i < T * H; i++) bad += !isfinite(out[i]);
      EXPECT(bad == 0, "T = %lld: %lld outputs not finite", (long long)T, (long long)bad);
    }
    free(ids);
    free(tw);
    free(out);
  }
}

/* A shared expert of T >= 13 rows on its own (not in the routed launches) runs on the dense kernels
 * in W4A16 (fp4_moe_shared_dense), whose config names the run info shows; bf16 and f32 hidden
 * states; fp4_moe_context_workspace_size names the context workspace it takes. The numbers are
 * checked against the reference by the harness cases of test_moe_qwen and test_shared_dense_cases. */
static int dense_name(const char *note, const char *gemm) {
  const char *at = strstr(note, gemm);
  if (!at) return 0;
  at += strlen(gemm);
  return !strncmp(at, "small-m.", 8) || !strncmp(at, "large-m.", 8);
}

static void test_shared_dense_info(fp4_context *ctx) {
  enum { T = 64, K = 2, E = 32, H = 512 };
  int32_t ids[T * K];
  float tw[T * K];
  float *out = malloc((size_t)T * H * sizeof *out);
  fp4h_rng g = {11};
  fp4h_routing_fill(&g, ids, tw, T, K, E, FP4H_ROUTE_UNIFORM);
  /* I = 96: a K % 128 != 0 down GEMM, which the large-M kernels take on bf16 rows */
  for (int v = 0; out && v < 3; v++) {
    const int bf16 = v != 1;
    const int64_t I = v == 2 ? 96 : 128;
    const char *what = v == 2 ? "bf16, I = 96" : bf16 ? "bf16" : "f32";
    fp4_run_info info;
    memset(&info, 0, sizeof info);
    for (int64_t i = 0; i < (int64_t)T * H; i++) out[i] = NAN;
    size_t ws = 0;
    const fp4_status st = run_device_layer(ctx, T, K, E, H, I, ids, out, &info, 1, bf16, &ws, NULL, 0);
    EXPECT(st == FP4_OK, "shared expert, %s hidden: fp4_moe_forward: %s", what, fp4_last_error());
    if (st) continue;
    EXPECT(dense_name(info.note, "shared gate_up ") && dense_name(info.note, "shared down "),
           "shared expert, %s hidden: not on the dense kernels: '%s'", what, info.note);
    /* the context holds what the query named (the call grew it outside capture) */
    EXPECT(fp4_context_workspace_bytes(ctx) >= ws, "shared expert, %s hidden: the query named %zu context bytes, the "
           "context holds %zu", what, ws, fp4_context_workspace_bytes(ctx));
    int64_t bad = 0;
    for (int64_t i = 0; i < (int64_t)T * H; i++) bad += !isfinite(out[i]);
    EXPECT(bad == 0, "shared expert, %s hidden: %lld outputs not finite", what, (long long)bad);
  }
  free(out);
}

/* The layer with a shared expert on the dense kernels against the reference: one rank of an
 * EP-sharded layer (top-2 of 32, T = 16, 64 and 300; the shared set from 13 rows), bf16 and f16
 * hidden states, uniform and skewed routing, NVFP4 and MXFP4; and I = 96. */
static void test_shared_dense_cases(fp4_context *ctx) {
  static const int64_t kT[] = {16, 64, 300};
  uint64_t seed = 7000;
  for (size_t t = 0; t < sizeof kT / sizeof *kT; t++)
    for (int f = 0; f < 2; f++) {
      const int rot = (int)t + f;
      fp4h_case c = fp4h_moe_case(kT[t], 128, 512, 32, 2, 0, (fp4_format)f, 1, rot % 2 ? FP4H_ROUTE_SKEWED : FP4H_ROUTE_UNIFORM,
                                  f == FP4_FORMAT_NVFP4 && rot % 2 ? FP4_DTYPE_F16 : FP4_DTYPE_BF16);
      run_case(ctx, &c, seed++);
    }
  /* I = 96 (K % 128 != 0 for down): the large-M kernels on the bf16 SiLU*up rows */
  fp4h_case c = fp4h_moe_case(64, 96, 512, 32, 2, 0, FP4_FORMAT_NVFP4, 1, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16);
  run_case(ctx, &c, seed++);
}

#if FP4KIT_HAVE_CUDA
/* The bf16 SiLU*up (moe_layer.cu, silu_mul_bf16: single precision where it provably rounds alike,
 * else the double formula) against the f32 one (the double formula) on the same gate and up values:
 * every bf16 must be the f32 result rounded to bf16, bit for bit. Values: random bit patterns (every
 * class: zeros, subnormals, huge, inf, NaN), normal values at several spreads, and |g| in [16, 40]
 * where __expf is least accurate and the single-precision range ends (32). */
static void test_silu_bits(fp4_context *ctx) {
  enum { R = 256, I = 1024 };
  const size_t n = (size_t)R * I;
  float *g = malloc(2 * n * sizeof *g), *o32 = malloc(n * sizeof *o32);
  uint16_t *o16 = malloc(n * sizeof *o16);
  void *dg = NULL, *d32 = NULL, *d16 = NULL;
  fp4_status st = g && o32 && o16 ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
  fp4h_rng rng = {4242};
  for (size_t r = 0; !st && r < (size_t)R; r++)
    for (size_t c = 0; c < 2 * (size_t)I; c++) {
      float v;
      switch (r % 4) {
      case 0: { /* any bit pattern */
        const uint32_t b = (uint32_t)(fp4h_next(&rng) >> 32);
        memcpy(&v, &b, sizeof v);
        break;
      }
      case 1: v = (float)fp4h_gauss(&rng) * (r % 8 == 1 ? 0.5f : 6.0f); break;
      case 2: v = (float)((16.0 + 24.0 * fp4h_uniform(&rng)) * (fp4h_uniform(&rng) < 0.5 ? -1.0 : 1.0)); break;
      default: v = (float)fp4h_gauss(&rng) * 1e-3f; break;
      }
      g[r * 2 * I + c] = v;
    }
  if (!st) {
    dg = to_device(ctx, g, 2 * n * sizeof *g);
    if (!dg || fp4_alloc(ctx, FP4_MEMORY_DEVICE, n * sizeof *o32, &d32) || fp4_alloc(ctx, FP4_MEMORY_DEVICE, n * sizeof *o16, &d16))
      st = FP4_ERR_OUT_OF_MEMORY;
  }
  int e = 0;
  if (!st) e = fp4_cuda_moe_silu_mul(dg, d32, FP4_CUDA_ACT_F32, R, I, NULL, 0);
  if (!st && !e) e = fp4_cuda_moe_silu_mul(dg, d16, FP4_CUDA_ACT_BF16, R, I, NULL, 0);
  EXPECT(!st && !e, "SiLU*up kernels: status %s, CUDA error %d", fp4_status_str(st), e);
  if (!st && !e && !fp4_copy(ctx, o32, FP4_MEMORY_HOST, d32, FP4_MEMORY_DEVICE, n * sizeof *o32) &&
      !fp4_copy(ctx, o16, FP4_MEMORY_HOST, d16, FP4_MEMORY_DEVICE, n * sizeof *o16)) {
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
      if (o16[i] != fp4_bf16_from_f32_inline(o32[i]) && bad++ == 0) first = i;
    EXPECT(bad == 0, "bf16 SiLU*up: %zu of %zu differ from the f32 result rounded, first at %zu (g %a, u %a: %04x, f32 %a)",
           bad, n, first, first < n ? g[first / I * 2 * I + first % I] : 0.0f,
           first < n ? g[first / I * 2 * I + I + first % I] : 0.0f, first < n ? o16[first] : 0, first < n ? o32[first] : 0.0f);
  }
  void *bufs[] = {dg, d32, d16};
  for (size_t i = 0; i < 3; i++)
    if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
  free(g);
  free(o32);
  free(o16);
}

/* SiLU*up in the gate_up GEMM's epilogue (fp4_cuda_grouped_args.silu_out) against the f32 product
 * followed by fp4_cuda_moe_silu_mul: the same bf16 bits at every element, on the lean kernel's
 * compile-time K walk (K 4096, I 1024) and run-time one (also K 640 with I 144: an I that is not a
 * multiple of 32) at every K split, NVFP4 weights [E, 2I, K] with random codes and 128x4 scales over
 * E4M3 bytes of both signs, three experts (one without rows), gaussian bf16 rows. The fused output is
 * NaN-prefilled, so an element it leaves unwritten fails. */
static void test_silu_epilogue_bits(fp4_context *ctx) {
  enum { E = 3, ROWS = 8 };
  static const struct {
    int64_t k, inter;
    int fixed_k;
  } kCases[] = {{4096, 1024, 1}, {4096, 1024, 0}, {640, 144, 0}};
  static const int kSplits[] = {1, 2, 4};
  const int64_t offsets[E + 1] = {0, 3, 3, ROWS};
  fp4h_rng rng = {777};
  for (size_t ci = 0; ci < sizeof kCases / sizeof *kCases; ci++) {
    const int64_t K = kCases[ci].k, I = kCases[ci].inter, N = 2 * I;
    size_t sbytes = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, N, K, &sbytes);
    const size_t wbytes = (size_t)(N * K / 2), abytes = (size_t)(ROWS * K) * 2, n = (size_t)(ROWS * I);
    uint8_t *w = malloc(E * wbytes), *sc = malloc(E * sbytes);
    uint16_t *a = malloc(abytes), *got = malloc(n * 2), *want = malloc(n * 2);
    void *dw = NULL, *ds = NULL, *da = NULL, *doff = NULL, *dg = NULL, *dwant = NULL, *dgot = NULL;
    fp4_status st = w && sc && a && got && want ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; !st && i < E * wbytes; i++) w[i] = (uint8_t)(fp4h_next(&rng) >> 40);
    for (size_t i = 0; !st && i < E * sbytes; i++) { /* E4M3 2^-3 .. 2^3, both signs, no NaN */
      const uint8_t mag = (uint8_t)(0x20 + fp4h_next(&rng) % 0x30);
      sc[i] = (uint8_t)(mag | (fp4h_next(&rng) & 0x80));
    }
    for (size_t i = 0; !st && i < (size_t)(ROWS * K); i++) a[i] = fp4_bf16_from_f32_inline((float)fp4h_gauss(&rng));
    if (!st) {
      dw = to_device(ctx, w, E * wbytes), ds = to_device(ctx, sc, E * sbytes), da = to_device(ctx, a, abytes);
      doff = to_device(ctx, offsets, sizeof offsets);
      if (!dw || !ds || !da || !doff || fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(ROWS * N) * 4, &dg) ||
          fp4_alloc(ctx, FP4_MEMORY_DEVICE, n * 2, &dwant) || fp4_alloc(ctx, FP4_MEMORY_DEVICE, n * 2, &dgot))
        st = FP4_ERR_OUT_OF_MEMORY;
    }
    for (size_t sp = 0; !st && sp < sizeof kSplits / sizeof *kSplits; sp++) {
      fp4_cuda_grouped_args g;
      memset(&g, 0, sizeof g);
      g.format = FP4_FORMAT_NVFP4, g.act = FP4_CUDA_ACT_BF16, g.a = da, g.lda = K, g.a_div = 1, g.a_mult = 1.0f;
      g.w = dw, g.w_scales = ds, g.w_scale_stride = (int64_t)sbytes, g.w_layout = FP4_LAYOUT_128X4;
      g.offsets = doff, g.experts = E, g.rows = ROWS, g.n = N, g.k = K, g.alpha = 1.0f, g.slots = E, g.splits = 1;
      g.variant = (fp4_moe_variant){.kernel = FP4_MOE_KERNEL_LEAN, .rows = 32, .ksplit = kSplits[sp], .span = 1,
                                    .fixed_k = kCases[ci].fixed_k};
      g.out = dg, g.ldo = N, g.out_dtype = FP4_DTYPE_F32;
      int e = fp4_cuda_grouped_gemm(&g, NULL, 0);
      if (!e) e = fp4_cuda_moe_silu_mul(dg, dwant, FP4_CUDA_ACT_BF16, ROWS, I, NULL, 0);
      if (!e) e = (int)cudaMemset(dgot, 0xFF, n * 2); /* NaN bf16 */
      g.out = dgot, g.ldo = I, g.out_dtype = FP4_DTYPE_BF16, g.silu_out = 1;
      if (!e) e = fp4_cuda_grouped_gemm(&g, NULL, 0);
      if (!e) e = (int)cudaDeviceSynchronize();
      EXPECT(!e, "SiLU*up epilogue K=%lld I=%lld %s walk k%d: CUDA error %d (%s)", (long long)K, (long long)I,
             kCases[ci].fixed_k ? "compile-time" : "run-time", kSplits[sp], e, cudaGetErrorString((cudaError_t)e));
      if (e || fp4_copy(ctx, got, FP4_MEMORY_HOST, dgot, FP4_MEMORY_DEVICE, n * 2) ||
          fp4_copy(ctx, want, FP4_MEMORY_HOST, dwant, FP4_MEMORY_DEVICE, n * 2))
        continue;
      size_t bad = 0, first = n, zero = 0;
      for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i] && bad++ == 0) first = i;
        zero += (want[i] & 0x7FFF) == 0;
      }
      EXPECT(bad == 0 && zero < n / 2, "SiLU*up epilogue K=%lld I=%lld %s walk k%d: %zu of %zu differ (first row %zu "
             "col %zu: %04x, want %04x), %zu zeros", (long long)K, (long long)I,
             kCases[ci].fixed_k ? "compile-time" : "run-time", kSplits[sp], bad, n, first / (size_t)I,
             first % (size_t)I, first < n ? got[first] : 0, first < n ? want[first] : 0, zero);
    }
    EXPECT(!st, "SiLU*up epilogue K=%lld: %s", (long long)K, fp4_status_str(st));
    void *bufs[] = {dw, ds, da, doff, dg, dwant, dgot};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
      if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
    free(w), free(sc), free(a), free(got), free(want);
  }
}

/* The shared expert as the extra slot of a routed launch (fp4_cuda_grouped_args.extra_*) against the
 * routed experts and the shared expert in launches of their own: the same bits in both outputs. The
 * lean kernel's compile-time K walk at every K split, as the MoE layer runs it: gate_up (K 4096, N
 * 2048) with SiLU*up into bf16 rows, and down (K 1024, N 4096) into f32; three routed experts (one
 * without rows) over 8 rows gathered through a row map, the extra expert over 3 rows of its own,
 * random codes and E4M3 scales of both signs, an extra multiplier; outputs NaN-prefilled. */
static void test_extra_slot_bits(fp4_context *ctx) {
  enum { E = 3, ROWS = 8, XR = 3 };
  static const struct {
    int64_t k, n;
    int silu;
  } kCases[] = {{4096, 2048, 1}, {1024, 4096, 0}};
  static const int kSplits[] = {1, 2, 4};
  const int64_t offsets[E + 1] = {0, 5, 5, ROWS}, xoffsets[2] = {0, XR};
  const int32_t arows[ROWS] = {7, 2, 0, 5, 1, 6, 3, 4};
  const float xmult = 0.75f;
  fp4h_rng rng = {919};
  for (size_t ci = 0; ci < sizeof kCases / sizeof *kCases; ci++) {
    const int64_t K = kCases[ci].k, N = kCases[ci].n, NO = kCases[ci].silu ? N / 2 : N;
    const size_t osz = kCases[ci].silu ? 2 : 4;
    size_t sbytes = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, N, K, &sbytes);
    const size_t wbytes = (size_t)(N * K / 2), abytes = (size_t)(ROWS * K) * 2, xabytes = (size_t)(XR * K) * 2;
    const size_t obytes = (size_t)(ROWS * NO) * osz, xobytes = (size_t)(XR * NO) * osz;
    uint8_t *w = malloc((E + 1) * wbytes), *sc = malloc((E + 1) * sbytes), *got = malloc(obytes + xobytes),
            *want = malloc(obytes + xobytes);
    uint16_t *a = malloc(abytes + xabytes);
    void *dw = NULL, *ds = NULL, *da = NULL, *doff = NULL, *dxoff = NULL, *drows = NULL, *dmult = NULL, *dgot = NULL,
         *dwant = NULL;
    fp4_status st = w && sc && a && got && want ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; !st && i < (E + 1) * wbytes; i++) w[i] = (uint8_t)(fp4h_next(&rng) >> 40);
    for (size_t i = 0; !st && i < (E + 1) * sbytes; i++)
      sc[i] = (uint8_t)((0x20 + fp4h_next(&rng) % 0x30) | (fp4h_next(&rng) & 0x80));
    for (size_t i = 0; !st && i < (size_t)((ROWS + XR) * K); i++) a[i] = fp4_bf16_from_f32_inline((float)fp4h_gauss(&rng));
    if (!st) { /* the extra expert's weights, scales and rows after the routed ones */
      dw = to_device(ctx, w, (E + 1) * wbytes), ds = to_device(ctx, sc, (E + 1) * sbytes);
      da = to_device(ctx, a, abytes + xabytes), doff = to_device(ctx, offsets, sizeof offsets);
      dxoff = to_device(ctx, xoffsets, sizeof xoffsets), drows = to_device(ctx, arows, sizeof arows);
      dmult = to_device(ctx, &xmult, sizeof xmult);
      if (!dw || !ds || !da || !doff || !dxoff || !drows || !dmult ||
          fp4_alloc(ctx, FP4_MEMORY_DEVICE, obytes + xobytes, &dgot) ||
          fp4_alloc(ctx, FP4_MEMORY_DEVICE, obytes + xobytes, &dwant))
        st = FP4_ERR_OUT_OF_MEMORY;
    }
    for (size_t sp = 0; !st && sp < sizeof kSplits / sizeof *kSplits; sp++) {
      fp4_cuda_grouped_args g;
      memset(&g, 0, sizeof g);
      g.format = FP4_FORMAT_NVFP4, g.act = FP4_CUDA_ACT_BF16, g.a = da, g.lda = K, g.a_rows = drows, g.a_div = 1;
      g.a_mult = 1.0f, g.w = dw, g.w_scales = ds, g.w_scale_stride = (int64_t)sbytes, g.w_layout = FP4_LAYOUT_128X4;
      g.offsets = doff, g.experts = E, g.rows = ROWS, g.n = N, g.k = K, g.alpha = 1.0f, g.slots = E, g.splits = 1;
      g.variant = (fp4_moe_variant){.kernel = FP4_MOE_KERNEL_LEAN, .rows = 32, .ksplit = kSplits[sp], .span = 1,
                                    .fixed_k = 1};
      g.out = dwant, g.ldo = NO, g.out_dtype = kCases[ci].silu ? FP4_DTYPE_BF16 : FP4_DTYPE_F32;
      g.silu_out = kCases[ci].silu;
      int e = (int)cudaMemset(dwant, 0xFF, obytes + xobytes);
      if (!e) e = (int)cudaMemset(dgot, 0xFF, obytes + xobytes);
      if (!e) e = fp4_cuda_grouped_gemm(&g, NULL, 0); /* the routed experts alone */
      fp4_cuda_grouped_args x = g; /* the extra expert alone: one expert, its rows in order */
      x.a = (const uint8_t *)da + abytes, x.a_rows = NULL, x.w = (const uint8_t *)dw + E * wbytes;
      x.w_scales = (const uint8_t *)ds + E * sbytes, x.w_mult = dmult, x.offsets = dxoff, x.experts = 1, x.rows = XR;
      x.slots = 1, x.out = (uint8_t *)dwant + obytes;
      if (!e) e = fp4_cuda_grouped_gemm(&x, NULL, 0);
      g.out = dgot, g.extra_w = x.w, g.extra_w_scales = x.w_scales, g.extra_w_mult = dmult, g.extra_rows = XR;
      g.extra_a = x.a, g.extra_out = (uint8_t *)dgot + obytes;
      if (!e) e = fp4_cuda_grouped_gemm(&g, NULL, 0); /* both in one launch */
      if (!e) e = (int)cudaDeviceSynchronize();
      EXPECT(!e, "extra slot K=%lld N=%lld k%d: CUDA error %d (%s)", (long long)K, (long long)N, kSplits[sp], e,
             cudaGetErrorString((cudaError_t)e));
      if (e || fp4_copy(ctx, got, FP4_MEMORY_HOST, dgot, FP4_MEMORY_DEVICE, obytes + xobytes) ||
          fp4_copy(ctx, want, FP4_MEMORY_HOST, dwant, FP4_MEMORY_DEVICE, obytes + xobytes))
        continue;
      size_t bad = 0, first = 0, nan_want = 0;
      for (size_t i = 0; i < obytes + xobytes; i += osz) {
        if (memcmp(got + i, want + i, osz) && bad++ == 0) first = i;
        uint32_t v = 0;
        memcpy(&v, want + i, osz);
        nan_want += osz == 2 ? (v & 0x7FFF) > 0x7F80 : (v & 0x7FFFFFFFu) > 0x7F800000u;
      }
      EXPECT(bad == 0 && nan_want == 0, "extra slot K=%lld N=%lld k%d: %zu of %zu outputs differ (first at byte %zu, %s), "
             "%zu unwritten", (long long)K, (long long)N, kSplits[sp], bad, (obytes + xobytes) / osz, first,
             first >= obytes ? "extra expert" : "routed", nan_want);
    }
    EXPECT(!st, "extra slot K=%lld: %s", (long long)K, fp4_status_str(st));
    void *bufs[] = {dw, ds, da, doff, dxoff, drows, dmult, dgot, dwant};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
      if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
    free(w), free(sc), free(a), free(got), free(want);
  }
}

/* The W4A4 decode inputs' one-kernel quantize (fp4_cuda_moe_quantize_bf16) against the two kernels
 * it replaces: fp4_cuda_quantize (128x4 scales) then fp4_cuda_dequant_fp4_rows, from f32, bf16 and
 * f16 rows (a row stride past the columns) and from a gate_up buffer through the f32 SiLU*up
 * (fp4_cuda_moe_silu_mul first), NVFP4 and MXFP4: the same bf16 bits. Values of every class: random
 * bit patterns (zeros, subnormals, huge, inf, NaN), normal values at several spreads, zero blocks. */
/* fp4_cuda_moe_route_quantize_bf16 writing the bf16 rows to out (NaN-filled first), with a routing
 * problem of its own (ids with an invalid one) whose offsets, active list and count must equal
 * fp4_cuda_moe_route's (the order of rows inside an expert is the atomics'). Returns a CUDA error,
 * or -1 for a routing mismatch (reported here). */
static int route_quantize_matches(fp4_context *ctx, const void *dx, int src, int64_t ld, int64_t rows, int64_t cols,
                                  int format, float gs, void *out) {
  enum { T = 9, K = 3, E = 40 };
  int32_t ids[T * K];
  fp4h_rng g = {4242};
  for (int i = 0; i < T * K; i++) ids[i] = i == 7 ? E + 3 : (int32_t)(fp4h_next(&g) % E);
  int64_t off[2][E + 1];
  int32_t act[2][E], count[2] = {-1, -2};
  void *did = to_device(ctx, ids, sizeof ids), *dbuf = NULL;
  const size_t per = (E + 1) * 8 + 2 * T * K * 4 + 3 * E * 4 + 16; /* one routing's outputs */
  int e = !did || fp4_alloc(ctx, FP4_MEMORY_DEVICE, 2 * per, &dbuf) ? 2 : 0;
  void *nan = malloc((size_t)(rows * cols * 2)); /* 0xFFFF: a bf16 NaN */
  if (nan) memset(nan, 0xFF, (size_t)(rows * cols * 2));
  e = e ? e : !nan || fp4_copy(ctx, out, FP4_MEMORY_DEVICE, nan, FP4_MEMORY_HOST, (size_t)(rows * cols * 2)) ? 2 : 0;
  free(nan);
  for (int pass = 0; pass < 2 && !e; pass++) {
    uint8_t *b = (uint8_t *)dbuf + pass * per;
    fp4_cuda_route_args r = {.ids = did, .tokens = T, .top_k = K, .experts = E, .offsets = (int64_t *)b,
                             .sorted = (int32_t *)(b + (E + 1) * 8), .inverse = (int32_t *)(b + (E + 1) * 8 + T * K * 4),
                             .counts = (int32_t *)(b + (E + 1) * 8 + 2 * T * K * 4),
                             .active = (int32_t *)(b + (E + 1) * 8 + 2 * T * K * 4 + E * 4),
                             .active_count = (int32_t *)(b + (E + 1) * 8 + 2 * T * K * 4 + 2 * E * 4)};
    e = pass ? fp4_cuda_moe_route_quantize_bf16(&r, dx, src, ld, rows, cols, format, gs, NULL, out, NULL, 0)
             : fp4_cuda_moe_route(&r, NULL, 0);
    if (!e && (fp4_copy(ctx, off[pass], FP4_MEMORY_HOST, r.offsets, FP4_MEMORY_DEVICE, sizeof off[pass]) ||
               fp4_copy(ctx, act[pass], FP4_MEMORY_HOST, r.active, FP4_MEMORY_DEVICE, sizeof act[pass]) ||
               fp4_copy(ctx, &count[pass], FP4_MEMORY_HOST, r.active_count, FP4_MEMORY_DEVICE, sizeof count[pass])))
      e = 2;
  }
  if (!e) {
    const int same = count[0] == count[1] && count[0] >= 0 && count[0] <= E && !memcmp(off[0], off[1], sizeof off[0]) &&
                     !memcmp(act[0], act[1], (size_t)count[0] * sizeof act[0][0]);
    EXPECT(same, "routing with the quantize (source %d): offsets, active list or count differ from the routing kernel's", src);
    e = same ? 0 : -1;
  }
  if (did) fp4_free(ctx, FP4_MEMORY_DEVICE, did);
  if (dbuf) fp4_free(ctx, FP4_MEMORY_DEVICE, dbuf);
  return e;
}

static void test_quantize_bf16_bits(fp4_context *ctx) {
  enum { R = 70, C = 512, LD = C + 32 };
  const size_t nx = (size_t)R * 2 * C; /* gate_up [R, 2C] f32 also holds the dense rows [R, LD] */
  float *x = malloc(nx * sizeof *x);
  uint16_t *x16 = malloc(nx * sizeof *x16), *want = malloc((size_t)R * C * 2), *got = malloc((size_t)R * C * 2);
  fp4_status st = x && x16 && want && got ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
  fp4h_rng rng = {777};
  for (size_t i = 0; !st && i < nx; i++) {
    const size_t r = i / (2 * C);
    float v;
    switch (r % 5) {
    case 0: {
      const uint32_t b = (uint32_t)(fp4h_next(&rng) >> 32);
      memcpy(&v, &b, sizeof v);
      break;
    }
    case 1: v = (float)fp4h_gauss(&rng) * 3.0f; break;
    case 2: v = (float)fp4h_gauss(&rng) * 1e-30f; break;
    case 3: v = i % 64 < 32 ? 0.0f : (float)fp4h_gauss(&rng) * 1e4f; break;
    default: v = (float)(fp4h_gauss(&rng) * 16.0); break;
    }
    x[i] = v;
  }
  static const int kSrcs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16, FP4_CUDA_MOE_SRC_SILU_MUL};
  static const fp4_format kFormats[] = {FP4_FORMAT_NVFP4, FP4_FORMAT_MXFP4};
  for (size_t f = 0; !st && f < 2; f++)
    for (size_t si = 0; si < 4; si++) {
      const int src = kSrcs[si];
      const int silu = src == FP4_CUDA_MOE_SRC_SILU_MUL;
      const size_t elem = src == FP4_DTYPE_F32 || silu ? 4 : 2;
      const void *host = x;
      if (src == FP4_DTYPE_BF16 || src == FP4_DTYPE_F16) {
        for (size_t i = 0; i < nx; i++)
          x16[i] = src == FP4_DTYPE_BF16 ? fp4_bf16_from_f32_inline(x[i]) : fp4_f16_from_f32_inline(x[i]);
        host = x16;
      }
      const int64_t block = kFormats[f] == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
      const int64_t scale_bytes = fp4_layout_bytes(FP4_LAYOUT_128X4, R, C / block);
      void *dx = to_device(ctx, host, nx * elem), *dact = NULL, *dq = NULL, *dsc = NULL, *dwant = NULL, *dgot = NULL;
      int e = !dx || fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)R * C * 4, &dact) ||
              fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)R * C / 2, &dq) ||
              fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)scale_bytes, &dsc) ||
              fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)R * C * 2, &dwant) ||
              fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)R * C * 2, &dgot);
      const float gs = 37.5f;
      if (!e && silu) e = fp4_cuda_moe_silu_mul(dx, dact, FP4_CUDA_ACT_F32, R, C, NULL, 0);
      fp4_cuda_quantize_args q = {.x = silu ? dact : dx, .rows = R, .cols = C, .ld = silu ? C : LD,
                                  .x_dtype = silu ? FP4_DTYPE_F32 : src, .q = dq, .scales = dsc,
                                  .format = (int)kFormats[f], .layout = (int)FP4_LAYOUT_128X4, .global_scale = gs};
      if (!e) e = fp4_cuda_quantize(&q, NULL, 0);
      if (!e) e = fp4_cuda_dequant_fp4_rows(dq, dsc, (int)kFormats[f], (int)FP4_LAYOUT_128X4, R, C, dwant, NULL, 0);
      /* two passes: the quantize kernel, then (dense sources) the routing launch's quantize */
      for (int fused = 0; fused <= !silu && !e; fused++) {
        if (!fused) e = fp4_cuda_moe_quantize_bf16(dx, src, silu ? 2 * C : LD, R, C, (int)kFormats[f], gs, NULL, dgot, NULL, 0);
        else e = route_quantize_matches(ctx, dx, src, LD, R, C, (int)kFormats[f], gs, dgot);
        EXPECT(!e, "quantize to bf16 (%s, source %d%s): CUDA error %d", fp4_format_name(kFormats[f]), src,
               fused ? ", with the routing" : "", e);
        if (!e && !fp4_copy(ctx, want, FP4_MEMORY_HOST, dwant, FP4_MEMORY_DEVICE, (size_t)R * C * 2) &&
            !fp4_copy(ctx, got, FP4_MEMORY_HOST, dgot, FP4_MEMORY_DEVICE, (size_t)R * C * 2)) {
          size_t bad = 0, first = 0;
          for (size_t i = 0; i < (size_t)R * C; i++)
            if (want[i] != got[i] && bad++ == 0) first = i;
          EXPECT(bad == 0,
                 "quantize to bf16 (%s, source %d%s): %zu of %d differ from quantize + dequantize, first at %zu (%04x, want %04x)",
                 fp4_format_name(kFormats[f]), src, fused ? ", with the routing" : "", bad, R * C, first, got[first],
                 want[first]);
        }
      }
      void *bufs[] = {dx, dact, dq, dsc, dwant, dgot};
      for (size_t i = 0; i < 6; i++)
        if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
    }
  EXPECT(!st, "quantize to bf16: %s", fp4_status_str(st));
  free(x);
  free(x16);
  free(want);
  free(got);
}
#endif

/* ---- device scalars and CUDA graph capture --------------------------------------------------------- */

#if FP4KIT_HAVE_CUDA
/* 1 when the cuda backend offers the register-A prefill tiles on this device (SM90, sm_90a code). */
static int device_runs_wgra(fp4_context *ctx) {
  (void)ctx;
  int major = 0, minor = 0, dev = fp4_context_device(ctx);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  fp4_cuda_grouped_args probe;
  static _Alignas(16) const uint8_t bytes[16];
  memset(&probe, 0, sizeof probe);
  probe.format = FP4_FORMAT_NVFP4, probe.act = FP4_CUDA_ACT_BF16, probe.a = bytes, probe.w = bytes;
  probe.lda = probe.k = 128, probe.n = probe.experts = probe.rows = 1, probe.a_div = 1;
  return major == 9 && minor == 0 && fp4_cuda_grouped_wgra_supported(&probe, dev);
}

/* One MoE layer (with a shared expert) and one grouped GEMM over its routed gate_up weights, every
 * operand on the device, bf16 hidden states and outputs, the layer's and GEMM's scalars both by value
 * and in device memory. */
typedef struct fixture {
  fp4_context *ctx;
  int64_t T, E, k, H, I;
  fp4_moe_mode mode;
  fp4_grouped_qmatrix w1, w2, s1, s2;    /* device */
  fp4_moe_layer layer;
  fp4_moe_experts shared;
  fp4_moe_routing rt;
  fp4_matrix hidden, out;                /* bf16 [T, H] */
  fp4_qmatrix hidden_q;                  /* the hidden states quantized (grouped W4A4) */
  fp4_matrix gout;                       /* bf16 [T, 2I]: the grouped GEMM's output */
  int64_t *offsets;                      /* device [E+1] */
  float *scalars;                        /* device: alpha, gate_up gsf, down gsf, shared gate_up, shared down */
  void *ws;
  size_t ws_bytes;
  void *bufs[32];
  int nbufs;
} fixture;

static void *fx_put(fixture *f, const void *host, size_t bytes) {
  void *d = to_device(f->ctx, host, bytes);
  if (d) f->bufs[f->nbufs++] = d;
  return d;
}

static fp4_status fx_grouped(fixture *f, fp4h_rng *g, fp4_grouped_qmatrix *d, int64_t E, int64_t N, int64_t K) {
  fp4_grouped_qmatrix h;
  fp4_status st = fp4h_grouped_make(g, &h, E, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4);
  if (st) return st;
  size_t sb = 0;
  fp4_scales_size(h.format, h.layout, N, K, &sb);
  *d = h;
  d->data = fx_put(f, h.data, (size_t)(E * N * K / 2));
  d->scales = fx_put(f, h.scales, sb * (size_t)E);
  d->multipliers = fx_put(f, h.multipliers, (size_t)E * sizeof(float));
  d->memory = FP4_MEMORY_DEVICE;
  fp4h_grouped_free(&h);
  return d->data && d->scales && d->multipliers ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
}

static void fx_free(fixture *f) {
  for (int i = 0; i < f->nbufs; i++) fp4_free(f->ctx, FP4_MEMORY_DEVICE, f->bufs[i]);
  f->nbufs = 0;
}

static fp4_status fx_make(fixture *f, fp4_context *ctx, int64_t T, fp4_moe_mode mode) {
  memset(f, 0, sizeof *f);
  *f = (fixture){.ctx = ctx, .T = T, .E = 32, .k = 4, .H = 256, .I = 128, .mode = mode};
  fp4h_rng g = {(uint64_t)T * 31 + (uint64_t)mode};
  const int64_t E = f->E, k = f->k, H = f->H, I = f->I;
  fp4_status st = fx_grouped(f, &g, &f->w1, E, 2 * I, H);
  if (!st) st = fx_grouped(f, &g, &f->w2, E, H, I);
  if (!st) st = fx_grouped(f, &g, &f->s1, 1, 2 * I, H);
  if (!st) st = fx_grouped(f, &g, &f->s2, 1, H, I);
  float *x = malloc((size_t)(T * H) * sizeof *x), *tw = malloc((size_t)(T * k) * sizeof *tw);
  float *sw = malloc((size_t)T * sizeof *sw);
  uint16_t *xb = malloc((size_t)(T * H) * 2);
  int32_t *ids = malloc((size_t)(T * k) * sizeof *ids);
  int64_t *off = malloc((size_t)(E + 1) * sizeof *off);
  size_t qs = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, T, H, &qs);
  uint8_t *qd = malloc((size_t)(T * H / 2)), *qsc = malloc(qs);
  if (!st && (!x || !tw || !sw || !xb || !ids || !off || !qd || !qsc)) st = FP4_ERR_OUT_OF_MEMORY;
  if (!st) {
    fp4h_fill(&g, x, T * H, FP4H_DATA_NORMAL, 16);
    fp4_convert(x, FP4_DTYPE_F32, xb, FP4_DTYPE_BF16, (size_t)(T * H));
    fp4h_routing_fill(&g, ids, tw, T, k, E, FP4H_ROUTE_SKEWED);
    for (int64_t t = 0; t < T; t++) sw[t] = (float)fp4h_uniform(&g);
    memset(off, 0, (size_t)(E + 1) * sizeof *off);
    for (int64_t t = 0; t < T; t++) off[1 + (int64_t)(fp4h_next(&g) % (uint64_t)E)]++;
    for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
    /* the W4A4 grouped GEMM's activations: the bf16 hidden states quantized on the reference */
    fp4_matrix xm = {xb, T, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    fp4_qmatrix q = {qd, qsc, T, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
    st = fp4_quantize(NULL, &xm, 100.0f, &q, &(fp4_options){.backend = "ref"});
    f->hidden_q = q;
  }
  const float gsf_gu = 448.0f * 6.0f / 4.0f, gsf_dn = 448.0f * 6.0f / 2.0f;
  const float scalars[5] = {0.75f, gsf_gu, gsf_dn, gsf_gu * 0.5f, gsf_dn * 0.5f};
  if (!st) {
    void *d_x = fx_put(f, xb, (size_t)(T * H) * 2), *d_ids = fx_put(f, ids, (size_t)(T * k) * sizeof *ids);
    void *d_tw = fx_put(f, tw, (size_t)(T * k) * sizeof *tw), *d_sw = fx_put(f, sw, (size_t)T * sizeof *sw);
    f->offsets = fx_put(f, off, (size_t)(E + 1) * sizeof *off);
    f->scalars = fx_put(f, scalars, sizeof scalars);
    f->hidden_q.data = fx_put(f, qd, (size_t)(T * H / 2));
    f->hidden_q.scales = fx_put(f, qsc, qs);
    f->hidden_q.memory = FP4_MEMORY_DEVICE;
    void *d_out = NULL, *d_gout = NULL;
    if (!fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(T * H) * 2, &d_out)) f->bufs[f->nbufs++] = d_out;
    if (!fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(T * 2 * I) * 2, &d_gout)) f->bufs[f->nbufs++] = d_gout;
    if (!d_x || !d_ids || !d_tw || !d_sw || !f->offsets || !f->scalars || !f->hidden_q.data || !f->hidden_q.scales ||
        !d_out || !d_gout)
      st = FP4_ERR_OUT_OF_MEMORY;
    f->hidden = (fp4_matrix){d_x, T, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    f->out = (fp4_matrix){d_out, T, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    f->gout = (fp4_matrix){d_gout, T, 2 * I, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    f->shared = (fp4_moe_experts){f->s1, f->s2, scalars[3], scalars[4], NULL};
    f->layer = (fp4_moe_layer){mode, {f->w1, f->w2, scalars[1], scalars[2], NULL}, &f->shared};
    f->rt = (fp4_moe_routing){d_ids, T, k, {d_tw, T, k, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, d_sw};
  }
  if (!st) st = fp4_moe_workspace_size(&f->layer, T, k, &(fp4_options){.backend = "cuda"}, &f->ws_bytes);
  if (!st && !(st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, f->ws_bytes, &f->ws))) f->bufs[f->nbufs++] = f->ws;
  free(x), free(tw), free(sw), free(xb), free(ids), free(off), free(qd), free(qsc);
  return st;
}

/* The layer's scalars in device memory in place of the by-value ones (which become NaN: unused). */
static void fx_device_scales(fixture *f, int on) {
  f->layer.routed.act_scales_device = on ? f->scalars + 1 : NULL;
  f->shared.act_scales_device = on ? f->scalars + 3 : NULL;
  f->layer.routed.gate_up_act_scale = on ? NAN : 448.0f * 6.0f / 4.0f;
  f->layer.routed.down_act_scale = on ? NAN : 448.0f * 6.0f / 2.0f;
  f->shared.gate_up_act_scale = on ? NAN : 448.0f * 6.0f / 8.0f;
  f->shared.down_act_scale = on ? NAN : 448.0f * 6.0f / 4.0f;
}

enum { FX_MOE = 0, FX_GROUPED_W4A16 = 1, FX_GROUPED_W4A4 = 2 };

/* One call of what (FX_*) on opts' stream, the output NaN-filled first (in stream order). */
static fp4_status fx_call(fixture *f, int what, float alpha, const fp4_options *opts) {
  fp4_matrix *o = what == FX_MOE ? &f->out : &f->gout;
  if (cudaMemsetAsync(o->data, 0xFF, (size_t)(o->rows * o->cols) * 2, (cudaStream_t)opts->stream) != cudaSuccess)
    return FP4_ERR_CUDA;
  if (what == FX_MOE) return fp4_moe_forward(f->ctx, &f->layer, &f->hidden, &f->rt, f->ws, f->ws_bytes, o, opts);
  if (what == FX_GROUPED_W4A16) return fp4_grouped_mm_w4a16(f->ctx, &f->hidden, &f->w1, f->offsets, alpha, o, opts);
  return fp4_grouped_mm(f->ctx, &f->hidden_q, &f->w1, f->offsets, alpha, o, opts);
}

/* The output of the last call, to the host (waits for the stream). */
static fp4_status fx_fetch(fixture *f, int what, cudaStream_t s, uint16_t *host) {
  const fp4_matrix *o = what == FX_MOE ? &f->out : &f->gout;
  if (cudaStreamSynchronize(s) != cudaSuccess) return FP4_ERR_CUDA;
  return fp4_copy(f->ctx, host, FP4_MEMORY_HOST, o->data, FP4_MEMORY_DEVICE, (size_t)(o->rows * o->cols) * 2);
}

static size_t fx_out_elems(const fixture *f, int what) {
  return (size_t)(f->T * (what == FX_MOE ? f->H : 2 * f->I));
}

static const char *fx_name(int what) {
  return what == FX_MOE ? "fp4_moe_forward" : what == FX_GROUPED_W4A16 ? "fp4_grouped_mm_w4a16" : "fp4_grouped_mm";
}

/* Counts outputs differing from want (bits), or not finite. */
static size_t fx_diff(const uint16_t *got, const uint16_t *want, size_t n, size_t *nonfinite) {
  size_t bad = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < n; i++) {
    bad += got[i] != want[i];
    *nonfinite += (got[i] & 0x7F80u) == 0x7F80u;
  }
  return bad;
}

/* Device scalars give the bits of the same values by value: the grouped GEMMs with alpha 0.75 by
 * value against alpha 1 times alpha_device 0.75; the MoE layer with act_scales_device against the
 * same encode scales by value (W4A4: quantize and GEMM scales on the GPU), and alpha_device 0.75
 * scaling the layer output (the f32 result times 0.75, then bf16; checked against 1 + the host). */
static void test_device_scalars(fp4_context *ctx) {
  static const int64_t kT[] = {1, 64, 1024};
  for (size_t ti = 0; ti < 3; ti++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++) {
      fixture f;
      const int64_t T = kT[ti];
      fp4_status st = fx_make(&f, ctx, T, w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16);
      EXPECT(!st, "device scalars: fixture T = %lld: %s", (long long)T, fp4_last_error());
      const size_t nm = fx_out_elems(&f, FX_MOE), ng = fx_out_elems(&f, FX_GROUPED_W4A16);
      uint16_t *a = malloc((nm > ng ? nm : ng) * 2), *b = malloc((nm > ng ? nm : ng) * 2);
      const fp4_options plain = {.backend = "cuda", .enable_pdl = 1};
      fp4_options dev = plain;
      dev.alpha_device = f.scalars; /* 0.75 */
      for (int what = 0; !st && a && b && what < 3; what++) {
        if (what == FX_MOE) fx_device_scales(&f, 0);
        st = fx_call(&f, what, 0.75f, &plain);
        if (!st) st = fx_fetch(&f, what, NULL, a);
        if (what == FX_MOE) {
          fx_device_scales(&f, 1);
          fp4_options one = plain;
          if (!st) st = fx_call(&f, what, 1.0f, &one);
        } else if (!st) {
          st = fx_call(&f, what, 1.0f, &dev);
        }
        if (!st) st = fx_fetch(&f, what, NULL, b);
        EXPECT(!st, "%s T = %lld %s: %s", fx_name(what), (long long)T, w4a4 ? "W4A4" : "W4A16", fp4_last_error());
        if (st) break;
        size_t nonfinite = 0;
        const size_t bad = fx_diff(b, a, fx_out_elems(&f, what), &nonfinite);
        EXPECT(bad == 0 && nonfinite == 0, "%s T = %lld %s: device scalars differ from by-value in %zu of %zu outputs (%zu not finite)",
               fx_name(what), (long long)T, w4a4 ? "W4A4" : "W4A16", bad, fx_out_elems(&f, what), nonfinite);
        if (what == FX_MOE) { /* alpha_device on the layer: out * 0.75 of the f32 sum, one bf16 rounding */
          if (!(st = fx_call(&f, what, 1.0f, &dev))) st = fx_fetch(&f, what, NULL, b);
          EXPECT(!st, "fp4_moe_forward with alpha_device: %s", fp4_last_error());
          size_t off = 0;
          for (size_t i = 0; !st && i < nm; i++) {
            const float v = fp4_bf16_to_f32_inline(a[i]), w = fp4_bf16_to_f32_inline(b[i]);
            off += !(fabsf(w - 0.75f * v) <= 0x1p-7f * fabsf(0.75f * v) + 1e-30f);
          }
          EXPECT(off == 0, "fp4_moe_forward T = %lld: alpha_device 0.75 off 0.75 x output in %zu of %zu", (long long)T,
                 off, nm);
        }
      }
      free(a);
      free(b);
      fx_free(&f);
    }
}

/* Every MoE entry point captured once in a CUDA graph (global capture mode: any synchronizing call
 * in the library would invalidate the capture) on a stream of its own, with device scalars and PDL,
 * then replayed 100 times, each replay's output NaN-filled first: bit for bit the eager result.
 * W4A16 and W4A4 layers at B = 1 and 64 (decode) and 1024 (prefill), and the grouped GEMMs. */
static void test_graph_capture(fp4_context *ctx) {
  static const int64_t kT[] = {1, 64, 1024};
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    EXPECT(0, "graph capture: cudaStreamCreate failed");
    return;
  }
  for (size_t ti = 0; ti < 3; ti++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++) {
      fixture f;
      const int64_t T = kT[ti];
      fp4_status st = fx_make(&f, ctx, T, w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16);
      EXPECT(!st, "graph capture: fixture T = %lld: %s", (long long)T, fp4_last_error());
      fx_device_scales(&f, 1);
      const fp4_options opts = {.backend = "cuda", .enable_pdl = 1, .stream = s, .alpha_device = f.scalars};
      const size_t n = fx_out_elems(&f, FX_MOE) > fx_out_elems(&f, FX_GROUPED_W4A16) ? fx_out_elems(&f, FX_MOE)
                                                                                      : fx_out_elems(&f, FX_GROUPED_W4A16);
      uint16_t *eager = malloc(n * 2), *got = malloc(n * 2);
      /* W4A16 layers: the MoE layer and the W4A16 grouped GEMM; W4A4: the layer and fp4_grouped_mm */
      const int whats[2] = {FX_MOE, w4a4 ? FX_GROUPED_W4A4 : FX_GROUPED_W4A16};
      for (int wi = 0; !st && eager && got && wi < 2; wi++) {
        const int what = whats[wi];
        /* eager first: it also grows the context workspace, which a capture may not */
        st = fx_call(&f, what, 1.0f, &opts);
        if (!st) st = fx_fetch(&f, what, s, eager);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cudaError_t e = st ? cudaSuccess : cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        fp4_status cs = FP4_OK;
        if (!st && e == cudaSuccess) {
          cs = fx_call(&f, what, 1.0f, &opts);
          e = cudaStreamEndCapture(s, &graph);
        }
        if (!st && !cs && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
        EXPECT(!st && !cs && e == cudaSuccess, "%s T = %lld %s: capture: %s / %s / %s", fx_name(what), (long long)T,
               w4a4 ? "W4A4" : "W4A16", fp4_status_str(st), cs ? fp4_last_error() : "call ok", cudaGetErrorString(e));
        size_t worst = 0, nonfinite = 0;
        for (int r = 0; exec && r < 100; r++) {
          size_t nf = 0;
          if (cudaGraphLaunch(exec, s) != cudaSuccess || fx_fetch(&f, what, s, got)) {
            worst = (size_t)-1;
            break;
          }
          const size_t bad = fx_diff(got, eager, fx_out_elems(&f, what), &nf);
          worst = bad > worst ? bad : worst;
          nonfinite += nf;
        }
        if (exec)
          EXPECT(worst == 0 && nonfinite == 0, "%s T = %lld %s: graph replays differ from eager in up to %zu outputs (%zu not finite)",
                 fx_name(what), (long long)T, w4a4 ? "W4A4" : "W4A16", worst, nonfinite);
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
      }
      free(eager);
      free(got);
      fx_free(&f);
    }
  cudaStreamDestroy(s);
}
#else
static int device_runs_wgra(fp4_context *ctx) {
  (void)ctx;
  return 0;
}
static void test_device_scalars(fp4_context *ctx) { (void)ctx; }
static void test_graph_capture(fp4_context *ctx) { (void)ctx; }
#endif

int main(int argc, char **argv) {
  clock_gettime(CLOCK_MONOTONIC, &g_t0);
  /* --library-tiles-only: skip the passes that force each prefill tile (for a quick run);
   * --shared-dense-only: only the shared expert on the dense kernels */
  const int forced_passes = !(argc > 1 && !strcmp(argv[1], "--library-tiles-only"));
  const int shared_dense_only = argc > 1 && !strcmp(argv[1], "--shared-dense-only");
  fp4_context *ctx = NULL;
  char reason[256];
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    printf("SKIP: cannot create a context on device 0: %s\n", fp4_last_error());
    return 77;
  }
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: the cuda backend cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  if (argc > 1 && !strcmp(argv[1], "--cluster-only")) { /* the lean kernel's cluster K split alone */
    test_cluster_k_split(ctx);
    printf("test_cuda_moe --cluster-only: %d checks, %d failures\n", g_runs, g_failures);
    fp4_context_destroy(ctx);
    return g_failures ? 1 : 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--route-fused-only")) { /* the routing in the gate_up launch alone */
    test_route_fused(ctx);
    printf("test_cuda_moe --route-fused-only: %d checks, %d failures\n", g_runs, g_failures);
    fp4_context_destroy(ctx);
    return g_failures ? 1 : 0;
  }
  if (shared_dense_only) {
    test_shared_dense_info(ctx);
    test_shared_dense_cases(ctx);
    printf("test_cuda_moe --shared-dense-only: %d checks, %d failures\n", g_runs, g_failures);
    fp4_context_destroy(ctx);
    return g_failures ? 1 : 0;
  }
  /* The streaming kernels first, on every batch size, including those whose mean rows per expert
   * would take the prefill tiles by default: that path must stay covered. */
  g_config = "moe.streaming";
  test_grouped(ctx);
  progress("grouped GEMM: %d cases, %d failures\n", g_runs, g_failures);
  test_cluster_k_split(ctx);
  progress("+ the lean kernel's cluster K split: %d cases, %d failures\n", g_runs, g_failures);
  test_moe_small(ctx);
  progress("+ MoE layer: %d cases, %d failures\n", g_runs, g_failures);
  test_moe_qwen(ctx);
  progress("+ Qwen3.5-shaped MoE: %d cases, %d failures\n", g_runs, g_failures);
  test_moe_prefill(ctx);
  progress("+ prefill-sized MoE: %d cases, %d failures\n", g_runs, g_failures);
  g_config = NULL; /* from here on the library's own rule */
  test_moe_large(ctx);
  progress("+ MoE on the large-M tiles: %d cases, %d failures\n", g_runs, g_failures);
  test_grouped_large(ctx);
  progress("+ grouped GEMM on the large-M tiles: %d cases, %d failures\n", g_runs, g_failures);
  /* On SM90 (sm_90a code) the cases above ran the register-A wgmma tiles at the token width the
   * library picks from the mean rows per expert; each width runs them here too (elsewhere those
   * configs are refused, and the passes are skipped), with the bound M-tile numbering once, and so
   * do the mma.sync tiles, which every other GPU runs. */
  static const char *const forced[] = {"moe.prefill.wgra32",  "moe.prefill.wgra64",  "moe.prefill.wgra128",
                                       "moe.prefill.wgra160", "moe.prefill.wgra192", "moe.prefill.wgra256",
                                       "moe.prefill.wgra128.bound-tiles", "moe.prefill.mma64", "moe.prefill.mma128"};
  const int wgra = device_runs_wgra(ctx);
  for (size_t i = 0; forced_passes && i < sizeof forced / sizeof *forced; i++) {
    if (!wgra && strstr(forced[i], "wgra")) {
      printf("SKIP the %s passes: the register-A tiles need SM90 with sm_90a code\n", forced[i]);
      continue;
    }
    g_config = forced[i];
    test_moe_large(ctx);
    test_grouped_large(ctx);
    progress("+ the same on %s: %d cases, %d failures, %d refused (f32 / MXFP4 f16 activations)\n", forced[i], g_runs,
           g_failures, g_skips);
  }
  g_config = NULL;
  test_device_scalars(ctx);
  progress("+ device scalars against by-value: %d checks, %d failures\n", g_runs, g_failures);
  test_graph_capture(ctx);
  progress("+ CUDA graph capture against eager: %d checks, %d failures\n", g_runs, g_failures);
#if FP4KIT_HAVE_CUDA
  test_silu_bits(ctx);
  test_silu_epilogue_bits(ctx);
  test_extra_slot_bits(ctx);
  progress("+ bf16 SiLU*up bits: %d checks, %d failures\n", g_runs, g_failures);
  test_quantize_bf16_bits(ctx);
  progress("+ W4A4 decode inputs quantized to bf16 in one kernel: %d checks, %d failures\n", g_runs, g_failures);
#endif
  test_path_selection(ctx);
  progress("+ path selection: %d checks, %d failures\n", g_runs, g_failures);
  test_shared_dense_info(ctx);
  test_shared_dense_cases(ctx);
  progress("+ the shared expert on the dense kernels: %d checks, %d failures\n", g_runs, g_failures);
  test_invalid_ids(ctx);
  test_route_fused(ctx);
  progress("+ the routing in the gate_up launch: %d checks, %d failures\n", g_runs, g_failures);
  progress("test_cuda_moe: %d checks, %d failures\n", g_runs, g_failures);
  fp4_context_destroy(ctx);
  return g_failures ? 1 : 0;
}
