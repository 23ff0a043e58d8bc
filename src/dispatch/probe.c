/*
 * The capability probe: devices (name, compute capability, versions) and, per backend, what it can
 * do here with a reason for every "no". Backends with a probe callback answer for themselves (the
 * vendor backends ask their library); for the others the answers are derived from available() and
 * supports() on representative problems. `--arch` questions are answered from the architecture
 * table and the build targets alone.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cublaslt/cublaslt_api.h"
#include "backends/cudnn/cudnn_api.h"
#include "core/error.h"
#include "dispatch/arch.h"
#include "dispatch/backend.h"
#include "dispatch/dispatch.h"
#include "dispatch/probe.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

const char *fp4_cap_name(fp4_cap cap) {
  static const char *const names[] = {"nvfp4 w4a4", "mxfp4 w4a4", "w4a16", "grouped/moe", "pdl"};
  return (int)cap >= 0 && cap < FP4_CAP_COUNT ? names[cap] : NULL;
}

const char *fp4_support_name(fp4_support s) {
  switch (s) {
  case FP4_SUPPORT_NO: return "no";
  case FP4_SUPPORT_YES: return "yes";
  case FP4_SUPPORT_UNKNOWN: return "unknown";
  }
  return NULL;
}

const char *fp4_evidence_name(fp4_evidence e) {
  switch (e) {
  case FP4_EVIDENCE_TABLE: return "table";
  case FP4_EVIDENCE_QUERIED: return "queried";
  case FP4_EVIDENCE_EXECUTED: return "executed";
  case FP4_EVIDENCE_FAILED: return "failed";
  }
  return NULL;
}

int fp4_probe_device_count(void) {
#if FP4KIT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* no driver or no device: not an error of the caller */
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

fp4_status fp4_probe_device(int device, fp4_device_probe *out) {
  fp4_clear_error();
  if (!out) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_probe_device: out is NULL");
  memset(out, 0, sizeof *out);
  out->device = device;
#if FP4KIT_HAVE_CUDA
  int n = fp4_probe_device_count();
  if (device < 0 || device >= n)
    return fp4_fail(FP4_ERR_NOT_FOUND, "fp4_probe_device: device %d does not exist (%d CUDA devices visible)", device, n);
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "fp4_probe_device: cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
  fp4_reason(out->name, sizeof out->name, "%s", prop.name);
  out->cc = prop.major * 10 + prop.minor;
  out->sm_count = prop.multiProcessorCount;
  out->memory_bytes = (uint64_t)prop.totalGlobalMem;
  cudaDriverGetVersion(&out->driver_version);
  cudaRuntimeGetVersion(&out->runtime_version);
  out->cublaslt_version = fp4_cublaslt_version(); /* 0 when the library cannot be loaded */
  out->cudnn_version = fp4_cudnn_version();
  out->binary_has_code = fp4_arch_build_runs_on(out->cc);
  snprintf(out->arch, sizeof out->arch, "sm_%d", out->cc);
  return FP4_OK;
#else
  return fp4_fail(FP4_ERR_UNSUPPORTED, "fp4_probe_device: this fp4kit was built without CUDA");
#endif
}

int fp4_device_cc(int device) {
  /* Remembered per process: cudaGetDeviceProperties is too slow for every auto selection. Races
   * only repeat the same query. */
  enum { MAX_DEVICES = 64 };
  static int cc[MAX_DEVICES];
  if (device < 0 || device >= MAX_DEVICES) return 0;
#if FP4KIT_HAVE_CUDA
  if (!cc[device]) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess)
      cc[device] = major * 10 + minor;
    else
      cudaGetLastError();
  }
#endif
  return cc[device];
}

/* ---- backends ----------------------------------------------------------------------------------------- */

