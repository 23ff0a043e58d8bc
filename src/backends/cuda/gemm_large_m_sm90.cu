/*
 * Large-M (prefill) GEMMs on Hopper's warpgroup MMA (sm_90a only): out[M, N] = scale * A[M, K] *
 * dq(W)[N, K]^T with W in FP4 (NVFP4 or MXFP4) dequantized exactly to bf16/f16 in shared memory and
 * fed, with the activations, to wgmma.mma_async (both operands from shared memory, FP32
 * accumulators). Same operands, rules and exactness argument as the mma.sync family of
 * gemm_large_m.cu (docs/cuda-large-m.md); these are extra tuner candidates, never the default.
 *
 * One CTA computes a 128 x BN tile (BN = 128 or 256) with three warpgroups:
 *   - warpgroup 0, the producer: cp.async copies of the activation tile (bf16/f16, straight into its
 *     final swizzled place; for W4A4 the packed FP4 codes) and of the packed FP4 weight codes into a
 *     STAGES-deep "load ring"; then it decodes the FP4 codes of each K tile into a two-slot "decoded
 *     ring" of swizzled 16-bit tiles, fences the generic-proxy writes for the async proxy that
 *     wgmma reads through, and arrives on that tile's `full` mbarrier;
 *   - warpgroups 1 and 2, the consumers: rows 0-63 and 64-127 of the tile; per K tile (64
 *     elements) they wait on `full`, issue four m64nBNk16 wgmma, commit, wait until the previous
 *     K tile's MMAs are done and release that tile on its `empty` mbarrier (so one group of MMAs
 *     is always in flight while the producer decodes the next tile).
 *
 * Shared-memory operand layout (the layout wgmma's 128-byte swizzle mode expects, K-major): a tile
 * is rows of 64 16-bit elements (128 bytes); 16-byte chunk c of row r is stored at byte
 *     r * 128 + ((c ^ (r & 7)) * 16)                                    (swz() of large_m_common.cuh)
 * with every tile starting on a 1024-byte boundary, so that the XOR pattern, which the hardware
 * computes from address bits [7:9] into bits [4:6], starts over at each tile. The matching descriptor
 * (sw128_desc) has swizzle mode 1 (128 B), stride byte offset 1024 (from one 8-row group to the
 * next), leading byte offset unused for swizzled K-major operands (set to 16 B), base offset 0. The
 * k-th 16-element K slice of a tile starts 32 * k bytes into it: the descriptor address advances by
 * 32 bytes (2 in its 16-byte units) and the hardware applies the XOR on the final address, exactly
 * as swz() did for the writes.
 *
 * Ordering: the producer's cp.async writes and its decode stores are generic-proxy writes that the
 * async proxy (wgmma) reads, hence cp.async.wait_group + fence.proxy.async.shared::cta in every
 * producer thread before it arrives on `full` (count 128); the consumers' mbarrier wait acquires.
 * Slot reuse: a load slot is rewritten only after its previous tile was released by all 256
 * consumer threads (`empty`, count 256) and decoded by every producer thread (the producer's named
 * barrier at the top of each iteration); a decoded slot (two of them) only after the tile two
 * before was released.
 *
 * The kernel body exists only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets compile a trap.
 * Its mbarriers are static shared memory, present only in that body: cudaFuncGetAttributes reports
 * a non-zero static shared size exactly when the device would run the sm_90a code, which is how the
 * host side tells "binary has sm_90a code" apart from a compute_90 PTX JIT or a missing image.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/large_m_common.cuh"
#include "backends/cuda/launch.cuh"

namespace {

constexpr int kWgThreads = 128;
constexpr int kThreadsWg = 3 * kWgThreads; /* producer + two consumers */
constexpr int kTileM = 128;
constexpr int kBK = 64;

#define FP4_WGMMA_BODY FP4_SM90A_BODY

