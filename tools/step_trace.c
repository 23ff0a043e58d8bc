/*
 * Kernel timelines of CUDA graph replays through CUPTI's activity API (step_trace.h). libcupti is
 * loaded at run time (dlopen), so the command runs and says why where it is missing; the build needs
 * cupti.h, which the CUDA toolkit installs.
 */
#include "step_trace.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void step_trace_short_name(const char *name, char *out, size_t size) {
  if (!size) return;
  out[0] = '\0';
  if (!name) return;
  const char *p = name;
  if (!strncmp(p, "_Z", 2)) { /* Itanium mangling: the last component of the (nested) name */
    p += 2;
    const int nested = *p == 'N';
    if (nested) p++;
    const char *last = NULL;
    size_t last_len = 0;
    while (isdigit((unsigned char)*p)) {
      char *end;
      const unsigned long len = strtoul(p, &end, 10);
      if (!len || strlen(end) < len) break;
      last = end, last_len = len;
      p = end + len;
      if (!nested) break;
    }
    if (last) {
      const size_t n = last_len < size - 1 ? last_len : size - 1;
      memcpy(out, last, n);
      out[n] = '\0';
      return;
    }
    p = name;
  }
  /* plain ("void <unnamed>::k<1>(args)" -> "k"): the characters outside <...> and (...), then the
   * identifier after the last space or colon */
  char flat[256];
  size_t m = 0;
  int depth = 0;
  for (const char *q = p; *q && m < sizeof flat - 1; q++) {
    if (*q == '<' || *q == '(') depth++;
    else if ((*q == '>' || *q == ')') && depth > 0) depth--;
    else if (!depth) flat[m++] = *q;
  }
  flat[m] = '\0';
  const char *start = flat;
  for (const char *q = flat; *q; q++)
    if (*q == ' ' || *q == ':') start = q + 1;
  snprintf(out, size, "%s", start);
}

static int by_start(const void *a, const void *b) {
  const step_trace_kernel *x = a, *y = b;
  return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns ? 1 : (x->end_ns > y->end_ns) - (x->end_ns < y->end_ns);
}

void step_trace_summarize(step_trace_kernel *k, int n, int64_t layers, step_trace_summary *out) {
  memset(out, 0, sizeof *out);
  out->kernels = n;
  if (n <= 0) return;
  qsort(k, (size_t)n, sizeof *k, by_start);
  out->period = layers > 0 && n % layers == 0 && n / layers <= STEP_TRACE_MAX_PERIOD ? (int)(n / layers) : 0;
  double gap_sum[STEP_TRACE_MAX_PERIOD] = {0}, dur_sum[STEP_TRACE_MAX_PERIOD] = {0};
  int gaps[STEP_TRACE_MAX_PERIOD] = {0};
  uint64_t reach = k[0].end_ns, busy = 0, open_start = k[0].start_ns; /* the union, interval by interval */
  for (int i = 0; i < n; i++) {
    const uint64_t s = k[i].start_ns, e = k[i].end_ns > s ? k[i].end_ns : s;
    out->sum_us += (double)(e - s) * 1e-3;
    const double gap = i ? ((double)s - (double)reach) * 1e-3 : 0.0;
    if (i && s > reach) { /* a hole: close the busy run */
      busy += reach - open_start;
      open_start = s;
    }
    if (out->period) {
      const int slot = i % out->period;
      if (i < out->period) step_trace_short_name(k[i].name, out->slots[slot].name, sizeof out->slots[slot].name);
      out->slots[slot].count++;
      dur_sum[slot] += (double)(e - s) * 1e-3;
      if (i) {
        gap_sum[slot] += gap;
        gaps[slot]++;
      }
    }
    if (!i || e > reach) reach = e;
  }
  busy += reach - open_start;
  out->busy_us = (double)busy * 1e-3;
  out->span_us = (double)(reach - k[0].start_ns) * 1e-3;
  for (int s = 0; s < out->period; s++) {
    out->slots[s].mean_us = out->slots[s].count ? dur_sum[s] / out->slots[s].count : 0.0;
    out->slots[s].gap_us = gaps[s] ? gap_sum[s] / gaps[s] : 0.0;
  }
}

