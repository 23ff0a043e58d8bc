/*
 * Grouped large-M (prefill) GEMM over experts: for every expert e and each of its rows p,
 * out[p, n] = scale_e * A[row(p)] . dq(W_e)[n]^T with the tiled tensor-core GEMM of the dense
 * large-M kernels (gemm_large_m.cu, docs/cuda-large-m.md): a STAGES-deep cp.async pipeline of 64-
 * element K tiles into shared memory, the FP4 weight tile (and the FP4 activation tile for W4A4)
 * dequantized exactly once per CTA into a swizzled 16-bit tile, ldmatrix + mma.sync m16n8k16 with
 * FP32 accumulation, 8 warps as 2 x 4 over a BM x 128 output tile. Shared pieces come from
 * large_m_common.cuh.
 *
 * Grouping. A CTA is (M tile index j, N tile). The M tiles of expert e are numbered from
 *   start(e) = floor(lo_e / BM) + e          (lo_e = offsets[e], clamped to [0, rows])
 * which is non-decreasing with start(e + 1) >= start(e) + ceil(rows_e / BM) (the floor of the next
 * offset gains at least ceil(rows_e / BM) - 1, the + e term the missing 1), so tiles of different
 * experts never collide and every index is below floor(rows / BM) + E: the host sizes the grid
 * with that bound without reading offsets (no host synchronization; the layer stays graph-
 * capturable). Warp 0 finds its expert with a 32-ary search over start() (two rounds for E <= 1024);
 * indices that fall in no expert's tiles (empty experts, the tail of the bound) exit at once.
 * Consecutive CTAs are the N tiles of one M tile: an expert's A rows are gathered once into L2 and
 * its weight panel is streamed by neighbouring CTAs.
 *
 * A rows are gathered through a_rows (the routing permutation, row(p) = a_rows[p] / a_div), so the
 * permuted activations are never materialized: the CTA keeps the source row of each of its BM
 * rows in shared memory (-1 past the expert's rows: zero-filled by the copy, never stored).
 *
 * Numerics: FP4 values are exact in bf16 (and NVFP4 in f16), products exact in FP32, sums in FP32
 * (tensor-core order); the per-expert scale alpha * w_mult[e] * a_mult is formed in double and
 * applied once in double before the single rounding to the output type, as the grouped kernels of
 * moe_grouped.cu do. Offsets are clamped: no content of them makes the kernel read or write out of
 * bounds.
 */
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/large_m_common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/moe_grouped_tiles.cuh"
#include "backends/cuda/moe_kernels.h"
#include "backends/cuda/moe_scalars.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kThreads = 256;
constexpr int kBK = 64;
constexpr int kBN = 128;

template <class G, int BM>
__device__ __forceinline__ void load_stage(const glm_params &p, const int32_t *src_rows, int e, uint8_t *st, int n0,
                                           int kt) {
  const uint8_t *w = p.w + (int64_t)e * p.w_expert_bytes; /* from e where used: one register across the loop */
  const int tid = threadIdx.x;
  const int64_t k0 = (int64_t)kt * kBK;
  uint8_t *sa = st;
  if (G::A_FP4) {
    const uint8_t *a = static_cast<const uint8_t *>(p.a);
    for (int i = tid; i < BM * 2; i += kThreads) {
      const int r = i >> 1, h = i & 1;
      const int32_t sr = src_rows[r];
      const bool ok = sr >= 0 && k0 + 32 * h < p.k;
      cp_async16(sa + i * 16, ok ? a + (int64_t)sr * (p.k >> 1) + (k0 >> 1) + 16 * h : a, ok);
    }
  } else {
    const uint16_t *a = static_cast<const uint16_t *>(p.a);
    for (int i = tid; i < BM * 8; i += kThreads) {
      const int r = i >> 3, c = i & 7;
      const int32_t sr = src_rows[r];
      const bool ok = sr >= 0 && k0 + 8 * c < p.k;
      cp_async16(sa + swz(r, c), ok ? a + (int64_t)sr * p.lda + k0 + 8 * c : a, ok);
    }
  }
  copy_fp4_rows<kBN, kThreads>(st + G::A_STAGE, w, p.n, n0, k0, p.k, tid);
}

