/* The cublas-dequant backend's kernels (dequant.cu). */
#ifndef FP4_BACKENDS_CUBLAS_DEQUANT_DEQUANT_H
#define FP4_BACKENDS_CUBLAS_DEQUANT_DEQUANT_H

#include <stdint.h>

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* q (device) -> out (device) [rows, cols] of dtype (f32, bf16 or f16) without the multiplier; every
 * scale layout. out must be 256-byte aligned (a workspace offset). */
fp4_status fp4_cuda_dequantize(const fp4_qmatrix *q, void *out, fp4_dtype dtype, void *stream);
/* f32 [rows, cols] -> dst of dtype with leading dimension ld. */
fp4_status fp4_cuda_convert_f32(const float *src, int64_t rows, int64_t cols, void *dst, int64_t ld, fp4_dtype dtype,
                                void *stream);

#ifdef __cplusplus
}
#endif

#endif
