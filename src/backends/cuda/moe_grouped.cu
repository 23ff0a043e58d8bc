/*
 * Grouped FP4 GEMM over experts for the decode regime (a few rows per expert), one launch:
 * blockIdx.x = a 32-row tile of N, blockIdx.y = an expert slot (the j-th expert that has rows),
 * blockIdx.z = a split of that expert's row chunks. A CTA streams its slab of the expert's weights
 * once per chunk of up to 8 rows, so in decode (1-5 rows) every active expert's weights are read
 * exactly once, and experts without rows launch no work: the grid's y extent is the host-known
 * bound min(E, rows) and slots past the active count exit after one read.
 *
 * Numerics: weights and FP4 activations are dequantized exactly to f32 (e2m1 times an E4M3 or
 * UE8M0 scale is exact in f32); products are accumulated in f32 with fused multiply-adds, lanes
 * combined by a fixed butterfly (deterministic), and the per-expert scale applied once in double
 * before the single rounding to f32, as the reference does. Offsets are clamped to [0, rows] so
 * no content of them can make the kernel read or write out of bounds.
 *
 * Work split inside a CTA: 8 warps x 4 weight rows; a K chunk of 1024 activations per row is
 * staged in shared memory (f32, transposed with a 33-word pitch so stores and lane reads are free
 * of bank conflicts); lane l owns K elements l*32 .. l*32+31 of the chunk and reads them as one
 * 16-byte weight load per row, each activation value read from shared memory feeding 4 rows.
 */
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/moe_kernels.h"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kWarps = 8, kRowsPerWarp = 4, kTileN = kWarps * kRowsPerWarp;
constexpr int kChunk = 1024, kPitch = 33 * 32, kMaxRows = 8;

struct grouped_params {
  fp4_cuda_grouped_args a;
  int64_t w_expert_bytes; /* N * K / 2 */
  int64_t wC, aC;         /* scale columns of W and of A (K / block)  */
};

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Rows [lo, hi) of expert e, whatever offsets holds. */
__device__ __forceinline__ void expert_rows(const grouped_params &p, int64_t e, int64_t *lo, int64_t *hi) {
  *lo = clamp64(p.a.offsets[e], 0, p.a.rows);
  *hi = clamp64(p.a.offsets[e + 1], *lo, p.a.rows);
}

/* The slot-th expert with rows (-1: none), found by the whole CTA from offsets. */
__device__ int64_t find_expert(const grouped_params &p, int64_t slot) {
  __shared__ int counts[kWarps * 32];
  __shared__ long long found;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t per = (p.a.experts + nt - 1) / nt, e0 = tid * per, e1 = min(e0 + per, p.a.experts);
  int c = 0;
  for (int64_t e = e0; e < e1; e++) {
    int64_t lo, hi;
    expert_rows(p, e, &lo, &hi);
    c += hi > lo;
  }
  counts[tid] = c;
  if (tid == 0) found = -1;
  __syncthreads();
  if (tid == 0) { /* exclusive prefix sum; nt entries, once per CTA */
    int run = 0;
    for (int i = 0; i < nt; i++) {
      const int v = counts[i];
      counts[i] = run;
      run += v;
    }
  }
  __syncthreads();
  int seen = counts[tid];
  if (slot >= seen && slot < seen + c)
    for (int64_t e = e0; e < e1; e++) {
      int64_t lo, hi;
      expert_rows(p, e, &lo, &hi);
      if (hi > lo && seen++ == slot) {
        found = e;
        break;
      }
    }
  __syncthreads();
  return found;
}

template <int FMT, int ACT>
__device__ __forceinline__ float load_act(const grouped_params &p, int64_t row, int64_t k) {
  if (ACT == FP4_CUDA_ACT_FP4) {
    constexpr int bs = FMT == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
    const uint8_t byte = static_cast<const uint8_t *>(p.a.a)[row * (p.a.k / 2) + k / 2];
    const uint8_t sb = p.a.a_scales[fp4_layout_offset(p.a.a_layout, p.aC, row, k / bs)];
    const float s = FMT == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode_inline(sb) : fp4_ue8m0_decode_inline(sb);
    return __fmul_rn(fp4_e2m1_decode_inline((k & 1) ? byte >> 4 : byte & 0xF), s);
  }
  const int64_t i = row * p.a.lda + k;
  if (ACT == FP4_CUDA_ACT_BF16) return fp4_bf16_to_f32_inline(static_cast<const uint16_t *>(p.a.a)[i]);
  if (ACT == FP4_CUDA_ACT_F16) return fp4_f16_to_f32_inline(static_cast<const uint16_t *>(p.a.a)[i]);
  return static_cast<const float *>(p.a.a)[i];
}