void fp4_probe_set(fp4_backend_probe *out, fp4_cap cap, fp4_support s, fp4_evidence e, const char *reason) {
  out->caps[cap].support = s;
  out->caps[cap].evidence = e;
  fp4_reason(out->caps[cap].reason, sizeof out->caps[cap].reason, "%s", reason);
}
#define set_cap fp4_probe_set

void fp4_probe_unavailable(fp4_backend_probe *out, fp4_evidence evidence, const char *reason) {
  out->available = FP4_SUPPORT_NO;
  fp4_reason(out->reason, sizeof out->reason, "%s", reason);
  for (int c = 0; c < FP4_CAP_COUNT; c++) fp4_probe_set(out, (fp4_cap)c, FP4_SUPPORT_NO, evidence, reason);
}

/* A representative problem of a capability (pointers are never read by supports()). */
typedef struct probe_problem {
  fp4_qmatrix aq, b;
  fp4_matrix a, out;
  fp4_problem p;
} probe_problem;

static void make_problem(probe_problem *pp, fp4_cap cap, fp4_memory memory) {
  _Alignas(256) static uint8_t dummy[256];
  const fp4_format f = cap == FP4_CAP_MXFP4_W4A4 ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
  const int64_t M = 128, N = 1024, K = 1024;
  pp->aq = (fp4_qmatrix){dummy, dummy, M, K, f, FP4_LAYOUT_128X4, 1.0f, memory};
  pp->b = (fp4_qmatrix){dummy, dummy, N, K, f, FP4_LAYOUT_128X4, 1.0f, memory};
  pp->a = (fp4_matrix){dummy, M, K, 0, FP4_DTYPE_BF16, memory};
  pp->out = (fp4_matrix){dummy, M, N, 0, FP4_DTYPE_BF16, memory};
  pp->p = (fp4_problem){.op = cap == FP4_CAP_W4A16 ? FP4_OP_MM_W4A16 : FP4_OP_MM, .a_q = &pp->aq, .a = &pp->a,
                        .b = &pp->b, .alpha = 1.0f, .out = &pp->out, .memory = memory};
}

void fp4_probe_ask_supports(fp4_context *ctx, const fp4_backend *b, fp4_memory memory, fp4_cap first, fp4_cap last,
                            fp4_backend_probe *out) {
  char why[256];
  for (int c = (int)first; c <= (int)last; c++) {
    probe_problem pp;
    make_problem(&pp, (fp4_cap)c, memory);
    fp4_status st = b->supports(ctx, &pp.p, why, sizeof why);
    fp4_probe_set(out, (fp4_cap)c, st ? FP4_SUPPORT_NO : FP4_SUPPORT_YES, FP4_EVIDENCE_QUERIED, why);
  }
}

/* Grouped GEMM / MoE: a backend takes those ops only when its table lists them (extra_ops). */
static void grouped_cap(const fp4_backend *b, int on_device, fp4_backend_probe *out) {
  const unsigned moe_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE);
  if ((b->extra_ops & moe_ops) == moe_ops)
    fp4_probe_set(out, FP4_CAP_GROUPED, FP4_SUPPORT_YES, FP4_EVIDENCE_QUERIED,
                  on_device ? "implements grouped GEMM and the MoE layer on device memory"
                            : "implements grouped GEMM and the MoE layer on host memory");
  else
    fp4_probe_set(out, FP4_CAP_GROUPED, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE,
                  "this backend does not implement grouped GEMM / the MoE layer");
}