/* Scale bits of the gathered FP4 activation rows (W4A4), as load_scales does for contiguous rows. */
template <bool NV, int ROWS, int TASKS>
__device__ __forceinline__ void load_a_scales(const glm_params &p, const int32_t *src_rows, int kt, int kts,
                                              uint32_t sc[TASKS]) {
#pragma unroll
  for (int j = 0; j < TASKS; j++) {
    const int i = threadIdx.x + j * kThreads;
    const int32_t sr = i < ROWS * 2 ? src_rows[i >> 1] : -1;
    sc[j] = sr >= 0 && kt < kts ? load_chunk_scales<NV>(p.a_scales, p.a_layout, p.a_C, (int64_t)sr + 1, sr, kt, i & 1)
                                : 0u;
  }
}

/* Word offset of column c (a multiple of 2) of row r in the FP32 staging tile [BM][128]: columns
 * XOR-swizzled by 8 words per row (mod 8), so the fragment writes take two wavefronts per warp and
 * 4-column groups stay contiguous for the row-wise reads. */
__device__ __forceinline__ int stage_off(int r, int c) { return r * kBN + (c ^ ((r & 7) << 3)); }

/* The epilogue: accumulators -> shared memory -> rows m0 .. hi-1 of out, scaled by s (out_scale) and
 * rounded once; a warp writes 128 consecutive columns of one row (coalesced). */
template <class G, int BM>
__device__ __forceinline__ void store_tile(const glm_params &p, float *tile, const float (&acc)[G::MT][G::NT][4],
                                           int wm, int wn, int lane, int64_t m0, int64_t hi, int64_t n0, double s) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < G::MT; i++)
#pragma unroll
    for (int jn = 0; jn < G::NT; jn++) {
      const int r = wm + i * 16 + g, c = wn + jn * 8 + 2 * t;
      *reinterpret_cast<float2 *>(tile + stage_off(r, c)) = make_float2(acc[i][jn][0], acc[i][jn][1]);
      *reinterpret_cast<float2 *>(tile + stage_off(r + 8, c)) = make_float2(acc[i][jn][2], acc[i][jn][3]);
    }
  __syncthreads();
  const out_scale os = make_out_scale(s);
  for (int idx = threadIdx.x; idx < BM * (kBN / 4); idx += kThreads) {
    const int r = idx / (kBN / 4), c = (idx % (kBN / 4)) * 4;
    const int64_t row = m0 + r, col = n0 + c;
    if (row >= hi || col >= p.n) continue;
    glm_store4(p, row, col, *reinterpret_cast<const float4 *>(tile + stage_off(r, c)), os);
  }
}

