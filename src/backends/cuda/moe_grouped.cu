/*
 * Grouped FP4 GEMM over experts, one launch, one of three kernels:
 *
 * 1. Tensor cores (K % 128 == 0, the MoE shapes that matter): grid = (group of 16-row weight
 *    tiles of N, expert slot, row split). Built like the dense small-M kernel
 *    (small_m_common.cuh): a warp streams 16 weight rows in 128-element K slabs with 16-byte
 *    L1-bypassing loads (several slabs in flight), decodes FP4 -> bf16/f16 exactly and runs
 *    mma.sync m16n8k16 with the weights as the 16-row A operand and the expert's rows as up to NT
 *    8-column B tiles, gathered row by row through a_rows (the routing permutation), so permuted
 *    activations are never materialized. The CTA's 8 warps cover 8 / wpt tiles, wpt warps
 *    splitting each tile's K: wpt = 1 (no reduction, long-lived warps) whenever that still gives
 *    3 CTAs per multiprocessor, more only in decode with few active experts; split warps reduce
 *    through shared memory in a fixed order (deterministic). An expert's rows are walked in chunks
 *    of 8 * NT; with one chunk (decode) every active expert's weights are read from memory exactly
 *    once. NT (1, 2, 8) follows the mean rows per expert, which the host knows
 *    (T * k / min(E, T * k)).
 *
 *    Decode with bf16/f16 activations (one token tile per chunk) runs the lean variant instead
 *    (grouped_lean_kernel): the dense lean kernel's loop, 4 warps splitting the K of two 16-row
 *    tiles; on SM90+ optionally with the K slabs split over a thread block cluster of 2 or 4 CTAs
 *    (KS), the cluster's rank 0 adding the ranks' sums in rank order. Its gate_up forms with
 *    SiLU*up on the compile-time K walk can also do the layer's routing (up to 32 pairs: route_warp).
 *
 * 2. CUDA-core FMAs (any K % 32 == 0), described below; kept for K not a multiple of 128.
 *
 * The CUDA-core kernel in detail, for the decode regime (a few rows per expert):
 * blockIdx.x = a 32-row tile of N, blockIdx.z = an expert slot (the j-th expert that has rows),
 * blockIdx.y = a split of that expert's row chunks (cta_slot, cta_split). A CTA streams its slab
 * of the expert's weights once per chunk of up to 8 rows, so in decode (1-5 rows) every active
 * expert's weights are read exactly once, and experts without rows launch no work: the grid's z extent is the host-known
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
#include "backends/cuda/moe_combine.cuh"
#include "backends/cuda/moe_kernels.h"
#include "backends/cuda/moe_scalars.cuh"
#include "backends/cuda/moe_silu.cuh"
#include "backends/cuda/small_m_common.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kWarps = 8, kRowsPerWarp = 4, kTileN = kWarps * kRowsPerWarp;
constexpr int kChunk = 1024, kPitch = 33 * 32, kMaxRows = 8;

struct grouped_params {
  fp4_cuda_grouped_args a;
  int64_t w_expert_bytes; /* N * K / 2 */
  int64_t wC, aC;         /* scale columns of W and of A (K / block)  */
  int warps_per_tile;     /* tensor-core kernel: warps splitting one 16-row tile's K (1-8) */
  int lean_span;          /* lean decode kernel: consecutive R-tile groups of N per CTA */
  int kparts;             /* lean decode kernel: CTAs of a cluster splitting the K slabs (1: none) */
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

/* The streaming kernels' grid: x a tile (or group of tiles) of N, y a split of the expert's row
 * chunks, z an expert slot. The splits of a slot are next to each other in launch order, so a CTA
 * streaming a later chunk of the expert's rows finds its weights in L2, brought in by the CTAs of the
 * first chunk running beside it, instead of reading them from DRAM again after every other expert
 * (bench/results/h200/2026-12-03-moe-splits-beside-slots/). */
__device__ __forceinline__ int64_t cta_slot() { return blockIdx.z; }
__device__ __forceinline__ int64_t cta_slots() { return gridDim.z; }
__device__ __forceinline__ int64_t cta_split() { return blockIdx.y; }
__device__ __forceinline__ int64_t cta_splits() { return gridDim.y; }

/* The expert of this CTA's slot, or -1 (the CTA has nothing to do): from the active list when the
 * routing kernel built one, else by scanning offsets. Uniform across the CTA. */
