/*
 * Timing driver for the cpu backend until `fp4kit bench --backend cpu` exists: times fp4_mm_w4a16
 * (bf16 activations) and fp4_mm (W4A4) with fp4_time, next to two same-run peers measured here:
 *   - host read bandwidth: a plain C reduction with the same thread count over n*k bytes (the
 *     FP4_PEER_HOST_READ definition) and over the weight bytes themselves;
 *   - FMA peak: independent AVX-512 FMA chains on every thread.
 * Build (from the repository root, after building build-nocuda):
 *   cc -O3 -march=native -fopenmp -Iinclude scripts/cpu_timing.c build-nocuda/libfp4kit_bench.a build-nocuda/libfp4kit.a -lcjson -lpthread -ldl -lm -o /tmp/cpu_timing
 * Run: FP4KIT_NUM_THREADS=2 OMP_NUM_THREADS=2 /tmp/cpu_timing
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "fp4kit_bench.h"

typedef struct job {
  int op; /* 0 w4a16 bf16, 1 w4a4 */
  fp4_matrix a;
  fp4_qmatrix aq, b;
  fp4_matrix out;
} job;

static fp4_status call(void *user, int it) {
  (void)it;
  job *j = user;
  fp4_options o = {.backend = "cpu"};
  return j->op ? fp4_mm(NULL, &j->aq, &j->b, 1.0f, &j->out, &o) : fp4_mm_w4a16(NULL, &j->a, &j->b, 1.0f, &j->out, &o);
}

static volatile uint64_t sink;
typedef struct rd { const uint64_t *p; size_t n; } rd;
static fp4_status read_all(void *user, int it) {
  (void)it;
  rd *r = user;
  uint64_t s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (size_t i = 0; i < r->n; i++) s += r->p[i];
  sink = s;
  return FP4_OK;
}

static double fma_peak_gflops(void) {
  const long iters = 20000000;
  double t0 = omp_get_wtime();
#pragma omp parallel
  {
    __m512 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++)
      for (int j = 0; j < 12; j++) a[j] = _mm512_fmadd_ps(a[j], x, y);
    float f[16];
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    _mm512_storeu_ps(f, s);
    sink += (uint64_t)f[0];
  }
  double t = omp_get_wtime() - t0;
  return (double)iters * 12 * 16 * 2 * omp_get_max_threads() / t * 1e-9;
}

static double read_gbs(size_t bytes, int runs) {
  uint64_t *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  memset(buf, 1, bytes);
  rd r = {buf, bytes / 8};
  fp4_timing t;
  fp4_time(NULL, NULL, read_all, &r, 3, runs, &t);
  free(buf);
  return (double)bytes / t.median_us * 1e-3;
}

int main(int argc, char **argv) {
  int threads = fp4_cpu_threads();
  printf("threads %d; kernels:", threads);
  for (int i = 0; fp4_cpu_kernel_name(i); i++) printf(" %s=%s", fp4_cpu_kernel_name(i), fp4_cpu_level(fp4_cpu_kernel_name(i)));
  double peak = fma_peak_gflops();
  printf("\nsame-run FMA peak (AVX-512 f32, %d threads): %.1f GFLOP/s\n", omp_get_max_threads(), peak);
  static const int64_t shapes[][3] = {{1, 4096, 4096},  {1, 14336, 4096}, {1, 28672, 4096}, {1, 28672, 8192},
                                      {4, 28672, 4096}, {64, 4096, 4096}, {64, 4096, 14336}, {512, 4096, 14336}};
  int only = argc > 1 ? atoi(argv[1]) : -1;
  printf("| op | M | N | K | median ms | weight GB/s | read GB/s (n*k B) | ratio | read GB/s (weight B) | GFLOP/s | %% of FMA peak |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    if (only >= 0 && (int)s != only) continue;
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    size_t sb = 0, sa = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, N, K, &sb);
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, M, K, &sa);
    uint8_t *bd = malloc((size_t)(N * K / 2)), *bs = malloc(sb), *ad = malloc((size_t)(M * K / 2)), *as = malloc(sa);
    uint16_t *a = malloc((size_t)(M * K) * 2), *out = malloc((size_t)(M * N) * 2);
    for (int64_t i = 0; i < N * K / 2; i++) bd[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t i = 0; i < sb; i++) bs[i] = (uint8_t)(0x30 + (i * 7 % 16));
    for (int64_t i = 0; i < M * K / 2; i++) ad[i] = (uint8_t)(i * 40503u >> 5);
    for (size_t i = 0; i < sa; i++) as[i] = (uint8_t)(0x30 + (i * 5 % 16));
    for (int64_t i = 0; i < M * K; i++) a[i] = fp4_bf16_from_f32((float)((i * 37 % 101) - 50) * 0.01f);
    size_t wbytes = (size_t)(N * K / 2) + sb;
    double rd_nk = read_gbs((size_t)(N * K), 10), rd_w = read_gbs(wbytes, 10);
    for (int op = 0; op < 2; op++) {
      job j = {op, {a, M, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST},
               {ad, as, M, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST},
               {bd, bs, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST},
               {out, M, N, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST}};
      fp4_timing t;
      int runs = M >= 64 ? 5 : 20;
      if (fp4_time(NULL, NULL, call, &j, 2, runs, &t)) {
        printf("failed: %s\n", fp4_last_error());
        return 1;
      }
      double gbs = (double)wbytes / t.median_us * 1e-3, gf = 2.0 * (double)(M * N * K) / t.median_us * 1e-3;
      printf("| %s | %lld | %lld | %lld | %.3f | %.1f | %.1f | %.2f | %.1f | %.1f | %.0f%% |\n", op ? "w4a4" : "w4a16 bf16",
             (long long)M, (long long)N, (long long)K, t.median_us * 1e-3, gbs, rd_nk, gbs / rd_nk, rd_w, gf, 100.0 * gf / peak);
      fflush(stdout);
    }
    free(bd), free(bs), free(ad), free(as), free(a), free(out);
  }
  return 0;
}
