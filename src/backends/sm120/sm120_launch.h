/*
 * The C-callable entry points of the SM120 GEMM kernels (sm120_gemm.cu: native sm_120a/sm_121a
 * build; sm120_gemm_emulated.cu: the same kernel source for sm_90 with the MMA emulated).
 */
#ifndef FP4_BACKENDS_SM120_LAUNCH_H
#define FP4_BACKENDS_SM120_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What `fp4kit probe` should say about this backend: exactly what was and was not executed. */
#define FP4_SM120_STATUS "compiled for sm_120a; verified on SM90 under emulation; not executed on SM120 hardware"

/* Tile configurations, exposed to the tuner by name (sm120_backend.c). */
enum {
  FP4_SM120_CONFIG_M16N64 = 0,   /* decode: 16 x 64 tile, 4 warps of 16 x 16            */
  FP4_SM120_CONFIG_M64N128 = 1,  /* medium M: 64 x 128 tile, 8 warps of 32 x 32         */
  FP4_SM120_CONFIG_M128N128 = 2, /* large M: 128 x 128 tile, 8 warps of 64 x 32         */
  FP4_SM120_CONFIG_COUNT = 3
};

/* A validated W4A4 problem on device memory. */
typedef struct fp4_sm120_args {
  const void *a, *b;         /* [M, K/2] and [N, K/2] E2M1 codes                        */
  const void *sfa, *sfb;     /* block scales in layout_a / layout_b (fp4_scale_layout)  */
  void *out;                 /* [M, N] with leading dimension ldo, out_dtype            */
  int64_t m, n, k, ldo;
  int out_dtype;             /* fp4_dtype: F32, BF16 or F16                             */
  int format;                /* fp4_format: NVFP4 or MXFP4                              */
  int layout_a, layout_b;
  float alpha;               /* alpha * a.multiplier * b.multiplier                     */
  const float *alpha_device; /* NULL, or a device f32 multiplying alpha, read on the GPU   */
  int config;                /* FP4_SM120_CONFIG_*                                      */
  int pdl;                   /* launch with programmatic dependent launch               */
  void *stream;              /* cudaStream_t                                            */
  int device;
} fp4_sm120_args;

/* Shared memory bytes per block of a configuration (<= 99 KB, the SM120 limit). */
int fp4_sm120_config_smem(int config);

/* Launch; 0 on success, else the cudaError_t value with a message in err. */
int fp4_sm120_launch_native(const fp4_sm120_args *args, char *err, size_t err_size);
int fp4_sm120_launch_emulated(const fp4_sm120_args *args, char *err, size_t err_size);

/* Does the binary hold device code of this build for `device`? 0 when it does, with the
 * architecture of the image the runtime picked (e.g. 120, 90) in *binary_version; else the
 * cudaError_t value with a message. */
int fp4_sm120_image_native(int device, int *binary_version, char *err, size_t err_size);
int fp4_sm120_image_emulated(int device, int *binary_version, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