template <int BN, int STAGES, int FMT, int ACT>
struct wg_cfg {
  static constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  static constexpr bool F16 = ACT == FP4_CUDA_ACT_F16;
  static constexpr bool A_FP4 = ACT == FP4_CUDA_ACT_FP4;
  static constexpr int ROWS_N = BN;
  static constexpr int A_LOAD = A_FP4 ? kTileM * 32 : kTileM * 128; /* A part of a load slot */
  static constexpr int LOAD = A_LOAD + BN * 32;                        /* + the raw weight codes */
  static constexpr int B16 = BN * 128;
  static constexpr int DEC = B16 + (A_FP4 ? kTileM * 128 : 0); /* decoded slot: B16 [+ A16] */
  static constexpr int SMEM = 1024 /* alignment slack */ + STAGES * LOAD + 2 * DEC;
  static constexpr int B_TASKS = BN * 2 / kWgThreads, A_TASKS = kTileM * 2 / kWgThreads;
  static constexpr int D = STAGES - 1; /* K tiles whose copies are in flight ahead of the decode */
  static_assert(LOAD % 1024 == 0 && DEC % 1024 == 0 && B16 % 1024 == 0, "operand tiles must stay 1024-byte aligned");
  static_assert(STAGES >= 3, "a load slot is refilled one tile after its release; decoded slots need two");
};

#if FP4_WGMMA_BODY
/* D[64 x BN] (+)= A[64 x 16] * B[BN x 16]^T, both K-major in shared memory; scale_d = 0 overwrites. */
template <int BN, bool F16>
__device__ __forceinline__ void wgmma_k16(float *d, uint64_t da, uint64_t db, uint32_t scale_d) {
  static_assert(BN == 128 || BN == 256, "wgmma tiles: n128 or n256");
  if constexpr (BN == 128) {
    if (F16)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" FP4_WG_REGS_64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                   : FP4_WG_OUTS_64(d)
                   : "l"(da), "l"(db), "r"(scale_d));
    else
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" FP4_WG_REGS_64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                   : FP4_WG_OUTS_64(d)
                   : "l"(da), "l"(db), "r"(scale_d));
  } else {
    if (F16)
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" FP4_WG_REGS_128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                   : FP4_WG_OUTS_128(d)
                   : "l"(da), "l"(db), "r"(scale_d));
    else
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" FP4_WG_REGS_128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                   : FP4_WG_OUTS_128(d)
                   : "l"(da), "l"(db), "r"(scale_d));
  }
}

/* Issues the copies of K tile kt into load slot ls (producer thread pt of 128). */
template <class G>
__device__ __forceinline__ void wg_load(const lm_params &p, uint8_t *ls, int64_t m0, int64_t n0, int kt, int pt) {
  const int64_t k0 = (int64_t)kt * kBK;
  if (G::A_FP4) copy_fp4_rows<kTileM, kWgThreads>(ls, static_cast<const uint8_t *>(p.a), p.m, m0, k0, p.k, pt);
  else copy_16bit_rows<kTileM, kWgThreads>(ls, static_cast<const uint16_t *>(p.a), p.lda, p.m, m0, k0, p.k, pt);
  copy_fp4_rows<G::ROWS_N, kWgThreads>(ls + G::A_LOAD, p.b, p.n, n0, k0, p.k, pt);
}
#endif

