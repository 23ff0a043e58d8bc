/* Registry, architecture table, probe and auto selection on any machine (CPU-only in CI): every
 * backend is listed, unavailable ones say why, every "no" has a reason, the heuristic order holds,
 * and auto selection follows an attached tuning cache. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch.h"
#include "fp4kit.h"

static int failures;
#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      failures++;                                           \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                  \
      printf("\n");                                         \
    }                                                       \
  } while (0)

static void test_registry_lists_backends(void) {
  static const char *const expected[] = {"ref", "cublaslt", "cublas-dequant", "cudnn"};
  for (size_t e = 0; e < sizeof expected / sizeof *expected; e++) {
    int found = 0;
    for (int i = 0; i < fp4_backend_count(); i++) found += !strcmp(fp4_backend_name(i), expected[e]);
    CHECK(found == 1, "backend '%s' registered %d times", expected[e], found);
  }
  for (int i = 0; i < fp4_backend_count(); i++) {
    CHECK(fp4_backend_summary(i) && *fp4_backend_summary(i), "backend %d has no summary", i);
    for (int j = i + 1; j < fp4_backend_count(); j++) CHECK(strcmp(fp4_backend_name(i), fp4_backend_name(j)), "duplicate name");
  }
  CHECK(fp4_backend_name(fp4_backend_count()) == NULL, "past the end");
  char reason[256];
  CHECK(fp4_backend_available(NULL, "no-such-backend", reason, sizeof reason) == FP4_ERR_NOT_FOUND, "unknown name");
  /* Every failure says why in fp4_last_error() too, naming the function and the backend; every
   * success leaves it empty. */
  int unavailable = 0;
  for (int i = 0; i < fp4_backend_count(); i++) {
    const char *name = fp4_backend_name(i);
    char small[8];
    const fp4_status st = fp4_backend_available(NULL, name, small, sizeof small);
    if (st == FP4_OK) {
      CHECK(fp4_last_error()[0] == 0, "%s available, yet the error says '%s'", name, fp4_last_error());
      continue;
    }
    unavailable++;
    CHECK(st == FP4_ERR_UNSUPPORTED && strstr(fp4_last_error(), "fp4_backend_available: backend '") &&
              strstr(fp4_last_error(), name) && strlen(fp4_last_error()) > strlen(name) + 40,
          "%s unavailable (%s) with the error '%s'", name, fp4_status_str(st), fp4_last_error());
    CHECK(strlen(small) < sizeof small && strstr(fp4_last_error(), small), "%s: the reason '%s' is not in the error",
          name, small);
  }
#if !FP4KIT_HAVE_CUDA
  CHECK(unavailable > 0, "a build without CUDA has backends it cannot run");
#endif
  (void)unavailable;
}

/* On a host context the vendor backends cannot run and must say why. */
static void test_vendor_backends_say_why(void) {
  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "host context");
  static const char *const vendor[] = {"cublaslt", "cublas-dequant", "cudnn"};
  for (size_t i = 0; i < 3; i++) {
    char reason[256] = "";
    fp4_status st = fp4_backend_available(ctx, vendor[i], reason, sizeof reason);
    CHECK(st == FP4_ERR_UNSUPPORTED, "%s available on a host context", vendor[i]);
    CHECK(strlen(reason) > 10, "%s gives no reason ('%s')", vendor[i], reason);
    if (!fp4_build_cuda_targets()[0]) CHECK(strstr(reason, "built without CUDA") != NULL, "%s: '%s'", vendor[i], reason);
    printf("  %-15s %s\n", vendor[i], reason);
  }
  fp4_context_destroy(ctx);
}

static void check_probe_reasons(const fp4_backend_probe *p, const char *where) {
  if (p->available != FP4_SUPPORT_YES) CHECK(p->reason[0], "%s %s: unavailable without a reason", where, p->backend);
  for (int c = 0; c < FP4_CAP_COUNT; c++) {
    if (p->caps[c].support == FP4_SUPPORT_YES) continue;
    CHECK(p->caps[c].reason[0] || p->reason[0], "%s %s %s: 'no' without a reason", where, p->backend, fp4_cap_name((fp4_cap)c));
  }
}