__device__ int64_t slot_expert(const grouped_params &p) {
  if (!p.a.active) return find_expert(p, cta_slot());
  /* The count and the slot's entry are loaded together, one memory latency instead of two in a row:
   * the entry is read within the list's experts entries whatever the count, and used only below it. */
  const int64_t slot = cta_slot();
  const int32_t count = *p.a.active_count;
  const int64_t e = p.a.active[slot < p.a.experts ? slot : p.a.experts - 1];
  if (slot >= clamp64(count, 0, p.a.experts)) return -1;
  return e < 0 || e >= p.a.experts ? -1 : e;
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

__device__ __forceinline__ void store(const grouped_params &p, void *out, int64_t row, int64_t n, double scale, float v) {
  const float r = (float)(scale * (double)v);
  const int64_t i = row * p.a.ldo + n;
  if (p.a.out_dtype == FP4_DTYPE_F32) static_cast<float *>(out)[i] = r;
  else if (p.a.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(out)[i] = fp4_bf16_from_f32_inline(r);
  else static_cast<uint16_t *>(out)[i] = fp4_f16_from_f32_inline(r);
}
__device__ __forceinline__ void store(const grouped_params &p, int64_t row, int64_t n, double scale, float v) {
  store(p, p.a.out, row, n, scale, v);
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
  const int64_t e = slot_expert(p);
  if (e < 0) return; /* uniform across the CTA */
  int64_t lo, hi;
  expert_rows(p, e, &lo, &hi);
  double scale = (double)moe_alpha(p.a.alpha, p.a.alpha_device) * (double)(p.a.w_mult ? p.a.w_mult[e] : 1.0f);
  scale *= (double)moe_a_mult(p.a.a_mult, p.a.a_scale_device);
  const int64_t n0 = (int64_t)blockIdx.x * kTileN;
  for (int64_t r0 = lo + cta_split() * kMaxRows; r0 < hi; r0 += cta_splits() * kMaxRows) {
    const int nr = (int)min((int64_t)kMaxRows, hi - r0);
    if (nr <= 1) row_chunk<FMT, ACT, 1>(p, sm, e, r0, nr, n0, scale);
    else if (nr <= 2) row_chunk<FMT, ACT, 2>(p, sm, e, r0, nr, n0, scale);
    else if (nr <= 4) row_chunk<FMT, ACT, 4>(p, sm, e, r0, nr, n0, scale);
    else row_chunk<FMT, ACT, 8>(p, sm, e, r0, nr, n0, scale);
  }
  fp4_pdl_launch_dependents();
}

/* ---- Tensor-core kernel ------------------------------------------------------------------------ */

constexpr int kMmaMaxWarps = 8;

/* Stores v (this thread's accumulator c of token tile nt, FP32 over the warps) for permuted row
 * r0 + 8 nt + 2t + (c & 1) and weight row n0 + g (+8). */
__device__ __forceinline__ void mma_store(const grouped_params &p, void *out, int64_t r0, int64_t hi, int64_t n0, int nt,
                                          int c, int l, double scale, float v) {
  const int g = l >> 2, t = l & 3;
  const int64_t n = n0 + g + (c >= 2 ? 8 : 0), r = r0 + (int64_t)nt * 8 + 2 * t + (c & 1);
  if (n < p.a.n && r < hi) store(p, out, r, n, scale, v);
}
__device__ __forceinline__ void mma_store(const grouped_params &p, int64_t r0, int64_t hi, int64_t n0, int nt, int c,
                                          int l, double scale, float v) {
  mma_store(p, p.a.out, r0, hi, n0, nt, c, l, scale, v);
}

/* SiLU(gate) * up of one accumulator element of a gate tile (rows n0 ..) and its up tile: the f32
 * values store() would write for the two (the same double scaling and rounding), then the layer's
 * bf16 act (silu_mul_bf16), at out[r, n] with n < rows_out = I. */
__device__ __forceinline__ void silu_store(const grouped_params &p, void *out, int64_t r0, int64_t hi, int64_t n0,
                                           int64_t rows_out, int c, int l, double scale, float vg, float vu) {
  const int g = l >> 2, t = l & 3;
  const int64_t n = n0 + g + (c >= 2 ? 8 : 0), r = r0 + 2 * t + (c & 1);
  if (n < rows_out && r < hi) {
    const float gate = (float)(scale * (double)vg), up = (float)(scale * (double)vu);
    static_cast<uint16_t *>(out)[r * p.a.ldo + n] = silu_mul_bf16(gate, up);
  }
}

/* The FP32 -> output scale of a CTA's expert, alpha * w_mult[e] * a_mult (times 2^8 for NVFP4
 * weights, which decode as e2m1 * scale * 2^-8), from the device scalars loaded at the kernel's
 * start: value() does the arithmetic where the scale is used, so the kernel's first weight loads do
 * not wait for these loads (the lean kernel calls it after its K walk). */
struct out_scale {
  float alpha_dev, a_dev, w; /* *alpha_device, *a_scale_device (0 when absent), the expert's multiplier */
  template <bool NV> __device__ __forceinline__ double value(const grouped_params &p) const {
    return (double)(p.a.alpha_device ? __fmul_rn(p.a.alpha, alpha_dev) : p.a.alpha) * (double)w *
           (double)(p.a.a_scale_device ? __fdiv_rn(1.0f, a_dev) : p.a.a_mult) * (NV ? 256.0 : 1.0);
  }
};
__device__ __forceinline__ out_scale load_out_scale(const grouped_params &p, const float *w_mult) {
  out_scale s;
  s.alpha_dev = p.a.alpha_device ? *p.a.alpha_device : 0.0f;
  s.a_dev = p.a.a_scale_device ? *p.a.a_scale_device : 0.0f;
  s.w = w_mult ? *w_mult : 1.0f;
  return s;
}

/* The tensor-core kernels' common start: the NVFP4 weight scale table (scale byte -> 16-bit
 * multiplier pair, nv_weight_scale_pair), the PDL wait, this CTA's expert (false: nothing to do,
 * uniform across the CTA), its rows [lo, hi) and the device scalars of its output scale. */
template <bool NV, bool F16>
__device__ __forceinline__ bool expert_start(const grouped_params &p, uint32_t *table, int64_t *e, int64_t *lo,
                                             int64_t *hi, out_scale *sc) {
  if (NV)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<F16>(i);
  fp4_pdl_wait(); /* offsets, the active list and the activations come from earlier kernels */
  *e = slot_expert(p);
  if (*e < 0) return false;
  __syncthreads(); /* the table is written */
  expert_rows(p, *e, lo, hi);
  *sc = load_out_scale(p, p.a.w_mult ? p.a.w_mult + *e : NULL);
  return true;
}

/* The routing of fp4_cuda_moe_route in a launch that does it itself (fp4_cuda_grouped_args.route: at
 * most FP4_MOE_ROUTE_FUSED_PAIRS pairs): warp 0 of every CTA sorts the pairs, pair i in lane i, into
 * shared memory, and the grid's first CTA writes the routing outputs the later launches read. A
 * decode layer's routing kernel was a one-CTA launch in the chain of dependent launches, and the
 * gate_up CTAs then loaded the active list, the offsets and a_rows from memory one after another;
 * here the ids are the only load. */
struct route_smem {
  int32_t sorted[FP4_MOE_ROUTE_FUSED_PAIRS]; /* row -> pair: this launch's a_rows                  */
  int32_t place[FP4_MOE_ROUTE_FUSED_PAIRS];  /* pair -> row, or -1 (an id outside [0, E))         */
  int32_t active[FP4_MOE_ROUTE_FUSED_PAIRS]; /* the experts with pairs, ascending                 */
  int32_t first[FP4_MOE_ROUTE_FUSED_PAIRS];  /* the first row of each                             */
  int32_t actives, valid, e, lo, hi;         /* counts; this CTA's slot: its expert (-1: none), rows */
};

/* Warp 0: a pair's row is the valid pairs of lower experts plus the pairs of its expert before it
 * (an expert's pairs stay in pair order, which no value depends on; the routing kernel's order
 * follows its atomics), an expert's place in the active list the lower experts with pairs. The
 * lanes compare ids bit by bit from the top with one ballot per bit (few registers: a loop over the
 * other lanes' ids made the lean kernels spill). */
__device__ __forceinline__ void route_warp(const grouped_params &p, route_smem *rs) {
  const int lane = threadIdx.x & 31;
  const int pairs = (int)(p.a.route.tokens * p.a.route.top_k); /* <= 32: the host's rule, checked at the launch */
  const int id = lane < pairs ? p.a.route.ids[lane] : -1;
  const bool valid = lane < pairs && id >= 0 && id < p.a.experts;
  const unsigned vmask = __ballot_sync(0xFFFFFFFFu, valid);
  /* eq: the valid lanes whose id agrees with this one's on the bits so far; less: those below it */
  unsigned eq = vmask, less = 0;
  const int bits = p.a.experts > 1 ? 32 - __clz((int)(p.a.experts - 1)) : 0;
#pragma unroll 1
  for (int b = bits - 1; b >= 0; b--) {
    const bool one = (id >> b) & 1;
    const unsigned ones = __ballot_sync(0xFFFFFFFFu, valid && one);
    less |= one ? eq & ~ones : 0u;
    eq &= one ? ones : ~ones;
  }
  const int before = __popc(eq & ((1u << lane) - 1u)), below = __popc(less);
  const bool leader = valid && before == 0;
  const unsigned lmask = __ballot_sync(0xFFFFFFFFu, leader);
  const int lower = __popc(less & lmask);
  const int row = below + before;
  if (valid) rs->sorted[row] = lane;
  if (lane < pairs) rs->place[lane] = valid ? row : -1;
  if (leader) {
    rs->active[lower] = id;
    rs->first[lower] = below;
  }
  const int64_t slot = cta_slot();
  const unsigned hit = __ballot_sync(0xFFFFFFFFu, leader && lower == slot);
  const int src = hit ? __ffs(hit) - 1 : 0;
  const int e = __shfl_sync(0xFFFFFFFFu, id, src), lo = __shfl_sync(0xFFFFFFFFu, below, src);
  const unsigned rows = __shfl_sync(0xFFFFFFFFu, eq, src);
  if (lane == 0) {
    rs->actives = __popc(lmask);
    rs->valid = __popc(vmask);
    rs->e = hit ? e : -1;
    rs->lo = lo;
    rs->hi = lo + __popc(rows);
  }
}

/* The grid's first CTA, all threads: route's outputs from rs (offsets[x] = the valid pairs with an id
 * below x: the first row of the first active expert from x on). */
__device__ __forceinline__ void route_publish(const grouped_params &p, const route_smem *rs) {
  const fp4_cuda_route_args &r = p.a.route;
  const int tid = threadIdx.x, nt = blockDim.x, pairs = (int)(r.tokens * r.top_k);
  for (int64_t x = tid; x <= r.experts; x += nt) {
    int k = 0;
    while (k < rs->actives && rs->active[k] < x) k++;
    r.offsets[x] = k < rs->actives ? rs->first[k] : rs->valid;
  }
  if (tid < pairs) {
    r.inverse[tid] = rs->place[tid];
    if (rs->place[tid] >= 0) r.sorted[rs->place[tid]] = tid;
  }
  if (tid < rs->actives) r.active[tid] = rs->active[tid];
  if (r.arrivals)
    for (int64_t x = tid; x < r.arrival_slots; x += nt) r.arrivals[x] = 0u; /* the down launch's counters */
  if (tid == 0) {
    *r.active_count = rs->actives;
    if (r.shared_offsets) {
      r.shared_offsets[0] = 0;
      r.shared_offsets[1] = r.tokens;
    }
  }
}

/* expert_start with the routing in the launch: the slot's expert and rows from route_warp. */
template <bool NV, bool F16>
__device__ __forceinline__ bool routed_expert_start(const grouped_params &p, uint32_t *table, route_smem *rs,
                                                    int64_t *e, int64_t *lo, int64_t *hi, out_scale *sc) {
  if (NV)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<F16>(i);
  fp4_pdl_wait(); /* the ids and the activations come from earlier kernels */
  if (threadIdx.x < 32) route_warp(p, rs);
  __syncthreads(); /* rs and the table are written */
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) route_publish(p, rs);
  if (rs->e < 0) return false;
  *e = rs->e, *lo = rs->lo, *hi = rs->hi;
  *sc = load_out_scale(p, p.a.w_mult ? p.a.w_mult + *e : NULL);
  return true;
}

/* expert_start for the lean kernel, whose grid's last slot runs the extra expert when there is one
 * (extra: set; its rows [0, extra_rows), its multiplier; e = 0), and whose gate_up forms on the
 * compile-time K walk (ROUTE: SiLU*up in the epilogue, the only ones the host's rule gives the
 * routing; in the other forms the code made ptxas spill on sm_90a) can do the routing themselves
 * (p.a.route.ids: their a_rows are then rs->sorted). */
template <bool NV, bool F16, bool EXTRA, bool ROUTE>
__device__ __forceinline__ bool lean_expert_start(const grouped_params &p, uint32_t *table, route_smem *rs, bool *extra,
                                                  int64_t *e, int64_t *lo, int64_t *hi, out_scale *sc) {
  *extra = EXTRA && p.a.extra_rows > 0 && cta_slot() == cta_slots() - 1;
  if (ROUTE && !*extra && p.a.route.ids) return routed_expert_start<NV, F16>(p, table, rs, e, lo, hi, sc);
  if (!*extra) return expert_start<NV, F16>(p, table, e, lo, hi, sc);
  if (NV)
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<F16>(i);
  fp4_pdl_wait(); /* the extra expert's activations come from earlier kernels too */
  __syncthreads();
  *e = 0, *lo = 0, *hi = p.a.extra_rows;
  *sc = load_out_scale(p, p.a.extra_w_mult);
  return true;
}

template <int FMT, int ACT, int NT, int U>
__global__ void __launch_bounds__(kMmaMaxWarps * 32) grouped_mma_kernel(grouped_params p) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kSlab = act_walk<ACT>::kSlab;
  extern __shared__ float red[];
  __shared__ uint32_t table[NV ? 256 : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  /* Warps [tile * wpt, tile * wpt + wpt) share one 16-row weight tile and split its K slabs. */
  const int wpt = p.warps_per_tile, kw = warp % wpt;
  int64_t e, lo, hi;
  out_scale sc;
  if (!expert_start<NV, ACT == FP4_CUDA_ACT_F16>(p, table, &e, &lo, &hi, &sc)) return;
  const double scale = sc.value<NV>(p);
  const int64_t K = p.a.k, n0 = ((int64_t)blockIdx.x * (warps / wpt) + warp / wpt) * 16;
  const bool tile_in_n = n0 < p.a.n; /* the last CTA's spare tiles load nothing and store nothing */
  const int nslabs = (int)(K >> 7);
  const uint8_t *w = p.a.w + e * p.w_expert_bytes, *ws = p.a.w_scales + e * p.a.w_scale_stride;
  /* Rows past N read row N-1 (valid memory) and are never stored. */
  const int64_t ra = min(n0 + g, p.a.n - 1), rb = min(n0 + g + 8, p.a.n - 1);
  const uint8_t *wa_ptr = w + ra * (K >> 1) + 16 * t, *wb_ptr = w + rb * (K >> 1) + 16 * t;
  const scale_walk swa = make_walk<NV>(ws, p.a.w_layout, p.wC, ra, t);
  const scale_walk swb = make_walk<NV>(ws, p.a.w_layout, p.wC, rb, t);
  const int64_t row_bytes = ACT == FP4_CUDA_ACT_FP4 ? K / 2 : p.a.lda * act_walk<ACT>::kElem;
  constexpr int kChunkRows = 8 * NT;

  for (int64_t r0 = lo + cta_split() * kChunkRows; r0 < hi; r0 += cta_splits() * kChunkRows) {
    const char *rowp[NT];
    scale_walk asw[NT];
    bool valid[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      const int64_t pr = r0 + nt * 8 + g;
      valid[nt] = pr < hi;
      const int64_t arow = valid[nt] ? (p.a.a_rows ? (int64_t)(p.a.a_rows[pr] / p.a.a_div) : pr) : 0;
      rowp[nt] = static_cast<const char *>(p.a.a) + arow * row_bytes + t * (kSlab / 4);
      asw[nt].base = NULL;
      asw[nt].stride = 0;
      if (ACT == FP4_CUDA_ACT_FP4 && valid[nt]) asw[nt] = make_walk<NV>(p.a.a_scales, p.a.a_layout, p.aC, arow, t);
    }
    float acc[1][NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[0][nt][0] = acc[0][nt][1] = acc[0][nt][2] = acc[0][nt][3] = 0.0f;
    for (int s0 = tile_in_n ? kw : nslabs; s0 < nslabs; s0 += wpt * U) {
      uint4 wa[U], wb[U];
      uint32_t sca[U], scb[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int s = s0 + u * wpt;
        if (s < nslabs) load_slab<NV>(wa_ptr, wb_ptr, swa, swb, s, wa[u], wb[u], sca[u], scb[u]);
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int s = s0 + u * wpt;
        if (s < nslabs) {
          const char *rs[NT];
#pragma unroll
          for (int nt = 0; nt < NT; nt++) rs[nt] = rowp[nt] + (int64_t)s * kSlab;
          slab_mma_rows<FMT, ACT, NT, 1>(rs, asw, valid, s, table, &wa[u], &wb[u], &sca[u], &scb[u], acc);
        }
      }
    }
    if (wpt == 1) { /* the warp holds its tile's whole sum */
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) mma_store(p, r0, hi, n0, nt, c, lane, scale, acc[0][nt][c]);
      continue;
    }
    /* Fixed-order reduction over the tile's warps by its first warp; red is reused by the next
     * chunk after the barrier. */
    constexpr int kPerWarp = NT * 128;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) red[warp * kPerWarp + (nt * 4 + c) * 32 + lane] = acc[0][nt][c];
    __syncthreads();
    if (kw == 0)
      for (int idx = lane; idx < kPerWarp; idx += 32) {
        float v = 0.0f;
        for (int w8 = 0; w8 < wpt; w8++) v = __fadd_rn(v, red[(warp + w8) * kPerWarp + idx]);
        mma_store(p, r0, hi, n0, idx >> 7, (idx >> 5) & 3, lane, scale, v);
      }
    __syncthreads();
  }
  fp4_pdl_launch_dependents();
}

