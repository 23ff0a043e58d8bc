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

/* Launches kernel on stream with the grid's CTAs grouped into thread block clusters of cluster
 * CTAs (SM90+; (1, 1, 1): no cluster attribute); pdl != 0 sets
 * cudaLaunchAttributeProgrammaticStreamSerialization (the caller decides whether the device
 * supports either: SM90+). */
template <typename... Params, typename... Args>
static cudaError_t fp4_cuda_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                                           size_t smem, cudaStream_t stream, int pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  cfg.attrs = attr;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = cluster.x;
    attr[cfg.numAttrs].val.clusterDim.y = cluster.y;
    attr[cfg.numAttrs].val.clusterDim.z = cluster.z;
    cfg.numAttrs++;
  }
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs++;
  }
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

/* Launches kernel on stream, no clusters (fp4_cuda_launch_cluster). */
template <typename... Params, typename... Args>
static cudaError_t fp4_cuda_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, int pdl, Args... args) {
  return fp4_cuda_launch_cluster(kernel, grid, block, dim3(1, 1, 1), smem, stream, pdl, args...);
}

/* Thread block clusters (SM90+): a barrier of every thread of the cluster, with release/acquire
 * ordering of shared and global memory, and a load of a float at the same shared-memory offset in
 * another CTA of the cluster (rank: its index in the cluster). Below SM90 they compile to nothing:
 * the host never launches a cluster there. */
__device__ __forceinline__ void fp4_cluster_barrier(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ float fp4_cluster_ld_f32(const float *local, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned a = (unsigned)__cvta_generic_to_shared(local);
  unsigned remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  (void)local, (void)rank;
  return 0.0f;
#endif
}

#endif
