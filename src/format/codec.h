/*
 * The single source of truth for fp4kit's bits: scalar codecs, scale-layout offsets and the block
 * quantizers of the runtime recipe. Header-only and usable from C (host) and CUDA (host and
 * device), so the C reference, the SIMD CPU code and the CUDA kernels execute the same operations
 * in the same order and are bit-identical by construction; the tests then prove it.
 *
 * Every float operation here is a single IEEE float32 operation: FP4_MUL/FP4_DIV use the
 * round-to-nearest intrinsics on the device so that neither FMA contraction nor fast-math can
 * change a result, and the C build compiles with -ffp-contract=off.
 */
#ifndef FP4_FORMAT_CODEC_H
#define FP4_FORMAT_CODEC_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FP4_HD __host__ __device__ __forceinline__
#else
#define FP4_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define FP4_MUL(a, b) __fmul_rn((a), (b))
#define FP4_DIV(a, b) __fdiv_rn((a), (b))
#else
#define FP4_MUL(a, b) ((a) * (b))
#define FP4_DIV(a, b) ((a) / (b))
#endif

#define FP4_NVFP4_BLOCK 16
#define FP4_MXFP4_BLOCK 32
#define FP4_E4M3_MAX 448.0f
#define FP4_E2M1_MAX 6.0f

FP4_HD uint32_t fp4_f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FP4_HD float fp4_f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/* ---- E2M1 ---------------------------------------------------------------------------------- */

/* The E2M1 decision table on |x|; the inclusive/exclusive bounds encode ties to the even code.
 * The table is evaluated as seven comparisons of the bits of |x| (ordered like the values for
 * non-negative floats), summed: no branches, so a warp encoding 32 different values does not
 * diverge (the GPU quantize kernel is issue-bound on this function). NaN compares above every
 * bound, giving 7, and drops its sign. test_codecs checks every float32 against the table. */
FP4_HD uint8_t fp4_e2m1_encode_inline(float x) {
  const uint32_t u = fp4_f32_bits(x), au = u & 0x7FFFFFFFu;
  const uint32_t code = (uint32_t)(au > 0x3E800000u) +  /* > 0.25 */
                        (uint32_t)(au >= 0x3F400000u) + /* >= 0.75 */
                        (uint32_t)(au > 0x3FA00000u) +  /* > 1.25 */
                        (uint32_t)(au >= 0x3FE00000u) + /* >= 1.75 */
                        (uint32_t)(au > 0x40200000u) +  /* > 2.5 */
                        (uint32_t)(au >= 0x40600000u) + /* >= 3.5 */
                        (uint32_t)(au > 0x40A00000u);   /* > 5 */
  const uint32_t sign = au > 0x7F800000u ? 0u : (u >> 28) & 0x8u;
  return (uint8_t)(sign | code);
}

FP4_HD float fp4_e2m1_decode_inline(uint8_t code) {
  float v;
  switch (code & 0x7) {
  case 0: v = 0.0f; break;
  case 1: v = 0.5f; break;
  case 2: v = 1.0f; break;
  case 3: v = 1.5f; break;
  case 4: v = 2.0f; break;
  case 5: v = 3.0f; break;
  case 6: v = 4.0f; break;
  default: v = 6.0f; break;
  }
  return (code & 0x8) ? -v : v;
}

/* ---- E4M3 (float8_e4m3fn) ------------------------------------------------------------------- */

