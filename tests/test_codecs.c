/* Scalar codecs: exhaustive round trips, every rounding boundary with its float32 neighbours, ties,
 * saturation, NaN, -0, the E2M1 encoder on every float32, E4M3 around 448/464 and subnormals,
 * UE8M0 rounding up, bf16/f16 RNE. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/codec.h"
#include "fp4kit.h"
#include "testing.h"

static float up(float x) { return nextafterf(x, INFINITY); }
static float down(float x) { return nextafterf(x, -INFINITY); }

/* The E2M1 decision table (OCP microscaling formats), written as the specification reads: the oracle for every float32. */
static uint8_t e2m1_spec(float x) {
  if (isnan(x)) return 0x7; /* NaN -> +6 */
  const uint8_t sign = signbit(x) ? 0x8 : 0;
  const float a = fabsf(x);
  const uint8_t code = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return (uint8_t)(sign | code);
}

/* Every one of the 2^32 float32 bit patterns against the table (a few seconds). */
static void test_e2m1_exhaustive(void) {
  uint64_t mismatches = 0;
  uint32_t first = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFu; i++) {
    const uint32_t u = (uint32_t)i;
    float x;
    memcpy(&x, &u, sizeof x);
    if (fp4_e2m1_encode(x) != e2m1_spec(x) && !mismatches++) first = u;
  }
  CHECK(mismatches == 0, "e2m1 encode differs from the table on %llu float32 values (first 0x%08x)",
        (unsigned long long)mismatches, first);
}

static void test_e2m1(void) {
  for (int c = 0; c < 16; c++) {
    uint8_t back = fp4_e2m1_encode(fp4_e2m1_decode((uint8_t)c));
    CHECK(back == c, "e2m1 code 0x%x decodes to %g and re-encodes to 0x%x", c, fp4_e2m1_decode((uint8_t)c), back);
  }
  static const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; c++) CHECK(fp4_e2m1_decode((uint8_t)c) == values[c], "decode 0x%x", c);
  /* boundary b between codes lo and lo+1: b itself goes to the even code. */
  static const struct { float b; uint8_t lo, tie; } bounds[] = {
      {0.25f, 0, 0}, {0.75f, 1, 2}, {1.25f, 2, 2}, {1.75f, 3, 4}, {2.5f, 4, 4}, {3.5f, 5, 6}, {5.0f, 6, 6}};
  for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++) {
    float b = bounds[i].b;
    for (int s = 0; s < 2; s++) {
      float sign = s ? -1.0f : 1.0f;
      uint8_t sb = s ? 0x8 : 0;
      CHECK(fp4_e2m1_encode(sign * b) == (sb | bounds[i].tie), "tie at %g -> 0x%x", sign * b, fp4_e2m1_encode(sign * b));
      CHECK(fp4_e2m1_encode(sign * down(b)) == (sb | bounds[i].lo), "below %g", sign * b);
      CHECK(fp4_e2m1_encode(sign * up(b)) == (sb | (bounds[i].lo + 1)), "above %g", sign * b);
    }
  }
  CHECK(fp4_e2m1_encode(6.0f) == 0x7, "6");
  CHECK(fp4_e2m1_encode(up(5.0f)) == 0x7, "just above 5 -> 6");
  CHECK(fp4_e2m1_encode(100.0f) == 0x7 && fp4_e2m1_encode(-1e30f) == 0xF, "saturation");
  CHECK(fp4_e2m1_encode(INFINITY) == 0x7 && fp4_e2m1_encode(-INFINITY) == 0xF, "inf saturates");
  CHECK(fp4_e2m1_encode(NAN) == 0x7 && fp4_e2m1_encode(-NAN) == 0x7, "NaN -> +6");
  CHECK(fp4_e2m1_encode(-0.0f) == 0x8 && fp4_e2m1_encode(0.0f) == 0x0, "-0 kept");
  CHECK(fp4_e2m1_encode(-0.1f) == 0x8 && fp4_e2m1_encode(-1e-30f) == 0x8, "tiny negatives -> -0");
  CHECK(fp4_e2m1_encode(1e-45f) == 0x0, "denormal -> 0");
}

