#define _GNU_SOURCE
/*
 * Same-run peers: what the machine itself delivers, measured in the same process as the FP4
 * kernels so that every reported speed can be stated as a ratio (benchmarks here compare
 * with a peer measured in the same run, never with a number from another day).
 *
 *   device: a copy and a read-only reduction (own kernels, peers_kernels.cu), cuBLAS BF16 GEMM and
 *           cuBLASLt FP8 GEMM on the same [m, k] x [n, k]^T shape;
 *   host:   a threaded read over n*k bytes and a register-only FMA loop (the FP32 peak).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/peers.h"
#include "fp4kit_bench.h"
#if FP4KIT_HAVE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FP4_PEERS_X86 1
#endif

const char *fp4_peer_name(fp4_peer peer) {
  switch (peer) {
    case FP4_PEER_COPY: return "copy";
    case FP4_PEER_READ: return "read";
    case FP4_PEER_CUBLAS_BF16: return "cublas-bf16";
    case FP4_PEER_CUBLASLT_FP8: return "cublaslt-fp8";
    case FP4_PEER_HOST_READ: return "host-read";
    case FP4_PEER_HOST_FMA: return "host-fma";
  }
  return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Host peers: a pool of threads released together for every timed call (the caller is thread 0).  */
/* ---------------------------------------------------------------------------------------------- */

typedef struct host_pool host_pool;
typedef void (*host_work_fn)(host_pool *pool, int thread);

struct host_pool {
  int threads, started;
  pthread_t *ids;
  pthread_mutex_t mu;
  pthread_cond_t go, finished;
  unsigned generation; /* bumped once per call; workers run when it changes */
  int pending;         /* workers still busy with this generation            */
  int stop;
  host_work_fn work;
  const uint8_t *buf;   /* HOST_READ */
  size_t bytes;
  int64_t fma_iters;    /* HOST_FMA: inner iterations per thread */
  int fma_level;        /* 2 = AVX-512F, 1 = AVX2+FMA, 0 = generic C */
  volatile uint64_t sink[64];
};

typedef struct pool_arg {
  host_pool *pool;
  int thread;
} pool_arg;

static void *pool_main(void *arg) {
  pool_arg a = *(pool_arg *)arg;
  free(arg);
  host_pool *p = a.pool;
  unsigned seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->generation == seen && !p->stop) pthread_cond_wait(&p->go, &p->mu);
    if (p->stop) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    p->work(p, a.thread);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->finished);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* One timed call: every thread does its share; returns when all are done. */
static fp4_status pool_call(void *user, int iteration) {
  (void)iteration;
  host_pool *p = user;
  pthread_mutex_lock(&p->mu);
  p->pending = p->started - 1;
  p->generation++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  p->work(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0) pthread_cond_wait(&p->finished, &p->mu);
  pthread_mutex_unlock(&p->mu);
  return FP4_OK;
}

static void pool_stop(host_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int t = 1; t < p->started; t++) pthread_join(p->ids[t], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->finished);
  pthread_mutex_destroy(&p->mu);
  free(p->ids);
}

static fp4_status pool_start(host_pool *p, int threads) {
  p->threads = threads;
  p->started = 1;
  p->ids = calloc((size_t)threads, sizeof *p->ids);
  if (!p->ids) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "fp4_time_peer: out of host memory");
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->finished, NULL);
  for (int t = 1; t < threads; t++) {
    pool_arg *arg = malloc(sizeof *arg);
    if (arg) *arg = (pool_arg){p, t};
    if (!arg || pthread_create(&p->ids[t], NULL, pool_main, arg)) {
      free(arg);
      /* Fewer threads than asked would measure a different machine: stop and say so. */
      pool_stop(p);
      return fp4_set_error(FP4_ERR_INTERNAL, "fp4_time_peer: could not start host thread %d of %d", t, threads);
    }
    p->started = t + 1;
  }
  return FP4_OK;
}

