/*
 * The C interface of the cuda backend's grouped GEMM and MoE kernels (moe_grouped.cu,
 * moe_layer.cu), called by the host code in moe_host.c. Functions return a cudaError_t as int.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_KERNELS_H
#define FP4_BACKENDS_CUDA_MOE_KERNELS_H

#include <stdint.h>

#include "backends/cuda/config/moe_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[t, h] = dtype(f32(alpha * (sum_j w[t, j] * down[inverse[t*k + j], h] + s_t * shared[t, h]))) in
 * double, slots in order, alpha = *alpha_device (1 when NULL); a token with an inverse of -1 (invalid
 * id) gets a NaN row. */
typedef struct fp4_cuda_combine_args {
  const float *down;           /* [P, H] permuted rows                                       */
  const int32_t *inverse;      /* [T*k]                                                      */
  const float *weights;        /* [T, k] with row stride ldw                                 */
  int64_t ldw;
  const float *shared;         /* [T, H] or NULL                                             */
  const float *shared_weights; /* [T] or NULL (1)                                            */
  void *out;
  int64_t ldo;
  int out_dtype;
  int64_t tokens, top_k, hidden;
  const float *alpha_device;   /* NULL, or the layer's output scale in device memory        */
} fp4_cuda_combine_args;

/* Counting sort of the (token, slot) pairs by expert on one CTA: offsets [E+1] (valid pairs only),
 * sorted [P], inverse [P] (-1 for an id outside [0, E)), active [E] and its count, and
 * shared_offsets = {0, T}. counts is int32 [E] scratch. With tile_starts (and tile_rows > 0) also
 * the dense M tile numbering of fp4_cuda_grouped_args.tile_starts: [E+1]. */
typedef struct fp4_cuda_route_args {
  const int32_t *ids;
  int64_t tokens, top_k, experts;
  int64_t *offsets;
  int32_t *sorted, *inverse, *counts, *active, *active_count;
  int64_t *shared_offsets;
  int32_t *tile_starts;
  int64_t tile_rows;
  /* Where the routing runs in a gate_up launch (fp4_cuda_grouped_args.route): the arrival counters
   * of the layer's down launch that combines (fp4_cuda_grouped_args.combine), set to zero by that
   * launch's first CTA; NULL: none. */
  uint32_t *arrivals;
  int64_t arrival_slots;
} fp4_cuda_route_args;

/* out[p, n] = scale_e * A[row(p)] . dq(W_e)[n]^T for the rows p of every expert e, where
 * row(p) = a_rows ? a_rows[p] / a_div : p and scale_e = alpha * w_mult[e] * a_mult (in double;
 * alpha times *alpha_device in f32 when alpha_device is set, a_mult = 1 / *a_scale_device in f32 when
 * a_scale_device is set, both read on the GPU after the launch's dependencies).
 * One launch over (N tile, expert slot, row split): a slot is the j-th expert with rows, taken
 * from active[] when given (built by the routing kernel), else found by scanning offsets. */
