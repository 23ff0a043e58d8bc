/*
 * Host cost of fp4kit's GPU calls: microseconds from call to return, on the decode shapes at M = 1,
 * for fp4_quantize, fp4_mm (W4A4) and fp4_mm_w4a16, each with alpha by value and as a device scalar,
 * through auto and through the named cuda backend. Calls are issued back to back in batches of 256
 * (well under the launch queue's depth, so the host never waits for the GPU) and the batch is then
 * drained; the median batch gives the host microseconds per call. This is a measurement, not a test.
 * Output: a table on stdout and, with a path argument, one JSON record per row.
 * Build (repository root, after a CUDA build into build):
 *   gcc -O2 -Iinclude scripts/host_cost.c -Lbuild -lfp4kit -L/usr/local/cuda/lib64 -lcudart \
 *       -Wl,-rpath,$PWD/build -o /tmp/host_cost
 * Run: /tmp/host_cost [json-path]
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4kit.h"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                             \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

enum { BATCH = 256, BATCHES = 21 };

typedef struct shape {
  long long n, k;
} shape;

/* Decode GEMMs of one Llama-3.3-70B TP1 layer and Qwen3.5's shared expert: N x K. */
static const shape shapes[] = {{4096, 4096}, {10240, 8192}, {8192, 28672}, {57344, 8192}};

typedef enum { OP_QUANTIZE, OP_W4A4, OP_W4A16 } op_kind;
static const char *const op_names[] = {"fp4_quantize", "fp4_mm", "fp4_mm_w4a16"};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  FILE *json = argc > 1 ? fopen(argv[1], "w") : NULL;
  if (argc > 1 && !json) {
    perror(argv[1]);
    return 1;
  }
  fp4_context *ctx = NULL;
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    fprintf(stderr, "context: %s\n", fp4_last_error());
    return 1;
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *d_scalar;
  const float one = 1.0f;
  CK(cudaMalloc((void **)&d_scalar, sizeof(float)));
  CK(cudaMemcpy(d_scalar, &one, sizeof one, cudaMemcpyHostToDevice));
  printf("%-14s %-7s %-6s %-13s %12s %12s\n", "call", "backend", "alpha", "N x K", "host us/call", "min batch");
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
    const long long n = shapes[si].n, k = shapes[si].k, m = 1;
    size_t w_scales = 0, a_scales = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, n, k, &w_scales);
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, m, k, &a_scales);
    void *w, *ws, *x, *aq, *as, *y;
    CK(cudaMalloc(&w, (size_t)(n * k / 2)));
    CK(cudaMalloc(&ws, w_scales));
    CK(cudaMalloc(&x, (size_t)(m * k * 2)));
    CK(cudaMalloc(&aq, (size_t)(m * k / 2)));
    CK(cudaMalloc(&as, a_scales));
    CK(cudaMalloc(&y, (size_t)(m * n * 2)));
    CK(cudaMemset(w, 0x35, (size_t)(n * k / 2)));
    CK(cudaMemset(ws, 0x38, w_scales));
    CK(cudaMemset(x, 0x3c, (size_t)(m * k * 2)));
    CK(cudaMemset(aq, 0x35, (size_t)(m * k / 2)));
    CK(cudaMemset(as, 0x38, a_scales));
    fp4_qmatrix wq = {w, ws, n, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
    fp4_qmatrix aqm = {aq, as, m, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
    fp4_matrix xm = {x, m, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_matrix ym = {y, m, n, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    for (int op = OP_QUANTIZE; op <= OP_W4A16; op++)
      for (int named = 0; named < 2; named++)
        for (int dev = 0; dev < 2; dev++) {
          fp4_options o = {.backend = named ? "cuda" : NULL, .stream = stream};
          if (dev && op == OP_QUANTIZE) o.global_scale_device = d_scalar;
          if (dev && op != OP_QUANTIZE) o.alpha_device = d_scalar;
          fp4_qmatrix qout = aqm;
          double per_batch[BATCHES];
          fp4_status st = FP4_OK;
          for (int b = -2; b < BATCHES && st == FP4_OK; b++) { /* two warm-up batches */
            const double t0 = now_us();
            for (int i = 0; i < BATCH && st == FP4_OK; i++) {
              if (op == OP_QUANTIZE) st = fp4_quantize(ctx, &xm, 1.0f, &qout, &o);
              else if (op == OP_W4A4) st = fp4_mm(ctx, &aqm, &wq, 1.0f, &ym, &o);
              else st = fp4_mm_w4a16(ctx, &xm, &wq, 1.0f, &ym, &o);
            }
            const double t1 = now_us();
            CK(cudaStreamSynchronize(stream));
            if (b >= 0) per_batch[b] = (t1 - t0) / BATCH;
          }
          char nk[32];
          snprintf(nk, sizeof nk, "%lldx%lld", n, k);
          if (st != FP4_OK) {
            printf("%-14s %-7s %-6s %-13s failed: %s\n", op_names[op], named ? "cuda" : "auto", dev ? "device" : "value",
                   nk, fp4_last_error());
            continue;
          }
          qsort(per_batch, BATCHES, sizeof *per_batch, cmp);
          printf("%-14s %-7s %-6s %-13s %12.2f %12.2f\n", op_names[op], named ? "cuda" : "auto", dev ? "device" : "value",
                 nk, per_batch[BATCHES / 2], per_batch[0]);
          if (json)
            fprintf(json,
                    "{\"call\": \"%s\", \"backend\": \"%s\", \"scalar\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
                    "\"host_us_median\": %.3f, \"host_us_min\": %.3f, \"batch\": %d, \"batches\": %d}\n",
                    op_names[op], named ? "cuda" : "auto", dev ? "device" : "value", m, n, k, per_batch[BATCHES / 2],
                    per_batch[0], BATCH, BATCHES);
        }
    cudaFree(w);
    cudaFree(ws);
    cudaFree(x);
    cudaFree(aq);
    cudaFree(as);
    cudaFree(y);
  }
  cudaFree(d_scalar);
  cudaStreamDestroy(stream);
  fp4_context_destroy(ctx);
  if (json) fclose(json);
  return 0;
}
