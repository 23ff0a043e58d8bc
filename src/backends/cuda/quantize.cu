/*
 * Runtime-recipe quantization of dense rows (f32, bf16, f16) to NVFP4 or MXFP4 on the device.
 * One thread per scale entry of the padded layout: a real entry quantizes its block with the
 * codec.h functions the C reference uses (so the bits are identical by construction), a padding
 * entry writes 0. Activations in decode are small (M x K <= 64 x 32K), so the kernel is bound by
 * latency, not bandwidth: the block size and input type are template parameters so the block's
 * loads are unrolled and all in flight at once (a runtime-sized loop issued them one by one).
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
  int64_t C, Rp, Cp; /* scale columns, padded rows and columns of the layout */
};

template <int DT>
__device__ __forceinline__ float load_x(const quantize_params &p, int64_t i) {
  if (DT == FP4_DTYPE_BF16) return fp4_bf16_to_f32_inline(__ldg(static_cast<const uint16_t *>(p.x) + i));
  if (DT == FP4_DTYPE_F16) return fp4_f16_to_f32_inline(__ldg(static_cast<const uint16_t *>(p.x) + i));
  return __ldg(static_cast<const float *>(p.x) + i);
}

template <int FMT, int DT>
__global__ void __launch_bounds__(256) quantize_kernel(quantize_params p) {
  constexpr int kBlock = FMT == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  fp4_pdl_wait();
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = idx / p.Cp, c = idx % p.Cp;
  if (r < p.Rp) {
    uint8_t sb = 0;
    if (r < p.rows && c < p.C) {
      /* Two passes over the block (the second hits L1): no values stay live across the scale
       * computation, whose division slow path is a real call that would otherwise spill. */
      const int64_t base = r * p.ld + c * kBlock;
      float vmax = 0.0f;
#pragma unroll
      for (int i = 0; i < kBlock; i++) vmax = fp4_absmax_update(vmax, load_x<DT>(p, base + i));
      float out_scale;
      sb = FMT == FP4_FORMAT_NVFP4 ? fp4_nvfp4_block_scale(vmax, fp4_nvfp4_recipe_make(p.global_scale), &out_scale)
                                   : fp4_mxfp4_block_scale(vmax, &out_scale);
      uint8_t *dst = p.q + r * (p.cols / 2) + c * kBlock / 2;
#pragma unroll
      for (int i = 0; i < kBlock; i += 2)
        dst[i / 2] = fp4_e2m1_pack2(load_x<DT>(p, base + i), load_x<DT>(p, base + i + 1), out_scale);
    }
    p.scales[fp4_layout_offset(p.layout, p.C, r, c)] = sb;
  }
  /* The dependent kernel's griddepcontrol.wait still waits for this whole grid to finish and
   * flush, so letting it launch now only overlaps its prologue. */
  fp4_pdl_launch_dependents();
}

template <int FMT>
cudaError_t launch_dtype(const quantize_params &p, dim3 grid, dim3 block, cudaStream_t s, int pdl) {
  switch (p.x_dtype) {
  case FP4_DTYPE_BF16: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_BF16>, grid, block, 0, s, pdl, p);
  case FP4_DTYPE_F16: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_F16>, grid, block, 0, s, pdl, p);
  case FP4_DTYPE_F32: return fp4_cuda_launch(quantize_kernel<FMT, FP4_DTYPE_F32>, grid, block, 0, s, pdl, p);
  default: return cudaErrorInvalidValue;
  }
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
  return (int)(a->format == FP4_FORMAT_NVFP4 ? launch_dtype<FP4_FORMAT_NVFP4>(p, grid, block, s, pdl)
                                             : launch_dtype<FP4_FORMAT_MXFP4>(p, grid, block, s, pdl));
}

extern "C" int fp4_cuda_kernel_image_status(void) {
  cudaFuncAttributes attr;
  return (int)cudaFuncGetAttributes(&attr, quantize_kernel<FP4_FORMAT_NVFP4, FP4_DTYPE_BF16>);
}
