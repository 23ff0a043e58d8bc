/*
 * The cuda backend's grouped GEMM and MoE kernel variants as named configs, and the pure function
 * that picks the default one. Plain C without CUDA (the host-only build tests the chooser).
 *
 * Names (fp4_options.config of fp4_grouped_mm, fp4_grouped_mm_w4a16 and fp4_moe_forward):
 *   moe.lean.r32.k<W>.s<S>            decode kernel (moe_grouped.cu, grouped_lean_kernel): CTAs of
 *                                     4 warps over 32 weight rows ("r32") of one expert, W warps
 *                                     sharing a row group's K ("k1" / "k2" / "k4": K split), S
 *                                     consecutive row groups per CTA ("s": span), K walked with a
 *                                     compile-time trip count (K 1024 / 2048 / 4096 / 7168, NVFP4 in
 *                                     the 128x4 layout, bf16 rows, N % 128 == 0)
 *   moe.lean.generic-k.r32.k<W>.s<S>  the same with the run-time K walk (any K % 128 == 0)
 *   moe.lean.r32.k4.s1.c<C>           the same (four warps sharing a group's K, one group per CTA)
 *                                     with the K slabs split over a thread block cluster of C CTAs
 *                                     (2 or 4; SM90+), whose rank 0 adds the C sums in rank order
 *   moe.lean.generic-k.r16.k4.s1      one 16-row tile per CTA (kept for measuring)
 *   moe.mma.w<W>                      streaming tensor-core kernel (grouped_mma_kernel), W warps per
 *                                     16-row weight tile splitting its K (token tiles follow the rows)
 *   moe.fma                           CUDA-core kernel (any K % 32 == 0)
 *   moe.prefill.mma<M>                large-M mma.sync tiles of M tokens (moe_grouped_large.cu)
 *   moe.prefill.wgra<M>               SM90 register-A wgmma tiles ("wgra": the FP4 weights decoded into
 *                                     wgmma's register A operand) of M tokens, FP4 activations through
 *                                     a bf16 prologue (gemm_large_m_wgra.cu); in the MoE layer the
 *                                     routed experts' M tiles are numbered densely by the routing kernel
 *   moe.prefill.wgra<M>.bound-tiles   the same with the M tiles numbered from a bound (empty ones exit)
 *
 * A grouped GEMM runs the named variant; an MoE layer runs it for each of its GEMMs (routed and
 * shared gate_up and down). A variant that cannot run a problem is refused with the rule it needs,
 * never replaced by another. Three names choose a path, then the chooser's variant per GEMM:
 *   moe.default    the default: the prefill tiles from a mean of prefill_min_rows rows per expert
 *   moe.streaming  the streaming kernels (lean, mma, fma) at any batch
 *   moe.prefill    the prefill tiles at any batch (where a GEMM's activations allow them)
 */
