/* Kernels of the device peers: a copy and a read-only reduction that show what the memory system
 * delivers to a plain streaming kernel, and fills for the cuBLAS peers' operands. */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "bench/peers.h"
#include "fp4kit_bench.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

/* Enough resident blocks to keep every SM's load queues full; grid-stride beyond that. */
int stream_blocks(size_t vectors) {
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  size_t want = (vectors + (size_t)kThreads * kUnroll - 1) / ((size_t)kThreads * kUnroll);
  size_t cap = (size_t)sms * 4;
  return (int)(want < cap ? (want > 0 ? want : 1) : cap);
}

__global__ void copy_kernel(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t vectors,
                            unsigned char *__restrict__ dst_tail, const unsigned char *__restrict__ src_tail,
                            size_t tail) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  /* Unrolled: several independent 16-byte loads in flight per thread before the stores. */
  for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) dst[i + u * stride] = v[u];
  }
  for (; i < vectors; i += stride) dst[i] = src[i];
  if (blockIdx.x == 0)
    for (size_t t = threadIdx.x; t < tail; t += blockDim.x) dst_tail[t] = src_tail[t];
}

/* This thread's share of a grid-stride read of vectors 16-byte words at src, folded into acc. */
__device__ __forceinline__ void read_span(const uint4 *__restrict__ src, size_t vectors, unsigned long long &acc) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) acc += (unsigned long long)(v[u].x ^ v[u].y) + (v[u].z ^ v[u].w);
  }
  for (; i < vectors; i += stride) acc += (unsigned long long)(src[i].x ^ src[i].y) + (src[i].z ^ src[i].w);
}

/* One store per block: the sum must be observable or the loads could be dropped. */
__device__ __forceinline__ void store_block_sum(unsigned long long acc, unsigned long long *__restrict__ sink) {
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  __shared__ unsigned long long warp_sums[kThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long s = 0;
    for (int w = 0; w < kThreads / 32; w++) s += warp_sums[w];
    sink[blockIdx.x % FP4_PEER_READ_SINK_WORDS] = s;
  }
}

__global__ void read_kernel(const uint4 *__restrict__ src, size_t vectors, const unsigned char *__restrict__ tail_src,
                            size_t tail, unsigned long long *__restrict__ sink) {
  unsigned long long acc = 0;
  read_span(src, vectors, acc);
  if (blockIdx.x == 0)
    for (size_t t = threadIdx.x; t < tail; t += blockDim.x) acc += tail_src[t];
  store_block_sum(acc, sink);
}

/* The read kernel's loop over several ranges, one after the other with the whole grid (the ranges
 * of a MoE layer are megabytes each, so every range spreads over all blocks). */
struct read_ranges {
  const uint4 *src[FP4_PEER_READ_MAX_RANGES];
  size_t vectors[FP4_PEER_READ_MAX_RANGES];
  int n;
};

__global__ void read_ranges_kernel(const __grid_constant__ read_ranges r, unsigned long long *__restrict__ sink) {
  unsigned long long acc = 0;
  for (int k = 0; k < r.n; k++) read_span(r.src[k], r.vectors[k], acc);
  store_block_sum(acc, sink);
}

__device__ float hashed_value(uint64_t seed, size_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
  float mag = 0.0625f + 0.9375f * u;                  /* never zero */
  return (z & 1) ? -mag : mag;
}

__global__ void fill_bf16_kernel(__nv_bfloat16 *dst, size_t n, uint64_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(hashed_value(seed, i));
}

__global__ void fill_e4m3_kernel(__nv_fp8_storage_t *dst, size_t n, uint64_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = __nv_cvt_float_to_fp8(hashed_value(seed, i), __NV_SATFINITE, __NV_E4M3);
}

int fill_blocks(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (int)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

extern "C" int fp4_peer_launch_copy(void *dst, const void *src, size_t bytes, void *stream) {
  size_t vectors = bytes / sizeof(uint4), tail = bytes % sizeof(uint4);
  copy_kernel<<<stream_blocks(vectors), kThreads, 0, (cudaStream_t)stream>>>(
      (uint4 *)dst, (const uint4 *)src, vectors, (unsigned char *)dst + vectors * sizeof(uint4),
      (const unsigned char *)src + vectors * sizeof(uint4), tail);
  return (int)cudaGetLastError();
}

extern "C" int fp4_peer_launch_read(const void *src, size_t bytes, uint64_t *sink, void *stream) {
  size_t vectors = bytes / sizeof(uint4), tail = bytes % sizeof(uint4);
  read_kernel<<<stream_blocks(vectors), kThreads, 0, (cudaStream_t)stream>>>(
      (const uint4 *)src, vectors, (const unsigned char *)src + vectors * sizeof(uint4), tail,
      (unsigned long long *)sink);
  return (int)cudaGetLastError();
}

/* n, alignment and sizes checked by fp4_peer_read_ranges_queue, the only caller. */
extern "C" int fp4_peer_launch_read_ranges(const void *const *srcs, const size_t *bytes, int n, uint64_t *sink,
                                           void *stream) {
  read_ranges r;
  size_t total = 0;
  r.n = n;
  for (int k = 0; k < n; k++) {
    r.src[k] = static_cast<const uint4 *>(srcs[k]);
    r.vectors[k] = bytes[k] / sizeof(uint4);
    total += r.vectors[k];
  }
  read_ranges_kernel<<<stream_blocks(total), kThreads, 0, (cudaStream_t)stream>>>(r, (unsigned long long *)sink);
  return (int)cudaGetLastError();
}

extern "C" int fp4_peer_fill_bf16(void *dst, size_t n, uint64_t seed, void *stream) {
  fill_bf16_kernel<<<fill_blocks(n), kThreads, 0, (cudaStream_t)stream>>>((__nv_bfloat16 *)dst, n, seed);
  return (int)cudaGetLastError();
}

extern "C" int fp4_peer_fill_e4m3(void *dst, size_t n, uint64_t seed, void *stream) {
  fill_e4m3_kernel<<<fill_blocks(n), kThreads, 0, (cudaStream_t)stream>>>((__nv_fp8_storage_t *)dst, n, seed);
  return (int)cudaGetLastError();
}
