/*
 * The MoE layer's small kernels around the grouped GEMMs: the routing permutation (counting sort
 * on one CTA, counters in its shared memory up to 12032 experts), SiLU(gate) * up, and the weighted combine. Every kernel waits on the previous one
 * with the PDL pair of launch.cuh, so the layer runs without host synchronization and can be
 * captured in a CUDA graph.
 */
#include <math.h>

#include <cuda_bf16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/large_m_common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/moe_combine.cuh"
#include "backends/cuda/moe_kernels.h"
#include "backends/cuda/moe_scalars.cuh"
#include "backends/cuda/moe_silu.cuh"
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

/* Experts whose counters fit in the routing CTA's shared memory (48 KiB without an opt-in, less 1 KiB
 * for block_scan's static array). The
 * scatter's atomics return the row they claim, so each thread waits for one per pair it places:
 * on global counters that is an L2 round trip each, 71 us for DeepSeek-R1 at B = 4096 (32768
 * pairs, 32 per thread; ncu, bench/results/h200/2026-11-30-moe-prefill/README.md), on shared ones
 * a few cycles. */
constexpr int64_t kRouteSmemExperts = (48 * 1024 - 1024) / sizeof(int32_t);

/* The routing of route_kernel by one CTA (after the PDL wait: the ids may come from the previous
 * kernel, the router). */
template <bool SMEM_COUNTS>
__device__ __forceinline__ void route_cta(const fp4_cuda_route_args &a) {
  extern __shared__ int32_t smem_counts[];
  int32_t *counts = SMEM_COUNTS ? smem_counts : a.counts;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t E = a.experts, P = a.tokens * a.top_k;
  for (int64_t e = tid; e < E; e += nt) counts[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < P; i += nt) {
    const int32_t id = a.ids[i];
    if (id >= 0 && id < E) atomicAdd(&counts[id], 1);
  }
  __syncthreads();
  /* Each thread owns a contiguous range of experts; one CTA-wide scan gives its starting row and
   * its first active-list index. */
  const int64_t per = (E + nt - 1) / nt, e0 = min((int64_t)tid * per, E), e1 = min(e0 + per, E);
  unsigned long long mine = 0;
  for (int64_t e = e0; e < e1; e++) mine += ((unsigned long long)counts[e] << 32) | (counts[e] > 0 ? 1ull : 0ull);
  unsigned long long total;
  const unsigned long long incl = block_scan(mine, &total);
  unsigned long long run = incl - mine;
  int64_t row = (int64_t)(run >> 32), act = (int64_t)(run & 0xFFFFFFFFull);
  if (a.tile_starts) { /* before counts turns into row cursors below */
    unsigned long long tiles = 0;
    for (int64_t e = e0; e < e1; e++) tiles += (unsigned long long)((counts[e] + a.tile_rows - 1) / a.tile_rows);
    __syncthreads(); /* every thread has read block_scan's total: its scratch is reused */
    unsigned long long all_tiles;
    unsigned long long tile = block_scan(tiles, &all_tiles) - tiles;
    for (int64_t e = e0; e < e1; e++) {
      a.tile_starts[e] = (int32_t)tile;
      tile += (unsigned long long)((counts[e] + a.tile_rows - 1) / a.tile_rows);
    }
    if (tid == 0) a.tile_starts[E] = (int32_t)all_tiles;
  }
  for (int64_t e = e0; e < e1; e++) {
    const int c = counts[e];
    a.offsets[e] = row;
    if (c > 0) a.active[act++] = (int32_t)e;
    counts[e] = (int32_t)row; /* from here on: the next free row of expert e */
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
      const int32_t pos = atomicAdd(&counts[id], 1);
      a.sorted[pos] = (int32_t)i;
      a.inverse[i] = pos;
    } else {
      a.inverse[i] = -1;
    }
  }
}

template <bool SMEM_COUNTS>
__global__ void __launch_bounds__(kRouteThreads) route_kernel(fp4_cuda_route_args a) {
  fp4_pdl_wait();
  route_cta<SMEM_COUNTS>(a);
  fp4_pdl_launch_dependents();
}