static void test_e4m3(void) {
  for (int c = 0; c < 256; c++) {
    float v = fp4_e4m3_decode((uint8_t)c);
    if ((c & 0x7F) == 0x7F) {
      CHECK(isnan(v) && fp4_e4m3_encode(v) == 0x7F, "NaN code 0x%02x", c);
      continue;
    }
    CHECK(fp4_e4m3_encode(v) == c, "e4m3 0x%02x -> %g -> 0x%02x", c, v, fp4_e4m3_encode(v));
    if (c < 0x7E) { /* the midpoint to the next code rounds to the even one of the two */
      float next = fp4_e4m3_decode((uint8_t)(c + 1));
      float mid = (v + next) / 2; /* exact: both have few mantissa bits */
      uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
      CHECK(fp4_e4m3_encode(mid) == even, "tie between 0x%02x and 0x%02x", c, c + 1);
      CHECK(fp4_e4m3_encode(down(mid)) == c && fp4_e4m3_encode(up(mid)) == c + 1, "around the tie after 0x%02x", c);
    }
  }
  CHECK(fp4_e4m3_decode(0x7E) == 448.0f, "max 448");
  CHECK(fp4_e4m3_decode(0x01) == 0x1.0p-9f && fp4_e4m3_decode(0x08) == 0x1.0p-6f, "subnormal/normal");
  CHECK(fp4_e4m3_encode(up(448.0f)) == 0x7E && fp4_e4m3_encode(464.0f) == 0x7E && fp4_e4m3_encode(up(464.0f)) == 0x7E,
        "SATFINITE around 448/464");
  CHECK(fp4_e4m3_encode(-1e9f) == 0xFE && fp4_e4m3_encode(INFINITY) == 0x7E, "saturation keeps the sign");
  CHECK(fp4_e4m3_encode(NAN) == 0x7F && fp4_e4m3_encode(-NAN) == 0x7F, "NaN -> 0x7F");
  CHECK(fp4_e4m3_encode(0x1.0p-10f) == 0x00 && fp4_e4m3_encode(up(0x1.0p-10f)) == 0x01, "half the smallest subnormal");
  CHECK(fp4_e4m3_encode(-0.0f) == 0x80, "-0");
  CHECK(fp4_e4m3_encode(0x1.7p-7f) == 0x06, "subnormal 5.75*2^-9 rounds to 6*2^-9"); /* 0x1.7p-7 = 5.75 * 2^-9 */
}

static void test_ue8m0(void) {
  CHECK(fp4_ue8m0_encode(1.0f) == 127 && fp4_ue8m0_encode(up(1.0f)) == 128 && fp4_ue8m0_encode(2.0f) == 128, "round up");
  CHECK(fp4_ue8m0_encode(0.75f) == 127 && fp4_ue8m0_encode(0.5f) == 126, "below one");
  CHECK(fp4_ue8m0_encode(0.0f) == 0 && fp4_ue8m0_encode(-3.0f) == 0, "zero and negatives clamp to 2^-127");
  CHECK(fp4_ue8m0_encode(NAN) == 0xFF, "NaN");
  CHECK(fp4_ue8m0_encode(0x1.0p-127f) == 0 && fp4_ue8m0_encode(0x1.0p-126f) == 1 && fp4_ue8m0_encode(0x1.0p-140f) == 0,
        "subnormal floats");
  CHECK(fp4_ue8m0_encode(0x1.0p127f) == 254 && fp4_ue8m0_encode(up(0x1.0p127f)) == 254 && fp4_ue8m0_encode(INFINITY) == 254,
        "top clamps to 2^127");
  /* Every float32 subnormal (m * 2^-149, m < 2^23) rounds up to a power of two: those above 2^-127
   * to 2^-126 (byte 1), the rest to 2^-127 (byte 0). A block maximum of six times such a value gives
   * the MXFP4 scale of the smallest normal exponent, not of the clamp below it. */
  uint32_t sub_bad = 0, sub_first = 0;
  for (uint32_t m = 1; m < 0x800000u; m++) {
    float x;
    memcpy(&x, &m, sizeof x);
    const uint8_t want = m > 0x400000u ? 1 : 0;
    if (fp4_ue8m0_encode(x) != want && !sub_bad++) sub_first = m;
  }
  CHECK(sub_bad == 0, "ue8m0: %u subnormal floats encode wrongly (first 0x%08x)", sub_bad, sub_first);
  CHECK(fp4_ue8m0_encode(up(0x1.0p-127f)) == 1 && fp4_ue8m0_encode(0x1.8p-127f) == 1 &&
            fp4_ue8m0_encode(down(0x1.0p-126f)) == 1,
        "subnormals above 2^-127 round up to 2^-126");
  for (int e = 0; e < 255; e++) {
    float v = fp4_ue8m0_decode((uint8_t)e);
    CHECK(fp4_ue8m0_encode(v) == e, "ue8m0 %d round trip", e);
    CHECK(v == ldexpf(1.0f, e - 127), "ue8m0 %d value", e);
  }
  CHECK(isnan(fp4_ue8m0_decode(0xFF)), "0xFF is NaN");
}

