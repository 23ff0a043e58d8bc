/*
 * Small-M (decode) GEMMs: out[M, N] = scale * A[M, K] * dq(W)[N, K]^T for M <= 64, on SM80+: the
 * kernels and their launch, compiled once per weight format (gemm_small_m_nvfp4.cu,
 * gemm_small_m_mxfp4.cu: the two halves build in parallel); the entry point and the W4A4 prologue
 * route are in gemm_small_m.cu.
 *
 * Decode is bound by the bytes of the FP4 weights (0.5625 per weight), so the kernels stream W
 * with 16-byte loads that bypass L1, several 128-K slabs in flight per warp, and do the math on
 * tensor cores (mma.sync m16n8k16) with the weights as the 16-row A operand and up to 8 tokens per
 * B tile ("swap AB"), because CUDA-core FMAs cannot keep up with HBM at M = 4..64.
 *
 * Work split: a CTA owns 16, 32 or 64 weight rows (R tiles of 16); its warps split K (warp w takes
 * slabs w, w + warps, ...) and reduce through shared memory in a fixed order, so results are
 * deterministic run to run. With R > 1 a warp loads (and for W4A4 decodes) each activation
 * fragment once for R weight tiles: the activation work per weight shrinks R-fold.
 *
 * Exactness: e2m1 codes decode to bf16/f16 exactly with byte permutes; an NVFP4 weight
 * e2m1 * e4m3 is exact in bf16 and f16, so the block scale is applied with a 16-bit multiply. An
 * MXFP4 scale 2^(e-127) is not representable in 16 bits in general, so per row and 128-K slab the
 * kernel factors it as 2^(e - emax) (16-bit, exact while the slab's blocks lie within 2^126 (bf16)
 * or 2^22 (f16) of each other) times 2^(emax-127), applied to the slab's FP32 partial sum.
 * f32 activations are split into three bf16 parts (hi + mid + lo = x exactly) and multiplied on
 * three MMAs, keeping FP32 accuracy. All sums are FP32; alpha and the multipliers scale the FP32
 * result once.
 *
 * W4A4 runs two ways: the "small-m.*" configs decode the FP4 activations inside the streaming
 * loop; the "small-m.pro.*" configs dequantize them to bf16 once per GEMM and run the W4A16 kernel
 * (launch_w4a16_of below).
 *
 * K permutation: within each 8-element group the kernel pairs element i with element i + 4 in one
 * 32-bit register (that is what the nibble decode produces cheaply); the activation fragments
 * use the same pairing, so the dot product is unchanged.
 */
#ifndef FP4_BACKENDS_CUDA_GEMM_SMALL_M_KERNELS_CUH
#define FP4_BACKENDS_CUDA_GEMM_SMALL_M_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/small_m_common.cuh"
#include "backends/cuda/small_m_gemm.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {


/* The CTA's result: one warp stores its accumulators; several add their partial sums through
 * shared memory in warp order (deterministic) and every thread stores some of the sums.
 * KS (K split over a cluster of gridDim.y CTAs, SM90+): each CTA leaves its sums in shared memory
 * after the warps' partials, and the cluster's rank 0 adds the ranks' sums in rank order (the
 * result does not depend on which CTA finishes first) and stores them; a second cluster barrier
 * keeps every CTA's shared memory alive until rank 0 has read it. */
template <int R, int NT, bool KS = false>
__device__ __forceinline__ void reduce_store(const gemm_params &p, float *red, const float (&acc)[R][NT][4],
                                             int64_t row0, int warp, int warps, int lane) {
  if (!KS && warps == 1) {
    __syncwarp(); /* the staged device alpha (fp4_small_m_stage_alpha) is visible to the warp */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) store_out(p, row0 + 16 * r, nt, c, lane, acc[r][nt][c]);
    return;
  }
  constexpr int kPerWarp = R * NT * 128; /* floats of one warp's partial results */
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) red[warp * kPerWarp + ((r * NT + nt) * 4 + c) * 32 + lane] = acc[r][nt][c];
  __syncthreads();
  float *sums = red + warps * kPerWarp; /* KS: this CTA's sums, read by the cluster's rank 0 */
  for (int idx = threadIdx.x; idx < kPerWarp; idx += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < warps; w++) v = __fadd_rn(v, red[w * kPerWarp + idx]); /* fixed order */
    const int r = idx / (NT * 128), rest = idx % (NT * 128);
    if (KS) sums[idx] = v;
    else store_out(p, row0 + 16 * r, rest >> 7, (rest >> 5) & 3, rest & 31, v);
  }
  if (KS) {
    fp4_cluster_barrier(); /* every rank's sums are written */
    if (blockIdx.y == 0) /* cluster dims (1, gridDim.y, 1): the rank is blockIdx.y */
      for (int idx = threadIdx.x; idx < kPerWarp; idx += blockDim.x) {
        float v = 0.0f;
        for (unsigned k = 0; k < gridDim.y; k++) v = __fadd_rn(v, fp4_cluster_ld_f32(sums + idx, k));
        const int r = idx / (NT * 128), rest = idx % (NT * 128);
        store_out(p, row0 + 16 * r, rest >> 7, (rest >> 5) & 3, rest & 31, v);
      }
    fp4_cluster_barrier(); /* no CTA leaves before rank 0 has read its shared memory */
  }
}

