/* MoE kernel choice, SM80 and every later architecture without a table of its own (moe_rules.h). */
#ifndef FP4_BACKENDS_CUDA_CONFIG_MOE_SM80_H
#define FP4_BACKENDS_CUDA_CONFIG_MOE_SM80_H

#include "backends/cuda/config/moe_rules.h"

/* prefill_min_rows: at 5-8 rows per expert (B = 256) streaming wins (Qwen3.5 3.7 vs 5.9 ms,
 * DeepSeek-R1 6.6 vs 10.2 ms), at 20-32 rows (B = 1024) the tiles win by 2.7-2.8x (6.2 vs 17.2 ms,
 * 10.5 vs 28.3 ms) (bench/results/h200/2026-11-30-moe-prefill/streaming-vs-tiles-all-tiles.json).
 * lean_wave_ctas: the two-tile lean kernel's CTAs per SM under its sm_90a launch bounds (4 on other
 * targets, moe_lean_blocks_here; the rules were fitted with 5 on the H200).
 * lean_span_*: docs/moe.md (bench/results/h200/2026-11-30-moe-decode/README.md, per-GEMM table).
 * mma_min_ctas_per_sm: fewer than 3 CTAs of 8 warps per SM leave the tensor-core kernel latency-bound.
 * lean_max_rows: 8, where the tensor-core kernel takes two token tiles per row chunk.
 * prefill_min_rows and lean_max_rows are set per table (moe_sm90.h: 13 and 11, measured there). */
#define FP4_MOE_RULES_SM80_INIT                                                                      \
  .lean_wave_ctas = 5, .lean_span_max_bytes = 64 << 10, .lean_span_waves = 8, .mma_min_ctas_per_sm = 3

static const fp4_moe_rules fp4_moe_rules_sm80 = {FP4_MOE_RULES_SM80_INIT, .prefill_min_rows = 16, .lean_max_rows = 8,
                                                .prefill_wgra = 0, .lean_cluster_slabs = 0, .widths = 0};

#endif
