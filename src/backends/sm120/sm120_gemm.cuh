/*
 * W4A4 GEMM for SM120 (RTX PRO 6000, RTX 50xx, GB10) on the block-scaled warp MMA, compiled twice:
 *   - sm120_gemm.cu: the real instruction, device code for sm_120a / sm_121a / sm_120f only;
 *   - sm120_gemm_emulated.cu: FP4_SM120_EMULATE defined, device code for sm_90 only, where the
 *     instruction is replaced by fp4_sm120_mma_lane() fed through warp shuffles from the lanes the
 *     PTX ISA says own each operand. Loads, shared-memory staging, fragment assembly, scale
 *     selection, K tails, PDL and the epilogue are the same code in both builds, so running the
 *     emulated build on an H200 checks everything but the tensor-core instruction itself.
 * For every other architecture the kernels compile to a trap: launching one is an error, never a
 * silent no-op.
 *
 * out[M, N] = alpha * sum_k dq(a)[m, k] * dq(b)[n, k] with A [M, K/2] and B [N, K/2] row-major
 * (K-major, the mma ".row.col" operands as they are), scales in any fp4kit layout (128x4 read as
 * 32-bit words, others byte by byte). A block stages 128 K per step through a 3-stage cp.async
 * pipeline; every thread of the block loads, every warp multiplies its WM x WN sub-tile.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/sm120/sm120_launch.h"
#include "backends/sm120/sm120_mma.h"

#if defined(__CUDA_ARCH__)
#if defined(FP4_SM120_EMULATE)
#if __CUDA_ARCH__ == 900
#define FP4_SM120_HAS_BODY 1
#endif
#elif defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#if __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1200 && __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300
#define FP4_SM120_HAS_BODY 1
#endif
#endif
#endif
#ifndef FP4_SM120_HAS_BODY
#define FP4_SM120_HAS_BODY 0
#endif

#if defined(FP4_SM120_EMULATE)
#define FP4_SM120_NS fp4_sm120_emulated_impl
#define FP4_SM120_LAUNCH fp4_sm120_launch_emulated
#define FP4_SM120_IMAGE fp4_sm120_image_emulated
#else
#define FP4_SM120_NS fp4_sm120_native_impl
#define FP4_SM120_LAUNCH fp4_sm120_launch_native
#define FP4_SM120_IMAGE fp4_sm120_image_native
#endif

namespace FP4_SM120_NS {

struct params {
  const uint8_t *a, *b, *sfa, *sfb;
  void *out;
  int m, n, k;
  int64_t ldo;
  int out_dtype;
  int layout_a, layout_b;
  int vec16;           /* every row of A and B starts 16-byte aligned: 16-byte cp.async */
  int sfa_words, sfb_words; /* 128x4 scales at a 4-byte aligned address: 4-byte cp.async */
  float alpha;
  const float *alpha_device; /* NULL, or multiplies alpha on the GPU (fp4_sm120_args) */
};

constexpr int kStages = 3;
constexpr int kBlockK = 128;   /* K elements per pipeline stage: 64 bytes per row       */
constexpr int kRowStride = 80; /* 64 bytes + 16 of padding: conflict-free 32-bit fragment loads */
constexpr int kScaleStride = 8; /* scale bytes per row per stage: 8 (NVFP4) or 4 (MXFP4) used */

template <int BM, int BN, int WM, int WN, int KIND>
struct tile {
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN, kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kMT = WM / 16, kNT = WN / 8;
  static constexpr int kScalesPerRow = KIND == FP4_SM120_NVF4 ? kBlockK / 16 : kBlockK / 32;
  static constexpr int kABytes = BM * kRowStride, kBBytes = BN * kRowStride;
  static constexpr int kSABytes = BM * kScaleStride, kSBBytes = BN * kScaleStride;
  static constexpr int kStageBytes = kABytes + kBBytes + kSABytes + kSBBytes;
  static constexpr int kSmem = kStages * kStageBytes;
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0, "tile shape");
  static_assert(128 % BM == 0, "BM divides 128 so 128x4 scale words never leave the padded rows");
  static_assert(kSmem <= 99 * 1024, "SM120 allows at most 99 KB of shared memory per block");
};

