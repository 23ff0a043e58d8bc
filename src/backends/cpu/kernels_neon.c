/* The aarch64 (NEON) level of the cpu backend. This is where NEON kernels go: fill a
 * fp4_cpu_kernels table like kernels_avx2.c (the f32 gemv/panel/micro kernels and the quantizer)
 * and return it here. Until then the level reports itself unavailable and aarch64 runs the generic
 * kernels. */
#if defined(__aarch64__)
#include "backends/cpu/cpu_kernels.h"

const fp4_cpu_kernels *fp4_cpu_kernels_neon(void) { return NULL; }
#else
typedef int fp4_cpu_neon_unused; /* ISO C forbids an empty translation unit */
#endif
