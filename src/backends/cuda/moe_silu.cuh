/*
 * SiLU(gate) * up of the MoE layer, as its numeric contract defines it (docs/moe.md, step 4), shared by
 * the SiLU*up kernel and quantize of moe_layer.cu and the decode GEMM's fused epilogue of
 * moe_grouped.cu, so every path computes the same bits from the same f32 gate and up values.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_SILU_CUH
#define FP4_BACKENDS_CUDA_MOE_SILU_CUH

#include <math.h>
#include <stdint.h>

#include "format/codec.h"

/* SiLU(gate) * up as the numeric contract defines it (docs/moe.md, step 4): act = f32(g / (1 + exp(-g))
 * * u), in double from the f32 g and u. */
__device__ __forceinline__ float silu_mul_f32(float g, float u) {
  const double gate = g, up = u;
  return (float)(gate / (1.0 + exp(-gate)) * up);
}

/* bf16(silu_mul_f32(g, u)), the W4A16 layer's bf16 act, bit for bit, mostly in single precision:
 * the double exp costs about 25 FP64 instructions and the conversions three more per element, which
 * the H200 issues at a half and an eighth of the FP32 rate (SiLU*up of DeepSeek-R1 at B = 4096
 * computes 67 M of them).
 *
 * Single precision first: v = __fdividef(g, 1 + __expf(-g)) * u. For 2^-64 <= |g| <= 32 (exp(-g)
 * and the quotient stay normal), __expf is within 2 + floor(1.173 |g|) <= 39 ulp (CUDA's bound), a
 * relative 2^-17.7; the sum 1 + t, the quotient (2 ulp) and the product add under 2^-21. So
 * |v - exact| < 2^-17.5 |v|, under 88 units in the last place of v's f32 encoding. bf16 keeps the
 * top 16 bits of that encoding and rounds on the low 16; the only rounding boundary among them is
 * the midpoint 0x8000. When v's low 16 bits are more than 256 units from it, the exact value, its
 * double approximation and that rounded to f32 (within half a unit more) lie between the same two
 * midpoints as v, so all round to v's bf16. Otherwise (0.8% of random values), and for tiny, large
 * or non-finite operands, the double formula decides. Exact zeros (g or u zero, both finite) are
 * the same signed zero either way. */
__device__ __forceinline__ uint16_t silu_mul_bf16(float g, float u) {
  const float v = __fmul_rn(__fdividef(g, __fadd_rn(1.0f, __expf(-g))), u);
  const float ag = fabsf(g), av = fabsf(v);
  const uint32_t low = __float_as_uint(v) & 0xFFFFu;
  const bool zero = (g == 0.0f || u == 0.0f) && isfinite(g) && isfinite(u);
  const bool single = isfinite(u) && ag >= 0x1p-64f && ag <= 32.0f && av >= 0x1p-100f && av <= 0x1p100f &&
                      (low < 0x8000u - 256u || low > 0x8000u + 256u);
  return fp4_bf16_from_f32_inline(zero || single ? v : silu_mul_f32(g, u));
}

#endif
