/*
 * Large-M (prefill) GEMMs: out[M, N] = scale * A[M, K] * dq(W)[N, K]^T on SM80+ tensor cores
 * (mma.sync m16n8k16, FP32 accumulation). The same kernels run on SM80, SM89, SM90 and newer; the
 * sm_90a register-A wgmma family is in gemm_large_m_wgra.cu (docs/cuda-large-m.md).
 *
 * Structure of one CTA (BM x BN output tile, 8 warps as 2 x 4, K in 64-element tiles):
 *   - a STAGES-deep cp.async pipeline brings, per K tile, the activation tile (bf16/f16 rows, or the
 *     packed FP4 codes for W4A4) and the packed FP4 weight codes into shared memory; tails in M, N
 *     and K are zero-filled by the copy itself (src-size 0), so no tile is special;
 *   - the CTA then dequantizes the FP4 tile(s) once into a 16-bit tile (each
 *     thread 32 elements of one row: one 16-byte read, four 16-byte writes), so the warps sharing
 *     weight columns do not repeat the decode;
 *   - warps read both operands with ldmatrix from XOR-swizzled rows (16-byte chunk c of row r is
 *     stored at chunk c ^ (r & 7): conflict-free for the cp.async writes, the dequant writes and
 *     the ldmatrix reads) and issue the MMAs;
 *   - the epilogue multiplies the FP32 accumulators by alpha and the per-tensor multipliers once
 *     and stores bf16, f16 or f32 with masks.
 *
 * Exactness: a code's magnitude bits are placed in a float's exponent/mantissa field, which
 * gives e2m1 * 2^-126 exactly (the e = 0 code 0.5 becomes a float subnormal); multiplying by 2^126
 * and then by the block scale (E4M3, or 2^(e-127) for MXFP4) is exact in FP32, and the product, at
 * most 6 significant bits, converts to bf16 (and, for NVFP4, to f16) without rounding. MXFP4 values stay exact in bf16 for every scale byte except
 * 2^127 times codes >= 2 (they overflow FP32 as well; 0xFF stays NaN). They do not fit f16, so
 * MXFP4 with f16 activations is refused; f32 activations are refused too (convert them to bf16, or
 * use the small-M kernels, which split f32 into three bf16 parts, up to M = 64).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/config/dense_config.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kThreads = 256; /* 8 warps: 2 along M x 4 along N */

/* Two 128x128 CTAs per SM need about 2 x 96 KiB of shared memory: SM80, SM90 and SM100 have it,
 * SM86/SM89/SM120 (about 100 KiB per SM) do not, so there the register budget is not halved. */
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
constexpr bool kTwoCtasPerSm = false;
#else
constexpr bool kTwoCtasPerSm = true;
#endif
constexpr int kBK = 64;       /* K elements per tile: 128 bytes of a 16-bit row, 32 of an FP4 row */

struct lm_params {
  const void *a;           /* dense [M, lda] or FP4 [M, K/2] */
  const uint8_t *a_scales; /* W4A4 */
  const uint8_t *b;        /* [N, K/2] */
  const uint8_t *b_scales;
  void *out;
  int64_t lda, ldo, m, n, k, C; /* C: scale columns (K / block) */
  int a_layout, b_layout, out_dtype;
  float scale;
  const float *alpha_device; /* NULL, or multiplies scale on the GPU (fp4_cuda_gemm_args) */
};

