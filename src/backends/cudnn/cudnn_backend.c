/*
 * The cudnn backend: the cuDNN graph (backend descriptor) API in C. An NVFP4/MXFP4 GEMM is the graph
 *   dequantize(A, SFA) , dequantize(B, SFB) -> matmul (FP32) -> multiply by alpha -> out
 * (W4A16: A enters the matmul as it is). Whether it runs is cuDNN's answer: the operation graph must
 * finalize, the heuristics must offer engine configs and one must finalize into an execution plan.
 * Plans are built once per shape and kept in the context.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cudnn/cudnn_api.h"
#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "dispatch/probe.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#if FP4KIT_HAVE_CUDA && FP4KIT_HAVE_CUDNN
#define HAVE_CUDNN_GRAPH 1
#else
#define HAVE_CUDNN_GRAPH 0
#endif

static const char name[] = "cudnn";

#if HAVE_CUDNN_GRAPH
static void version_text(char *buf, size_t size) {
  size_t v = (size_t)fp4_cudnn_version();
  snprintf(buf, size, "cuDNN %zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
}
#endif

static fp4_status dnn_available(fp4_context *ctx, char *reason, size_t reason_size) {
#if HAVE_CUDNN_GRAPH
  char why[256];
  if (!fp4_cudnn(why, sizeof why)) {
    fp4_reason(reason, reason_size, "%s", why);
    return FP4_ERR_UNSUPPORTED;
  }
  int count = fp4_probe_device_count(), device = fp4_context_device(ctx);
  fp4_clear_error();
  if (device < 0) {
    fp4_reason(reason, reason_size, "cudnn runs on a CUDA device; the context is host-only");
    return FP4_ERR_UNSUPPORTED;
  }
  if (device >= count) {
    fp4_reason(reason, reason_size, "CUDA device %d is not present (%d visible)", device, count);
    return FP4_ERR_UNSUPPORTED;
  }
  if (fp4_cudnn_version() < 90700) {
    char ver[48];
    version_text(ver, sizeof ver);
    fp4_reason(reason, reason_size, "%s found (%s); block-scale dequantize needs cuDNN 9.7+", ver, fp4_cudnn_soname());
    return FP4_ERR_UNSUPPORTED;
  }
  fp4_reason(reason, reason_size, "%s", "");
  return FP4_OK;
#else
  (void)ctx;
#if FP4KIT_HAVE_CUDA
  fp4_reason(reason, reason_size, "built without cuDNN (its headers were not found at configure time)");
#else
  fp4_reason(reason, reason_size, "built without CUDA");
#endif
  return FP4_ERR_UNSUPPORTED;
#endif
}

static fp4_status static_checks(const fp4_problem *p, char *reason, size_t reason_size) {
  if (p->op == FP4_OP_QUANTIZE) {
    fp4_reason(reason, reason_size, "the cudnn backend does not quantize (use the cuda or cpu backend)");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->memory != FP4_MEMORY_DEVICE) {
    fp4_reason(reason, reason_size, "cuDNN runs on device memory");
    return FP4_ERR_UNSUPPORTED;
  }
  if ((p->op == FP4_OP_MM && p->a_q->layout != FP4_LAYOUT_128X4) || p->b->layout != FP4_LAYOUT_128X4) {
    fp4_reason(reason, reason_size, "cuDNN block scales must be in the 128x4 layout (F8_128x4)");
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

#if HAVE_CUDNN_GRAPH

/* The loaded table: every caller below runs after dnn_available() or state_get() loaded it. */
static const fp4_cudnn_api *api(void) { return fp4_cudnn(NULL, 0); }

enum { MAX_DESCS = 40, MEMO = 16, MAX_CFGS = 8 };
enum { UID_A = 1, UID_SFA, UID_B, UID_SFB, UID_ALPHA, UID_OUT, UID_DA = 10, UID_DB, UID_C };

typedef struct plan_key {
  int op, format, a_dtype, out_dtype;
  int64_t m, n, k, lda, ldd;
} plan_key;

typedef struct dnn_plan {
  plan_key key;
  int ok;
  char reason[256];
  cudnnBackendDescriptor_t plan;
  int64_t workspace;
  cudnnBackendDescriptor_t descs[MAX_DESCS]; /* everything the plan was built from, kept alive */
  int ndescs;
} dnn_plan;

