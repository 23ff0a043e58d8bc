/* The reference grouped GEMM and MoE layer (ref_moe.c), built on the reference GEMM (ref_gemm.h). */
#ifndef FP4_BACKENDS_REF_MOE_H
#define FP4_BACKENDS_REF_MOE_H

#include "dispatch/backend.h"

fp4_status fp4_ref_grouped_mm(const fp4_problem *p);
fp4_status fp4_ref_moe(const fp4_problem *p);

#endif
