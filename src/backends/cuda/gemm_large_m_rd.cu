/*
 * Large-M (prefill) GEMMs with the weights decoded in registers ("large-m.rd.*" configs):
 * out[M, N] = scale * A[M, K] * dq(W)[N, K]^T on SM80+ tensor cores (mma.sync m16n8k16, FP32
 * accumulation). Same operands, rules and exactness as the mma.sync family of gemm_large_m.cu
 * (docs/cuda-large-m.md); what changes is where the FP4 decode happens.
 *
 * The mma.sync family decodes each FP4 weight tile into a second, 16-bit shared-memory tile between
 * two barriers, so the tensor cores idle during the decode and the decoded tile costs a shared
 * write and read. Here each warp reads its weight fragments straight from the raw FP4 tile and
 * decodes them in registers right before the MMAs that use them; the CTA meets once per K tile.
 *
 * K order inside the MMA. An m16n8k16 sum does not care in which order its 16 k indices are
 * visited, as long as A and B agree. Thread (g = lane/4, t = lane%4) is given, for each 32-element
 * K group of a 64-element K tile, the 8 consecutive physical k = 8t .. 8t+7 of its rows: for the
 * weights that is one 32-bit word of packed codes (8 codes), for bf16/f16 activations one 16-byte
 * shared load per row. The word decodes to four 16-bit pairs r0..r3 (codes 0-1, 2-3, 4-5, 6-7)
 * and the two MMA k-steps of the group take (b0, b1) = (r0, r1) and (r2, r3); the activation
 * registers line up the same way (16-byte load .x .y for the first k-step, .z .w for the second).
 * So no thread needs another thread's codes and nothing is shuffled.
 *
 * Shared memory. A STAGES-deep cp.async pipeline as in the mma.sync family:
 *   - bf16/f16 activations: [BM][64] 16-bit rows of 128 bytes; 16-byte chunk c of row r stored at
 *     chunk c ^ ((r & 1) << 2). A warp's 16-byte loads go in quarter-warps of 8 lanes = rows r, r+1
 *     (even r) x 4 chunks: the XOR puts the two rows in opposite halves of the 128 bytes, so every
 *     quarter-warp touches 32 distinct banks; cp.async writes (8 chunks of one row) permute within
 *     the row and stay conflict-free;
 *   - FP4 rows (weights, and W4A4 activations): [rows][32 bytes]; 16-byte half h of row r stored
 *     at half h ^ ((r >> 2) & 1). Each 8x8 ldmatrix of raw codes reads 8 consecutive rows' halves
 *     h, whose 16-byte chunks then fall on 8 distinct bank groups (rows 0-3 on even chunks of
 *     their 128-byte line, rows 4-7 on odd ones);
 *   - block scales: a double buffer of [rows][4] 16-bit pairs (the scale repeated twice), written
 *     by the thread that loaded the scale bytes from global memory one K tile ahead, published by
 *     the one __syncthreads at the top of the next K tile.
 * The one barrier per K tile: after it, tile kt is complete for everyone and every warp has left
 * tile kt-1, so its stage buffer is refilled (tile kt + STAGES - 1) and the other scale buffer
 * is rewritten (tile kt + 1).
 *
 * Warps: WARPS_M x WARPS_N warps each own a 64 x 64 output tile (4 x 8 m16n8 accumulators, 128
 * FP32 registers): each decoded weight pair feeds 4 MMAs, each activation fragment 8.
 *
 * Exact decode in registers. The three magnitude bits of a code index a byte lookup
 * (prmt) of the 16-bit patterns of {0, 0.5, 1, 1.5, 2, 3, 4, 6}: the high bytes, and for bf16 the
 * low bytes (f16 patterns of these values have a zero low byte); the sign bit is moved into the
 * high byte; then one packed 16-bit multiply by the block scale. The value is exactly e2m1, and the
 * product e2m1 * scale has at most 6 significant bits: exact in bf16 and f16 for every E4M3 scale
 * (2^-9 .. 448, NaN stays NaN), and in bf16 for every UE8M0 scale 2^(e-127) (subnormal products
 * included; the packed bf16/f16 multiply keeps subnormals) except 2^127 times codes >= 2, which
 * overflow to inf as in FP32; 0xFF stays NaN. MXFP4 with f16 activations is refused as in the family.
 *
 * W4A4 ("large-m.rd.pro.*"): a prologue kernel dequantizes the FP4 activations once per GEMM to
 * bf16 (exactly, the decode of large_m_common.cuh) into the context workspace, then the W4A16
 * tile runs on them. Decoding the activation fragments in registers as well (ldmatrix of raw
 * codes, the same decode) was written and spilled on sm_80 .. sm_90a next to the 128 accumulators,
 * so the in-register tiles take 16-bit activations only.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/config/dense_config.h"
#include "backends/cuda/large_m_common.cuh"
#include "backends/cuda/launch.cuh"

namespace {

constexpr int kRdBK = 64; /* K elements per tile */