/* SiLU(gate) * up: CTA (row r, chunk y) computes act[r, 1024 y .. 1024 y + 1023], 4 consecutive i
 * per thread (I is a multiple of 16), with 16-byte loads of gate and up where the buffers are
 * 16-byte aligned (VEC; a caller's workspace need not be). The math is per element: silu_mul_f32,
 * and for bf16 rows silu_mul_bf16 (mostly single precision, bit for bit the double formula's). The
 * layout replaces a 64-bit division per element and scalar accesses (367 us for DeepSeek-R1 at
 * B = 4096, 1.8 TB/s over its bytes; bench/results/h200/2026-11-30-moe-prefill/README.md). */
constexpr int kSiluThreads = 256, kSiluPerThread = 4;

template <int KIND, bool VEC>
__global__ void __launch_bounds__(kSiluThreads) silu_mul_kernel(const float *g, void *act, int64_t rows, int64_t inter) {
  fp4_pdl_wait();
  const int64_t r = blockIdx.x, i = ((int64_t)blockIdx.y * kSiluThreads + threadIdx.x) * kSiluPerThread;
  if (r < rows && i < inter) {
    const float *gp = g + r * 2 * inter + i, *up = gp + inter;
    float gs[4], us[4];
    if (VEC) {
      const float4 gv = *reinterpret_cast<const float4 *>(gp), uv = *reinterpret_cast<const float4 *>(up);
      gs[0] = gv.x, gs[1] = gv.y, gs[2] = gv.z, gs[3] = gv.w;
      us[0] = uv.x, us[1] = uv.y, us[2] = uv.z, us[3] = uv.w;
    } else {
#pragma unroll
      for (int u = 0; u < 4; u++) gs[u] = gp[u], us[u] = up[u];
    }
    if (KIND == FP4_CUDA_ACT_BF16) {
      uint16_t h[4];
#pragma unroll
      for (int u = 0; u < 4; u++) h[u] = silu_mul_bf16(gs[u], us[u]);
      uint16_t *o = static_cast<uint16_t *>(act) + r * inter + i;
      if (VEC) {
        *reinterpret_cast<uint2 *>(o) = make_uint2((uint32_t)h[0] | (uint32_t)h[1] << 16, (uint32_t)h[2] | (uint32_t)h[3] << 16);
      } else {
#pragma unroll
        for (int u = 0; u < 4; u++) o[u] = h[u];
      }
    } else {
      float v[4];
#pragma unroll
      for (int u = 0; u < 4; u++) v[u] = silu_mul_f32(gs[u], us[u]);
      float *o = static_cast<float *>(act) + r * inter + i;
      if (VEC) {
        *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int u = 0; u < 4; u++) o[u] = v[u];
      }
    }
  }
  fp4_pdl_launch_dependents();
}

/* CTA (token t, chunk y) writes out[t, 1024 y .. 1024 y + 1023], each thread 4 columns 256 apart
 * (coalesced loads of the down rows): the token's slot positions and weights are loaded once per
 * thread for its 4 columns, and no 64-bit division is left per element (one thread per element
 * took 508 us for DeepSeek-R1 at B = 4096, 1.9 TB/s over the down rows; bench/results/h200/
 * 2026-11-30-moe-prefill/README.md). The arithmetic: combine_columns (moe_combine.cuh). */
constexpr int kCombineThreads = 256, kCombinePerThread = 4;

__global__ void __launch_bounds__(kCombineThreads) combine_kernel(fp4_cuda_combine_args a) {
  fp4_pdl_wait();
  const int64_t t = blockIdx.x, h0 = (int64_t)blockIdx.y * kCombineThreads * kCombinePerThread + threadIdx.x;
  if (t < a.tokens && h0 < a.hidden) combine_columns<kCombinePerThread>(a, t, h0, kCombineThreads);
  fp4_pdl_launch_dependents();
}