static void test_half(void) {
  CHECK(fp4_bf16_from_f32(1.0f) == 0x3F80, "bf16 one");
  CHECK(fp4_bf16_from_f32(1.0f + 0x1.0p-8f) == 0x3F80, "bf16 tie to even (down)");
  CHECK(fp4_bf16_from_f32(1.0f + 3 * 0x1.0p-8f) == 0x3F82, "bf16 tie to even (up)");
  CHECK(fp4_bf16_from_f32(up(1.0f + 0x1.0p-8f)) == 0x3F81, "bf16 above the tie");
  CHECK(fp4_bf16_from_f32(3.4e38f) == 0x7F80, "bf16 overflow to inf");
  CHECK(isnan(fp4_bf16_to_f32(fp4_bf16_from_f32(NAN))), "bf16 NaN stays NaN");
  /* A NaN whose payload lies only in the 16 low bits would truncate to the infinity pattern: it must
   * come out as a quiet NaN with its sign (signalling NaNs and NaN payloads from other code). */
  static const uint32_t low_nans[] = {0x7F800001u, 0xFF800001u, 0x7F80FFFFu, 0x7FA00000u};
  for (size_t i = 0; i < sizeof low_nans / sizeof *low_nans; i++) {
    float x;
    memcpy(&x, &low_nans[i], sizeof x);
    const uint16_t b = fp4_bf16_from_f32(x);
    CHECK(isnan(fp4_bf16_to_f32(b)) && (b & 0x0040u) && (b >> 15) == (low_nans[i] >> 31),
          "bf16 of NaN 0x%08x is 0x%04x, not a quiet NaN of the same sign", low_nans[i], b);
  }
  CHECK(fp4_f16_from_f32(1.0f) == 0x3C00 && fp4_f16_from_f32(65504.0f) == 0x7BFF, "f16 one, max");
  CHECK(fp4_f16_from_f32(down(65520.0f)) == 0x7BFF && fp4_f16_from_f32(65520.0f) == 0x7C00, "f16 overflow boundary");
  CHECK(fp4_f16_from_f32(0x1.0p-24f) == 0x0001 && fp4_f16_from_f32(0x1.0p-25f) == 0 && fp4_f16_from_f32(up(0x1.0p-25f)) == 1,
        "f16 subnormals");
  CHECK(fp4_f16_from_f32(1.0f + 0x1.0p-11f) == 0x3C00 && fp4_f16_from_f32(1.0f + 3 * 0x1.0p-11f) == 0x3C02, "f16 ties");
  CHECK(fp4_f16_from_f32(-0.0f) == 0x8000 && (fp4_f16_from_f32(NAN) & 0x7C00) == 0x7C00, "f16 -0, NaN");
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = fp4_f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    bad += fp4_f16_from_f32(f) != h;
  }
  CHECK(bad == 0, "%d f16 codes fail the round trip", bad);
  bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = fp4_bf16_to_f32((uint16_t)b);
    if (isnan(f)) continue;
    bad += fp4_bf16_from_f32(f) != b;
  }
  CHECK(bad == 0, "%d bf16 codes fail the round trip", bad);
}

