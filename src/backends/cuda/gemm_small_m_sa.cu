/*
 * The dense small-M GEMM's shared-activation kernel ("small-m.sa.r64.w8" and its W4A4 prologue twin;
 * gemm_small_m_kernels.cuh has the K-splitting kernels, the numerics and the launch rules).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/small_m_common.cuh"
#include "backends/cuda/small_m_gemm.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

/* The shared-activation kernel ("small-m.sa.r64.w8"; up to 32 tokens of bf16/f16 activations). At
 * M = 16 the K-splitting kernels are bound by activation traffic, not weights: every warp loads
 * its own 16-token activation fragments (4 KB per 128-K slab against 1-2 KB of weights) and every
 * CTA fetches the whole activation matrix from L2 again (ncu at 57344 x 8192: memory pipes 72%
 * busy, DRAM 43%; bench/results/h200/2026-11-30-small-m-decode/README.md). Here 8 warps form two
 * K groups of four; a group's four warps each own 16 weight rows (the CTA 64) and stream every
 * other 128-K slab, and the group copies each slab's activations once into a shared-memory stage
 * (cp.async, kSaStages deep, one named barrier per slab) that its four warps read: a quarter of the
 * activation traffic per weight byte. The 16-byte chunks of a stage row are swizzled (chunk ^ (bit
 * 3 of chunk | row parity << 1)) so the fragment reads of a quarter warp hit eight different bank
 * groups. U slabs of weights in flight per warp.
 * The two groups' sums meet in shared memory (group 0 + group 1, fixed order). */
constexpr int kSaWarps = 8, kSaGroups = 2, kSaGroupWarps = kSaWarps / kSaGroups, kSaStages = 4;

template <int NT>
constexpr size_t sa_smem_bytes() { /* stages of NT * 8 rows x 256 B, then the reduction */
  return (size_t)kSaGroups * kSaStages * NT * 8 * 256 + (size_t)kSaGroupWarps * NT * 128 * sizeof(float);
}

__device__ __forceinline__ void sa_cp_async16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