static void read_work(host_pool *p, int t) {
  /* 64-byte aligned slices so no two threads share a cache line. */
  size_t words = p->bytes / 8, per = ((words + (size_t)p->threads - 1) / (size_t)p->threads + 7) & ~(size_t)7;
  size_t lo = (size_t)t * per, hi = lo + per < words ? lo + per : words;
  const uint64_t *w = (const uint64_t *)p->buf;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = lo;
  for (; i + 4 <= hi; i += 4) {
    a0 += w[i];
    a1 ^= w[i + 1];
    a2 += w[i + 2];
    a3 ^= w[i + 3];
  }
  for (; i < hi; i++) a0 += w[i];
  p->sink[t % 64] = a0 + a1 + a2 + a3;
}

#if FP4_PEERS_X86
/* 12 independent accumulator chains cover the FMA latency (4-5 cycles) times two FMA pipes. */
__attribute__((target("avx512f"))) static void fma_work_avx512(host_pool *p, int t) {
  __m512 acc[12];
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < 12; j++) acc[j] = _mm512_set1_ps(1.0f + (float)(j + t));
  for (int64_t i = 0; i < p->fma_iters; i++)
    for (int j = 0; j < 12; j++) acc[j] = _mm512_fmadd_ps(acc[j], mul, add);
  for (int j = 1; j < 12; j++) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  float out[16];
  _mm512_storeu_ps(out, acc[0]);
  uint32_t bits;
  memcpy(&bits, &out[0], sizeof bits);
  p->sink[t % 64] = bits;
}

__attribute__((target("avx2,fma"))) static void fma_work_avx2(host_pool *p, int t) {
  __m256 acc[12];
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < 12; j++) acc[j] = _mm256_set1_ps(1.0f + (float)(j + t));
  for (int64_t i = 0; i < p->fma_iters; i++)
    for (int j = 0; j < 12; j++) acc[j] = _mm256_fmadd_ps(acc[j], mul, add);
  for (int j = 1; j < 12; j++) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  float out[8];
  _mm256_storeu_ps(out, acc[0]);
  uint32_t bits;
  memcpy(&bits, &out[0], sizeof bits);
  p->sink[t % 64] = bits;
}
#endif

/* Generic: separate multiply and add (the build forbids contraction), 2 FLOPs per element step. */
static void fma_work_generic(host_pool *p, int t) {
  float acc[16];
  for (int j = 0; j < 16; j++) acc[j] = 1.0f + (float)(j + t);
  for (int64_t i = 0; i < p->fma_iters; i++)
    for (int j = 0; j < 16; j++) acc[j] = acc[j] * 0.999999f + 1e-7f;
  float s = 0.0f;
  for (int j = 0; j < 16; j++) s += acc[j];
  uint32_t bits;
  memcpy(&bits, &s, sizeof bits);
  p->sink[t % 64] = bits;
}

/* FLOPs one inner iteration of a thread performs at a level. */
static int64_t fma_flops_per_iter(int level) { return level == 2 ? 12 * 16 * 2 : level == 1 ? 12 * 8 * 2 : 16 * 2; }