typedef struct dnn_state {
  int device;
  cudnnHandle_t handle;
  dnn_plan memo[MEMO];
  int memo_count, memo_next;
} dnn_state;

static void plan_clear(dnn_plan *pl) {
  for (int i = pl->ndescs - 1; i >= 0; i--) api()->cudnnBackendDestroyDescriptor(pl->descs[i]);
  memset(pl, 0, sizeof *pl);
}

static void dnn_release(void *state) {
  dnn_state *s = state;
  if (!s) return;
  cudaSetDevice(s->device);
  for (int i = 0; i < s->memo_count; i++) plan_clear(&s->memo[i]);
  if (s->handle) api()->cudnnDestroy(s->handle);
  free(s);
}

/* 1 when work queued on stream is being captured into a CUDA graph (a failed query counts as
 * capturing: nothing is built or allocated on a stream whose state is unknown). */
static int capturing(void *stream) {
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return status != cudaStreamCaptureStatusNone;
}

static const char capture_hint[] =
    "cuDNN builds its handle and a shape's execution plan on first use, which must not happen while the stream is "
    "captured into a CUDA graph: run the call once, or ask fp4_mm_workspace_size / fp4_mm_w4a16_workspace_size for "
    "it, before the capture";

/* The context's state, created on first use (never while stream is being captured). */
static fp4_status state_get(fp4_context *ctx, void *stream, dnn_state **out) {
  void **slot = fp4_context_state(ctx, name);
  if (!slot) return fp4_fail(FP4_ERR_INTERNAL, "cudnn: no context slot");
  cudaError_t ce = cudaSetDevice(fp4_context_device(ctx));
  if (ce != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "cudnn: cudaSetDevice: %s", cudaGetErrorString(ce));
  if (!*slot) {
    char why[256];
    if (!fp4_cudnn(why, sizeof why)) return fp4_fail(FP4_ERR_UNSUPPORTED, "cudnn: %s", why);
    if (capturing(stream)) return fp4_fail(FP4_ERR_UNSUPPORTED, "cudnn: %s", capture_hint);
    dnn_state *s = calloc(1, sizeof *s);
    if (!s) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "cudnn: out of host memory");
    s->device = fp4_context_device(ctx);
    cudnnStatus_t st = api()->cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      free(s);
      return fp4_fail(FP4_ERR_CUDA, "cudnn: cudnnCreate: %s", api()->cudnnGetErrorString(st));
    }
    *slot = s;
  }
  *out = *slot;
  return FP4_OK;
}

/* A graph under construction: the first failing call is remembered with where it happened. */
typedef struct builder {
  dnn_plan *pl;
  cudnnStatus_t st;
  const char *where;
} builder;

static cudnnBackendDescriptor_t make(builder *b, cudnnBackendDescriptorType_t type, const char *where) {
  cudnnBackendDescriptor_t d = NULL;
  if (b->st) return NULL;
  if (b->pl->ndescs == MAX_DESCS) {
    b->st = CUDNN_STATUS_INTERNAL_ERROR;
    b->where = "too many descriptors";
    return NULL;
  }
  if ((b->st = api()->cudnnBackendCreateDescriptor(type, &d))) {
    b->where = where;
    return NULL;
  }
  b->pl->descs[b->pl->ndescs++] = d;
  return d;
}

static void set(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                int64_t count, const void *value, const char *where) {
  if (b->st) return;
  if ((b->st = api()->cudnnBackendSetAttribute(d, attr, type, count, value))) b->where = where;
}

static void fin(builder *b, cudnnBackendDescriptor_t d, const char *where) {
  if (b->st) return;
  if ((b->st = api()->cudnnBackendFinalize(d))) b->where = where;
}

static cudnnBackendDescriptor_t tensor(builder *b, int64_t uid, cudnnDataType_t type, const int64_t dims[3],
                                       const int64_t strides[3], int is_virtual, int by_value, int reorder_128x4,
                                       const char *where) {
  cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, where);
  int64_t align = by_value ? 4 : 16;
  bool virt = is_virtual != 0, byv = by_value != 0;
  set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, where);
  set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims, where);
  set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides, where);
  set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, where);
  set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, where);
  set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, where);
  if (by_value) set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv, where);
  if (reorder_128x4) {
    cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F8_128x4;
    set(b, t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r, where);
  }
  fin(b, t, where);
  return t;
}

