/*
 * Device scalars of the grouped GEMMs (fp4_cuda_grouped_args.alpha_device / a_scale_device): read
 * on the GPU, after the kernel's PDL wait (a producer kernel may write them), in the float arithmetic
 * the host uses for the by-value forms, so both give the same bits for the same values.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_SCALARS_CUH
#define FP4_BACKENDS_CUDA_MOE_SCALARS_CUH

/* alpha, times *alpha_device when set (the host would pass alpha * value, a float product). */
__device__ __forceinline__ float moe_alpha(float alpha, const float *alpha_device) {
  return alpha_device ? __fmul_rn(alpha, *alpha_device) : alpha;
}

/* The multiplier of FP4-valued activations: 1 / *a_scale_device when set (the host's 1.0f / gsf),
 * else a_mult. */
__device__ __forceinline__ float moe_a_mult(float a_mult, const float *a_scale_device) {
  return a_scale_device ? __fdiv_rn(1.0f, *a_scale_device) : a_mult;
}

/* An NVFP4 encode scale: *device when set, else the by-value one. */
__device__ __forceinline__ float moe_global_scale(float by_value, const float *device) {
  return device ? *device : by_value;
}

#endif