template <int BM, int STAGES, int FMT, int ACT>
__global__ void __launch_bounds__(kThreads, (!kLmTwoCtasPerSm || (ACT == FP4_CUDA_ACT_FP4 && BM >= 128)) ? 1 : 2)
    grouped_large_m_kernel(glm_params p) {
  using G = lm_tile_cfg<BM, kBN, STAGES, FMT, ACT, kThreads>;
  static_assert(BM * kBN * 4 <= G::SMEM, "the FP32 output tile reuses the pipeline's shared memory");
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int32_t src_rows[BM];
  /* expert, first row, end row, and the output scale: kept here, not in registers, across the K loop
   * (the 2-CTA register budget of the 128-row tile has no slack) */
  __shared__ long long tile_info[3];
  __shared__ double tile_scale;
  uint8_t *stages = smem;
  uint8_t *b16 = smem + STAGES * G::STAGE;
  uint8_t *a16 = b16 + G::B16; /* W4A4 only */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j = (int64_t)blockIdx.x / p.tn;
  const int n0 = (int)((int64_t)blockIdx.x % p.tn) * kBN; /* N < 2^31 */

  fp4_pdl_wait(); /* offsets, the permutation and the activations come from earlier kernels */
  if (warp == 0) {
    const int64_t e = find_tile_expert<BM>(p, j, lane);
    if (lane == 0) {
      const int64_t lo = clamp64(__ldg(p.offsets + e), 0, p.rows), hi = clamp64(__ldg(p.offsets + e + 1), lo, p.rows);
      const int64_t m0 = lo + (j - (lo / BM + e)) * BM;
      tile_info[0] = e;
      tile_info[1] = m0;
      tile_info[2] = m0 < hi ? hi : -1; /* -1: the index is in no expert's tiles */
      tile_scale = (double)moe_alpha(p.alpha, p.alpha_device) * (double)(p.w_mult ? __ldg(p.w_mult + e) : 1.0f) *
                   (double)moe_a_mult(p.a_mult, p.a_scale_device);
    }
  }
  __syncthreads();
  const int64_t e = tile_info[0], m0 = tile_info[1];
  if (tile_info[2] < 0) return; /* uniform across the CTA */
  for (int r = threadIdx.x; r < BM; r += kThreads) {
    const int64_t hi = tile_info[2];
    const int64_t pr = m0 + r;
    src_rows[r] = pr < hi ? (p.a_rows ? __ldg(p.a_rows + pr) / p.a_div : (int32_t)pr) : -1;
  }
  __syncthreads();

  const int ei = (int)e; /* E < 2^31 */
  const int wm = (warp >> 2) * G::WM, wn = (warp & 3) * G::WN;
  const int kts = (int)((p.k + kBK - 1) / kBK);

  float acc[G::MT][G::NT][4];
#pragma unroll
  for (int i = 0; i < G::MT; i++)
#pragma unroll
    for (int jn = 0; jn < G::NT; jn++) acc[i][jn][0] = acc[i][jn][1] = acc[i][jn][2] = acc[i][jn][3] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < kts) load_stage<G, BM>(p, src_rows, ei, stages + s * G::STAGE, n0, s);
    cp_async_commit();
  }
  /* Scales of tiles kt (bsc, asc) and kt + 1 (bsn, asn): loaded two tiles ahead, so no global-memory
   * round trip sits between two consecutive tiles. */
  uint32_t bsc[G::B_TASKS], asc[G::A_TASKS], bsn[G::B_TASKS], asn[G::A_TASKS];
  load_scales<G::NV, kBN, G::B_TASKS, kThreads>(threadIdx.x, p.w_scales + (int64_t)ei * p.w_scale_stride, p.w_layout,
                                                p.C, p.n, n0, 0, kts, bsc);
  if (G::A_FP4) load_a_scales<G::NV, BM, G::A_TASKS>(p, src_rows, 0, kts, asc);
  load_scales<G::NV, kBN, G::B_TASKS, kThreads>(threadIdx.x, p.w_scales + (int64_t)ei * p.w_scale_stride, p.w_layout,
                                                p.C, p.n, n0, 1, kts, bsn);
  if (G::A_FP4) load_a_scales<G::NV, BM, G::A_TASKS>(p, src_rows, 1, kts, asn);

  for (int kt = 0; kt < kts; kt++) {
    cp_async_wait<STAGES - 2>();
    /* Tile kt landed for everyone, and every warp is done with tile kt-1: its stage buffer may be
     * refilled and the decoded tiles overwritten. */
    __syncthreads();
    const uint8_t *st = stages + (kt % STAGES) * G::STAGE;
    const uint8_t *at = G::A_FP4 ? a16 : st;
    {
      uint32_t bn[G::B_TASKS], an[G::A_TASKS];
      /* the scales of the tile after next now: their latency hides behind two tiles of work */
      load_scales<G::NV, kBN, G::B_TASKS, kThreads>(threadIdx.x, p.w_scales + (int64_t)ei * p.w_scale_stride,
                                                    p.w_layout, p.C, p.n, n0, kt + 2, kts, bn);
      if (G::A_FP4) load_a_scales<G::NV, BM, G::A_TASKS>(p, src_rows, kt + 2, kts, an);
      decode_tile<G::NV, G::F16, kBN, G::B_TASKS, kThreads>(st + G::A_STAGE, b16, bsc, threadIdx.x);
      if (G::A_FP4) decode_tile<G::NV, false, BM, G::A_TASKS, kThreads>(st, a16, asc, threadIdx.x);
#pragma unroll
      for (int i = 0; i < G::B_TASKS; i++) bsc[i] = bsn[i], bsn[i] = bn[i];
#pragma unroll
      for (int i = 0; i < G::A_TASKS; i++) asc[i] = asn[i], asn[i] = an[i];
    }
    const int nk = kt + STAGES - 1;
    if (nk < kts) load_stage<G, BM>(p, src_rows, ei, stages + (nk % STAGES) * G::STAGE, n0, nk);
    cp_async_commit();
    __syncthreads(); /* the decoded tiles are complete */
    lm_mma_ktile<G>(at, b16, wm, wn, lane, acc);
  }
  cp_async_wait<0>();
  fp4_pdl_launch_dependents(); /* every input has been read */
  __syncthreads();             /* every warp is done with the stage buffers: they become the FP32 tile */
  const volatile long long *info = tile_info; /* re-read after the loop: nothing held across it */
  store_tile<G, BM>(p, reinterpret_cast<float *>(smem), acc, wm, wn, lane, info[1], info[2],
                    ((int64_t)blockIdx.x % p.tn) * kBN, *static_cast<const volatile double *>(&tile_scale));
}

