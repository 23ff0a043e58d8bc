/*
 * The cuda-sm120 backend: W4A4 GEMM on the SM120 block-scaled warp MMA (sm120_gemm.cuh).
 *
 * Where it runs:
 *   - SM120 / SM121 with device code for it in the binary (sm_120a in the default build; GB10 needs
 *     121a-real or 120f-real in CMAKE_CUDA_ARCHITECTURES): the real instruction;
 *   - SM90 (H100/H200): the same kernel with the instruction emulated, only to verify everything
 *     around the instruction on hardware we have. Never picked by auto selection;
 *   - anywhere else: unavailable, with the reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/sm120/sm120_launch.h"
#include "backends/sm120/sm120_probe.h"
#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static const char *const config_names[FP4_SM120_CONFIG_COUNT] = {"m16n64", "m64n128", "m128n128"};
/* Grid rows run over N tiles: gridDim.y <= 65535 tiles of at least 64 columns. */
static const int64_t max_n = 65535LL * 64;

typedef enum sm120_path { SM120_NONE = 0, SM120_NATIVE = 1, SM120_EMULATED = 2 } sm120_path;

/* Which build of the kernel can run on ctx's device; the reason (or, when one can, the note that
 * says what it is) goes to reason. */
static sm120_path sm120_probe(fp4_context *ctx, char *reason, size_t reason_size) {
#if !FP4KIT_HAVE_CUDA
  (void)ctx;
  fp4_reason(reason, reason_size, "this fp4kit was built without CUDA; the SM120 kernel needs an nvcc build with sm_120a");
  return SM120_NONE;
#else
  const int dev = fp4_context_device(ctx);
  if (dev < 0) {
    fp4_reason(reason, reason_size, "needs a CUDA device context (SM120/SM121; SM90 runs an emulated verification build)");
    return SM120_NONE;
  }
  int major = 0, minor = 0, version = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fp4_reason(reason, reason_size, "cannot query CUDA device %d: %s", dev, cudaGetErrorString(e));
    return SM120_NONE;
  }
  char err[128] = "";
  if (major == 12) {
    if (fp4_sm120_image_native(dev, &version, err, sizeof err) != 0 || version / 10 != 12) {
      fp4_reason(reason, reason_size,
                 "device %d is SM%d%d but this build has no device code for it (%s); rebuild with "
                 "CMAKE_CUDA_ARCHITECTURES including %d%da-real",
                 dev, major, minor, err[0] ? err : "image for another architecture", major, minor);
      return SM120_NONE;
    }
    fp4_reason(reason, reason_size, "%s; run `fp4kit probe --check` to verify it on this card", FP4_SM120_STATUS);
    return SM120_NATIVE;
  }
  if (major == 9 && minor == 0) {
    if (fp4_sm120_image_emulated(dev, &version, err, sizeof err) != 0 || version != 90) {
      fp4_reason(reason, reason_size, "device %d is SM90 but this build has no sm_90 code of the emulated SM120 kernel (%s)",
                 dev, err[0] ? err : "image for another architecture");
      return SM120_NONE;
    }
    fp4_reason(reason, reason_size,
               "emulated on SM90 for verification: the SM120 MMA is computed on CUDA cores (exact, not fast)");
    return SM120_EMULATED;
  }
  fp4_reason(reason, reason_size,
             "needs SM120/SM121 (RTX PRO 6000, RTX 50xx, GB10); device %d is SM%d%d (only SM90 runs it, as an "
             "emulated verification build)",
             dev, major, minor);
  return SM120_NONE;
#endif
}

/* The probe's answer for a context, kept in its state slot: the probe asks the device and the
 * binary (cudaFuncGetAttributes), which a call on the hot path must not repeat. */
typedef struct sm120_state {
  sm120_path path;
  char note[200];
} sm120_state;

static void sm120_release_state(void *state) { free(state); }