#ifndef FP4_BACKENDS_CUDA_CONFIG_MOE_CONFIG_H
#define FP4_BACKENDS_CUDA_CONFIG_MOE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The K values the lean kernel's compile-time K walk is built for (moe_grouped.cu instantiates one
 * form per value; the rules here accept exactly these), as X-macro lists so that the two stay one:
 *   FP4_MOE_FIXED_K_LIST: every fixed-K form (the model sets' hidden sizes and expert widths);
 *   FP4_MOE_SILU_K_LIST: gate_up with SiLU*up in its epilogue (K the hidden size);
 *   FP4_MOE_EXTRA_DOWN_K_LIST: down with the shared expert as an extra slot (K the expert width). */
#define FP4_MOE_FIXED_K_LIST(X) X(1024) X(2048) X(4096) X(7168)
#define FP4_MOE_SILU_K_LIST(X) X(2048) X(4096) X(7168)
#define FP4_MOE_EXTRA_DOWN_K_LIST(X) X(1024) X(2048)

typedef enum fp4_moe_kernel {
  FP4_MOE_KERNEL_FMA = 0,
  FP4_MOE_KERNEL_MMA = 1,
  FP4_MOE_KERNEL_LEAN = 2,
  FP4_MOE_KERNEL_PREFILL_MMA = 3,
  FP4_MOE_KERNEL_PREFILL_WGRA = 4
} fp4_moe_kernel;

/* One grouped GEMM kernel variant; fields not of its kernel are 0. */
typedef struct fp4_moe_variant {
  int kernel;         /* fp4_moe_kernel                                               */
  int rows;           /* lean: weight rows per CTA (16 or 32)                          */
  int ksplit;         /* lean: warps sharing a row group's K (1, 2 or 4)              */
  int span;           /* lean: consecutive row groups per CTA                          */
  int fixed_k;        /* lean: the compile-time-K walk                                 */
  int warps_per_tile; /* mma: warps splitting one 16-row tile's K (1, 2, 4, 8)         */
  int tile_m;         /* prefill: tokens per tile (mma 64 / 128; wgra 32 .. 256)       */
  int bound_tiles;    /* prefill wgra: M tiles numbered from a bound, never densely    */
  int kparts;         /* lean: CTAs of a cluster splitting K (2, 4; 0: no cluster)     */
} fp4_moe_variant;

/* Active experts (min(E, rows)) the lean kernel takes: its grid's z dimension (at most 65535) holds
 * one slice per active expert and keeps one for the shared expert as an extra slot, and its launch
 * (moe_grouped.cu) refuses more whether or not that slot is used. The tensor-core and CUDA-core
 * kernels take 65535. */
enum { FP4_MOE_LEAN_MAX_SLOTS = 65534 };

/* Facts of the device the chooser and the rules need (gathered once per device). */
typedef struct fp4_moe_arch {
  int major, minor;
  int sms;        /* multiprocessors                                                     */
  int smem_optin; /* bytes of shared memory a block may opt in to                         */
  int wgra;       /* 1: the register-A wgmma tiles run here (SM 9.0, sm_90a code present) */
} fp4_moe_arch;

/* One grouped GEMM as the chooser sees it: out [rows, n] over experts, K, activations. */
typedef struct fp4_moe_gemm_shape {
  int64_t n, k, rows, experts;
  int act;            /* FP4_CUDA_ACT_* (backends/cuda/cuda_kernels.h)                              */
  int format;         /* fp4_format                                                                 */
  int w_layout;       /* fp4_scale_layout of the weights                                            */
  int aligned;        /* 1: activation rows and weights start 16-byte aligned (16-byte loads)       */
} fp4_moe_gemm_shape;

/* The MoE layer as the chooser sees it. */
typedef struct fp4_moe_layer_shape {
  int64_t tokens, top_k, experts, hidden, inter;
  int64_t shared_inter;          /* 0: no shared expert                                          */
  fp4_moe_mode mode;
  int format, layout;            /* of the routed experts                                        */
  int shared_format, shared_layout;
  fp4_dtype hidden_dtype;
  int hidden_aligned;            /* hidden rows and every expert weight 16-byte aligned          */
  int workspace_aligned;         /* the workspace starts 16-byte aligned                         */
} fp4_moe_layer_shape;

/* The layer's GEMMs, in the order fp4_moe_choose_layer fills them. */
enum { FP4_MOE_GATE_UP = 0, FP4_MOE_DOWN = 1, FP4_MOE_SHARED_GATE_UP = 2, FP4_MOE_SHARED_DOWN = 3, FP4_MOE_GEMMS = 4 };

/* The path names: FP4_MOE_PATH_* for "moe.default", "moe.streaming", "moe.prefill", else -1. */
typedef enum fp4_moe_path { FP4_MOE_PATH_DEFAULT = 0, FP4_MOE_PATH_STREAMING = 1, FP4_MOE_PATH_PREFILL = 2 } fp4_moe_path;
int fp4_moe_path_parse(const char *name);
/* The prefill flag of a GEMM (set) of rows over experts on a path. */
int fp4_moe_path_prefill(int path, int64_t rows, int64_t experts, const fp4_moe_arch *arch);

/* Every variant name, in the order configs() offers them after the default. */
const char *const *fp4_moe_variant_names(int *count);
/* The variant a name denotes: 0, or -1 for an unknown name. */
int fp4_moe_variant_parse(const char *name, fp4_moe_variant *v);
/* The name of a variant (a static string; "?" for a variant without one). */
const char *fp4_moe_variant_name(const fp4_moe_variant *v);

/* 1 when the grouped GEMM's mean rows per active expert take the prefill tiles by default. */
int fp4_moe_prefill_wanted(int64_t rows, int64_t experts, const fp4_moe_arch *arch);
/* The default variant of one grouped GEMM: the prefill tiles when prefill is set and they can run
 * it, else the streaming kernels (decode kernel, tensor cores, CUDA cores, as the shape allows). */
fp4_moe_variant fp4_moe_choose_gemm(const fp4_moe_gemm_shape *s, int prefill, const fp4_moe_arch *arch);
/* 0 when v can run s on arch; else -1 with the rule it needs in why. */
int fp4_moe_variant_check(const fp4_moe_variant *v, const fp4_moe_gemm_shape *s, const fp4_moe_arch *arch, char *why,
                          size_t why_size);

/* How the layer runs each expert set: its GEMMs' shapes follow from whether the set runs the prefill
 * tiles (their activations: bf16 rows or FP4 rows for W4A4, bf16 or f32 SiLU*up for W4A16). */
typedef struct fp4_moe_layer_plan {
  int sets;                            /* 1, or 2 with a shared expert                      */
  int prefill[2];                      /* per set: the GEMMs run the prefill tiles          */
  int silu_fused[2];                   /* per set: SiLU*up in the gate_up GEMM's epilogue
                                          (fp4_moe_silu_fusable), no kernel of its own      */
  int shared_fused;                    /* the shared expert's GEMMs run as one more slot of
                                          the routed experts' launches (their variants)     */
  int shared_dense;                    /* the shared expert's GEMMs want the dense kernels'
                                          default configs (fp4_moe_shared_dense)            */
  int route_fused;                     /* the routing runs in the routed gate_up launch, no
                                          kernel of its own (fp4_moe_route_fusable)         */
  int combine_fused;                   /* the combine runs in the routed down launch, no
                                          kernel of its own (fp4_moe_combine_fusable)       */
  fp4_moe_gemm_shape gemm[FP4_MOE_GEMMS];
  fp4_moe_variant variant[FP4_MOE_GEMMS];
} fp4_moe_layer_plan;

/* 1 when a set's gate_up GEMM on variant v can end with SiLU*up (W4A16 decode, NVFP4 weights, bf16
 * hidden states: the two-tile lean kernel writing the bf16 act the down GEMM reads, inter % 16 == 0;
 * on the compile-time K walk K 2048, 4096 or 7168 and inter % 128 == 0). */
int fp4_moe_silu_fusable(const fp4_moe_variant *v, const fp4_moe_gemm_shape *gate_up, const fp4_moe_gemm_shape *down,
                         int w4a4);

/* 1 when the shared expert of a layer plan wants the dense GEMM kernels (the dense chooser's default
 * config for each of its GEMMs, SiLU*up in a kernel of its own) instead of the grouped tiles: the
 * default path, W4A16, the shared set on its own (not in the routed launches) and on the prefill
 * tiles. One expert of T rows there is a grid of (2I / 128) x ceil(T / tile) CTAs (32 for Qwen3.5's
 * shared expert at T = 64: 11% of the H200's SM cycles active, ncu-ep8-b64.csv of
 * bench/results/h200/2026-12-03-moe-shared-expert-dense/), where the dense kernels split K or stream
 * it over every SM. The variants the plan names for the shared set run where the dense kernels
 * refuse its operands (moe_host.c says why in the run info). */
int fp4_moe_shared_dense(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L, const fp4_moe_variant *forced,
                         int path);

/* Pairs (tokens * top_k) up to which the routed gate_up launch can do the routing itself: one warp
 * of every CTA sorts them, a pair per lane. */
enum { FP4_MOE_ROUTE_FUSED_PAIRS = 32 };

/* 1 when the routing of a layer plan runs in its routed gate_up launch instead of a kernel of its
 * own (one dependent launch fewer in the decode chain): the default path, W4A16, gate_up on the lean
 * kernel's compile-time K walk with SiLU*up fused, at most FP4_MOE_ROUTE_FUSED_PAIRS pairs. "moe.streaming" and forced
 * variants keep the routing kernel (the same GEMM kernels, for comparing the two). */
int fp4_moe_route_fusable(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L, const fp4_moe_variant *forced,
                          int path);

/* Pairs (tokens * top_k) up to which the routed down launch does the layer's combine: measured
 * faster than the combine kernel at 2-10 pairs (Qwen3.5 decode steps 1.03-1.11x), 1.8% slower at 16
 * (EP8 batch 8, where the down grid runs three waves of CTAs and the last CTA's combine adds to the
 * tail), bench/results/h200/2026-12-04-moe-combine-in-down/. */
enum { FP4_MOE_COMBINE_FUSED_PAIRS = 12 };

/* 1 when the combine of a layer plan runs at the end of its routed down launch instead of a kernel
 * of its own (one dependent launch fewer, after route_fused's): the routing ran in the gate_up
 * launch (route_fused, whose first CTA zeroes the down launch's arrival counters), at most
 * FP4_MOE_COMBINE_FUSED_PAIRS pairs, down runs the two-tile lean kernel on the compile-time K walk,
 * and every row the combine reads is that launch's: no shared expert, or the shared expert in the
 * routed launches (shared_fused). */
int fp4_moe_combine_fusable(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L);

/* The layer's plan with the chooser's variant of every GEMM on a path (forced NULL) or the variant
 * forced on all of them; returns -1 with the rule in why when forced cannot run one of them. SiLU*up
 * is fused into each set's gate_up GEMM wherever its variant allows (fp4_moe_silu_fusable). In W4A16
 * decode on the lean kernel with SiLU*up fused, a shared expert of the routed experts' shapes runs in
 * the routed launches (shared_fused; its GEMMs then take the routed variants). The
 * routing runs in the routed gate_up launch where fp4_moe_route_fusable says so, the combine in the
 * routed down launch where fp4_moe_combine_fusable does. */
int fp4_moe_plan_layer(const fp4_moe_layer_shape *L, const fp4_moe_variant *forced, int path,
                       const fp4_moe_arch *arch, fp4_moe_layer_plan *plan, char *why, size_t why_size);

/* The W4A4 inputs of a GEMM set on the streaming kernels are bf16 rows (the exact values of the
 * quantized elements) when the kernels can read them: cols % 128 == 0 and 16-byte aligned. */
int fp4_moe_bf16_rows_possible(int64_t cols, int aligned);

/* Shared memory of a prefill mma.sync tile (tile_m 64 or 128) for these activations: 4 stages of
 * 64-element K tiles (the A tile + 128 FP4 weight rows), the 16-bit weight tile (+ the 16-bit A tile
 * for FP4 activations), as lm_tile_cfg<tile_m, 128, 4, ...>::SMEM (moe_grouped_large.cu asserts the
 * equality), plus the row table and the tile header. */
#define FP4_MOE_PREFILL_MMA_SMEM(tile_m, fp4)                                                             \
  (4 * ((fp4) ? (tile_m) * 32 + 128 * 32 : (tile_m) * 128 + 128 * 32) + 128 * 128 + ((fp4) ? (tile_m) * 128 : 0) + \
   (tile_m) * 4 + 256)
int fp4_moe_prefill_mma_smem(int tile_m, int act);

#ifdef __cplusplus
}
#endif

#endif