/* MINB is what ptxas fits on sm_90a without spilling; the other targets' ptxas needs a few more
 * registers for two row tiles (4 bytes spilled on sm_86 and sm_89 at 5 CTAs per SM): one CTA less. */
constexpr int moe_lean_blocks_here(int minb, int R) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 900
  return R == 2 && minb > 4 ? 4 : minb;
#else
  (void)R;
  return minb;
#endif
}

/* Arrival counting at GPU scope: a release add that returns nothing (the arriving CTA does not wait
 * for it), and the acquire load the waiting CTA spins on. */
__device__ __forceinline__ void arrive_release(uint32_t *count) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t *count) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}

/* The layer's combine in the down launch (p.a.combine.out set; fp4_cuda_grouped_args.combine): the
 * CTA has stored its outputs of columns [c0, c1) (its x block). Every CTA of the block but one
 * counts itself on the block's counter (thread 0's release add, after the barrier that orders the
 * CTA's stores before it) and exits; the combiner, the block's last CTA in launch order, waits until
 * all of them have counted (thread 0's acquire load, then the barrier) and combines those columns of
 * every token, reading the rows through L2 (combine_columns). The wait rests on the GPU dispatching
 * a grid's CTAs in launch order: when the combiner runs, every CTA it waits for has started, and
 * none of those waits for anything. A first form had every CTA add with a returned count and the last to arrive
 * combine: each CTA then waited for its add's round trip before exiting, and the Qwen3.5 EP8 step at
 * batch 8 (3 waves of down CTAs) ran 3.5% slower than with the combine kernel; this form keeps
 * one waiting CTA per block (bench/results/h200/2026-12-04-moe-combine-in-down/). Every thread of
 * the CTA calls it. */
