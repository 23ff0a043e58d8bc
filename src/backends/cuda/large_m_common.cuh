/*
 * Device pieces of the register-decode GEMM (gemm_large_m_rd.cu: it adds the launch and mma.sync
 * accumulator-store helpers at the end) and the register-A wgmma GEMM (gemm_large_m_wgra.cu: the
 * sm_90a pieces and the in-register decode), lifted from the mma.sync family (gemm_large_m.cu, which
 * keeps its own copies: sharing them changed its register allocation and spilled on one target): the
 * kernel parameters, cp.async, the 128-byte XOR swizzle of 16-bit tiles, the
 * exact FP4 -> bf16/f16 decode (the reasoning is in gemm_large_m.cu's header comment and
 * docs/cuda-large-m.md) and the masked epilogue store. Everything sits in an unnamed namespace:
 * each kernel file gets its own copy of these inline device functions.
 */
#ifndef FP4_BACKENDS_CUDA_LARGE_M_COMMON_CUH
#define FP4_BACKENDS_CUDA_LARGE_M_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>

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
  const float *alpha_device; /* NULL, or multiplies scale on the GPU (fp4_cuda_gemm_args) */
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
  p.alpha_device = a->alpha_device;
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

/* fp4_e4m3_decode_inline without branches: the E4M3 magnitude bits placed at a float's exponent and
 * top mantissa bits give the value times 2^-120 (a float subnormal for E4M3 subnormals, which FMUL
 * scales exactly), and 0x7F / 0xFF are NaN. The same bits as codec.h for all 256 bytes
 * (tests/test_cuda_wgra.c decodes every scale byte through it), in 6 instructions instead of about
 * 20 with two branches: the register-A tiles' producer converts four of these per row and K tile
 * (about 80 of its ~210 instructions per K tile before; bench/results/h200/
 * 2026-11-30-moe-prefill/README.md). */
__device__ __forceinline__ float e4m3_decode_branchless(uint32_t b) {
  const uint32_t sign = (b & 0x80u) << 24;
  const float f = __fmul_rn(__uint_as_float(((b & 0x7Fu) << 20) | sign), 0x1p120f);
  return (b & 0x7Fu) == 0x7Fu ? __uint_as_float(0x7FC00000u | sign) : f;
}

/* Multipliers of one 32-element chunk from its scale bits: NVFP4 two E4M3 bytes (blocks 2h, 2h+1),
 * MXFP4 one UE8M0 byte. */
template <bool NV>
__device__ __forceinline__ void chunk_factors(uint32_t sc, float f[2]) {
  if (NV) {
    f[0] = e4m3_decode_branchless(sc & 0xFFu);
    f[1] = e4m3_decode_branchless((sc >> 8) & 0xFFu);
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

/* The multiplier of the FP32 results: scale, times *alpha_device when one is given. Called in the
 * epilogue, after griddepcontrol.wait, so a producer kernel may have written the device scalar. */
__device__ __forceinline__ float lm_out_scale(const lm_params &p) {
  return p.alpha_device ? __fmul_rn(p.scale, *p.alpha_device) : p.scale;
}

/* Stores two adjacent outputs times scale (lm_out_scale). */
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
/* Stores a warp's MT x NT m16n8 FP32 accumulators (mma.sync layout: lane = 4 g + t holds rows g and
 * g + 8, columns 2t and 2t + 1 of each) whose tile starts at (row0, col0). */
template <int MT, int NT>
__device__ __forceinline__ void lm_store_mma_acc(const lm_params &p, const float (&acc)[MT][NT][4], int64_t row0,
                                                 int64_t col0, int g, int t) {
  const float scale = lm_out_scale(p);
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) {
      const int64_t row = row0 + i * 16 + g, col = col0 + j * 8 + 2 * t;
      store_pair(p, scale, row, col, acc[i][j][0], acc[i][j][1]);
      store_pair(p, scale, row + 8, col, acc[i][j][2], acc[i][j][3]);
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

/* ---- sm_90a pieces: mbarriers, the async-proxy fence, wgmma (gemm_large_m_wgra.cu). Kernel bodies that use them exist only where FP4_SM90A_BODY is 1; other
 * targets compile a trap. ---------------------------------------------------------------------------- */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP4_SM90A_BODY 1
#else
#define FP4_SM90A_BODY 0
#endif

#if FP4_SM90A_BODY
__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
/* Waits until the phase with the given parity has completed (acquire). */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(smem_addr(b)), "r"(parity)
                 : "memory");
  } while (!done);
}
/* One arrival on b once every cp.async this thread issued so far has landed; counted in b's
 * expected arrivals (.noinc). The thread does not wait. */
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t *b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/* K-major operand in the 128-byte swizzle layout, the layout wgmma's 128-byte swizzle mode expects:
 * a tile is rows of 64 16-bit elements (128 bytes), 16-byte chunk c of row r at
 * r * 128 + ((c ^ (r & 7)) * 16) (swz() above), every tile on a 1024-byte boundary so that the XOR
 * pattern, which the hardware computes from address bits [7:9] into bits [4:6], starts over at each
 * tile. The descriptor: swizzle mode 1 (128 B), stride byte offset 1024 (from one 8-row group to the
 * next), leading byte offset unused for swizzled K-major operands (16 B), base offset 0. The k-th
 * 16-element K slice starts 32 k bytes in: the address advances by 2 (16-byte units) and the
 * hardware applies the XOR to the final address, as swz() did for the writes. */
