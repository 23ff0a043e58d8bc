/*
 * Runtime-recipe quantization of dense rows (f32, bf16, f16) to NVFP4 or MXFP4 on the device.
 * One thread per scale entry of the padded layout: a real entry quantizes its block with the
 * codec.h functions the C reference uses (so the bits are identical by construction), a padding
 * entry writes 0. The block size and input type are template parameters so the block's loads are
 * unrolled and all in flight at once. Where the rows are 16-byte aligned a block is read as 16-byte
 * vectors and its codes written in one 8- or 16-byte store. Measured on the H200 for 4096 x 4096
 * bf16: 45 us with per-element 2-byte loads and byte stores, 34 us with the vector path, 30 us once
 * the e2m1 encoder stopped branching (codec.h); ncu then still finds the kernel instruction-bound
 * (about 46 instructions per element, 31% of DRAM bandwidth), the encode being most of them.
 */
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

struct quantize_params {
  const void *x;
  int64_t rows, cols, ld;
  int x_dtype;
  uint8_t *q;
  uint8_t *scales;
  int format, layout;
  float global_scale;
  const float *global_scale_device; /* NULL, or read in place of global_scale (after the PDL wait) */
  int64_t C, Rp, Cp; /* scale columns, padded rows and columns of the layout */
};

template <int DT>
__device__ __forceinline__ float load_x(const quantize_params &p, int64_t i) {
  if (DT == FP4_DTYPE_BF16) return fp4_bf16_to_f32_inline(__ldg(static_cast<const uint16_t *>(p.x) + i));
  if (DT == FP4_DTYPE_F16) return fp4_f16_to_f32_inline(__ldg(static_cast<const uint16_t *>(p.x) + i));
  return __ldg(static_cast<const float *>(p.x) + i);
}

/* Element i of a block held as 16-byte vectors (i a compile-time constant after unrolling). */
template <int DT>
__device__ __forceinline__ float vec_elem(const uint4 *v, int i) {
  if (DT == FP4_DTYPE_F32) return __uint_as_float((&v[i / 4].x)[i % 4]);
  const uint32_t w = (&v[i / 8].x)[(i % 8) / 2];
  const uint16_t h = (uint16_t)(i % 2 ? w >> 16 : w & 0xFFFFu);
  return DT == FP4_DTYPE_BF16 ? fp4_bf16_to_f32_inline(h) : fp4_f16_to_f32_inline(h);
}

/* VEC: x, the row stride and q allow 16-byte block loads and one code store per block. */
template <int FMT, int DT, bool VEC>
__global__ void __launch_bounds__(256) quantize_kernel(quantize_params p) {
  constexpr int kBlock = FMT == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  constexpr int kVecs = kBlock * (DT == FP4_DTYPE_F32 ? 4 : 2) / 16;
  fp4_pdl_wait();
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t r, c;
  if (p.Rp * p.Cp <= 0xFFFFFFFFll) { /* a 32-bit division where the layout allows it */
    r = (uint32_t)idx / (uint32_t)p.Cp;
    c = (uint32_t)idx - (uint32_t)r * (uint32_t)p.Cp;
  } else {
    r = idx / p.Cp;
    c = idx % p.Cp;
  }
  if (r < p.Rp) {
    uint8_t sb = 0;
    if (r < p.rows && c < p.C) {
      /* Two passes over the block (the second hits L1): no values stay live across the scale
       * computation, whose division slow path is a real call that would otherwise spill. */
      const int64_t base = r * p.ld + c * kBlock;
      const uint4 *vx = reinterpret_cast<const uint4 *>(
          static_cast<const char *>(p.x) + base * (DT == FP4_DTYPE_F32 ? 4 : 2));
      float vmax = 0.0f;
      if constexpr (VEC) {
        uint4 v[kVecs];
#pragma unroll
        for (int j = 0; j < kVecs; j++) v[j] = __ldg(vx + j);
#pragma unroll
        for (int i = 0; i < kBlock; i++) vmax = fp4_absmax_update(vmax, vec_elem<DT>(v, i));
      } else {
#pragma unroll
        for (int i = 0; i < kBlock; i++) vmax = fp4_absmax_update(vmax, load_x<DT>(p, base + i));
      }
      float out_scale;
      const float global_scale = p.global_scale_device ? *p.global_scale_device : p.global_scale;
      sb = FMT == FP4_FORMAT_NVFP4 ? fp4_nvfp4_block_scale(vmax, fp4_nvfp4_recipe_make(global_scale), &out_scale)
                                   : fp4_mxfp4_block_scale(vmax, &out_scale);
      uint8_t *dst = p.q + r * (p.cols / 2) + c * kBlock / 2;
      if constexpr (VEC) {
        uint4 v[kVecs];
#pragma unroll
        for (int j = 0; j < kVecs; j++) v[j] = __ldg(vx + j);
        uint32_t w[kBlock / 8];
#pragma unroll
        for (int i = 0; i < kBlock; i += 8) {
          uint32_t word = 0;
#pragma unroll
          for (int e = 0; e < 8; e += 2)
            word |= (uint32_t)fp4_e2m1_pack2(vec_elem<DT>(v, i + e), vec_elem<DT>(v, i + e + 1), out_scale) << (4 * e);
          w[i / 8] = word;
        }
        if constexpr (kBlock == 16) *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
        else *reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kBlock; i += 2)
          dst[i / 2] = fp4_e2m1_pack2(load_x<DT>(p, base + i), load_x<DT>(p, base + i + 1), out_scale);
      }
    }
    p.scales[fp4_layout_offset(p.layout, p.C, r, c)] = sb;
  }
  /* The dependent kernel's griddepcontrol.wait still waits for this whole grid to finish and
   * flush, so letting it launch now only overlaps its prologue. */
  fp4_pdl_launch_dependents();
}