#if defined(FP4KIT_HAVE_CUDA) && defined(FP4KIT_HAVE_CUPTI_H)
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

/* The CUPTI entry points used here, from libcupti loaded once. */
typedef struct cupti_api {
  void *lib;
  char why[300];
  int tried;
  CUptiResult (*get_version)(uint32_t *);
  CUptiResult (*result_string)(CUptiResult, const char **);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
} cupti_api;

static cupti_api g_cupti;

/* The kernels the completed buffers hold (the callbacks have no user pointer: one trace at a time). */
static struct {
  step_trace_kernel *k;
  uint32_t *corr;
  int n, cap, dropped;
} g_rec;

static int cupti_load(void) {
  if (g_cupti.tried) return g_cupti.lib != NULL;
  g_cupti.tried = 1;
  /* the toolkit's library beside the one this build found, then the loader's search path */
  static const char *const names[] = {
#ifdef FP4KIT_CUPTI_LIBRARY
      FP4KIT_CUPTI_LIBRARY,
#endif
      "libcupti.so.13", "libcupti.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names && !g_cupti.lib; i++) g_cupti.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!g_cupti.lib) {
    snprintf(g_cupti.why, sizeof g_cupti.why, "CUPTI not found: %s", dlerror());
    return 0;
  }
  *(void **)&g_cupti.get_version = dlsym(g_cupti.lib, "cuptiGetVersion");
  *(void **)&g_cupti.result_string = dlsym(g_cupti.lib, "cuptiGetResultString");
  *(void **)&g_cupti.enable = dlsym(g_cupti.lib, "cuptiActivityEnable");
  *(void **)&g_cupti.disable = dlsym(g_cupti.lib, "cuptiActivityDisable");
  *(void **)&g_cupti.register_callbacks = dlsym(g_cupti.lib, "cuptiActivityRegisterCallbacks");
  *(void **)&g_cupti.flush_all = dlsym(g_cupti.lib, "cuptiActivityFlushAll");
  *(void **)&g_cupti.next_record = dlsym(g_cupti.lib, "cuptiActivityGetNextRecord");
  uint32_t version = 0;
  if (!g_cupti.get_version || !g_cupti.result_string || !g_cupti.enable || !g_cupti.disable ||
      !g_cupti.register_callbacks || !g_cupti.flush_all || !g_cupti.next_record) {
    snprintf(g_cupti.why, sizeof g_cupti.why, "the CUPTI library found lacks an entry point this command uses");
  } else if (g_cupti.get_version(&version) != CUPTI_SUCCESS || version / 10000 != CUPTI_API_VERSION / 10000) {
    /* kernel records change layout between major versions (CUpti_ActivityKernel<N>) */
    snprintf(g_cupti.why, sizeof g_cupti.why, "CUPTI version %u found; this build reads the kernel records of version %u",
             version, (unsigned)CUPTI_API_VERSION);
  } else {
    return 1;
  }
  dlclose(g_cupti.lib);
  g_cupti.lib = NULL;
  return 0;
}

enum { kTraceBuffer = 4 << 20 };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, kTraceBuffer);
  *size = *buffer ? kTraceBuffer : 0;
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  while (buffer && g_cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *kr = (const CUpti_ActivityKernel10 *)rec;
    if (g_rec.n == g_rec.cap) {
      const int cap = g_rec.cap ? 2 * g_rec.cap : 1024;
      step_trace_kernel *k = realloc(g_rec.k, (size_t)cap * sizeof *k);
      uint32_t *c = k ? realloc(g_rec.corr, (size_t)cap * sizeof *c) : NULL;
      if (k) g_rec.k = k;
      if (c) g_rec.corr = c;
      if (!k || !c) {
        g_rec.dropped++;
        continue;
      }
      g_rec.cap = cap;
    }
    step_trace_kernel *d = &g_rec.k[g_rec.n];
    /* shortened here, not in the summary: nvcc's mangled names run past STEP_TRACE_NAME (its
     * anonymous namespaces carry the file's name and a hash) */
    step_trace_short_name(kr->name ? kr->name : "?", d->name, sizeof d->name);
    d->start_ns = kr->start;
    d->end_ns = kr->end;
    g_rec.corr[g_rec.n++] = kr->correlationId;
  }
  free(buffer);
}