/* The sm_100a/sm_120a compilers hoist more of the next fragments' loads and spill with all four
 * activation fragments live next to the 128 accumulators: there they are held two m16 tiles at a
 * time (each weight word is then decoded twice). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr bool kRdHalfA = true;
#else
constexpr bool kRdHalfA = false;
#endif

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int FMT, int ACT>
struct rd_cfg {
  static constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  static constexpr bool F16 = ACT == FP4_CUDA_ACT_F16;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int A_STAGE = BM * 128;
  static constexpr int B_STAGE = BN * 32;
  static constexpr int STAGE = A_STAGE + B_STAGE;
  static constexpr int SC_ROWS = BN;          /* weight scale rows */
  static constexpr int SC_BUF = SC_ROWS * 16; /* [rows][4] 32-bit pairs */
  static constexpr int SMEM = STAGES * STAGE + 2 * SC_BUF;
  static constexpr int SC_TASKS = (SC_ROWS * 2 + THREADS - 1) / THREADS; /* (row, K group) tasks */
  static_assert(WM == 64 && WN == 64, "warp tiles are 64 x 64");
  static_assert(NT % 4 == 0, "weight words are loaded four n8 tiles at a time");
  static_assert(ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16, "16-bit activations (W4A4: the prologue)");
};

/* ---- PTX helpers ------------------------------------------------------------------------------- */