typedef struct fp4_cuda_grouped_args {
  int format;                  /* fp4_format of W (and of A for FP4 activations)            */
  int act;                     /* FP4_CUDA_ACT_* (cuda_kernels.h)                            */
  const void *a;               /* dense [*, K] with row stride lda elements, or FP4 codes     */
  int64_t lda;                 /* dense: elements; FP4: unused (K/2 bytes)                    */
  const uint8_t *a_scales;     /* FP4 activations: scales in a_layout for a_rows_total rows  */
  int a_layout;
  const int32_t *a_rows;       /* NULL: identity                                             */
  int32_t a_div;               /* divisor of a_rows entries (top_k), >= 1                    */
  float a_mult;                /* FP4 activations' multiplier (1 for dense)                  */
  const uint8_t *w;            /* [E, N, K/2]                                                */
  const uint8_t *w_scales;     /* E buffers of w_scale_stride bytes each                     */
  int64_t w_scale_stride;
  int w_layout;
  const float *w_mult;         /* [E] on the device, or NULL (1)                             */
  const int64_t *offsets;      /* [E+1] on the device; clamped to [0, rows], never trusted   */
  const int32_t *active;       /* optional: active expert list and its count (device)        */
  const int32_t *active_count;
  int64_t experts, rows, n, k; /* E, output rows (T or P), N, K                              */
  float alpha;
  const float *alpha_device;   /* NULL, or a device f32 multiplying alpha                    */
  const float *a_scale_device; /* NULL, or the device NVFP4 encode scale of FP4-valued rows  */
  void *out;                   /* [rows, N], row stride ldo elements                         */
  int64_t ldo;
  int out_dtype;               /* fp4_dtype: F32, BF16 or F16                                */
  int64_t slots;               /* grid.y: an upper bound of the experts with rows            */
  int splits;                  /* grid.z: CTAs sharing one expert's row chunks               */
  fp4_moe_variant variant;     /* the kernel and its parameters (config/moe_config.h), checked
                                  by the host against this GEMM (fp4_moe_variant_check)       */
  /* W4A4 on the register-A prefill tiles: room for the activations' bf16 values, source rows x
   * K x 2 bytes (the caller's MoE workspace or the context workspace); never allocated here. */
  void *a_bf16;
  /* Optional, from the routing kernel: the first M tile of every expert when each expert's rows
   * are cut into tiles of tile_rows rows, densely numbered ([E+1], [E] = all tiles; device). The
   * register-A prefill tiles use it when their width is tile_rows: no M tile is then empty, and
   * the grid's spare CTAs (the host sizes it from a bound) all come last and exit after one load. */
  const int32_t *tile_starts;
  int64_t tile_rows;
  /* 1: the layer's gate_up GEMM with SiLU(gate) * up in its epilogue: W's N = 2I rows are gate rows
   * [0, I) then up rows [I, 2I), and out receives the bf16 act [rows, I] (ldo >= I) that
   * fp4_cuda_moe_silu_mul would make from the f32 product, bit for bit, without the f32 product or
   * a launch of its own. The two-tile lean kernel only (variant lean r32), NVFP4 weights, bf16
   * rows, I % 16 == 0 (fp4_moe_silu_fusable: on the compile-time K walk K 2048, 4096 or 7168 and
   * I % 128 == 0). */
  int silu_out;
  /* An extra expert, run by the grid's last slot (the layer's shared expert in the routed experts'
   * launch): extra_rows rows (0: none) of activations extra_a (in order, row stride lda) through its
   * weights extra_w [N, K/2], scales extra_w_scales (one expert's, in w_layout) and multiplier
   * extra_w_mult (device [1] or NULL), written to extra_out (row stride ldo) as out would be. The
   * two-tile lean kernel only (variant lean r32). */
  const uint8_t *extra_w, *extra_w_scales;
  const float *extra_w_mult;
  int64_t extra_rows;
  const void *extra_a;
  void *extra_out;
  /* The routing in this launch instead of fp4_cuda_moe_route's (route.ids set; the two-tile lean
   * kernel with silu_out on the compile-time K walk, at most FP4_MOE_ROUTE_FUSED_PAIRS tokens *
   * top_k pairs: fp4_moe_plan_layer's route_fused): every CTA sorts the pairs itself after its PDL wait, so offsets, active,
   * active_count and a_rows are not read (a_div stays top_k), and the grid's first CTA writes the
   * routing outputs for the launches after it (route's fields, tile_starts and counts unused): the
   * same offsets, active list and count, with the pairs of an expert in pair order. */
  fp4_cuda_route_args route;
  /* The layer's combine at the end of this launch instead of fp4_cuda_moe_combine's (combine.out
   * set; the routed down GEMM on the two-tile lean kernel's compile-time K walk, f32 out, whose
   * layer's gate_up launch did the routing: fp4_moe_plan_layer's combine_fused). combine.down is
   * this launch's out and combine.shared its extra_out (or NULL without an extra expert). Every CTA
   * of an x block (every row split, slot and cluster rank) but its last in launch order counts itself
   * on arrivals[x block] once its outputs are stored; that last CTA waits for the count and combines
   * the block's columns of every token, as the combine kernel would, bit for bit. arrivals:
   * arrival_slots counters, zero when the launch starts (the gate_up launch's route.arrivals), at
   * least one per x block of the grid. */
  fp4_cuda_combine_args combine;
  uint32_t *arrivals;
  int64_t arrival_slots;
} fp4_cuda_grouped_args;

