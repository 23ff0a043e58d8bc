#define _POSIX_C_SOURCE 200809L
/*
 * The cpu backend at every instruction-set level this machine has (each level its config):
 *   - GEMMs (W4A4, W4A16) against the reference through the shared harness, over shapes that hit
 *     the streaming path (M <= 4) and the panel path, N not a multiple of the panel, K from one
 *     block to 4096, every format, scale layout, activation and output dtype, edge data;
 *   - quantization bit for bit (harness cases plus NaN/inf/-0/huge/tiny inputs);
 *   - the levels against each other, and the same level at several thread counts (bit-identical);
 *   - the level configs and thread settings (a too-high level is refused, an unknown one not found,
 *     the environment variable that once chose the level not read).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp4kit.h"
#include "harness.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      failures++;                                                                                                      \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                      \
      printf(__VA_ARGS__);                                                                                             \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  } while (0)

static const char *const levels[] = {"generic", "avx2", "avx512"};
/* The config of the cpu calls of the cross checks below (a level; NULL: the default). */
static const char *g_level;

/* ---- GEMM and quantize cases through the harness ---- */

typedef struct shape { int64_t m, n, k; } shape;

static void run_harness_cases(const char *level) {
  static const shape shapes[] = {{1, 37, 4096}, {1, 131, 16}, {3, 131, 128}, {4, 9, 32},    {64, 40, 128},
                                 {65, 9, 32},   {5, 70, 4096}, {300, 13, 128}, {300, 37, 4096}, {2, 1, 256}};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};
  static const fp4_dtype dtypes[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES, FP4H_DATA_UNIFORM};
  int run = 0, i = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    for (int op = 0; op < 2; op++) {
      for (int f = 0; f < 2; f++, i++) {
        fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
        if (shapes[s].k % fp4_format_block_size(fmt)) continue;
        int nl = fmt == FP4_FORMAT_MXFP4 ? 2 : 3; /* 8x4 is NVFP4 only */
        char name[96];
        fp4h_case c = {name, op ? FP4H_MM_W4A16 : FP4H_MM, fmt, layouts[(i / 2) % nl], layouts[i % nl],
                       shapes[s].m, shapes[s].n, shapes[s].k, dtypes[(i / 3) % 3], dtypes[i % 3], datas[(i / 2) % 3]};
        /* edge data reaches |x| ~ 1e3: its sums overflow f16 outputs, which is not a kernel error */
        if (c.out_dtype == FP4_DTYPE_F16 && c.data == FP4H_DATA_EDGES) c.data = FP4H_DATA_NORMAL;
        snprintf(name, sizeof name, "%s %s M=%lld N=%lld K=%lld a=%s out=%s data=%d", op ? "w4a16" : "w4a4",
                 fp4_format_name(fmt), (long long)c.m, (long long)c.n, (long long)c.k,
                 op ? fp4_dtype_name(c.a_dtype) : "fp4", fp4_dtype_name(c.out_dtype), (int)c.data);
        for (int seed = 0; seed < 2; seed++) {
          fp4h_result r;
          c.config = level;
          fp4h_run(NULL, "cpu", FP4_MEMORY_HOST, &c, 1000u + (uint64_t)(i * 7 + seed), &r);
          CHECK(r.status == FP4_OK && r.passed, "[%s] %s layouts a=%s b=%s: %s", level, name, fp4_layout_name(c.layout_a),
                fp4_layout_name(c.layout_b), r.message);
          run++;
        }
      }
    }
  }
  /* Quantization: every format, layout and input dtype, odd row counts, edge data. */
  static const int64_t qrows[] = {1, 37, 130};
  for (int f = 0; f < 2; f++)
    for (int l = 0; l < 3; l++)
      for (int d = 0; d < 3; d++) {
        fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
        if (fmt == FP4_FORMAT_MXFP4 && layouts[l] == FP4_LAYOUT_8X4) continue;
        char name[96];
        fp4h_case c = {name, FP4H_QUANTIZE, fmt, layouts[l], FP4_LAYOUT_LINEAR, qrows[(l + d) % 3], 0,
                       f ? 96 : 272, dtypes[d], FP4_DTYPE_F32, datas[(f + l + d) % 3]};
        snprintf(name, sizeof name, "quantize %s %s %s rows=%lld", fp4_format_name(fmt), fp4_layout_name(layouts[l]),
                 fp4_dtype_name(dtypes[d]), (long long)c.m);
        for (int seed = 0; seed < 2; seed++) {
          fp4h_result r;
          c.config = level;
          fp4h_run(NULL, "cpu", FP4_MEMORY_HOST, &c, 77u + (uint64_t)seed, &r);
          CHECK(r.status == FP4_OK && r.passed, "[%s] %s: %s", level, name, r.message);
          run++;
        }
      }
  printf("[%s] %d harness cases run\n", level, run);
}