#if FP4_SM120_HAS_BODY
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* Rows [r0, r0 + ROWS) of a [R, K/2] code matrix, bytes [kb0, kb0 + 64), zero outside. */
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_codes(const uint8_t *g, uint8_t *s, int r0, int R, int64_t row_bytes,
                                           int64_t kb0, int vec16) {
  for (int i = threadIdx.x; i < ROWS * 4; i += THREADS) {
    const int r = i >> 2, c = i & 3, row = r0 + r;
    const int64_t kb = kb0 + 16 * c;
    uint8_t *dst = s + r * kRowStride + 16 * c;
    if (vec16) { /* K % 32 == 0: a 16-byte chunk is entirely inside or outside the row */
      const bool in = row < R && kb < row_bytes;
      cp_async16(dst, in ? (const void *)(g + (int64_t)row * row_bytes + kb) : (const void *)g, in ? 16 : 0);
    } else {
      for (int j = 0; j < 16; j++)
        dst[j] = (row < R && kb + j < row_bytes) ? g[(int64_t)row * row_bytes + kb + j] : (uint8_t)0;
    }
  }
}

/* The block scales of those rows for K chunks [c0, c0 + PER_ROW); chunks past the end of K are
 * zero so that a NaN in padding can never reach a result. */
template <int ROWS, int THREADS, int PER_ROW>
__device__ __forceinline__ void load_scales(const uint8_t *g, uint8_t *s, int r0, int R, int layout, int words,
                                            int64_t C, int64_t c0) {
  if (words && layout == 1 && c0 + PER_ROW <= C) {
    /* 128x4: the four scales of chunks 4j..4j+3 of a row are one aligned word; rows up to the
     * next multiple of 128 exist in the buffer (padding), and tiles never cross it. */
    for (int i = threadIdx.x; i < ROWS * (PER_ROW / 4); i += THREADS) {
      const int r = i / (PER_ROW / 4), w = i % (PER_ROW / 4);
      cp_async4(s + r * kScaleStride + 4 * w, g + fp4_layout_offset(1, C, r0 + r, c0 + 4 * w));
    }
    return;
  }
  for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
    const int r = i / PER_ROW, c = i % PER_ROW, row = r0 + r;
    const int64_t col = c0 + c;
    s[r * kScaleStride + c] = (row < R && col < C) ? g[fp4_layout_offset(layout, C, row, col)] : (uint8_t)0;
  }
}

/* ---- the MMA: the instruction, or its emulation ------------------------------------------------ */

#if defined(FP4_SM120_EMULATE)
/* Gathers, through shuffles, what the PTX ISA says the instruction reads from other lanes
 * (thread-id-a = thread-id-b = 0), then computes this lane's four outputs. Not inlined: one copy
 * per variant keeps the verification build's compile time reasonable. */
template <int KIND, int BYTE_ID>
__device__ __noinline__ float4 mma_emulated(uint4 av, uint2 bv, uint32_t sfa, uint32_t sfb, float4 cv) {
  const unsigned full = 0xFFFFFFFFu;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint32_t a[4] = {av.x, av.y, av.z, av.w}, b[2] = {bv.x, bv.y};
  fp4_sm120_lane_operands op;
#pragma unroll
  for (int h = 0; h < 2; h++) {
#pragma unroll
    for (int w = 0; w < 8; w++) /* the register index depends on (row >> 3) = h, not on g */
      op.a_rows[h][w] = __shfl_sync(full, a[fp4_sm120_a_reg(8 * h, 8 * w)], fp4_sm120_a_lane(g + 8 * h, 8 * w));
    op.sfa[h] = __shfl_sync(full, sfa, fp4_sm120_sfa_lane(g + 8 * h, 0));
  }
#pragma unroll
  for (int j = 0; j < 2; j++) {
#pragma unroll
    for (int w = 0; w < 8; w++)
      op.b_cols[j][w] = __shfl_sync(full, b[fp4_sm120_b_reg(8 * w)], fp4_sm120_b_lane(2 * t + j, 8 * w));
    op.sfb[j] = __shfl_sync(full, sfb, fp4_sm120_sfb_lane(2 * t + j, 0));
  }
  const float c[4] = {cv.x, cv.y, cv.z, cv.w};
  float d[4];
  fp4_sm120_mma_lane(KIND, &op, BYTE_ID, BYTE_ID, c, d);
  return make_float4(d[0], d[1], d[2], d[3]);
}
#endif