static cudnnBackendDescriptor_t dequantize(builder *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t scale,
                                           cudnnBackendDescriptor_t y, int32_t bs0, int32_t bs1, const char *where) {
  cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR, where);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  int32_t block[2] = {bs0, bs1};
  set(b, op, CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, where);
  set(b, op, CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale, where);
  set(b, op, CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, where);
  set(b, op, CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, where);
  set(b, op, CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE, CUDNN_TYPE_INT32, 2, block, where);
  fin(b, op, where);
  return op;
}

static cudnnDataType_t dnn_type(fp4_dtype t) {
  return t == FP4_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : t == FP4_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static plan_key key_of(const fp4_problem *p) {
  plan_key k;
  memset(&k, 0, sizeof k);
  k.op = (int)p->op;
  k.format = (int)p->b->format;
  k.a_dtype = p->op == FP4_OP_MM ? -1 : (int)p->a->dtype;
  k.out_dtype = (int)p->out->dtype;
  k.m = fp4_problem_m(p);
  k.n = fp4_problem_n(p);
  k.k = fp4_problem_k(p);
  k.lda = p->op == FP4_OP_MM ? k.k : (p->a->ld ? p->a->ld : k.k);
  k.ldd = p->out->ld ? p->out->ld : k.n;
  return k;
}

static void build(dnn_state *s, const plan_key *k, dnn_plan *pl) {
  builder b = {pl, CUDNN_STATUS_SUCCESS, NULL};
  const int bs = k->format == FP4_FORMAT_NVFP4 ? 16 : 32;
  const cudnnDataType_t sf_type = k->format == FP4_FORMAT_NVFP4 ? CUDNN_DATA_FP8_E4M3 : CUDNN_DATA_FP8_E8M0;
  const int64_t M = k->m, N = k->n, K = k->k, Mp = (M + 127) / 128 * 128, Np = (N + 127) / 128 * 128;
  const int64_t Cp = (K / bs + 3) / 4 * 4;
  cudnnBackendDescriptor_t ops[4];
  int nops = 0;

  /* B = the weights [N, K] row-major seen as K x N (K-major), scales as Cp x Np. */
  const int64_t db[3] = {1, K, N}, sb[3] = {K * N, 1, K};
  const int64_t dsfb[3] = {1, Cp, Np}, ssfb[3] = {Cp * Np, 1, Cp};
  cudnnBackendDescriptor_t tb = tensor(&b, UID_B, CUDNN_DATA_FP4_E2M1, db, sb, 0, 0, 0, "tensor B");
  cudnnBackendDescriptor_t tsfb = tensor(&b, UID_SFB, sf_type, dsfb, ssfb, 0, 0, 1, "tensor SFB");
  cudnnBackendDescriptor_t tdb = tensor(&b, UID_DB, CUDNN_DATA_FLOAT, db, sb, 1, 0, 0, "tensor dequantized B");
  ops[nops++] = dequantize(&b, tb, tsfb, tdb, bs, 1, "dequantize B");

  const int64_t da[3] = {1, M, K}, sa[3] = {M * k->lda, k->lda, 1};
  cudnnBackendDescriptor_t tamm;
  if (k->op == FP4_OP_MM) {
    const int64_t dsfa[3] = {1, Mp, Cp}, ssfa[3] = {Mp * Cp, Cp, 1};
    cudnnBackendDescriptor_t ta = tensor(&b, UID_A, CUDNN_DATA_FP4_E2M1, da, sa, 0, 0, 0, "tensor A");
    cudnnBackendDescriptor_t tsfa = tensor(&b, UID_SFA, sf_type, dsfa, ssfa, 0, 0, 1, "tensor SFA");
    tamm = tensor(&b, UID_DA, CUDNN_DATA_FLOAT, da, sa, 1, 0, 0, "tensor dequantized A");
    ops[nops++] = dequantize(&b, ta, tsfa, tamm, 1, bs, "dequantize A");
  } else {
    tamm = tensor(&b, UID_A, dnn_type((fp4_dtype)k->a_dtype), da, sa, 0, 0, 0, "tensor A");
  }

  const int64_t dc[3] = {1, M, N}, sc[3] = {M * N, N, 1}, so[3] = {M * k->ldd, k->ldd, 1}, d1[3] = {1, 1, 1};
  cudnnBackendDescriptor_t tc = tensor(&b, UID_C, CUDNN_DATA_FLOAT, dc, sc, 1, 0, 0, "tensor C");
  cudnnBackendDescriptor_t talpha = tensor(&b, UID_ALPHA, CUDNN_DATA_FLOAT, d1, d1, 0, 1, 0, "tensor alpha");
  cudnnBackendDescriptor_t tout = tensor(&b, UID_OUT, dnn_type((fp4_dtype)k->out_dtype), dc, so, 0, 0, 0, "tensor out");

  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t mm = make(&b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
  set(&b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul");
  fin(&b, mm, "matmul");
  cudnnBackendDescriptor_t opmm = make(&b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
  set(&b, opmm, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tamm, "matmul operation");
  set(&b, opmm, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tdb, "matmul operation");
  set(&b, opmm, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tc, "matmul operation");
  set(&b, opmm, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul operation");
  fin(&b, opmm, "matmul operation");
  ops[nops++] = opmm;

  cudnnPointwiseMode_t mul = CUDNN_POINTWISE_MUL;
  cudnnBackendDescriptor_t pw = make(&b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "alpha multiply");
  set(&b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mul, "alpha multiply");
  set(&b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f32, "alpha multiply");
  fin(&b, pw, "alpha multiply");
  cudnnBackendDescriptor_t oppw = make(&b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "alpha operation");
  set(&b, oppw, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "alpha operation");
  set(&b, oppw, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tc, "alpha operation");
  set(&b, oppw, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &talpha, "alpha operation");
  set(&b, oppw, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tout, "alpha operation");
  fin(&b, oppw, "alpha operation");
  ops[nops++] = oppw;

  cudnnBackendDescriptor_t graph = make(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops, "operation graph");
  set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle, "operation graph");
  fin(&b, graph, "operation graph finalize");

  cudnnBackendDescriptor_t heur = make(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics");
  set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
  fin(&b, heur, "heuristics finalize");
  int64_t ncfg = 0;
  if (!b.st && (b.st = api()->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &ncfg, NULL)))
    b.where = "heuristics results";
  char ver[48], last[256] = "";
  version_text(ver, sizeof ver);
  if (b.st) {
    api()->cudnnGetLastErrorString(last, sizeof last);
    snprintf(pl->reason, sizeof pl->reason, "%s: %s failed: %s%s%s", ver, b.where, api()->cudnnGetErrorString(b.st), last[0] ? ": " : "", last);
    return;
  }
  if (ncfg == 0) {
    snprintf(pl->reason, sizeof pl->reason, "%s: no engine config for the block-scale dequantize + matmul graph (heuristics mode A)", ver);
    return;
  }
  if (ncfg > MAX_CFGS) ncfg = MAX_CFGS;
  cudnnBackendDescriptor_t cfgs[MAX_CFGS];
  for (int64_t i = 0; i < ncfg; i++) cfgs[i] = make(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
  int64_t got = 0;
  if (!b.st && (b.st = api()->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &got, cfgs)))
    b.where = "heuristics results";
  cudnnStatus_t plan_st = CUDNN_STATUS_SUCCESS;
  for (int64_t i = 0; !b.st && i < got && !pl->ok; i++) {
    cudnnBackendDescriptor_t plan = make(&b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
    set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &s->handle, "execution plan");
    set(&b, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i], "execution plan");
    if (b.st) break;
    plan_st = api()->cudnnBackendFinalize(plan);
    if (plan_st) {
      api()->cudnnGetLastErrorString(last, sizeof last);
      continue;
    }
    int64_t n = 0;
    if ((b.st = api()->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &pl->workspace)))
      b.where = "plan workspace size";
    else {
      pl->plan = plan;
      pl->ok = 1;
      snprintf(pl->reason, sizeof pl->reason, "%s: execution plan from engine config %lld of %lld", ver, (long long)i, (long long)got);
    }
  }
  if (pl->ok) return;
  if (!b.st && got == 0) {
    snprintf(pl->reason, sizeof pl->reason, "%s: heuristics (mode A) returned no engine config for the block-scale dequantize + matmul graph", ver);
  } else if (b.st) {
    api()->cudnnGetLastErrorString(last, sizeof last);
    snprintf(pl->reason, sizeof pl->reason, "%s: %s failed: %s%s%s", ver, b.where, api()->cudnnGetErrorString(b.st), last[0] ? ": " : "", last);
  } else {
    snprintf(pl->reason, sizeof pl->reason, "%s: no execution plan (%lld engine configs, last: %s%s%s)", ver, (long long)got,
             api()->cudnnGetErrorString(plan_st), last[0] ? ": " : "", last);
  }
}

/* The execution plan for p, built on first use; NULL (and the reason in fp4_last_error()) when it
 * would have to be built while p's stream is being captured. */
static dnn_plan *plan_for(dnn_state *s, const fp4_problem *p) {
  plan_key k = key_of(p);
  for (int i = 0; i < s->memo_count; i++)
    if (!memcmp(&s->memo[i].key, &k, sizeof k)) return &s->memo[i];
  if (capturing(p->stream)) {
    fp4_fail(FP4_ERR_UNSUPPORTED, "cudnn: %s", capture_hint);
    return NULL;
  }
  dnn_plan *pl = &s->memo[s->memo_next];
  s->memo_next = (s->memo_next + 1) % MEMO;
  if (s->memo_count < MEMO) s->memo_count++;
  else plan_clear(pl);
  memset(pl, 0, sizeof *pl);
  pl->key = k;
  build(s, &k, pl);
  return pl;
}
#endif /* HAVE_CUDNN_GRAPH */

static fp4_status dnn_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  fp4_status st = static_checks(p, reason, reason_size);
  if (st) return st;
#if HAVE_CUDNN_GRAPH
  dnn_state *s = NULL;
  if ((st = state_get(ctx, p->stream, &s))) {
    fp4_reason(reason, reason_size, "%s", fp4_last_error());
    fp4_clear_error();
    return FP4_ERR_UNSUPPORTED;
  }
  const dnn_plan *pl = plan_for(s, p);
  fp4_reason(reason, reason_size, "%s", pl ? pl->reason : fp4_last_error());
  fp4_clear_error();
  return pl && pl->ok ? FP4_OK : FP4_ERR_UNSUPPORTED;
#else
  (void)ctx;
  return dnn_available(ctx, reason, reason_size);
#endif
}

static fp4_status dnn_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  if (config && strcmp(config, "default"))
    return fp4_fail(FP4_ERR_NOT_FOUND, "cudnn: unknown config '%s' (cuDNN's heuristics choose; only 'default')", config);
#if HAVE_CUDNN_GRAPH
  dnn_state *s = NULL;
  fp4_status st = state_get(ctx, p->stream, &s);
  if (st) return st;
  dnn_plan *pl = plan_for(s, p);
  if (!pl) return FP4_ERR_UNSUPPORTED;
  if (!pl->ok) return fp4_fail(FP4_ERR_UNSUPPORTED, "cudnn: %s", pl->reason);
  void *workspace = NULL;
  if ((st = fp4_context_workspace(ctx, (size_t)pl->workspace, p->stream, "cudnn", &workspace))) return st;
  float alpha = p->alpha * p->b->multiplier * (p->op == FP4_OP_MM ? p->a_q->multiplier : 1.0f);
  int64_t uids[6];
  void *ptrs[6];
  int n = 0;
  uids[n] = UID_B, ptrs[n++] = p->b->data;
  uids[n] = UID_SFB, ptrs[n++] = p->b->scales;
  if (p->op == FP4_OP_MM) {
    uids[n] = UID_A, ptrs[n++] = p->a_q->data;
    uids[n] = UID_SFA, ptrs[n++] = p->a_q->scales;
  } else {
    uids[n] = UID_A, ptrs[n++] = p->a->data;
  }
  uids[n] = UID_ALPHA, ptrs[n++] = &alpha;
  uids[n] = UID_OUT, ptrs[n++] = p->out->data;
  cudnnBackendDescriptor_t vp = NULL;
  cudnnStatus_t ds = api()->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (!ds) ds = api()->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (!ds) ds = api()->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (!ds) ds = api()->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (!ds) ds = api()->cudnnBackendFinalize(vp);
  if (!ds) ds = api()->cudnnSetStream(s->handle, (cudaStream_t)p->stream);
  if (!ds) ds = api()->cudnnBackendExecute(s->handle, pl->plan, vp);
  if (vp) api()->cudnnBackendDestroyDescriptor(vp);
  if (ds) {
    char last[256] = "";
    api()->cudnnGetLastErrorString(last, sizeof last);
    return fp4_fail(FP4_ERR_CUDA, "cudnn: execute: %s %s", api()->cudnnGetErrorString(ds), last);
  }
  if (info) {
    fp4_reason(info->backend, sizeof info->backend, "%s", name);
    snprintf(info->config, sizeof info->config, "default");
    if (p->enable_pdl) snprintf(info->note, sizeof info->note, "cuDNN launches its own kernels; enable_pdl is not honoured");
  }
  return FP4_OK;
#else
  (void)ctx, (void)p, (void)info;
  char why[160];
  dnn_available(ctx, why, sizeof why);
  return fp4_fail(FP4_ERR_UNSUPPORTED, "cudnn: %s", why);
#endif
}