template <int FMT, bool VEC>
cudaError_t launch_dtype(const quantize_params &p, dim3 grid, dim3 block, cudaStream_t s, int pdl) {
  switch (p.x_dtype) {
  case FP4_DTYPE_BF16: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_BF16, VEC>, grid, block, 0, s, pdl, p);
  case FP4_DTYPE_F16: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_F16, VEC>, grid, block, 0, s, pdl, p);
  case FP4_DTYPE_F32: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_F32, VEC>, grid, block, 0, s, pdl, p);
  default: return cudaErrorInvalidValue;
  }
}

template <int FMT>
cudaError_t launch_format(const quantize_params &p, dim3 grid, dim3 block, cudaStream_t s, int pdl) {
  const int64_t elem = p.x_dtype == FP4_DTYPE_F32 ? 4 : 2;
  const int64_t code_bytes = (FMT == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK) / 2;
  const bool vec = (uintptr_t)p.x % 16 == 0 && p.ld * elem % 16 == 0 && (uintptr_t)p.q % code_bytes == 0;
  return vec ? launch_dtype<FMT, true>(p, grid, block, s, pdl) : launch_dtype<FMT, false>(p, grid, block, s, pdl);
}

} // namespace

extern "C" int fp4_cuda_quantize(const fp4_cuda_quantize_args *a, void *stream, int pdl) {
  quantize_params p;
  p.x = a->x;
  p.rows = a->rows;
  p.cols = a->cols;
  p.ld = a->ld;
  p.x_dtype = a->x_dtype;
  p.q = a->q;
  p.scales = a->scales;
  p.format = a->format;
  p.layout = a->layout;
  p.global_scale = a->global_scale;
  p.global_scale_device = a->format == FP4_FORMAT_NVFP4 ? a->global_scale_device : NULL;
  p.C = a->cols / (a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  p.Cp = a->layout == FP4_LAYOUT_LINEAR ? p.C : fp4_round_up(p.C, 4);
  p.Rp = a->layout == FP4_LAYOUT_128X4 ? fp4_round_up(a->rows, 128)
         : a->layout == FP4_LAYOUT_8X4 ? fp4_round_up(a->rows, 8)
                                       : a->rows;
  const int threads = 256;
  const int64_t blocks = (p.Rp * p.Cp + threads - 1) / threads;
  if (blocks > 0x7FFFFFFF) return (int)cudaErrorInvalidConfiguration;
  const dim3 grid((unsigned)blocks), block(threads);
  cudaStream_t s = (cudaStream_t)stream;
  return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_format<FP4_FORMAT_NVFP4>(p, grid, block, s, pdl)
                                             : launch_format<FP4_FORMAT_MXFP4>(p, grid, block, s, pdl));
}

extern "C" int fp4_cuda_kernel_image_status(void) {
  cudaFuncAttributes attr;
  return (int)cudaFuncGetAttributes(&attr, quantize_kernel<FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, true>);
}
