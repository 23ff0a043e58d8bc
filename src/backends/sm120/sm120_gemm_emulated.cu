/* The same SM120 GEMM source compiled for sm_90 with the MMA emulated (sm120_mma.h): everything but
 * the tensor-core instruction runs, and is checked, on an H100/H200. Not a fast path. */
#define FP4_SM120_EMULATE 1
#include "backends/sm120/sm120_gemm.cuh"
