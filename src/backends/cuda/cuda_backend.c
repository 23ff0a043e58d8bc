/*
 * The cuda backend: fp4kit's own CUDA kernels (runtime-recipe quantize, small-M and large-M W4A16
 * and W4A4 GEMMs) on SM80 and newer. Plain C host code: it checks what the device and the binary can run,
 * refuses what the kernels do not take with the rule that failed, picks a configuration and
 * launches on the caller's stream with or without programmatic dependent launch.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "backends/cuda/moe_host.h"
#include "backends/cuda/cuda_probe.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"

enum { CUDA_MAX_M = 64, CUDA_K_SLAB = 128 };

/* Per-context facts about the device, gathered once. */
typedef struct cuda_state {
  int device;
  int major, minor;
  int sms;
  int image_status; /* cudaError_t of the kernel-image probe */
  char name[256];
} cuda_state;

static void cuda_release_state(void *state) { free(state); }

static fp4_status cuda_set_device(int device) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == device) return FP4_OK;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "cuda: cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
  return FP4_OK;
}

/* The context's device facts, or NULL with the reason. */
static const cuda_state *cuda_get_state(fp4_context *ctx, char *reason, size_t reason_size) {
  int device = fp4_context_device(ctx);
  if (device < 0) {
    fp4_reason(reason, reason_size, "the cuda backend needs a context created on a CUDA device (this one is %s)",
               ctx ? "host-only, device -1" : "NULL");
    return NULL;
  }
  void **slot = fp4_context_state(ctx, "cuda");
  if (slot && *slot) return *slot;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    fp4_reason(reason, reason_size, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return NULL;
  }
  if (device >= count) {
    fp4_reason(reason, reason_size, "CUDA device %d does not exist (%d device%s present)", device, count,
               count == 1 ? "" : "s");
    return NULL;
  }
  cuda_state *st = calloc(1, sizeof *st);
  if (!st) {
    fp4_reason(reason, reason_size, "out of host memory");
    return NULL;
  }
  struct cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
    fp4_reason(reason, reason_size, "cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
    free(st);
    return NULL;
  }
  st->device = device;
  st->major = prop.major;
  st->minor = prop.minor;
  st->sms = prop.multiProcessorCount;
  snprintf(st->name, sizeof st->name, "%s", prop.name);
  int prev = -1;
  cudaGetDevice(&prev);
  if (cudaSetDevice(device) == cudaSuccess) {
    st->image_status = fp4_cuda_kernel_image_status();
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
  } else {
    st->image_status = (int)cudaErrorInvalidDevice;
  }
  cudaGetLastError(); /* the probe's error, if any, is recorded in image_status, not left sticky */
  if (slot) *slot = st;
  return st; /* without a slot (not registered) the state leaks once per call: never in practice */
}

static fp4_status cuda_available(fp4_context *ctx, char *reason, size_t reason_size) {
  fp4_reason(reason, reason_size, "%s", "");
  const cuda_state *st = cuda_get_state(ctx, reason, reason_size);
  if (!st) return FP4_ERR_UNSUPPORTED;
  if (st->major < 8) {
    fp4_reason(reason, reason_size, "the cuda kernels need compute capability 8.0+ (mma.sync bf16); device %d (%s) is SM%d%d",
               st->device, st->name, st->major, st->minor);
    return FP4_ERR_UNSUPPORTED;
  }
  if (st->image_status != cudaSuccess) {
    if (st->image_status == cudaErrorNoKernelImageForDevice || st->image_status == cudaErrorInvalidDeviceFunction)
      fp4_reason(reason, reason_size,
                 "this fp4kit binary carries no kernel code for SM%d%d (%s); rebuild with CMAKE_CUDA_ARCHITECTURES "
                 "including %d%d",
                 st->major, st->minor, st->name, st->major, st->minor);
    else
      fp4_reason(reason, reason_size, "probing the kernels on device %d failed: %s", st->device,
                 cudaGetErrorString((cudaError_t)st->image_status));
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

static int misaligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) != 0; }

static fp4_status refuse(char *reason, size_t reason_size, const char *what) {
  fp4_reason(reason, reason_size, "%s", what);
  return FP4_ERR_UNSUPPORTED;
}

static int cuda_act_kind(fp4_dtype dtype) {
  switch (dtype) {
  case FP4_DTYPE_BF16: return FP4_CUDA_ACT_BF16;
  case FP4_DTYPE_F16: return FP4_CUDA_ACT_F16;
  default: return FP4_CUDA_ACT_F32;
  }
}

