/*
 * SiLU(gate) * up as the MoE layer defines it (docs/moe.md, numeric contract): in double from the
 * f32 gate_up values, rounded once to f32. Shared by the SiLU*up kernel (moe_layer.cu) and the
 * decode GEMM that fuses it into gate_up's epilogue (moe_grouped.cu), so both give the same bits.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_SILU_CUH
#define FP4_BACKENDS_CUDA_MOE_SILU_CUH

__device__ __forceinline__ float moe_silu_mul(double gate, double up) {
  return (float)(gate / (1.0 + exp(-gate)) * up);
}

#endif
