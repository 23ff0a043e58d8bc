/*
 * Timing driver for the cuda backend's small-M kernels (not the official `fp4kit bench`): for each
 * (N, K, M) it times W4A16 (bf16 activations, NVFP4 and MXFP4), W4A4 NVFP4 (GEMM alone and
 * quantize + GEMM) and, in the same run, cuBLAS BF16 on the same shape and the device-to-device copy
 * bandwidth. Median of 50 single-call timings after warm-up (fp4_time, CUDA events); weights rotate
 * through copies totalling more than 200 MB so no timing is served from L2.
 * Effective bandwidth counts the FP4 weight and scale bytes (0.5625 B per weight).
 * Every GEMM configuration of the backend that takes the M is timed side by side ("default" is the
 * backend's own choice); after each shape a line per (kernel, format, M) names the fastest. The W4A4
 * rows include the "small-m.pro.*" configs (activations dequantized to bf16 once per GEMM, then the
 * W4A16 kernel); for W4A4 a second line compares the best in-loop and the best prologue config with
 * the best W4A16 time of the same shape and M.
 * Usage: cuda_small_m_timing [csv-file] [--quick] [--shape NxK]...
 *   --quick: the shapes of >= 32 MB of FP4 weights, M in {1, 4, 16}
 *   --shape: time only these shapes (K a multiple of 128), e.g. --shape 57344x8192
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <utility>
#include <vector>

#include "fp4kit.h"
#include "fp4kit_bench.h"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
  } while (0)
#define FK(x)                                                                                   \
  do {                                                                                          \
    fp4_status s_ = (x);                                                                        \
    if (s_ != FP4_OK) { fprintf(stderr, "%s: %s\n", #x, fp4_last_error()); exit(1); }          \
  } while (0)

struct bench {
  fp4_context *ctx;
  cudaStream_t stream;
  cublasHandle_t blas;
  int64_t m, n, k;
  int copies;
  std::vector<void *> w, ws, wbf; /* rotated copies: FP4 weights, their scales, bf16 weights */
  void *x, *xq, *xqs, *out, *outbf;
  fp4_format format;
  const char *config; /* NULL: the backend's default */
  int mode; /* 0 W4A16, 1 W4A4 GEMM, 2 W4A4 quantize + GEMM, 3 cuBLAS BF16 */
};

