/*
 * CUDA-graph capture of the cuda backend's dense entry points (skipped with exit 77 and the reason
 * when it cannot run here): quantize, fp4_mm and fp4_mm_w4a16 on small-M and large-M configs, W4A4
 * through the bf16 prologue included, with the scalars as device pointers (alpha_device,
 * global_scale_device). Each call is run eagerly, then captured with cudaStreamBeginCapture
 * (cudaStreamCaptureModeGlobal: any synchronizing or allocating call in it invalidates the capture)
 * on a non-blocking stream after fp4_context_reserve_workspace with the size the calls report,
 * replayed 100 times with its output NaN-prefilled before each replay, and the output must equal
 * the eager one bit for bit. A call that needs more workspace than the context holds while its
 * stream captures must fail with FP4_ERR_UNSUPPORTED and leave the capture intact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

enum { REPLAYS = 100 };

typedef struct graph_case {
  const char *name;
  int op; /* 0 quantize, 1 W4A16, 2 W4A4 */
  const char *config;
  int64_t m, n, k;
  fp4_format format;
} graph_case;

static const graph_case g_cases[] = {
    {"quantize NVFP4", 0, NULL, 5, 0, 4096, FP4_FORMAT_NVFP4},
    {"quantize MXFP4", 0, NULL, 300, 0, 1024, FP4_FORMAT_MXFP4},
    {"w4a16 small-M default", 1, NULL, 1, 4096, 4096, FP4_FORMAT_NVFP4},
    {"w4a16 small-M shared activations", 1, "small-m.sa.r64.w8", 24, 1024, 2048, FP4_FORMAT_NVFP4},
    {"w4a4 small-M in-loop", 2, "small-m.w4", 3, 1024, 2048, FP4_FORMAT_MXFP4},
    {"w4a4 small-M prologue default", 2, NULL, 4, 8192, 4096, FP4_FORMAT_NVFP4},
    {"w4a4 small-M prologue lean", 2, "small-m.pro.w4.b6", 2, 2048, 2048, FP4_FORMAT_NVFP4},
    {"w4a16 large-M default", 1, NULL, 300, 1024, 2048, FP4_FORMAT_NVFP4},
    {"w4a16 large-M default wide", 1, NULL, 2048, 4096, 1024, FP4_FORMAT_NVFP4},
    {"w4a4 large-M default", 2, NULL, 2048, 4096, 1024, FP4_FORMAT_NVFP4},
    {"w4a4 large-M mma.sync", 2, "large-m.128x128.s4", 200, 512, 1024, FP4_FORMAT_MXFP4},
    {"w4a4 large-M register-decode prologue", 2, "large-m.rd.pro.128x128", 200, 512, 1024, FP4_FORMAT_NVFP4},
    {"w4a16 large-M register-A split-K", 1, "large-m.wgra.128x128", 128, 256, 8192, FP4_FORMAT_NVFP4},
    {"w4a4 large-M register-A prologue", 2, "large-m.wgra.pro.128x128", 256, 512, 2048, FP4_FORMAT_NVFP4},
};
enum { N_CASES = (int)(sizeof g_cases / sizeof *g_cases) };

/* The device buffers of one case: inputs, the output (and its bytes), and the eager output. */
typedef struct case_data {
  void *x;        /* bf16 activations [m, k] (quantize input, W4A16 activations) */
  fp4_qmatrix aq; /* W4A4 activations */
  fp4_qmatrix w;  /* weights [n, k] */
  fp4_matrix out; /* GEMM output, bf16 */
  fp4_qmatrix q;  /* quantize output */
  size_t out_bytes, scale_bytes;
  uint8_t *eager, *got;
  int ready;
} case_data;

static float *g_alpha, *g_gs; /* the device scalars */

static int is_sm90(void) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