/* Element i of a 32-bit word of codes as e2m1 * 2^-126 (exact; the 0.5 code is an f32 subnormal);
 * the caller multiplies by 2^126 and the block scale. */
template <int I>
__device__ __forceinline__ float raw_code(uint32_t w) {
  return __uint_as_float((((w >> (4 * I)) << 22) & 0x01C00000u) | (((w >> (4 * I + 3)) & 1u) << 31));
}

__device__ __forceinline__ void store(const grouped_params &p, int64_t row, int64_t n, double scale, float v) {
  const float r = (float)(scale * (double)v);
  const int64_t i = row * p.a.ldo + n;
  if (p.a.out_dtype == FP4_DTYPE_F32) static_cast<float *>(p.a.out)[i] = r;
  else if (p.a.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(p.a.out)[i] = fp4_bf16_from_f32_inline(r);
  else static_cast<uint16_t *>(p.a.out)[i] = fp4_f16_from_f32_inline(r);
}

/* Rows r0 .. r0+nr-1 (nr <= NR) of expert e times this CTA's 32 weight rows. */
template <int FMT, int ACT, int NR>
__device__ void row_chunk(const grouped_params &p, float *sm, int64_t e, int64_t r0, int nr, int64_t n0,
                          double scale) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t K = p.a.k, N = p.a.n;
  const uint8_t *w = p.a.w + e * p.w_expert_bytes;
  const uint8_t *ws = p.a.w_scales + e * p.a.w_scale_stride;
  int64_t wrow[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++) wrow[i] = min(n0 + warp * kRowsPerWarp + i, N - 1); /* stored only if < N */
  float acc[kRowsPerWarp][NR];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++)
#pragma unroll
    for (int r = 0; r < NR; r++) acc[i][r] = 0.0f;

  for (int64_t kc = 0; kc < K; kc += kChunk) {
    __syncthreads(); /* the previous chunk's readers are done */
    for (int idx = threadIdx.x; idx < NR * kChunk; idx += blockDim.x) {
      const int r = idx / kChunk, kk = idx % kChunk;
      float v = 0.0f;
      if (r < nr && kc + kk < K) {
        const int64_t pr = r0 + r;
        const int64_t arow = p.a.a_rows ? (int64_t)(p.a.a_rows[pr] / p.a.a_div) : pr;
        v = load_act<FMT, ACT>(p, arow, kc + kk);
      }
      sm[r * kPitch + (kk & 31) * 33 + (kk >> 5)] = v;
    }
    __syncthreads();
    const int64_t k0 = kc + lane * 32;
    if (k0 >= K) continue; /* K % 32 == 0: a lane owns all of its 32 elements or none */
    uint4 wv[kRowsPerWarp];
    float s0[kRowsPerWarp], s1[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
      wv[i] = __ldg(reinterpret_cast<const uint4 *>(w + wrow[i] * (K / 2) + k0 / 2));
      if (NV) {
        const int64_t c = k0 / FP4_NVFP4_BLOCK;
        s0[i] = fp4_e4m3_decode_inline(ws[fp4_layout_offset(p.a.w_layout, p.wC, wrow[i], c)]);
        s1[i] = fp4_e4m3_decode_inline(ws[fp4_layout_offset(p.a.w_layout, p.wC, wrow[i], c + 1)]);
      } else {
        s0[i] = s1[i] = fp4_ue8m0_decode_inline(ws[fp4_layout_offset(p.a.w_layout, p.wC, wrow[i], k0 / FP4_MXFP4_BLOCK)]);
      }
    }
    const float *col = sm + lane;
#pragma unroll
    for (int q = 0; q < 4; q++) {
#pragma unroll
      for (int j8 = 0; j8 < 8; j8++) {
        const int j = q * 8 + j8;
        float x[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) x[r] = col[r * kPitch + j * 33];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) {
          const uint32_t word = q == 0 ? wv[i].x : q == 1 ? wv[i].y : q == 2 ? wv[i].z : wv[i].w;
          float raw;
          switch (j8) {
          case 0: raw = raw_code<0>(word); break;
          case 1: raw = raw_code<1>(word); break;
          case 2: raw = raw_code<2>(word); break;
          case 3: raw = raw_code<3>(word); break;
          case 4: raw = raw_code<4>(word); break;
          case 5: raw = raw_code<5>(word); break;
          case 6: raw = raw_code<6>(word); break;
          default: raw = raw_code<7>(word); break;
          }
          /* 2^126 first: folding it into the scale could overflow (448 * 2^126). */
          const float wval = __fmul_rn(__fmul_rn(raw, 0x1p126f), j < 16 ? s0[i] : s1[i]);
#pragma unroll
          for (int r = 0; r < NR; r++) acc[i][r] = __fmaf_rn(wval, x[r], acc[i][r]);
        }
      }
    }
  }
  /* Butterfly over the lanes: every lane ends with the same, order-fixed sum. */
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++)
#pragma unroll
    for (int r = 0; r < NR; r++) {
      float v = acc[i][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
      acc[i][r] = v;
    }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++) {
    const int64_t n = n0 + warp * kRowsPerWarp + i;
#pragma unroll
    for (int r = 0; r < NR; r++)
      if (lane == r && r < nr && n < N) store(p, r0 + r, n, scale, acc[i][r]);
  }
}