__device__ __forceinline__ void combine_in_down(const grouped_params &p, int64_t xblock, int64_t c0, int64_t c1,
                                                unsigned arrivals, bool combiner) {
  __syncthreads();
  uint32_t *count = p.a.arrivals + xblock;
  if (!combiner) {
    if (threadIdx.x == 0) arrive_release(count);
    return;
  }
  if (threadIdx.x == 0)
    while (load_acquire(count) < arrivals - 1u) {
    }
  __syncthreads();
  const int cols = (int)(c1 - c0);
  for (int i = threadIdx.x; i < (int)p.a.combine.tokens * cols; i += blockDim.x)
    combine_columns<1>(p.a.combine, i / cols, c0 + i % cols, 0);
}

/* combine_in_down for the lean kernel's CTA: its x block (the cluster's, KS) covers the
 * span * kGroups groups of R 16-row tiles from its first, as the kernel walks them (plain forms:
 * not SILU), and every row split, slot and cluster rank of the grid arrives there; the combiner is
 * the last slot's last row split (its cluster's last rank). */
template <int R, int KW, bool KS>
__device__ __forceinline__ void lean_combine(const grouped_params &p) {
  const unsigned parts = KS ? (unsigned)p.kparts : 1u;
  const int64_t xblock = blockIdx.x / parts;
  const int64_t cols = (int64_t)(R == 2 ? p.lean_span : 1) * 16 * R * (kLeanWarps / KW);
  const int64_t c0 = xblock * cols, c1 = c0 + cols < p.a.n ? c0 + cols : p.a.n;
  const bool combiner = blockIdx.z == gridDim.z - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.x % parts == parts - 1;
  combine_in_down(p, xblock, c0, c1, gridDim.y * gridDim.z * parts, combiner);
}

/* The decode kernel (one token tile: at most 8 rows per expert chunk, NT = 1): the dense lean
 * kernel's streaming loop (lean_stream) over one expert. A CTA of kLeanWarps warps covers R 16-row
 * weight tiles of its expert, warp w taking slabs w, w + kLeanWarps, ...; a register cap of MINB
 * CTAs per SM keeps 20-24 warps per SM loading. Two tiles (one slab of each in flight per warp,
 * each activation fragment serving both) at 5 CTAs per SM beat one tile (two slabs in flight) at 6:
 * the Qwen3.5 layer 8-12% faster at B = 1-64, DeepSeek-R1 2-10% (bench/results/h200/
 * 2026-11-30-moe-decode/README.md); four tiles at 3 were
 * slower at B = 1 (fewer CTAs). With p.lean_span > 1 a CTA walks that many consecutive groups of R
 * tiles of its expert; with KW < kLeanWarps, KW warps share a group's K and the CTA covers
 * kLeanWarps / KW groups (KW = 1: each warp its own R tiles and all of K; the host's rules for both
 * are at the launch). Rows past the chunk read the chunk's last row (valid memory; an MMA output
 * column depends only on its own activation row) and are never stored. The warps' partial sums are
 * added in a fixed order (deterministic). */
template <int FMT, int ACT, int U, int MINB, int R, int KW = kLeanWarps, int KC = 0, bool SILU = false, bool EXTRA = false,
          bool KS = false>