/* Derives a backend's answers from available() and supports() (backends without a probe). */
void fp4_probe_generic(fp4_context *ctx, const fp4_backend *b, const fp4_arch_info *arch, fp4_backend_probe *out) {
  char why[256], why_host[256];
  const int device = fp4_context_device(ctx);
  for (int c = 0; c < FP4_CAP_COUNT; c++) set_cap(out, (fp4_cap)c, FP4_SUPPORT_NO, FP4_EVIDENCE_QUERIED, "");
  if (b->available(ctx, why, sizeof why) != FP4_OK) {
    out->available = FP4_SUPPORT_NO;
    fp4_reason(out->reason, sizeof out->reason, "%s", why);
    for (int c = 0; c < FP4_CAP_COUNT; c++) set_cap(out, (fp4_cap)c, FP4_SUPPORT_NO, FP4_EVIDENCE_QUERIED, why);
    return;
  }
  out->available = FP4_SUPPORT_YES;
  int any_device = 0, any_host = 0;
  for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) {
    probe_problem pp;
    fp4_status st = FP4_ERR_UNSUPPORTED;
    why[0] = why_host[0] = 0;
    if (device >= 0) {
      make_problem(&pp, (fp4_cap)c, FP4_MEMORY_DEVICE);
      st = b->supports(ctx, &pp.p, why, sizeof why);
      any_device |= st == FP4_OK;
    }
    if (st != FP4_OK) {
      make_problem(&pp, (fp4_cap)c, FP4_MEMORY_HOST);
      fp4_status hs = b->supports(ctx, &pp.p, why_host, sizeof why_host);
      any_host |= hs == FP4_OK;
      if (hs == FP4_OK || device < 0) fp4_reason(why, sizeof why, "%s", why_host);
      st = hs == FP4_OK ? FP4_OK : st;
    }
    set_cap(out, (fp4_cap)c, st == FP4_OK ? FP4_SUPPORT_YES : FP4_SUPPORT_NO, FP4_EVIDENCE_QUERIED,
            st == FP4_OK ? (any_device ? "supports() accepts it on device memory" : "supports() accepts it on host memory")
                         : why);
  }
  out->device_memory = any_device;
  grouped_cap(b, any_device, out);
  if (!any_device && any_host) {
    set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "host backend: PDL does not apply");
  } else if (arch && !arch->pdl) {
    snprintf(why, sizeof why, "PDL needs SM90+ (griddepcontrol); device is %s", arch->name);
    set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
  } else {
    if (b->honours_pdl)
      set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE,
              "every kernel launches through the PDL helper and waits (griddepcontrol.wait) before reading inputs");
    else
      set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_UNKNOWN, FP4_EVIDENCE_TABLE, "the backend does not report whether it honours enable_pdl");
  }
}

/* A hypothetical architecture for a backend without a probe: host backends do not depend on the
 * GPU; device backends can at least be ruled out when the build has no code for the GPU. */
static void generic_arch_probe(const fp4_backend *b, const fp4_arch_info *arch, fp4_backend_probe *out) {
  char why[256];
  probe_problem pp;
  make_problem(&pp, FP4_CAP_NVFP4_W4A4, FP4_MEMORY_HOST);
  if (b->available(NULL, why, sizeof why) == FP4_OK && b->supports(NULL, &pp.p, why, sizeof why) == FP4_OK) {
    fp4_probe_generic(NULL, b, NULL, out);
    for (int c = 0; c < FP4_CAP_COUNT; c++) out->caps[c].evidence = FP4_EVIDENCE_TABLE;
    return;
  }
  out->device_memory = 1;
  out->available = FP4_SUPPORT_UNKNOWN;
  if (!fp4_arch_build_runs_on(arch->cc)) {
    out->available = FP4_SUPPORT_NO;
    snprintf(why, sizeof why, "binary has no code for %s (built for: %s)", arch->name,
             fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "nothing: built without CUDA");
  } else {
    snprintf(why, sizeof why, "backend '%s' has no probe callback; run fp4kit probe on a %s GPU", b->name, arch->name);
  }
  fp4_reason(out->reason, sizeof out->reason, "%s", why);
  for (int c = 0; c < FP4_CAP_COUNT; c++)
    set_cap(out, (fp4_cap)c, out->available == FP4_SUPPORT_NO ? FP4_SUPPORT_NO : FP4_SUPPORT_UNKNOWN, FP4_EVIDENCE_TABLE, why);
  if (!arch->pdl) {
    fp4_probe_no_pdl(out, arch);
  } else if (b->honours_pdl && out->available != FP4_SUPPORT_NO) {
    snprintf(why, sizeof why, "%s has PDL and every kernel of this backend waits (griddepcontrol.wait) before reading", arch->name);
    set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_YES, FP4_EVIDENCE_TABLE, why);
  }
}

