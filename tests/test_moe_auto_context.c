/* The grouped GEMMs and the MoE layer with auto backend selection on a context (host-only here; an
 * engine's CUDA context takes the same dispatch path): auto consults the context's tuning state,
 * which keys only dense GEMMs, so these calls must neither read the dense operands they lack nor
 * fail. Each call equals the same call without a context (ref/cpu chosen the same way), bit for bit,
 * with no tuning cache, with an empty one and with one holding a dense GEMM entry. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "testing.h"

enum { E = 4, H = 64, I = 32, T = 5, K2 = 2 };

static uint8_t w1_data[E * 2 * I * H / 2], w2_data[E * H * I / 2];
static uint8_t *w1_scales, *w2_scales, *a_scales;
static uint8_t a_data[T * H / 2];
static float w1_mult[E] = {0.5f, 1.0f, 2.0f, 0.25f}, hidden[T * H], tw[T * K2];
static int32_t ids[T * K2] = {0, 1, 2, 3, 1, 1, 3, 0, 2, 2};
static int64_t offsets[E + 1] = {0, 1, 1, 4, 5};
static float out_ctx[T * 2 * I], out_none[T * 2 * I];
static _Alignas(FP4_MOE_WORKSPACE_ALIGNMENT) uint8_t ws[1 << 20];

static uint32_t rng = 12345u;
static uint32_t next(void) {
  rng = rng * 1664525u + 1013904223u;
  return rng >> 8;
}

static uint8_t *scales_for(int64_t experts, int64_t rows, int64_t cols) {
  size_t per = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, rows, cols, &per);
  uint8_t *s = malloc((size_t)experts * per);
  for (size_t i = 0; s && i < (size_t)experts * per; i++) s[i] = (uint8_t)(0x30 + next() % 16); /* E4M3 0.5 .. 1.9 */
  return s;
}

static fp4_grouped_qmatrix gq(void *d, void *s, int64_t n, int64_t k) {
  return (fp4_grouped_qmatrix){d, s, NULL, E, n, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_MEMORY_HOST};
}

static fp4_matrix dense(float *p, int64_t r, int64_t c) { return (fp4_matrix){p, r, c, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}; }

/* The three calls on ctx with options o, each against the same call with no context. */
static void calls_equal(fp4_context *ctx, const fp4_options *o, const char *what) {
  fp4_moe_layer l = {FP4_MOE_W4A4, {gq(w1_data, w1_scales, 2 * I, H), gq(w2_data, w2_scales, H, I), 10.0f, 20.0f, NULL},
                     NULL};
  l.routed.gate_up.multipliers = w1_mult;
  const fp4_moe_routing r = {ids, T, K2, {tw, T, K2, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
  const fp4_matrix h = dense(hidden, T, H);
  const fp4_grouped_qmatrix g = l.routed.gate_up;
  const fp4_qmatrix a = {a_data, a_scales, T, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 0.125f, FP4_MEMORY_HOST};
  for (int op = 0; op < 4; op++) {
    static const char *const names[] = {"fp4_moe_forward W4A4", "fp4_moe_forward W4A16", "fp4_grouped_mm",
                                        "fp4_grouped_mm_w4a16"};
    const int64_t cols = op < 2 ? H : 2 * I;
    fp4_matrix oc = dense(out_ctx, T, cols), on = dense(out_none, T, cols);
    for (int i = 0; i < T * 2 * I; i++) out_ctx[i] = out_none[i] = NAN;
    fp4_status sc, sn;
    if (op < 2) {
      l.mode = op == 0 ? FP4_MOE_W4A4 : FP4_MOE_W4A16;
      sc = fp4_moe_forward(ctx, &l, &h, &r, ws, sizeof ws, &oc, o);
      sn = fp4_moe_forward(NULL, &l, &h, &r, ws, sizeof ws, &on, o);
    } else if (op == 2) {
      sc = fp4_grouped_mm(ctx, &a, &g, offsets, 1.5f, &oc, o);
      sn = fp4_grouped_mm(NULL, &a, &g, offsets, 1.5f, &on, o);
    } else {
      sc = fp4_grouped_mm_w4a16(ctx, &h, &g, offsets, 1.5f, &oc, o);
      sn = fp4_grouped_mm_w4a16(NULL, &h, &g, offsets, 1.5f, &on, o);
    }
    CHECK(sc == FP4_OK, "%s on a host context, %s: %s", names[op], what, fp4_last_error());
    CHECK(sn == FP4_OK, "%s without a context, %s: %s", names[op], what, fp4_last_error());
    size_t differ = 0, nan = 0;
    for (int i = 0; i < T * cols; i++) {
      differ += memcmp(&out_ctx[i], &out_none[i], sizeof(float)) != 0;
      nan += isnan(out_ctx[i]);
    }
    CHECK(differ == 0 && nan == 0, "%s, %s: %zu of %d outputs differ from the call without a context, %zu NaN",
          names[op], what, differ, T * (int)cols, nan);
  }
}

int main(void) {
  w1_scales = scales_for(E, 2 * I, H);
  w2_scales = scales_for(E, H, I);
  a_scales = scales_for(1, T, H);
  if (!w1_scales || !w2_scales || !a_scales) return 1;
  for (size_t i = 0; i < sizeof w1_data; i++) w1_data[i] = (uint8_t)next();
  for (size_t i = 0; i < sizeof w2_data; i++) w2_data[i] = (uint8_t)next();
  for (size_t i = 0; i < sizeof a_data; i++) a_data[i] = (uint8_t)next();
  for (int i = 0; i < T * H; i++) hidden[i] = (float)((int)(next() % 2001) - 1000) / 256.0f;
  for (int i = 0; i < T * K2; i++) tw[i] = 1.0f / K2;

  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "host context: %s", fp4_last_error());
  const fp4_options auto_opts = {.backend = "auto"};
  calls_equal(ctx, NULL, "options NULL, no tuning cache");
  calls_equal(ctx, &auto_opts, "backend auto, no tuning cache");

  fp4_tuning_cache *cache = NULL;
  CHECK(fp4_tuning_cache_create(ctx, &cache) == FP4_OK, "tuning cache: %s", fp4_last_error());
  CHECK(fp4_context_set_tuning_cache(ctx, cache) == FP4_OK, "attaching the cache (the context owns it): %s",
        fp4_last_error());
  calls_equal(ctx, NULL, "empty tuning cache");
  const fp4_tune_key dense_key = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_F32, FP4_DTYPE_F32, T, 2 * I, H};
  CHECK(fp4_tuning_cache_set(cache, &dense_key, "cpu", "", 1.0) == FP4_OK, "cache entry: %s", fp4_last_error());
  calls_equal(ctx, NULL, "tuning cache with a dense entry of the same N and K");

  fp4_context_destroy(ctx); /* frees the cache it owns */
  free(w1_scales), free(w2_scales), free(a_scales);
  return TEST_SUMMARY();
}