template <int BN, int STAGES, int FMT, int ACT>
__global__ void __launch_bounds__(kThreadsWg, 1) gemm_wgmma_kernel(lm_params p) {
#if FP4_WGMMA_BODY
  using G = wg_cfg<BN, STAGES, FMT, ACT>;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  /* operand tiles on 1024-byte boundaries (the swizzle pattern repeats every 8 rows of 128 bytes) */
  uint8_t *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t *load_ring = smem, *dec_ring = smem + STAGES * G::LOAD;

  int64_t m0, n0;
  lm_tile_origin(p, kTileM, BN, blockIdx.x, &m0, &n0);
  const int kts = (int)((p.k + kBK - 1) / kBK);
  const int wg = threadIdx.x / kWgThreads;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], kWgThreads);
      mbar_init(&empty[s], 2 * kWgThreads);
    }
  }
  __syncthreads(); /* barriers initialized before anyone arrives or waits */
  fp4_pdl_wait();  /* nothing is read before the producers of A and W have finished */

  if (wg == 0) {
    /* ---- producer ---- */
    const int pt = threadIdx.x;
#pragma unroll
    for (int j = 0; j < G::D; j++) {
      if (j < kts) {
        wg_load<G>(p, load_ring + j * G::LOAD, m0, n0, j, pt);
      }
      cp_async_commit();
    }
    /* Scales of tiles j (bsc, asc) and j + 1 (bsn, asn): loaded two tiles ahead, so no global-memory
     * round trip sits between two consecutive tiles. */
    uint32_t bsc[G::B_TASKS], asc[G::A_TASKS], bsn[G::B_TASKS], asn[G::A_TASKS];
    load_scales<G::NV, BN, G::B_TASKS, kWgThreads>(pt, p.b_scales, p.b_layout, p.C, p.n, n0, 0, kts, bsc);
    if (G::A_FP4) load_scales<G::NV, kTileM, G::A_TASKS, kWgThreads>(pt, p.a_scales, p.a_layout, p.C, p.m, m0, 0, kts, asc);
    load_scales<G::NV, BN, G::B_TASKS, kWgThreads>(pt, p.b_scales, p.b_layout, p.C, p.n, n0, 1, kts, bsn);
    if (G::A_FP4) load_scales<G::NV, kTileM, G::A_TASKS, kWgThreads>(pt, p.a_scales, p.a_layout, p.C, p.m, m0, 1, kts, asn);
    for (int j = 0; j < kts; j++) {
      cp_async_wait<G::D - 1>(); /* this thread's copies of tile j have landed */
      producer_sync();           /* everyone's have; everyone finished decoding tile j-1 */
      if (j >= 2) mbar_wait(&empty[(j - 2) % STAGES], ((j - 2) / STAGES) & 1); /* decoded slot j%2 is free */
      const uint8_t *ls = load_ring + (j % STAGES) * G::LOAD;
      uint8_t *ds = dec_ring + (j & 1) * G::DEC;
      uint32_t bn[G::B_TASKS], an[G::A_TASKS];
      /* the scales of the tile after next now: their latency hides behind two tiles of decode */
      load_scales<G::NV, BN, G::B_TASKS, kWgThreads>(pt, p.b_scales, p.b_layout, p.C, p.n, n0, j + 2, kts, bn);
      if (G::A_FP4)
        load_scales<G::NV, kTileM, G::A_TASKS, kWgThreads>(pt, p.a_scales, p.a_layout, p.C, p.m, m0, j + 2, kts, an);
      decode_tile<G::NV, G::F16, BN, G::B_TASKS, kWgThreads>(ls + G::A_LOAD, ds, bsc, pt);
      if (G::A_FP4) decode_tile<G::NV, false, kTileM, G::A_TASKS, kWgThreads>(ls, ds + G::B16, asc, pt);
#pragma unroll
      for (int t = 0; t < G::B_TASKS; t++) bsc[t] = bsn[t], bsn[t] = bn[t];
#pragma unroll
      for (int t = 0; t < G::A_TASKS; t++) asc[t] = asn[t], asn[t] = an[t];
      fence_proxy_async(); /* the cp.async'd A tile and the decoded tiles, for wgmma */
      mbar_arrive(&full[j % STAGES]);
      const int jn = j + G::D;
      if (jn < kts) {
        /* slot jn%S last held tile jn-S = j-1: decoded by all (the named barrier above), and its
         * A tile must have been released by the consumers */
        if (jn >= STAGES) mbar_wait(&empty[jn % STAGES], ((jn - STAGES) / STAGES) & 1);
        wg_load<G>(p, load_ring + (jn % STAGES) * G::LOAD, m0, n0, jn, pt);
      }
      cp_async_commit();
    }
    cp_async_wait<0>();
    fp4_pdl_launch_dependents();
  } else {
    /* ---- consumers: warpgroup wg computes rows (wg-1)*64 .. +63 of the tile ---- */
    const int cw = wg - 1;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
    for (int kt = 0; kt < kts; kt++) {
      const int s = kt % STAGES;
      mbar_wait(&full[s], (kt / STAGES) & 1);
      const uint8_t *ds = dec_ring + (kt & 1) * G::DEC;
      const uint8_t *at = (G::A_FP4 ? ds + G::B16 : load_ring + s * G::LOAD) + cw * 64 * 128;
      const uint64_t da = sw128_desc(at), db = sw128_desc(ds);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; kk++) wgmma_k16<BN, G::F16>(acc, da + 2 * kk, db + 2 * kk, 1u);
      wgmma_commit();
      wgmma_wait<1>(); /* tile kt-1's MMAs are complete: release its slots */
      if (kt > 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++) fence_acc(acc[i]);
    fp4_pdl_launch_dependents();

    /* accumulator fragment: register 4j+q of a thread holds row g (+8 for q >= 2), column
     * 8j + 2t + (q & 1) of its warp's 16 rows */
    const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int64_t row = m0 + cw * 64 + wq * 16 + g;
    const float scale = lm_out_scale(p);
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
      const int64_t col = n0 + 8 * j + 2 * t;
      store_pair(p, scale, row, col, acc[4 * j + 0], acc[4 * j + 1]);
      store_pair(p, scale, row + 8, col, acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
#elif defined(__CUDA_ARCH__)
  /* referenced here too, or the compiler reports them unused in the passes for other targets */
  using G = wg_cfg<BN, STAGES, FMT, ACT>;
  (void)p;
  (void)G::NV, (void)G::F16, (void)G::ROWS_N, (void)G::B_TASKS, (void)G::A_TASKS, (void)G::D, (void)kBK;
  __trap(); /* the host never launches this outside sm_90a code (the wgmma check of config/dense_config.c) */
#else
  (void)p;
#endif
}

/* ---- configurations ------------------------------------------------------------------------------ */

/* The tiles config/dense_config.c names (large-m.wgmma.128x<BN>): 128 x 128 (6 stages) and 128 x 256 (5). */
template <int BN, int STAGES, int FMT, int ACT>
cudaError_t wg_launch_tile(const lm_params &p, cudaStream_t stream, int pdl) {
  using G = wg_cfg<BN, STAGES, FMT, ACT>;
  auto kernel = gemm_wgmma_kernel<BN, STAGES, FMT, ACT>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e != cudaSuccess) return e;
  const int64_t ctas = ((p.m + kTileM - 1) / kTileM) * ((p.n + BN - 1) / BN);
  if (ctas > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(kThreadsWg), (size_t)G::SMEM, stream, pdl, p);
}

