/* What the harness's runners share (harness_common.h). */
#include "harness_common.h"

#include <math.h>
#include <stdio.h>

/* ---- random data ------------------------------------------------------------------------------- */

uint64_t fp4h_next(fp4h_rng *g) { /* splitmix64: small, fast, good enough for test data */
  uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double fp4h_uniform(fp4h_rng *g) { return (double)(fp4h_next(g) >> 11) * 0x1.0p-53; }

double fp4h_gauss(fp4h_rng *g) {
  double u = fp4h_uniform(g), v = fp4h_uniform(g);
  return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

void fp4h_fill(fp4h_rng *g, float *x, int64_t n, fp4h_data data, int block) {
  static const float grid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 3.0f};
  for (int64_t i = 0; i < n; i++) {
    switch (data) {
    case FP4H_DATA_UNIFORM: x[i] = (float)(2.0 * fp4h_uniform(g) - 1.0); break;
    case FP4H_DATA_NORMAL:
      x[i] = (float)fp4h_gauss(g);
      if ((fp4h_next(g) & 1023) == 0) x[i] *= 40.0f; /* activation outliers */
      break;
    case FP4H_DATA_EDGES: {
      int64_t b0 = i - i % block;
      fp4h_rng bg = {(uint64_t)b0 * 0x9E3779B97F4A7C15ull ^ g->s};
      switch (fp4h_next(&bg) % 6) {
      case 0: x[i] = 0.0f; break;                                            /* zero block */
      case 1: x[i] = (float)fp4h_gauss(g); break;
      case 2: x[i] = (float)(fp4h_gauss(g) * 1e-9); break;                  /* scale underflows */
      case 3: x[i] = grid[fp4h_next(g) % 10] * ((fp4h_next(g) & 1) ? -1.f : 1.f); break; /* ties */
      case 4: x[i] = -(float)(fp4h_uniform(g) * 1e-3); break;               /* -0 codes */
      default: x[i] = (float)(fp4h_gauss(g) * 300.0); break;                 /* large */
      }
      break;
    }
    }
  }
}

/* ---- comparison ------------------------------------------------------------------------------- */

double fp4h_tolerance(fp4_dtype out_dtype) {
  switch (out_dtype) {
  case FP4_DTYPE_BF16: return 0x1.0p-8;
  case FP4_DTYPE_F16: return 0x1.0p-11 + 1e-5;
  default: return 1e-5;
  }
}

float fp4h_global_scale(const float *x, int64_t n) {
  float a = 0.0f;
  for (int64_t i = 0; i < n; i++) a = fmaxf(a, fabsf(x[i]));
  return a > 0.0f ? 448.0f * 6.0f / a : 1.0f;
}

void fp4h_fail(fp4h_result *r, fp4_status st, const char *what) {
  r->status = st;
  r->passed = 0;
  snprintf(r->message, sizeof r->message, "%s: %s", what, fp4_last_error());
}

void fp4h_fill_nan(void *p, fp4_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t == FP4_DTYPE_F32) ((uint32_t *)p)[i] = 0x7FC00000u;
    else ((uint16_t *)p)[i] = t == FP4_DTYPE_BF16 ? 0x7FC0u : 0x7E00u;
  }
}

/* The reference value as the output dtype stores it (a sum beyond 65504 is inf in f16). */
static float in_dtype(float v, fp4_dtype t) {
  if (t == FP4_DTYPE_BF16) return fp4_bf16_to_f32(fp4_bf16_from_f32(v));
  if (t == FP4_DTYPE_F16) return fp4_f16_to_f32(fp4_f16_from_f32(v));
  return v;
}

/* A sum within 1e-3 of the output dtype's overflow threshold may land on either side of it: the
 * kernel sums in FP32 in another order than the double reference (relative differences up to about
 * K * 2^-24). Inf against the largest finite value, same sign, is then no error. */
static int at_overflow_edge(float ref, float got, fp4_dtype t) {
  const double edge = t == FP4_DTYPE_F16 ? 65520.0 : t == FP4_DTYPE_BF16 ? 3.3961775292e38 : INFINITY;
  const double r = fabs((double)ref);
  return isfinite(edge) && signbit(ref) == signbit(got) && r >= edge * (1.0 - 1e-3) && r <= edge * (1.0 + 1e-3) &&
         (isinf(got) || fabs((double)got) >= edge * (1.0 - 1e-3));
}

void fp4h_compare(const float *got, const float *ref, int64_t n, fp4_dtype out_dtype, fp4h_result *r) {
  double num = 0.0, den = 0.0;
  int64_t nonzero = 0, overflow_wrong = 0;
  r->nonfinite = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(got[i])) { /* NaN: an unwritten (NaN-prefilled) or invalid output */
      r->nonfinite++;
      continue;
    }
    const float want = in_dtype(ref[i], out_dtype);
    if (isinf(want) || isinf(got[i])) { /* overflow of the output dtype must match the reference's */
      overflow_wrong += got[i] != want && !at_overflow_edge(ref[i], got[i], out_dtype);
      continue;
    }
    nonzero += got[i] != 0.0f;
    double d = (double)got[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  r->nonfinite += overflow_wrong;
  r->rel_err = den > 0.0 ? sqrt(num / den) : sqrt(num);
  r->all_zero = nonzero == 0 && den > 0.0;
  r->passed = r->nonfinite == 0 && !r->all_zero && r->rel_err <= r->tolerance;
  if (r->nonfinite)
    snprintf(r->message, sizeof r->message, "%lld outputs are NaN (unwritten?) and %lld overflow differently from the reference",
             (long long)(r->nonfinite - overflow_wrong), (long long)overflow_wrong);
  else if (r->all_zero) snprintf(r->message, sizeof r->message, "all outputs are zero");
  else snprintf(r->message, sizeof r->message, "rel err %.3g (tolerance %.3g)", r->rel_err, r->tolerance);
}
