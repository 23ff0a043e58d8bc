// Dequantization for the cublas-dequant backend: FP4 codes x block scales -> f32/bf16/f16, exactly
// the codec's values (e2m1 * e4m3 fits bf16 and f16 exactly; the per-tensor multiplier is left to
// the GEMM's alpha), and the f32 -> bf16/f16 conversion of an output computed in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backends/cublaslt/lt_common.h"
#include "core/error.h"
#include "format/codec.h"

namespace {

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// One thread per byte (two elements); grid-stride so any size fits one launch.
template <typename T>
__global__ void dequantize_kernel(const uint8_t *__restrict__ data, const uint8_t *__restrict__ scales, int64_t rows,
                                  int64_t cols, int nvfp4, int layout, T *__restrict__ out) {
  const int64_t bytes_per_row = cols / 2, total = rows * bytes_per_row;
  const int block = nvfp4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  const int64_t C = cols / block;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / bytes_per_row, col = (i % bytes_per_row) * 2;
    const uint8_t sb = scales[fp4_layout_offset(layout, C, r, col / block)];
    const float s = nvfp4 ? fp4_e4m3_decode_inline(sb) : fp4_ue8m0_decode_inline(sb);
    const uint8_t q = data[i];
    out[r * cols + col] = from_f32<T>(fp4_e2m1_decode_inline(q & 15) * s);
    out[r * cols + col + 1] = from_f32<T>(fp4_e2m1_decode_inline(q >> 4) * s);
  }
}

template <typename T>
__global__ void convert_kernel(const float *__restrict__ src, int64_t rows, int64_t cols, T *__restrict__ dst, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    dst[(i / cols) * ld + i % cols] = from_f32<T>(src[i]);
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
  const int64_t work = q->rows * (q->cols / 2);
  const unsigned grid = grid_for(work);
  cudaStream_t s = (cudaStream_t)stream;
  const uint8_t *d = (const uint8_t *)q->data, *sc = (const uint8_t *)q->scales;
  const int nv = q->format == FP4_FORMAT_NVFP4, lay = (int)q->layout;
  switch (dtype) {
  case FP4_DTYPE_F32: dequantize_kernel<float><<<grid, 256, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, (float *)out); break;
  case FP4_DTYPE_BF16:
    dequantize_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, (__nv_bfloat16 *)out);
    break;
  case FP4_DTYPE_F16: dequantize_kernel<__half><<<grid, 256, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, (__half *)out); break;
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