static int fma_level(void) {
#if FP4_PEERS_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

static fp4_status time_host(fp4_peer peer, int64_t m, int64_t n, int64_t k, int runs, fp4_timing *timing,
                            double *rate) {
  host_pool p;
  memset(&p, 0, sizeof p);
  int threads = fp4_cpu_threads();
  uint8_t *buf = NULL;
  double units = 0.0;
  if (peer == FP4_PEER_HOST_READ) {
    p.bytes = (size_t)n * (size_t)k;
    if (p.bytes < 8) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: host-read needs n*k >= 8 bytes");
    if (posix_memalign((void **)&buf, 64, p.bytes))
      return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "fp4_time_peer: host-read: %zu bytes of host memory", p.bytes);
    /* Nonzero, varied contents; every page touched before timing. */
    for (size_t i = 0; i + 8 <= p.bytes; i += 8) {
      uint64_t v = (uint64_t)i * 0x9E3779B97F4A7C15ull + 1u;
      memcpy(buf + i, &v, 8);
    }
    p.buf = buf;
    p.work = read_work;
    units = (double)p.bytes;
  } else {
    p.fma_level = fma_level();
    int64_t per_iter = fma_flops_per_iter(p.fma_level) * threads;
    double flops = 2.0 * (double)m * (double)n * (double)k;
    p.fma_iters = (int64_t)(flops / (double)per_iter);
    if (p.fma_iters < 1) p.fma_iters = 1;
    units = (double)p.fma_iters * (double)per_iter; /* what was actually executed */
#if FP4_PEERS_X86
    p.work = p.fma_level == 2 ? fma_work_avx512 : p.fma_level == 1 ? fma_work_avx2 : fma_work_generic;
#else
    p.work = fma_work_generic;
#endif
  }
  fp4_status st = pool_start(&p, threads);
  if (!st) {
    st = fp4_time(NULL, NULL, pool_call, &p, 2, runs, timing);
    pool_stop(&p);
  }
  free(buf);
  if (!st && rate) *rate = units / (timing->median_us * 1e-6);
  return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Device peers                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

#if FP4KIT_HAVE_CUDA

enum { PEER_MAX_SETS = 512, PEER_WARMUP = 5 };

typedef struct device_peer {
  fp4_peer peer;
  cudaStream_t stream;
  int64_t m, n, k;
  /* Memory peers */
  void *src, *dst;
  size_t bytes;
  uint64_t *sink;
  /* GEMM peers: `sets` copies of (x [m,k], w [n,k], y [m,n]) at set_stride bytes apart. */
  uint8_t *pool;
  size_t set_stride, x_off, w_off, y_off;
  int sets;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lw, lx, ly;
  cublasLtMatmulAlgo_t algo;
  void *workspace;
  size_t workspace_bytes;
} device_peer;

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static fp4_status cuda_fail(const char *what, cudaError_t e) {
  return fp4_set_error(e == cudaErrorMemoryAllocation ? FP4_ERR_OUT_OF_MEMORY : FP4_ERR_CUDA, "fp4_time_peer: %s: %s", what,
                  cudaGetErrorString(e));
}

static fp4_status device_call(void *user, int iteration) {
  device_peer *d = user;
  const float one = 1.0f, zero = 0.0f;
  int e = 0;
  if (d->peer == FP4_PEER_COPY) e = fp4_peer_launch_copy(d->dst, d->src, d->bytes, d->stream);
  else if (d->peer == FP4_PEER_READ)
    e = fp4_peer_launch_read((const uint8_t *)d->src + (size_t)(iteration % d->sets) * d->set_stride, d->bytes, d->sink,
                             d->stream);
  if (e) return cuda_fail(fp4_peer_name(d->peer), (cudaError_t)e);
  if (d->peer != FP4_PEER_CUBLAS_BF16 && d->peer != FP4_PEER_CUBLASLT_FP8) return FP4_OK;

  uint8_t *set = d->pool + (size_t)(iteration % d->sets) * d->set_stride;
  void *x = set + d->x_off, *w = set + d->w_off, *y = set + d->y_off;
  if (d->peer == FP4_PEER_CUBLAS_BF16) {
    /* Row-major y[m,n] = x[m,k] w[n,k]^T read column-major is y'[n,m] = op_T(w'[k,n]) x'[k,m]:
     * A = w (op T, lda k), B = x (op N, ldb k), C = y (ldc n). */
    cublasStatus_t s = cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)d->n, (int)d->m, (int)d->k, &one, w,
                                    CUDA_R_16BF, (int)d->k, x, CUDA_R_16BF, (int)d->k, &zero, y, CUDA_R_16BF,
                                    (int)d->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      return fp4_set_error(FP4_ERR_CUDA, "fp4_time_peer: cublasGemmEx (BF16, m %lld n %lld k %lld): %s", (long long)d->m,
                      (long long)d->n, (long long)d->k, cublasGetStatusString(s));
    return FP4_OK;
  }
  cublasStatus_t s = cublasLtMatmul(d->lt, d->op, &one, w, d->lw, x, d->lx, &zero, y, d->ly, y, d->ly, &d->algo,
                                    d->workspace, d->workspace_bytes, d->stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fp4_set_error(FP4_ERR_CUDA, "fp4_time_peer: cublasLtMatmul (FP8 E4M3, m %lld n %lld k %lld): %s", (long long)d->m,
                    (long long)d->n, (long long)d->k, cublasLtGetStatusString(s));
  return FP4_OK;
}

/* Operand sets for a GEMM peer: enough copies that the timed loop streams more than twice the L2,
 * as the FP4 kernels' inputs do in `fp4kit bench`. */
static fp4_status gemm_operands(device_peer *d, int device, size_t elem) {
  d->x_off = 0;
  d->w_off = align256((size_t)d->m * (size_t)d->k * elem);
  d->y_off = d->w_off + align256((size_t)d->n * (size_t)d->k * elem);
  d->set_stride = d->y_off + align256((size_t)d->m * (size_t)d->n * 2);
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
  size_t want = 3 * (size_t)l2;
  d->sets = d->set_stride >= want ? 1 : (int)((want + d->set_stride - 1) / d->set_stride);
  if (d->sets > PEER_MAX_SETS) d->sets = PEER_MAX_SETS;
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  while (d->sets > 1 && (size_t)d->sets * d->set_stride > free_b / 2) d->sets--;
  cudaError_t e = cudaMalloc((void **)&d->pool, (size_t)d->sets * d->set_stride);
  if (e != cudaSuccess) return cuda_fail("operands of the GEMM peer", e);
  for (int i = 0; i < d->sets; i++) {
    uint8_t *set = d->pool + (size_t)i * d->set_stride;
    size_t nx = (size_t)d->m * (size_t)d->k, nw = (size_t)d->n * (size_t)d->k;
    int r = elem == 2 ? fp4_peer_fill_bf16(set + d->x_off, nx, 2u * (uint64_t)i, d->stream)
                      : fp4_peer_fill_e4m3(set + d->x_off, nx, 2u * (uint64_t)i, d->stream);
    if (!r) r = elem == 2 ? fp4_peer_fill_bf16(set + d->w_off, nw, 2u * (uint64_t)i + 1, d->stream)
                          : fp4_peer_fill_e4m3(set + d->w_off, nw, 2u * (uint64_t)i + 1, d->stream);
    if (r) return cuda_fail("filling the GEMM peer's operands", (cudaError_t)r);
  }
  return FP4_OK;
}

static fp4_status lt_setup(device_peer *d) {
  cublasStatus_t s = cublasLtCreate(&d->lt);
  if (s != CUBLAS_STATUS_SUCCESS) return fp4_set_error(FP4_ERR_CUDA, "fp4_time_peer: cublasLtCreate: %s", cublasLtGetStatusString(s));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  /* FP8 GEMMs in cuBLASLt are TN only, which is exactly the K-major weight layout. */
  if ((s = cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
      (s = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
      (s = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
      (s = cublasLtMatrixLayoutCreate(&d->lw, CUDA_R_8F_E4M3, (uint64_t)d->k, (uint64_t)d->n, d->k)) ||
      (s = cublasLtMatrixLayoutCreate(&d->lx, CUDA_R_8F_E4M3, (uint64_t)d->k, (uint64_t)d->m, d->k)) ||
      (s = cublasLtMatrixLayoutCreate(&d->ly, CUDA_R_16BF, (uint64_t)d->n, (uint64_t)d->m, d->n)))
    return fp4_set_error(FP4_ERR_CUDA, "fp4_time_peer: cuBLASLt FP8 descriptors: %s", cublasLtGetStatusString(s));
  d->workspace_bytes = 32u << 20;
  cudaError_t e = cudaMalloc(&d->workspace, d->workspace_bytes);
  if (e != cudaSuccess) return cuda_fail("cuBLASLt workspace", e);
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  s = cublasLtMatmulPreferenceCreate(&pref);
  if (!s)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &d->workspace_bytes,
                                             sizeof d->workspace_bytes);
  if (!s) s = cublasLtMatmulAlgoGetHeuristic(d->lt, d->op, d->lw, d->lx, d->ly, d->ly, pref, 1, &result, &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found < 1)
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_time_peer: cuBLASLt has no FP8 E4M3 algorithm for m %lld n %lld k %lld (%s)",
                    (long long)d->m, (long long)d->n, (long long)d->k,
                    s != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(s) : "heuristic returned none");
  d->algo = result.algo;
  return FP4_OK;
}

static void device_release(device_peer *d) {
  if (d->stream) cudaStreamSynchronize(d->stream);
  if (d->blas) cublasDestroy(d->blas);
  if (d->lw) cublasLtMatrixLayoutDestroy(d->lw);
  if (d->lx) cublasLtMatrixLayoutDestroy(d->lx);
  if (d->ly) cublasLtMatrixLayoutDestroy(d->ly);
  if (d->op) cublasLtMatmulDescDestroy(d->op);
  if (d->lt) cublasLtDestroy(d->lt);
  cudaFree(d->workspace);
  cudaFree(d->pool);
  cudaFree(d->src);
  cudaFree(d->dst);
  cudaFree(d->sink);
  if (d->stream) cudaStreamDestroy(d->stream);
}

static fp4_status time_device(fp4_context *ctx, fp4_peer peer, int64_t m, int64_t n, int64_t k, int runs,
                              fp4_timing *timing, double *rate) {
  const int device = fp4_context_device(ctx);
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_fail("cudaSetDevice", e);
  if ((peer == FP4_PEER_CUBLAS_BF16 || peer == FP4_PEER_CUBLASLT_FP8) && (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX))
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: cuBLAS takes 32-bit dimensions (m %lld n %lld k %lld)",
                    (long long)m, (long long)n, (long long)k);
  device_peer d;
  memset(&d, 0, sizeof d);
  d.peer = peer;
  d.m = m;
  d.n = n;
  d.k = k;
  fp4_status st = FP4_OK;
  double units = 0.0;
  if ((e = cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking)) != cudaSuccess) {
    d.stream = NULL;
    st = cuda_fail("cudaStreamCreate", e);
    goto out;
  }
  if (peer == FP4_PEER_COPY || peer == FP4_PEER_READ) {
    d.bytes = (size_t)n * (size_t)k;
    /* The read peer rotates through copies of its buffer, as many as the timed loop needs to stream
     * 3x the L2: a read of a weight's bytes (fp4kit bench's per-shape floor) then comes from DRAM,
     * as the GEMM's weights do. The copy peer is only timed on buffers far past the L2. */
    d.sets = 1;
    d.set_stride = align256(d.bytes);
    if (peer == FP4_PEER_READ) {
      int l2 = 0;
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
      const size_t want = 3 * (size_t)l2;
      if (d.set_stride < want) d.sets = (int)((want + d.set_stride - 1) / d.set_stride);
      if (d.sets > PEER_MAX_SETS) d.sets = PEER_MAX_SETS;
    }
    if ((e = cudaMalloc(&d.src, (size_t)d.sets * d.set_stride)) != cudaSuccess ||
        (peer == FP4_PEER_COPY && (e = cudaMalloc(&d.dst, d.bytes)) != cudaSuccess) ||
        (peer == FP4_PEER_READ && (e = cudaMalloc((void **)&d.sink, FP4_PEER_READ_SINK_WORDS * sizeof(uint64_t))) != cudaSuccess)) {
      st = cuda_fail("buffers of the memory peer", e);
      goto out;
    }
    int r = fp4_peer_fill_bf16(d.src, (size_t)d.sets * d.set_stride / 2, 7, d.stream);
    if (r) {
      st = cuda_fail("filling the memory peer's buffer", (cudaError_t)r);
      goto out;
    }
    units = peer == FP4_PEER_COPY ? 2.0 * (double)d.bytes : (double)d.bytes;
  } else {
    units = 2.0 * (double)m * (double)n * (double)k;
    if ((st = gemm_operands(&d, device, peer == FP4_PEER_CUBLAS_BF16 ? 2 : 1))) goto out;
    if (peer == FP4_PEER_CUBLAS_BF16) {
      cublasStatus_t s = cublasCreate(&d.blas);
      if (s) d.blas = NULL; /* not a handle to destroy */
      else s = cublasSetStream(d.blas, d.stream);
      if (s) {
        st = fp4_set_error(FP4_ERR_CUDA, "fp4_time_peer: cublasCreate: %s", cublasGetStatusString(s));
        goto out;
      }
    } else if ((st = lt_setup(&d))) {
      goto out;
    }
  }
  st = fp4_time(ctx, d.stream, device_call, &d, PEER_WARMUP, runs, timing);
  if (!st && rate) *rate = units / (timing->median_us * 1e-6);
out:
  device_release(&d);
  return st;
}
#endif

