/* Dense GEMM choice on SM120: the SM100 table (about 99 KB of shared memory per block, as SM89:
 * checked against the device's figure). Not measured on SM120 hardware. */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_SM120_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_SM120_H

#include "backends/cuda/config/dense_sm100.h"

#define FP4_DENSE_RULES_SM120_INIT FP4_DENSE_RULES_SM100_INIT

static const fp4_dense_rules fp4_dense_rules_sm120 = {.arch = "sm120", FP4_DENSE_RULES_SM120_INIT, .sm90a_families = 0};

#endif
