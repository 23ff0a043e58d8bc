/*
 * Timing driver for the cuda backend's large-M GEMMs (not the official `fp4kit bench`): on the dense
 * shapes of Qwen3.5-397B and Llama-3.3-70B (TP1) and M = 16 .. 8192 it times, in one run,
 *   - every small-M config (M <= 64 only) and every large-M config, W4A16 NVFP4 with bf16 activations,
 *     and reports the best of each family: the M where large-M overtakes small-M is the crossover
 *     the default heuristic (FP4_CUDA_LARGE_M_FROM) must use;
 *   - the default choice (config NULL) to check the heuristic against the best config;
 *   - W4A4 NVFP4 (GEMM alone) with the best W4A16 large-M config, the decoded-tile 128x128.s3 (main-loop
 *     decode of the activations) and the register-decode prologue configs (each printed, fastest
 *     kept), W4A16 MXFP4 with the best W4A16 large-M config;
 *   - per point, the best register-decode ("large-m.rd.*") config against the best decoded-tile
 *     mma.sync config, and the best register-A wgmma ("large-m.wgra.*", SM90) config against the
 *     best mma.sync config of either kind;
 *   - cuBLAS BF16 on the same shape (the same-run peer; cuBLASLt FP8 is left to `fp4kit bench`).
 * Median of `runs` single-call timings after warm-up (fp4_time, CUDA events); weights rotate through
 * copies totalling more than 200 MB so no small-M timing is served from L2.
 * Usage: cuda_large_m_timing [csv-file] [runs]     (stdout: a table, then a summary)
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fp4kit.h"
#include "fp4kit_bench.h"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
  } while (0)

struct shape {
  const char *name;
  int64_t n, k;
};

static const shape kShapes[] = {
    {"qwen3.5 deltanet in_proj_qkvz", 20480, 4096}, {"qwen3.5 attn qkv_proj", 17408, 4096},
    {"qwen3.5 out_proj / o_proj", 4096, 8192},      {"qwen3.5 shared gate_up", 2048, 4096},
    {"llama70b qkv", 10240, 8192},                  {"llama70b o", 8192, 8192},
    {"llama70b gate_up", 57344, 8192},              {"llama70b down", 8192, 28672},
};
static const int64_t kMs[] = {16, 32, 48, 64, 65, 128, 256, 512, 1024, 2048, 4096, 8192};
static const char *const kSmall[] = {"small-m.w8", "small-m.w4", "small-m.w2", "small-m.r32.w8", "small-m.r32.w4"};
static const char *const kLarge[] = {"large-m.128x128.s4",  "large-m.128x128.s3",  "large-m.128x256.s3",
                                     "large-m.64x128.s4",   "large-m.rd.128x128",  "large-m.rd.128x256",
                                     "large-m.rd.256x128",  "large-m.wgra.128x32", "large-m.wgra.128x64",
                                     "large-m.wgra.128x128", "large-m.wgra.128x256"};
/* W4A4 is timed on the best W4A16 config (when it takes W4A4), on the decoded-tile mma.sync tile
 * that decodes the FP4 activations in its main loop, and on the prologue configs (activations
 * dequantized to bf16 once per GEMM, then the W4A16 register-decode tile), keeping the fastest and
 * printing each, which answers whether the main loop or the prologue is faster. */
static const char *const kW4A4Extra[] = {"large-m.128x128.s3",       "large-m.rd.pro.128x128",  "large-m.rd.pro.128x256",
                                         "large-m.wgra.pro.128x128", "large-m.wgra.pro.128x256"};

enum mode { W4A16_NV, W4A4_NV, W4A16_MX, CUBLAS_BF16 };

struct bench {
  fp4_context *ctx;
  cudaStream_t stream;
  cublasHandle_t blas;
  int64_t m, n, k;
  std::vector<void *> w, ws_nv, ws_mx, wbf;
  void *x, *xq, *xqs, *out;
  mode md;
  const char *config;
  fp4_run_info info;
};