/* The kernel arguments of a GEMM problem (both kernel families take the same). */
static void cuda_gemm_args_of(const fp4_problem *p, fp4_cuda_gemm_args *a) {
  const fp4_qmatrix *b = p->b;
  memset(a, 0, sizeof *a);
  a->format = (int)b->format;
  a->b = b->data;
  a->b_scales = b->scales;
  a->b_layout = (int)b->layout;
  a->out = p->out->data;
  a->ldo = p->out->ld ? p->out->ld : p->out->cols;
  a->out_dtype = (int)p->out->dtype;
  a->m = fp4_problem_m(p);
  a->n = b->rows;
  a->k = b->cols;
  a->alpha_device = p->alpha_device;
  if (p->op == FP4_OP_MM) {
    a->act = FP4_CUDA_ACT_FP4;
    a->a = p->a_q->data;
    a->lda = p->a_q->cols / 2;
    a->a_scales = p->a_q->scales;
    a->a_layout = (int)p->a_q->layout;
    a->scale = (float)((double)p->alpha * (double)b->multiplier * (double)p->a_q->multiplier);
  } else {
    a->act = cuda_act_kind(p->a->dtype);
    a->a = p->a->data;
    a->lda = p->a->ld ? p->a->ld : p->a->cols;
    a->scale = (float)((double)p->alpha * (double)b->multiplier);
  }
}

/* NULL when the small-M kernels take (M, K); else the rule, written to why. */
static const char *cuda_small_m_rule(int64_t M, int64_t K, char *why, size_t why_size) {
  if (M > CUDA_MAX_M) snprintf(why, why_size, "M = %lld: the small-M kernels take M <= %d", (long long)M, CUDA_MAX_M);
  else if (K % CUDA_K_SLAB)
    snprintf(why, why_size, "K = %lld: the small-M kernels need K to be a multiple of %d (they stream K in %d-element slabs)",
             (long long)K, CUDA_K_SLAB, CUDA_K_SLAB);
  else return NULL;
  return why;
}

static fp4_status cuda_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  char why[200];
  if (p->memory != FP4_MEMORY_DEVICE)
    return refuse(reason, reason_size, "the cuda backend runs on device memory; the operands are in host memory");
  if (p->op == FP4_OP_QUANTIZE) return FP4_OK; /* any validated shape, dtype and layout */
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_supports(p, reason, reason_size);
  const int64_t M = fp4_problem_m(p), K = fp4_problem_k(p);
  if (cuda_small_m_rule(M, K, why, sizeof why)) { /* then the large-M kernels must take it */
    const cuda_state *st = cuda_get_state(ctx, reason, reason_size);
    if (!st) return FP4_ERR_UNSUPPORTED;
    fp4_cuda_gemm_args ga;
    char lwhy[320];
    cuda_gemm_args_of(p, &ga);
    if (!fp4_cuda_large_m_check(&ga, st->device, NULL, lwhy, sizeof lwhy)) {
      fp4_reason(reason, reason_size, "%s; %s", why, lwhy);
      return FP4_ERR_UNSUPPORTED;
    }
  }
  const uintptr_t scale_align = p->b->format == FP4_FORMAT_NVFP4 ? 2 : 1;
  if (misaligned(p->b->data, 16)) return refuse(reason, reason_size, "b->data must be 16-byte aligned (16-byte weight loads)");
  if (misaligned(p->b->scales, scale_align)) return refuse(reason, reason_size, "b->scales must be 2-byte aligned for NVFP4");
  if (p->op == FP4_OP_MM) {
    if (misaligned(p->a_q->data, 16)) return refuse(reason, reason_size, "a->data must be 16-byte aligned");
    if (misaligned(p->a_q->scales, scale_align)) return refuse(reason, reason_size, "a->scales must be 2-byte aligned for NVFP4");
  } else {
    const int64_t ld = p->a->ld ? p->a->ld : p->a->cols;
    if (misaligned(p->a->data, 16) || (ld * (int64_t)fp4_dtype_size(p->a->dtype)) % 16) {
      snprintf(why, sizeof why, "a must start 16-byte aligned with a row stride of a multiple of 16 bytes (ld = %lld %s elements)",
               (long long)ld, fp4_dtype_name(p->a->dtype));
      return refuse(reason, reason_size, why);
    }
  }
  return FP4_OK;
}

