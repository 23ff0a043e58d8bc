/* Remembered dispatch decisions (the selection cache in src/dispatch/dispatch.c): a key separates
 * everything a backend's supports() or the auto choice can depend on, and calls answered from the
 * table run the same backend and give the same bits as the first call. Host backends here; the GPU
 * paths take the same code. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/dispatch.h"
#include "tune/tuning.h"
#include "fp4kit.h"
#include "testing.h"

enum { M = 3, N = 32, K = 64 };

static uint8_t codes[N * K / 2], scales[4096];
static uint16_t act[2 * M * K + 8];
static float out1[M * N], out2[M * N];

static void fill(void) {
  uint32_t s = 12345;
  for (size_t i = 0; i < sizeof codes; i++) codes[i] = (uint8_t)((s = s * 1664525u + 1013904223u) >> 24);
  for (size_t i = 0; i < sizeof scales; i++) scales[i] = (uint8_t)(0x30 + ((s = s * 1664525u + 1013904223u) >> 28));
  for (size_t i = 0; i < sizeof act / sizeof *act; i++)
    act[i] = fp4_bf16_from_f32((float)((int)((s = s * 1664525u + 1013904223u) >> 26) - 32) / 16.0f);
}

static void nan_fill(float *o) {
  for (int i = 0; i < M * N; i++) o[i] = NAN;
}

static void keys_separate_what_matters(void) {
  fp4_qmatrix b = {codes, scales, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix a = {act, M, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  fp4_matrix o = {out1, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_problem base = {.op = FP4_OP_MM_W4A16, .a = &a, .b = &b, .alpha = 1.0f, .out = &o, .memory = FP4_MEMORY_HOST};
  fp4_selection_key k0, k1;
  CHECK(fp4_selection_key_of(&base, -1, NULL, 0, &k0), "the W4A16 op is remembered");
  fp4_problem same = base;
  same.alpha = 3.0f; /* alpha is data, not a dispatch input */
  CHECK(fp4_selection_key_of(&same, -1, NULL, 0, &k1) && !memcmp(&k0, &k1, sizeof k0), "alpha must not change the key");

  /* Each variation must change the key. */
  fp4_matrix a_ld = a, a_mis = a, a_f16 = a, o_bf16 = o;
  a_ld.ld = K + 8;
  a_mis.data = act + 1; /* 2-byte offset: another alignment class */
  a_f16.dtype = FP4_DTYPE_F16;
  o_bf16.dtype = FP4_DTYPE_BF16;
  fp4_qmatrix b_lin = b, b_mx = b;
  b_lin.layout = FP4_LAYOUT_LINEAR;
  b_mx.format = FP4_FORMAT_MXFP4;
  static const float dev_alpha = 1.0f;
  fp4_problem v[10];
  for (int i = 0; i < 10; i++) v[i] = base;
  v[0].a = &a_ld;
  v[1].a = &a_mis;
  v[2].a = &a_f16;
  v[3].out = &o_bf16;
  v[4].b = &b_lin;
  v[5].b = &b_mx;
  v[6].enable_pdl = 1;
  v[7].alpha_device = &dev_alpha;
  v[8].op = FP4_OP_MM;
  fp4_qmatrix aq = b;
  v[8].a_q = &aq;
  v[8].a = NULL;
  v[9].memory = FP4_MEMORY_DEVICE;
  for (int i = 0; i < 10; i++) {
    CHECK(fp4_selection_key_of(&v[i], -1, NULL, 0, &k1) && memcmp(&k0, &k1, sizeof k0), "variation %d kept the key", i);
  }
  CHECK(fp4_selection_key_of(&base, 0, NULL, 0, &k1) && memcmp(&k0, &k1, sizeof k0), "a named backend kept the key");
  CHECK(fp4_selection_key_of(&base, -1, "x", 0, &k1) && memcmp(&k0, &k1, sizeof k0), "a named config kept the key");
  CHECK(fp4_selection_key_of(&base, -1, NULL, 7, &k1) && memcmp(&k0, &k1, sizeof k0), "a new tuning generation kept the key");
  fp4_problem moe = base;
  moe.op = FP4_OP_MOE;
  CHECK(!fp4_selection_key_of(&moe, -1, NULL, 0, &k1), "MoE calls decide per call");
  char long_name[100];
  memset(long_name, 'c', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  CHECK(!fp4_selection_key_of(&base, 0, long_name, 0, &k1), "a config name that does not fit is not remembered");

  /* The table answers only the stored key. */
  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "host context");
  const char *cfg = "unset";
  CHECK(!fp4_selection_find(ctx, &k0, &cfg), "an empty table answers nothing");
  fp4_selection_store(ctx, &k0, fp4_registry_find("ref"), "cfg-a");
  const fp4_backend *hit = fp4_selection_find(ctx, &k0, &cfg);
  CHECK(hit && !strcmp(hit->name, "ref") && cfg && !strcmp(cfg, "cfg-a"), "stored decision: %s %s", hit ? hit->name : "-",
        cfg ? cfg : "-");
  fp4_selection_key_of(&v[1], -1, NULL, 0, &k1);
  CHECK(!fp4_selection_find(ctx, &k1, &cfg), "another key must miss");
  fp4_context_destroy(ctx);
}