template <int FMT, int ACT>
cudaError_t wg_launch_cfg(const lm_params &p, const fp4_dense_config *c, cudaStream_t s, int pdl) {
  if (c->bn == 128 && c->stages == 6) return wg_launch_tile<128, 6, FMT, ACT>(p, s, pdl);
  if (c->bn == 256 && c->stages == 5) return wg_launch_tile<256, 5, FMT, ACT>(p, s, pdl);
  return cudaErrorInvalidValue;
}

/* The chooser's shared-memory figures (config/dense_config.h) are these tiles' own. */
template <int BN, int STAGES>
constexpr bool wg_smem_matches() {
  return kTileM == 128 && wg_cfg<BN, STAGES, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_WGMMA_SMEM(BN, STAGES, 0) &&
         wg_cfg<BN, STAGES, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_FP4>::SMEM == FP4_DENSE_WGMMA_SMEM(BN, STAGES, 1);
}
static_assert(wg_smem_matches<128, 6>() && wg_smem_matches<256, 5>(),
              "FP4_DENSE_WGMMA_SMEM must give the shared memory of the wgmma tiles");

} // namespace

extern "C" int fp4_cuda_wgmma_image_ok(int device, char *why, size_t why_size) {
  static lm_sm90a_probe_cache cache;
  return lm_sm90a_image_ok(reinterpret_cast<const void *>(gemm_wgmma_kernel<128, 6, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>),
                           "wgmma", device, &cache, why, why_size);
}

extern "C" int fp4_cuda_gemm_wgmma(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  if (!c || c->family != FP4_DENSE_LARGE_M_WGMMA || a->m < 1 || a->n < 1 || a->k % 32 || a->act == FP4_CUDA_ACT_F32 ||
      (a->format == FP4_FORMAT_MXFP4 && a->act == FP4_CUDA_ACT_F16))
    return (int)cudaErrorInvalidValue;
  const lm_params p = lm_params_of(a);
  cudaStream_t s = (cudaStream_t)stream;
  const bool nv = a->format == FP4_FORMAT_NVFP4;
  switch (a->act) {
  case FP4_CUDA_ACT_BF16:
    return (int)(nv ? wg_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl)
                    : wg_launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl));
  case FP4_CUDA_ACT_F16: return (int)wg_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, c, s, pdl);
  case FP4_CUDA_ACT_FP4:
    if (nv) return (int)wg_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_FP4>(p, c, s, pdl);
    return c->bn == 128 ? (int)wg_launch_tile<128, 6, FP4_FORMAT_MXFP4, FP4_CUDA_ACT_FP4>(p, s, pdl)
                        : (int)cudaErrorInvalidValue; /* refused by the config's check (dense_config.c) */
  default: return (int)cudaErrorInvalidValue;
  }
}
