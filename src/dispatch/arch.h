/* The one architecture table and the build's CUDA targets; see fp4_arch_info. */
#ifndef FP4_DISPATCH_ARCH_H
#define FP4_DISPATCH_ARCH_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build holds device code (SASS) that runs natively on compute capability cc: an
 * exact "a" target (sm_90a runs only on 9.0) or a plain target of the same major version and a
 * minor version not above cc's. */
int fp4_arch_build_runs_on(int cc);
/* 1 when this build holds exactly the target "sm_90a" / "sm_80" (as the table names them). */
int fp4_arch_build_has_target(const char *target);

#ifdef __cplusplus
}
#endif

#endif