/* The W4A4 decode GEMMs' input rows in one kernel: quantize (the runtime recipe, codec.h, as
 * quantize.cu) and write each element as the exact bf16 value of its code times its block scale,
 * as lm_dequant_a_kernel does from the codes (chunk_factors, decode_word), so the result is that
 * of fp4_cuda_quantize followed by fp4_cuda_dequant_fp4_rows, bit for bit, without the codes, the
 * scales or the second launch. SRC: a dense dtype (rows with stride ld), or kSrcSiluMul, the
 * gate_up output [rows, 2 cols] in f32, whose elements are silu_mul_f32(gate, up) (the f32 act of
 * fp4_cuda_moe_silu_mul), so SiLU*up needs no launch of its own either. Four elements per thread,
 * the block's threads (4 or 8 adjacent lanes) combining their maxima by shuffles: decode inputs are
 * a few rows, and a thread per block left too few threads to hide the double-precision exp of
 * SiLU*up (DeepSeek-R1 B = 1, ncu: 6.4 us against 2.6 + 3.3 + 3.1 for the three kernels it
 * replaces; 3.3 us with four per thread: bench/results/h200/2026-11-30-moe-decode/README.md). */
constexpr int kSrcSiluMul = -1, kQuantBf16Threads = 256;

template <int SRC>
__device__ __forceinline__ float quant_src(const void *x, int64_t ld, int64_t cols, int64_t r, int64_t i) {
  if (SRC == kSrcSiluMul) {
    const float *g = static_cast<const float *>(x) + r * 2 * cols + i;
    return silu_mul_f32(__ldg(g), __ldg(g + cols));
  }
  if (SRC == FP4_DTYPE_BF16) return fp4_bf16_to_f32_inline(__ldg(static_cast<const uint16_t *>(x) + r * ld + i));
  if (SRC == FP4_DTYPE_F16) return fp4_f16_to_f32_inline(__ldg(static_cast<const uint16_t *>(x) + r * ld + i));
  return __ldg(static_cast<const float *>(x) + r * ld + i);
}

/* Thread idx of quantize_bf16_kernel's work: elements 4 (idx % (cols / 4)) .. + 3 of row
 * idx / (cols / 4). */
template <int FMT, int SRC>
__device__ __forceinline__ void quantize_bf16_at(const void *x, int64_t ld, int64_t rows, int64_t cols,
                                                 float global_scale, const float *gs_device, uint16_t *out,
                                                 int64_t idx) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kLanes = (NV ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK) / 4; /* threads per block */
  /* rows * cols / 4 threads: a multiple of 8, so every warp that starts holds whole blocks, and all
   * of its lanes reach the shuffles (those past the end with zeros) */
  const int64_t per_row = cols / 4;
  const bool valid = idx < rows * per_row;
  const int64_t r = valid ? idx / per_row : 0, c = valid ? idx % per_row * 4 : 0;
  float v[4], vmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] = valid ? quant_src<SRC>(x, ld, cols, r, c + i) : 0.0f;
    vmax = fp4_absmax_update(vmax, v[i]);
  }
  /* the max of non-negative values (NaNs dropped by fmaxf) in any order: the same as the sequential
   * fp4_absmax_update over the block */
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xFFFFFFFFu, vmax, o));
  float out_scale, f[2];
  const uint8_t sb = NV ? fp4_nvfp4_block_scale(vmax, fp4_nvfp4_recipe_make(moe_global_scale(global_scale, gs_device)),
                                                &out_scale)
                        : fp4_mxfp4_block_scale(vmax, &out_scale);
  chunk_factors<NV>(sb, f);
  const uint32_t codes = (uint32_t)fp4_e2m1_pack2(v[0], v[1], out_scale) | (uint32_t)fp4_e2m1_pack2(v[2], v[3], out_scale) << 8;
  const uint4 b = decode_word<false>(codes, f[0]); /* codes 4..7 are zero: .z and .w unused */
  if (valid) *reinterpret_cast<uint2 *>(out + r * cols + c) = make_uint2(b.x, b.y);
}

template <int FMT, int SRC>
__global__ void __launch_bounds__(kQuantBf16Threads)
    quantize_bf16_kernel(const void *x, int64_t ld, int64_t rows, int64_t cols, float global_scale,
                         const float *gs_device, uint16_t *out) {
  fp4_pdl_wait();
  quantize_bf16_at<FMT, SRC>(x, ld, rows, cols, global_scale, gs_device, out,
                             (int64_t)blockIdx.x * kQuantBf16Threads + threadIdx.x);
  fp4_pdl_launch_dependents();
}

