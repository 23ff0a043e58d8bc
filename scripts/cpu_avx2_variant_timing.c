/*
 * In-cache rate of a variant of the AVX2 streaming kernel at M = 1, with its outputs checked.
 *
 * A variant is an edited copy of src/backends/cpu/kernels_avx2.c that also defines
 *   static void var_probe(const uint8_t *w, float *out)
 * decoding the 64 weight bytes of one 128-weight chunk into out[128] in the order its products
 * read A (the kernel's packed order). The harness learns that order by probing (one element set
 * to 1.0 at a time), packs A in it, checks every output against double sums of the exact products
 * (max relative difference), and prints the best of 9 batches of REPS calls of gemv_f32 (one
 * thread, NVFP4 128x4 scales) as weights/s and cycles per 128 weights at GHZ. -DDEFAULT_PROBE
 * supplies var_probe() for a variant that keeps decode32_words() and map_vectors() (the file as it
 * is, too); -DNOPROBE packs A in the identity order, for timing-only variants whose decode is
 * deliberately wrong.
 *
 * Build (against the objects of a Release build tree B, e.g. build-cpu):
 *   gcc -O3 -std=c11 -D_GNU_SOURCE -DVARIANT='"/path/variant.c"' -DVARNAME='"name"' -Isrc -Iinclude -IB \
 *       scripts/cpu_avx2_variant_timing.c $(find B/CMakeFiles/fp4kit_objects.dir -name '*.o') \
 *       B/CMakeFiles/fp4kit_cjson.dir/.deps/cjson-src/cJSON.c.o -lm -lpthread -ldl -o /tmp/variant
 * Run: /tmp/variant N K REPS [GHZ]   (N x K weights: 16 x 1024 stays in L1, 64 x 4096 in L2)
 * Prints: name,N,K,us,G weights/s,cycles per 128 weights,max relative difference
 * Used for bench/results/cpu/2026-12-04-avx2-m1-op-bound/.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define fp4_cpu_kernels_avx2 variant_kernels
#include VARIANT

#ifdef DEFAULT_PROBE /* a variant that keeps decode32_words() and map_vectors() */
T2 static void var_probe(const uint8_t *w, float *out) {
  const lut2 t = lut2_make();
  for (int h = 0; h < 2; h++) {
    __m256i words[4];
    decode32_words(&t, w + 32 * h, words);
    for (int m = 0; m < 2; m++) {
      __m256 v[4];
      map_vectors(&t, words[2 * m], words[2 * m + 1], v);
      for (int q = 0; q < 4; q++) _mm256_storeu_ps(out + 64 * h + 32 * m + 8 * q, v[q]);
    }
  }
}
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s N K REPS [GHZ]\n", argv[0]);
    return 2;
  }
  const int64_t n = atoll(argv[1]), k = atoll(argv[2]);
  const int reps = atoi(argv[3]);
  const double ghz = argc > 4 ? atof(argv[4]) : 4.2;
  if (n < 1 || k < 128 || k % 128 || reps < 1) {
    fprintf(stderr, "N >= 1, K a multiple of 128, REPS >= 1\n");
    return 2;
  }
  const int64_t c = k / 16, cp = (c + 3) / 4 * 4;
  const size_t sb = (size_t)((n + 127) / 128 * 128 * cp);
  uint8_t *w = aligned_alloc(64, (size_t)(n * k / 2)), *s = aligned_alloc(64, (sb + 63) / 64 * 64);
  float *a = aligned_alloc(64, sizeof(float) * (size_t)k), *an = malloc(sizeof(float) * (size_t)k);
  float *o = malloc(sizeof(float) * (size_t)n);
  double *ref = malloc(sizeof(double) * (size_t)n);
  if (!w || !s || !a || !an || !o || !ref) return 1;
  for (int64_t i = 0; i < n * k / 2; i++) w[i] = (uint8_t)rnd();
  for (size_t i = 0; i < sb; i++) s[i] = (uint8_t)(8 + rnd() % 0x77); /* normal E4M3, no NaN */
  for (int64_t i = 0; i < k; i++) { /* bf16 values in [0.5, 1) with random signs */
    uint32_t b = ((rnd() & 0x807FFFu) | 0x3F000000u) & 0xFFFF0000u;
    memcpy(&an[i], &b, 4);
  }
  int src_of[128];
#ifdef NOPROBE
  for (int p = 0; p < 128; p++) src_of[p] = p;
#else
  for (int e = 0; e < 128; e++) {
    uint8_t wb[64] = {0};
    float dv[128];
    wb[e / 2] = (uint8_t)(e & 1 ? 0x20 : 0x02); /* code 2 = 1.0 */
    var_probe(wb, dv);
    int hit = -1, cnt = 0;
    for (int p = 0; p < 128; p++)
      if (dv[p] != 0) hit = p, cnt++;
    if (cnt != 1 || dv[hit] != 1.0f) {
      printf("probe: element %d decodes to %d positions\n", e, cnt);
      return 1;
    }
    src_of[hit] = e;
  }
#endif
  for (int64_t i = 0; i < k; i++) a[i] = an[(i & ~(int64_t)127) + src_of[i & 127]];
  fp4_matrix om = {o, 1, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_cpu_gemm g = {.a = a, .kp = k, .lda = k, .b = w, .bs = s, .m = 1, .n = n, .k = k, .c = c, .gstride = 512,
                    .layout = FP4_LAYOUT_128X4, .mx = 0, .scale = 1.0f, .out = &om};
  for (int64_t r = 0; r < n; r++) {
    double acc = 0;
    for (int64_t kk = 0; kk < k; kk++) {
      const uint8_t b = w[r * k / 2 + kk / 2];
      acc += (double)fp4_cpu_scale_value(&g, r, kk / 16) * fp4_e2m1_decode_inline(kk & 1 ? b >> 4 : b & 15) * an[kk];
    }
    ref[r] = acc;
  }
  for (int64_t r = 0; r < n; r++) o[r] = NAN;
  variant_kernels()->gemv_f32(&g, 0, 1, 0, n);
  double maxrel = 0;
  for (int64_t r = 0; r < n; r++) {
    const double d = fabs((double)o[r] - ref[r]) / (fabs(ref[r]) + 1e-30);
    if (isnan(d) || d > maxrel) maxrel = d; /* a NaN output stays NaN */
  }
  double best = 1e9;
  for (int b = 0; b < 9; b++) {
    const double t0 = now();
    for (int i = 0; i < reps; i++) variant_kernels()->gemv_f32(&g, 0, 1, 0, n);
    const double t = (now() - t0) / reps;
    if (t < best) best = t;
  }
  printf("%s,%lld,%lld,%.3f,%.2f,%.2f,%.2g\n", VARNAME, (long long)n, (long long)k, best * 1e6, n * k / best / 1e9,
         best * ghz * 1e9 / (n * k / 128.0), maxrel);
  return 0;
}