__global__ void __launch_bounds__(kLeanWarps * 32, moe_lean_blocks_here(MINB, R)) grouped_lean_kernel(grouped_params p) {
  static_assert(ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16, "the lean decode kernel takes bf16/f16 rows");
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kSlab = act_walk<ACT>::kSlab;
  static_assert(KW == 1 || KW == 2 || KW == kLeanWarps, "KW warps split a group's K");
  static_assert(!KS || KW == kLeanWarps, "the cluster K split is built on the four-warp K split");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (KS) { /* clusters are SM90+; the host refuses the ".c<C>" variants below */
    __trap();
    return;
  }
#endif
  constexpr int kGroups = kLeanWarps / KW;          /* groups of R tiles per CTA step */
  __shared__ float red[KW == 1 ? 1 : kLeanWarps * R * 128];
  __shared__ float sums[KS ? kGroups * R * 128 : 1]; /* KS: this CTA's sums, read by the cluster's rank 0 */
  __shared__ uint32_t table[NV ? 256 : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  int64_t e, lo, hi;
  out_scale sc;
  bool extra;
  /* EXTRA: the grid's last slot runs the extra expert (a template flag: the pointer selects spill
   * the 96-register forms that do not need them) */
  __shared__ route_smem rs; /* p.a.route.ids: the routing of this launch */
  constexpr bool kRoute = SILU && KC != 0; /* the forms that can do the routing (lean_expert_start) */
  constexpr bool kCombine = !SILU && KC != 0; /* the forms that can do the layer's combine (down) */
  if (!lean_expert_start<NV, ACT == FP4_CUDA_ACT_F16, EXTRA, kRoute>(p, table, &rs, &extra, &e, &lo, &hi, &sc)) {
    if (kCombine && p.a.combine.out) lean_combine<R, KW, KS>(p); /* a slot without rows counts too */
    return;
  }
  /* The run-time K walk takes its output scale here: the three scalars kept past its loop spill
   * registers in some of its forms (sm_90a); the compile-time walk takes it after its loop, below. */
  const double scale_now = KC == 0 ? sc.value<NV>(p) : 0.0;
  const bool x = EXTRA && extra; /* without EXTRA the expressions below are the plain forms, read where used */
  const int64_t K = p.a.k;
  const int nslabs = (int)(K >> 7);
  const int64_t row_bytes = p.a.lda * act_walk<ACT>::kElem;
  const int span = R == 2 ? p.lean_span : 1; /* the one-tile variant has no registers to spare */
  /* KS: the kparts CTAs of a cluster (consecutive in x; the rank is blockIdx.x % kparts) take
   * contiguous parts [s_begin, s_end) of the K slabs of the same row groups. */
  const int kpart = KS ? (int)(blockIdx.x % (unsigned)p.kparts) : 0;
  const int64_t xblock = KS ? blockIdx.x / (unsigned)p.kparts : blockIdx.x;
  const int s_begin = KS ? (int)((int64_t)kpart * nslabs / p.kparts) : 0;
  const int s_end = KS ? (int)((int64_t)(kpart + 1) * nslabs / p.kparts) : nslabs;
  const int slab0 = s_begin + warp % KW; /* slabs slab0, slab0 + KW, ... (< s_end) of the warp's group */
  /* SILU (p.a.silu_out; R = 2): a group is gate tile rows [row0, row0 + 16) and the up rows I
   * further on, so the CTAs cover the I gate rows, with as many groups as the plain walk has over 2I
   * rows. A template flag: the run-time form spilled the MXFP4 instantiations. */
  static_assert(!SILU || R == 2, "SiLU*up pairs the two tiles");
  constexpr bool silu = SILU;
  const int64_t rows_out = silu ? p.a.n / 2 : p.a.n, tile_stride = silu ? rows_out : 16;
  const int64_t group_rows = silu ? 16 : 16 * R, step_rows = group_rows * kGroups;
  const int64_t first = xblock * span * step_rows;
  for (int64_t n0 = first; n0 < rows_out && n0 < first + span * step_rows; n0 += step_rows) {
    const int64_t row0 = n0 + (warp / KW) * group_rows; /* this warp's group's first weight row */
    /* A group wholly past N: with KW = 1 the warp stops (no barrier follows); with KW = 2 it
     * streams row N-1 again (lean_weights clamps; nothing is stored), as a branch here spills. */
    if (KW == 1 && row0 >= rows_out) break;
    const lean_weights<NV, R> lw(x ? p.a.extra_w : p.a.w + e * p.w_expert_bytes,
                                 x ? p.a.extra_w_scales : p.a.w_scales + e * p.a.w_scale_stride, p.a.w_layout, p.wC,
                                 p.a.n, K, row0, slab0, KW, g, t, tile_stride);
    for (int64_t r0 = lo + cta_split() * 8; r0 < hi; r0 += cta_splits() * 8) {
      const int64_t pr = min(r0 + g, hi - 1);
      const int64_t arow = x ? pr
                           : kRoute && p.a.route.ids
                               ? (int64_t)(rs.sorted[pr & (FP4_MOE_ROUTE_FUSED_PAIRS - 1)] / p.a.a_div)
                           : p.a.a_rows ? (int64_t)(p.a.a_rows[pr] / p.a.a_div)
                                        : pr;
      const char *act[1] = {static_cast<const char *>(x ? p.a.extra_a : p.a.a) + arow * row_bytes + t * (kSlab / 4) +
                            slab0 * kSlab};
      const scale_walk asw[1] = {{NULL, 0}}; /* activation scales: FP4 rows only */
      float acc[R][1][4];
#pragma unroll
      for (int r = 0; r < R; r++) acc[r][0][0] = acc[r][0][1] = acc[r][0][2] = acc[r][0][3] = 0.0f;
      if constexpr (KC != 0) /* the host checked K == KC, the 128x4 layout and whole 32-row groups */
        lean_stream_fixed_k<ACT, R, true, KW, KC, SILU>(lw.wa[0], lw.sa[0], act[0], slab0, s_end, table, acc,
                                                        rows_out * (KC / 2), rows_out * (KC / 16));
      else
        lean_stream<FMT, ACT, 1, R, U, true, KW>(lw.wa, lw.wb, lw.sa, lw.sb, lw.sstep, act, asw, slab0, s_end, table,
                                                acc);
      /* The output scale: on the compile-time K walk the empty asm keeps its arithmetic after the
       * walk (not hoisted to the kernel's start, where it would wait for the scalars' loads). */
      double scale = scale_now;
      if constexpr (KC != 0) {
        asm volatile("" : "+f"(sc.alpha_dev), "+f"(sc.a_dev), "+f"(sc.w));
        scale = sc.value<NV>(p);
      }
      void *const out = x ? p.a.extra_out : p.a.out;
      if (KW == 1) { /* the warp summed all of K: its results are final */
        if (silu) {
#pragma unroll
          for (int c = 0; c < 4; c++)
            silu_store(p, out, r0, hi, row0, rows_out, c, lane, scale, acc[0][0][c], acc[R - 1][0][c]);
        } else {
#pragma unroll
          for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) mma_store(p, out, r0, hi, row0 + 16 * r, 0, c, lane, scale, acc[r][0][c]);
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
          for (int c = 0; c < 4; c++) red[(warp * R + r) * 128 + c * 32 + lane] = acc[r][0][c];
        __syncthreads();
        if (silu) { /* gate (r = 0) and up (r = 1) of the same (c, lane), each summed in the fixed order */
          for (int idx = threadIdx.x; idx < kGroups * 128; idx += blockDim.x) {
            const int gi = idx / 128, in = idx % 128;
            float vg = 0.0f, vu = 0.0f;
            for (int kw = 0; kw < KW; kw++) {
              vg = __fadd_rn(vg, red[(gi * KW + kw) * R * 128 + in]);
              vu = __fadd_rn(vu, red[(gi * KW + kw) * R * 128 + (R - 1) * 128 + in]);
            }
            if (KS) {
              sums[gi * R * 128 + in] = vg;
              sums[gi * R * 128 + (R - 1) * 128 + in] = vu;
            } else {
              silu_store(p, out, r0, hi, n0 + gi * 16, rows_out, (in >> 5) & 3, in & 31, scale, vg, vu);
            }
          }
        } else {
          for (int idx = threadIdx.x; idx < kGroups * R * 128; idx += blockDim.x) {
            const int gi = idx / (R * 128), in = idx % (R * 128); /* group; (r, c, lane) of a warp's layout */
            float v = 0.0f;
            for (int kw = 0; kw < KW; kw++) v = __fadd_rn(v, red[(gi * KW + kw) * R * 128 + in]);
            if (KS) sums[idx] = v;
            else mma_store(p, out, r0, hi, n0 + gi * 16 * R + 16 * (in >> 7), 0, (in >> 5) & 3, in & 31, scale, v);
          }
        }
        if constexpr (KS) {
          /* The cluster's rank 0 adds the ranks' sums in rank order (the result does not depend on
           * which CTA finishes first) and stores them; the second barrier keeps every CTA's shared
           * memory alive until rank 0 has read it. Every CTA of a cluster has the same expert and
           * row chunks, so all of them reach both barriers. */
          fp4_cluster_barrier();
          if (kpart == 0) {
            for (int idx = threadIdx.x; idx < kGroups * (silu ? 128 : R * 128); idx += blockDim.x) {
              if (silu) {
                const int gi = idx / 128, in = idx % 128;
                float vg = 0.0f, vu = 0.0f;
                for (int k = 0; k < p.kparts; k++) {
                  vg = __fadd_rn(vg, fp4_cluster_ld_f32(sums + gi * R * 128 + in, (unsigned)k));
                  vu = __fadd_rn(vu, fp4_cluster_ld_f32(sums + gi * R * 128 + (R - 1) * 128 + in, (unsigned)k));
                }
                silu_store(p, out, r0, hi, n0 + gi * 16, rows_out, (in >> 5) & 3, in & 31, scale, vg, vu);
              } else {
                const int gi = idx / (R * 128), in = idx % (R * 128);
                float v = 0.0f;
                for (int k = 0; k < p.kparts; k++) v = __fadd_rn(v, fp4_cluster_ld_f32(sums + idx, (unsigned)k));
                mma_store(p, out, r0, hi, n0 + gi * 16 * R + 16 * (in >> 7), 0, (in >> 5) & 3, in & 31, scale, v);
              }
            }
          }
          fp4_cluster_barrier();
        }
        __syncthreads(); /* red is reused by the next chunk */
      }
    }
  }
  fp4_pdl_launch_dependents();
  if (kCombine && p.a.combine.out) lean_combine<R, KW, KS>(p);
}

/* Token tiles per chunk from the mean rows per expert slot (the host knows no more). */
int mma_tiles_for(int64_t rows, int64_t slots) {
  const int64_t mean = (rows + slots - 1) / slots;
  return mean <= 8 ? 1 : mean <= 16 ? 2 : 8; /* 4 tiles spilled registers on sm_90a: 8 does not */
}

template <int FMT, int ACT, int NT, int U>
cudaError_t launch_mma_one(const grouped_params &p, dim3 grid, int warps, cudaStream_t s, int pdl) {
  const size_t smem = p.warps_per_tile > 1 ? (size_t)warps * NT * 128 * sizeof(float) : 0; /* <= 32 KiB */
  return fp4_cuda_launch(grouped_mma_kernel<FMT, ACT, NT, U>, grid, dim3(32 * warps), smem, s, pdl, p);
}

/* Slabs in flight per warp as in the dense kernel: 4 at one token tile, fewer as registers grow. */
template <int FMT, int ACT>
cudaError_t launch_mma_act(const grouped_params &p, dim3 grid, int warps, int nt, cudaStream_t s, int pdl) {
  switch (nt) {
  case 1: return launch_mma_one<FMT, ACT, 1, 4>(p, grid, warps, s, pdl);
  case 2: return launch_mma_one<FMT, ACT, 2, 2>(p, grid, warps, s, pdl);
  default: return launch_mma_one<FMT, ACT, 8, 1>(p, grid, warps, s, pdl);
  }
}

/* The decode kernel: two 16-row tiles at 5 CTAs per SM (96 registers), one slab of each in flight
 * per warp; or one tile at 6 (80 registers; 8 spilled on sm_80 to sm_100a), two slabs in flight,
 * as the dense lean kernel's decode variant (gemm_small_m_kernels.cuh, lean_blocks). */
/* CTAs per SM of the two-tile lean kernel (its launch bounds on sm_90a; 4 elsewhere, see
 * moe_lean_blocks_here); the default chooser's wave counts use it (config/moe_sm80.h,
 * lean_wave_ctas). */
constexpr int kLeanTwoTileBlocks = 5;

/* The cluster K split (p.kparts CTAs per cluster, consecutive in x): the two-tile kernel with four
 * warps sharing a group's K on the compile-time K walk, NVFP4 and bf16 rows, plain or in the fused
 * forms (the host's rules for the ".c<C>" variants, fp4_moe_variant_check). */
cudaError_t launch_lean_cluster(const grouped_params &p, dim3 grid, cudaStream_t s, int pdl) {
  constexpr int FMT = FP4_FORMAT_NVFP4, ACT = FP4_CUDA_ACT_BF16, B = kLeanTwoTileBlocks;
  const dim3 block(32 * kLeanWarps), cluster((unsigned)p.kparts, 1, 1);
#define LEAN_CLUSTER(KC_, SILU_, EXTRA_)                                                                          \
  if (p.a.k == KC_)                                                                                              \
    return fp4_cuda_launch_cluster(grouped_lean_kernel<FMT, ACT, 1, B, 2, kLeanWarps, KC_, SILU_, EXTRA_, true>, grid, \
                                   block, cluster, 0, s, pdl, p);
#define LEAN_CLUSTER_PLAIN(KC_) LEAN_CLUSTER(KC_, false, false)
#define LEAN_CLUSTER_SILU(KC_) LEAN_CLUSTER(KC_, true, false)
#define LEAN_CLUSTER_SILU_EXTRA(KC_) LEAN_CLUSTER(KC_, true, true)
#define LEAN_CLUSTER_DOWN_EXTRA(KC_) LEAN_CLUSTER(KC_, false, true)
  if (p.a.silu_out && p.a.extra_rows) {
    FP4_MOE_SILU_K_LIST(LEAN_CLUSTER_SILU_EXTRA)
  } else if (p.a.silu_out) {
    FP4_MOE_SILU_K_LIST(LEAN_CLUSTER_SILU)
  } else if (p.a.extra_rows) {
    FP4_MOE_EXTRA_DOWN_K_LIST(LEAN_CLUSTER_DOWN_EXTRA)
  } else {
    FP4_MOE_FIXED_K_LIST(LEAN_CLUSTER_PLAIN)
  }
#undef LEAN_CLUSTER_DOWN_EXTRA
#undef LEAN_CLUSTER_SILU_EXTRA
#undef LEAN_CLUSTER_SILU
#undef LEAN_CLUSTER_PLAIN
#undef LEAN_CLUSTER
  return cudaErrorInvalidValue;
}

template <int FMT, int ACT>
cudaError_t launch_lean_one(const grouped_params &p, int rows, int kw, bool fixed_k, dim3 grid, cudaStream_t s,
                            int pdl) {
  const dim3 block(32 * kLeanWarps);
  constexpr int B = kLeanTwoTileBlocks;
  if (p.kparts > 1) {
    if constexpr (FMT == FP4_FORMAT_NVFP4 && ACT == FP4_CUDA_ACT_BF16)
      if (rows == 32 && kw == kLeanWarps && fixed_k) return launch_lean_cluster(p, grid, s, pdl);
    return cudaErrorInvalidValue;
  }
  if (p.a.silu_out || p.a.extra_rows) { /* the fused forms: NVFP4, bf16 rows, two tiles */
    if constexpr (FMT == FP4_FORMAT_NVFP4 && ACT == FP4_CUDA_ACT_BF16) {
      if (rows != 32) return cudaErrorInvalidValue;
#define LEAN_FUSED(KC_, SILU_, EXTRA_)                                                                           \
  if (p.a.k == KC_ || KC_ == 0) {                                                                               \
    if (kw == 1)                                                                                                \
      return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 1, KC_, SILU_, EXTRA_>, grid, block, 0, s, pdl, p); \
    if (kw == 2)                                                                                                \
      return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 2, KC_, SILU_, EXTRA_>, grid, block, 0, s, pdl, p); \
    return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, kLeanWarps, KC_, SILU_, EXTRA_>, grid, block, 0, s, \
                           pdl, p);                                                                             \
  }
#define LEAN_SILU(KC_) LEAN_FUSED(KC_, true, false)
#define LEAN_SILU_EXTRA(KC_) LEAN_FUSED(KC_, true, true)
#define LEAN_DOWN_EXTRA(KC_) LEAN_FUSED(KC_, false, true)
      if (p.a.silu_out && !p.a.extra_rows) { /* gate_up with SiLU*up; the compile-time K walk at the model
                                                 sets' hidden sizes, whole 128-row groups of gate rows */
        if (fixed_k) {
          FP4_MOE_SILU_K_LIST(LEAN_SILU)
          return cudaErrorInvalidValue;
        }
        LEAN_FUSED(0, true, false)
      }
      /* with the shared expert as the extra slot: the compile-time K walk only, gate_up (SiLU*up, K
       * the hidden size) and down (K the model sets' expert widths) */
      if (p.a.silu_out && fixed_k) {
        FP4_MOE_SILU_K_LIST(LEAN_SILU_EXTRA)
      }
      if (!p.a.silu_out && fixed_k) {
        FP4_MOE_EXTRA_DOWN_K_LIST(LEAN_DOWN_EXTRA)
      }
#undef LEAN_DOWN_EXTRA
#undef LEAN_SILU_EXTRA
#undef LEAN_SILU
#undef LEAN_FUSED
    }
    return cudaErrorInvalidValue;
  }
  if constexpr (FMT == FP4_FORMAT_NVFP4) { /* MXFP4's per-slab scale factoring spills in these forms */
    /* Whole 32-row groups in every CTA at any K split (N % 128 == 0): the addressing of
     * lean_stream_fixed_k (the host checked its rules, fp4_moe_variant_check), bf16 activations only. */
    if constexpr (ACT == FP4_CUDA_ACT_BF16) {
      if (rows == 32 && fixed_k) {
#define LEAN_FIXED_K(KC_)                                                                                       \
  if (p.a.k == KC_) {                                                                                          \
    if (kw == 1) return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 1, KC_>, grid, block, 0, s, pdl, p); \
    if (kw == 2) return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 2, KC_>, grid, block, 0, s, pdl, p); \
    return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, kLeanWarps, KC_>, grid, block, 0, s, pdl, p);    \
  }
        FP4_MOE_FIXED_K_LIST(LEAN_FIXED_K)