static void test_packing(void) {
  const float v[4] = {1.0f, -2.0f, 0.5f, 6.0f};
  uint8_t packed[2] = {0xFF, 0xFF};
  CHECK(fp4_convert(v, FP4_DTYPE_F32, packed, FP4_DTYPE_E2M1X2, 4) == FP4_OK, "pack");
  CHECK(packed[0] == 0xC2 && packed[1] == 0x71, "element 0 in the low nibble: got %02x %02x", packed[0], packed[1]);
  float back[4];
  CHECK(fp4_convert(packed, FP4_DTYPE_E2M1X2, back, FP4_DTYPE_F32, 4) == FP4_OK, "unpack");
  CHECK(!memcmp(back, v, sizeof v), "unpack values");
  CHECK_ERROR(fp4_convert(v, FP4_DTYPE_F32, packed, FP4_DTYPE_E2M1X2, 3), FP4_ERR_INVALID_ARGUMENT, "even");
  CHECK_ERROR(fp4_convert(packed, FP4_DTYPE_E2M1X2, back, FP4_DTYPE_BF16, 2), FP4_ERR_UNSUPPORTED, "e2m1x2");
}

/* The Model Optimizer block-scale rule of each release on every non-negative float32 bit pattern
 * (infinity and NaNs included; block scales are never negative), against the rule as
 * nvfp4_tensor.py states it: 0 -> 1, then for 0.45+ torch.clamp(min=2^-9, max=448), which keeps NaN,
 * then the cast. The releases differ exactly on (0, 2^-10]: byte 0 before, 2^-9 now. */
static void test_modelopt_scale_rule_exhaustive(void) {
  uint64_t bad_current = 0, bad_old = 0, differ = 0, differ_elsewhere = 0;
  uint32_t first = 0;
  for (uint32_t u = 0; u <= 0x7FFFFFFFu; u++) {
    float x;
    memcpy(&x, &u, sizeof x);
    const float z = x == 0.0f ? 1.0f : x;
    const float clamped = isnan(z) ? z : z < 0.001953125f ? 0.001953125f : z > 448.0f ? 448.0f : z;
    const uint8_t cur = fp4_modelopt_scale_byte(x, FP4_MODELOPT_CODE_CURRENT);
    const uint8_t old = fp4_modelopt_scale_byte(x, FP4_MODELOPT_CODE_0_44);
    if (cur != fp4_e4m3_encode(clamped) && !bad_current++) first = u;
    bad_old += old != fp4_e4m3_encode(z);
    if (cur != old) {
      differ++;
      differ_elsewhere += u == 0 || u > 0x3A800000u || old != 0x00 || cur != 0x01; /* 0x3A800000 = 2^-10 */
    }
  }
  CHECK(bad_current == 0, "0.45+ rule: %llu values differ from clamp-then-cast (first 0x%08x)",
        (unsigned long long)bad_current, first);
  CHECK(bad_old == 0, "0.44 rule: %llu values differ from the plain cast", (unsigned long long)bad_old);
  CHECK(differ == 0x3A800000u && differ_elsewhere == 0,
        "the releases differ on %llu floats, %llu of them outside (0, 2^-10] (want all 0x3A800000 inside)",
        (unsigned long long)differ, (unsigned long long)differ_elsewhere);
  CHECK(fp4_modelopt_scale_byte(0.0009765625f, FP4_MODELOPT_CODE_0_44) == 0x00 &&
            fp4_modelopt_scale_byte(nextafterf(0.0009765625f, 1.0f), FP4_MODELOPT_CODE_0_44) == 0x01,
        "0.44: 2^-10 is the tie that rounds to 0, the next float rounds to 2^-9");
  CHECK(fp4_modelopt_scale_byte(NAN, FP4_MODELOPT_CODE_CURRENT) == 0x7F, "NaN stays NaN through the clamp");
  CHECK(fp4_modelopt_scale_byte(1e30f, FP4_MODELOPT_CODE_CURRENT) == 0x7E, "clamped to 448");
}