static void test_probe_host(void) {
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  for (int i = 0; i < fp4_backend_count(); i++) {
    fp4_backend_probe p;
    CHECK(fp4_probe_backend(ctx, fp4_backend_name(i), &p) == FP4_OK, "probe %s: %s", fp4_backend_name(i), fp4_last_error());
    CHECK(!strcmp(p.backend, fp4_backend_name(i)), "probe names the backend");
    check_probe_reasons(&p, "host");
    if (!strcmp(p.backend, "ref")) {
      CHECK(p.available == FP4_SUPPORT_YES && !p.device_memory, "ref is a host backend");
      for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++)
        CHECK(p.caps[c].support == FP4_SUPPORT_YES && p.caps[c].evidence == FP4_EVIDENCE_QUERIED, "ref %s", fp4_cap_name((fp4_cap)c));
      CHECK(p.caps[FP4_CAP_PDL].support == FP4_SUPPORT_NO, "ref has no PDL");
    }
    if (!strcmp(p.backend, "cublaslt")) CHECK(p.available == FP4_SUPPORT_NO, "cublaslt on a host context");
  }
  /* ctx NULL is the host, as a device -1 context: the same answers, never a hypothetical architecture's */
  for (int i = 0; i < fp4_backend_count(); i++) {
    fp4_backend_probe with_ctx, with_null;
    memset(&with_null, 0x55, sizeof with_null);
    CHECK(fp4_probe_backend(ctx, fp4_backend_name(i), &with_ctx) == FP4_OK, "%s", fp4_last_error());
    CHECK(fp4_probe_backend(NULL, fp4_backend_name(i), &with_null) == FP4_OK && fp4_last_error()[0] == 0, "%s",
          fp4_last_error());
    CHECK(!memcmp(&with_ctx, &with_null, sizeof with_ctx), "%s: NULL answers '%s' (%s), a host context '%s' (%s)",
          fp4_backend_name(i), with_null.reason, fp4_evidence_name(with_null.caps[0].evidence), with_ctx.reason,
          fp4_evidence_name(with_ctx.caps[0].evidence));
  }
  fp4_backend_probe p;
  CHECK(fp4_probe_backend(ctx, "nope", &p) == FP4_ERR_NOT_FOUND, "unknown backend");
  CHECK(fp4_probe_backend(ctx, "ref", NULL) == FP4_ERR_INVALID_ARGUMENT, "NULL out");
  fp4_context_destroy(ctx);
}