static fp4_status call(void *user, int it) {
  bench *b = (bench *)user;
  int c = it % b->copies;
  fp4_options o = {};
  o.backend = "cuda";
  o.stream = b->stream;
  o.enable_pdl = 1;
  o.config = b->config;
  fp4_qmatrix w = {b->w[c], b->ws[c], b->n, b->k, b->format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  fp4_matrix x = {b->x, b->m, b->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  fp4_qmatrix xq = {b->xq, b->xqs, b->m, b->k, b->format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  fp4_matrix out = {b->out, b->m, b->n, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  switch (b->mode) {
  case 0: return fp4_mm_w4a16(b->ctx, &x, &w, 1.0f, &out, &o);
  case 1: return fp4_mm(b->ctx, &xq, &w, 1.0f, &out, &o);
  case 2: {
    fp4_options qo = o;
    qo.config = NULL; /* the quantize kernel has one configuration */
    fp4_status st = fp4_quantize(b->ctx, &x, 1.0f, &xq, &qo);
    return st ? st : fp4_mm(b->ctx, &xq, &w, 1.0f, &out, &o);
  }
  default: {
    const float one = 1.0f, zero = 0.0f;
    /* y[M,N] row-major = (W[N,K] row-major)^T-view: column-major C[N,M] = W^T(op T) * x^T */
    cublasStatus_t s = cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)b->n, (int)b->m, (int)b->k, &one, b->wbf[it % b->wbf.size()],
                                    CUDA_R_16BF, (int)b->k, b->x, CUDA_R_16BF, (int)b->k, &zero, b->outbf, CUDA_R_16BF,
                                    (int)b->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? FP4_OK : FP4_ERR_CUDA;
  }
  }
}

__global__ void fill_random(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    p[i] = (uint8_t)h;
  }
}

/* Scales: random E4M3 in [2^-3, 2^3) (never NaN), or UE8M0 near 127. */
__global__ void fill_scales(uint8_t *p, size_t n, int mx) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = mx ? (uint8_t)(124 + (i * 7) % 6) : (uint8_t)(0x20 + (i * 13) % 0x30);
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(((int)((i * 2654435761u) >> 20) % 200 - 100) * 0.01f);
}

/* The backend's GEMM configurations (cuda_backend.c), the largest M each takes, whether it is a
 * W4A4-only prologue config, the smallest K it takes and whether it needs thread block clusters
 * (the cluster K split, SM90+; the in-loop ones take bf16/f16 activations, W4A16 here). */
static const struct {
  const char *name;
  int64_t max_m;
  int pro;
  int64_t min_k;
  int cluster;
} configs[] = {{NULL, 64},
               {"small-m.w8", 64},
               {"small-m.w4", 64},
               {"small-m.w2", 64},
               {"small-m.r32.w8", 32},
               {"small-m.r32.w4", 32},
               {"small-m.r64.w8", 16},
               {"small-m.r64.w4", 16},
               {"small-m.w4.b8", 16},
               {"small-m.w4.b6", 16},
               {"small-m.r32.w4.b6", 8},
               {"small-m.pro.w8", 64, 1},
               {"small-m.pro.w4", 64, 1},
               {"small-m.pro.w2", 64, 1},
               {"small-m.pro.r32.w8", 32, 1},
               {"small-m.pro.r32.w4", 32, 1},
               {"small-m.pro.r64.w8", 16, 1},
               {"small-m.pro.r64.w4", 16, 1},
               {"small-m.pro.w4.b8", 16, 1},
               {"small-m.pro.w4.b6", 16, 1},
               {"small-m.pro.r32.w4.b6", 8, 1},
               {"small-m.w8.k2", 16, 0, 2048, 1},
               {"small-m.w8.k4", 16, 0, 4096, 1},
               {"small-m.w4.k2", 16, 0, 1024, 1},
               {"small-m.w4.k4", 16, 0, 2048, 1},
               {"small-m.pro.w8.k2", 16, 1, 2048, 1},
               {"small-m.pro.w8.k4", 16, 1, 4096, 1},
               {"small-m.pro.w4.k2", 16, 1, 1024, 1},
               {"small-m.pro.w4.k4", 16, 1, 2048, 1}};

int main(int argc, char **argv) {
  int quick = 0;
  std::vector<std::pair<int64_t, int64_t>> only; /* --shape */
  const char *csv_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
      long long n = 0, k = 0;
      if (sscanf(argv[++i], "%lldx%lld", &n, &k) != 2 || n < 1 || k < 128 || k % 128) {
        fprintf(stderr, "--shape %s: use NxK with N >= 1 and K a multiple of 128\n", argv[i]);
        return 2;
      }
      only.push_back({(int64_t)n, (int64_t)k});
    }
    else csv_path = argv[i];
  }
  FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
  fp4_context *ctx;
  FK(fp4_context_create(&ctx, 0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  cublasCreate(&blas);
  cublasSetStream(blas, stream);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));

  /* Same-run copy bandwidth: 1 GiB device-to-device, bytes read + written. */
  const size_t cbytes = (size_t)1 << 30;
  void *c0, *c1;
  CK(cudaMalloc(&c0, cbytes));
  CK(cudaMalloc(&c1, cbytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int i = 0; i < 12; i++) {
    cudaEventRecord(e0, stream);
    cudaMemcpyAsync(c1, c0, cbytes, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 2 && ms < best) best = ms;
  }
  const double copy_bw = 2.0 * cbytes / (best * 1e-3);
  cudaFree(c0);
  cudaFree(c1);
  printf("device %s, %d SMs; copy bandwidth (read+write) %.0f GB/s\n", prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  if (csv) fprintf(csv, "kernel,format,config,m,n,k,median_us,weight_GBps,pct_copy,cublas_bf16_us,speedup_vs_cublas\n");

  static const int64_t shapes[][2] = {{57344, 8192}, {8192, 28672}, {10240, 8192}, {8192, 8192}, {20480, 4096},
                                      {31040, 4096}, {4096, 4096}, {2048, 4096}, {4096, 1024}, {4096, 128}};
  static const int64_t ms_all[] = {1, 4, 16, 32, 64}, ms_quick[] = {1, 4, 16};
  const int64_t *ms = quick ? ms_quick : ms_all;
  const int n_ms = quick ? 3 : 5;
  std::vector<std::pair<int64_t, int64_t>> todo = only;
  for (int i = 0; only.empty() && i < (quick ? 6 : (int)(sizeof shapes / sizeof *shapes)); i++)
    todo.push_back({shapes[i][0], shapes[i][1]});
  const int n_shapes = (int)todo.size();
  static const char *modes[] = {"w4a16-bf16", "w4a4", "w4a4+quant", "cublas-bf16"};
  printf("%-12s %-6s %-21s %3s %6s %6s %10s %9s %7s %10s %8s\n", "kernel", "fmt", "config", "M", "N", "K", "median_us",
         "GB/s", "%copy", "cublas_us", "x_cublas");
  std::vector<std::string> best_lines;
  for (int si = 0; si < n_shapes; si++) {
    const int64_t sh[2] = {todo[si].first, todo[si].second};
    bench b = {};
    b.ctx = ctx;
    b.stream = stream;
    b.blas = blas;
    b.n = sh[0];
    b.k = sh[1];
    const size_t wbytes = (size_t)(b.n * b.k / 2);
    size_t sbytes = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, b.n, b.k, &sbytes);
    const double fp4_bytes = (double)wbytes + (double)(b.n * b.k / 16);
    b.copies = (int)((200e6 + wbytes - 1) / wbytes);
    if (b.copies > 64) b.copies = 64;
    for (int c = 0; c < b.copies; c++) {
      void *w, *s;
      CK(cudaMalloc(&w, wbytes));
      CK(cudaMalloc(&s, sbytes));
      fill_random<<<1024, 256, 0, stream>>>((uint8_t *)w, wbytes, 17u * c + 1);
      b.w.push_back(w);
      b.ws.push_back(s);
    }
    const size_t bfbytes = (size_t)(b.n * b.k) * 2;
    const int bf_copies = (int)((200e6 + bfbytes - 1) / bfbytes);
    for (int c = 0; c < bf_copies; c++) {
      void *wbf;
      CK(cudaMalloc(&wbf, bfbytes));
      fill_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)wbf, (size_t)(b.n * b.k));
      b.wbf.push_back(wbf);
    }
    CK(cudaMalloc(&b.x, (size_t)(64 * b.k) * 2));
    fill_bf16<<<256, 256, 0, stream>>>((__nv_bfloat16 *)b.x, (size_t)(64 * b.k));
    CK(cudaMalloc(&b.xq, (size_t)(64 * b.k) / 2));
    fill_random<<<64, 256, 0, stream>>>((uint8_t *)b.xq, (size_t)(64 * b.k) / 2, 99u);
    size_t xs = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 64, b.k, &xs);
    CK(cudaMalloc(&b.xqs, xs));
    CK(cudaMalloc(&b.out, (size_t)(64 * b.n) * 4));
    CK(cudaMalloc(&b.outbf, (size_t)(64 * b.n) * 2));
    for (int fmt = 0; fmt < 2; fmt++) {
      for (int c = 0; c < b.copies; c++) fill_scales<<<256, 256, 0, stream>>>((uint8_t *)b.ws[c], sbytes, fmt);
      fill_scales<<<64, 256, 0, stream>>>((uint8_t *)b.xqs, xs, fmt);
      CK(cudaStreamSynchronize(stream));
      b.format = (fp4_format)fmt;
      for (int mi = 0; mi < n_ms; mi++) {
        const int64_t m = ms[mi];
        b.m = m;
        fp4_timing tc = {};
        b.mode = 3;
        b.config = NULL;
        FK(fp4_time(ctx, stream, call, &b, 5, 50, &tc));
        double w4a16_best_us = 0;
        for (int mode = 0; mode < 3; mode++) {
          if (fmt == 1 && mode == 2) continue; /* MXFP4: W4A16 and W4A4 GEMM only */
          b.mode = mode;
          double best_us = 1e30, default_us = 0, loop_us = 1e30, pro_us = 1e30;
          const char *best_name = "default", *loop_name = "default", *pro_name = "-";
          for (const auto &cf : configs) {
            if (m > cf.max_m || (cf.pro && mode == 0)) continue; /* the prologue configs take W4A4 only */
            if (b.k < cf.min_k || (cf.cluster && (prop.major < 9 || (!cf.pro && mode != 0)))) continue;
            b.config = cf.name;
            fp4_timing t = {};
            FK(fp4_time(ctx, stream, call, &b, 5, 50, &t));
            const double bw = (fmt ? (double)wbytes + (double)(b.n * b.k / 32) : fp4_bytes) / (t.median_us * 1e-6);
            const char *cname = cf.name ? cf.name : "default";
            printf("%-12s %-6s %-21s %3lld %6lld %6lld %10.2f %9.0f %6.1f%% %10.2f %8.2f\n", modes[mode],
                   fmt ? "mxfp4" : "nvfp4", cname, (long long)m, (long long)b.n, (long long)b.k, t.median_us, bw / 1e9,
                   100.0 * bw / copy_bw, tc.median_us, tc.median_us / t.median_us);
            if (csv)
              fprintf(csv, "%s,%s,%s,%lld,%lld,%lld,%.3f,%.1f,%.2f,%.3f,%.3f\n", modes[mode], fmt ? "mxfp4" : "nvfp4",
                      cname, (long long)m, (long long)b.n, (long long)b.k, t.median_us, bw / 1e9, 100.0 * bw / copy_bw,
                      tc.median_us, tc.median_us / t.median_us);
            if (!cf.name) default_us = t.median_us;
            if (t.median_us < best_us) {
              best_us = t.median_us;
              best_name = cname;
            }
            if (cf.pro && t.median_us < pro_us) {
              pro_us = t.median_us;
              pro_name = cname;
            }
            if (!cf.pro && t.median_us < loop_us) {
              loop_us = t.median_us;
              loop_name = cname;
            }
          }
          if (mode == 0) w4a16_best_us = best_us;
          const double best_bw = (fmt ? (double)wbytes + (double)(b.n * b.k / 32) : fp4_bytes) / (best_us * 1e-6);
          char line[320];
          snprintf(line, sizeof line, "fastest %-12s %-6s M=%-3lld N=%-6lld K=%-6lld %-14s %9.2f us %6.0f GB/s %5.1f%% copy %5.2fx cuBLAS %5.2fx default",
                   modes[mode], fmt ? "mxfp4" : "nvfp4", (long long)m, (long long)b.n, (long long)b.k, best_name, best_us,
                   best_bw / 1e9, 100.0 * best_bw / copy_bw, tc.median_us / best_us, default_us / best_us);
          best_lines.push_back(line);
          if (mode > 0) { /* W4A4: in-loop decode vs prologue, against the W4A16 floor */
            snprintf(line, sizeof line,
                     "  %-12s %-6s M=%-3lld N=%-6lld K=%-6lld in-loop %-18s %9.2f us | prologue %-21s %9.2f us | "
                     "w4a16 best %9.2f us | prologue/w4a16 %5.2f",
                     modes[mode], fmt ? "mxfp4" : "nvfp4", (long long)m, (long long)b.n, (long long)b.k, loop_name,
                     loop_us, pro_name, pro_us, w4a16_best_us, pro_us / w4a16_best_us);
            best_lines.push_back(line);
          }
        }
      }
    }
    fflush(stdout);
    for (int c = 0; c < b.copies; c++) {
      cudaFree(b.w[c]);
      cudaFree(b.ws[c]);
    }
    for (void *p : b.wbf) cudaFree(p);
    cudaFree(b.x);
    cudaFree(b.xq);
    cudaFree(b.xqs);
    cudaFree(b.out);
    cudaFree(b.outbf);
  }
  printf("\n==== fastest configuration per (kernel, format, shape, M) ====\n");
  for (const auto &l : best_lines) printf("%s\n", l.c_str());
  if (csv) fclose(csv);
  fp4_context_destroy(ctx);
  return 0;
}
