#define _POSIX_C_SOURCE 200809L
/*
 * In-cache timing of one W4A16 GEMM shape on the cpu backend through the public API: the best of
 * `reps` calls of fp4_mm_w4a16 on weights small enough to stay in cache (weights quantized by the
 * ref backend, f32 output), at the level a cpu config names (default, generic, avx2, avx512, neon;
 * threads from FP4KIT_NUM_THREADS). Optionally writes the f32 outputs to a file, to compare two
 * builds bit for bit (bench/results/cpu/2026-12-04-avx2-m4-m16/). Build against a build tree:
 *   cc -O2 -Iinclude scripts/cpu_in_cache_timing.c -o /tmp/cpu_in_cache -L<build> -lfp4kit -lm -Wl,-rpath,<build>
 * Run: /tmp/cpu_in_cache CONFIG M N K REPS FORMAT(nvfp4|mxfp4) LAYOUT(linear|128x4|8x4) ACT(f32|bf16)
 *        [OUTFILE [DATA]]   DATA 1: NaN / inf activations and a NaN block scale
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4kit.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t g_state = 88172645463325252ull;
static double uniform(void) { /* xorshift64: the same data in every build */
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return (double)(g_state >> 11) / 9007199254740992.0;
}

static int usage(void) {
  fprintf(stderr, "usage: cpu_in_cache CONFIG M N K REPS nvfp4|mxfp4 linear|128x4|8x4 f32|bf16 [OUTFILE [DATA]]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 9) return usage();
  const char *config = strcmp(argv[1], "default") ? argv[1] : NULL;
  const int64_t M = atoll(argv[2]), N = atoll(argv[3]), K = atoll(argv[4]);
  const int reps = atoi(argv[5]), bf16 = !strcmp(argv[8], "bf16"), data = argc > 10 ? atoi(argv[10]) : 0;
  const fp4_format f = !strcmp(argv[6], "mxfp4") ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
  const fp4_scale_layout L = !strcmp(argv[7], "128x4") ? FP4_LAYOUT_128X4
                             : !strcmp(argv[7], "8x4") ? FP4_LAYOUT_8X4
                                                       : FP4_LAYOUT_LINEAR;
  const char *outfile = argc > 9 ? argv[9] : NULL;
  if (M < 1 || N < 1 || K < 1 || reps < 1) return usage();
  size_t sb = 0;
  if (fp4_scales_size(f, L, N, K, &sb)) {
    fprintf(stderr, "cpu_in_cache: %s\n", fp4_last_error());
    return 2;
  }
  float *a = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
  float *o = malloc(sizeof(float) * (size_t)(M * N));
  uint16_t *ab = malloc(sizeof(uint16_t) * (size_t)(M * K));
  uint8_t *codes = malloc((size_t)(N * K / 2)), *scales = malloc(sb);
  int rc = 1;
  if (!a || !w || !o || !ab || !codes || !scales) {
    fprintf(stderr, "cpu_in_cache: out of memory\n");
    goto done;
  }
  for (int64_t i = 0; i < M * K; i++) a[i] = (float)((uniform() * 2 - 1) * (uniform() < 0.1 ? 100 : 1));
  if (data == 1) {
    a[0] = NAN;
    if (M * K > 200) a[150] = INFINITY, a[M * K - 1] = -INFINITY;
  }
  for (int64_t i = 0; i < N * K; i++) w[i] = (float)((uniform() * 2 - 1) * (double)(1 + (i / 16) % 7));
  fp4_convert(a, FP4_DTYPE_F32, ab, FP4_DTYPE_BF16, (size_t)(M * K));
  fp4_matrix am = {bf16 ? (void *)ab : (void *)a, M, K, 0, bf16 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_matrix wm = {w, N, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, om = {o, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix qb = {codes, scales, N, K, f, L, 1.0f, FP4_MEMORY_HOST};
  const fp4_options ro = {.backend = "ref"}, co = {.backend = "cpu", .config = config};
  if (fp4_quantize(NULL, &wm, 20.0f, &qb, &ro)) {
    fprintf(stderr, "cpu_in_cache: quantize: %s\n", fp4_last_error());
    goto done;
  }
  if (data == 1 && sb > 3) scales[1] = f == FP4_FORMAT_MXFP4 ? 0xFF : 0x7F;
  double best = INFINITY;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_s();
    if (fp4_mm_w4a16(NULL, &am, &qb, 1.5f, &om, &co)) {
      fprintf(stderr, "cpu_in_cache: fp4_mm_w4a16: %s\n", fp4_last_error());
      goto done;
    }
    const double t = now_s() - t0;
    if (t < best) best = t;
  }
  printf("M=%lld N=%lld K=%lld best %.3f ms  %.2f Gprod/s\n", (long long)M, (long long)N, (long long)K, best * 1e3,
         (double)(M * N * K) / best * 1e-9);
  rc = 0;
  if (outfile) {
    FILE *fp = fopen(outfile, "wb");
    const int written = fp && fwrite(o, sizeof(float), (size_t)(M * N), fp) == (size_t)(M * N);
    if (fp && fclose(fp)) fp = NULL;
    if (!written || !fp) {
      fprintf(stderr, "cpu_in_cache: cannot write %s\n", outfile);
      rc = 1;
    }
  }
done:
  free(a), free(w), free(o), free(ab), free(codes), free(scales);
  return rc;
}