/* 4 stages: 96 KiB of shared memory at BM = 128 with 16-bit activations, as the dense 128x128.s4 tile. */
constexpr int kStages = 4;

template <int BM, int FMT, int ACT>
int smem_of() {
  return lm_tile_cfg<BM, kBN, kStages, FMT, ACT, kThreads>::SMEM;
}

template <int BM, int FMT, int ACT>
cudaError_t launch_bm(const glm_params &p, int64_t ctas, cudaStream_t s, int pdl) {
  auto kernel = grouped_large_m_kernel<BM, kStages, FMT, ACT>;
  const int smem = smem_of<BM, FMT, ACT>();
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(kThreads), (size_t)smem, s, pdl, p);
}

template <int FMT, int ACT>
cudaError_t launch_act(const glm_params &p, int bm, int64_t ctas, cudaStream_t s, int pdl) {
  return bm == 128 ? launch_bm<128, FMT, ACT>(p, ctas, s, pdl) : launch_bm<64, FMT, ACT>(p, ctas, s, pdl);
}

template <int FMT>
cudaError_t launch_fmt(const glm_params &p, int act, int bm, int64_t ctas, cudaStream_t s, int pdl) {
  switch (act) {
  case FP4_CUDA_ACT_BF16: return launch_act<FMT, FP4_CUDA_ACT_BF16>(p, bm, ctas, s, pdl);
  case FP4_CUDA_ACT_FP4: return launch_act<FMT, FP4_CUDA_ACT_FP4>(p, bm, ctas, s, pdl);
  case FP4_CUDA_ACT_F16:
    if (FMT == FP4_FORMAT_NVFP4) return launch_act<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, bm, ctas, s, pdl);
    return cudaErrorInvalidValue;
  default: return cudaErrorInvalidValue;
  }
}