/* fp4_cuda_moe_route_quantize_bf16: CTA 0 routes, the others quantize the hidden rows (independent
 * work, one launch in the chain instead of two). */
template <bool SMEM_COUNTS, int FMT, int SRC>
__global__ void __launch_bounds__(kRouteThreads)
    route_quantize_kernel(fp4_cuda_route_args a, const void *x, int64_t ld, int64_t rows, int64_t cols,
                          float global_scale, const float *gs_device, uint16_t *out) {
  fp4_pdl_wait(); /* the ids, the hidden rows and the scale may come from earlier kernels */
  if (blockIdx.x == 0)
    route_cta<SMEM_COUNTS>(a);
  else
    quantize_bf16_at<FMT, SRC>(x, ld, rows, cols, global_scale, gs_device, out,
                               (int64_t)(blockIdx.x - 1) * kRouteThreads + threadIdx.x);
  fp4_pdl_launch_dependents();
}

template <int FMT>
cudaError_t launch_quantize_bf16(const void *x, int src, int64_t ld, int64_t rows, int64_t cols, float gs,
                                 const float *gs_device, uint16_t *out, cudaStream_t s, int pdl) {
  const dim3 grid((unsigned)((rows * (cols / 4) + kQuantBf16Threads - 1) / kQuantBf16Threads));
  const dim3 block(kQuantBf16Threads);
  const auto go = [&](auto kernel) {
    return fp4_cuda_launch(kernel, grid, block, 0, s, pdl, x, ld, rows, cols, gs, gs_device, out);
  };
  switch (src) {
  case kSrcSiluMul: return go(quantize_bf16_kernel<FMT, kSrcSiluMul>);
  case FP4_DTYPE_BF16: return go(quantize_bf16_kernel<FMT, FP4_DTYPE_BF16>);
  case FP4_DTYPE_F16: return go(quantize_bf16_kernel<FMT, FP4_DTYPE_F16>);
  case FP4_DTYPE_F32: return go(quantize_bf16_kernel<FMT, FP4_DTYPE_F32>);
  default: return cudaErrorInvalidValue;
  }
}

unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

} // namespace

extern "C" int fp4_cuda_moe_route(const fp4_cuda_route_args *a, void *stream, int pdl) {
  if (a->tokens < 1 || a->top_k < 1 || a->experts < 1) return (int)cudaErrorInvalidValue;
  if (a->experts <= kRouteSmemExperts)
    return (int)fp4_cuda_launch(route_kernel<true>, dim3(1), dim3(kRouteThreads), (size_t)a->experts * sizeof(int32_t),
                                (cudaStream_t)stream, pdl, *a);
  return (int)fp4_cuda_launch(route_kernel<false>, dim3(1), dim3(kRouteThreads), 0, (cudaStream_t)stream, pdl, *a);
}

extern "C" int fp4_cuda_moe_silu_mul(const float *gate_up, void *act, int act_kind, int64_t rows, int64_t inter,
                                     void *stream, int pdl) {
  const int64_t chunk = kSiluThreads * kSiluPerThread;
  if (rows < 1 || inter < 1 || inter % kSiluPerThread || rows > 0x7FFFFFFF || (inter + chunk - 1) / chunk > 65535)
    return (int)cudaErrorInvalidValue;
  const dim3 grid((unsigned)rows, blocks_for(inter, (int)chunk)), block(kSiluThreads);
  cudaStream_t s = (cudaStream_t)stream;
  const bool vec = (uintptr_t)gate_up % 16 == 0 && (uintptr_t)act % 16 == 0;
  switch (act_kind) {
  case FP4_CUDA_ACT_F32:
    return (int)(vec ? fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_F32, true>, grid, block, 0, s, pdl, gate_up, act, rows, inter)
                     : fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_F32, false>, grid, block, 0, s, pdl, gate_up, act, rows, inter));
  case FP4_CUDA_ACT_BF16:
    return (int)(vec ? fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_BF16, true>, grid, block, 0, s, pdl, gate_up, act, rows, inter)
                     : fp4_cuda_launch(silu_mul_kernel<FP4_CUDA_ACT_BF16, false>, grid, block, 0, s, pdl, gate_up, act, rows, inter));
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int fp4_cuda_moe_combine(const fp4_cuda_combine_args *a, void *stream, int pdl) {
  const int64_t chunk = kCombineThreads * kCombinePerThread;
  if (a->tokens < 1 || a->hidden < 1 || a->tokens > 0x7FFFFFFF || (a->hidden + chunk - 1) / chunk > 65535)
    return (int)cudaErrorInvalidValue;
  return (int)fp4_cuda_launch(combine_kernel, dim3((unsigned)a->tokens, blocks_for(a->hidden, (int)chunk)),
                              dim3(kCombineThreads), 0, (cudaStream_t)stream, pdl, *a);
}

