/* Dense GEMM choice on SM86 / SM89: the SM80 table. About 99 KB of shared memory per block leaves
 * out the tiles that need more (the 128 x 256 mma.sync tile, checked against the device's figure). */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_SM89_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_SM89_H

#include "backends/cuda/config/dense_sm80.h"

#define FP4_DENSE_RULES_SM89_INIT FP4_DENSE_RULES_SM80_INIT

static const fp4_dense_rules fp4_dense_rules_sm89 = {.arch = "sm89", FP4_DENSE_RULES_SM89_INIT, .sm90a_families = 0};

#endif
