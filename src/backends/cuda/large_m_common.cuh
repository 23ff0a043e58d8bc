/*
 * Device pieces of the sm_90a wgmma GEMM (gemm_large_m_sm90.cu) and the register-decode GEMM
 * (gemm_large_m_rd.cu: it adds the launch and mma.sync accumulator-store helpers at the end), lifted from the mma.sync family (gemm_large_m.cu,
 * which keeps its own copies: sharing them changed its register allocation and spilled on one target): the kernel parameters, cp.async, the 128-byte XOR swizzle of 16-bit tiles, the
 * exact FP4 -> bf16/f16 decode (SPEC 3; the reasoning is in gemm_large_m.cu's header comment and
 * docs/cuda-large-m.md) and the masked epilogue store. Everything sits in an unnamed namespace:
 * each kernel file gets its own copy of these inline device functions.
 */
#ifndef FP4_BACKENDS_CUDA_LARGE_M_COMMON_CUH
#define FP4_BACKENDS_CUDA_LARGE_M_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

struct lm_params {
  const void *a;           /* dense [M, lda] or FP4 [M, K/2] */
  const uint8_t *a_scales; /* W4A4 */
  const uint8_t *b;        /* [N, K/2] */
  const uint8_t *b_scales;
  void *out;
  int64_t lda, ldo, m, n, k, C; /* C: scale columns (K / block) */
  int a_layout, b_layout, out_dtype;
  float scale;
};

/* The kernel parameters of a GEMM call (the caller validated the arguments). */
inline lm_params lm_params_of(const fp4_cuda_gemm_args *a) {
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
  return p;
}

/* Launches kernel on one CTA per bm x bn output tile with smem bytes of dynamic shared memory (the
 * opt-in set first). */
template <class Kernel>
cudaError_t lm_launch_tiles(Kernel kernel, int bm, int bn, int threads, int smem, const lm_params &p,
                            cudaStream_t stream, int pdl) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const int64_t ctas = ((p.m + bm - 1) / bm) * ((p.n + bn - 1) / bn);
  if (ctas > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(threads), (size_t)smem, stream, pdl, p);
}

/* Tile origin of CTA id: groups of 8 M tiles sweep N together, so that a group's activation panels
 * and the current weight panel stay in L2. */
__device__ __forceinline__ void lm_tile_origin(const lm_params &p, int bm, int bn, int64_t id, int64_t *m0, int64_t *n0) {
  const int64_t tm = (p.m + bm - 1) / bm, tn = (p.n + bn - 1) / bn;
  const int64_t width = 8 * tn, grp = id / width;
  const int64_t first = grp * 8, gsz = min((int64_t)8, tm - first);
  *m0 = (first + (id % width) % gsz) * bm;
  *n0 = ((id % width) / gsz) * bn;
}

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
/* Decodes a raw FP4 tile ([rows][32 bytes]) into a swizzled 16-bit tile; task i = row i/2, half
 * i%2, thread tid of THREADS takes tasks tid + j * THREADS; sc[j] holds the scale bits of its j-th task. */
