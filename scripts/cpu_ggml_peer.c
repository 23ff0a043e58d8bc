/*
 * Same-run ggml peer for the cpu backend's comparisons (bench/results/cpu): times ggml's NVFP4
 * MUL_MAT (weights NVFP4 [N, K], activations f32 [M, K], which ggml quantizes to 8 bits itself
 * on every call) on the CPU with a fixed thread pool, rotating the weights through enough copies
 * to exceed 3x the last-level cache, as `fp4kit bench` does. Built outside this repository
 * against a ggml checkout (nothing of ggml is part of fp4kit):
 *   cc -O2 -I<ggml>/include scripts/cpu_ggml_peer.c <ggml>/build/src/libggml.a \
 *      <ggml>/build/src/libggml-cpu.a <ggml>/build/src/libggml-base.a -lstdc++ -lm -fopenmp -o /tmp/ggml_peer
 * Run: /tmp/ggml_peer --shapes 4096x14336,28672x4096 --m 1,4,16 --threads 2 [--runs 20]
 *      [--warmup 3] [--llc-mib 32] [--csv FILE]
 * Prints one line per point and, with --csv, writes
 *   peer,isa,n,k,m,threads,copies,runs,median_ms,min_ms,weight_gbps
 * where weight GB/s counts the NVFP4 weight bytes (codes and scales, 0.5625 bytes per weight).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int parse_list(const char *s, int64_t *out, int max, int pairs) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    out[n++] = strtoll(s, &end, 10);
    if (pairs) {
      if (*end != 'x') return -1;
      out[n++] = strtoll(end + 1, &end, 10);
    }
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  int64_t shapes[64], ms[16];
  int nshapes = 0, nm = 0, threads = 2, runs = 20, warmup = 3;
  double llc_mib = 32;
  const char *csv = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--shapes")) nshapes = parse_list(argv[i + 1], shapes, 64, 1) / 2;
    else if (!strcmp(argv[i], "--m")) nm = parse_list(argv[i + 1], ms, 16, 0);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--llc-mib")) llc_mib = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--csv")) csv = argv[i + 1];
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (nshapes <= 0 || nm <= 0 || runs < 1) {
    fprintf(stderr, "usage: %s --shapes NxK[,...] --m M[,...] [--threads T] [--runs R] [--warmup W] [--llc-mib L] [--csv F]\n",
            argv[0]);
    return 2;
  }
  const char *isa = ggml_cpu_has_avx512() ? "avx512" : ggml_cpu_has_avx2() ? "avx2" : "other";
  FILE *fc = csv ? fopen(csv, "w") : NULL;
  if (fc) fprintf(fc, "peer,isa,n,k,m,threads,copies,runs,median_ms,min_ms,weight_gbps\n");
  struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  struct ggml_threadpool *tp = ggml_threadpool_new(&tpp);
  for (int s = 0; s < nshapes; s++) {
    const int64_t n = shapes[2 * s], k = shapes[2 * s + 1];
    const size_t wbytes = ggml_row_size(GGML_TYPE_NVFP4, k) * (size_t)n;
    const int copies = 1 + (int)(3.0 * llc_mib * 1048576.0 / (double)wbytes);
    struct ggml_init_params wp = {(size_t)copies * (wbytes + ggml_tensor_overhead()) + 4096, NULL, false};
    struct ggml_context *wctx = ggml_init(wp);
    struct ggml_tensor **w = malloc(sizeof *w * (size_t)copies);
    float *src = malloc(sizeof(float) * (size_t)(256 * k));
    for (int c = 0; c < copies; c++) w[c] = ggml_new_tensor_2d(wctx, GGML_TYPE_NVFP4, k, n);
    for (int64_t r0 = 0; r0 < n; r0 += 256) {
      const int64_t nr = n - r0 < 256 ? n - r0 : 256;
      for (int64_t i = 0; i < nr * k; i++) src[i] = frand();
      ggml_quantize_chunk(GGML_TYPE_NVFP4, src, (char *)w[0]->data + (size_t)r0 * ggml_row_size(GGML_TYPE_NVFP4, k), 0, nr,
                          k, NULL);
    }
    for (int c = 1; c < copies; c++) memcpy(w[c]->data, w[0]->data, wbytes);
    for (int mi = 0; mi < nm; mi++) {
      const int64_t m = ms[mi];
      /* activations, one output per copy (each graph has its own), graphs */
      struct ggml_init_params xp = {(size_t)(m * k) * 4 + (size_t)copies * ((size_t)(m * n) * 4 + ggml_graph_overhead() +
                                                                            2 * ggml_tensor_overhead()) + (1u << 20),
                                    NULL, false};
      struct ggml_context *xctx = ggml_init(xp);
      struct ggml_tensor *x = ggml_new_tensor_2d(xctx, GGML_TYPE_F32, k, m);
      for (int64_t i = 0; i < m * k; i++) ((float *)x->data)[i] = frand();
      struct ggml_cgraph **gf = malloc(sizeof *gf * (size_t)copies);
      struct ggml_cplan *plans = malloc(sizeof *plans * (size_t)copies);
      size_t work = 0;
      for (int c = 0; c < copies; c++) {
        gf[c] = ggml_new_graph(xctx);
        ggml_build_forward_expand(gf[c], ggml_mul_mat(xctx, w[c], x));
        plans[c] = ggml_graph_plan(gf[c], threads, tp);
        if (plans[c].work_size > work) work = plans[c].work_size;
      }
      uint8_t *wbuf = malloc(work + 64);
      for (int c = 0; c < copies; c++) plans[c].work_data = wbuf;
      double *t = malloc(sizeof(double) * (size_t)runs);
      int it = 0;
      for (int r = 0; r < warmup + runs; r++, it++) {
        const int c = it % copies;
        double t0 = now_s();
        if (ggml_graph_compute(gf[c], &plans[c]) != GGML_STATUS_SUCCESS) {
          fprintf(stderr, "ggml_graph_compute failed\n");
          return 1;
        }
        if (r >= warmup) t[r - warmup] = now_s() - t0;
      }
      qsort(t, (size_t)runs, sizeof *t, cmp_double);
      const double med = t[runs / 2], mn = t[0];
      printf("ggml %s N=%lld K=%lld M=%lld threads=%d copies=%d: median %.3f ms, min %.3f ms, %.2f GB/s weight\n", isa,
             (long long)n, (long long)k, (long long)m, threads, copies, med * 1e3, mn * 1e3, (double)wbytes / med * 1e-9);
      fflush(stdout);
      if (fc)
        fprintf(fc, "ggml,%s,%lld,%lld,%lld,%d,%d,%d,%.4f,%.4f,%.3f\n", isa, (long long)n, (long long)k, (long long)m, threads,
                copies, runs, med * 1e3, mn * 1e3, (double)wbytes / med * 1e-9);
      free(t), free(wbuf), free(plans), free(gf);
      ggml_free(xctx);
    }
    free(src), free(w);
    ggml_free(wctx);
  }
  ggml_threadpool_free(tp);
  if (fc) fclose(fc);
  return 0;
}