/* ---- quantization of special values, bit for bit against the reference ---- */

static void quantize_specials(const char *level) {
  enum { ROWS = 5, COLS = 96 };
  static float x[ROWS * COLS];
  fp4h_rng g = {42};
  for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)fp4h_gauss(&g);
  x[3] = NAN;
  x[5] = -NAN;
  x[40] = INFINITY;
  x[77] = -INFINITY;
  for (int i = 96; i < 128; i++) x[i] = -0.0f;              /* a -0 block */
  for (int i = 128; i < 160; i++) x[i] = 1e-30f * (float)(i - 140); /* scale underflow */
  for (int i = 192; i < 224; i++) x[i] = 3e38f * (i & 1 ? 1.0f : -1.0f);
  for (int i = 224; i < 240; i++) x[i] = 0.25f * (float)(i - 232); /* ties on the grid */
  for (int i = 300; i < 320; i++) x[i] = NAN;                /* an all-NaN region */
  for (int f = 0; f < 2; f++) {
    fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
    for (int l = 0; l < 3; l++) {
      if (fmt == FP4_FORMAT_MXFP4 && l == FP4_LAYOUT_8X4) continue;
      for (int gi = 0; gi < 3; gi++) {
        const float gsf = gi == 0 ? 1.0f : gi == 1 ? 37.5f : 1e-3f;
        size_t sb = 0;
        fp4_scales_size(fmt, (fp4_scale_layout)l, ROWS, COLS, &sb);
        uint8_t d0[ROWS * COLS / 2], d1[ROWS * COLS / 2], s0[1024], s1[1024];
        memset(d1, 0x5A, sizeof d1);
        memset(s1, 0x5A, sizeof s1);
        fp4_matrix xm = {x, ROWS, COLS, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
        fp4_qmatrix q0 = {d0, s0, ROWS, COLS, fmt, (fp4_scale_layout)l, 1.0f, FP4_MEMORY_HOST}, q1 = q0;
        q1.data = d1;
        q1.scales = s1;
        fp4_options ro = {.backend = "ref"}, co = {.backend = "cpu", .config = level};
        fp4_status a = fp4_quantize(NULL, &xm, gsf, &q0, &ro), b = fp4_quantize(NULL, &xm, gsf, &q1, &co);
        CHECK(a == FP4_OK && b == FP4_OK, "[%s] quantize specials: %s", level, fp4_last_error());
        CHECK(!memcmp(d0, d1, sizeof d0) && !memcmp(s0, s1, sb) && q0.multiplier == q1.multiplier,
              "[%s] quantize specials %s %s gsf=%g differ from the reference", level, fp4_format_name(fmt),
              fp4_layout_name((fp4_scale_layout)l), (double)gsf);
      }
    }
  }
}

/* ---- levels against each other, thread counts bit-identical ---- */

typedef struct gemm_data {
  int64_t m, n, k;
  fp4_format fmt;
  uint16_t *a_bf16;
  float *a_f32;
  uint8_t *aq, *aqs, *bq, *bqs;
  fp4_qmatrix qa, qb;
} gemm_data;