/* The plan's workspace (building the plan if needed, outside capture). */
static size_t dnn_workspace_size(fp4_context *ctx, const fp4_problem *p, const char *config) {
  (void)config;
#if HAVE_CUDNN_GRAPH
  char why[256];
  dnn_state *s = NULL;
  const dnn_plan *pl = NULL;
  if (!static_checks(p, why, sizeof why) && !dnn_available(ctx, why, sizeof why) && !state_get(ctx, p->stream, &s))
    pl = plan_for(s, p);
  fp4_clear_error();
  return pl && pl->ok ? (size_t)pl->workspace : 0;
#else
  (void)ctx, (void)p;
  return 0;
#endif
}

#define setcap fp4_probe_set
extern const fp4_backend fp4_backend_cudnn;

static fp4_status dnn_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out) {
  char why[192];
  out->device_memory = 1;
  setcap(out, FP4_CAP_GROUPED, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "this backend does not implement grouped GEMM / the MoE layer");
  setcap(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "cuDNN launches its own kernels; enable_pdl is not honoured");
#if !HAVE_CUDNN_GRAPH
  (void)arch;
  dnn_available(ctx, why, sizeof why);
  out->available = FP4_SUPPORT_NO;
  fp4_reason(out->reason, sizeof out->reason, "%s", why);
  for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) setcap(out, (fp4_cap)c, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
  return FP4_OK;
#else
  if (!ctx) {
    out->available = FP4_SUPPORT_UNKNOWN;
    snprintf(out->reason, sizeof out->reason, "decided by cuDNN's heuristics and execution plans on the device");
    snprintf(why, sizeof why, "asked of cuDNN at run time (%s %s an FP4 MMA)", arch->name, arch->fp4_mma ? "has" : "has no");
    for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) setcap(out, (fp4_cap)c, FP4_SUPPORT_UNKNOWN, FP4_EVIDENCE_TABLE, why);
    return FP4_OK;
  }
  if (dnn_available(ctx, why, sizeof why)) {
    out->available = FP4_SUPPORT_NO;
    fp4_reason(out->reason, sizeof out->reason, "%s", why);
    for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) setcap(out, (fp4_cap)c, FP4_SUPPORT_NO, FP4_EVIDENCE_QUERIED, why);
    return FP4_OK;
  }
  out->available = FP4_SUPPORT_YES;
  fp4_probe_ask_supports(ctx, &fp4_backend_cudnn, FP4_MEMORY_DEVICE, FP4_CAP_NVFP4_W4A4, FP4_CAP_W4A16, out);
  return FP4_OK;
#endif
}

/* Behind cuBLASLt where FP4 is native (SM100+), last below. */
static const fp4_backend_ranks dnn_ranks =
    /* quantize, SM80-SM90 M small, large; SM100/103 small, large; SM120/121 small, large */
    FP4_DEVICE_RANKS(2, 3, 3, 2, 1, 2, 1);

const fp4_backend fp4_backend_cudnn = {
    .name = name,
    .summary = "cuDNN graph API: block-scale dequantize + matmul (support asked of cuDNN's execution plans)",
    .available = dnn_available,
    .supports = dnn_supports,
    .configs = NULL,
    .run = dnn_run,
#if HAVE_CUDNN_GRAPH
    .release_state = dnn_release,
#else
    .release_state = NULL,
#endif
    .probe = dnn_probe,
    .workspace_size = dnn_workspace_size,
    .ranks = &dnn_ranks,
};