/* R: 16-row weight tiles per CTA (every warp covers all of them on its slabs, so an activation
 * fragment serves R tiles). U: slabs whose weights one warp keeps in flight (16 B per lane, row and
 * tile each). Up to 16 tokens two CTAs share an SM (128 registers); with 4 or 8 token tiles, or
 * several row tiles, the accumulators need more registers. PF: the weight loads' L2 fetch unit
 * (ld_stream), 256 bytes where 4 or 8 warps read consecutive 64-byte pieces of a row in the same
 * step (as lean_slabs), none for 1 or 2 warps. KS: the K slabs are split over the gridDim.y CTAs of
 * a cluster (blockIdx.y takes the y-th contiguous part), which add their sums in reduce_store: more
 * CTAs where the weight has too few row groups to give every SM one (the ".k<S>" configs). */
template <int FMT, int ACT, int NT, int U, int R, int PF, bool KS = false>
__global__ void __launch_bounds__(kMaxWarps * 32, NT * R >= 4 ? 1 : 2) gemm_small_m_kernel(gemm_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (KS) { /* clusters are SM90+; the host refuses the ".k<S>" configs below */
    __trap();
    return;
  }
#endif
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  extern __shared__ float red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * R;
  const int nslabs = (int)(p.k >> 7);
  /* this CTA's slabs [s_begin, s_end): all of K, or its part of the cluster's split */
  const int s_begin = KS ? (int)((int64_t)blockIdx.y * nslabs / gridDim.y) : 0;
  const int s_end = KS ? (int)((int64_t)(blockIdx.y + 1) * nslabs / gridDim.y) : nslabs;
  const uint8_t *wa_ptr[R], *wb_ptr[R];
  scale_walk swa[R], swb[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    /* Rows past N read row N-1 (valid memory) and are never stored. */
    const int64_t ra = min(row0 + 16 * r + g, p.n - 1), rb = min(row0 + 16 * r + g + 8, p.n - 1);
    wa_ptr[r] = p.b + ra * (p.k >> 1) + 16 * t;
    wb_ptr[r] = p.b + rb * (p.k >> 1) + 16 * t;
    swa[r] = make_walk<NV>(p.b_scales, p.b_layout, p.C, ra, t);
    swb[r] = make_walk<NV>(p.b_scales, p.b_layout, p.C, rb, t);
  }
  act_walk<ACT> aw;
  const int64_t row_bytes = ACT == FP4_CUDA_ACT_FP4 ? p.lda : p.lda * act_walk<ACT>::kElem;
  aw.base = static_cast<const char *>(p.a) + g * row_bytes + t * (act_walk<ACT>::kSlab / 4);
  aw.tile = 8 * row_bytes;
  scale_walk asw[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    asw[nt].base = NULL;
    asw[nt].stride = 0;
    if (ACT == FP4_CUDA_ACT_FP4 && nt * 8 + g < p.m) asw[nt] = make_walk<NV>(p.a_scales, p.a_layout, p.C, nt * 8 + g, t);
  }
  bool valid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) valid[nt] = nt * 8 + g < p.m;
  float acc[R][NT][4];
  zero_acc<R, NT>(acc);
  /* NVFP4 weight scale byte -> 16-bit multiplier pair, looked up instead of converted per block. */
  __shared__ uint32_t table[NV ? 256 : 1];
  if (NV) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<ACT == FP4_CUDA_ACT_F16>(i);
    __syncthreads();
  }

  /* The activations of slab s start at aw.base + s * kSlab; walk a pointer instead. */
  const int64_t act_step = (int64_t)warps * act_walk<ACT>::kSlab;
  const char *act_slab = aw.base + (int64_t)(s_begin + warp) * act_walk<ACT>::kSlab;

  fp4_pdl_wait(); /* nothing is read before the producer of A (or W) has finished */
  fp4_small_m_stage_alpha(p);
  for (int s0 = s_begin + warp; s0 < s_end; s0 += warps * U, act_slab += U * act_step) {
    uint4 wa[U][R], wb[U][R];
    uint32_t sca[U][R], scb[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < s_end) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          wa[u][r] = ld_stream<PF>(wa_ptr[r] + (int64_t)s * 64);
          wb[u][r] = ld_stream<PF>(wb_ptr[r] + (int64_t)s * 64);
          sca[u][r] = load_scales<NV>(swa[r], s);
          scb[u][r] = load_scales<NV>(swb[r], s);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < s_end)
        slab_mma<FMT, ACT, NT, R>(act_slab + u * act_step, aw.tile, asw, valid, s, table, wa[u], wb[u], sca[u], scb[u],
                                  acc);
    }
  }
  fp4_pdl_launch_dependents(); /* every input has been read */

  reduce_store<R, NT, KS>(p, red, acc, row0, warp, warps, lane);
}