/* Device bf16 [rows, k] of fresh random values. */
static void *random_bf16(fp4_context *ctx, fp4h_rng *g, int64_t rows, int64_t k) {
  const size_t n = (size_t)(rows * k);
  float *f = malloc(sizeof *f * n);
  uint16_t *h = malloc(2 * n);
  void *d = NULL;
  if (f && h) {
    fp4h_fill(g, f, (int64_t)n, FP4H_DATA_NORMAL, 16);
    if (fp4_convert(f, FP4_DTYPE_F32, h, FP4_DTYPE_BF16, n) || fp4_alloc(ctx, FP4_MEMORY_DEVICE, 2 * n, &d) ||
        fp4_copy(ctx, d, FP4_MEMORY_DEVICE, h, FP4_MEMORY_HOST, 2 * n)) {
      fp4_free(ctx, FP4_MEMORY_DEVICE, d);
      d = NULL;
    }
  }
  free(f);
  free(h);
  return d;
}

/* A device FP4 matrix [rows, k] in the 128x4 layout with its buffers allocated (0 on success). */
static int alloc_q(fp4_context *ctx, fp4_format f, int64_t rows, int64_t k, fp4_qmatrix *q, size_t *scale_bytes) {
  fp4_qmatrix z = {NULL, NULL, rows, k, f, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  *q = z;
  size_t ss = 0;
  if (fp4_scales_size(f, FP4_LAYOUT_128X4, rows, k, &ss)) return 1;
  if (scale_bytes) *scale_bytes = ss;
  return fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(rows * k) / 2, &q->data) ||
         fp4_alloc(ctx, FP4_MEMORY_DEVICE, ss, &q->scales);
}