/* Small-M configurations: weight rows per CTA and warps per CTA splitting K ("small-m.w8" = 16 rows,
 * 8 warps; "small-m.r32.w4" = 32 rows, 4 warps). More rows per CTA let each activation fragment
 * (and, for W4A4, each decoded one) serve several weight tiles, at the price of fewer CTAs. The
 * ".b6"/".b8" ones run the lean kernel compiled for 6 or 8 resident 4-warp CTAs per SM (register
 * cap; gemm_small_m.cu says which variants fit) instead of the classic kernel's 4 or 2.
 * "small-m.pro.*" (W4A4 only) dequantize the FP4 activations to bf16 once per GEMM and run the
 * W4A16 bf16 kernel of the config of the same suffix: tuner candidates, not the default until the
 * H200 timings decide (scripts/cuda_small_m_timing.cu prints them side by side). */
static const struct cuda_config {
  const char *name;
  int rows, warps, max_m;
  int min_blocks; /* 0: classic kernel; 6 or 8: lean kernel */
  int dequant_a;  /* 1: W4A4 through the bf16 prologue */
} cuda_config_table[] = {
    {"small-m.w8", 16, 8, 64, 0},     {"small-m.w4", 16, 4, 64, 0},     {"small-m.w2", 16, 2, 64, 0},
    {"small-m.w1", 16, 1, 64, 0},     {"small-m.r32.w8", 32, 8, 32, 0}, {"small-m.r32.w4", 32, 4, 32, 0},
    {"small-m.r64.w8", 64, 8, 16, 0}, {"small-m.r64.w4", 64, 4, 16, 0}, {"small-m.w4.b8", 16, 4, 16, 8},
    {"small-m.w4.b6", 16, 4, 16, 6},  {"small-m.r32.w4.b6", 32, 4, 8, 6},
    {"small-m.sa.r64.w8", 64, 8, 32, FP4_CUDA_SMALL_M_SHARED_ACT},
    {"small-m.pro.w8", 16, 8, 64, 0, 1},     {"small-m.pro.w4", 16, 4, 64, 0, 1},
    {"small-m.pro.w2", 16, 2, 64, 0, 1},     {"small-m.pro.w1", 16, 1, 64, 0, 1},
    {"small-m.pro.r32.w8", 32, 8, 32, 0, 1}, {"small-m.pro.r32.w4", 32, 4, 32, 0, 1},
    {"small-m.pro.r64.w8", 64, 8, 16, 0, 1}, {"small-m.pro.r64.w4", 64, 4, 16, 0, 1},
    {"small-m.pro.w4.b8", 16, 4, 16, 8, 1},  {"small-m.pro.w4.b6", 16, 4, 16, 6, 1},
    {"small-m.pro.r32.w4.b6", 32, 4, 8, 6, 1},
    {"small-m.pro.sa.r64.w8", 64, 8, 32, FP4_CUDA_SMALL_M_SHARED_ACT, 1},
};
enum { CUDA_CONFIGS = (int)(sizeof cuda_config_table / sizeof *cuda_config_table) };

/* Heuristic: 16 rows per CTA; enough warps per SM to keep HBM busy, but at least two slabs per warp. */
static int cuda_default_warps(int64_t n, int64_t k) {
  const int64_t slabs = k / CUDA_K_SLAB;
  (void)n;
  int w = 8;
  while (w > 1 && slabs < 2 * w) w /= 2;
  return w;
}

static const struct cuda_config *cuda_config_named(const char *name) {
  for (int i = 0; i < CUDA_CONFIGS; i++)
    if (!strcmp(cuda_config_table[i].name, name)) return &cuda_config_table[i];
  return &cuda_config_table[0];
}

/* Default small-M configuration, from the H200 timings of every config on the MODELS.md shapes
 * (bench/results/h200/cuda-small-m.md): up to 32 tokens, 32-row CTAs win wherever they still give
 * every SM a CTA (an activation fragment serves two weight tiles), with 4 warps when there are two
 * CTAs per SM and 8 when there is one; below one CTA per SM, and above 32 tokens, 16-row CTAs. Each
 * warp keeps at least two 128-K slabs (r32.w4: K >= 1024, r32.w8: K >= 2048). */
