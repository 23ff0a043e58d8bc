/*
 * Runtime-recipe quantization of dense rows (f32, bf16, f16) to NVFP4 or MXFP4 on the device.
 * One thread per scale entry of the padded layout: a real entry quantizes its block with the
 * codec.h functions the C reference uses (so the bits are identical by construction), a padding
 * entry writes 0. Activations in decode are small (M x K <= 64 x 32K), so simplicity wins over
 * vectorized loads here.
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

__device__ __forceinline__ float load_x(const quantize_params &p, int64_t r, int64_t c) {
  int64_t i = r * p.ld + c;
  switch (p.x_dtype) {
  case FP4_DTYPE_BF16: return fp4_bf16_to_f32_inline(static_cast<const uint16_t *>(p.x)[i]);
  case FP4_DTYPE_F16: return fp4_f16_to_f32_inline(static_cast<const uint16_t *>(p.x)[i]);
  default: return static_cast<const float *>(p.x)[i];
  }
}

__global__ void __launch_bounds__(256) quantize_kernel(quantize_params p) {
  fp4_pdl_wait();
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t r = idx / p.Cp, c = idx % p.Cp;
  if (r < p.Rp) {
    uint8_t sb = 0;
    if (r < p.rows && c < p.C) {
      const int bs = p.format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
      float v[FP4_MXFP4_BLOCK];
      float vmax = 0.0f;
      for (int i = 0; i < bs; i++) {
        v[i] = load_x(p, r, c * bs + i);
        vmax = fp4_absmax_update(vmax, v[i]);
      }
      float out_scale;
      sb = p.format == FP4_FORMAT_NVFP4 ? fp4_nvfp4_block_scale(vmax, fp4_nvfp4_recipe_make(p.global_scale), &out_scale)
                                        : fp4_mxfp4_block_scale(vmax, &out_scale);
      uint8_t *dst = p.q + r * (p.cols / 2) + c * bs / 2;
      for (int i = 0; i < bs; i += 2) dst[i / 2] = fp4_e2m1_pack2(v[i], v[i + 1], out_scale);
    }
    p.scales[fp4_layout_offset(p.layout, p.C, r, c)] = sb;
  }
  /* The dependent kernel's griddepcontrol.wait still waits for this whole grid to finish and
   * flush, so letting it launch now only overlaps its prologue. */
  fp4_pdl_launch_dependents();
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
  return (int)fp4_cuda_launch(quantize_kernel, dim3((unsigned)blocks), dim3(threads), 0, (cudaStream_t)stream, pdl, p);
}

extern "C" int fp4_cuda_kernel_image_status(void) {
  cudaFuncAttributes attr;
  return (int)cudaFuncGetAttributes(&attr, quantize_kernel);
}