/* A random FP4 matrix quantized on the device (the cuda backend, by-value scale). */
static int random_q(fp4_context *ctx, fp4h_rng *g, fp4_format f, int64_t rows, int64_t k, fp4_qmatrix *q) {
  void *x = random_bf16(ctx, g, rows, k);
  fp4_matrix xm = {x, rows, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  fp4_options o = {.backend = "cuda"};
  int bad = !x || alloc_q(ctx, f, rows, k, q, NULL) || fp4_quantize(ctx, &xm, 448.0f * 6.0f / 4.0f, q, &o) ||
            fp4_synchronize(ctx);
  fp4_free(ctx, FP4_MEMORY_DEVICE, x);
  return bad;
}

/* The call of case c on stream s (the device scalars in the options). */
static fp4_status call(fp4_context *ctx, const graph_case *c, case_data *d, cudaStream_t s) {
  fp4_options o = {.backend = "cuda", .config = c->config, .stream = s, .enable_pdl = 1, .alpha_device = g_alpha};
  if (c->op == 0) {
    o.alpha_device = NULL;
    o.global_scale_device = c->format == FP4_FORMAT_NVFP4 ? g_gs : NULL;
    fp4_matrix xm = {d->x, c->m, c->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    return fp4_quantize(ctx, &xm, 1.0f, &d->q, &o);
  }
  if (c->op == 1) {
    fp4_matrix am = {d->x, c->m, c->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    return fp4_mm_w4a16(ctx, &am, &d->w, 1.0f, &d->out, &o);
  }
  return fp4_mm(ctx, &d->aq, &d->w, 1.0f, &d->out, &o);
}

static size_t workspace_of(fp4_context *ctx, const graph_case *c, case_data *d) {
  fp4_options o = {.backend = "cuda", .config = c->config, .alpha_device = g_alpha};
  size_t bytes = 0;
  fp4_status st = FP4_OK;
  if (c->op == 1) {
    fp4_matrix am = {d->x, c->m, c->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    st = fp4_mm_w4a16_workspace_size(ctx, &am, &d->w, &d->out, &o, &bytes);
  } else if (c->op == 2) {
    st = fp4_mm_workspace_size(ctx, &d->aq, &d->w, &d->out, &o, &bytes);
  }
  CHECK(st == FP4_OK, "%s: workspace size: %s", c->name, fp4_last_error());
  return bytes;
}

/* Output prefill: NaN for the GEMM outputs (0xFF bytes are NaN in bf16), 0xA5 for quantize's codes
 * and scales (every byte of both is written). */
static int prefill(const graph_case *c, case_data *d, cudaStream_t s) {
  if (c->op)
    return cudaMemsetAsync(d->out.data, 0xFF, d->out_bytes, s) != cudaSuccess;
  return cudaMemsetAsync(d->q.data, 0xA5, (size_t)(c->m * c->k) / 2, s) != cudaSuccess ||
         cudaMemsetAsync(d->q.scales, 0xA5, d->scale_bytes, s) != cudaSuccess;
}

/* The output (codes then scales for quantize) into host. */
static int fetch(const graph_case *c, case_data *d, uint8_t *host) {
  if (c->op) return cudaMemcpy(host, d->out.data, d->out_bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
  const size_t codes = (size_t)(c->m * c->k) / 2;
  return cudaMemcpy(host, d->q.data, codes, cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(host + codes, d->q.scales, d->scale_bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
}

static int setup(fp4_context *ctx, fp4h_rng *g, const graph_case *c, case_data *d) {
  memset(d, 0, sizeof *d);
  if (c->op == 0) {
    d->x = random_bf16(ctx, g, c->m, c->k);
    if (!d->x || alloc_q(ctx, c->format, c->m, c->k, &d->q, &d->scale_bytes)) return 1;
    d->out_bytes = (size_t)(c->m * c->k) / 2 + d->scale_bytes;
  } else {
    if (random_q(ctx, g, c->format, c->n, c->k, &d->w)) return 1;
    d->w.multiplier = 1.0f / 448.0f;
    if (c->op == 1 && !(d->x = random_bf16(ctx, g, c->m, c->k))) return 1;
    if (c->op == 2 && random_q(ctx, g, c->format, c->m, c->k, &d->aq)) return 1;
    d->out_bytes = (size_t)(c->m * c->n) * 2;
    fp4_matrix om = {NULL, c->m, c->n, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    d->out = om;
    if (fp4_alloc(ctx, FP4_MEMORY_DEVICE, d->out_bytes, &d->out.data)) return 1;
  }
  d->eager = malloc(d->out_bytes);
  d->got = malloc(d->out_bytes);
  return !d->eager || !d->got;
}

static void release(fp4_context *ctx, case_data *d) {
  void *bufs[] = {d->x, d->aq.data, d->aq.scales, d->w.data, d->w.scales, d->out.data, d->q.data, d->q.scales};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
  free(d->eager);
  free(d->got);
}

/* Captures case c on s, replays it REPLAYS times (the output prefilled before each) and compares
 * with the eager output after the first and the last replay. */
static void capture_and_replay(fp4_context *ctx, const graph_case *c, case_data *d, cudaStream_t s) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "%s: begin capture", c->name);
  const fp4_status st = call(ctx, c, d, s);
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  CHECK(st == FP4_OK, "%s: the call under capture failed: %s", c->name, fp4_last_error());
  CHECK(end == cudaSuccess, "%s: end capture: %s", c->name, cudaGetErrorString(end));
  if (st || end) return;
  CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "%s: instantiate", c->name);
  int bad = !exec;
  for (int r = 0; r < REPLAYS && !bad; r++) {
    bad = prefill(c, d, s) || cudaGraphLaunch(exec, s) != cudaSuccess;
    if (!bad && (r == 0 || r == REPLAYS - 1)) {
      bad = cudaStreamSynchronize(s) != cudaSuccess || fetch(c, d, d->got);
      CHECK(!bad && !memcmp(d->got, d->eager, d->out_bytes), "%s: replay %d differs from the eager result%s", c->name,
            r + 1, bad ? " (replay failed)" : "");
    }
  }
  CHECK(!bad, "%s: replay failed: %s", c->name, cudaGetErrorString(cudaGetLastError()));
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

/* A W4A4 prologue problem needing more workspace than reserved: refused during capture with
 * FP4_ERR_UNSUPPORTED naming the reservation, the capture still ends cleanly. */
static void test_workspace_refused_in_capture(fp4_context *ctx, fp4h_rng *g, cudaStream_t s) {
  const graph_case c = {"w4a4 prologue beyond the workspace", 2, "large-m.rd.pro.128x128", 4096, 128, 8192,
                        FP4_FORMAT_NVFP4};
  case_data d;
  int bad = setup(ctx, g, &c, &d);
  CHECK(!bad, "setup of the over-sized case: %s", fp4_last_error());
  size_t need = bad ? 0 : workspace_of(ctx, &c, &d);
  CHECK(need > fp4_context_workspace_bytes(ctx), "the case needs %zu bytes, the context holds %zu", need,
        fp4_context_workspace_bytes(ctx));
  if (!bad && need > fp4_context_workspace_bytes(ctx)) {
    cudaGraph_t graph = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    CHECK_ERROR(call(ctx, &c, &d, s), FP4_ERR_UNSUPPORTED, "fp4_context_reserve_workspace");
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    CHECK(end == cudaSuccess, "end capture after the refused call: %s", cudaGetErrorString(end));
    if (graph) cudaGraphDestroy(graph);
    /* outside capture the same call grows the workspace in stream order and runs */
    CHECK(call(ctx, &c, &d, s) == FP4_OK && cudaStreamSynchronize(s) == cudaSuccess, "eager call after: %s",
          fp4_last_error());
    CHECK(fp4_context_workspace_bytes(ctx) >= need, "workspace %zu after the eager call, %zu needed",
          fp4_context_workspace_bytes(ctx), need);
  }
  release(ctx, &d);
}

int main(void) {
  fp4_context *ctx = NULL;
  char reason[256];
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    printf("SKIP: no context on device 0: %s\n", fp4_last_error());
    return 77;
  }
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: the cuda backend cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  cudaStream_t s = NULL;
  const float alpha = 0.3712f, gs = 448.0f * 6.0f / 3.7f;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  CHECK(cudaMalloc((void **)&g_alpha, sizeof alpha) == cudaSuccess && cudaMalloc((void **)&g_gs, sizeof gs) == cudaSuccess &&
            cudaMemcpy(g_alpha, &alpha, sizeof alpha, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(g_gs, &gs, sizeof gs, cudaMemcpyHostToDevice) == cudaSuccess,
        "device scalars");
  const int sm90 = is_sm90();
  fp4h_rng g = {31337};
  static case_data data[N_CASES];
  size_t reserve = 0;
  for (int i = 0; i < N_CASES; i++) {
    const graph_case *c = &g_cases[i];
    case_data *d = &data[i];
    if (c->config && !strncmp(c->config, "large-m.wg", 10) && !sm90) {
      printf("SKIP %s: %s runs on SM90 only\n", c->name, c->config);
      memset(d, 0, sizeof *d);
      continue;
    }
    CHECK(!setup(ctx, &g, c, d), "%s: setup: %s", c->name, fp4_last_error());
    const size_t w = workspace_of(ctx, c, d);
    if (w > reserve) reserve = w;
    printf("%-40s %s: workspace %zu bytes\n", c->name, c->config ? c->config : "(default)", w);
    d->ready = 1;
  }
  CHECK(fp4_context_reserve_workspace(ctx, reserve) == FP4_OK, "reserve %zu: %s", reserve, fp4_last_error());
  for (int i = 0; i < N_CASES; i++) {
    const graph_case *c = &g_cases[i];
    case_data *d = &data[i];
    if (!d->ready) continue;
    /* eager, on the same stream, output prefilled */
    int bad = prefill(c, d, s) || call(ctx, c, d, s) || cudaStreamSynchronize(s) != cudaSuccess || fetch(c, d, d->eager);
    CHECK(!bad, "%s: eager call: %s", c->name, fp4_last_error());
    if (bad) continue;
    if (c->op) {
      int64_t nan = 0;
      const uint16_t *o = (const uint16_t *)d->eager;
      for (int64_t j = 0; j < c->m * c->n; j++) nan += (o[j] & 0x7F80) == 0x7F80 && (o[j] & 0x7F);
      CHECK(nan == 0, "%s: %lld NaN outputs in the eager result", c->name, (long long)nan);
    }
    CHECK(fp4_context_workspace_bytes(ctx) == reserve, "%s: the workspace grew to %zu (reserved %zu)", c->name,
          fp4_context_workspace_bytes(ctx), reserve);
    capture_and_replay(ctx, c, d, s);
  }
  test_workspace_refused_in_capture(ctx, &g, s);
  for (int i = 0; i < N_CASES; i++) release(ctx, &data[i]);
  cudaFree(g_alpha);
  cudaFree(g_gs);
  cudaStreamDestroy(s);
  fp4_context_destroy(ctx);
  return TEST_SUMMARY();
}

#else

int main(void) {
  (void)test_passed; /* testing.h's counters, unused in a host-only build */
  (void)test_failed;
  printf("SKIP: test_cuda_graph needs a build with the CUDA runtime\n");
  return 77;
}

#endif