static sm120_path sm120_probe_cached(fp4_context *ctx, char *reason, size_t reason_size) {
  void **slot = fp4_context_device(ctx) >= 0 ? fp4_context_state(ctx, "cuda-sm120") : NULL;
  if (slot && *slot) {
    const sm120_state *st = *slot;
    fp4_reason(reason, reason_size, "%s", st->note);
    return st->path;
  }
  sm120_state *st = slot ? calloc(1, sizeof *st) : NULL;
  if (!st) return sm120_probe(ctx, reason, reason_size);
  st->path = sm120_probe(ctx, st->note, sizeof st->note);
  fp4_reason(reason, reason_size, "%s", st->note);
  *slot = st;
  return st->path;
}

static fp4_status sm120_available(fp4_context *ctx, char *reason, size_t reason_size) {
  return sm120_probe_cached(ctx, reason, reason_size) == SM120_NONE ? FP4_ERR_UNSUPPORTED : FP4_OK;
}

static fp4_status sm120_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  (void)ctx;
  if (p->op != FP4_OP_MM) {
    fp4_reason(reason, reason_size, "cuda-sm120 runs the W4A4 GEMM (fp4_mm) only");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->memory != FP4_MEMORY_DEVICE) {
    fp4_reason(reason, reason_size, "cuda-sm120 needs operands in device memory");
    return FP4_ERR_UNSUPPORTED;
  }
  const int64_t m = fp4_problem_m(p), n = fp4_problem_n(p), k = fp4_problem_k(p);
  if (m > 0x7FFFFFFF || k > 0x3FFFFFFF || n > max_n) {
    fp4_reason(reason, reason_size, "cuda-sm120 handles M < 2^31, N <= %lld and K < 2^30 (got %lld x %lld x %lld)",
               (long long)max_n, (long long)m, (long long)n, (long long)k);
    return FP4_ERR_UNSUPPORTED;
  }
  fp4_dtype t = p->out->dtype;
  if (t != FP4_DTYPE_F32 && t != FP4_DTYPE_BF16 && t != FP4_DTYPE_F16) {
    fp4_reason(reason, reason_size, "cuda-sm120 writes f32, bf16 or f16 outputs, not %s", fp4_dtype_name(t));
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

/* The heuristic order: the decode tile for M <= 16, the medium one up to 64, the large one above. */
static int sm120_order(int64_t m, int order[FP4_SM120_CONFIG_COUNT]) {
  if (m <= 16) {
    order[0] = FP4_SM120_CONFIG_M16N64, order[1] = FP4_SM120_CONFIG_M64N128, order[2] = FP4_SM120_CONFIG_M128N128;
  } else if (m <= 64) {
    order[0] = FP4_SM120_CONFIG_M64N128, order[1] = FP4_SM120_CONFIG_M16N64, order[2] = FP4_SM120_CONFIG_M128N128;
  } else {
    order[0] = FP4_SM120_CONFIG_M128N128, order[1] = FP4_SM120_CONFIG_M64N128, order[2] = FP4_SM120_CONFIG_M16N64;
  }
  return FP4_SM120_CONFIG_COUNT;
}

static int sm120_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
  (void)ctx;
  int order[FP4_SM120_CONFIG_COUNT];
  int n = sm120_order(fp4_problem_m(p), order), written = 0;
  for (int i = 0; i < n && written < max; i++) names[written++] = config_names[order[i]];
  return written;
}

/* The config a name selects for p: its index, or -1 for a name that is none. */
static int sm120_config_index(const fp4_problem *p, const char *config) {
  if (!config || !strcmp(config, "default")) {
    int order[FP4_SM120_CONFIG_COUNT];
    sm120_order(fp4_problem_m(p), order);
    return order[0];
  }
  for (int i = 0; i < FP4_SM120_CONFIG_COUNT; i++)
    if (!strcmp(config, config_names[i])) return i;
  return -1;
}

static fp4_status sm120_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                     size_t reason_size) {
  (void)ctx;
  if (sm120_config_index(p, config) >= 0) return FP4_OK;
  fp4_reason(reason, reason_size, "unknown config '%s' (cuda-sm120's configs: default, %s, %s, %s)", config,
             config_names[0], config_names[1], config_names[2]);
  return FP4_ERR_NOT_FOUND;
}