/* The lean variant: a fixed 4-warp CTA with a register cap (MINB CTAs per SM: 6 -> at most 80
 * registers, 8 -> 64), so 24 or 32 warps per SM hide the load latency instead of 16, and a
 * slab's instruction stream without branches or 64-bit multiplies, so ptxas schedules it as one
 * block:
 *  - token rows past M read row M-1 (valid memory) instead of loading behind a branch: an MMA's
 *    output column depends only on its own B column, and the columns of those rows are never
 *    stored (store_out), so the result is the same bit for bit;
 *  - weights, weight scales and activations are walked with pointers that advance by a constant
 *    per group of slabs (the scale layouts' step between slabs does not depend on the row).
 * The math per slab is the classic kernel's (slab_mma_rows), so results equal its results. */
template <int FMT, int ACT, int NT, int U, int R, int MINB>
__global__ void __launch_bounds__(kLeanWarps * 32, MINB) gemm_small_m_lean_kernel(gemm_params p) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kSlab = act_walk<ACT>::kSlab;
  extern __shared__ float red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * R;
  const int nslabs = (int)(p.k >> 7);
  const lean_weights<NV, R> lw(p.b, p.b_scales, p.b_layout, p.C, p.n, p.k, row0, warp, kLeanWarps, g, t);
  const int64_t row_bytes = ACT == FP4_CUDA_ACT_FP4 ? p.lda : p.lda * act_walk<ACT>::kElem;
  const char *act[NT];
  scale_walk asw[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int64_t tok = min((int64_t)(nt * 8 + g), p.m - 1);
    act[nt] = static_cast<const char *>(p.a) + tok * row_bytes + t * (kSlab / 4) + warp * kSlab;
    asw[nt].base = NULL;
    asw[nt].stride = 0;
    if (ACT == FP4_CUDA_ACT_FP4) asw[nt] = make_walk<NV>(p.a_scales, p.a_layout, p.C, tok, t);
  }
  float acc[R][NT][4];
  zero_acc<R, NT>(acc);
  __shared__ uint32_t table[NV ? 256 : 1];
  if (NV) {
    for (int i = threadIdx.x; i < 256; i += kLeanWarps * 32) table[i] = nv_weight_scale_pair<ACT == FP4_CUDA_ACT_F16>(i);
    __syncthreads();
  }

  fp4_pdl_wait(); /* nothing is read before the producer of A (or W) has finished */
  fp4_small_m_stage_alpha(p);
  lean_stream<FMT, ACT, NT, R, U, (MINB < 6)>(lw.wa, lw.wb, lw.sa, lw.sb, lw.sstep, act, asw, warp, nslabs, table, acc);
  fp4_pdl_launch_dependents(); /* every input has been read */
  reduce_store<R, NT>(p, red, acc, row0, warp, kLeanWarps, lane);
}