__device__ __forceinline__ void rd_ldmatrix_x4(uint32_t r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

/* volatile: the MMAs keep their order relative to the shared loads (ldmatrix), which keeps the
 * scheduler from hoisting a whole group's loads and decode above them and running out of registers;
 * the decode arithmetic still moves freely between them. */
template <bool F16>
__device__ __forceinline__ void rd_mma(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  if (F16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ---- tile copies ---------------------------------------------------------------------------------- */

/* Byte offset of 16-byte chunk c of row r in a 16-bit activation tile. */
__device__ __forceinline__ int rd_a16_off(int r, int c) { return r * 128 + ((c ^ ((r & 1) << 2)) << 4); }

template <class G>
__device__ __forceinline__ void rd_load_stage(const lm_params &p, uint8_t *st, int64_t m0, int64_t n0, int kt) {
  const int tid = threadIdx.x;
  const int64_t k0 = (int64_t)kt * kRdBK;
  const uint16_t *a = static_cast<const uint16_t *>(p.a);
#pragma unroll
  for (int i = tid; i < (G::A_STAGE >> 4); i += G::THREADS) {
    const int r = i >> 3, c = i & 7;
    const bool ok = m0 + r < p.m && k0 + 8 * c < p.k;
    cp_async16(st + rd_a16_off(r, c), ok ? a + (m0 + r) * p.lda + k0 + 8 * c : a, ok);
  }
  rd_copy_fp4<G::B_STAGE / 32, G::THREADS>(st + G::A_STAGE, p.b, p.n, n0, k0, p.k, tid);
}

/* Scale bits of this thread's (weight row, K group) tasks for K tile kt; 0 past N or K (those
 * codes are zero-filled too). */
template <class G>
__device__ __forceinline__ void rd_load_scales(const lm_params &p, int64_t n0, int kt, int kts,
                                               uint32_t sc[G::SC_TASKS]) {
#pragma unroll
  for (int j = 0; j < G::SC_TASKS; j++) {
    const int i = threadIdx.x + j * G::THREADS, r = i >> 1, h = i & 1;
    sc[j] = i < G::SC_ROWS * 2 && kt < kts ? load_chunk_scales<G::NV>(p.b_scales, p.b_layout, p.C, p.n, n0 + r, kt, h)
                                           : 0u;
  }
}

/* Writes the 16-bit scale pairs of the tasks: row r, entry 2x + h holds the scale of physical k
 * 32h + 16x .. 32h + 16x + 15 (NVFP4 block 2h + x; MXFP4 block h), so a thread with t / 2 = x
 * finds both K groups' scales side by side; in the activations' 16-bit type. */
template <class G>
__device__ __forceinline__ void rd_store_scales(uint8_t *buf, const uint32_t sc[G::SC_TASKS]) {
#pragma unroll
  for (int j = 0; j < G::SC_TASKS; j++) {
    const int i = threadIdx.x + j * G::THREADS, r = i >> 1, h = i & 1;
    if (i < G::SC_ROWS * 2) {
      float f[2];
      chunk_factors<G::NV>(sc[j], f);
      uint32_t *row = reinterpret_cast<uint32_t *>(buf + r * 16);
      row[h] = pack2<G::F16>(f[0], f[0]);
      row[2 + h] = pack2<G::F16>(f[1], f[1]);
    }
  }
}

template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int FMT, int ACT>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, 1) gemm_large_m_rd_kernel(lm_params p) {
  using G = rd_cfg<BM, BN, WARPS_M, WARPS_N, STAGES, FMT, ACT>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t *stages = smem;
  uint8_t *scbuf = smem + STAGES * G::STAGE;

  int64_t m0, n0;
  lm_tile_origin(p, BM, BN, blockIdx.x, &m0, &n0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = (warp / WARPS_N) * G::WM, wn = (warp % WARPS_N) * G::WN;
  const int g = lane >> 2, t = lane & 3, x = t >> 1;
  const int kts = (int)((p.k + kRdBK - 1) / kRdBK);

  float acc[G::MT][G::NT][4] = {};
  fp4_pdl_wait(); /* nothing is read before the producers of A, W and their scales have finished */
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < kts) rd_load_stage<G>(p, stages + s * G::STAGE, m0, n0, s);
    cp_async_commit();
  }
  {
    uint32_t sc[G::SC_TASKS];
    rd_load_scales<G>(p, n0, 0, kts, sc);
    rd_store_scales<G>(scbuf, sc);
  }

  /* Per-lane byte offsets that do not change with the K tile. Weight ldmatrix: lane l gives the
   * address of row l % 8 of matrix l / 8 = n8 tile 4q + l / 8 of the warp. */
  const int brow = wn + (lane >> 3) * 8 + (lane & 7);
  const int boff0 = rd_fp4_off(brow, 0), boff1 = rd_fp4_off(brow, 1); /* + 32 * 32 bytes per q */
  /* Activation rows g and g + 8 of m16 tile i: wm + 16 i + g (+ 8); both have the parity of g. */
  const int arow = wm + g;

  for (int kt = 0; kt < kts; kt++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads(); /* tile kt and its scales are visible; every warp has left tile kt - 1 */
    const int nk = kt + STAGES - 1;
    if (nk < kts) rd_load_stage<G>(p, stages + (nk % STAGES) * G::STAGE, m0, n0, nk);
    cp_async_commit();
    uint32_t scn[G::SC_TASKS]; /* next tile's scale bytes: their latency hides behind the MMAs */
    rd_load_scales<G>(p, n0, kt + 1, kts, scn);

    const uint8_t *st = stages + (kt % STAGES) * G::STAGE;
    const uint8_t *sa = st, *sb = st + G::A_STAGE;
    const uint8_t *sc = scbuf + (kt & 1) * G::SC_BUF;
    /* not unrolled: hoisting the next group's loads and decode above this group's MMAs spills */
#pragma unroll 1
    for (int h = 0; h < 2; h++) {
      /* the warp's weight words of K group h: word j = n8 tile j, k = 32h + 8t .. 32h + 8t + 7 of row g */
      uint32_t bw[G::NT];
#pragma unroll
      for (int q = 0; q < G::NT / 4; q++) rd_ldmatrix_x4(&bw[4 * q], sb + (h ? boff1 : boff0) + q * 32 * 32);
      /* the activation fragments of IH m16 tiles at a time (all four, 32 registers; two on sm_100+),
       * rows g and g + 8, k = 32h + 8t .. +7 as four 16-bit pairs; then one weight word at a time,
       * decoded and used by all of them, so the decode of word j + 1 overlaps the MMAs of word j */
      constexpr int IH = kRdHalfA ? G::MT / 2 : G::MT;
#pragma unroll
      for (int i0 = 0; i0 < G::MT; i0 += IH) {
        uint32_t ad[IH][2][4];
#pragma unroll
        for (int ii = 0; ii < IH; ii++) {
          const int i = i0 + ii;
          const uint4 l = *reinterpret_cast<const uint4 *>(sa + rd_a16_off(arow + 16 * i, 4 * h + t));
          const uint4 u = *reinterpret_cast<const uint4 *>(sa + rd_a16_off(arow + 16 * i + 8, 4 * h + t));
          ad[ii][0][0] = l.x, ad[ii][0][1] = l.y, ad[ii][0][2] = l.z, ad[ii][0][3] = l.w;
          ad[ii][1][0] = u.x, ad[ii][1][1] = u.y, ad[ii][1][2] = u.z, ad[ii][1][3] = u.w;
        }
#pragma unroll
        for (int j = 0; j < G::NT; j++) {
          uint32_t bd[4];
          rd_decode_word<G::F16>(
              bw[j], *reinterpret_cast<const uint32_t *>(sc + (wn + 8 * j + g) * 16 + (2 * x + h) * 4), bd);
#pragma unroll
          for (int ii = 0; ii < IH; ii++) {
            rd_mma<G::F16>(acc[i0 + ii][j], ad[ii][0][0], ad[ii][1][0], ad[ii][0][1], ad[ii][1][1], bd[0], bd[1]);
            rd_mma<G::F16>(acc[i0 + ii][j], ad[ii][0][2], ad[ii][1][2], ad[ii][0][3], ad[ii][1][3], bd[2], bd[3]);
          }
        }
      }
    }
    /* the other scale buffer was last read in tile kt - 1, which every warp has left */
    rd_store_scales<G>(scbuf + ((kt + 1) & 1) * G::SC_BUF, scn);
  }
  cp_async_wait<0>();
  fp4_pdl_launch_dependents(); /* every input has been read */
  lm_store_mma_acc<G::MT, G::NT>(p, acc, m0 + wm, n0 + wn, g, t);
}

/* ---- configurations: the tiles config/dense_config.c names (large-m.rd[.pro].<BM>x<BN>) ----------- */

/* 128 x 128 on 2 x 2 warps (4 stages: two CTAs per SM where shared memory allows), 128 x 256 on
 * 2 x 4 and 256 x 128 on 4 x 2 (3 stages). A prologue config takes W4A4 only: the activations are
 * dequantized to bf16 into the context workspace (M x K x 2 bytes), then the tile runs as W4A16. */
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES, int FMT, int ACT>
cudaError_t rd_launch_tile(const lm_params &p, cudaStream_t stream, int pdl) {
  using G = rd_cfg<BM, BN, WARPS_M, WARPS_N, STAGES, FMT, ACT>;
  return lm_launch_tiles(gemm_large_m_rd_kernel<BM, BN, WARPS_M, WARPS_N, STAGES, FMT, ACT>, BM, BN, G::THREADS,
                         G::SMEM, p, stream, pdl);
}

template <int FMT, int ACT>
cudaError_t rd_launch_cfg(const lm_params &p, const fp4_dense_config *c, cudaStream_t s, int pdl) {
  if (c->bm == 128 && c->bn == 128) return rd_launch_tile<128, 128, 2, 2, 4, FMT, ACT>(p, s, pdl);
  if (c->bm == 128 && c->bn == 256) return rd_launch_tile<128, 256, 2, 4, 3, FMT, ACT>(p, s, pdl);
  if (c->bm == 256 && c->bn == 128) return rd_launch_tile<256, 128, 4, 2, 3, FMT, ACT>(p, s, pdl);
  return cudaErrorInvalidValue;
}

template <int FMT>
cudaError_t rd_launch_prologue(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, cudaStream_t s, int pdl) {
  return lm_run_with_dequant_a<FMT>(
      a, s, pdl, [&](const lm_params &p) { return rd_launch_cfg<FMT, FP4_CUDA_ACT_BF16>(p, c, s, pdl); });
}

/* The chooser's shared-memory figures (config/dense_config.h) are these tiles' own, and its warp
 * grids theirs (the FP4 format and the activations' 16-bit type change neither). */
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
constexpr bool rd_smem_matches() {
  return rd_cfg<BM, BN, WARPS_M, WARPS_N, STAGES, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM ==
         FP4_DENSE_RD_SMEM(BM, BN, STAGES);
}
static_assert(rd_smem_matches<128, 128, 2, 2, 4>() && rd_smem_matches<128, 256, 2, 4, 3>() &&
                  rd_smem_matches<256, 128, 4, 2, 3>(),
              "FP4_DENSE_RD_SMEM must give the shared memory of the register-decode tiles");

} // namespace

