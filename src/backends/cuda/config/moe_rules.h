/*
 * The numbers behind the default MoE kernel choice (moe_config.c), one table per architecture, each
 * starting from the one before it (moe_sm80.h: every SM80+ GPU; moe_sm90.h: SM90 overrides).
 * Measured on the H200 only; other architectures use the SM80 table until measured there.
 */
#ifndef FP4_BACKENDS_CUDA_CONFIG_MOE_RULES_H
#define FP4_BACKENDS_CUDA_CONFIG_MOE_RULES_H

typedef struct fp4_moe_width_cost {
  int tokens;  /* register-A tile width                                      */
  double cost; /* time of one tile relative to the 64-token tile's           */
} fp4_moe_width_cost;

typedef struct fp4_moe_rules {
  int prefill_min_rows;    /* mean rows per active expert from which the prefill tiles run       */
  int lean_max_rows;       /* NVFP4, bf16/f16 rows: the lean kernel up to this mean per slot      */
  int lean_wave_ctas;      /* two-tile lean CTAs per SM counted in a wave (K split, span rules)  */
  int lean_span_max_bytes; /* NVFP4: two spans per CTA only under this many code bytes a span    */
  int lean_span_waves;     /* ... and with at least this many waves of row groups                 */
  int mma_min_ctas_per_sm; /* tensor-core streaming kernel: split K over warps below this         */
  int lean_cluster_slabs;  /* the lean kernel's cluster K split only where every warp keeps at
                              least this many slabs of its CTA's part (0: never)                  */
  int prefill_wgra;        /* 1: the register-A wgmma tiles are the prefill default (when present) */
  int widths;              /* entries of width_cost                                               */
  fp4_moe_width_cost width_cost[8];
} fp4_moe_rules;

#endif