template <int FMT, int ACT, int NT, int U>
__global__ void __launch_bounds__(kSaWarps * 32, 2) gemm_small_m_sa_kernel(gemm_params p) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kStage = NT * 8 * 256, kGroupThreads = kSaGroupWarps * 32;
  extern __shared__ __align__(16) uint8_t sa_smem[];
  __shared__ uint32_t table[NV ? 256 : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int kg = warp / kSaGroupWarps, nw = warp % kSaGroupWarps, gtid = threadIdx.x % kGroupThreads;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * kSaGroupWarps + 16 * nw;
  const int nslabs = (int)(p.k >> 7), ng = (nslabs - kg + kSaGroups - 1) / kSaGroups; /* slabs kg, kg + 2, ... */
  if (NV)
    for (int i = threadIdx.x; i < 256; i += kSaWarps * 32) table[i] = nv_weight_scale_pair<ACT == FP4_CUDA_ACT_F16>(i);
  /* Rows past N read row N-1 (valid memory) and are never stored; tokens past M read row M-1. */
  const int64_t ra = min(row0 + g, p.n - 1), rb = min(row0 + g + 8, p.n - 1);
  const uint8_t *wa_ptr = p.b + ra * (p.k >> 1) + 16 * t, *wb_ptr = p.b + rb * (p.k >> 1) + 16 * t;
  const scale_walk swa = make_walk<NV>(p.b_scales, p.b_layout, p.C, ra, t);
  const scale_walk swb = make_walk<NV>(p.b_scales, p.b_layout, p.C, rb, t);
  uint8_t *stages = sa_smem + kg * kSaStages * kStage;
  const uint32_t stages_s = (uint32_t)__cvta_generic_to_shared(stages);
  const int64_t row_bytes = p.lda * 2;
  const char *a_bytes = static_cast<const char *>(p.a);
  float acc[1][NT][4];
  zero_acc<1, NT>(acc);
  bool valid[NT];
  scale_walk asw[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    valid[nt] = true;
    asw[nt].base = NULL;
    asw[nt].stride = 0;
  }
  __syncthreads(); /* the table is written */

  fp4_pdl_wait(); /* nothing is read before the producer of A (or W) has finished */
  /* Chunk c of a stage: token row c / 16, 16-byte chunk c % 16 of its 256 bytes. */
  auto copy_slab = [&](int s, int stage) {
#pragma unroll
    for (int i = 0; i < NT; i++) {
      const int c = gtid + i * kGroupThreads, row = c >> 4, ch = c & 15;
      const int64_t tok = min((int64_t)row, p.m - 1);
      const int sw = ((ch >> 3) & 1) | ((row & 1) << 1);
      sa_cp_async16(stages_s + stage * kStage + row * 256 + ((ch ^ sw) << 4), a_bytes + tok * row_bytes + (int64_t)s * 256 + ch * 16);
    }
  };
#pragma unroll
  for (int i = 0; i < kSaStages - 1; i++) {
    if (i < ng) copy_slab(kg + i * kSaGroups, i);
    asm volatile("cp.async.commit_group;" ::: "memory"); /* one group per slab, empty past the last */
  }
  for (int i0 = 0; i0 < ng; i0 += U) {
    uint4 wa[U], wb[U];
    uint32_t sca[U], scb[U];
#pragma unroll
    for (int u = 0; u < U; u++)
      if (i0 + u < ng) {
        load_slab<NV>(wa_ptr, wb_ptr, swa, swb, kg + (i0 + u) * kSaGroups, wa[u], wb[u], sca[u], scb[u]);
      }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int i = i0 + u;
      if (i < ng) { /* uniform across the group */
        asm volatile("cp.async.wait_group %0;" ::"n"(kSaStages - 2) : "memory"); /* slab i is in */
        /* every copy of slab i is visible, and every warp is done with slab i - 1's stage */
        if (kg == 0) asm volatile("bar.sync 1, %0;" ::"n"(kGroupThreads) : "memory");
        else asm volatile("bar.sync 2, %0;" ::"n"(kGroupThreads) : "memory");
        if (i + kSaStages - 1 < ng) copy_slab(kg + (i + kSaStages - 1) * kSaGroups, (i + kSaStages - 1) % kSaStages);
        asm volatile("cp.async.commit_group;" ::: "memory");
        const char *rows[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
          rows[nt] = reinterpret_cast<const char *>(stages) + (i % kSaStages) * kStage + (nt * 8 + g) * 256 + t * 64;
        slab_mma_rows<FMT, ACT, NT, 1, true>(rows, asw, valid, kg + i * kSaGroups, table, &wa[u], &wb[u], &sca[u],
                                             &scb[u], acc);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  fp4_pdl_launch_dependents(); /* every input has been read */
  float *red = reinterpret_cast<float *>(sa_smem + kSaGroups * kSaStages * kStage);
  if (kg == 1)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) red[((nw * NT + nt) * 4 + c) * 32 + lane] = acc[0][nt][c];
  fp4_small_m_stage_alpha(p); /* after the loop (after the PDL wait too): published by the barrier */
  __syncthreads();
  if (kg == 0)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        store_out(p, row0, nt, c, lane, __fadd_rn(acc[0][nt][c], red[((nw * NT + nt) * 4 + c) * 32 + lane]));
}

template <int FMT, int ACT, int NT, int U>
cudaError_t launch_sa(const gemm_params &p, cudaStream_t stream, int pdl) {
  const int64_t ctas = (p.n + 16 * kSaGroupWarps - 1) / (16 * kSaGroupWarps);
  constexpr size_t smem = sa_smem_bytes<NT>();
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(gemm_small_m_sa_kernel<FMT, ACT, NT, U>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  return fp4_cuda_launch(gemm_small_m_sa_kernel<FMT, ACT, NT, U>, dim3((unsigned)ctas), dim3(kSaWarps * 32), smem,
                         stream, pdl, p);
}

/* Token tiles by M (1, 2 or 4); slabs of weights in flight per warp as registers allow. */
template <int FMT, int ACT>
cudaError_t launch_sa_m(const gemm_params &p, cudaStream_t stream, int pdl) {
  if (p.m <= 8) return launch_sa<FMT, ACT, 1, 4>(p, stream, pdl);
  if (p.m <= 16) return launch_sa<FMT, ACT, 2, 4>(p, stream, pdl);
  return launch_sa<FMT, ACT, 4, 2>(p, stream, pdl);
}

template <int FMT>
cudaError_t launch_sa_act(const gemm_params &p, int act, cudaStream_t stream, int pdl) {
  if (act == FP4_CUDA_ACT_BF16) return launch_sa_m<FMT, FP4_CUDA_ACT_BF16>(p, stream, pdl);
  if (act == FP4_CUDA_ACT_F16) return launch_sa_m<FMT, FP4_CUDA_ACT_F16>(p, stream, pdl);
  return cudaErrorInvalidValue; /* the caller refuses other activations */
}

} // namespace

cudaError_t fp4_cuda_gemm_small_m_sa(const gemm_params *p, int format, int act, cudaStream_t stream, int pdl) {
  return format == FP4_FORMAT_NVFP4 ? launch_sa_act<FP4_FORMAT_NVFP4>(*p, act, stream, pdl)
                                    : launch_sa_act<FP4_FORMAT_MXFP4>(*p, act, stream, pdl);
}