/* ---- small PTX helpers ------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte asynchronous copy; valid == false writes 16 zero bytes and reads nothing. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <bool F16>
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if (F16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Byte offset of 16-byte chunk c (0..7) of row r in a swizzled [rows][64] 16-bit tile. */
__device__ __forceinline__ int swz(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

/* ---- exact FP4 -> 16-bit decode -------------------------------------------------------------- */

/* Code i (nibble i of w) as a float equal to e2m1(code) * 2^-126: sign to bit 31, the three
 * magnitude bits to the exponent's two low bits and the mantissa's top bit (code 1, 0.5, becomes
 * the subnormal 2^-127; FP32 subnormals are kept: the library is not built with -ftz). */
template <int I>
__device__ __forceinline__ float nibble_scaled(uint32_t w) {
  const uint32_t t = w << (28 - 4 * I);
  return __uint_as_float((t & 0x80000000u) | ((t >> 6) & 0x01C00000u));
}

template <bool F16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if (F16) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* Eight codes of one word -> four 16-bit pairs (elements 2j, 2j+1 in pair j), times the block
 * scale f. Both multiplies are exact; folding 2^126 into f would overflow FP32 for E4M3 scales
 * above 4. */
template <bool F16>
__device__ __forceinline__ uint4 decode_word(uint32_t w, float f) {
  float v[8];
  v[0] = nibble_scaled<0>(w);
  v[1] = nibble_scaled<1>(w);
  v[2] = nibble_scaled<2>(w);
  v[3] = nibble_scaled<3>(w);
  v[4] = nibble_scaled<4>(w);
  v[5] = nibble_scaled<5>(w);
  v[6] = nibble_scaled<6>(w);
  v[7] = nibble_scaled<7>(w);
#pragma unroll
  for (int i = 0; i < 8; i++) {
    v[i] = __fmul_rn(__fmul_rn(v[i], 0x1p126f), f);
  }
  return make_uint4(pack2<F16>(v[0], v[1]), pack2<F16>(v[2], v[3]), pack2<F16>(v[4], v[5]), pack2<F16>(v[6], v[7]));
}

/* Multipliers of one 32-element chunk from its scale bits: NVFP4 two E4M3 bytes (blocks 2h, 2h+1),
 * MXFP4 one UE8M0 byte. */
template <bool NV>
__device__ __forceinline__ void chunk_factors(uint32_t sc, float f[2]) {
  if (NV) {
    f[0] = fp4_e4m3_decode_inline((uint8_t)(sc & 0xFF));
    f[1] = fp4_e4m3_decode_inline((uint8_t)(sc >> 8));
  } else {
    f[0] = f[1] = fp4_ue8m0_decode_inline((uint8_t)sc);
  }
}

/* The scale bits of chunk h (32 elements) of row r in K tile kt; 0 outside the matrix, so padded
 * rows and K tails (zero-filled codes) dequantize to zero. */
template <bool NV>
__device__ __forceinline__ uint32_t load_chunk_scales(const uint8_t *scales, int layout, int64_t C, int64_t rows,
                                                      int64_t r, int kt, int h) {
  const int64_t c = NV ? 4 * (int64_t)kt + 2 * h : 2 * (int64_t)kt + h;
  if (r >= rows || c >= C) return 0u;
  const int64_t off = fp4_layout_offset(layout, C, r, c);
  if (NV) return __ldg(reinterpret_cast<const uint16_t *>(scales + off));
  return __ldg(scales + off);
}

/* ---- the kernel --------------------------------------------------------------------------------- */

/* ACT: FP4_CUDA_ACT_BF16, FP4_CUDA_ACT_F16 or FP4_CUDA_ACT_FP4 (W4A4, decoded to bf16). */
template <int BM, int BN, int STAGES, int FMT, int ACT>
struct lm_cfg {
  static constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  static constexpr bool F16 = ACT == FP4_CUDA_ACT_F16;
  static constexpr bool A_FP4 = ACT == FP4_CUDA_ACT_FP4;
  static constexpr int WM = BM / 2, WN = BN / 4; /* warp tile */
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int A_STAGE = A_FP4 ? BM * 32 : BM * 128; /* bytes of one stage's A tile */
  static constexpr int B_STAGE = BN * 32;
  static constexpr int STAGE = A_STAGE + B_STAGE;
  static constexpr int B16 = BN * 128, A16 = BM * 128; /* one 16-bit tile */
  static constexpr int SMEM = STAGES * STAGE + B16 + (A_FP4 ? A16 : 0);
  static constexpr int A_TASKS = (BM * 2 + kThreads - 1) / kThreads; /* 32-element decode tasks */
  static constexpr int B_TASKS = (BN * 2 + kThreads - 1) / kThreads;
  static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
};

/* Issues the copies of K tile kt into stage buffer st. */
template <class G>
__device__ __forceinline__ void load_stage(const lm_params &p, uint8_t *st, int64_t m0, int64_t n0, int kt) {
  const int tid = threadIdx.x;
  const int64_t k0 = (int64_t)kt * kBK;
  uint8_t *sa = st, *sb = st + G::A_STAGE;
  if (G::A_FP4) {
    const uint8_t *a = static_cast<const uint8_t *>(p.a);
    for (int i = tid; i < (G::A_STAGE >> 4); i += kThreads) {
      const int r = i >> 1, h = i & 1;
      const bool ok = m0 + r < p.m && k0 + 32 * h < p.k;
      cp_async16(sa + i * 16, ok ? a + (m0 + r) * (p.k >> 1) + (k0 >> 1) + 16 * h : a, ok);
    }
  } else {
    const uint16_t *a = static_cast<const uint16_t *>(p.a);
    for (int i = tid; i < (G::A_STAGE >> 4); i += kThreads) {
      const int r = i >> 3, c = i & 7;
      const bool ok = m0 + r < p.m && k0 + 8 * c < p.k;
      cp_async16(sa + swz(r, c), ok ? a + (m0 + r) * p.lda + k0 + 8 * c : a, ok);
    }
  }
  for (int i = tid; i < (G::B_STAGE >> 4); i += kThreads) {
    const int r = i >> 1, h = i & 1;
    const bool ok = n0 + r < p.n && k0 + 32 * h < p.k;
    cp_async16(sb + i * 16, ok ? p.b + (n0 + r) * (p.k >> 1) + (k0 >> 1) + 16 * h : p.b, ok);
  }
}

/* Decodes a raw FP4 tile ([rows][32 bytes]) into a swizzled 16-bit tile; task i = row i/2, half
 * i%2; sc[j] holds the scale bits of this thread's j-th task. */
template <bool NV, bool F16, int ROWS, int TASKS>
__device__ __forceinline__ void decode_tile(const uint8_t *raw, uint8_t *dst, const uint32_t sc[TASKS]) {
#pragma unroll
  for (int j = 0; j < TASKS; j++) {
    const int i = threadIdx.x + j * kThreads;
    if (i < ROWS * 2) {
      const int r = i >> 1, h = i & 1;
      const uint4 w = *reinterpret_cast<const uint4 *>(raw + i * 16);
      float f[2];
      chunk_factors<NV>(sc[j], f);
      *reinterpret_cast<uint4 *>(dst + swz(r, 4 * h + 0)) = decode_word<F16>(w.x, f[0]);
      *reinterpret_cast<uint4 *>(dst + swz(r, 4 * h + 1)) = decode_word<F16>(w.y, f[0]);
      *reinterpret_cast<uint4 *>(dst + swz(r, 4 * h + 2)) = decode_word<F16>(w.z, f[1]);
      *reinterpret_cast<uint4 *>(dst + swz(r, 4 * h + 3)) = decode_word<F16>(w.w, f[1]);
    }
  }
}

template <bool NV, int ROWS, int TASKS>
__device__ __forceinline__ void load_scales(const uint8_t *scales, int layout, int64_t C, int64_t rows, int64_t r0,
                                            int kt, int kts, uint32_t sc[TASKS]) {
#pragma unroll
  for (int j = 0; j < TASKS; j++) {
    const int i = threadIdx.x + j * kThreads;
    sc[j] = i < ROWS * 2 && kt < kts ? load_chunk_scales<NV>(scales, layout, C, rows, r0 + (i >> 1), kt, i & 1) : 0u;
  }
}

__device__ __forceinline__ void store_pair(const lm_params &p, float scale, int64_t row, int64_t col, float v0,
                                           float v1) {
  if (row >= p.m || col >= p.n) return;
  v0 = __fmul_rn(v0, scale);
  v1 = __fmul_rn(v1, scale);
  const int64_t i = row * p.ldo + col;
  const bool two = col + 1 < p.n;
  if (p.out_dtype == FP4_DTYPE_F32) {
    float *o = static_cast<float *>(p.out) + i;
    if (two && !(reinterpret_cast<uintptr_t>(o) & 7)) {
      *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (two) o[1] = v1;
    }
  } else {
    uint16_t *o = static_cast<uint16_t *>(p.out) + i;
    const bool bf = p.out_dtype == FP4_DTYPE_BF16;
    const uint16_t h0 = bf ? fp4_bf16_from_f32_inline(v0) : fp4_f16_from_f32_inline(v0);
    const uint16_t h1 = bf ? fp4_bf16_from_f32_inline(v1) : fp4_f16_from_f32_inline(v1);
    if (two && !(reinterpret_cast<uintptr_t>(o) & 3)) {
      *reinterpret_cast<uint32_t *>(o) = (uint32_t)h0 | ((uint32_t)h1 << 16);
    } else {
      o[0] = h0;
      if (two) o[1] = h1;
    }
  }
}

template <int BM, int BN, int STAGES, int FMT, int ACT>
__global__ void __launch_bounds__(kThreads, (!kTwoCtasPerSm || BN >= 256 || (ACT == FP4_CUDA_ACT_FP4 && BM >= 128)) ? 1 : 2) gemm_large_m_kernel(lm_params p) {
  using G = lm_cfg<BM, BN, STAGES, FMT, ACT>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t *stages = smem;
  uint8_t *b16 = smem + STAGES * G::STAGE;
  uint8_t *a16 = b16 + G::B16; /* W4A4 only */

  /* Tile order: groups of 8 M tiles sweep N together, so a group's A panels and the current B
   * panel stay in L2. */
  const int64_t tm = (p.m + BM - 1) / BM, tn = (p.n + BN - 1) / BN;
  const int64_t id = blockIdx.x, width = 8 * tn, grp = id / width;
  const int64_t first = grp * 8, gsz = min((int64_t)8, tm - first);
  const int64_t m0 = (first + (id % width) % gsz) * BM, n0 = ((id % width) / gsz) * BN;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = (warp >> 2) * G::WM, wn = (warp & 3) * G::WN;
  const int kts = (int)((p.k + kBK - 1) / kBK);

  float acc[G::MT][G::NT][4];
#pragma unroll
  for (int i = 0; i < G::MT; i++)
#pragma unroll
    for (int j = 0; j < G::NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  fp4_pdl_wait(); /* nothing is read before the producers of A and W have finished */
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < kts) load_stage<G>(p, stages + s * G::STAGE, m0, n0, s);
    cp_async_commit();
  }
  /* Block scales of tiles kt (bsc, asc) and kt + 1 (bsn, asn): loads are issued two tiles ahead, so
   * a global-memory round trip never sits between two consecutive tiles. On the H200 this changed
   * nothing for this kernel (it is instruction-issue bound); the register-A wgmma tiles gained 5-13%
   * from the same change (bench/results/h200/2026-11-30-large-m-prefill/
   * scales-two-tiles-ahead.csv). */
  uint32_t bsc[G::B_TASKS], asc[G::A_TASKS], bsn[G::B_TASKS], asn[G::A_TASKS];
  load_scales<G::NV, BN, G::B_TASKS>(p.b_scales, p.b_layout, p.C, p.n, n0, 0, kts, bsc);
  if (G::A_FP4) load_scales<G::NV, BM, G::A_TASKS>(p.a_scales, p.a_layout, p.C, p.m, m0, 0, kts, asc);
  load_scales<G::NV, BN, G::B_TASKS>(p.b_scales, p.b_layout, p.C, p.n, n0, 1, kts, bsn);
  if (G::A_FP4) load_scales<G::NV, BM, G::A_TASKS>(p.a_scales, p.a_layout, p.C, p.m, m0, 1, kts, asn);

  for (int kt = 0; kt < kts; kt++) {
    cp_async_wait<STAGES - 2>();
    /* Tile kt landed for everyone, and every warp is done with tile kt-1: its stage buffer may be
     * refilled and the one decoded tile overwritten. */
    __syncthreads();
    const uint8_t *st = stages + (kt % STAGES) * G::STAGE;
    uint8_t *bt = b16;
    uint8_t *at = G::A_FP4 ? a16 : const_cast<uint8_t *>(st);
    {
      uint32_t bn[G::B_TASKS], an[G::A_TASKS];
      /* the scales of the tile after next now: their latency hides behind two tiles of work */
      load_scales<G::NV, BN, G::B_TASKS>(p.b_scales, p.b_layout, p.C, p.n, n0, kt + 2, kts, bn);
      if (G::A_FP4) load_scales<G::NV, BM, G::A_TASKS>(p.a_scales, p.a_layout, p.C, p.m, m0, kt + 2, kts, an);
      decode_tile<G::NV, G::F16, BN, G::B_TASKS>(st + G::A_STAGE, bt, bsc);
      if (G::A_FP4) decode_tile<G::NV, false, BM, G::A_TASKS>(st, at, asc);
#pragma unroll
      for (int j = 0; j < G::B_TASKS; j++) bsc[j] = bsn[j], bsn[j] = bn[j];
#pragma unroll
      for (int j = 0; j < G::A_TASKS; j++) asc[j] = asn[j], asn[j] = an[j];
    }
    const int nk = kt + STAGES - 1;
    if (nk < kts) load_stage<G>(p, stages + (nk % STAGES) * G::STAGE, m0, n0, nk);
    cp_async_commit();
    __syncthreads(); /* the decoded tiles are complete */

#pragma unroll
    for (int kk = 0; kk < kBK / 16; kk++) {
      uint32_t bf[G::NT][2];
#pragma unroll
      for (int j = 0; j < G::NT; j += 2) {
        const int r = wn + j * 8 + (lane & 7) + (lane >> 4) * 8;
        uint32_t t[4];
        ldmatrix_x4(t, bt + swz(r, 2 * kk + ((lane >> 3) & 1)));
        bf[j][0] = t[0];
        bf[j][1] = t[1];
        bf[j + 1][0] = t[2];
        bf[j + 1][1] = t[3];
      }
      /* one A fragment live at a time: the 128-register budget of two CTAs per SM has no slack */
#pragma unroll
      for (int i = 0; i < G::MT; i++) {
        uint32_t af[4];
        const int r = wm + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(af, at + swz(r, 2 * kk + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < G::NT; j++) mma16816<G::F16>(acc[i][j], af, bf[j][0], bf[j][1]);
      }
    }
  }
  cp_async_wait<0>();
  fp4_pdl_launch_dependents(); /* every input has been read */

  const int g = lane >> 2, t = lane & 3;
  /* the device alpha (if any) is read after griddepcontrol.wait: a producer may have written it */
  const float scale = p.alpha_device ? __fmul_rn(p.scale, *p.alpha_device) : p.scale;
#pragma unroll
  for (int i = 0; i < G::MT; i++)
#pragma unroll
    for (int j = 0; j < G::NT; j++) {
      const int64_t row = m0 + wm + i * 16 + g, col = n0 + wn + j * 8 + 2 * t;
      store_pair(p, scale, row, col, acc[i][j][0], acc[i][j][1]);
      store_pair(p, scale, row + 8, col, acc[i][j][2], acc[i][j][3]);
    }
}

/* ---- configurations: the tiles config/dense_config.c names (large-m.<BM>x<BN>.s<S>) ---------------- */

template <int BM, int BN, int STAGES, int FMT, int ACT>
cudaError_t launch_tile(const lm_params &p, cudaStream_t stream, int pdl) {
  using G = lm_cfg<BM, BN, STAGES, FMT, ACT>;
  auto kernel = gemm_large_m_kernel<BM, BN, STAGES, FMT, ACT>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e != cudaSuccess) return e;
  const int64_t ctas = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN);
  if (ctas > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(kThreads), (size_t)G::SMEM, stream, pdl, p);
}

