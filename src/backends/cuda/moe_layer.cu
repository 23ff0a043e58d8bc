/*
 * The MoE layer's small kernels around the grouped GEMMs: the routing permutation (counting sort
 * on one CTA), SiLU(gate) * up, and the weighted combine. Every kernel waits on the previous one
 * with the PDL pair of launch.cuh, so the layer runs without host synchronization and can be
 * captured in a CUDA graph.
 */
#include <math.h>

#include <cuda_bf16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/moe_kernels.h"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kRouteThreads = 1024;

/* Inclusive scan over the CTA of a 64-bit value packing (pairs << 32 | active experts): both
 * counts are below 2^31, so the halves never carry into each other. */
__device__ unsigned long long block_scan(unsigned long long v, unsigned long long *total) {
  __shared__ unsigned long long warp_sums[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long u = __shfl_up_sync(0xFFFFFFFFu, v, o);
    if (lane >= o) v += u;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned long long w = lane < warps ? warp_sums[lane] : 0ull;
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long u = __shfl_up_sync(0xFFFFFFFFu, w, o);
      if (lane >= o) w += u;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += warp_sums[warp - 1];
  *total = warp_sums[warps - 1];
  return v;
}

__global__ void __launch_bounds__(kRouteThreads) route_kernel(fp4_cuda_route_args a) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t E = a.experts, P = a.tokens * a.top_k;
  fp4_pdl_wait(); /* the ids may come from the previous kernel (the router) */
  for (int64_t e = tid; e < E; e += nt) a.counts[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < P; i += nt) {
    const int32_t id = a.ids[i];
    if (id >= 0 && id < E) atomicAdd(&a.counts[id], 1);
  }
  __syncthreads();
  /* Each thread owns a contiguous range of experts; one CTA-wide scan gives its starting row and
   * its first active-list index. */
  const int64_t per = (E + nt - 1) / nt, e0 = min((int64_t)tid * per, E), e1 = min(e0 + per, E);
  unsigned long long mine = 0;
  for (int64_t e = e0; e < e1; e++) mine += ((unsigned long long)a.counts[e] << 32) | (a.counts[e] > 0 ? 1ull : 0ull);
  unsigned long long total;
  const unsigned long long incl = block_scan(mine, &total);
  unsigned long long run = incl - mine;
  int64_t row = (int64_t)(run >> 32), act = (int64_t)(run & 0xFFFFFFFFull);
  for (int64_t e = e0; e < e1; e++) {
    const int c = a.counts[e];
    a.offsets[e] = row;
    if (c > 0) a.active[act++] = (int32_t)e;
    a.counts[e] = (int32_t)row; /* from here on: the next free row of expert e */
    row += c;
  }
  if (tid == 0) {
    a.offsets[E] = (int64_t)(total >> 32);
    *a.active_count = (int32_t)(total & 0xFFFFFFFFull);
    if (a.shared_offsets) {
      a.shared_offsets[0] = 0;
      a.shared_offsets[1] = a.tokens;
    }
  }
  __syncthreads();
  /* Scatter. The order inside an expert depends on the atomics; no value depends on it. */
  for (int64_t i = tid; i < P; i += nt) {
    const int32_t id = a.ids[i];
    if (id >= 0 && id < E) {
      const int32_t pos = atomicAdd(&a.counts[id], 1);
      a.sorted[pos] = (int32_t)i;
      a.inverse[i] = pos;
    } else {
      a.inverse[i] = -1;
    }
  }
  fp4_pdl_launch_dependents();
}

template <int KIND>
__global__ void __launch_bounds__(256) silu_mul_kernel(const float *g, void *act, int64_t rows, int64_t inter) {
  fp4_pdl_wait();
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < rows * inter) {
    const int64_t r = idx / inter, i = idx % inter;
    const double gate = g[r * 2 * inter + i], up = g[r * 2 * inter + inter + i];
    const float v = (float)(gate / (1.0 + exp(-gate)) * up);
    if (KIND == FP4_CUDA_ACT_BF16) {
      static_cast<uint16_t *>(act)[idx] = fp4_bf16_from_f32_inline(v);
    } else {
      static_cast<float *>(act)[idx] = v;
    }
  }
  fp4_pdl_launch_dependents();
}

