/* The row moves around an expert-parallel all-to-all: gather rows into the send buffer, and sum
 * each token's returned rows (fp4_exchange_gather_bf16_queue, fp4_exchange_sum_bf16_queue). One
 * block per output row; a thread moves 16-byte vectors (8 bf16) where the rows allow, else single
 * elements. These are memory moves of a few MB per layer: nothing here is tuned. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench/exchange_kernels.h"

namespace {

constexpr int kThreads = 128;

template <bool kVec>
__global__ void gather_kernel(__nv_bfloat16 *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, int64_t ld,
                              const int32_t *__restrict__ rows, int64_t width) {
  const int64_t i = blockIdx.x;
  const __nv_bfloat16 *from = src + (int64_t)rows[i] * ld;
  __nv_bfloat16 *to = dst + i * width;
  if (kVec) {
    for (int64_t c = threadIdx.x; c < width / 8; c += blockDim.x)
      reinterpret_cast<uint4 *>(to)[c] = reinterpret_cast<const uint4 *>(from)[c];
  } else {
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) to[c] = from[c];
  }
}

template <bool kVec>
__global__ void sum_kernel(__nv_bfloat16 *__restrict__ out, const __nv_bfloat16 *__restrict__ base,
                           const __nv_bfloat16 *__restrict__ src, const int32_t *__restrict__ index, int64_t k,
                           int64_t width) {
  const int64_t t = blockIdx.x;
  const int32_t *idx = index + t * k;
  if (kVec) {
    for (int64_t c = threadIdx.x; c < width / 8; c += blockDim.x) {
      float acc[8];
      if (base) {
        const uint4 v = reinterpret_cast<const uint4 *>(base + t * width)[c];
        const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v);
#pragma unroll
        for (int u = 0; u < 8; u++) acc[u] = __bfloat162float(e[u]);
      } else {
#pragma unroll
        for (int u = 0; u < 8; u++) acc[u] = 0.0f;
      }
      for (int64_t j = 0; j < k; j++) {
        const uint4 v = reinterpret_cast<const uint4 *>(src + (int64_t)idx[j] * width)[c];
        const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&v);
#pragma unroll
        for (int u = 0; u < 8; u++) acc[u] += __bfloat162float(e[u]);
      }
      uint4 r;
      __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(&r);
#pragma unroll
      for (int u = 0; u < 8; u++) o[u] = __float2bfloat16_rn(acc[u]);
      reinterpret_cast<uint4 *>(out + t * width)[c] = r;
    }
  } else {
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float acc = base ? __bfloat162float(base[t * width + c]) : 0.0f;
      for (int64_t j = 0; j < k; j++) acc += __bfloat162float(src[(int64_t)idx[j] * width + c]);
      out[t * width + c] = __float2bfloat16_rn(acc);
    }
  }
}

}  // namespace

extern "C" int fp4_exchange_launch_gather(void *dst, const void *src, int64_t ld, const int32_t *rows, int64_t n,
                                          int64_t width, int vec, void *stream) {
  auto *d = static_cast<__nv_bfloat16 *>(dst);
  auto *s = static_cast<const __nv_bfloat16 *>(src);
  if (vec) gather_kernel<true><<<(unsigned)n, kThreads, 0, (cudaStream_t)stream>>>(d, s, ld, rows, width);
  else gather_kernel<false><<<(unsigned)n, kThreads, 0, (cudaStream_t)stream>>>(d, s, ld, rows, width);
  return (int)cudaGetLastError();
}

extern "C" int fp4_exchange_launch_sum(void *out, const void *base, const void *src, const int32_t *index, int64_t tokens,
                                       int64_t k, int64_t width, int vec, void *stream) {
  auto *o = static_cast<__nv_bfloat16 *>(out);
  auto *b = static_cast<const __nv_bfloat16 *>(base);
  auto *s = static_cast<const __nv_bfloat16 *>(src);
  if (vec) sum_kernel<true><<<(unsigned)tokens, kThreads, 0, (cudaStream_t)stream>>>(o, b, s, index, k, width);
  else sum_kernel<false><<<(unsigned)tokens, kThreads, 0, (cudaStream_t)stream>>>(o, b, s, index, k, width);
  return (int)cudaGetLastError();
}
