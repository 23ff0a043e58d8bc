/*
 * The one launch path of the cuda backend. Every kernel goes through fp4_cuda_launch, which uses
 * cudaLaunchKernelEx so programmatic dependent launch (PDL) is a per-call attribute; every kernel
 * calls fp4_pdl_wait() before it reads anything a previous kernel may have written and
 * fp4_pdl_launch_dependents() once its inputs are consumed. Launching with the attribute while a
 * kernel lacks the wait corrupts results silently, so the pair lives here, next to the launcher.
 */
#ifndef FP4_BACKENDS_CUDA_LAUNCH_CUH
#define FP4_BACKENDS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

/* griddepcontrol exists from SM90 (PTX 7.8) and ptxas rejects it below; without PDL both
 * instructions are no-ops, so kernels execute them unconditionally. */
__device__ __forceinline__ void fp4_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void fp4_pdl_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Launches kernel on stream; pdl != 0 sets cudaLaunchAttributeProgrammaticStreamSerialization
 * (the caller decides whether the device supports it: SM90+). */
template <typename... Params, typename... Args>
static cudaError_t fp4_cuda_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, int pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

#endif