template <int FMT, int ACT>
__global__ void __launch_bounds__(kWarps * 32) grouped_kernel(grouped_params p) {
  __shared__ float sm[kMaxRows * kPitch];
  fp4_pdl_wait(); /* offsets, the active list and the activations come from earlier kernels */
  int64_t e;
  if (p.a.active) {
    const int64_t count = clamp64(*p.a.active_count, 0, p.a.experts);
    if ((int64_t)blockIdx.y >= count) return;
    e = p.a.active[blockIdx.y];
    if (e < 0 || e >= p.a.experts) return;
  } else {
    e = find_expert(p, blockIdx.y);
    if (e < 0) return; /* uniform across the CTA: found is shared */
  }
  int64_t lo, hi;
  expert_rows(p, e, &lo, &hi);
  double scale = (double)p.a.alpha * (double)(p.a.w_mult ? p.a.w_mult[e] : 1.0f);
  scale *= (double)p.a.a_mult;
  const int64_t n0 = (int64_t)blockIdx.x * kTileN;
  for (int64_t r0 = lo + (int64_t)blockIdx.z * kMaxRows; r0 < hi; r0 += (int64_t)gridDim.z * kMaxRows) {
    const int nr = (int)min((int64_t)kMaxRows, hi - r0);
    if (nr <= 1) row_chunk<FMT, ACT, 1>(p, sm, e, r0, nr, n0, scale);
    else if (nr <= 2) row_chunk<FMT, ACT, 2>(p, sm, e, r0, nr, n0, scale);
    else if (nr <= 4) row_chunk<FMT, ACT, 4>(p, sm, e, r0, nr, n0, scale);
    else row_chunk<FMT, ACT, 8>(p, sm, e, r0, nr, n0, scale);
  }
  fp4_pdl_launch_dependents();
}

template <int FMT>
cudaError_t launch_fmt(const grouped_params &p, dim3 grid, cudaStream_t s, int pdl) {
  const dim3 block(kWarps * 32);
  switch (p.a.act) {
  case FP4_CUDA_ACT_BF16: return fp4_cuda_launch(grouped_kernel<FMT, FP4_CUDA_ACT_BF16>, grid, block, 0, s, pdl, p);
  case FP4_CUDA_ACT_F16: return fp4_cuda_launch(grouped_kernel<FMT, FP4_CUDA_ACT_F16>, grid, block, 0, s, pdl, p);
  case FP4_CUDA_ACT_F32: return fp4_cuda_launch(grouped_kernel<FMT, FP4_CUDA_ACT_F32>, grid, block, 0, s, pdl, p);
  case FP4_CUDA_ACT_FP4: return fp4_cuda_launch(grouped_kernel<FMT, FP4_CUDA_ACT_FP4>, grid, block, 0, s, pdl, p);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace

extern "C" int fp4_cuda_grouped_gemm(const fp4_cuda_grouped_args *a, void *stream, int pdl) {
  if (a->k % 32 || a->k < 32 || a->n < 1 || a->experts < 1 || a->a_div < 1 || a->splits < 1 || a->slots < 1)
    return (int)cudaErrorInvalidValue;
  grouped_params p;
  p.a = *a;
  const int bs = a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  p.w_expert_bytes = a->n * (a->k / 2);
  p.wC = a->k / bs;
  p.aC = a->k / bs;
  const int64_t tiles = (a->n + kTileN - 1) / kTileN;
  if (tiles > 0x7FFFFFFF || a->slots > 65535 || a->splits > 65535) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)tiles, (unsigned)a->slots, (unsigned)a->splits);
  cudaStream_t s = (cudaStream_t)stream;
  return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_fmt<FP4_FORMAT_NVFP4>(p, grid, s, pdl)
                                             : launch_fmt<FP4_FORMAT_MXFP4>(p, grid, s, pdl));
}
