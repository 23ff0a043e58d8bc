// Dequantization for the cublas-dequant backend: FP4 codes x block scales -> f32/bf16/f16, exactly
// the codec's values (e2m1 * e4m3 fits bf16 and f16 exactly; the per-tensor multiplier is left to
// the GEMM's alpha), and the f32 -> bf16/f16 conversion of an output computed in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cublas_dequant/dequant.h"
#include "core/error.h"
#include "format/codec.h"
#include "format/codec_device.cuh"

namespace {

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

/* The 16-bit pair (scale, scale) of one block: E4M3 and UE8M0 values are exact in bf16 (E4M3 also
 * in f16; MXFP4 never reaches the f16 path), NaN codes stay NaN. */
template <bool F16>
__device__ __forceinline__ uint32_t block_scale_pair(uint8_t byte, bool nvfp4) {
  if (nvfp4) return e4m3_pair<F16>(byte);
  return ue8m0_bf16_pair(byte);
}

/* Eight codes (element i in nibble i) times one scale pair -> four 16-bit pairs in element order,
 * exactly: the e2m1 values come out of byte-permute tables (decode8), and their product with an
 * E4M3 or UE8M0 scale has at most 6 significant bits, so the bf16/f16 multiply does not round
 * (an MXFP4 6 * 2^127 overflows to inf, as the f32 reference does). */
template <bool F16>
__device__ __forceinline__ void decode8_in_order(uint32_t q, uint32_t s2, uint32_t r[4]) {
  uint32_t p[4]; /* p[i] = (element i, element i + 4) */
  decode8<F16>(q, p);
  r[0] = hmul2<F16>(__byte_perm(p[0], p[1], 0x5410), s2); /* elements 0, 1 */
  r[1] = hmul2<F16>(__byte_perm(p[2], p[3], 0x5410), s2); /* 2, 3 */
  r[2] = hmul2<F16>(__byte_perm(p[0], p[1], 0x7632), s2); /* 4, 5 */
  r[3] = hmul2<F16>(__byte_perm(p[2], p[3], 0x7632), s2); /* 6, 7 */
}

template <typename T> struct out_traits { static constexpr bool kF16 = false, kF32 = false; };
template <> struct out_traits<__half> { static constexpr bool kF16 = true, kF32 = false; };
template <> struct out_traits<float> { static constexpr bool kF16 = false, kF32 = true; };

// A thread takes kUnitsPerThread units of 8 elements (4 code bytes, one 16-byte bf16/f16 store, so
// a warp's store instruction writes 512 contiguous bytes), spaced blockDim.x apart so a warp's
// loads stay contiguous too, and issues all their loads before decoding any. A CTA of 256 threads
// covers blockDim.x threads of a row times blockDim.y rows, so short rows still fill it. A
// memory-bound pass: 0.5 B read and 2 B (bf16/f16) or 4 B (f32) written per element, at a handful
// of integer instructions per pair of elements (f32 output widens the exact bf16 values).
// Validation keeps cols % 16 == 0, so rows start 32-byte aligned in `out` (a 256-byte aligned
// workspace) and, when the caller's `data` pointer is 4-byte aligned (ALIGNED), 4-byte aligned in
// `data`; otherwise the codes are read byte by byte.
constexpr int kUnitsPerThread = 8;

template <typename T, bool ALIGNED>
__global__ void __launch_bounds__(256) dequantize_kernel(const uint8_t *__restrict__ data, const uint8_t *__restrict__ scales,
                                                         int64_t rows, int64_t cols, int nvfp4, int layout,
                                                         T *__restrict__ out) {
  constexpr bool F16 = out_traits<T>::kF16;
  const int64_t units = cols / 8, C = cols / (nvfp4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  const int block_shift = nvfp4 ? 1 : 2; /* units per scale block: 2 (NVFP4) or 4 (MXFP4) */
  const int64_t span = (int64_t)blockDim.x * kUnitsPerThread; /* units of one CTA column step */
  /* In every layout a scale's offset is row_base(r) + (c / 4) * step + c % 4: 4-column groups lie
   * step bytes apart (4 linear, 512 in 128x4 tiles, 32 in 8x4 tiles). The row part is computed
   * once per row, the column part in 32-bit integers. */
  const int step = layout == FP4_LAYOUT_128X4 ? 512 : layout == FP4_LAYOUT_8X4 ? 32 : 4;
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += (int64_t)gridDim.y * blockDim.y) {
    const uint8_t *row = data + r * (cols / 2);
    const uint8_t *row_scales = scales + fp4_layout_offset(layout, C, r, 0);
    for (int64_t u0 = blockIdx.x * span + threadIdx.x; u0 < units; u0 += gridDim.x * span) {
      uint32_t q[kUnitsPerThread];
      uint8_t sb[kUnitsPerThread];
#pragma unroll
      for (int j = 0; j < kUnitsPerThread; j++) {
        const int64_t u = u0 + (int64_t)j * blockDim.x;
        q[j] = 0;
        sb[j] = 0;
        if (u >= units) continue; /* not break: q and sb stay in registers only when fully unrolled */
        const int c = (int)(u >> block_shift);
        sb[j] = row_scales[(c >> 2) * step + (c & 3)];
        if (ALIGNED) {
          q[j] = ((const uint32_t *)row)[u];
        } else {
#pragma unroll
          for (int i = 0; i < 4; i++) q[j] |= (uint32_t)row[u * 4 + i] << (8 * i);
        }
      }
#pragma unroll
      for (int j = 0; j < kUnitsPerThread; j++) {
        const int64_t u = u0 + (int64_t)j * blockDim.x;
        if (u >= units) continue;
        uint32_t v[4];
        decode8_in_order<F16>(q[j], block_scale_pair<F16>(sb[j], nvfp4), v);
        uint4 *dst = (uint4 *)(out + r * cols + u * 8);
        if (out_traits<T>::kF32) { /* bf16 -> f32 is a 16-bit shift */
          dst[0] = make_uint4(v[0] << 16, v[0] & 0xFFFF0000u, v[1] << 16, v[1] & 0xFFFF0000u);
          dst[1] = make_uint4(v[2] << 16, v[2] & 0xFFFF0000u, v[3] << 16, v[3] & 0xFFFF0000u);
        } else {
          dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
        }
      }
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
void launch_dequantize(bool aligned, dim3 grid, dim3 block, cudaStream_t s, const uint8_t *d, const uint8_t *sc,
                       const fp4_qmatrix *q, int nv, int lay, T *out) {
  if (aligned) dequantize_kernel<T, true><<<grid, block, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, out);
  else dequantize_kernel<T, false><<<grid, block, 0, s>>>(d, sc, q->rows, q->cols, nv, lay, out);
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
  /* Threads per row: the row's 8-element units over kUnitsPerThread, rounded up to a warp, at most
   * 256; the rest of the 256-thread CTA takes further rows. Both grid extents are capped; the
   * kernel loops. */
  const int64_t units = q->cols / 8, per_thread = (units + kUnitsPerThread - 1) / kUnitsPerThread;
  const int64_t tpr = per_thread >= 256 ? 256 : (per_thread + 31) / 32 * 32, rpb = 256 / tpr;
  const int64_t gx = (units + tpr * kUnitsPerThread - 1) / (tpr * kUnitsPerThread), gy = (q->rows + rpb - 1) / rpb;
  const dim3 block((unsigned)tpr, (unsigned)rpb);
  const dim3 grid((unsigned)(gx < 1 ? 1 : gx > 1024 ? 1024 : gx), (unsigned)(gy < 1 ? 1 : gy > 65535 ? 65535 : gy));
  cudaStream_t s = (cudaStream_t)stream;
  const uint8_t *d = (const uint8_t *)q->data, *sc = (const uint8_t *)q->scales;
  const int nv = q->format == FP4_FORMAT_NVFP4, lay = (int)q->layout;
  const bool aligned = ((uintptr_t)d & 3) == 0;
  switch (dtype) {
  case FP4_DTYPE_F32: launch_dequantize(aligned, grid, block, s, d, sc, q, nv, lay, (float *)out); break;
  case FP4_DTYPE_BF16: launch_dequantize(aligned, grid, block, s, d, sc, q, nv, lay, (__nv_bfloat16 *)out); break;
  case FP4_DTYPE_F16: launch_dequantize(aligned, grid, block, s, d, sc, q, nv, lay, (__half *)out); break;
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