template <int KIND, int BYTE_ID>
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2], uint32_t sfa, uint32_t sfb) {
#if defined(FP4_SM120_EMULATE)
  float4 r = mma_emulated<KIND, BYTE_ID>(make_uint4(a[0], a[1], a[2], a[3]), make_uint2(b[0], b[1]), sfa, sfb,
                                         make_float4(d[0], d[1], d[2], d[3]));
  d[0] = r.x;
  d[1] = r.y;
  d[2] = r.z;
  d[3] = r.w;
#else
  if constexpr (KIND == FP4_SM120_NVF4) {
    asm volatile(
        "mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11,%12}, {%13}, {%14,%15};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "h"((uint16_t)BYTE_ID),
          "h"((uint16_t)0), "r"(sfb), "h"((uint16_t)BYTE_ID), "h"((uint16_t)0));
  } else {
    asm volatile(
        "mma.sync.aligned.kind::mxf4.block_scale.scale_vec::2X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, {%10}, {%11,%12}, {%13}, {%14,%15};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(sfa), "h"((uint16_t)BYTE_ID),
          "h"((uint16_t)0), "r"(sfb), "h"((uint16_t)BYTE_ID), "h"((uint16_t)0));
  }
#endif
}

__device__ __forceinline__ uint32_t lds32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }

/* One k64 step of a warp's sub-tile. NVFP4: the scale word of the step holds its four chunks of 16
 * (byte-id 0). MXFP4: one word holds the four chunks of 32 of the whole stage; the second step
 * selects the upper byte pair (byte-id 2). */
template <int MT, int NT, int KIND, int KS>
__device__ __forceinline__ void mma_step(float (&acc)[MT][NT][4], const uint8_t *sA, const uint8_t *sB,
                                         const uint8_t *sSA, const uint8_t *sSB, int wm0, int wn0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int sf_off = KIND == FP4_SM120_NVF4 ? 4 * KS : 0;
  uint32_t af[MT][4], sfa[MT], bf[NT][2], sfb[NT];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const int row = wm0 + 16 * mt + g;
#pragma unroll
    for (int r = 0; r < 4; r++) af[mt][r] = lds32(sA + (row + 8 * (r & 1)) * kRowStride + 32 * KS + 4 * t + 16 * (r >> 1));
    /* thread-id-a 0: lane 4g supplies row g, lane 4g + 1 row g + 8 (lanes 4g + 2, 4g + 3 unused) */
    sfa[mt] = lds32(sSA + (row + 8 * (lane & 1)) * kScaleStride + sf_off);
  }
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int col = wn0 + 8 * nt + g;
#pragma unroll
    for (int r = 0; r < 2; r++) bf[nt][r] = lds32(sB + col * kRowStride + 32 * KS + 4 * t + 16 * r);
    sfb[nt] = lds32(sSB + col * kScaleStride + sf_off); /* thread-id-b 0: lane 4g supplies column g */
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
      mma<KIND, KIND == FP4_SM120_NVF4 ? 0 : 2 * KS>(acc[mt][nt], af[mt], bf[nt], sfa[mt], sfb[nt]);
}