#undef LEAN_FIXED_K
        return cudaErrorInvalidValue;
      }
    }
    if (rows == 32 && kw == 1)
      return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 1>, grid, block, 0, s, pdl, p);
    if (rows == 32 && kw == 2)
      return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2, 2>, grid, block, 0, s, pdl, p);
  }
  if (rows == 32) return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 1, B, 2>, grid, block, 0, s, pdl, p);
  return fp4_cuda_launch(grouped_lean_kernel<FMT, ACT, 2, 6, 1>, grid, block, 0, s, pdl, p);
}

template <int FMT>
cudaError_t launch_lean(const grouped_params &p, int rows, int kw, bool fixed_k, dim3 grid, cudaStream_t s, int pdl) {
  if (fixed_k && p.a.act != FP4_CUDA_ACT_BF16) return cudaErrorInvalidValue;
  return p.a.act == FP4_CUDA_ACT_F16 ? launch_lean_one<FMT, FP4_CUDA_ACT_F16>(p, rows, kw, false, grid, s, pdl)
                                     : launch_lean_one<FMT, FP4_CUDA_ACT_BF16>(p, rows, kw, fixed_k, grid, s, pdl);
}

template <int FMT>
cudaError_t launch_mma_fmt(const grouped_params &p, dim3 grid, int warps, int nt, cudaStream_t s, int pdl) {
  switch (p.a.act) {
  case FP4_CUDA_ACT_BF16: return launch_mma_act<FMT, FP4_CUDA_ACT_BF16>(p, grid, warps, nt, s, pdl);
  case FP4_CUDA_ACT_F16: return launch_mma_act<FMT, FP4_CUDA_ACT_F16>(p, grid, warps, nt, s, pdl);
  case FP4_CUDA_ACT_F32: return launch_mma_act<FMT, FP4_CUDA_ACT_F32>(p, grid, warps, nt, s, pdl);
  case FP4_CUDA_ACT_FP4: return launch_mma_act<FMT, FP4_CUDA_ACT_FP4>(p, grid, warps, nt, s, pdl);
  default: return cudaErrorInvalidValue;
  }
}