/* The streaming kernels (variant.kernel FMA, MMA or LEAN) of moe_grouped.cu. */
int fp4_cuda_grouped_gemm(const fp4_cuda_grouped_args *args, void *stream, int pdl);

/* The grouped large-M (prefill) GEMM of moe_grouped_large.cu (variant.kernel PREFILL_MMA or
 * PREFILL_WGRA): tensor-core tiles of variant.tile_m tokens x 128 weight rows, one CTA per (expert M
 * tile, N tile), grid bounded by floor(rows / tile_m) + E M tiles (offsets stay on the device). Same
 * arguments and result as fp4_cuda_grouped_gemm (splits ignored). Takes bf16 activations, f16 with
 * NVFP4, or FP4 (W4A4: on the register-A tiles through a_bf16); not f32. */
int fp4_cuda_grouped_gemm_large(const fp4_cuda_grouped_args *args, void *stream, int pdl);
/* The register-A wgmma form of the grouped large-M tiles (gemm_large_m_wgra.cu): supported is 1
 * when device is an SM 9.0 GPU running this binary's sm_90a code and args has bf16 activations (or
 * f16 with NVFP4) in 16-byte aligned rows (asked once per device by the host, moe_host.c). The GEMM
 * runs tiles of variant.tile_m tokens, numbered densely from tile_starts when tile_rows equals it. */
int fp4_cuda_grouped_wgra_supported(const fp4_cuda_grouped_args *args, int device);
int fp4_cuda_grouped_gemm_wgra(const fp4_cuda_grouped_args *args, void *stream, int pdl);

/* The counting sort above, on one CTA. */
int fp4_cuda_moe_route(const fp4_cuda_route_args *args, void *stream, int pdl);
/* Device scalars of the layer (fp4_options.alpha_device, fp4_moe_experts.act_scales_device): the
 * kernels below read them after their PDL wait. */

/* act[r, i] = f32(g[r, i] / (1 + exp(-g[r, i])) * g[r, I + i]) in double, g = gate_up [rows, 2I],
 * stored as act_kind: FP4_CUDA_ACT_F32, or FP4_CUDA_ACT_BF16 (rounded once more, to bf16: the W4A16
 * down GEMM's input wherever its tensor-core kernels can read it, moe_host.c). */
int fp4_cuda_moe_silu_mul(const float *gate_up, void *act, int act_kind, int64_t rows, int64_t inter, void *stream,
                          int pdl);

/* W4A4 decode inputs: the rows quantized with the runtime recipe (format; NVFP4 global encode scale
 * global_scale, or *global_scale_device when that is set) and written as the exact bf16 values of the quantized elements, out [rows, cols]
 * (row stride cols, 16-byte aligned): bit for bit fp4_cuda_quantize followed by
 * fp4_cuda_dequant_fp4_rows, in one launch. src: fp4_dtype F32, BF16 or F16 of x [rows, cols] with
 * row stride ld, or FP4_CUDA_MOE_SRC_SILU_MUL: x is gate_up [rows, 2 cols] in f32 and the quantized
 * values are its SiLU*up (the F32 act of fp4_cuda_moe_silu_mul). cols % 32 == 0. */
enum { FP4_CUDA_MOE_SRC_SILU_MUL = 100 };
int fp4_cuda_moe_quantize_bf16(const void *x, int src, int64_t ld, int64_t rows, int64_t cols, int format,
                               float global_scale, const float *global_scale_device, uint16_t *out, void *stream,
                               int pdl);

/* fp4_cuda_moe_route(route) and fp4_cuda_moe_quantize_bf16(x, src, ...) in one launch (src: an
 * fp4_dtype; the W4A4 decode layer's hidden rows, which need no routing): the same results, one
 * kernel fewer in the layer's chain of dependent launches. */
int fp4_cuda_moe_route_quantize_bf16(const fp4_cuda_route_args *route, const void *x, int src, int64_t ld,
                                     int64_t rows, int64_t cols, int format, float global_scale,
                                     const float *global_scale_device, uint16_t *out, void *stream, int pdl);

/* The combine of fp4_cuda_combine_args (above) in a launch of its own. */
int fp4_cuda_moe_combine(const fp4_cuda_combine_args *args, void *stream, int pdl);

#ifdef __cplusplus
}
#endif

#endif