/* The slots of a token are read in groups of kCombineGroup: every position, weight and down value
 * of a group is loaded before any is used, so a token's top_k dependent load pairs (inverse, then
 * down) cost a couple of memory latencies instead of top_k of them. Qwen3.5 at B = 1 (top-10, ncu):
 * 4.7 us against 6.3 us one pair at a time; the layer's time moved within noise (the combine's
 * start overlaps the down GEMM under PDL). The sum still runs over the slots in order. */
constexpr int kCombineGroup = 8;

__global__ void __launch_bounds__(256) combine_kernel(fp4_cuda_combine_args a) {
  fp4_pdl_wait();
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < a.tokens * a.hidden) {
    const int64_t t = idx / a.hidden, h = idx % a.hidden;
    double acc = 0.0;
    bool bad = false;
    for (int64_t j0 = 0; j0 < a.top_k; j0 += kCombineGroup) {
      int32_t pos[kCombineGroup];
      float w[kCombineGroup], d[kCombineGroup];
#pragma unroll
      for (int u = 0; u < kCombineGroup; u++) {
        const bool in = j0 + u < a.top_k;
        pos[u] = in ? a.inverse[t * a.top_k + j0 + u] : 0;
        w[u] = in ? a.weights[t * a.ldw + j0 + u] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kCombineGroup; u++)
        d[u] = j0 + u < a.top_k && pos[u] >= 0 ? a.down[(int64_t)pos[u] * a.hidden + h] : 0.0f;
#pragma unroll
      for (int u = 0; u < kCombineGroup; u++) {
        if (j0 + u >= a.top_k) break;
        if (pos[u] < 0) {
          bad = true; /* an invalid expert id: make it visible */
          continue;
        }
        acc += (double)w[u] * (double)d[u];
      }
    }
    if (a.shared) acc += (a.shared_weights ? (double)a.shared_weights[t] : 1.0) * (double)a.shared[t * a.hidden + h];
    const float v = bad ? __int_as_float(0x7FC00000) : (float)acc;
    const int64_t o = t * a.ldo + h;
    if (a.out_dtype == FP4_DTYPE_F32) static_cast<float *>(a.out)[o] = v;
    else if (a.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(a.out)[o] = fp4_bf16_from_f32_inline(v);
    else static_cast<uint16_t *>(a.out)[o] = fp4_f16_from_f32_inline(v);
  }
  fp4_pdl_launch_dependents();
}

unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

} // namespace

extern "C" int fp4_cuda_moe_route(const fp4_cuda_route_args *a, void *stream, int pdl) {
  if (a->tokens < 1 || a->top_k < 1 || a->experts < 1) return (int)cudaErrorInvalidValue;
  return (int)fp4_cuda_launch(route_kernel, dim3(1), dim3(kRouteThreads), 0, (cudaStream_t)stream, pdl, *a);
}

extern "C" int fp4_cuda_moe_silu_mul(const float *gate_up, void *act, int act_kind, int64_t rows, int64_t inter,
                                     void *stream, int pdl) {
  const int64_t n = rows * inter;
  if (n < 1 || (n + 255) / 256 > 0x7FFFFFFF) return (int)cudaErrorInvalidValue;
  const dim3 grid(blocks_for(n, 256)), block(256);
  cudaStream_t s = (cudaStream_t)stream;
  switch (act_kind) {
  case FP4_CUDA_ACT_F32: return (int)fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_F32>, grid, block, 0, s, pdl, gate_up, act, rows, inter);
  case FP4_CUDA_ACT_BF16: return (int)fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_BF16>, grid, block, 0, s, pdl, gate_up, act, rows, inter);
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int fp4_cuda_moe_combine(const fp4_cuda_combine_args *a, void *stream, int pdl) {
  const int64_t n = a->tokens * a->hidden;
  if (n < 1 || (n + 255) / 256 > 0x7FFFFFFF) return (int)cudaErrorInvalidValue;
  return (int)fp4_cuda_launch(combine_kernel, dim3(blocks_for(n, 256)), dim3(256), 0, (cudaStream_t)stream, pdl, *a);
}
