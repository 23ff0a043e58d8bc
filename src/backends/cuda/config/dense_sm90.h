/* Dense GEMM choice on SM90: the SM89 table plus the sm_90a families (wgmma and register-A wgmma
 * tiles). The register-A tiles lead the large-M candidates: 469-598 TFLOP/s on the large dense
 * weights at M >= 1024 on the H200 against 223-229 for the best mma.sync tile
 * (bench/results/h200/2026-11-30-large-m-prefill/). They first led only where their 256-token tile
 * gives every SM a CTA (without a K split each CTA walks all of K at about 1 us per 64-K tile); with
 * the K split they lead on every grid above 256 tokens too
 * (bench/results/h200/2026-12-02-above-256-tokens/: at M = 512 the mma.sync tiles that led where
 * the 256-token grid left SMs idle took 320.8 us on 8192 x 8192 and 1091.4 on 8192 x 28672, the
 * register-A tiles 110.9 and 353.3).
 * Batched decode (wgra_*): from 17 to 256 tokens the register-A tiles of 32 to 256 tokens lead
 * (config/dense_config.c picks the tile), 1.1-2.9x faster than the small-M kernels they replace at
 * 33-64 tokens and than the mma.sync tiles above; up to 32 tokens only from 10240 weight rows or on
 * 2^25 weights, as on smaller narrow weights the small-M kernels stay ahead (2048 x 4096 at M = 32:
 * 14.2 against 16.0 us; bench/results/h200/2026-12-02-batched-decode/). On 2^25 weights the 32-token
 * tile with its lean producer leads from 17 tokens: 1.02-1.36x at M = 17-24 on 8192 x 28672,
 * 4096 x 14336, 7168 x 8192, 8192 x 8192 and 4096 x 8192, against 0.97-1.01x on 8192 x 4096
 * (bench/results/h200/2026-12-03-wgra-lean-producer/, m17-24.json; before it, from 25 tokens).
 * Short K (short_k_r32_max_slabs): up to 16 tokens, 512 <= K <= 1920 and one to two 32-row CTAs per
 * SM, small-m.r32.w8 leads (dense_config.c, short_k_r32): inside the PDL graph of the decode step it
 * took 0.80-0.90x the time of the 16-row kernels it replaced (Llama-3.1-8B TP8 step 1.066x faster at
 * batch 1; bench/results/h200/2026-12-03-step-config-sweep/). */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_SM90_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_SM90_H

#include "backends/cuda/config/dense_sm89.h"

#define FP4_DENSE_RULES_SM90_INIT FP4_DENSE_RULES_SM89_INIT, .ksplit_max_m = 16, .ksplit_min_log2_weights = 21

static const fp4_dense_rules fp4_dense_rules_sm90 = {.arch = "sm90",
                                                     FP4_DENSE_RULES_SM90_INIT,
                                                     .sm90a_families = 1,
                                                     .wgra_from_m = 17,
                                                     .wgra_lead_to_m = 256,
                                                     .wgra_narrow_to_m = 32,
                                                     .wgra_narrow_min_n = 10240,
                                                     .wgra_narrow_min_log2_weights = 25,
                                                     .short_k_r32_max_slabs = 15};

#endif
