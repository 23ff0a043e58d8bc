/*
 * The MoE layer's weighted combine (fp4_cuda_combine_args, moe_kernels.h) for some columns of one
 * token: the one arithmetic of the combine kernel (moe_layer.cu) and of the down GEMM that combines
 * in its last CTA per column block (moe_grouped.cu), so both give the same bits.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_COMBINE_CUH
#define FP4_BACKENDS_CUDA_MOE_COMBINE_CUH

#include <stdint.h>

#include "backends/cuda/moe_kernels.h"
#include "format/codec.h"
#include "fp4kit.h"

/* The slots of a token are read in groups of kCombineGroup: every position, weight and down value
 * of a group is loaded before any is used, so a token's top_k dependent load pairs (inverse, then
 * down) cost a couple of memory latencies instead of top_k of them. Qwen3.5 at B = 1 (top-10, ncu):
 * 4.7 us against 6.3 us one pair at a time; the layer's time moved within noise (the combine's
 * start overlaps the down GEMM under PDL). The sum still runs over the slots in order. */
constexpr int kCombineGroup = 8;

/* out[t, h0 + c * step] for c < PER (columns at or past a.hidden skipped): the slots summed in
 * order in double, the shared expert's row added with its weight, alpha applied, one rounding to
 * f32 and then to the output type; a token with an invalid slot (inverse -1) gets NaN. The down and
 * shared rows are read through L2 (ld.global.cg): in the down GEMM's combine they were written by
 * other CTAs of the same launch. */
template <int PER>
__device__ __forceinline__ void combine_columns(const fp4_cuda_combine_args &a, int64_t t, int64_t h0, int64_t step) {
  double acc[PER];
#pragma unroll
  for (int c = 0; c < PER; c++) acc[c] = 0.0;
  bool bad = false;
  for (int64_t j0 = 0; j0 < a.top_k; j0 += kCombineGroup) {
    int32_t pos[kCombineGroup];
    float w[kCombineGroup], d[kCombineGroup][PER];
#pragma unroll
    for (int u = 0; u < kCombineGroup; u++) {
      const bool in = j0 + u < a.top_k;
      pos[u] = in ? a.inverse[t * a.top_k + j0 + u] : 0;
      w[u] = in ? a.weights[t * a.ldw + j0 + u] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kCombineGroup; u++)
#pragma unroll
      for (int c = 0; c < PER; c++) {
        const int64_t h = h0 + c * step;
        d[u][c] = j0 + u < a.top_k && pos[u] >= 0 && h < a.hidden ? __ldcg(a.down + (int64_t)pos[u] * a.hidden + h) : 0.0f;
      }
#pragma unroll
    for (int u = 0; u < kCombineGroup; u++) {
      if (j0 + u >= a.top_k) break;
      if (pos[u] < 0) {
        bad = true; /* an invalid expert id: make it visible */
        continue;
      }
#pragma unroll
      for (int c = 0; c < PER; c++) acc[c] += (double)w[u] * (double)d[u][c];
    }
  }
  const double sw = a.shared && a.shared_weights ? (double)a.shared_weights[t] : 1.0;
  const double alpha = a.alpha_device ? (double)*a.alpha_device : 1.0; /* read after the PDL wait */
#pragma unroll
  for (int c = 0; c < PER; c++) {
    const int64_t h = h0 + c * step;
    if (h >= a.hidden) break;
    double x = acc[c];
    if (a.shared) x += sw * (double)__ldcg(a.shared + t * a.hidden + h);
    if (a.alpha_device) x *= alpha;
    const float v = bad ? __int_as_float(0x7FC00000) : (float)x;
    const int64_t o = t * a.ldo + h;
    if (a.out_dtype == FP4_DTYPE_F32) static_cast<float *>(a.out)[o] = v;
    else if (a.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(a.out)[o] = fp4_bf16_from_f32_inline(v);
    else static_cast<uint16_t *>(a.out)[o] = fp4_f16_from_f32_inline(v);
  }
}

#endif