fp4_status fp4_peer_read_queue(const void *src, size_t bytes, void *sink, void *stream) {
#if FP4KIT_HAVE_CUDA
  const int e = fp4_peer_launch_read(src, bytes, (uint64_t *)sink, stream);
  return e ? fp4_set_error(FP4_ERR_CUDA, "fp4_peer_read_queue: %s", cudaGetErrorString((cudaError_t)e)) : FP4_OK;
#else
  (void)src, (void)bytes, (void)sink, (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_peer_read_queue: this build has no CUDA");
#endif
}

fp4_status fp4_peer_read_ranges_queue(const void *const *srcs, const size_t *bytes, int n, void *sink, void *stream) {
  if (n < 1 || n > FP4_PEER_READ_MAX_RANGES || !srcs || !bytes)
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_peer_read_ranges_queue: %d ranges (1 to %d, with their arrays)",
                         n, (int)FP4_PEER_READ_MAX_RANGES);
  for (int k = 0; k < n; k++)
    if (((uintptr_t)srcs[k] | bytes[k]) % 16)
      return fp4_set_error(FP4_ERR_INVALID_ARGUMENT,
                           "fp4_peer_read_ranges_queue: range %d (%p, %zu bytes) is not in whole 16-byte vectors", k,
                           srcs[k], bytes[k]);
#if FP4KIT_HAVE_CUDA
  const int e = fp4_peer_launch_read_ranges(srcs, bytes, n, (uint64_t *)sink, stream);
  return e ? fp4_set_error(FP4_ERR_CUDA, "fp4_peer_read_ranges_queue: %s", cudaGetErrorString((cudaError_t)e)) : FP4_OK;
#else
  (void)sink, (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_peer_read_ranges_queue: this build has no CUDA");
#endif
}

fp4_status fp4_time_peer(fp4_context *ctx, fp4_peer peer, int64_t m, int64_t n, int64_t k, int runs,
                         fp4_timing *timing, double *bytes_per_s) {
  fp4_set_error(FP4_OK, NULL);
  const char *name = fp4_peer_name(peer);
  if (!name) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: peer %d is not an fp4_peer", (int)peer);
  if (!timing) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: timing is NULL");
  if (runs < 1) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: runs (%d) must be >= 1", runs);
  const int gemm = peer == FP4_PEER_CUBLAS_BF16 || peer == FP4_PEER_CUBLASLT_FP8 || peer == FP4_PEER_HOST_FMA;
  if (n < 1 || k < 1 || (gemm && m < 1))
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: %s: m %lld, n %lld, k %lld must be positive", name,
                    (long long)m, (long long)n, (long long)k);
  if ((double)n * (double)k > (double)(SIZE_MAX / 4) || (gemm && (double)m * (double)n > (double)(SIZE_MAX / 4)))
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time_peer: %s: sizes overflow (m %lld n %lld k %lld)", name,
                    (long long)m, (long long)n, (long long)k);
  if (peer == FP4_PEER_HOST_READ || peer == FP4_PEER_HOST_FMA) return time_host(peer, m, n, k, runs, timing, bytes_per_s);
  if (fp4_context_device(ctx) < 0)
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_time_peer: %s runs on a CUDA device; the context is %s", name,
                    ctx ? "host-only" : "NULL");
#if FP4KIT_HAVE_CUDA
  return time_device(ctx, peer, m, n, k, runs, timing, bytes_per_s);
#else
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_time_peer: %s needs a build with CUDA (this fp4kit has none)", name);
#endif
}
