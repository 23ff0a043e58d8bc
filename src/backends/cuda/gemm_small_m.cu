/*
 * Small-M (decode) GEMMs: out[M, N] = scale * A[M, K] * dq(W)[N, K]^T for M <= 64, on SM80+.
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
 * Exactness (SPEC 3): e2m1 codes decode to bf16/f16 exactly with byte permutes; an NVFP4 weight
 * e2m1 * e4m3 is exact in bf16 and f16, so the block scale is applied with a 16-bit multiply. An
 * MXFP4 scale 2^(e-127) is not representable in 16 bits in general, so per row and 128-K slab the
 * kernel factors it as 2^(e - emax) (16-bit, exact while the slab's blocks lie within 2^126 (bf16)
 * or 2^22 (f16) of each other) times 2^(emax-127), applied to the slab's FP32 partial sum.
 * f32 activations are split into three bf16 parts (hi + mid + lo = x exactly) and multiplied on
 * three MMAs, keeping FP32 accuracy. All sums are FP32; alpha and the multipliers scale the FP32
 * result once.
 *
 * K permutation: within each 8-element group the kernel pairs element i with element i + 4 in one
 * 32-bit register (that is what the nibble decode produces cheaply); the activation fragments
 * use the same pairing, so the dot product is unchanged.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/small_m_common.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kMaxWarps = 8;

struct gemm_params {
  const uint8_t *b;
  const uint8_t *b_scales;
  const void *a;
  const uint8_t *a_scales;
  void *out;
  int64_t lda, ldo, m, n, k, C;
  int b_layout, a_layout, out_dtype;
  float scale;
};

__device__ __forceinline__ void store_out(const gemm_params &p, int64_t row0, int nt, int c, int l, float v) {
  const int g = l >> 2, t = l & 3;
  const int64_t row = row0 + g + (c >= 2 ? 8 : 0), m = (int64_t)nt * 8 + 2 * t + (c & 1);
  if (row >= p.n || m >= p.m) return;
  v = __fmul_rn(v, p.scale);
  const int64_t i = m * p.ldo + row;
  if (p.out_dtype == FP4_DTYPE_F32) static_cast<float *>(p.out)[i] = v;
  else if (p.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(p.out)[i] = fp4_bf16_from_f32_inline(v);
  else static_cast<uint16_t *>(p.out)[i] = fp4_f16_from_f32_inline(v);
}

/* R: 16-row weight tiles per CTA (every warp covers all of them on its slabs, so an activation
 * fragment serves R tiles). U: slabs whose weights one warp keeps in flight (16 B per lane, row and
 * tile each). Up to 16 tokens two CTAs share an SM (128 registers); with 4 or 8 token tiles, or
 * several row tiles, the accumulators need more registers. */
template <int FMT, int ACT, int NT, int U, int R>
__global__ void __launch_bounds__(kMaxWarps * 32, NT * R >= 4 ? 1 : 2) gemm_small_m_kernel(gemm_params p) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  extern __shared__ float red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * R;
  const int nslabs = (int)(p.k >> 7);
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
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[r][nt][0] = acc[r][nt][1] = acc[r][nt][2] = acc[r][nt][3] = 0.0f;
  /* NVFP4 weight scale byte -> 16-bit multiplier pair, looked up instead of converted per block. */
  __shared__ uint32_t table[NV ? 256 : 1];
  if (NV) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<ACT == FP4_CUDA_ACT_F16>(i);
    __syncthreads();
  }

  /* The activations of slab s start at aw.base + s * kSlab; walk a pointer instead. */
  const int64_t act_step = (int64_t)warps * act_walk<ACT>::kSlab;
  const char *act_slab = aw.base + (int64_t)warp * act_walk<ACT>::kSlab;

  fp4_pdl_wait(); /* nothing is read before the producer of A (or W) has finished */
  for (int s0 = warp; s0 < nslabs; s0 += warps * U, act_slab += U * act_step) {
    uint4 wa[U][R], wb[U][R];
    uint32_t sca[U][R], scb[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < nslabs) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          wa[u][r] = ld_stream(wa_ptr[r] + (int64_t)s * 64);
          wb[u][r] = ld_stream(wb_ptr[r] + (int64_t)s * 64);
          sca[u][r] = load_scales<NV>(swa[r], s);
          scb[u][r] = load_scales<NV>(swb[r], s);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < nslabs)
        slab_mma<FMT, ACT, NT, R>(act_slab + u * act_step, aw.tile, asw, valid, s, table, wa[u], wb[u], sca[u], scb[u],
                                  acc);
    }
  }
  fp4_pdl_launch_dependents(); /* every input has been read */

  if (warps == 1) {
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
  for (int idx = threadIdx.x; idx < kPerWarp; idx += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < warps; w++) v = __fadd_rn(v, red[w * kPerWarp + idx]); /* fixed order */
    const int r = idx / (NT * 128), rest = idx % (NT * 128);
    store_out(p, row0 + 16 * r, rest >> 7, (rest >> 5) & 3, rest & 31, v);
  }
}