static const struct cuda_config *cuda_default_w4a16_config(int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t slabs = k / CUDA_K_SLAB, ctas32 = (n + 31) / 32, ctas16 = (n + 15) / 16;
  /* Up to 4 tokens the lean kernel (6 resident CTAs per SM) wins once there are at least 4 CTAs per
   * SM to fill those slots (bench/results/h200/2026-11-30-session3: 57344x8192 87.4 vs 95.0 us,
   * 20480x4096 20.8 vs 25.8 us, 10240x8192 with 16-row CTAs 21.6 vs 25.8 us); with fewer it idles SMs. */
  if (m <= 4 && ctas32 >= 4 * (int64_t)sms && slabs >= 8) return cuda_config_named("small-m.r32.w4.b6");
  if (m <= 4 && ctas16 >= 4 * (int64_t)sms && slabs >= 8) return cuda_config_named("small-m.w4.b6");
  if (m <= 32 && ctas32 >= 2 * (int64_t)sms && slabs >= 8) return cuda_config_named("small-m.r32.w4");
  if (m <= 32 && ctas32 >= sms && slabs >= 16) return cuda_config_named("small-m.r32.w8");
  const int warps = cuda_default_warps(n, k);
  for (int i = 0; i < CUDA_CONFIGS; i++)
    if (cuda_config_table[i].rows == 16 && cuda_config_table[i].warps == warps && !cuda_config_table[i].min_blocks &&
        !cuda_config_table[i].dequant_a)
      return &cuda_config_table[i];
  return &cuda_config_table[0];
}

/* W4A4 runs the W4A16 choice through the bf16 prologue (small-m.pro.*: the FP4 activations
 * dequantized once per GEMM, then the W4A16 inner loop) once the weight is large enough to hide the
 * extra decode launch: measured on the H200 (bench/results/h200/2026-11-30-session3,
 * small-m-prologue.*) the prologue is 1.02-1.06x the W4A16 time and 1.3-2x faster than the in-loop
 * activation decode from 8192 x 4096 weights up (57344x8192 M=1: 89.3 vs 116.1 us; M=16: 129 vs 191
 * us), while on the small shapes (4096 x 128 .. 4096 x 4096) the launch can cost more than it saves. */
static const struct cuda_config *cuda_default_config(int act, int64_t m, int64_t n, int64_t k, int sms) {
  /* 17 to 32 tokens of bf16/f16 activations: the shared-activation kernel, from 1.2 of its 64-row
   * CTAs per SM (bench/results/h200/2026-11-30-session11, run 7, M = 32 against the default in the
   * same run: 1.20-1.39x on the seven weights with 160 or more CTAs, 0.92-1.03x at 128 and 64, 0.57-
   * 0.64x on the small ones; at M = 16 it is 0.96-0.99x on the large weights, so it stays off there;
   * W4A4 keeps its configs until its prologue twin is timed). */
  if (m > 16 && m <= 32 && (act == FP4_CUDA_ACT_BF16 || act == FP4_CUDA_ACT_F16) &&
      (n + 63) / 64 * 5 >= (int64_t)sms * 6 && k >= 8 * CUDA_K_SLAB)
    return cuda_config_named("small-m.sa.r64.w8");
  const struct cuda_config *c = cuda_default_w4a16_config(m, n, k, sms);
  if (act != FP4_CUDA_ACT_FP4 || n * k < ((int64_t)1 << 25)) return c;
  static const char in_loop[] = "small-m.", pro[] = "small-m.pro."; /* twin: same suffix */
  for (int i = 0; i < CUDA_CONFIGS; i++)
    if (cuda_config_table[i].dequant_a && !strcmp(cuda_config_table[i].name + strlen(pro), c->name + strlen(in_loop)))
      return &cuda_config_table[i];
  return c;
}

/* The large-M configs that can run ga on the context's device, the default first (0 when no large-M
 * kernel takes the problem): the mma.sync tiles (heuristic order), the register-decode and wgmma
 * tiles, and the register-A wgmma tiles, which lead where their 256-token tile gives every SM a CTA:
 * 469-598 TFLOP/s on the large dense weights at M >= 1024 on the H200 (session 9) against 223-229
 * for the best mma.sync tile (session 2). On smaller grids each of their CTAs walks all of K at
 * about 1 us per 64-K tile, so they stay behind the mma.sync tiles there. */