/* ---- CUDA-core kernel launch -------------------------------------------------------------------- */

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
  /* The routing in the launch: the lean kernel's SiLU*up form on the compile-time K walk, its pairs
   * one warp's lanes, the launch's rows */
  const fp4_cuda_route_args &r = a->route;
  if (r.ids && (a->variant.kernel != FP4_MOE_KERNEL_LEAN || !a->silu_out || !a->variant.fixed_k || r.top_k < 1 ||
                r.tokens < 1 || r.tokens * r.top_k > FP4_MOE_ROUTE_FUSED_PAIRS || r.tokens * r.top_k != a->rows ||
                r.top_k != a->a_div || r.experts != a->experts || !r.offsets || !r.sorted || !r.inverse ||
                !r.active || !r.active_count))
    return (int)cudaErrorInvalidValue;
  /* The combine in the launch: the lean kernel's plain form on the compile-time K walk, its f32 rows
   * (and the extra expert's) the rows it combines */
  const fp4_cuda_combine_args &c = a->combine;
  if (c.out && (a->variant.kernel != FP4_MOE_KERNEL_LEAN || a->variant.rows != 32 || !a->variant.fixed_k ||
                a->silu_out || a->out_dtype != FP4_DTYPE_F32 || a->ldo != a->n || !a->arrivals ||
                a->arrival_slots < 1 || c.down != a->out || c.shared != (a->extra_rows > 0 ? a->extra_out : NULL) ||
                c.hidden != a->n || c.tokens < 1 || c.top_k < 1 || !c.inverse || !c.weights))
    return (int)cudaErrorInvalidValue;
  grouped_params p;
  p.a = *a;
  const int bs = a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  p.w_expert_bytes = a->n * (a->k / 2);
  p.wC = a->k / bs;
  p.aC = a->k / bs;
  p.warps_per_tile = 1;
  p.lean_span = 1;
  p.kparts = 1;
  cudaStream_t s = (cudaStream_t)stream;
  if (a->slots > 65535 || a->splits > 65535) return (int)cudaErrorInvalidConfiguration;
  const fp4_moe_variant &v = a->variant;
  /* The variant was checked against this GEMM by the host (fp4_moe_variant_check): K % 128 == 0,
   * 16-byte aligned rows and the activation types of the tensor-core kernels, the lean kernel's
   * K split, span and walk. What is left here are the shape's own parameters. */
  if (v.kernel == FP4_MOE_KERNEL_MMA || v.kernel == FP4_MOE_KERNEL_LEAN) {
    if (a->k % 128) return (int)cudaErrorInvalidValue;
    const int64_t tiles16 = (a->n + 15) / 16;
    if (tiles16 > 0x7FFFFFFF) return (int)cudaErrorInvalidConfiguration;
    const int nt = mma_tiles_for(a->rows, a->slots);
    /* A split past its expert's chunks exits at once, but such CTAs still cost a launch slot: cap
     * the splits at twice the mean chunk count (headroom for a hot expert), at least 1. */
    const int64_t chunks = 2 * (((a->rows + a->slots - 1) / a->slots + 8 * nt - 1) / (8 * nt));
    const int64_t splits = a->splits < chunks ? a->splits : chunks < 1 ? 1 : chunks;
    if (v.kernel == FP4_MOE_KERNEL_LEAN) {
      /* The lean kernel (bf16/f16 rows): R-row groups of its expert per CTA step, ksplit warps
       * sharing a group's K, span groups walked per CTA (docs/moe.md: the measurements behind the
       * default rules, config/moe_config.c). */
      const bool act16 = a->act == FP4_CUDA_ACT_BF16 || a->act == FP4_CUDA_ACT_F16;
      const int rows = v.rows, kw = v.ksplit;
      if (!act16 || (rows != 16 && rows != 32) || (kw != 1 && kw != 2 && kw != kLeanWarps) || v.span < 1 ||
          (rows == 16 && (kw != kLeanWarps || v.span != 1)) || (kw < kLeanWarps && a->format != FP4_FORMAT_NVFP4))
        return (int)cudaErrorInvalidValue;
      /* SiLU*up in the epilogue: the two-tile form, bf16 act of I % 16 == 0 columns (I % 128 == 0 on
       * the compile-time K walk); a group is one gate tile and its up tile, so there are I / 16. */
      if (a->silu_out && (rows != 32 || a->n % 32 || (v.fixed_k && a->n % 256) || a->out_dtype != FP4_DTYPE_BF16 ||
                          a->ldo < a->n / 2 || a->format != FP4_FORMAT_NVFP4 || a->act != FP4_CUDA_ACT_BF16))
        return (int)cudaErrorInvalidValue;
      p.lean_span = v.span;
      /* The cluster K split: kparts CTAs per cluster (2 or 4), every warp at least one slab of its
       * CTA's part, one group per CTA (the host's rules; clusters are SM90+). */
      p.kparts = v.kparts > 1 ? v.kparts : 1;
      if (p.kparts > 1 && (p.kparts > 4 || kw != kLeanWarps || v.span != 1 || !v.fixed_k ||
                           a->k / 128 < (int64_t)kLeanWarps * p.kparts))
        return (int)cudaErrorInvalidValue;
      const int64_t groups = a->silu_out ? a->n / 32 : (tiles16 + rows / 16 - 1) / (rows / 16);
      const int64_t per_cta = (int64_t)(kLeanWarps / kw) * p.lean_span; /* groups */
      /* the extra expert: one more slot, its row chunks split like a routed expert's */
      const int64_t extra_chunks = (a->extra_rows + 7) / 8;
      const int64_t extra_splits = a->splits < extra_chunks ? a->splits : extra_chunks;
      const int64_t zsplits = a->extra_rows > 0 && extra_splits > splits ? extra_splits : splits;
      if (a->extra_rows < 0 || (a->extra_rows > 0 && (rows != 32 || !a->extra_w || !a->extra_w_scales || !a->extra_a ||
                                                      !a->extra_out)) ||
          a->slots + 1 > 65535)
        return (int)cudaErrorInvalidValue;
      const int64_t ctas_x = (groups + per_cta - 1) / per_cta * p.kparts;
      if (ctas_x > 0x7FFFFFFF) return (int)cudaErrorInvalidConfiguration;
      if (c.out && ctas_x / p.kparts > a->arrival_slots) return (int)cudaErrorInvalidValue; /* a counter per x block */
      const dim3 grid((unsigned)ctas_x, (unsigned)zsplits, (unsigned)(a->slots + (a->extra_rows > 0)));
      return (int)(a->format == FP4_FORMAT_NVFP4
                       ? launch_lean<FP4_FORMAT_NVFP4>(p, rows, kw, v.fixed_k != 0, grid, s, pdl)
                       : launch_lean<FP4_FORMAT_MXFP4>(p, rows, kw, v.fixed_k != 0, grid, s, pdl));
    }
    if (a->silu_out || a->extra_rows || c.out) return (int)cudaErrorInvalidValue; /* the lean kernel's only */
    /* Warps per 16-row tile splitting its K; any split sums in a fixed order (deterministic). */
    const int wpt = v.warps_per_tile;
    if ((wpt != 1 && wpt != 2 && wpt != 4 && wpt != 8) || wpt > a->k / 128) return (int)cudaErrorInvalidValue;
    p.warps_per_tile = wpt;
    const int64_t ctas_x = (tiles16 + kMmaMaxWarps / wpt - 1) / (kMmaMaxWarps / wpt);
    const dim3 grid((unsigned)ctas_x, (unsigned)splits, (unsigned)a->slots);
    return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_mma_fmt<FP4_FORMAT_NVFP4>(p, grid, kMmaMaxWarps, nt, s, pdl)
                                               : launch_mma_fmt<FP4_FORMAT_MXFP4>(p, grid, kMmaMaxWarps, nt, s, pdl));
  }
  if (v.kernel != FP4_MOE_KERNEL_FMA || a->silu_out || a->extra_rows) return (int)cudaErrorInvalidValue;
  const int64_t tiles = (a->n + kTileN - 1) / kTileN;
  if (tiles > 0x7FFFFFFF) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)tiles, (unsigned)a->splits, (unsigned)a->slots);
  return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_fmt<FP4_FORMAT_NVFP4>(p, grid, s, pdl)
                                             : launch_fmt<FP4_FORMAT_MXFP4>(p, grid, s, pdl));
}