int tiles_for(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8; }

size_t smem_for(int warps, int64_t m, int rows) {
  return warps > 1 ? (size_t)warps * (size_t)(rows / 16) * (size_t)tiles_for(m) * 128 * sizeof(float) : 0;
}

template <int FMT, int ACT, int NT, int U, int R>
cudaError_t launch_one(const gemm_params &p, int warps, cudaStream_t stream, int pdl) {
  const int64_t ctas = (p.n + 16 * R - 1) / (16 * R);
  const size_t smem = smem_for(warps, p.m, 16 * R);
  if (smem > 48 * 1024) { /* above the default dynamic shared memory limit: opt in */
    const cudaError_t e = cudaFuncSetAttribute(gemm_small_m_kernel<FMT, ACT, NT, U, R>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  return fp4_cuda_launch(gemm_small_m_kernel<FMT, ACT, NT, U, R>, dim3((unsigned)ctas), dim3(32 * warps), smem,
                         stream, pdl, p);
}

/* Slabs in flight: 4 x 32 B per lane in total at one token tile (16 rows: four slabs), fewer as the
 * token tiles' registers grow. 32 rows take M <= 32 and 64 rows M <= 16: row tiles x token tiles
 * <= 8 keeps the accumulators in registers. */
template <int FMT, int ACT>
cudaError_t launch_act(const gemm_params &p, int warps, int rows, cudaStream_t stream, int pdl) {
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
cudaError_t launch_fmt(const gemm_params &p, int act, int warps, int rows, cudaStream_t stream, int pdl) {
  switch (act) {
  case FP4_CUDA_ACT_BF16: return launch_act<FMT, FP4_CUDA_ACT_BF16>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_F16: return launch_act<FMT, FP4_CUDA_ACT_F16>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_F32: return launch_act<FMT, FP4_CUDA_ACT_F32>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_FP4: return launch_act<FMT, FP4_CUDA_ACT_FP4>(p, warps, rows, stream, pdl);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace

extern "C" int64_t fp4_cuda_gemm_small_m_smem(int warps, int64_t m, int rows) { return (int64_t)smem_for(warps, m, rows); }

extern "C" int fp4_cuda_gemm_small_m(const fp4_cuda_gemm_args *a, void *stream, int pdl) {
  if (a->m < 1 || a->m > 64 || a->k % 128 || a->warps < 1 || a->warps > kMaxWarps) return (int)cudaErrorInvalidValue;
  /* Row tiles x token tiles <= 8 keeps the accumulators in registers (ptxas spills beyond). */
  if (a->rows != 16 && !(a->rows == 32 && a->m <= 32) && !(a->rows == 64 && a->m <= 16)) return (int)cudaErrorInvalidValue;
  gemm_params p;
  p.b = a->b;
  p.b_scales = a->b_scales;
  p.a = a->a;
  p.a_scales = a->a_scales;
  p.out = a->out;
  p.lda = a->lda;
  p.ldo = a->ldo;
  p.m = a->m;
  p.n = a->n;
  p.k = a->k;
  p.C = a->k / (a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  p.b_layout = a->b_layout;
  p.a_layout = a->a_layout;
  p.out_dtype = a->out_dtype;
  /* NVFP4 weights are decoded as e2m1 * scale * 2^-8 (see nv_weight_scale_pair). */
  p.scale = a->format == FP4_FORMAT_NVFP4 ? a->scale * 256.0f : a->scale;
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = a->format == FP4_FORMAT_NVFP4 ? launch_fmt<FP4_FORMAT_NVFP4>(p, a->act, a->warps, a->rows, s, pdl)
                                                : launch_fmt<FP4_FORMAT_MXFP4>(p, a->act, a->warps, a->rows, s, pdl);
  return (int)e;
}