/* The two runtime-recipe orders on every positive bf16 block maximum, for encode scales of the
 * kind FlashInfer's tests make (2688 * f32(1/amax), torch's scalar / tensor) and round ones: the
 * scale bytes differ by at most one E4M3 step, and only where the two float32 scale values lie on
 * both sides of (or one exactly on) the rounding boundary between those E4M3 values. */
static void test_runtime_orders_bf16(void) {
  const float amaxes[] = {3.0f, 3.9375f, 4.0625f, 5.75f, 4.3125f, 1.0f, 0.5f};
  const float sixth = 1.0f / 6.0f;
  uint64_t blocks = 0, differ = 0, bad = 0;
  for (size_t a = 0; a < sizeof amaxes / sizeof *amaxes; a++) {
    const float gsf = 2688.0f * (1.0f / amaxes[a]);
    const fp4_nvfp4_recipe fi = fp4_nvfp4_recipe_make_order(gsf, FP4_ORDER_CODE_FLASHINFER);
    const fp4_nvfp4_recipe ex = fp4_nvfp4_recipe_make_order(gsf, FP4_ORDER_CODE_EXACT);
    const fp4_nvfp4_recipe def = fp4_nvfp4_recipe_make(gsf);
    for (uint32_t b = 1; b < 0x7F80u; b++) {
      const float vmax = fp4_bf16_to_f32((uint16_t)b);
      if (vmax > amaxes[a]) break;
      float os_fi, os_ex, os_def;
      const uint8_t sfi = fp4_nvfp4_block_scale(vmax, fi, &os_fi);
      const uint8_t sex = fp4_nvfp4_block_scale(vmax, ex, &os_ex);
      const uint8_t sdef = fp4_nvfp4_block_scale(vmax, def, &os_def);
      blocks++;
      bad += sdef != sfi || memcmp(&os_def, &os_fi, sizeof os_fi) != 0;
      bad += sfi != fp4_e4m3_encode(gsf * (vmax * sixth)) || sex != fp4_e4m3_encode(vmax * (gsf * sixth));
      if (sfi == sex) continue;
      differ++;
      const uint8_t lo = sfi < sex ? sfi : sex, hi = sfi < sex ? sex : sfi;
      const double mid = 0.5 * ((double)fp4_e4m3_decode(lo) + (double)fp4_e4m3_decode(hi));
      const double v_fi = (double)(gsf * (vmax * sixth)), v_ex = (double)(vmax * (gsf * sixth));
      const double vlo = v_fi < v_ex ? v_fi : v_ex, vhi = v_fi < v_ex ? v_ex : v_fi;
      bad += hi != lo + 1 || !(vlo <= mid && mid <= vhi);
    }
  }
  CHECK(bad == 0, "runtime orders: %llu inconsistencies", (unsigned long long)bad);
  CHECK(differ > 0 && differ * 100 < blocks, "the orders differ on %llu of %llu bf16 block maxima", (unsigned long long)differ,
        (unsigned long long)blocks);
  fprintf(stderr, "runtime orders: %llu of %llu bf16 block maxima get another scale byte\n", (unsigned long long)differ,
          (unsigned long long)blocks);
}

int main(void) {
  test_e2m1();
  test_e2m1_exhaustive();
  test_e4m3();
  test_ue8m0();
  test_half();
  test_packing();
  test_modelopt_scale_rule_exhaustive();
  test_runtime_orders_bf16();
  return TEST_SUMMARY();
}