void fp4_probe_no_pdl(fp4_backend_probe *out, const fp4_arch_info *arch) {
  char why[192];
  snprintf(why, sizeof why, "PDL needs SM90+ (griddepcontrol); %s has none", arch->name);
  set_cap(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
}

int fp4_probe_arch_code(const fp4_arch_info *arch, char *why, size_t why_size) {
  const char *targets = fp4_build_cuda_targets();
  if (!fp4_arch_build_runs_on(arch->cc)) {
    fp4_reason(why, why_size, "binary has no code for %s (built for: %s)", arch->name,
               targets[0] ? targets : "nothing: built without CUDA");
    return 0;
  }
  fp4_reason(why, why_size, "the build's targets (%s) hold code for %s; %s", targets, arch->name,
             arch->hardware_tested ? "fp4kit's GPU tests ran on this architecture"
                                   : "compiled only: fp4kit's GPU tests have not run on this architecture");
  return 1;
}

static fp4_status probe_prepare(const char *fn, const char *backend, fp4_backend_probe *out, const fp4_backend **b) {
  if (!out) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  memset(out, 0, sizeof *out);
  if (!backend) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: backend is NULL", fn);
  *b = fp4_registry_find(backend);
  if (!*b) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no backend named '%s'", fn, backend);
  fp4_reason(out->backend, sizeof out->backend, "%s", backend);
  out->available = FP4_SUPPORT_UNKNOWN;
  for (int c = 0; c < FP4_CAP_COUNT; c++) out->caps[c].support = FP4_SUPPORT_UNKNOWN;
  return FP4_OK;
}

fp4_status fp4_probe_backend(fp4_context *ctx, const char *backend, fp4_backend_probe *out) {
  fp4_clear_error();
  static const char fn[] = "fp4_probe_backend";
  const fp4_backend *b = NULL;
  fp4_status st = probe_prepare(fn, backend, out, &b);
  if (st) return st;
  const int device = fp4_context_device(ctx);
  const fp4_arch_info *arch = device >= 0 ? fp4_arch_for_cc(fp4_device_cc(device)) : NULL;
  if (b->probe) {
    /* A probe callback reads ctx NULL as a hypothetical architecture (fp4_probe_backend_arch); ctx
     * NULL here means the host, so the callback is given a host context, as for device -1. */
    fp4_context *host = NULL;
    if (!ctx && (st = fp4_context_create(&host, -1))) return fp4_fail(st, "%s: %s", fn, fp4_last_error());
    fp4_arch_info unknown = {.name = "unknown architecture"};
    st = b->probe(ctx ? ctx : host, arch ? arch : &unknown, out);
    fp4_context_destroy(host);
  } else {
    fp4_probe_generic(ctx, b, arch, out);
  }
  fp4_clear_error(); /* the questions asked on the way are answers, not failures */
  return st;
}

fp4_status fp4_probe_backend_arch(const char *arch_name, const char *backend, fp4_backend_probe *out) {
  fp4_clear_error();
  static const char fn[] = "fp4_probe_backend_arch";
  const fp4_backend *b = NULL;
  fp4_status st = probe_prepare(fn, backend, out, &b);
  if (st) return st;
  const fp4_arch_info *arch = fp4_arch_find(arch_name);
  if (!arch) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: unknown architecture '%s' (known: sm_80, sm_86, sm_89, sm_90, sm_100, sm_103, sm_120, sm_121)", fn, arch_name ? arch_name : "(null)");
  if (b->probe) st = b->probe(NULL, arch, out);
  else generic_arch_probe(b, arch, out);
  fp4_clear_error();
  return st;
}