__device__ __forceinline__ void store_out(const params &p, float alpha, int row, int col, float v) {
  if (row >= p.m || col >= p.n) return;
  const int64_t idx = (int64_t)row * p.ldo + col;
  const float x = FP4_MUL(v, alpha);
  if (p.out_dtype == 1) ((uint16_t *)p.out)[idx] = fp4_bf16_from_f32_inline(x);
  else if (p.out_dtype == 2) ((uint16_t *)p.out)[idx] = fp4_f16_from_f32_inline(x);
  else ((float *)p.out)[idx] = x;
}
#endif /* FP4_SM120_HAS_BODY */

template <int BM, int BN, int WM, int WN, int KIND>
__global__ void __launch_bounds__(tile<BM, BN, WM, WN, KIND>::kThreads, 1) gemm_kernel(params p) {
#if FP4_SM120_HAS_BODY
  using T = tile<BM, BN, WM, WN, KIND>;
  extern __shared__ __align__(16) uint8_t smem[];
  /* PDL: nothing written by the previous kernel is read before this point. */
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int warp = threadIdx.x >> 5;
  const int wm0 = (warp / T::kWarpsN) * WM, wn0 = (warp % T::kWarpsN) * WN;
  const int64_t row_bytes = p.k / 2;
  const int64_t scale_cols = p.k / (KIND == FP4_SM120_NVF4 ? 16 : 32);
  const int kt_count = (p.k + kBlockK - 1) / kBlockK;

  auto load_stage = [&](int stage, int kt) {
    uint8_t *s = smem + stage * T::kStageBytes;
    load_codes<BM, T::kThreads>(p.a, s, m0, p.m, row_bytes, (int64_t)kt * (kBlockK / 2), p.vec16);
    load_codes<BN, T::kThreads>(p.b, s + T::kABytes, n0, p.n, row_bytes, (int64_t)kt * (kBlockK / 2), p.vec16);
    const int64_t c0 = (int64_t)kt * T::kScalesPerRow;
    load_scales<BM, T::kThreads, T::kScalesPerRow>(p.sfa, s + T::kABytes + T::kBBytes, m0, p.m, p.layout_a,
                                                   p.sfa_words, scale_cols, c0);
    load_scales<BN, T::kThreads, T::kScalesPerRow>(p.sfb, s + T::kABytes + T::kBBytes + T::kSABytes, n0, p.n,
                                                   p.layout_b, p.sfb_words, scale_cols, c0);
  };

  float acc[T::kMT][T::kNT][4];
#pragma unroll
  for (int i = 0; i < T::kMT; i++)
#pragma unroll
    for (int j = 0; j < T::kNT; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < kt_count) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < kt_count; kt++) {
    cp_async_wait<kStages - 2>();
    __syncthreads(); /* stage kt is complete for every thread; stage kt - 1 is free again */
    const int pf = kt + kStages - 1;
    if (pf < kt_count) load_stage(pf % kStages, pf);
    cp_async_commit();
    const uint8_t *s = smem + (kt % kStages) * T::kStageBytes;
    const uint8_t *sA = s, *sB = s + T::kABytes, *sSA = sB + T::kBBytes, *sSB = sSA + T::kSABytes;
    mma_step<T::kMT, T::kNT, KIND, 0>(acc, sA, sB, sSA, sSB, wm0, wn0);
    mma_step<T::kMT, T::kNT, KIND, 1>(acc, sA, sB, sSA, sSB, wm0, wn0);
  }
  cp_async_wait<0>();

  /* Every input has been read: let a dependent kernel start its prologue. */
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  /* the device alpha (if any) is read after griddepcontrol.wait: a producer may have written it */
  const float alpha = p.alpha_device ? FP4_MUL(p.alpha, *p.alpha_device) : p.alpha;
#pragma unroll
  for (int mt = 0; mt < T::kMT; mt++)