/* The host's rules (config/moe_config.h) size these tiles' shared memory with the same numbers. */
template <int BM, int ACT>
constexpr bool config_smem_matches() {
  return FP4_MOE_PREFILL_MMA_SMEM(BM, ACT == FP4_CUDA_ACT_FP4) ==
         lm_tile_cfg<BM, kBN, kStages, FP4_FORMAT_NVFP4, ACT, kThreads>::SMEM + BM * 4 + 256;
}
static_assert(config_smem_matches<64, FP4_CUDA_ACT_BF16>() && config_smem_matches<128, FP4_CUDA_ACT_BF16>() &&
                  config_smem_matches<64, FP4_CUDA_ACT_FP4>() && config_smem_matches<128, FP4_CUDA_ACT_FP4>(),
              "FP4_MOE_PREFILL_MMA_SMEM (config/moe_config.h) must equal the tiles' shared memory");

int64_t cta_count(const fp4_cuda_grouped_args *a, int bm) {
  return (a->rows / bm + a->experts) * ((a->n + kBN - 1) / kBN);
}

/* W4A4 on the register-A wgmma tiles: the FP4 source rows (the gathered tokens: rows / a_div of
 * them when a_rows gathers, as the MoE layer's routing does, else rows) dequantized exactly to bf16
 * into a->a_bf16 (the caller's workspace), then b (a with those bf16 rows) on the tiles. */
int grouped_wgra_fp4(const fp4_cuda_grouped_args *a, fp4_cuda_grouped_args *b, void *stream, int pdl) {
  const int64_t src_rows = a->a_rows ? (a->rows + a->a_div - 1) / a->a_div : a->rows;
  if (!a->a_bf16) return (int)cudaErrorInvalidValue; /* the host always passes its workspace */
  int r = fp4_cuda_dequant_fp4_rows(a->a, a->a_scales, a->format, a->a_layout, src_rows, a->k,
                                    static_cast<uint16_t *>(a->a_bf16), stream, pdl);
  if (r != (int)cudaSuccess) return r;
  b->a = a->a_bf16;
  return fp4_cuda_grouped_gemm_wgra(b, stream, pdl);
}

} // namespace

extern "C" int fp4_cuda_grouped_gemm_large(const fp4_cuda_grouped_args *a, void *stream, int pdl) {
  /* The host checked the variant against a (fp4_moe_variant_check: activation type, alignment,
   * shared memory, grid size). */
  if (a->k % 32 || a->k < 32 || a->n < 1 || a->experts < 1 || a->rows < 1 || a->a_div < 1 ||
      a->act == FP4_CUDA_ACT_F32)
    return (int)cudaErrorInvalidValue;
  if (a->variant.kernel == FP4_MOE_KERNEL_PREFILL_WGRA) {
    /* SM90 sm_90a: the register-A wgmma tiles (gemm_large_m_wgra.cu) take 16-bit activations, and FP4
     * ones after a pass that writes their exact bf16 values (the large-m.wgra.pro configs' prologue). */
    if (a->act != FP4_CUDA_ACT_FP4) return fp4_cuda_grouped_gemm_wgra(a, stream, pdl);
    fp4_cuda_grouped_args b = *a;
    b.act = FP4_CUDA_ACT_BF16;
    b.lda = a->k; /* a_mult (or a_scale_device), the FP4 activations' multiplier, stays in the scale */
    return grouped_wgra_fp4(a, &b, stream, pdl);
  }
  const int bm = a->variant.tile_m;
  if (a->variant.kernel != FP4_MOE_KERNEL_PREFILL_MMA || (bm != 64 && bm != 128)) return (int)cudaErrorInvalidValue;
  const glm_params p = glm_params_of(a, kBN);
  const int64_t ctas = cta_count(a, bm);
  if (ctas > 0x7FFFFFFF) return (int)cudaErrorInvalidConfiguration;
  cudaStream_t s = (cudaStream_t)stream;
  return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_fmt<FP4_FORMAT_NVFP4>(p, a->act, bm, ctas, s, pdl)
                                             : launch_fmt<FP4_FORMAT_MXFP4>(p, a->act, bm, ctas, s, pdl));
}
