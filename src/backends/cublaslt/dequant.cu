// Dequantization for the cublas-dequant backend: FP4 codes x block scales -> f32/bf16/f16, exactly
// the codec's values (e2m1 * e4m3 fits bf16 and f16 exactly; the per-tensor multiplier is left to
// the GEMM's alpha), and the f32 -> bf16/f16 conversion of an output computed in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cublaslt/lt_common.h"
#include "core/error.h"
#include "format/codec.h"

namespace {

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// One thread per 16 elements (8 code bytes, one NVFP4 block or half an MXFP4 one: one scale read),
// written as 16-byte stores; rows walk blockIdx.y, so there is no 64-bit division per element. A
// memory-bound pass: 0.5 B read + 2 B (bf16/f16) or 4 B (f32) written per element. Validation keeps
// cols % 16 == 0, so rows start 32-byte aligned in `out` (a 256-byte aligned workspace) and, when
// the caller's `data` pointer is 8-byte aligned (ALIGNED), 8-byte aligned in `data`; otherwise the
// codes are read byte by byte.
template <typename T, bool ALIGNED>
__global__ void dequantize_kernel(const uint8_t *__restrict__ data, const uint8_t *__restrict__ scales, int64_t rows,
                                  int64_t cols, int nvfp4, int layout, T *__restrict__ out) {
  const int64_t groups = cols / 16, C = cols / (nvfp4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint8_t *row = data + r * (cols / 2);
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
      const uint8_t sb = scales[fp4_layout_offset(layout, C, r, nvfp4 ? g : g / 2)];
      const float s = nvfp4 ? fp4_e4m3_decode_inline(sb) : fp4_ue8m0_decode_inline(sb);
      uint2 q;
      if (ALIGNED) {
        q = ((const uint2 *)row)[g];
      } else {
        uint32_t w[2] = {0, 0};
#pragma unroll
        for (int i = 0; i < 8; i++) w[i / 4] |= (uint32_t)row[g * 8 + i] << (8 * (i % 4));
        q = make_uint2(w[0], w[1]);
      }
      alignas(16) T v[16];
#pragma unroll
      for (int i = 0; i < 8; i++) {
        v[i] = from_f32<T>(fp4_e2m1_decode_inline((q.x >> (4 * i)) & 15) * s);
        v[8 + i] = from_f32<T>(fp4_e2m1_decode_inline((q.y >> (4 * i)) & 15) * s);
      }
      uint4 *dst = (uint4 *)(out + r * cols + g * 16);
#pragma unroll
      for (int i = 0; i < (int)(16 * sizeof(T) / 16); i++) dst[i] = ((const uint4 *)v)[i];
    }
  }
}

template <typename T>
__global__ void convert_kernel(const float *__restrict__ src, int64_t rows, int64_t cols, T *__restrict__ dst, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    dst[(i / cols) * ld + i % cols] = from_f32<T>(src[i]);
}

template <typename T>
void launch_dequantize(bool aligned, dim3 grid, cudaStream_t s, const uint8_t *d, const uint8_t *sc, const fp4_qmatrix *q,
                       int nv, int lay, T *out) {
  if (aligned) dequantize_kernel<T, true><<<grid, 256, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, out);
  else dequantize_kernel<T, false><<<grid, 256, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, out);
}

unsigned grid_for(int64_t work) {
  int64_t g = (work + 255) / 256;
  return (unsigned)(g < 1 ? 1 : g > 65535 * 8 ? 65535 * 8 : g);
}

fp4_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "cublas-dequant: %s launch: %s", what, cudaGetErrorString(e));
  return FP4_OK;
}

}  // namespace

extern "C" fp4_status fp4_cuda_dequantize(const fp4_qmatrix *q, void *out, fp4_dtype dtype, void *stream) {
  const int64_t groups = q->cols / 16;
  const int64_t gx = (groups + 255) / 256;
  const dim3 grid((unsigned)(gx < 1 ? 1 : gx > 1024 ? 1024 : gx), (unsigned)(q->rows < 1 ? 1 : q->rows > 65535 ? 65535 : q->rows));
  cudaStream_t s = (cudaStream_t)stream;
  const uint8_t *d = (const uint8_t *)q->data, *sc = (const uint8_t *)q->scales;
  const int nv = q->format == FP4_FORMAT_NVFP4, lay = (int)q->layout;
  const bool aligned = ((uintptr_t)d & 7) == 0;
  switch (dtype) {
  case FP4_DTYPE_F32: launch_dequantize(aligned, grid, s, d, sc, q, nv, lay, (float *)out); break;
  case FP4_DTYPE_BF16: launch_dequantize(aligned, grid, s, d, sc, q, nv, lay, (__nv_bfloat16 *)out); break;
  case FP4_DTYPE_F16: launch_dequantize(aligned, grid, s, d, sc, q, nv, lay, (__half *)out); break;
  default: return fp4_fail(FP4_ERR_INTERNAL, "cublas-dequant: dequantize to %s", fp4_dtype_name(dtype));
  }
  return launched("dequantize");
}

extern "C" fp4_status fp4_cuda_convert_f32(const float *src, int64_t rows, int64_t cols, void *dst, int64_t ld,
                                           fp4_dtype dtype, void *stream) {
  const unsigned grid = grid_for(rows * cols);
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
  case FP4_DTYPE_BF16: convert_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(src, rows, cols, (__nv_bfloat16 *)dst, ld); break;
  case FP4_DTYPE_F16: convert_kernel<__half><<<grid, 256, 0, s>>>(src, rows, cols, (__half *)dst, ld); break;
  case FP4_DTYPE_F32: convert_kernel<float><<<grid, 256, 0, s>>>(src, rows, cols, (float *)dst, ld); break;
  default: return fp4_fail(FP4_ERR_INTERNAL, "cublas-dequant: convert to %s", fp4_dtype_name(dtype));
  }
  return launched("convert");
}