template <bool NV, bool F16, int ROWS, int TASKS, int THREADS>
__device__ __forceinline__ void decode_tile(const uint8_t *raw, uint8_t *dst, const uint32_t sc[TASKS], int tid) {
#pragma unroll
  for (int j = 0; j < TASKS; j++) {
    const int i = tid + j * THREADS;
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

template <bool NV, int ROWS, int TASKS, int THREADS>
__device__ __forceinline__ void load_scales(int tid, const uint8_t *scales, int layout, int64_t C, int64_t rows, int64_t r0,
                                            int kt, int kts, uint32_t sc[TASKS]) {
#pragma unroll
  for (int j = 0; j < TASKS; j++) {
    const int i = tid + j * THREADS;
    sc[j] = i < ROWS * 2 && kt < kts ? load_chunk_scales<NV>(scales, layout, C, rows, r0 + (i >> 1), kt, i & 1) : 0u;
  }
}

/* Copies rows r0 .. r0+ROWS-1, K elements k0 .. k0+63 of packed FP4 rows (K/2 bytes each) into a
 * linear [ROWS][32 bytes] tile with 16-byte cp.async; rows past `rows` and chunks past K are
 * zero-filled by the copy itself. Thread tid of THREADS. */
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_fp4_rows(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t r0, int64_t k0,
                                              int64_t k, int tid) {
  for (int i = tid; i < ROWS * 2; i += THREADS) {
    const int r = i >> 1, h = i & 1;
    const bool ok = r0 + r < rows && k0 + 32 * h < k;
    cp_async16(dst + i * 16, ok ? src + (r0 + r) * (k >> 1) + (k0 >> 1) + 16 * h : src, ok);
  }
}

/* The same for 16-bit rows (row stride ld elements) into a swizzled [ROWS][64] 16-bit tile. */
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_16bit_rows(uint8_t *dst, const uint16_t *src, int64_t ld, int64_t rows, int64_t r0,
                                                int64_t k0, int64_t k, int tid) {
  for (int i = tid; i < ROWS * 8; i += THREADS) {
    const int r = i >> 3, c = i & 7;
    const bool ok = r0 + r < rows && k0 + 8 * c < k;
    cp_async16(dst + swz(r, c), ok ? src + (r0 + r) * ld + k0 + 8 * c : src, ok);
  }
}

__device__ __forceinline__ void store_pair(const lm_params &p, int64_t row, int64_t col, float v0, float v1) {
  if (row >= p.m || col >= p.n) return;
  v0 = __fmul_rn(v0, p.scale);
  v1 = __fmul_rn(v1, p.scale);
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
/* Stores a warp's MT x NT m16n8 FP32 accumulators (mma.sync layout: lane = 4 g + t holds rows g and
 * g + 8, columns 2t and 2t + 1 of each) whose tile starts at (row0, col0). */
template <int MT, int NT>
__device__ __forceinline__ void lm_store_mma_acc(const lm_params &p, const float (&acc)[MT][NT][4], int64_t row0,
                                                 int64_t col0, int g, int t) {
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) {
      const int64_t row = row0 + i * 16 + g, col = col0 + j * 8 + 2 * t;
      store_pair(p, row, col, acc[i][j][0], acc[i][j][1]);
      store_pair(p, row + 8, col, acc[i][j][2], acc[i][j][3]);
    }
}

/* ---- pieces of the mma.sync tile loop (the grouped large-M kernel, moe_grouped_large.cu; the dense
 * kernels of gemm_large_m.cu keep their own copies, see the top of this file) ---------------------- */

/* Two 128x128 CTAs per SM need about 2 x 96 KiB of shared memory: SM80, SM90 and SM100 have it,
 * SM86/SM89/SM120 (about 100 KiB per SM) do not, so there the register budget is not halved. */
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
constexpr bool kLmTwoCtasPerSm = false;
#else
constexpr bool kLmTwoCtasPerSm = true;
#endif

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

/* Shape of an mma.sync tile of BM x BN outputs, 8 warps as 2 (M) x 4 (N), K tiles of 64 elements.
 * ACT: FP4_CUDA_ACT_BF16, FP4_CUDA_ACT_F16 or FP4_CUDA_ACT_FP4 (W4A4, decoded to bf16). */
template <int BM, int BN, int STAGES, int FMT, int ACT, int THREADS>
struct lm_tile_cfg {
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
  static constexpr int A_TASKS = (BM * 2 + THREADS - 1) / THREADS; /* 32-element decode tasks */
  static constexpr int B_TASKS = (BN * 2 + THREADS - 1) / THREADS;
  static_assert(THREADS == 256, "8 warps as 2 x 4");
  static_assert(MT >= 1 && NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
};

/* The MMAs of one 64-element K tile for warp (wm, wn) from the swizzled 16-bit tiles at (A) and bt
 * (B), accumulating into acc. One A fragment is live at a time (register budget). */
template <class G>
__device__ __forceinline__ void lm_mma_ktile(const uint8_t *at, const uint8_t *bt, int wm, int wn, int lane,
                                             float (&acc)[G::MT][G::NT][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
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
} // namespace

#endif