#pragma unroll
    for (int nt = 0; nt < T::kNT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        store_out(p, alpha, m0 + wm0 + 16 * mt + g + 8 * (e >> 1), n0 + wn0 + 8 * nt + 2 * t + (e & 1), acc[mt][nt][e]);
#else
  (void)p;
  __trap(); /* no device code of this build for this architecture */
#endif
}

/* Every launch of this backend goes through here: the one place to switch to a shared PDL
 * launch helper. */
template <class Kernel>
static cudaError_t launch_kernel(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int pdl,
                                 const params &p) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, p);
}

template <int BM, int BN, int WM, int WN, int KIND>
static cudaError_t launch_tile(const params &p, int pdl, cudaStream_t stream) {
  using T = tile<BM, BN, WM, WN, KIND>;
  auto kernel = gemm_kernel<BM, BN, WM, WN, KIND>;
  if (T::kSmem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem);
    if (e != cudaSuccess) return e;
  }
  dim3 grid((unsigned)((p.m + BM - 1) / BM), (unsigned)((p.n + BN - 1) / BN));
  return launch_kernel(kernel, grid, dim3(T::kThreads), T::kSmem, stream, pdl, p);
}

template <int KIND>
static cudaError_t launch_config(int config, const params &p, int pdl, cudaStream_t stream) {
  switch (config) {
  case FP4_SM120_CONFIG_M16N64: return launch_tile<16, 64, 16, 16, KIND>(p, pdl, stream);
  case FP4_SM120_CONFIG_M64N128: return launch_tile<64, 128, 32, 32, KIND>(p, pdl, stream);
  case FP4_SM120_CONFIG_M128N128: return launch_tile<128, 128, 64, 32, KIND>(p, pdl, stream);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace FP4_SM120_NS

extern "C" int FP4_SM120_LAUNCH(const fp4_sm120_args *args, char *err, size_t err_size) {
  using namespace FP4_SM120_NS;
  cudaError_t e = cudaSetDevice(args->device);
  if (e == cudaSuccess) {
    params p;
    p.a = (const uint8_t *)args->a;
    p.b = (const uint8_t *)args->b;
    p.sfa = (const uint8_t *)args->sfa;
    p.sfb = (const uint8_t *)args->sfb;
    p.out = args->out;
    p.m = (int)args->m;
    p.n = (int)args->n;
    p.k = (int)args->k;
    p.ldo = args->ldo;
    p.out_dtype = args->out_dtype;
    p.layout_a = args->layout_a;
    p.layout_b = args->layout_b;
    p.vec16 = args->k % 32 == 0 && ((uintptr_t)args->a % 16) == 0 && ((uintptr_t)args->b % 16) == 0;
    p.sfa_words = ((uintptr_t)args->sfa % 4) == 0;
    p.sfb_words = ((uintptr_t)args->sfb % 4) == 0;
    p.alpha = args->alpha;
    p.alpha_device = args->alpha_device;
    cudaStream_t stream = (cudaStream_t)args->stream;
    e = args->format == 1 ? launch_config<FP4_SM120_MXF4>(args->config, p, args->pdl, stream)
                          : launch_config<FP4_SM120_NVF4>(args->config, p, args->pdl, stream);
    if (e == cudaSuccess) e = cudaGetLastError();
  }
  if (e != cudaSuccess && err && err_size) snprintf(err, err_size, "%s", cudaGetErrorString(e));
  return (int)e;
}

extern "C" int FP4_SM120_IMAGE(int device, int *binary_version, char *err, size_t err_size) {
  using namespace FP4_SM120_NS;
  cudaFuncAttributes attr;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, gemm_kernel<16, 64, 16, 16, FP4_SM120_NVF4>);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* a missing image is an answer, not a sticky error */
    if (err && err_size) snprintf(err, err_size, "%s", cudaGetErrorString(e));
    return (int)e;
  }
  if (binary_version) *binary_version = attr.binaryVersion; /* major * 10 + minor: 120 for sm_120a */
  return 0;
}
