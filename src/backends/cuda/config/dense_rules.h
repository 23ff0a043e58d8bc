/*
 * What the dense GEMM chooser (dense_config.c) may differ in per architecture: one table per
 * architecture (dense_sm80.h .. dense_sm120.h), each starting from the one before it and changing
 * what was measured to differ there. The tile facts (shared memory, SM count) come from the device.
 */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_RULES_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_RULES_H

typedef struct fp4_dense_rules {
  const char *arch;   /* the table's name, for messages                                             */
  int large_m_from;   /* M above which the default is a large-M tile rather than a small-M kernel  */
  int sm90a_families; /* the register-A wgmma tiles exist (sm_90a code: SM 9.0 only)                */
  int lean_max_m;     /* tokens up to which the lean small-M configs lead, given enough CTAs        */
  int lean_ctas_per_sm; /* CTAs per SM the lean configs need to lead (they keep 6 resident)          */
  int sa_min_m, sa_max_m; /* tokens over which the shared-activation kernel leads (bf16/f16)          */
  int prologue_min_log2_weights; /* W4A4 takes the bf16 prologue from 2^this weights (N x K)         */
  int wgra_from_m, wgra_lead_to_m; /* tokens over which the register-A tiles lead (0: they do not)  */
  int wgra_narrow_to_m, wgra_narrow_min_n; /* up to this many tokens, they lead from this N only...    */
  int wgra_narrow_min_log2_weights;        /* ...or on 2^this weights                                 */
  int ksplit_max_m;   /* tokens up to which the cluster K split (small-m.w<W>.k<S>) may lead; 0: never */
  int ksplit_min_log2_weights; /* ...on weights of at least 2^this elements (N x K)                   */
  int short_k_r32_max_slabs; /* 0, or: up to this many 128-K slabs (from 4), bf16/f16 activations of
                              * up to 16 tokens and 15/16 to 2 of small-m.r32.w8's CTAs per SM, it leads */
} fp4_dense_rules;

/* The table of the device's architecture (major, minor). */
const fp4_dense_rules *fp4_dense_rules_for(int major, int minor);

#endif