static int cuda_large_m_candidates(const fp4_cuda_gemm_args *ga, const cuda_state *st, const char *large[16]) {
  char why[320];
  if (fp4_cuda_large_m_check(ga, st->device, NULL, why, sizeof why) != 1) return 0;
  const char *others[16], *wgra[4];
  int n = fp4_cuda_large_m_configs(ga, st->device, others, 8);
  if (n < 1) return 0;
  n += fp4_cuda_rd_configs(ga, st->device, others + n, 16 - n);
  n += fp4_cuda_wgmma_configs(ga, st->device, others + n, 16 - n);
  const int nw = fp4_cuda_wgra_configs(ga, st->device, wgra, 4);
  const int lead = ((ga->m + 255) / 256) * ((ga->n + 127) / 128) >= st->sms;
  int count = 0;
  for (int i = 0; lead && i < nw; i++) large[count++] = wgra[i];
  for (int i = 0; i < n && count < 16; i++) large[count++] = others[i];
  for (int i = 0; !lead && i < nw && count < 16; i++) large[count++] = wgra[i];
  return count;
}

static int cuda_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
  if (p->op == FP4_OP_QUANTIZE) {
    if (max > 0) names[0] = "quantize";
    return max > 0 ? 1 : 0;
  }
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_configs(ctx, p, names, max);
  fp4_cuda_gemm_args ga;
  char why[320];
  const char *large[16];
  int nlarge = 0, count = 0;
  cuda_gemm_args_of(p, &ga);
  const int small_ok = !cuda_small_m_rule(ga.m, ga.k, why, sizeof why);
  const cuda_state *st = cuda_get_state(ctx, NULL, 0);
  if (st) nlarge = cuda_large_m_candidates(&ga, st, large);
  const int large_first = !small_ok || ga.m > FP4_CUDA_LARGE_M_FROM;
  for (int i = 0; large_first && i < nlarge && count < max; i++) names[count++] = large[i];
  if (small_ok) {
    const struct cuda_config *first = cuda_default_config(ga.act, ga.m, ga.n, ga.k, st ? st->sms : 1);
    if (count < max) names[count++] = first->name;
    for (int i = 0; i < CUDA_CONFIGS && count < max; i++)
      if (&cuda_config_table[i] != first && ga.m <= cuda_config_table[i].max_m &&
          (!cuda_config_table[i].dequant_a || ga.act == FP4_CUDA_ACT_FP4) &&
          !(cuda_config_table[i].min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT && !cuda_config_table[i].dequant_a &&
            ga.act != FP4_CUDA_ACT_BF16 && ga.act != FP4_CUDA_ACT_F16))
        names[count++] = cuda_config_table[i].name;
  }
  for (int i = 0; !large_first && i < nlarge && count < max; i++) names[count++] = large[i];
  return count;
}

/* The config a dense GEMM runs: config, or the default for a on st's device (NULL when no kernel
 * takes the problem). */
static const char *cuda_gemm_config(const cuda_state *st, const fp4_cuda_gemm_args *a, const char *config) {
  if (config) return config;
  char why[320];
  if (cuda_small_m_rule(a->m, a->k, why, sizeof why) || a->m > FP4_CUDA_LARGE_M_FROM) {
    const char *large[16];
    /* when the large-M kernels refuse the problem, their first tile's check in run names the rule */
    if (cuda_large_m_candidates(a, st, large) < 1 && fp4_cuda_large_m_configs(a, st->device, large, 8) < 1) return NULL;
    return large[0];
  }
  return cuda_default_config(a->act, a->m, a->n, a->k, st->sms)->name;
}

/* Device workspace a launch of the dense GEMM config takes for a: the bf16 activations of the W4A4
 * prologue configs, the register-A tiles' split-K partial sums. */
static size_t cuda_gemm_workspace(const fp4_cuda_gemm_args *a, const char *config) {
  if (!strncmp(config, "large-m.wgra.", 13)) return fp4_cuda_wgra_workspace(a, config);
  if (!strncmp(config, "large-m.rd.", 11)) return fp4_cuda_rd_workspace(a, config);
  if (!strncmp(config, "large-m.", 8)) return 0;
  for (int i = 0; i < CUDA_CONFIGS; i++)
    if (!strcmp(config, cuda_config_table[i].name))
      return cuda_config_table[i].dequant_a ? fp4_cuda_bf16_a_bytes(a->m, a->k) : 0;
  return 0;
}

