/* Dense GEMM choice on SM80, and the base of every later table (dense_rules.h). The numbers were
 * measured on the H200 and hold until a table of its own says otherwise:
 * large_m_from: the large-M tiles overtake the best small-M config from M = 65 on seven of the eight
 *   dense shapes, from 48 on the eighth (bench/results/h200/2026-11-30-large-m-prefill/
 *   large-vs-small-m.csv);
 * lean_*: up to 4 tokens the lean kernel (6 resident CTAs per SM) wins once there are 4 CTAs per SM
 *   to fill its slots (bench/results/h200/2026-11-30-small-m-decode/lean-configs.csv:
 *   57344x8192 87.4 vs 95.0 us);
 * sa_*: 17 to 32 tokens of bf16/f16 activations take the shared-activation kernel from 1.2 of its
 *   64-row CTAs per SM (bench/results/h200/2026-11-30-small-m-decode/
 *   m8-32-shared-activation.json: 1.20-1.39x);
 * prologue_min_log2_weights: W4A4 through the bf16 prologue is 1.3-2x faster than the in-loop decode
 *   from 8192 x 4096 weights up (bench/results/h200/2026-11-30-small-m-decode/
 *   w4a4-prologue-configs.csv). */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_SM80_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_SM80_H

#include "backends/cuda/config/dense_rules.h"

#define FP4_DENSE_RULES_SM80_INIT                                                                     \
  .large_m_from = 64, .lean_max_m = 4, .lean_ctas_per_sm = 4, .sa_min_m = 17, \
  .sa_max_m = 32, .prologue_min_log2_weights = 25

static const fp4_dense_rules fp4_dense_rules_sm80 = {.arch = "sm80", FP4_DENSE_RULES_SM80_INIT, .sm90a_families = 0};

#endif