static fp4_status call(void *user, int it) {
  bench *b = (bench *)user;
  const int c = it % (int)b->w.size();
  fp4_options o = {};
  o.backend = "cuda";
  o.config = b->config;
  o.stream = b->stream;
  o.enable_pdl = 1;
  o.info = &b->info;
  const fp4_format f = b->md == W4A16_MX ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
  fp4_qmatrix w = {b->w[c], f == FP4_FORMAT_NVFP4 ? b->ws_nv[c] : b->ws_mx[c], b->n, b->k, f, FP4_LAYOUT_128X4, 1.0f,
                   FP4_MEMORY_DEVICE};
  fp4_matrix x = {b->x, b->m, b->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  fp4_qmatrix xq = {b->xq, b->xqs, b->m, b->k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  fp4_matrix out = {b->out, b->m, b->n, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  switch (b->md) {
  case W4A16_NV:
  case W4A16_MX: return fp4_mm_w4a16(b->ctx, &x, &w, 1.0f, &out, &o);
  case W4A4_NV: return fp4_mm(b->ctx, &xq, &w, 1.0f, &out, &o);
  default: {
    const float one = 1.0f, zero = 0.0f;
    /* row-major y[M,N] = x[M,K] W[N,K]^T as column-major C[N,M] = W^T(op T) x^T */
    cublasStatus_t s = cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)b->n, (int)b->m, (int)b->k, &one,
                                    b->wbf[it % b->wbf.size()], CUDA_R_16BF, (int)b->k, b->x, CUDA_R_16BF, (int)b->k,
                                    &zero, b->out, CUDA_R_16BF, (int)b->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
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

/* Scales: E4M3 in [2^-3, 2^3) (never NaN), or UE8M0 near 127. */
__global__ void fill_scales(uint8_t *p, size_t n, int mx) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = mx ? (uint8_t)(124 + (i * 7) % 6) : (uint8_t)(0x20 + (i * 13) % 0x30);
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(((int)((i * 2654435761u) >> 20) % 200 - 100) * 0.01f);
}

/* Median time of one (mode, config), or a negative value when the backend refuses (reason kept). */
static double time_one(bench &b, mode md, const char *config, int runs, std::string *why, std::string *ran) {
  b.md = md;
  b.config = config;
  memset(&b.info, 0, sizeof b.info);
  fp4_timing t = {};
  fp4_status s = fp4_time(b.ctx, b.stream, call, &b, 3, runs, &t);
  if (s != FP4_OK) {
    if (why) *why = fp4_last_error();
    if (s != FP4_ERR_UNSUPPORTED && s != FP4_ERR_NOT_FOUND) {
      fprintf(stderr, "timing failed (%s): %s\n", fp4_status_str(s), fp4_last_error());
      exit(1);
    }
    return -1.0;
  }
  if (ran) *ran = b.info.config;
  return t.median_us;
}

static double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int main(int argc, char **argv) {
  FILE *csv = argc > 1 ? fopen(argv[1], "w") : NULL;
  const int runs = argc > 2 ? atoi(argv[2]) : 20;
  if (argc > 1 && !csv) {
    fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  fp4_context *ctx;
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    fprintf(stderr, "fp4_context_create: %s\n", fp4_last_error());
    return 1;
  }
  char reason[256];
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    fprintf(stderr, "the cuda backend cannot run here: %s\n", reason);
    return 1;
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  cublasSetStream(blas, stream);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, %d runs per point (median); W4A16 = NVFP4 weights x bf16 activations, bf16 out\n",
         prop.name, prop.multiProcessorCount, runs);
  if (csv)
    fprintf(csv, "shape,n,k,m,small_best_us,small_best_config,large_best_us,large_best_config,default_us,"
                 "default_config,w4a4_us,w4a16_mxfp4_us,cublas_bf16_us,large_tflops,cublas_tflops,large_pct_cublas,"
                 "w4a4_pct_cublas,winner,w4a4_config,smem_tile_best_us,rd_best_us,rd_best_config,wgra_best_us,wgra_best_config\n");
  printf("%-30s %5s %5s %5s | %9s %-11s | %9s %-19s | %9s %-19s | %9s %9s | %9s | %7s %7s %6s %6s\n", "shape", "N", "K",
         "M", "small_us", "small_cfg", "large_us", "large_cfg", "dflt_us", "dflt_cfg", "w4a4_us", "mx_us", "cublas_us",
         "lg_TF", "cb_TF", "%cub", "a4%cub");

  std::vector<double> pct16_big, pct4_big;
  std::vector<std::string> summary;
  const int64_t max_m = kMs[sizeof kMs / sizeof *kMs - 1];
  for (const shape &sh : kShapes) {
    bench b = {};
    b.ctx = ctx;
    b.stream = stream;
    b.blas = blas;
    b.n = sh.n;
    b.k = sh.k;
    const size_t wbytes = (size_t)(b.n * b.k / 2);
    size_t sbytes = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, b.n, b.k, &sbytes);
    int copies = (int)((200e6 + wbytes - 1) / wbytes);
    copies = std::min(copies, 64);
    for (int c = 0; c < copies; c++) {
      void *w, *s0, *s1;
      CK(cudaMalloc(&w, wbytes));
      CK(cudaMalloc(&s0, sbytes));
      CK(cudaMalloc(&s1, sbytes));
      fill_random<<<1024, 256, 0, stream>>>((uint8_t *)w, wbytes, 17u * c + 1);
      fill_scales<<<256, 256, 0, stream>>>((uint8_t *)s0, sbytes, 0);
      fill_scales<<<256, 256, 0, stream>>>((uint8_t *)s1, sbytes, 1);
      b.w.push_back(w);
      b.ws_nv.push_back(s0);
      b.ws_mx.push_back(s1);
    }
    const size_t bfbytes = (size_t)(b.n * b.k) * 2;
    const int bf_copies = std::max(1, (int)((200e6 + bfbytes - 1) / bfbytes));
    for (int c = 0; c < bf_copies; c++) {
      void *wbf;
      CK(cudaMalloc(&wbf, bfbytes));
      fill_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)wbf, (size_t)(b.n * b.k));
      b.wbf.push_back(wbf);
    }
    CK(cudaMalloc(&b.x, (size_t)(max_m * b.k) * 2));
    fill_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16 *)b.x, (size_t)(max_m * b.k));
    CK(cudaMalloc(&b.xq, (size_t)(max_m * b.k) / 2));
    fill_random<<<1024, 256, 0, stream>>>((uint8_t *)b.xq, (size_t)(max_m * b.k) / 2, 99u);
    size_t xs = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, max_m, b.k, &xs);
    CK(cudaMalloc(&b.xqs, xs));
    fill_scales<<<256, 256, 0, stream>>>((uint8_t *)b.xqs, xs, 0);
    CK(cudaMalloc(&b.out, (size_t)(max_m * b.n) * 2));
    CK(cudaStreamSynchronize(stream));

    int64_t crossover = -1;
    for (int64_t m : kMs) {
      b.m = m;
      const double flops = 2.0 * (double)m * (double)b.n * (double)b.k;
      double small = -1, large = -1;
      std::string small_cfg = "-", large_cfg = "-", dflt_cfg = "-", why;
      for (const char *c : kSmall) {
        const double t = time_one(b, W4A16_NV, c, runs, &why, NULL);
        if (t > 0 && (small < 0 || t < small)) small = t, small_cfg = c;
      }
      double smem_best = -1, rd_best = -1; /* the decoded-tile mma.sync configs vs the register-decode ones */
      std::string rd_cfg = "-", wgra_cfg = "-";
      double wgra_best = -1; /* the register-A wgmma configs */
      for (const char *c : kLarge) {
        const double t = time_one(b, W4A16_NV, c, runs, &why, NULL);
        if (t > 0 && (large < 0 || t < large)) large = t, large_cfg = c;
        const bool is_rd = !strncmp(c, "large-m.rd.", 11), is_wgra = !strncmp(c, "large-m.wgra.", 13);
        if (t > 0 && is_rd && (rd_best < 0 || t < rd_best)) rd_best = t, rd_cfg = c;
        if (t > 0 && is_wgra && (wgra_best < 0 || t < wgra_best)) wgra_best = t, wgra_cfg = c;
        if (t > 0 && !is_rd && !is_wgra && (smem_best < 0 || t < smem_best))
          smem_best = t;
        if (t < 0 && m == 128) printf("  (%s refused at M = 128: %s)\n", c, why.c_str()); /* say why, once per shape */
      }
      const double dflt = time_one(b, W4A16_NV, NULL, runs, &why, &dflt_cfg);
      const char *best_large = large > 0 ? large_cfg.c_str() : NULL;
      double a4 = best_large ? time_one(b, W4A4_NV, best_large, runs, &why, NULL) : -1;
      std::string a4_cfg = a4 > 0 ? large_cfg : std::string("-");
      std::string a4_all = a4_cfg + " " + std::to_string(a4).substr(0, 7);
      for (const char *c : kW4A4Extra) {
        if (best_large && !strcmp(c, best_large)) continue;
        const double t = time_one(b, W4A4_NV, c, runs, &why, NULL);
        if (t > 0 && (a4 < 0 || t < a4)) a4 = t, a4_cfg = c;
        a4_all += std::string(", ") + c + " " + (t > 0 ? std::to_string(t).substr(0, 7) : std::string("refused"));
      }
      const double mx = best_large ? time_one(b, W4A16_MX, best_large, runs, &why, NULL) : -1;
      const double cub = time_one(b, CUBLAS_BF16, NULL, runs, &why, NULL);
      const double lg_tf = large > 0 ? flops / large * 1e-6 : 0, cb_tf = cub > 0 ? flops / cub * 1e-6 : 0;
      const double pct = large > 0 && cub > 0 ? 100.0 * cub / large : 0, a4pct = a4 > 0 && cub > 0 ? 100.0 * cub / a4 : 0;
      const char *winner = small > 0 && (large < 0 || small <= large) ? "small-m" : "large-m";
      if (crossover < 0 && !strcmp(winner, "large-m")) crossover = m;
      if (crossover > 0 && !strcmp(winner, "small-m")) crossover = -1; /* small wins again: not crossed yet */
      if (m >= 4096) {
        pct16_big.push_back(pct);
        pct4_big.push_back(a4pct);
      }
      if (m == 256 || m == 512)
        summary.push_back(std::string(sh.name) + " M=" + std::to_string(m) + ": large-M W4A16 " +
                          std::to_string(pct).substr(0, 5) + "% of cuBLAS BF16 speed" +
                          (pct > 100.0 ? " (faster)" : " (slower)"));
      printf("%-30s %5lld %5lld %5lld | %9.1f %-11s | %9.1f %-19s | %9.1f %-19s | %9.1f %9.1f | %9.1f | %7.1f %7.1f "
             "%5.0f%% %5.0f%%\n",
             sh.name, (long long)b.n, (long long)b.k, (long long)m, small, small_cfg.c_str(), large, large_cfg.c_str(),
             dflt, dflt_cfg.c_str(), a4, mx, cub, lg_tf, cb_tf, pct, a4pct);
      printf("%-30s   register-decode best %.1f us (%s) vs decoded-tile mma.sync best %.1f us; W4A4 us: %s\n", "",
             rd_best, rd_cfg.c_str(), smem_best, a4_all.c_str());
      {
        const double mma_best = rd_best > 0 && (smem_best < 0 || rd_best < smem_best) ? rd_best : smem_best;
        printf("%-30s   register-A wgmma best %.1f us (%s, %.1f TFLOP/s) vs mma.sync best %.1f us (%.1f TFLOP/s)\n", "",
               wgra_best, wgra_cfg.c_str(), wgra_best > 0 ? flops / wgra_best * 1e-6 : 0.0, mma_best,
               mma_best > 0 ? flops / mma_best * 1e-6 : 0.0);
      }
      fflush(stdout);
      if (csv)
        fprintf(csv, "%s,%lld,%lld,%lld,%.3f,%s,%.3f,%s,%.3f,%s,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.2f,%s,%s,%.3f,%.3f,%s,%.3f,%s\n",
                sh.name, (long long)b.n, (long long)b.k, (long long)m, small, small_cfg.c_str(), large,
                large_cfg.c_str(), dflt, dflt_cfg.c_str(), a4, mx, cub, lg_tf, cb_tf, pct, a4pct, winner,
                a4_cfg.c_str(), smem_best, rd_best, rd_cfg.c_str(), wgra_best, wgra_cfg.c_str());
    }
    summary.push_back(std::string(sh.name) + ": large-M overtakes small-M from M = " +
                      (crossover > 0 ? std::to_string(crossover) : std::string("(never in the measured range)")));
    for (size_t c = 0; c < b.w.size(); c++) {
      cudaFree(b.w[c]);
      cudaFree(b.ws_nv[c]);
      cudaFree(b.ws_mx[c]);
    }
    for (void *p : b.wbf) cudaFree(p);
    cudaFree(b.x);
    cudaFree(b.xq);
    cudaFree(b.xqs);
    cudaFree(b.out);
  }
  printf("\n==== summary (times are medians; -1 = refused; %%cub = cuBLAS time / our time) ====\n");
  for (const std::string &s : summary) printf("%s\n", s.c_str());
  printf("median over shapes, M >= 4096: large-M W4A16 at %.0f%% of cuBLAS BF16 (target >= 90%%), W4A4 at %.0f%% "
         "(target >= 85%%)\n",
         median(pct16_big), median(pct4_big));
  if (csv) fclose(csv);
  cublasDestroy(blas);
  fp4_context_destroy(ctx);
  return 0;
}