extern "C" int fp4_cuda_moe_quantize_bf16(const void *x, int src, int64_t ld, int64_t rows, int64_t cols, int format,
                                          float global_scale, const float *global_scale_device, uint16_t *out,
                                          void *stream, int pdl) {
  const bool silu = src == FP4_CUDA_MOE_SRC_SILU_MUL;
  if (rows < 1 || cols < 32 || cols % 32 || (!silu && ld < cols) || (uintptr_t)out % 16 ||
      (rows * (cols / 4) + kQuantBf16Threads - 1) / kQuantBf16Threads > 0x7FFFFFFF)
    return (int)cudaErrorInvalidValue;
  const int s = silu ? kSrcSiluMul : src;
  cudaStream_t st = (cudaStream_t)stream;
  return (int)(format == FP4_FORMAT_NVFP4
                   ? launch_quantize_bf16<FP4_FORMAT_NVFP4>(x, s, ld, rows, cols, global_scale, global_scale_device, out,
                                                            st, pdl)
                   : launch_quantize_bf16<FP4_FORMAT_MXFP4>(x, s, ld, rows, cols, global_scale, NULL, out, st, pdl));
}

extern "C" int fp4_cuda_moe_route_quantize_bf16(const fp4_cuda_route_args *a, const void *x, int src, int64_t ld,
                                                int64_t rows, int64_t cols, int format, float global_scale,
                                                const float *global_scale_device, uint16_t *out, void *stream,
                                                int pdl) {
  const int64_t quant_ctas = (rows * (cols / 4) + kRouteThreads - 1) / kRouteThreads;
  if (a->tokens < 1 || a->top_k < 1 || a->experts < 1 || rows < 1 || cols < 32 || cols % 32 || ld < cols ||
      (uintptr_t)out % 16 || quant_ctas > 0x7FFFFFFE ||
      (src != FP4_DTYPE_BF16 && src != FP4_DTYPE_F16 && src != FP4_DTYPE_F32))
    return (int)cudaErrorInvalidValue;
  const bool smem = a->experts <= kRouteSmemExperts, nv = format == FP4_FORMAT_NVFP4;
  const float *gs_device = nv ? global_scale_device : NULL;
  const dim3 grid((unsigned)(1 + quant_ctas)), block(kRouteThreads);
  const size_t dyn = smem ? (size_t)a->experts * sizeof(int32_t) : 0;
  cudaStream_t s = (cudaStream_t)stream;
  const auto go = [&](auto kernel) {
    return (int)fp4_cuda_launch(kernel, grid, block, dyn, s, pdl, *a, x, ld, rows, cols, global_scale, gs_device, out);
  };
#define ROUTE_QUANT(SMEM_, FMT_)                                                                        \
  switch (src) {                                                                                        \
  case FP4_DTYPE_BF16: return go(route_quantize_kernel<SMEM_, FMT_, FP4_DTYPE_BF16>);                   \
  case FP4_DTYPE_F16: return go(route_quantize_kernel<SMEM_, FMT_, FP4_DTYPE_F16>);                     \
  default: return go(route_quantize_kernel<SMEM_, FMT_, FP4_DTYPE_F32>);                                \
  }
  if (smem) {
    if (nv) ROUTE_QUANT(true, FP4_FORMAT_NVFP4)
    ROUTE_QUANT(true, FP4_FORMAT_MXFP4)
  }
  if (nv) ROUTE_QUANT(false, FP4_FORMAT_NVFP4)
  ROUTE_QUANT(false, FP4_FORMAT_MXFP4)
#undef ROUTE_QUANT
}