static int call(fp4_context *ctx, const char *backend, const void *a_data, float *o, fp4_run_info *info) {
  fp4_qmatrix b = {codes, scales, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 0.5f, FP4_MEMORY_HOST};
  fp4_matrix a = {(void *)a_data, M, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  fp4_matrix out = {o, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options opt = {.backend = backend, .info = info};
  nan_fill(o);
  return fp4_mm_w4a16(ctx, &a, &b, 2.0f, &out, &opt);
}

static void remembered_calls_run_the_same(void) {
  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "host context");
  fp4_run_info i1, i2, ir;
  CHECK(call(ctx, NULL, act, out1, &i1) == FP4_OK, "first auto call: %s", fp4_last_error());
  CHECK(call(ctx, NULL, act, out2, &i2) == FP4_OK, "remembered auto call: %s", fp4_last_error());
  CHECK(!strcmp(i1.backend, i2.backend) && !strcmp(i1.config, i2.config), "auto ran %s then %s", i1.backend, i2.backend);
  CHECK(!memcmp(out1, out2, sizeof out1), "a remembered decision must give the same bits");
  int finite = 1;
  for (int i = 0; i < M * N; i++) finite &= isfinite(out2[i]) != 0;
  CHECK(finite, "every output written");
  /* A named backend and auto alternate without answering each other's key. */
  CHECK(call(ctx, "ref", act, out2, &ir) == FP4_OK && !strcmp(ir.backend, "ref"), "named ref ran %s", ir.backend);
  CHECK(call(ctx, NULL, act, out2, &i2) == FP4_OK && !strcmp(i2.backend, i1.backend), "auto after ref ran %s", i2.backend);
  CHECK(call(ctx, "ref", act, out2, &ir) == FP4_OK && !strcmp(ir.backend, "ref"), "named ref again ran %s", ir.backend);
  /* An unknown backend is still refused after decisions were remembered. */
  CHECK_ERROR(call(ctx, "no-such-backend", act, out2, NULL), FP4_ERR_NOT_FOUND, "no-such-backend");
  fp4_context_destroy(ctx);
}

/* The tuning state in a key: every change of a cache, and every other cache, is a new generation. */
static void tuning_generations_change(void) {
  fp4_tuning_cache *c1 = NULL, *c2 = NULL;
  CHECK(fp4_tuning_cache_create(NULL, &c1) == FP4_OK && fp4_tuning_cache_create(NULL, &c2) == FP4_OK, "caches");
  const uint64_t g1 = fp4_tuning_cache_generation(c1), g2 = fp4_tuning_cache_generation(c2);
  CHECK(g1 && g2 && g1 != g2, "two caches share generation %llu", (unsigned long long)g1);
  const fp4_tune_key key = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 1, 256, 512};
  CHECK(fp4_tuning_cache_set(c1, &key, "cpu", NULL, 5.0) == FP4_OK, "set: %s", fp4_last_error());
  const uint64_t g1b = fp4_tuning_cache_generation(c1);
  CHECK(g1b != g1 && g1b != g2, "a new entry must renew the generation");
  CHECK(fp4_tuning_cache_set(c1, &key, "cpu", NULL, 4.0) == FP4_OK && fp4_tuning_cache_generation(c1) != g1b,
        "replacing an entry must renew the generation");
  CHECK(fp4_tuning_cache_generation(NULL) == 0, "no cache is generation 0");
  fp4_tuning_cache_destroy(c1);
  fp4_tuning_cache_destroy(c2);
}

int main(void) {
  fill();
  tuning_generations_change();
  keys_separate_what_matters();
  remembered_calls_run_the_same();
  return TEST_SUMMARY();
}
