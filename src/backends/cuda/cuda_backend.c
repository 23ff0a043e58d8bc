/*
 * The cuda backend: fp4kit's own CUDA kernels (runtime-recipe quantize, small-M and large-M W4A16
 * and W4A4 GEMMs) on SM80 and newer. Plain C host code: it gathers what the device and the binary
 * can run once per context, asks the dense config table (config/dense_config.c) which config runs
 * and whether it takes the problem, and launches that config's family on the caller's stream, with or
 * without programmatic dependent launch.
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

/* Per-context facts about the device, gathered once. */
typedef struct cuda_state {
  int device;
  int major, minor;
  int sms;
  int image_status; /* cudaError_t of the kernel-image probe */
  char name[256];
  fp4_dense_arch arch; /* what the dense config rules and chooser need */
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
  st->arch.major = prop.major;
  st->arch.minor = prop.minor;
  st->arch.sms = prop.multiProcessorCount;
  st->arch.smem_optin = (int)prop.sharedMemPerBlockOptin;
  char why[200] = "";
  st->arch.sm90a = prop.major == 9 && prop.minor == 0 && fp4_cuda_wgra_image_ok(device, why, sizeof why);
  snprintf(st->arch.sm90a_why, sizeof st->arch.sm90a_why, "%s", why);
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

/* The kernel arguments of a GEMM problem (every dense family takes the same). */
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

/* The problem as the dense config rules see it. */
static fp4_dense_shape cuda_shape_of(const fp4_cuda_gemm_args *a) {
  fp4_dense_shape s = {a->m, a->n, a->k, a->act, a->format};
  return s;
}

static fp4_status cuda_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  char why[200];
  if (p->memory != FP4_MEMORY_DEVICE)
    return refuse(reason, reason_size, "the cuda backend runs on device memory; the operands are in host memory");
  if (p->op == FP4_OP_QUANTIZE) return FP4_OK; /* any validated shape, dtype and layout */
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_supports(p, reason, reason_size);
  fp4_cuda_gemm_args ga;
  cuda_gemm_args_of(p, &ga);
  const fp4_dense_shape shape = cuda_shape_of(&ga);
  if (fp4_dense_small_m_rule(&shape, why, sizeof why)) { /* then the large-M kernels must take it */
    const cuda_state *st = cuda_get_state(ctx, reason, reason_size);
    if (!st) return FP4_ERR_UNSUPPORTED;
    char lwhy[320];
    if (!fp4_dense_check(FP4_DENSE_LARGE_M_MMA, &shape, &st->arch, NULL, lwhy, sizeof lwhy)) {
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

static int cuda_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
  if (p->op == FP4_OP_QUANTIZE) {
    if (max > 0) names[0] = "quantize";
    return max > 0 ? 1 : 0;
  }
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_configs(ctx, p, names, max);
  fp4_cuda_gemm_args ga;
  cuda_gemm_args_of(p, &ga);
  const fp4_dense_shape shape = cuda_shape_of(&ga);
  const cuda_state *st = cuda_get_state(ctx, NULL, 0);
  return fp4_dense_candidates(&shape, st ? &st->arch : NULL, names, max);
}


/* The small-M family's launch: the config's rows, warps and kernel into the arguments. */
static int cuda_launch_small_m(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  fp4_cuda_gemm_args s = *a;
  s.warps = c->warps;
  s.rows = c->rows;
  s.min_blocks = c->min_blocks;
  s.dequant_a = c->prologue;
  s.ksplit = c->ksplit;
  return fp4_cuda_gemm_small_m(&s, stream, pdl);
}

/* The dense families by config-name prefix (fp4_dense_family_of): each config's rules, candidates
 * and workspace are in config/dense_config.c, its launch here. */
static int (*const cuda_family_launch[FP4_DENSE_FAMILIES])(const fp4_cuda_gemm_args *, const fp4_dense_config *, void *,
                                                           int) = {
    [FP4_DENSE_SMALL_M] = cuda_launch_small_m,
    [FP4_DENSE_LARGE_M_MMA] = fp4_cuda_gemm_large_m,
    [FP4_DENSE_LARGE_M_RD] = fp4_cuda_gemm_large_m_rd,
    [FP4_DENSE_LARGE_M_WGRA] = fp4_cuda_gemm_wgra,
};

/* The dense config p runs on st's device (config, or the default) after its family's check: FP4_OK
 * with *out, or the status and message of the rule it breaks. */
static fp4_status cuda_dense_config(const cuda_state *st, const fp4_cuda_gemm_args *a, const char *config,
                                    const fp4_dense_config **out) {
  const fp4_dense_shape shape = cuda_shape_of(a);
  const char *name = config ? config : fp4_dense_default(&shape, &st->arch);
  if (!name) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: no large-M tile fits device %d", st->device);
  const int family = fp4_dense_family_of(name);
  char why[400];
  const int ok = fp4_dense_check(family, &shape, &st->arch, name, why, sizeof why);
  if (ok != 1) return fp4_fail(ok < 0 ? FP4_ERR_NOT_FOUND : FP4_ERR_UNSUPPORTED, "cuda: %s", why);
  *out = fp4_dense_config_find(name);
  return FP4_OK;
}

/* A config cuda_run would take for p: "quantize" for quantize, a grouped/MoE config (moe_host.c), else
 * a dense config whose rules p meets on ctx's device. */
static fp4_status cuda_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                    size_t reason_size) {
  if (p->op == FP4_OP_QUANTIZE) {
    if (!strcmp(config, "quantize")) return FP4_OK;
    fp4_reason(reason, reason_size, "unknown quantize config '%s' (the cuda backend has one, 'quantize')", config);
    return FP4_ERR_NOT_FOUND;
  }
  if (p->op >= FP4_OP_GROUPED_MM) return fp4_cuda_moe_check_config(ctx, p, config, reason, reason_size);
  const cuda_state *st = cuda_get_state(ctx, reason, reason_size);
  if (!st) return FP4_ERR_UNSUPPORTED;
  fp4_cuda_gemm_args a;
  const fp4_dense_config *c = NULL;
  cuda_gemm_args_of(p, &a);
  a.sms = st->sms;
  const fp4_status s = cuda_dense_config(st, &a, config, &c);
  if (s) fp4_reason(reason, reason_size, "%s", fp4_last_error()); /* the rule it breaks */
  return s;
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
    const fp4_dense_config *c = NULL;
    cuda_gemm_args_of(p, &a);
    a.sms = st->sms;
    if ((s = cuda_dense_config(st, &a, config, &c))) return s;
    cfg_name = c->name;
    /* The workspace is taken before any launch: a call that cannot have it (graph capture) queues nothing. */
    const fp4_dense_shape shape = cuda_shape_of(&a);
    char who[96];
    snprintf(who, sizeof who, "cuda %s", c->name);
    if ((s = fp4_context_workspace(ctx, fp4_dense_workspace(&shape, &st->arch, c), p->stream, who, &a.workspace)))
      return s;
    e = cuda_family_launch[c->family](&a, c, p->stream, pdl);
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

/* The dense chooser's default config for the GEMM a on ctx's device, and the context workspace it
 * takes: for the MoE layer's shared expert on its own (moe_host.c). 0, or -1 with the rule a breaks
 * in why. Sets a->sms. */
int fp4_cuda_dense_default(fp4_context *ctx, fp4_cuda_gemm_args *a, const fp4_dense_config **config,
                           size_t *workspace, char *why, size_t why_size) {
  const cuda_state *st = cuda_get_state(ctx, why, why_size);
  if (!st) return -1;
  a->sms = st->sms;
  if (cuda_dense_config(st, a, NULL, config)) { /* the rule it breaks is the last error's message */
    fp4_reason(why, why_size, "%s", fp4_last_error());
    return -1;
  }
  const fp4_dense_shape shape = cuda_shape_of(a);
  *workspace = fp4_dense_workspace(&shape, &st->arch, *config);
  return 0;
}

int fp4_cuda_dense_launch(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  return cuda_family_launch[c->family](a, c, stream, pdl);
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
  const fp4_dense_shape shape = cuda_shape_of(&a);
  const char *name = config ? config : fp4_dense_default(&shape, &st->arch);
  return name ? fp4_dense_workspace(&shape, &st->arch, fp4_dense_config_find(name)) : 0;
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
#define cuda_check_config NULL
#define cuda_workspace_size NULL
#define cuda_release_state NULL

#endif

/* Own kernels first at small M everywhere (decode reads 4-bit weights); at large M behind
 * cublas-dequant on SM80-SM90 and behind the vendors' native FP4 on SM100+. */
static const fp4_backend_ranks cuda_ranks =
    /* quantize, SM80-SM90 M small, large; SM100/103 small, large; SM120/121 small, large */
    FP4_DEVICE_RANKS(0, 0, 1, 0, 2, 0, 2);

const fp4_backend fp4_backend_cuda = {
    .name = "cuda",
    .summary = "own CUDA kernels, SM80+: quantize, small-M and large-M W4A16/W4A4 GEMMs on tensor cores, grouped GEMM and MoE layer, PDL",
    .available = cuda_available,
    .supports = cuda_supports,
    .configs = cuda_configs,
    .check_config = cuda_check_config,
    .run = cuda_run,
    .release_state = cuda_release_state,
    .honours_pdl = 1,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
    .moe_workspace_size = fp4_cuda_moe_workspace_size,
    .workspace_size = cuda_workspace_size,
    .device_scalars = 1,
    .probe = fp4_cuda_probe,
    .ranks = &cuda_ranks,
};
