/* MoE kernel choice on SM90: the SM80 table plus the register-A wgmma prefill tiles (moe_rules.h). */
#ifndef FP4_BACKENDS_CUDA_CONFIG_MOE_SM90_H
#define FP4_BACKENDS_CUDA_CONFIG_MOE_SM90_H

#include "backends/cuda/config/moe_sm80.h"

/* Token widths of the register-A tiles and the time of one tile relative to the 64-token one's,
 * fitted to the H200 (bench/results/h200/2026-11-30-moe-prefill/width-*.json: the MoE layer at
 * B = 1024 and 4096 for Qwen3.5 and DeepSeek-R1 with each width forced): the narrow tiles run two
 * CTAs per SM, so 32 tokens take 0.87 of 64's time, 128 tokens 1.5 and 256 tokens 1.85; 160 and
 * 192 (experts of about 130-190 rows) interpolated between 128 and 256. */
/* lean_max_rows: at 9-11 NVFP4 rows per expert slot (Qwen3.5 at B = 448-563) the lean kernel took
 * 0.88-0.97x the tensor-core kernel's layer time and 0.99x on DeepSeek-R1 at 10 rows; from 12 rows
 * it took 1.00-1.04x (bench/results/h200/2026-12-03-moe-lean-to-11-rows/). */
/* prefill_min_rows: the register-A prefill tiles took 0.84-0.96x the streaming kernels' layer time at
 * 13-15 routed rows per slot (Qwen3.5 B = 666-768, DeepSeek-R1 B = 416-480, W4A16 and W4A4) and
 * 0.995-1.01x at 12 (bench/results/h200/2026-12-03-moe-prefill-from-13-rows/). */
/* lean_cluster_slabs: in the Qwen3.5 EP8 decode step (64 experts per rank; graph with PDL) the
 * routed gate_up GEMM (K 4096) split over clusters of 2 CTAs, 4 slabs per warp, took the step from
 * 385.8-389.1 to 364.5-365.1 us at batch 1 and from 454.6-455.3 to 435.5-435.6 at batch 2; over 4
 * CTAs (2 slabs per warp) it took 418 us at batch 1, and the down GEMM (K 1024) over 2 CTAs (1 slab
 * per warp) added 4.5 us a layer (bench/results/h200/2026-12-04-moe-lean-cluster-k-split/). */
static const fp4_moe_rules fp4_moe_rules_sm90 = {
    FP4_MOE_RULES_SM80_INIT,
    .lean_cluster_slabs = 4,
    .prefill_min_rows = 13,
    .lean_max_rows = 11,
    .prefill_wgra = 1,
    .widths = 6,
    .width_cost = {{32, 0.87}, {64, 1.0}, {128, 1.5}, {160, 1.59}, {192, 1.68}, {256, 1.85}},
};

#endif