template <int FMT, int ACT>
cudaError_t launch_cfg(const lm_params &p, const fp4_dense_config *c, cudaStream_t s, int pdl) {
  if (c->bm == 128 && c->bn == 128 && c->stages == 4) return launch_tile<128, 128, 4, FMT, ACT>(p, s, pdl);
  if (c->bm == 128 && c->bn == 128 && c->stages == 3) return launch_tile<128, 128, 3, FMT, ACT>(p, s, pdl);
  if (c->bm == 128 && c->bn == 256 && c->stages == 3) return launch_tile<128, 256, 3, FMT, ACT>(p, s, pdl);
  if (c->bm == 64 && c->bn == 128 && c->stages == 4) return launch_tile<64, 128, 4, FMT, ACT>(p, s, pdl);
  return cudaErrorInvalidValue;
}

/* The chooser's shared-memory figures (config/dense_config.h) are these tiles' own. */
template <int BM, int BN, int STAGES>
constexpr bool smem_matches() {
  return lm_cfg<BM, BN, STAGES, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_MMA_SMEM(BM, BN, STAGES, 0) &&
         lm_cfg<BM, BN, STAGES, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_FP4>::SMEM == FP4_DENSE_MMA_SMEM(BM, BN, STAGES, 1);
}
static_assert(smem_matches<128, 128, 4>() && smem_matches<128, 128, 3>() && smem_matches<128, 256, 3>() &&
                  smem_matches<64, 128, 4>(),
              "FP4_DENSE_MMA_SMEM must give the shared memory of the mma.sync tiles");

} // namespace