static void test_arch_table(void) {
  static const char *const names[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120", "sm_121"};
  CHECK(fp4_arch_count() == 8, "8 architectures, got %d", fp4_arch_count());
  for (size_t i = 0; i < 8; i++) {
    const fp4_arch_info *a = fp4_arch_find(names[i]);
    CHECK(a && !strcmp(a->name, names[i]), "find %s", names[i]);
    if (!a) continue;
    CHECK(a->fp4_mma == (a->cc >= 100), "%s: FP4 MMA only on SM100+", a->name);
    CHECK(a->pdl == (a->cc >= 90), "%s: PDL from SM90", a->name);
    CHECK(a->build_target && !strncmp(a->build_target, "sm_", 3), "%s target", a->name);
    CHECK(a->smem_kb >= 99, "%s smem", a->name);
    for (int b = 0; b < fp4_backend_count(); b++) {
      fp4_backend_probe p;
      CHECK(fp4_probe_backend_arch(a->name, fp4_backend_name(b), &p) == FP4_OK, "arch probe %s %s", a->name, fp4_backend_name(b));
      check_probe_reasons(&p, a->name);
      for (int c = 0; c < FP4_CAP_COUNT; c++)
        CHECK(p.caps[c].evidence == FP4_EVIDENCE_TABLE, "%s %s: a hypothetical answer must come from the table", a->name, p.backend);
      if (!strcmp(p.backend, "cublaslt") && a->cc < 100)
        CHECK(p.caps[FP4_CAP_NVFP4_W4A4].support == FP4_SUPPORT_NO, "cublaslt nvfp4 on %s", a->name);
      if (!strcmp(p.backend, "cublaslt") && a->cc >= 100 && fp4_build_cuda_targets()[0])
        CHECK(p.caps[FP4_CAP_NVFP4_W4A4].support == FP4_SUPPORT_UNKNOWN, "cublaslt nvfp4 on %s is cuBLASLt's to say", a->name);
      if (!strcmp(p.backend, "ref")) CHECK(p.caps[FP4_CAP_NVFP4_W4A4].support == FP4_SUPPORT_YES, "ref everywhere");
    }
  }
  const fp4_arch_info *a = fp4_arch_find("sm_120a");
  CHECK(a && a->cc == 120, "sm_120a");
  CHECK(fp4_arch_find("12.0") == fp4_arch_find("sm_120"), "12.0");
  CHECK(fp4_arch_find("121") && fp4_arch_find("121")->cc == 121, "121");
  CHECK(fp4_arch_find("sm_70") == NULL && fp4_arch_find("garbage") == NULL && fp4_arch_find("sm_") == NULL &&
            fp4_arch_find(NULL) == NULL && fp4_arch_find("sm_90x") == NULL,
        "unknown architectures");
  fp4_backend_probe p;
  CHECK(fp4_probe_backend_arch("sm_75", "ref", &p) == FP4_ERR_NOT_FOUND, "sm_75 is not in the table");
}

/* The heuristic's rank of the backend registered as name; a name the registry lacks stands for a
 * backend whose table has no ranks. */
static int rank_w(const char *name, int cc, fp4_memory memory, fp4_op op, int64_t m, int64_t weights) {
  static const fp4_backend unranked = {.name = "someone-new"};
  const fp4_backend *b = fp4_registry_find(name);
  return fp4_heuristic_rank(b ? b : &unranked, cc, memory, op, m, weights);
}
static int rank(const char *name, int cc, fp4_memory memory, fp4_op op, int64_t m) {
  return rank_w(name, cc, memory, op, m, 0); /* the weight's size not known */
}

/* cuda before cublas-dequant for a dense GEMM of M rows on a weight of that many elements, SM90 */
static int sm90_cuda_first(fp4_op op, int64_t m, int64_t weights) {
  return rank_w("cuda", 90, FP4_MEMORY_DEVICE, op, m, weights) < rank_w("cublas-dequant", 90, FP4_MEMORY_DEVICE, op, m, weights);
}

/* The heuristic is a pure function with the documented order. */
static void test_heuristic_order(void) {
  const fp4_op mm = FP4_OP_MM;
  const fp4_memory dev = FP4_MEMORY_DEVICE;
  CHECK(rank("cpu", 0, FP4_MEMORY_HOST, mm, 1) < rank("ref", 0, FP4_MEMORY_HOST, mm, 1), "host: cpu before ref");
  for (int cc = 80; cc <= 90; cc += 10) {
    CHECK(rank("cuda", cc, dev, mm, 1) < rank("cublas-dequant", cc, dev, mm, 1), "cc %d small M", cc);
    CHECK(rank("cublas-dequant", cc, dev, mm, 8192) < rank("cuda", cc, dev, mm, 8192), "cc %d large M", cc);
    CHECK(rank("cuda", cc, dev, mm, 63) < rank("cublas-dequant", cc, dev, mm, 63), "cc %d M = 63: own kernels", cc);
    CHECK(rank("cuda", cc, dev, mm, 16) < rank("cublaslt", cc, dev, mm, 16), "cc %d", cc);
  }
  CHECK(rank("cublas-dequant", 80, dev, mm, 64) < rank("cuda", 80, dev, mm, 64), "SM80 M = 64: dequant + BF16");
  CHECK(rank("cublas-dequant", 89, dev, mm, 64) < rank("cuda", 89, dev, mm, 64), "SM89 M = 64: dequant + BF16");
  CHECK(rank("cuda", 90, dev, mm, 64) < rank("cublas-dequant", 90, dev, mm, 64) &&
            rank("cuda", 90, dev, mm, 256) < rank("cublas-dequant", 90, dev, mm, 256),
        "SM90 M = 64-256: the register-A tiles");
  CHECK(rank("cublas-dequant", 90, dev, mm, 257) < rank("cuda", 90, dev, mm, 257), "SM90 M = 257: dequant + BF16");
  /* SM90 by the weight's size (src/dispatch/dispatch.c): under 2^25 elements to M = 63, up to 2^27 to
   * M = 256, from 2^27 to M = 1024; W4A16 alike */
  for (int op = FP4_OP_MM; op <= FP4_OP_MM_W4A16; op++) {
    const int64_t small = 2048 * 4096, mid = 8192 * 8192, large = 57344 * 8192;
    CHECK(sm90_cuda_first((fp4_op)op, 63, small) && !sm90_cuda_first((fp4_op)op, 64, small), "op %d small weights", op);
    CHECK(sm90_cuda_first((fp4_op)op, 256, mid) && !sm90_cuda_first((fp4_op)op, 257, mid), "op %d 2^26 weights", op);
    CHECK(sm90_cuda_first((fp4_op)op, 64, (int64_t)1 << 25) && !sm90_cuda_first((fp4_op)op, 64, ((int64_t)1 << 25) - 1),
          "op %d the 2^25 edge", op);
    CHECK(sm90_cuda_first((fp4_op)op, 1024, large) && !sm90_cuda_first((fp4_op)op, 1025, large) &&
              sm90_cuda_first((fp4_op)op, 1024, (int64_t)1 << 27) && !sm90_cuda_first((fp4_op)op, 1024, ((int64_t)1 << 27) - 1) &&
              sm90_cuda_first((fp4_op)op, 1024, 8192 * 28672),
          "op %d 2^27 weights and more", op);
  }
  CHECK(!sm90_cuda_first(FP4_OP_MM, 64, 0) == !sm90_cuda_first(FP4_OP_MM, 64, (int64_t)1 << 26) &&
            rank_w("cuda", 80, dev, mm, 256, 57344 * 8192) > rank_w("cublas-dequant", 80, dev, mm, 256, 57344 * 8192),
        "unknown size: the 2^25-2^27 rule; SM80 ignores the size");
  CHECK(rank("cublaslt", 100, dev, mm, 8192) < rank("cuda", 100, dev, mm, 8192), "SM100 large M: native");
  CHECK(rank("cuda", 100, dev, mm, 1) < rank("cublaslt", 100, dev, mm, 1), "SM100 decode: own kernels");
  CHECK(rank("cuda", 120, dev, mm, 100) < rank("cublaslt", 120, dev, mm, 100), "SM120 M=100");
  CHECK(rank("cublaslt", 120, dev, mm, 4096) < rank("cublas-dequant", 120, dev, mm, 4096), "SM120 large");
  CHECK(rank("someone-new", 90, dev, mm, 1) > rank("cublas-dequant", 90, dev, mm, 1), "unknown last");
  CHECK(rank("cuda", 90, dev, mm, 64) == rank("cuda", 90, dev, mm, 64), "pure");
  CHECK(rank("cuda-sm120", 120, dev, mm, 16) < rank("cuda", 120, dev, mm, 16), "SM120: native MMA first");
  CHECK(rank("cuda-sm120", 90, dev, mm, 16) > rank("someone-new", 90, dev, mm, 16),
        "SM90: the emulated SM120 build is never preferred");
  CHECK(rank("cuda-sm120", 90, dev, mm, 1024) == FP4_RANK_VERIFICATION_ONLY,
        "SM90: the emulated SM120 build is a verification build (the tuner skips it)");
}

/* A small host GEMM through the public API with options. */
static fp4_status host_mm(fp4_context *ctx, int64_t M, const char *backend, fp4_run_info *info) {
  enum { N = 32, K = 64 };
  static float x[4096 * K], w[N * K], out[4096 * N];
  static uint8_t xq[4096 * K / 2], wq[N * K / 2], xs[4096 * K / 16], ws[N * K / 16];
  for (int64_t i = 0; i < M * K; i++) x[i] = (float)((i * 37) % 17) - 8.0f;
  for (int i = 0; i < N * K; i++) w[i] = (float)((i * 11) % 13) - 6.0f;
  fp4_matrix xm = {x, M, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, wm = {w, N, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix a = {xq, xs, M, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix b = {wq, ws, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_options ref = {.backend = "ref"};
  fp4_status st = fp4_quantize(NULL, &xm, 1.0f, &a, &ref);
  if (!st) st = fp4_quantize(NULL, &wm, 1.0f, &b, &ref);
  if (st) return st;
  fp4_matrix o = {out, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options opts = {.backend = backend, .info = info};
  return fp4_mm(ctx, &a, &b, 1.0f, &o, &opts);
}

static void test_auto_follows_cache(void) {
  setenv("FP4KIT_TUNING_CACHE", "/nonexistent/fp4kit-test/tuning.json", 1);
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  fp4_run_info info;
  /* No cache: the heuristic picks a host backend; cpu before ref when it is built in. */
  CHECK(host_mm(ctx, 8, NULL, &info) == FP4_OK, "auto without cache: %s", fp4_last_error());
  char why[256];
  const char *expect = fp4_backend_available(NULL, "cpu", why, sizeof why) == FP4_OK ? "cpu" : "ref";
  CHECK(!strcmp(info.backend, expect), "heuristic picked '%s', expected '%s'", info.backend, expect);
  CHECK(fp4_context_tuning_cache(ctx) == NULL, "missing default file gives no cache");
  CHECK(strstr(fp4_context_tuning_note(ctx), "ignored") != NULL, "note: %s", fp4_context_tuning_note(ctx));

  /* A cache whose winner for M bucket 128 names a config its backend does not offer: auto does not
   * follow it for M in (64, 128] (one warning) and runs the heuristic's choice, never failing. */
  fp4_tuning_cache *cache = NULL;
  CHECK(fp4_tuning_cache_create(ctx, &cache) == FP4_OK, "create");
  fp4_tune_key key = {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_F32, 100, 32, 64};
  CHECK(fp4_tuning_cache_set(cache, &key, expect, "tuned-bogus", 1.0) == FP4_OK, "set");
  CHECK(fp4_context_set_tuning_cache(ctx, cache) == FP4_OK, "attach");
  fp4_status st = host_mm(ctx, 70, NULL, &info);
  CHECK(st == FP4_OK && !strcmp(info.backend, expect) && !strstr(info.config, "tuned-bogus"),
        "an unknown cached config falls back: %s %s/%s (%s)", fp4_status_str(st), info.backend, info.config, fp4_last_error());
  CHECK(host_mm(ctx, 129, NULL, &info) == FP4_OK, "M=129 is bucket 256: heuristic");
  CHECK(host_mm(ctx, 64, NULL, &info) == FP4_OK, "M=64 is bucket 64: heuristic");
  /* The oracle is never followed from the cache; a winner that cannot run falls back, never fails. */
  CHECK(fp4_tuning_cache_set(cache, &key, "ref", NULL, 1.0) == FP4_OK, "set");
  CHECK(host_mm(ctx, 128, NULL, &info) == FP4_OK && !strcmp(info.backend, expect), "cached ref not followed: %s", info.backend);
  CHECK(fp4_tuning_cache_set(cache, &key, "cublaslt", "heur0", 1.0) == FP4_OK, "set");
  CHECK(host_mm(ctx, 128, NULL, &info) == FP4_OK && !strcmp(info.backend, expect), "unrunnable winner falls back: %s", info.backend);
  /* A named backend ignores the cache. */
  CHECK(host_mm(ctx, 128, "ref", &info) == FP4_OK && !strcmp(info.backend, "ref"), "named");
  fp4_context_destroy(ctx); /* frees the attached cache */
}

/* PDL: own CUDA kernels say yes where the architecture has it and the build has code for it; below
 * SM90 the answer is no with the reason; vendor backends say no. */
static void test_pdl_answers(void) {
  fp4_backend_probe p;
  CHECK(fp4_probe_backend_arch("sm_80", "cuda", &p) == FP4_OK, "probe cuda on sm_80: %s", fp4_last_error());
  CHECK(p.caps[FP4_CAP_PDL].support == FP4_SUPPORT_NO && strstr(p.caps[FP4_CAP_PDL].reason, "SM90"),
        "cuda on sm_80: PDL %s (%s)", fp4_support_name(p.caps[FP4_CAP_PDL].support), p.caps[FP4_CAP_PDL].reason);
  CHECK(fp4_probe_backend_arch("sm_90", "cuda", &p) == FP4_OK, "probe cuda on sm_90");
  const int has90 = strstr(fp4_build_cuda_targets(), "90") != NULL;
  CHECK(p.caps[FP4_CAP_PDL].support == (has90 ? FP4_SUPPORT_YES : FP4_SUPPORT_NO),
        "cuda on sm_90 with targets '%s': PDL %s (%s)", fp4_build_cuda_targets(),
        fp4_support_name(p.caps[FP4_CAP_PDL].support), p.caps[FP4_CAP_PDL].reason);
  CHECK(fp4_probe_backend_arch("sm_90", "cublaslt", &p) == FP4_OK && p.caps[FP4_CAP_PDL].support != FP4_SUPPORT_YES,
        "cublaslt never claims PDL");
}

int main(void) {
  test_pdl_answers();
  test_registry_lists_backends();
  test_vendor_backends_say_why();
  test_probe_host();
  test_arch_table();
  test_heuristic_order();
  test_auto_follows_cache();
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("test_registry: all passed (%d backends, CUDA targets '%s')\n", fp4_backend_count(), fp4_build_cuda_targets());
  return 0;
}