extern "C" int fp4_cuda_gemm_large_m_rd(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  if (!c || c->family != FP4_DENSE_LARGE_M_RD || a->m < 1 || a->n < 1 || a->k % 32 || a->act == FP4_CUDA_ACT_F32 ||
      (a->format == FP4_FORMAT_MXFP4 && a->act == FP4_CUDA_ACT_F16) || (c->prologue != (a->act == FP4_CUDA_ACT_FP4)))
    return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  const bool nv = a->format == FP4_FORMAT_NVFP4;
  if (c->prologue)
    return (int)(nv ? rd_launch_prologue<FP4_FORMAT_NVFP4>(a, c, s, pdl) : rd_launch_prologue<FP4_FORMAT_MXFP4>(a, c, s, pdl));
  const lm_params p = lm_params_of(a);
  switch (a->act) {
  case FP4_CUDA_ACT_BF16:
    return (int)(nv ? rd_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl)
                    : rd_launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl));
  case FP4_CUDA_ACT_F16: return (int)rd_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, c, s, pdl);
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int fp4_cuda_dequant_fp4_rows(const void *codes, const uint8_t *scales, int format, int layout,
                                         int64_t rows, int64_t k, uint16_t *out, void *stream, int pdl) {
  if (rows < 1 || k < 32 || k % 32) return (int)cudaErrorInvalidValue;
  fp4_cuda_gemm_args a;
  memset(&a, 0, sizeof a);
  a.format = format;
  a.act = FP4_CUDA_ACT_FP4;
  a.a = codes;
  a.lda = k / 2;
  a.a_scales = scales;
  a.a_layout = layout;
  a.m = rows;
  a.k = k;
  const lm_params p = lm_params_of(&a);
  cudaStream_t s = (cudaStream_t)stream;
  return (int)(format == FP4_FORMAT_NVFP4 ? lm_launch_dequant_a<FP4_FORMAT_NVFP4>(p, out, s, pdl)
                                         : lm_launch_dequant_a<FP4_FORMAT_MXFP4>(p, out, s, pdl));
}

extern "C" int fp4_cuda_gemm_via_bf16_a(const fp4_cuda_gemm_args *a,
                                        int (*gemm)(const fp4_cuda_gemm_args *w4a16, void *user), void *user,
                                        void *stream, int pdl) {
  if (a->act != FP4_CUDA_ACT_FP4 || a->m < 1 || a->k % 32) return (int)cudaErrorInvalidValue;
  const auto run = [&](const lm_params &p) {
    fp4_cuda_gemm_args w4a16 = *a;
    w4a16.act = FP4_CUDA_ACT_BF16;
    w4a16.a = p.a;
    w4a16.lda = p.lda;
    w4a16.a_scales = NULL;
    w4a16.dequant_a = 0;
    return (cudaError_t)gemm(&w4a16, user);
  };
  cudaStream_t s = (cudaStream_t)stream;
  return (int)(a->format == FP4_FORMAT_NVFP4 ? lm_run_with_dequant_a<FP4_FORMAT_NVFP4>(a, s, pdl, run)
                                             : lm_run_with_dequant_a<FP4_FORMAT_MXFP4>(a, s, pdl, run));
}