extern "C" int fp4_cuda_gemm_large_m(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  if (!c || c->family != FP4_DENSE_LARGE_M_MMA || a->m < 1 || a->n < 1 || a->k % 32 || a->act == FP4_CUDA_ACT_F32 ||
      (a->format == FP4_FORMAT_MXFP4 && a->act == FP4_CUDA_ACT_F16))
    return (int)cudaErrorInvalidValue;
  lm_params p;
  p.a = a->a;
  p.a_scales = a->a_scales;
  p.b = a->b;
  p.b_scales = a->b_scales;
  p.out = a->out;
  p.lda = a->lda;
  p.ldo = a->ldo;
  p.m = a->m;
  p.n = a->n;
  p.k = a->k;
  p.C = a->k / (a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  p.a_layout = a->a_layout;
  p.b_layout = a->b_layout;
  p.out_dtype = a->out_dtype;
  p.scale = a->scale;
  p.alpha_device = a->alpha_device;
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e;
  const bool nv = a->format == FP4_FORMAT_NVFP4;
  switch (a->act) {
  case FP4_CUDA_ACT_BF16:
    e = nv ? launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl)
           : launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, c, s, pdl);
    break;
  case FP4_CUDA_ACT_F16: e = launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, c, s, pdl); break;
  case FP4_CUDA_ACT_FP4:
    e = nv ? launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_FP4>(p, c, s, pdl)
           : launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_FP4>(p, c, s, pdl);
    break;
  default: e = cudaErrorInvalidValue;
  }
  return (int)e;
}