int tiles_for(int64_t m) { return fp4_small_m_token_tiles(m); }

size_t smem_for(int warps, int64_t m, int rows) { return fp4_small_m_smem(warps, m, rows); }

template <int FMT, int ACT, int NT, int U, int R, int PF>
cudaError_t launch_pf(const gemm_params &p, int warps, cudaStream_t stream, int pdl) {
  const int64_t ctas = (p.n + 16 * R - 1) / (16 * R);
  const size_t smem = smem_for(warps, p.m, 16 * R);
  if (smem > 48 * 1024) { /* above the default dynamic shared memory limit: opt in */
    const cudaError_t e = cudaFuncSetAttribute(gemm_small_m_kernel<FMT, ACT, NT, U, R, PF>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  return fp4_cuda_launch(gemm_small_m_kernel<FMT, ACT, NT, U, R, PF>, dim3((unsigned)ctas), dim3(32 * warps), smem,
                         stream, pdl, p);
}

/* The K split over clusters of ksplit CTAs (16-row CTAs of 4 or 8 warps, M <= 16, bf16/f16 rows:
 * the host's rules for the ".k<S>" configs): grid (row groups, ksplit), one cluster per row group,
 * shared memory for the warps' partials and the CTA's sums. */
template <int FMT, int ACT, int NT, int U>
cudaError_t launch_ksplit(const gemm_params &p, int warps, int ksplit, cudaStream_t stream, int pdl) {
  const int64_t ctas = (p.n + 15) / 16;
  const size_t smem = smem_for(warps, p.m, 16) + (size_t)NT * 128 * sizeof(float);
  return fp4_cuda_launch_cluster(gemm_small_m_kernel<FMT, ACT, NT, U, 1, 256, true>,
                                 dim3((unsigned)ctas, (unsigned)ksplit), dim3(32 * warps), dim3(1, (unsigned)ksplit, 1),
                                 smem, stream, pdl, p);
}

/* The 256 B prefetch form for 4 and 8 warps, the plain one for 1 and 2. The 32- and 64-row configs
 * all have 4 or 8 warps (config/dense_config.c; tests/test_dense_config.c checks it), so their plain
 * forms are not compiled: 40 of the 144 classic kernels, about 29% of this unit's compile time
 * (bench/results/build/cuda-compile-times.md). */
template <int FMT, int ACT, int NT, int U, int R>
cudaError_t launch_one(const gemm_params &p, int warps, cudaStream_t stream, int pdl) {
  if constexpr (R >= 2)
    return warps >= 4 ? launch_pf<FMT, ACT, NT, U, R, 256>(p, warps, stream, pdl) : cudaErrorInvalidConfiguration;
  else
    return warps >= 4 ? launch_pf<FMT, ACT, NT, U, R, 256>(p, warps, stream, pdl)
                      : launch_pf<FMT, ACT, NT, U, R, 0>(p, warps, stream, pdl);
}

/* The CTAs per SM a lean variant is compiled for: the configuration's target (6 or 8) where ptxas
 * fits the variant into 80 or 64 registers without spilling on every target architecture (ptxas
 * -warn-spills, sm_80 to sm_120a), else the most that fits: 16 rows at one token tile with bf16/f16
 * activations (the decode case) meet 8; 32 rows, or two token tiles, stop at 6 (MXFP4 32 rows at
 * 5: its per-slab scale factoring); f32 activations (three MMAs per step) and FP4 activations
 * (decoded in the loop) need more registers. */
constexpr int lean_blocks(int target, int FMT, int ACT, int NT, int R) {
  return ACT == FP4_CUDA_ACT_F32   ? 4
         : ACT == FP4_CUDA_ACT_FP4 ? (R == 2 ? 5 : 6)
         : R == 2                  ? (FMT == FP4_FORMAT_MXFP4 ? 5 : 6)
         : NT == 2                 ? 6
                                   : target;
}

template <int FMT, int ACT, int NT, int U, int R, int TARGET>
cudaError_t launch_lean(const gemm_params &p, cudaStream_t stream, int pdl) {
  constexpr int kBlocks = lean_blocks(TARGET, FMT, ACT, NT, R);
  const int64_t ctas = (p.n + 16 * R - 1) / (16 * R);
  return fp4_cuda_launch(gemm_small_m_lean_kernel<FMT, ACT, NT, U, R, kBlocks>, dim3((unsigned)ctas),
                         dim3(32 * kLeanWarps), smem_for(kLeanWarps, p.m, 16 * R), stream, pdl, p);
}

/* Lean kernels: 16 rows take M <= 16 (two slabs in flight per warp at one token tile, one at two),
 * 32 rows M <= 8 (one slab: two row tiles already give 64 B per lane; two token tiles would not fit
 * the register cap). */
template <int FMT, int ACT, int TARGET>
cudaError_t launch_lean_rows(const gemm_params &p, int rows, cudaStream_t stream, int pdl) {
  if (rows == 32) return launch_lean<FMT, ACT, 1, 1, 2, TARGET>(p, stream, pdl); /* M <= 8: the caller checks */
  if (p.m <= 8) return launch_lean<FMT, ACT, 1, 2, 1, TARGET>(p, stream, pdl);
  return launch_lean<FMT, ACT, 2, 1, 1, TARGET>(p, stream, pdl);
}

/* Slabs in flight: 4 x 32 B per lane in total at one token tile (16 rows: four slabs), fewer as the
 * token tiles' registers grow. 32 rows take M <= 32 and 64 rows M <= 16: row tiles x token tiles
 * <= 8 keeps the accumulators in registers. */
template <int FMT, int ACT>
cudaError_t launch_act(const gemm_params &p, int warps, int rows, int min_blocks, int ksplit, cudaStream_t stream,
                       int pdl) {
  if (ksplit > 1) {
    if constexpr (ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16) {
      if (rows != 16 || warps < 4 || min_blocks || p.m > 16) return cudaErrorInvalidValue;
      return p.m <= 8 ? launch_ksplit<FMT, ACT, 1, 4>(p, warps, ksplit, stream, pdl)
                      : launch_ksplit<FMT, ACT, 2, 2>(p, warps, ksplit, stream, pdl);
    } else {
      return cudaErrorInvalidValue;
    }
  }
  if (min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT) return fp4_cuda_gemm_small_m_sa(&p, FMT, ACT, stream, pdl);
  if (min_blocks == 6) return launch_lean_rows<FMT, ACT, 6>(p, rows, stream, pdl);
  if (min_blocks == 8) return launch_lean_rows<FMT, ACT, 8>(p, rows, stream, pdl);
  if (rows == 64) {
    if (p.m <= 8) return launch_one<FMT, ACT, 1, 1, 4>(p, warps, stream, pdl);
    return launch_one<FMT, ACT, 2, 1, 4>(p, warps, stream, pdl); /* M <= 16: the caller refuses more */
  }
  if (rows == 32) {
    if (p.m <= 8) return launch_one<FMT, ACT, 1, 2, 2>(p, warps, stream, pdl);
    if (p.m <= 16) return launch_one<FMT, ACT, 2, 1, 2>(p, warps, stream, pdl);
    return launch_one<FMT, ACT, 4, 1, 2>(p, warps, stream, pdl); /* M <= 32: the caller refuses more */
  }
  if (p.m <= 8) return launch_one<FMT, ACT, 1, 4, 1>(p, warps, stream, pdl);
  if (p.m <= 16) return launch_one<FMT, ACT, 2, 2, 1>(p, warps, stream, pdl);
  if (p.m <= 32) return launch_one<FMT, ACT, 4, 1, 1>(p, warps, stream, pdl);
  return launch_one<FMT, ACT, 8, 1, 1>(p, warps, stream, pdl);
}

template <int FMT>
cudaError_t launch_fmt(const gemm_params &p, int act, int warps, int rows, int mb, int ks, cudaStream_t stream,
                       int pdl) {
  switch (act) {
  case FP4_CUDA_ACT_BF16: return launch_act<FMT, FP4_CUDA_ACT_BF16>(p, warps, rows, mb, ks, stream, pdl);
  case FP4_CUDA_ACT_F16: return launch_act<FMT, FP4_CUDA_ACT_F16>(p, warps, rows, mb, ks, stream, pdl);
  case FP4_CUDA_ACT_F32: return launch_act<FMT, FP4_CUDA_ACT_F32>(p, warps, rows, mb, ks, stream, pdl);
  case FP4_CUDA_ACT_FP4: return launch_act<FMT, FP4_CUDA_ACT_FP4>(p, warps, rows, mb, ks, stream, pdl);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace

#endif