FP4_HD uint8_t fp4_e4m3_encode_inline(float x) {
  uint32_t u = fp4_f32_bits(x);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80);
  uint32_t au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return 0x7F;             /* NaN -> 0x7F */
  if (au > 0x43E00000u) return sign | 0x7E;      /* |x| > 448 (and inf): SATFINITE */
  if (au < 0x3C800000u) {                         /* |x| < 2^-6: subnormal range, step 2^-9 */
    float scaled = fp4_f32_from_bits(au) * 512.0f; /* exact: a power-of-two scaling */
    /* rintf rounds half to even in the default rounding mode; 8 -> 0x08 = 2^-6, correct. */
    return (uint8_t)(sign | (uint8_t)rintf(scaled));
  }
  /* Normal: keep 3 mantissa bits with round-to-nearest-even on the float32 bit pattern; a carry
   * out of the mantissa correctly bumps the exponent. */
  uint32_t r = (au + 0x7FFFFu + ((au >> 20) & 1u)) >> 20;
  uint32_t code = r - ((127u - 7u) << 3);
  if (code > 0x7E) code = 0x7E;                   /* (448, 464] rounds to 448 anyway */
  return (uint8_t)(sign | code);
}

FP4_HD float fp4_e4m3_decode_inline(uint8_t code) {
  uint32_t sign = (uint32_t)(code & 0x80) << 24;
  uint32_t e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return fp4_f32_from_bits(0x7FC00000u | sign);
  if (e == 0) return fp4_f32_from_bits(sign | fp4_f32_bits((float)m * 0.001953125f)); /* m*2^-9 */
  return fp4_f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

/* ---- UE8M0 (float8_e8m0fnu) ------------------------------------------------------------------- */

/* 2^ceil(log2 x), the exponent clamped to [-127, 127]; x <= 0 -> 0x00, NaN -> 0xFF. */
FP4_HD uint8_t fp4_ue8m0_encode_inline(float x) {
  uint32_t u = fp4_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  if ((u & 0x80000000u) || u == 0) return 0x00;
  uint32_t e = u >> 23, m = u & 0x7FFFFFu;
  if (e == 0xFF) return 0xFE; /* +inf saturates */
  int32_t biased;
  if (e == 0) {
    /* subnormal m * 2^-149: ceil(log2 m) - 149 + 127 */
    int32_t lg = 0;
    while ((1u << lg) < m) lg++;
    biased = lg - 22;
  } else {
    biased = (int32_t)e + (m != 0);
  }
  if (biased < 0) biased = 0;
  if (biased > 254) biased = 254;
  return (uint8_t)biased;
}

FP4_HD float fp4_ue8m0_decode_inline(uint8_t code) {
  if (code == 0xFF) return fp4_f32_from_bits(0x7FC00000u);
  if (code == 0) return fp4_f32_from_bits(0x00400000u); /* 2^-127 is a float32 subnormal */
  return fp4_f32_from_bits((uint32_t)code << 23);
}

/* 2^(127-e) for e in [0, 254]: the MXFP4 encode multiplier. */
FP4_HD float fp4_ue8m0_reciprocal(uint8_t e) {
  if (e >= 254) return fp4_f32_from_bits(0x00400000u); /* 2^-127 */
  return fp4_f32_from_bits((uint32_t)(254 - e) << 23);
}

/* ---- bf16 / f16 ------------------------------------------------------------------------------- */

FP4_HD uint16_t fp4_bf16_from_f32_inline(float x) {
  uint32_t u = fp4_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

FP4_HD float fp4_bf16_to_f32_inline(uint16_t b) { return fp4_f32_from_bits((uint32_t)b << 16); }

FP4_HD uint16_t fp4_f16_from_f32_inline(float x) {
  uint32_t u = fp4_f32_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t au = u & 0x7FFFFFFFu;
  if (au > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
  if (au >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf */
  if (au < 0x38800000u) {                                  /* below 2^-14: step 2^-24 */
    float scaled = fp4_f32_from_bits(au) * 16777216.0f;    /* exact */
    return (uint16_t)(sign | (uint16_t)rintf(scaled));
  }
  au -= 112u << 23;
  au += 0xFFFu + ((au >> 13) & 1u);
  return (uint16_t)(sign | (au >> 13));
}

FP4_HD float fp4_f16_to_f32_inline(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0) return fp4_f32_from_bits(sign | fp4_f32_bits((float)m * 5.9604644775390625e-8f));
  if (e == 0x1F) return fp4_f32_from_bits(sign | 0x7F800000u | (m << 13));
  return fp4_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- scale layouts ------------------------------------------------------------------------------ */

FP4_HD int64_t fp4_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Byte offset of scale (r, c) for a matrix whose scales form R rows x C columns; layout values are
 * those of fp4_scale_layout. */
FP4_HD int64_t fp4_layout_offset(int layout, int64_t C, int64_t r, int64_t c) {
  int64_t Cp = fp4_round_up(C, 4);
  switch (layout) {
  case 1: /* 128x4: 512-byte tiles, tiles run along K first */
    return (r / 128) * (Cp / 4) * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
  case 2: /* 8x4 */
    return (r / 8) * Cp * 8 + (c / 4) * 32 + (r % 8) * 4 + (c % 4);
  default:
    return r * C + c;
  }
}

FP4_HD int64_t fp4_layout_bytes(int layout, int64_t R, int64_t C) {
  switch (layout) {
  case 1: return fp4_round_up(R, 128) * fp4_round_up(C, 4);
  case 2: return fp4_round_up(R, 8) * fp4_round_up(C, 4);
  default: return R * C;
  }
}

/* ---- block quantizers of the runtime recipe ----------------------------------------------------- */

/* The two operation orders of the runtime recipe's NVFP4 scale (TensorRT-LLM / FlashInfer
 * cvt_warp_fp16_to_fp4). They differ only where a float32 rounding lands a scale on the other side
 * of an E4M3 rounding boundary (ties, mostly, which bf16 inputs hit often when 448/amax is short in
 * binary: 4 of 512 scales in FlashInfer's own bf16 test):
 *   FLASHINFER (0, the default): sf = gsf * (vmax * f32(1/6)); out_scale = 1/(float(sf byte) * (1/gsf)),
 *     a zero scale byte of a nonzero block giving out_scale = +inf. The order of FlashInfer's default
 *     build (its JIT compiles with -use_fast_math, FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH unset) and of
 *     its test reference ref_fp4_quant; here with correctly rounded reciprocals where that build
 *     uses rcp.approx.ftz (see fp4_nvfp4_block_scale).
 *   EXACT (1): sf = vmax * (gsf * f32(1/6)); out_scale = min(1/(float(sf byte) * (1/gsf)), FLT_MAX),
 *     the DISABLE_FP4_QUANT_FAST_MATH branch ("match TE's encode scale"). */
#define FP4_ORDER_CODE_FLASHINFER 0
#define FP4_ORDER_CODE_EXACT 1

/* Per-tensor constants of the NVFP4 runtime recipe, computed once. */
typedef struct fp4_nvfp4_recipe {
  float gsf;     /* the encode scale (FLASHINFER order)  */
  float sf_mul;  /* gsf * f32(1/6) (EXACT order)         */
  float inv_gsf; /* 1 / gsf                              */
  int order;     /* FP4_ORDER_CODE_*                     */
} fp4_nvfp4_recipe;

FP4_HD fp4_nvfp4_recipe fp4_nvfp4_recipe_make_order(float gsf, int order) {
  fp4_nvfp4_recipe r;
  r.gsf = gsf;
  r.sf_mul = FP4_MUL(gsf, 1.0f / 6.0f);
  r.inv_gsf = FP4_DIV(1.0f, gsf);
  r.order = order;
  return r;
}

/* The default (FLASHINFER) order: what fp4_quantize and every backend's quantizer run. */
FP4_HD fp4_nvfp4_recipe fp4_nvfp4_recipe_make(float gsf) { return fp4_nvfp4_recipe_make_order(gsf, FP4_ORDER_CODE_FLASHINFER); }

FP4_HD float fp4_absmax_update(float vmax, float x) { return fmaxf(vmax, fabsf(x)); }

/* Scale byte and encode multiplier of an NVFP4 block with max |x| = vmax.
 * FlashInfer's fast-math build takes its three reciprocals (of 6, of gsf, of the decoded scale times
 * 1/gsf) from rcp.approx.ftz.f32 and multiplies with flush-to-zero; here they are correctly rounded
 * and subnormals are kept, so that every backend gives the same bits. Its scale bytes are these
 * whenever rcp.approx.ftz(6) is f32(1/6) and vmax/6 is a normal float; its codes can differ where an
 * approximate out_scale moves x * out_scale across an E2M1 decision boundary. */
FP4_HD uint8_t fp4_nvfp4_block_scale(float vmax, fp4_nvfp4_recipe r, float *out_scale) {
  if (vmax == 0.0f) {
    *out_scale = 0.0f;
    return 0;
  }
  const float sf = r.order == FP4_ORDER_CODE_EXACT ? FP4_MUL(vmax, r.sf_mul) : FP4_MUL(r.gsf, FP4_MUL(vmax, 1.0f / 6.0f));
  uint8_t sb = fp4_e4m3_encode_inline(sf);
  float q = FP4_DIV(1.0f, FP4_MUL(fp4_e4m3_decode_inline(sb), r.inv_gsf));
  /* 1/0 = +inf when the scale byte underflowed: FLASHINFER keeps it (nonzero values saturate to
   * +-6, zeros give NaN -> code 7), EXACT clamps it to FLT_MAX (zeros stay code 0); either way the
   * block dequantizes to zeros. */
  *out_scale = r.order == FP4_ORDER_CODE_EXACT ? fminf(q, FLT_MAX) : q;
  return sb;
}

/* Scale byte and encode multiplier of an MXFP4 block with max |x| = vmax. */
FP4_HD uint8_t fp4_mxfp4_block_scale(float vmax, float *out_scale) {
  uint8_t e = fp4_ue8m0_encode_inline(FP4_DIV(vmax, 6.0f));
  *out_scale = fp4_ue8m0_reciprocal(e);
  return e;
}

/* ---- the Model Optimizer checkpoint recipe's block scale ---------------------------------------- */

/* nvidia-modelopt 0.45 and later (checked through 0.47): _cast_per_block_scale_to_fp8 clamps the
 * block scale to [2^-9, 448] before the float8_e4m3fn cast. */
#define FP4_MODELOPT_CODE_CURRENT 0
/* nvidia-modelopt 0.44 and earlier: a plain cast, so scales up to 2^-10 became byte 0. */
#define FP4_MODELOPT_CODE_0_44 1

/* Scale byte of the float32 block scale amax_block / (6 * weight_scale_2), in Model Optimizer's
 * order: 0 -> 1.0, then (CURRENT) the clamp, then the round-to-nearest-even cast. The comparisons
 * keep a NaN a NaN (byte 0x7F), as torch's clamp does. Both versions saturate above 448 here, where
 * torch's plain cast (0.44) would give NaN for values above 464; a block scale that large needs a
 * subnormal weight_scale_2 (amax below 2688 * 2^-126). */
FP4_HD uint8_t fp4_modelopt_scale_byte(float bscale, int version) {
  if (bscale == 0.0f) bscale = 1.0f;
  if (version == FP4_MODELOPT_CODE_CURRENT) {
    if (bscale < 0.001953125f) bscale = 0.001953125f; /* 2^-9, the smallest E4M3 subnormal */
    if (bscale > FP4_E4M3_MAX) bscale = FP4_E4M3_MAX;
  }
  return fp4_e4m3_encode_inline(bscale);
}

/* Two E2M1 codes in one byte: element 0 (lower K) in the low nibble. */
FP4_HD uint8_t fp4_e2m1_pack2(float x0, float x1, float out_scale) {
  return (uint8_t)(fp4_e2m1_encode_inline(FP4_MUL(x0, out_scale)) |
                   (fp4_e2m1_encode_inline(FP4_MUL(x1, out_scale)) << 4));
}

#endif /* FP4_FORMAT_CODEC_H */