static int make_data(gemm_data *d, int64_t m, int64_t n, int64_t k, fp4_format fmt, uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->m = m, d->n = n, d->k = k, d->fmt = fmt;
  size_t sa = 0, sb = 0;
  fp4_scales_size(fmt, FP4_LAYOUT_128X4, m, k, &sa);
  fp4_scales_size(fmt, FP4_LAYOUT_128X4, n, k, &sb);
  d->a_f32 = malloc(sizeof(float) * (size_t)(m * k));
  d->a_bf16 = malloc(2 * (size_t)(m * k));
  float *b = malloc(sizeof(float) * (size_t)(n * k));
  d->aq = malloc((size_t)(m * k / 2));
  d->aqs = malloc(sa);
  d->bq = malloc((size_t)(n * k / 2));
  d->bqs = malloc(sb);
  if (!d->a_f32 || !d->a_bf16 || !b || !d->aq || !d->aqs || !d->bq || !d->bqs) return 0;
  fp4h_rng g = {seed};
  fp4h_fill(&g, d->a_f32, m * k, FP4H_DATA_NORMAL, 16);
  fp4h_fill(&g, b, n * k, FP4H_DATA_NORMAL, 16);
  fp4_convert(d->a_f32, FP4_DTYPE_F32, d->a_bf16, FP4_DTYPE_BF16, (size_t)(m * k));
  fp4_options ro = {.backend = "ref"};
  fp4_matrix am = {d->a_f32, m, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, bm = {b, n, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix qa = {d->aq, d->aqs, m, k, fmt, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix qb = {d->bq, d->bqs, n, k, fmt, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  int ok = fp4_quantize(NULL, &am, 10.0f, &qa, &ro) == FP4_OK && fp4_quantize(NULL, &bm, 20.0f, &qb, &ro) == FP4_OK;
  d->qa = qa;
  d->qb = qb;
  free(b);
  return ok;
}

static void free_data(gemm_data *d) {
  free(d->a_f32);
  free(d->a_bf16);
  free(d->aq);
  free(d->aqs);
  free(d->bq);
  free(d->bqs);
}

/* op 0: W4A4, 1: W4A16 f32 activations, 2: W4A16 bf16 activations. out f32. */
static int run_cpu(const gemm_data *d, int op, float *out) {
  for (int64_t i = 0; i < d->m * d->n; i++) out[i] = NAN;
  fp4_matrix o = {out, d->m, d->n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options co = {.backend = "cpu", .config = g_level};
  fp4_matrix a = {op == 2 ? (void *)d->a_bf16 : (void *)d->a_f32, d->m, d->k, 0,
                  op == 2 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_status st = op == 0 ? fp4_mm(NULL, &d->qa, &d->qb, 1.5f, &o, &co) : fp4_mm_w4a16(NULL, &a, &d->qb, 1.5f, &o, &co);
  if (st) printf("  cpu GEMM failed: %s\n", fp4_last_error());
  return st == FP4_OK;
}

static double rel_diff(const float *x, const float *y, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)x[i] - (double)y[i];
    num += d * d;
    den += (double)y[i] * (double)y[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void cross_checks(int nlevels, const char *const *avail) {
  static const shape shapes[] = {{1, 67, 2048}, {4, 33, 512}, {70, 21, 1024}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int f = 0; f < 2; f++) {
      gemm_data d;
      fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
      if (!make_data(&d, shapes[s].m, shapes[s].n, shapes[s].k, fmt, 99 + s)) {
        CHECK(0, "test data allocation");
        free_data(&d);
        continue;
      }
      size_t count = (size_t)(d.m * d.n);
      float *base = malloc(sizeof(float) * count), *got = malloc(sizeof(float) * count);
      for (int op = 0; op < 3 && base && got; op++) {
        for (int l = 0; l < nlevels; l++) {
          g_level = avail[l];
          setenv("FP4KIT_NUM_THREADS", "1", 1);
          if (!run_cpu(&d, op, base)) { CHECK(0, "[%s] run", avail[l]); continue; }
          static const char *const threads[] = {"2", "3", "7"};
          for (int t = 0; t < 3; t++) {
            setenv("FP4KIT_NUM_THREADS", threads[t], 1);
            CHECK(run_cpu(&d, op, got) && !memcmp(base, got, sizeof(float) * count),
                  "[%s] op %d %s M=%lld: %s threads differ from 1 thread (must be bit-identical)", avail[l], op,
                  fp4_format_name(fmt), (long long)d.m, threads[t]);
          }
          if (l == 0) continue;
          /* against the generic level: different summation orders, same exact products */
          g_level = avail[0];
          run_cpu(&d, op, got);
          double e = rel_diff(base, got, (int64_t)count);
          CHECK(e < 2e-6, "[%s vs %s] op %d %s M=%lld: relative difference %.3g", avail[l], avail[0], op,
                fp4_format_name(fmt), (long long)d.m, e);
        }
      }
      free(base);
      free(got);
      free_data(&d);
    }
  unsetenv("FP4KIT_NUM_THREADS");
}

/* A NaN block scale (E4M3 0x7F, UE8M0 0xFF) makes its output row NaN, as in the reference, on
 * both the streaming and the panel path; the other outputs stay finite. */
static void nan_scales(int nlevels, const char *const *avail) {
  for (int f = 0; f < 2; f++)
    for (int mi = 0; mi < 2; mi++) {
      gemm_data d;
      fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
      int64_t m = mi ? 9 : 1;
      if (!make_data(&d, m, 8, 512, fmt, 5)) {
        CHECK(0, "test data allocation");
        free_data(&d);
        continue;
      }
      d.bqs[fp4_scale_offset(fmt, FP4_LAYOUT_128X4, 8, 512, 3, 2)] = f ? 0xFF : 0x7F;
      float out[9 * 8];
      for (int l = 0; l < nlevels; l++) {
        g_level = avail[l];
        for (int op = 0; op < 3; op++) {
          if (!run_cpu(&d, op, out)) { CHECK(0, "run"); continue; }
          int ok = 1;
          for (int64_t i = 0; i < m * 8; i++) ok &= (i % 8 == 3) ? isnan(out[i]) : isfinite(out[i]);
          CHECK(ok, "[%s] op %d %s M=%lld: a NaN scale must give NaN in its row only", avail[l], op, fp4_format_name(fmt),
                (long long)m);
        }
      }
      free_data(&d);
    }
}

/* The thread pool survives fork(): a child (Python multiprocessing) gets the same results. */
static void fork_check(void) {
  gemm_data d;
  if (!make_data(&d, 2, 96, 1024, FP4_FORMAT_NVFP4, 11)) {
    CHECK(0, "test data allocation");
    free_data(&d);
    return;
  }
  setenv("FP4KIT_NUM_THREADS", "2", 1);
  float before[2 * 96], after[2 * 96];
  CHECK(run_cpu(&d, 2, before), "run before fork");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = run_cpu(&d, 2, after) && !memcmp(before, after, sizeof before);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "a forked child must run the cpu backend with threads and get the parent's results");
  free_data(&d);
}

/* Which kernel runs, as the run's note names it, at the default level: bf16 activations and W4A4
 * codes (exact in bf16) take the bf16 streaming kernel where the level has one (AVX512_BF16), f32
 * activations the f32 one, and M > 4 the panel path. The cross checks above compare levels and
 * thread counts only through results, which a fall-back from the bf16 kernel to the f32 one would
 * not change: this pins that the bf16 kernel is the one they exercise. */
static void kernel_choice(void) {
  const char *bf_level = fp4_cpu_level("gemv_bf16"), *f_level = fp4_cpu_level("gemv_f32");
  const int has_bf16 = strcmp(bf_level, f_level) != 0;
  for (int f = 0; f < 2; f++)
    for (int mi = 0; mi < 2; mi++) {
      gemm_data d;
      fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
      const int64_t m = mi ? 9 : 3;
      if (!make_data(&d, m, 40, 256, fmt, 77)) {
        CHECK(0, "test data allocation");
        free_data(&d);
        continue;
      }
      float *out = malloc(sizeof(float) * (size_t)(m * d.n));
      for (int op = 0; op < 3 && out; op++) {
        fp4_run_info info;
        memset(&info, 0, sizeof info);
        fp4_matrix o = {out, m, d.n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
        fp4_matrix a = {op == 2 ? (void *)d.a_bf16 : (void *)d.a_f32, m, d.k, 0,
                        op == 2 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32, FP4_MEMORY_HOST};
        fp4_options co = {.backend = "cpu", .info = &info};
        fp4_status st =
            op == 0 ? fp4_mm(NULL, &d.qa, &d.qb, 1.0f, &o, &co) : fp4_mm_w4a16(NULL, &a, &d.qb, 1.0f, &o, &co);
        const int bf16_in = op != 1;
        char want[64];
        if (mi) snprintf(want, sizeof want, "%s:%s,", bf16_in ? "gemm_bf16" : "gemm_f32", f_level);
        else if (bf16_in && has_bf16) snprintf(want, sizeof want, "gemv_bf16:%s,", bf_level);
        else snprintf(want, sizeof want, "gemv_f32:%s,", f_level);
        CHECK(st == FP4_OK && !strncmp(info.note, want, strlen(want)), "%s M=%lld op %d: ran '%s', want '%s...'",
              fp4_format_name(fmt), (long long)m, op, info.note, want);
      }
      free(out);
      free_data(&d);
    }
}

int main(void) {
  const char *avail[3];
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (fp4h_cpu_level_runs(levels[i])) avail[n++] = levels[i];
  printf("cpu levels here:");
  for (int i = 0; i < n; i++) printf(" %s", avail[i]);
  printf("; default:");
  for (int i = 0; fp4_cpu_kernel_name(i); i++) printf(" %s=%s", fp4_cpu_kernel_name(i), fp4_cpu_level(fp4_cpu_kernel_name(i)));
  printf("\n");
  CHECK(n >= 1 && !strcmp(avail[0], "generic"), "the generic level must always be available");
  CHECK(fp4_cpu_level("no-such-kernel") == NULL, "unknown kernel names give NULL");

  /* Configs: the default is the highest level here (fp4_cpu_level's); a level the CPU lacks is
   * refused and an unknown one not found, each naming why; the environment variable that once
   * chose the level is not read. */
  const char *best = fp4_cpu_level("gemv_f32");
  CHECK(!strcmp(best, avail[n - 1]), "the default level %s is not the highest that runs here (%s)", best, avail[n - 1]);
  fp4_run_info info;
  memset(&info, 0, sizeof info);
  fp4_status st = fp4h_cpu_quantize_block("neon", NULL);
  CHECK(st == FP4_ERR_UNSUPPORTED && strstr(fp4_last_error(), "neon"), "config neon on this CPU: %s, '%s'",
        fp4_status_str(st), fp4_last_error());
  st = fp4h_cpu_quantize_block("sse9", NULL);
  CHECK(st == FP4_ERR_NOT_FOUND && strstr(fp4_last_error(), "avx2"), "config sse9: %s, '%s' (should list the configs)",
        fp4_status_str(st), fp4_last_error());
  if (n < 3) {
    st = fp4h_cpu_quantize_block("avx512", NULL);
    CHECK(st == FP4_ERR_UNSUPPORTED, "config avx512 on a CPU without it: %s", fp4_status_str(st));
  }
  setenv("FP4KIT_CPU_LEVEL", "generic", 1);
  st = fp4h_cpu_quantize_block(NULL, &info);
  CHECK(st == FP4_OK && strstr(info.config, best), "FP4KIT_CPU_LEVEL=generic and the default config: ran '%s', want "
        "the %s level", info.config, best);
  unsetenv("FP4KIT_CPU_LEVEL");
  for (int i = 0; i < n; i++) {
    memset(&info, 0, sizeof info);
    st = fp4h_cpu_quantize_block(avail[i], &info);
    CHECK(st == FP4_OK && strstr(info.config, avail[i]), "config %s ran '%s'", avail[i], info.config);
  }
  setenv("FP4KIT_NUM_THREADS", "3", 1);
  CHECK(fp4_cpu_threads() == 3, "FP4KIT_NUM_THREADS=3 gives %d threads", fp4_cpu_threads());
  setenv("FP4KIT_NUM_THREADS", "zero", 1);
  CHECK(fp4_cpu_threads() >= 1, "a bad FP4KIT_NUM_THREADS falls back to the online CPUs");
  /* The documented range is [1, 1024]: both ends are taken as given, values past them are not
   * (only read here: no call runs with these counts). */
  const int online = fp4_cpu_threads();
  setenv("FP4KIT_NUM_THREADS", "1024", 1);
  CHECK(fp4_cpu_threads() == 1024, "FP4KIT_NUM_THREADS=1024 gives %d threads", fp4_cpu_threads());
  setenv("FP4KIT_NUM_THREADS", "1", 1);
  CHECK(fp4_cpu_threads() == 1, "FP4KIT_NUM_THREADS=1 gives %d threads", fp4_cpu_threads());
  setenv("FP4KIT_NUM_THREADS", "1025", 1);
  CHECK(fp4_cpu_threads() == online, "FP4KIT_NUM_THREADS=1025 gives %d threads, not the online CPUs' %d",
        fp4_cpu_threads(), online);
  setenv("FP4KIT_NUM_THREADS", "0", 1);
  CHECK(fp4_cpu_threads() == online, "FP4KIT_NUM_THREADS=0 gives %d threads", fp4_cpu_threads());
  setenv("FP4KIT_NUM_THREADS", "2", 1);

  for (int i = 0; i < n; i++) {
    run_harness_cases(avail[i]);
    quantize_specials(avail[i]);
  }
  cross_checks(n, avail);
  nan_scales(n, avail);
  g_level = NULL;
  kernel_choice();
  fork_check();
  if (failures) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("all cpu checks passed\n");
  return 0;
}
