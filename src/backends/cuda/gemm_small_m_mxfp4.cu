/*
 * The small-M K-splitting kernels for MXFP4 weights (gemm_small_m_kernels.cuh): one of the two halves
 * of that family, compiled as separate units so that a build compiles them in parallel.
 */
#include "backends/cuda/gemm_small_m_kernels.cuh"

cudaError_t fp4_cuda_small_m_launch_mxfp4(const gemm_params &p, int act, int warps, int rows, int min_blocks,
                                          int ksplit, cudaStream_t stream, int pdl) {
  return launch_fmt<FP4_FORMAT_MXFP4>(p, act, warps, rows, min_blocks, ksplit, stream, pdl);
}