__device__ __forceinline__ uint64_t sw128_desc(const void *tile) {
  const uint64_t a = smem_addr(tile);
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator accesses across the asynchronous MMAs. */
__device__ __forceinline__ void fence_acc(float &r) { asm volatile("" : "+f"(r)::"memory"); }

#define FP4_WG_REGS_16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FP4_WG_REGS_32 FP4_WG_REGS_16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FP4_WG_REGS_64 \
  FP4_WG_REGS_32 "," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FP4_WG_OUTS_16(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FP4_WG_OUTS_32(d) \
  FP4_WG_OUTS_16(d), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FP4_WG_OUTS_64(d) \
  FP4_WG_OUTS_32(d), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
/* 80 and 96 registers (wgmma n160 and n192) and 128 (n256) extend the 64-register lists. */
#define FP4_WG_REGS_80 \
  FP4_WG_REGS_64 "," \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FP4_WG_OUTS_80(d) \
  FP4_WG_OUTS_64(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FP4_WG_REGS_96 \
  FP4_WG_REGS_80 "," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FP4_WG_OUTS_96(d) \
  FP4_WG_OUTS_80(d), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FP4_WG_REGS_128 \
  FP4_WG_REGS_64 "," \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FP4_WG_OUTS_128(d) \
  FP4_WG_OUTS_64(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#endif

/* ---- the FP4 tiles of the register-decode kernels ---------------------------------------------- */

/* Byte offset of 16-byte half h of row r in a raw FP4 tile. */
__device__ __forceinline__ int rd_fp4_off(int r, int h) { return r * 32 + ((h ^ ((r >> 2) & 1)) << 4); }
template <int ROWS, int THREADS>
__device__ __forceinline__ void rd_copy_fp4(uint8_t *dst, const uint8_t *src, int64_t rows, int64_t r0, int64_t k0,
                                            int64_t k, int tid) {
#pragma unroll
  for (int i = tid; i < ROWS * 2; i += THREADS) {
    const int r = i >> 1, h = i & 1;
    const bool ok = r0 + r < rows && k0 + 32 * h < k;
    cp_async16(dst + rd_fp4_off(r, h), ok ? src + (r0 + r) * (k >> 1) + (k0 >> 1) + 16 * h : src, ok);
  }
}


/* ---- exact in-register decode of one word (8 codes) to four 16-bit pairs, times the block scale --
 * (the register-decode tiles of gemm_large_m_rd.cu and the register-A wgmma tiles of
 * gemm_large_m_wgra.cu; why it is exact: the header comment of gemm_large_m_rd.cu) */

/* Byte lookups of the 16-bit patterns of e2m1 magnitude m = 0..7 ({0, 0.5, 1, 1.5, 2, 3, 4, 6}):
 * bf16 0x0000 3F00 3F80 3FC0 4000 4040 4080 40C0; f16 0x0000 3800 3C00 3E00 4000 4200 4400 4600. */
constexpr uint32_t kBf16Lo0 = 0xC0800000u, kBf16Lo1 = 0xC0804000u;
constexpr uint32_t kBf16Hi0 = 0x3F3F3F00u, kBf16Hi1 = 0x40404040u;
constexpr uint32_t kF16Hi0 = 0x3E3C3800u, kF16Hi1 = 0x46444240u;

template <bool F16>
__device__ __forceinline__ uint32_t rd_mul2(uint32_t x, uint32_t s) {
  if (F16) {
    __half2 r = __hmul2(*reinterpret_cast<const __half2 *>(&x), *reinterpret_cast<const __half2 *>(&s));
    return *reinterpret_cast<uint32_t *>(&r);
  }
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162 *>(&x), *reinterpret_cast<const __nv_bfloat162 *>(&s));
  return *reinterpret_cast<uint32_t *>(&r);
}

/* r[p] = (code 2p, code 2p+1) of w as a 16-bit pair (low half first), times the pair s (r[0], r[1])
 * or t (r[2], r[3]): the register-A wgmma tile (gemm_large_m_wgra.cu) gathers codes of two NVFP4
 * blocks into one word. */
/* The lookup words of rd_decode_word2 (bf16: lo0, lo1, hi0, hi1; f16: hi0, hi1). PRMT takes the
 * second word as an immediate but the first from a vector register, and ptxas keeps a constant (or
 * any value it sees is the same in every lane) in a uniform register and copies it into the
 * destination before every lookup: 18 of the register-A consumer's 173 SASS instructions per K
 * tile. rd_lane_tables reads the first words from a per-lane copy in shared memory, so they are
 * vector values the kernel keeps in two registers. */
struct rd_tables {
  uint32_t lo0, lo1, hi0, hi1;
};
template <bool F16>
__device__ __forceinline__ rd_tables rd_const_tables() {
  return F16 ? rd_tables{0u, 0u, kF16Hi0, kF16Hi1} : rd_tables{kBf16Lo0, kBf16Lo1, kBf16Hi0, kBf16Hi1};
}
/* words[96]: lane l's copies of bf16 lo0, bf16 hi0 and f16 hi0 at l, 32 + l and 64 + l, stored by
 * the 32 threads of one warp (lane = threadIdx.x % 32) before a barrier that precedes the reads. */
constexpr int kRdTableWords = 96;
__device__ __forceinline__ void rd_store_tables(uint32_t *words, int lane) {
  words[lane] = kBf16Lo0, words[32 + lane] = kBf16Hi0, words[64 + lane] = kF16Hi0;
}
template <bool F16>
__device__ __forceinline__ rd_tables rd_lane_tables(const uint32_t *words, int lane) {
  rd_tables t = rd_const_tables<F16>();
  /* loads the compiler cannot fold (only these constants are ever stored there) */
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(words + lane);
  if (F16) {
    asm volatile("ld.shared.b32 %0, [%1 + 256];" : "=r"(t.hi0) : "r"(a));
  } else {
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(t.lo0) : "r"(a));
    asm volatile("ld.shared.b32 %0, [%1 + 128];" : "=r"(t.hi0) : "r"(a));
  }
  return t;
}

template <bool F16>
__device__ __forceinline__ void rd_decode_word2(uint32_t w, uint32_t s, uint32_t t, uint32_t r[4],
                                                const rd_tables &tb = rd_const_tables<F16>()) {
  const uint32_t m = w & 0x77777777u; /* magnitudes: selector nibbles without the sign-replicate bit */
  const uint32_t mh = m >> 16;
  /* the sign of code i (bit 4i + 3 of w) to the top bit of byte i: even codes from w << 4, odd from w */
  const uint32_t w4 = w << 4;
  const uint32_t s0 = __byte_perm(w4, w, 0x5140) & 0x80808080u; /* codes 0..3 */
  const uint32_t s1 = __byte_perm(w4, w, 0x7362) & 0x80808080u; /* codes 4..7 */
  if (F16) {
    const uint32_t h0 = __byte_perm(tb.hi0, tb.hi1, m) | s0, h1 = __byte_perm(tb.hi0, tb.hi1, mh) | s1;
    r[0] = rd_mul2<true>(__byte_perm(h0, 0u, 0x1404), s);
    r[1] = rd_mul2<true>(__byte_perm(h0, 0u, 0x3424), s);
    r[2] = rd_mul2<true>(__byte_perm(h1, 0u, 0x1404), t);
    r[3] = rd_mul2<true>(__byte_perm(h1, 0u, 0x3424), t);
  } else {
    const uint32_t h0 = __byte_perm(tb.hi0, tb.hi1, m) | s0, h1 = __byte_perm(tb.hi0, tb.hi1, mh) | s1;
    const uint32_t l0 = __byte_perm(tb.lo0, tb.lo1, m), l1 = __byte_perm(tb.lo0, tb.lo1, mh);
    r[0] = rd_mul2<false>(__byte_perm(l0, h0, 0x5140), s);
    r[1] = rd_mul2<false>(__byte_perm(l0, h0, 0x7362), s);
    r[2] = rd_mul2<false>(__byte_perm(l1, h1, 0x5140), t);
    r[3] = rd_mul2<false>(__byte_perm(l1, h1, 0x7362), t);
  }
}

template <bool F16>
__device__ __forceinline__ void rd_decode_word(uint32_t w, uint32_t s, uint32_t r[4]) {
  rd_decode_word2<F16>(w, s, s, r);
}

/* out[r][k] = exact bf16 of A[r][k] for every row and K (a multiple of 32): one thread per
 * 32-element chunk (16 bytes of codes in, 64 bytes out); the decode and scale rules of the family
 * (decode_word / chunk_factors of large_m_common.cuh). */
template <bool NV>
__global__ void __launch_bounds__(256) lm_dequant_a_kernel(lm_params p, uint16_t *out) {
  fp4_pdl_wait();
  /* The GEMM that follows waits (griddepcontrol.wait) for this whole grid to finish and flush, so
   * letting it launch now is safe: its CTAs become resident and set up while the decode runs. */
  fp4_pdl_launch_dependents();
  const uint8_t *a = static_cast<const uint8_t *>(p.a);
  const int64_t chunks = p.k / 32, total = p.m * chunks;
  for (int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x; i < total; i += (int64_t)gridDim.x * 256) {
    const int64_t r = i / chunks, c = i % chunks;
    const uint4 w = __ldg(reinterpret_cast<const uint4 *>(a + r * (p.k >> 1) + 16 * c));
    float f[2];
    chunk_factors<NV>(load_chunk_scales<NV>(p.a_scales, p.a_layout, p.C, p.m, r, (int)(c >> 1), (int)(c & 1)), f);
    uint4 *o = reinterpret_cast<uint4 *>(out + r * p.k + 32 * c);
    o[0] = decode_word<false>(w.x, f[0]);
    o[1] = decode_word<false>(w.y, f[0]);
    o[2] = decode_word<false>(w.z, f[1]);
    o[3] = decode_word<false>(w.w, f[1]);
  }
}

/* out[M, K] (row stride K) = the exact bf16 values of p's FP4 activations (p.a, p.a_scales,
 * p.a_layout, p.m, p.k, p.C). */
template <int FMT>
cudaError_t lm_launch_dequant_a(const lm_params &p, uint16_t *out, cudaStream_t s, int pdl) {
  const int64_t total = p.m * (p.k / 32);
  const int64_t blocks = (total + 255) / 256 < (1 << 20) ? (total + 255) / 256 : (1 << 20);
  return fp4_cuda_launch(lm_dequant_a_kernel<FMT == FP4_FORMAT_NVFP4>, dim3((unsigned)blocks), dim3(256), 0, s, pdl, p,
                         out);
}

/* W4A4 through a prologue: the FP4 activations of a are dequantized to bf16 into the start of the
 * context workspace (a->workspace, fp4_cuda_bf16_a_bytes(M, K)), then launch(p) runs a W4A16 bf16
 * tile on them (p: the parameters with A replaced by the bf16 rows). Nothing is allocated here, so
 * the pair can be captured in a CUDA graph. */
template <int FMT, class Launch>
cudaError_t lm_run_with_dequant_a(const fp4_cuda_gemm_args *a, cudaStream_t s, int pdl, Launch launch) {
  if (!a->workspace) return cudaErrorInvalidValue;
  lm_params p = lm_params_of(a);
  uint16_t *bf16 = static_cast<uint16_t *>(a->workspace);
  cudaError_t e = lm_launch_dequant_a<FMT>(p, bf16, s, pdl);
  if (e != cudaSuccess) return e;
  p.a = bf16;
  p.lda = a->k;
  return launch(p);
}
/* ---- host: does a device run this binary's sm_90a code? ----------------------------------------- */

struct lm_sm90a_probe_cache {
  int state[64]; /* 0 unknown, 1 yes, 2 no (benign race: every writer stores the same value) */
  char reason[64][200];
};

/* 1 when device runs this binary's sm_90a code of kernel, else 0 with the reason (family names the
 * configs in it); cached per device. The sm_90a kernel bodies keep their mbarriers in static shared
 * memory, present only in that body: cudaFuncGetAttributes reports a non-zero static shared size
 * exactly when the device would run the sm_90a code, not a compute_90 PTX JIT or a missing image. */
inline int lm_sm90a_image_ok(const void *kernel, const char *family, int device, lm_sm90a_probe_cache *c, char *why,
                             size_t why_size) {
  const bool cache = device >= 0 && device < 64;
  if (cache && c->state[device]) {
    if (c->state[device] == 2) snprintf(why, why_size, "%s", c->reason[device]);
    return c->state[device] == 1;
  }
  char msg[200];
  int major = 0, minor = 0, ok = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    snprintf(msg, sizeof msg, "the %s configs run on SM90 only (sm_90a code); device %d is SM%d%d", family, device, major,
             minor);
  } else {
    int prev = -1;
    cudaGetDevice(&prev);
    if (prev != device) cudaSetDevice(device);
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
    cudaGetLastError();
    if (e != cudaSuccess)
      snprintf(msg, sizeof msg, "the %s kernels have no code for device %d: %s", family, device, cudaGetErrorString(e));
    else if (attr.sharedSizeBytes == 0)
      snprintf(msg, sizeof msg,
               "this fp4kit binary carries no sm_90a code (wgmma needs the arch-specific target): rebuild with "
               "CMAKE_CUDA_ARCHITECTURES including 90a-real");
    else ok = 1;
  }
  if (!ok) snprintf(why, why_size, "%s", msg);
  if (cache) {
    if (!ok) snprintf(c->reason[device], sizeof c->reason[device], "%s", msg);
    c->state[device] = ok ? 1 : 2;
  }
  return ok;
}
/* ---- host: configs that split W4A16 tiles from W4A4 prologue variants, device attributes -------- */

/* NULL when a config (name; prologue: a W4A4 prologue variant; w4a16: the W4A16 config of its tile;
 * pro0/pro1: the prologue configs) takes the activation kind act, else the rule (written to why). */
inline const char *lm_prologue_act_rule(const char *name, bool prologue, const char *w4a16, const char *pro0,
                                        const char *pro1, int act, char *why, size_t why_size) {
  if (prologue && act != FP4_CUDA_ACT_FP4)
    snprintf(why, why_size, "config %s is the W4A4 prologue variant (FP4 activations dequantized to bf16 once per GEMM); "
                            "W4A16 runs on %s", name, w4a16);
  else if (!prologue && act == FP4_CUDA_ACT_FP4)
    snprintf(why, why_size, "config %s takes W4A16; W4A4 runs on %s or %s (activations dequantized to bf16 once per GEMM)",
             name, pro0, pro1);
  else return NULL;
  return why;
}

inline int lm_device_attr(int device, cudaDeviceAttr attr, int fallback) {
  int v = 0;
  return cudaDeviceGetAttribute(&v, attr, device) == cudaSuccess ? v : fallback;
}
} // namespace

#endif