static fp4_status cupti_fail(CUptiResult r, const char *what, char *why, size_t why_size) {
  const char *s = NULL;
  if (g_cupti.result_string(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
  snprintf(why, why_size, "%s: %s", what, s);
  return FP4_ERR_CUDA;
}

fp4_status step_trace_graph(void *exec, void *stream, step_trace_kernel **k, int *n, char *why, size_t why_size) {
  *k = NULL;
  *n = 0;
  if (!cupti_load()) {
    snprintf(why, why_size, "%s", g_cupti.why);
    return FP4_ERR_UNSUPPORTED;
  }
  cudaGraphExec_t ge = (cudaGraphExec_t)exec;
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t ce = cudaGraphLaunch(ge, s);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(s);
  if (ce != cudaSuccess) {
    snprintf(why, why_size, "the untraced replay: %s", cudaGetErrorString(ce));
    return FP4_ERR_CUDA;
  }
  memset(&g_rec, 0, sizeof g_rec);
  static int registered; /* once per process: the buffers' callbacks stay for every later trace */
  CUptiResult r = CUPTI_SUCCESS;
  if (!registered && (r = g_cupti.register_callbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS)
    return cupti_fail(r, "cuptiActivityRegisterCallbacks", why, why_size);
  registered = 1;
  if ((r = g_cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS)
    return cupti_fail(r, "cuptiActivityEnable", why, why_size);
  for (int i = 0; i < 3 && ce == cudaSuccess; i++) ce = cudaGraphLaunch(ge, s);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(s);
  r = g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_cupti.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  fp4_status st = FP4_OK;
  if (ce != cudaSuccess) {
    snprintf(why, why_size, "the traced replays: %s", cudaGetErrorString(ce));
    st = FP4_ERR_CUDA;
  } else if (r != CUPTI_SUCCESS) {
    st = cupti_fail(r, "cuptiActivityFlushAll", why, why_size);
  } else if (g_rec.dropped) {
    snprintf(why, why_size, "%d kernel records dropped (no host memory)", g_rec.dropped);
    st = FP4_ERR_OUT_OF_MEMORY;
  } else if (!g_rec.n) {
    snprintf(why, why_size, "CUPTI recorded no kernel of the replays");
    st = FP4_ERR_CUDA;
  }
  if (!st) { /* the last launch: its kernels share the launch's correlation id, the largest */
    uint32_t last = 0;
    for (int i = 0; i < g_rec.n; i++) last = g_rec.corr[i] > last ? g_rec.corr[i] : last;
    int m = 0;
    for (int i = 0; i < g_rec.n; i++)
      if (g_rec.corr[i] == last) g_rec.k[m++] = g_rec.k[i];
    *k = g_rec.k;
    *n = m;
    g_rec.k = NULL;
  }
  free(g_rec.k);
  free(g_rec.corr);
  memset(&g_rec, 0, sizeof g_rec);
  return st;
}

#else

fp4_status step_trace_graph(void *exec, void *stream, step_trace_kernel **k, int *n, char *why, size_t why_size) {
  (void)exec, (void)stream;
  *k = NULL;
  *n = 0;
#ifdef FP4KIT_HAVE_CUDA
  snprintf(why, why_size, "this build found no cupti.h beside the CUDA toolkit");
#else
  snprintf(why, why_size, "this build has no CUDA");
#endif
  return FP4_ERR_UNSUPPORTED;
}

#endif
