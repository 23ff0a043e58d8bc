/* Dense GEMM choice on SM100: the SM90 table without the sm_90a families (arch-specific code that
 * runs on SM 9.0 only). Not measured on SM100 hardware. */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_SM100_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_SM100_H

#include "backends/cuda/config/dense_sm90.h"

#define FP4_DENSE_RULES_SM100_INIT FP4_DENSE_RULES_SM90_INIT

static const fp4_dense_rules fp4_dense_rules_sm100 = {.arch = "sm100", FP4_DENSE_RULES_SM100_INIT, .sm90a_families = 0};

#endif