static fp4_status cuda_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  char reason[256];
  const cuda_state *st = cuda_get_state(ctx, reason, sizeof reason);
  if (!st) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: %s", reason);
  fp4_status s = cuda_set_device(st->device);
  if (s) return s;
  const int pdl = p->enable_pdl && st->major >= 9;
  const char *cfg_name;
  int e;
  if (p->op == FP4_OP_QUANTIZE) {
    if (config && strcmp(config, "quantize") != 0)
      return fp4_fail(FP4_ERR_NOT_FOUND, "cuda: unknown quantize config '%s' (there is one, 'quantize')", config);
    cfg_name = "quantize";
    fp4_cuda_quantize_args a = {
        .x = p->a->data, .rows = p->a->rows, .cols = p->a->cols, .ld = p->a->ld ? p->a->ld : p->a->cols,
        .x_dtype = (int)p->a->dtype, .q = p->q_out->data, .scales = p->q_out->scales, .format = (int)p->q_out->format,
        .layout = (int)p->q_out->layout, .global_scale = p->global_scale,
        .global_scale_device = p->global_scale_device};
    e = fp4_cuda_quantize(&a, p->stream, pdl);
    if (e == cudaSuccess) p->q_out->multiplier = p->q_out->format == FP4_FORMAT_NVFP4 ? 1.0f / p->global_scale : 1.0f;
  } else if (p->op >= FP4_OP_GROUPED_MM) {
    return fp4_cuda_moe_run(ctx, p, config, pdl, info);
  } else {
    fp4_cuda_gemm_args a;
    char why[320];
    cuda_gemm_args_of(p, &a);
    a.sms = st->sms;
    const int small_ok = !cuda_small_m_rule(a.m, a.k, why, sizeof why);
    config = cuda_gemm_config(st, &a, config);
    if (!config) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: no large-M tile fits device %d", st->device);
    /* The workspace is taken before any launch: a call that cannot have it (graph capture) queues nothing. */
    char who[96];
    snprintf(who, sizeof who, "cuda %s", config);
    if ((s = fp4_context_workspace(ctx, cuda_gemm_workspace(&a, config), p->stream, who, &a.workspace))) return s;
    if (!strncmp(config, "large-m.wgra.", 13)) {
      const int ok = fp4_cuda_wgra_check(&a, st->device, config, why, sizeof why);
      if (ok != 1) return fp4_fail(ok < 0 ? FP4_ERR_NOT_FOUND : FP4_ERR_UNSUPPORTED, "cuda: %s", why);
      cfg_name = config;
      e = fp4_cuda_gemm_wgra(&a, config, p->stream, pdl);
    } else if (!strncmp(config, "large-m.wgmma.", 14)) {
      const int ok = fp4_cuda_wgmma_check(&a, st->device, config, why, sizeof why);
      if (ok != 1) return fp4_fail(ok < 0 ? FP4_ERR_NOT_FOUND : FP4_ERR_UNSUPPORTED, "cuda: %s", why);
      cfg_name = config;
      e = fp4_cuda_gemm_wgmma(&a, config, p->stream, pdl);
    } else if (!strncmp(config, "large-m.rd.", 11)) {
      const int ok = fp4_cuda_rd_check(&a, st->device, config, why, sizeof why);
      if (ok != 1) return fp4_fail(ok < 0 ? FP4_ERR_NOT_FOUND : FP4_ERR_UNSUPPORTED, "cuda: %s", why);
      cfg_name = config;
      e = fp4_cuda_gemm_large_m_rd(&a, config, p->stream, pdl);
    } else if (!strncmp(config, "large-m.", 8)) {
      const int ok = fp4_cuda_large_m_check(&a, st->device, config, why, sizeof why);
      if (ok != 1) return fp4_fail(ok < 0 ? FP4_ERR_NOT_FOUND : FP4_ERR_UNSUPPORTED, "cuda: %s", why);
      cfg_name = config;
      e = fp4_cuda_gemm_large_m(&a, config, p->stream, pdl);
    } else {
      const struct cuda_config *cfg = NULL;
      for (int i = 0; i < CUDA_CONFIGS; i++)
        if (!strcmp(config, cuda_config_table[i].name)) cfg = &cuda_config_table[i];
      if (!cfg) {
        char list[320] = "";
        for (int i = 0; i < CUDA_CONFIGS; i++)
          if (!cuda_config_table[i].dequant_a)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", cuda_config_table[i].name);
        return fp4_fail(FP4_ERR_NOT_FOUND,
                        "cuda: unknown GEMM config '%s' (%sthe same with small-m.pro.* for W4A4, or a large-m.* name "
                        "listed by the tuner)",
                        config, list);
      }
      if (!small_ok) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: config %s: %s", cfg->name, why);
      if (a.m > cfg->max_m)
        return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: config %s takes M <= %d (M = %lld); use a 16- or 32-row classic config",
                        cfg->name, cfg->max_m, (long long)a.m);
      if (cfg->dequant_a && a.act != FP4_CUDA_ACT_FP4)
        return fp4_fail(FP4_ERR_UNSUPPORTED,
                        "cuda: config %s is the W4A4 prologue variant (FP4 activations dequantized to bf16 once per GEMM); "
                        "this W4A16 problem takes the config of the same name without '.pro'",
                        cfg->name);
      if (cfg->min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT && !cfg->dequant_a && a.act != FP4_CUDA_ACT_BF16 &&
          a.act != FP4_CUDA_ACT_F16)
        return fp4_fail(FP4_ERR_UNSUPPORTED,
                        "cuda: config %s stages bf16/f16 activation rows in shared memory; %s activations take "
                        "another small-m config%s",
                        cfg->name, a.act == FP4_CUDA_ACT_F32 ? "f32" : "FP4",
                        a.act == FP4_CUDA_ACT_FP4 ? " (or small-m.pro.sa.r64.w8, which dequantizes them to bf16 first)" : "");
      cfg_name = cfg->name;
      a.warps = cfg->warps;
      a.rows = cfg->rows;
      a.min_blocks = cfg->min_blocks;
      a.dequant_a = cfg->dequant_a;
      e = fp4_cuda_gemm_small_m(&a, p->stream, pdl);
    }
  }
  if (e != cudaSuccess)
    return fp4_fail(FP4_ERR_CUDA, "cuda: launching %s on device %d failed: %s", cfg_name, st->device,
                    cudaGetErrorString((cudaError_t)e));
  if (info) {
    snprintf(info->backend, sizeof info->backend, "cuda");
    snprintf(info->config, sizeof info->config, "%s", cfg_name);
    info->pdl = pdl;
    if (p->enable_pdl && !pdl)
      snprintf(info->note, sizeof info->note, "PDL needs SM90+, device is SM%d%d", st->major, st->minor);
  }
  return FP4_OK;
}