static fp4_status sm120_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  const int cfg = sm120_config_index(p, config);
  if (cfg < 0) {
    char why[160];
    return fp4_fail(sm120_check_config(ctx, p, config, why, sizeof why), "cuda-sm120: %s", why);
  }
  char note[160];
  sm120_path path = sm120_probe_cached(ctx, note, sizeof note);
  if (path == SM120_NONE) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda-sm120: %s", note);
  if (info) {
    snprintf(info->backend, sizeof info->backend, "cuda-sm120");
    snprintf(info->config, sizeof info->config, "%s", config_names[cfg]);
    info->pdl = p->enable_pdl ? 1 : 0; /* SM90 and SM120 both honour griddepcontrol */
    snprintf(info->note, sizeof info->note, "%s", note);
  }
#if FP4KIT_HAVE_CUDA
  const fp4_qmatrix *a = p->a_q, *b = p->b;
  fp4_sm120_args args = {
      .a = a->data, .b = b->data, .sfa = a->scales, .sfb = b->scales, .out = p->out->data,
      .m = a->rows, .n = b->rows, .k = a->cols, .ldo = p->out->ld ? p->out->ld : p->out->cols,
      .out_dtype = (int)p->out->dtype, .format = (int)a->format, .layout_a = (int)a->layout,
      .layout_b = (int)b->layout, .alpha = p->alpha * a->multiplier * b->multiplier,
      .alpha_device = p->alpha_device, .config = cfg,
      .pdl = p->enable_pdl ? 1 : 0, .stream = p->stream, .device = fp4_context_device(ctx)};
  if (fp4_problem_m(p) == 0 || fp4_problem_n(p) == 0) return FP4_OK;
  char err[160] = "";
  int e = path == SM120_NATIVE ? fp4_sm120_launch_native(&args, err, sizeof err)
                               : fp4_sm120_launch_emulated(&args, err, sizeof err);
  if (e)
    return fp4_fail(FP4_ERR_CUDA, "cuda-sm120: launching the %s%s kernel for %lld x %lld x %lld: %s", config_names[cfg],
                    path == SM120_EMULATED ? " (emulated)" : "", (long long)args.m, (long long)args.n,
                    (long long)args.k, err);
  return FP4_OK;
#else
  return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda-sm120: this fp4kit was built without CUDA");
#endif
}

/* The native W4A4 path on SM120/121, first there; elsewhere it runs only as the SM90 verification
 * build (an exact emulation, slow by design), which auto must never prefer. */
static const fp4_backend_ranks sm120_ranks = {
    .in = {[FP4_REGIME_HOST] = FP4_RANK_UNKNOWN,
           [FP4_REGIME_QUANTIZE] = FP4_RANK_VERIFICATION_ONLY,
           [FP4_REGIME_SM80_SMALL_M] = FP4_RANK_VERIFICATION_ONLY,
           [FP4_REGIME_SM80_LARGE_M] = FP4_RANK_VERIFICATION_ONLY,
           [FP4_REGIME_SM100_SMALL_M] = FP4_RANK_VERIFICATION_ONLY,
           [FP4_REGIME_SM100_LARGE_M] = FP4_RANK_VERIFICATION_ONLY,
           [FP4_REGIME_SM120_SMALL_M] = -1,
           [FP4_REGIME_SM120_LARGE_M] = -1},
    .device_ops = FP4_OP_BIT(FP4_OP_MM),
    .other_device_ops = FP4_RANK_VERIFICATION_ONLY,
};

const fp4_backend fp4_backend_cuda_sm120 = {
    .name = "cuda-sm120",
    .summary = "SM120/SM121 block-scaled FP4 MMA GEMM (W4A4): " FP4_SM120_STATUS,
    .available = sm120_available,
    .supports = sm120_supports,
    .configs = sm120_configs,
    .check_config = sm120_check_config,
    .run = sm120_run,
    .release_state = sm120_release_state,
    .honours_pdl = 1,
    .device_scalars = 1,
    .probe = fp4_sm120_probe,
    .ranks = &sm120_ranks,
};