/* Context workspace run() takes (fp4_context_workspace) for p with config (NULL: the default):
 * the grouped GEMMs' (moe_host.c), or the dense GEMM config's. */
static size_t cuda_workspace_size(fp4_context *ctx, const fp4_problem *p, const char *config) {
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_context_workspace(ctx, p, config);
  if (p->op == FP4_OP_QUANTIZE) return 0;
  const cuda_state *st = cuda_get_state(ctx, NULL, 0);
  if (!st) return 0;
  fp4_cuda_gemm_args a;
  cuda_gemm_args_of(p, &a);
  a.sms = st->sms;
  const char *name = cuda_gemm_config(st, &a, config);
  return name ? cuda_gemm_workspace(&a, name) : 0;
}

#else /* !FP4KIT_HAVE_CUDA */

static fp4_status cuda_available(fp4_context *ctx, char *reason, size_t reason_size) {
  (void)ctx;
  fp4_reason(reason, reason_size, "fp4kit was built without CUDA (no nvcc found, or FP4KIT_ENABLE_CUDA=OFF)");
  return FP4_ERR_UNSUPPORTED;
}

static fp4_status cuda_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  (void)p;
  return cuda_available(ctx, reason, reason_size);
}

static fp4_status cuda_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  (void)ctx;
  (void)p;
  (void)config;
  (void)info;
  return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: fp4kit was built without CUDA");
}

#define cuda_configs NULL
#define cuda_workspace_size NULL
#define cuda_release_state NULL

#endif

const fp4_backend fp4_backend_cuda = {
    .name = "cuda",
    .summary = "own CUDA kernels, SM80+: quantize, small-M and large-M W4A16/W4A4 GEMMs on tensor cores, grouped GEMM and MoE layer, PDL",
    .available = cuda_available,
    .supports = cuda_supports,
    .configs = cuda_configs,
    .run = cuda_run,
    .release_state = cuda_release_state,
    .honours_pdl = 1,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
    .moe_workspace_size = fp4_cuda_moe_workspace_size,
    .workspace_size = cuda_workspace_size,
    .device_scalars = 1,
    .probe = fp4_cuda_probe,
};
