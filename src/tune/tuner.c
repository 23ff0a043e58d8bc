/*
 * The tuner: times every (backend, config) that supports a shape on the context's device through the
 * public GEMM calls and keeps the winner in a tuning cache (the context holds it, tuning_state.c;
 * auto selection follows its entries, dispatch/dispatch.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dispatch/backend.h"
#include "dispatch/dispatch.h"
#include "tune/timer.h"
#include "tune/tuning.h"

/* A candidate whose first timed call after its warm-up exceeds this multiple of the best median so
 * far is not timed further: one emulation or host path cannot make a tuning run take minutes. */
#define FP4_TUNE_CUT_FACTOR 20

typedef struct tune_buffers {
  fp4_memory memory;
  void *a_data, *a_scales, *a_dense, *b_data, *b_scales, *out;
  size_t bytes[6];
} tune_buffers;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Random bytes for one buffer kind: FP4 codes of any value, block scales near 1 (so products stay
 * far from overflow and underflow), dense activations of magnitude around 1. */
enum { FILL_CODES, FILL_E4M3, FILL_UE8M0, FILL_BF16, FILL_F16, FILL_F32 };

static void fill_random(uint8_t *p, size_t bytes, int kind, uint64_t seed) {
  uint64_t s = seed;
  size_t i = 0;
  switch (kind) {
  case FILL_CODES:
    for (; i + 8 <= bytes; i += 8) {
      uint64_t r = splitmix(&s);
      memcpy(p + i, &r, 8);
    }
    for (; i < bytes; i++) p[i] = (uint8_t)splitmix(&s);
    break;
  case FILL_E4M3: /* exponent field 6..8: 0.25 .. 2 */
    for (; i < bytes; i++) p[i] = (uint8_t)(((6 + splitmix(&s) % 3) << 3) | (splitmix(&s) & 7));
    break;
  case FILL_UE8M0:
    for (; i < bytes; i++) p[i] = (uint8_t)(125 + splitmix(&s) % 4);
    break;
  case FILL_BF16:
    for (; i + 2 <= bytes; i += 2) {
      uint64_t r = splitmix(&s);
      uint16_t v = (uint16_t)(((r >> 8) & 0x8000) | ((125 + r % 4) << 7) | ((r >> 20) & 0x7F));
      memcpy(p + i, &v, 2);
    }
    break;
  case FILL_F16:
    for (; i + 2 <= bytes; i += 2) {
      uint64_t r = splitmix(&s);
      uint16_t v = (uint16_t)(((r >> 8) & 0x8000) | ((13 + r % 4) << 10) | ((r >> 20) & 0x3FF));
      memcpy(p + i, &v, 2);
    }
    break;
  default:
    for (; i + 4 <= bytes; i += 4) {
      uint64_t r = splitmix(&s);
      float v = (float)((double)(r >> 11) * 0x1.0p-53 * 4.0 - 2.0);
      memcpy(p + i, &v, 4);
    }
    break;
  }
}

static void free_buffers(fp4_context *ctx, tune_buffers *tb) {
  void *ptrs[6] = {tb->a_data, tb->a_scales, tb->a_dense, tb->b_data, tb->b_scales, tb->out};
  for (int i = 0; i < 6; i++) fp4_free(ctx, tb->memory, ptrs[i]);
  memset(tb, 0, sizeof *tb);
}

/* Allocates one buffer in tb->memory and fills it with random bytes of a kind (staged through the
 * host in chunks for device memory). */
static fp4_status make_buffer(fp4_context *ctx, fp4_memory memory, size_t bytes, int kind, uint64_t seed, void **out) {
  fp4_status st = fp4_alloc(ctx, memory, bytes, out);
  if (st) return st;
  if (memory == FP4_MEMORY_HOST) {
    fill_random(*out, bytes, kind, seed);
    return FP4_OK;
  }
  const size_t chunk = (size_t)64 << 20;
  uint8_t *h = malloc(bytes < chunk ? bytes : chunk);
  if (!h) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_tune: out of host memory");
  for (size_t off = 0; off < bytes && !st; off += chunk) {
    size_t n = bytes - off < chunk ? bytes - off : chunk;
    fill_random(h, n, kind, seed + off);
    st = fp4_copy(ctx, (uint8_t *)*out + off, memory, h, FP4_MEMORY_HOST, n);
  }
  free(h);
  return st;
}

typedef struct tune_call {
  fp4_context *ctx;
  const fp4_tune_key *key;
  fp4_qmatrix a_q, b;
  fp4_matrix a, out;
  fp4_options opts;
} tune_call;

static fp4_status call_once(void *user, int iteration) {
  (void)iteration;
  tune_call *c = user;
  if (c->key->op == FP4_TUNE_MM) return fp4_mm(c->ctx, &c->a_q, &c->b, 1.0f, &c->out, &c->opts);
  return fp4_mm_w4a16(c->ctx, &c->a, &c->b, 1.0f, &c->out, &c->opts);
}

/* The output as floats on the host (for the NaN / zeros / agreement checks). */
static fp4_status fetch_output(tune_call *c, float *dst) {
  size_t n = (size_t)(c->out.rows * c->out.cols);
  size_t bytes = n * fp4_dtype_size(c->out.dtype);
  void *h = malloc(bytes);
  if (!h) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_tune: out of host memory");
  fp4_status st = fp4_synchronize(c->ctx);
  if (!st) st = fp4_copy(c->ctx, h, FP4_MEMORY_HOST, c->out.data, c->out.memory, bytes);
  if (!st) st = fp4_convert(h, c->out.dtype, dst, FP4_DTYPE_F32, n);
  free(h);
  return st;
}

/* Why an output cannot be trusted ("" when it can): NaN, all zeros, or disagreement with the first
 * accepted candidate on the same inputs. */
static void judge_output(const float *got, const float *baseline, size_t n, char *why, size_t why_size) {
  size_t nonfinite = 0, nonzero = 0;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) nonfinite++;
    nonzero += got[i] != 0.0f;
    if (baseline) {
      double d = (double)got[i] - (double)baseline[i];
      num += d * d;
      den += (double)baseline[i] * (double)baseline[i];
    }
  }
  why[0] = 0;
  if (nonfinite) snprintf(why, why_size, "%zu of %zu outputs are NaN/inf", nonfinite, n);
  else if (!nonzero) snprintf(why, why_size, "all outputs are zero");
  else if (baseline && den > 0.0 && sqrt(num / den) > 1e-2)
    snprintf(why, why_size, "disagrees with the first accepted candidate (rel err %.3g)", sqrt(num / den));
}

static fp4_status tune_one(fp4_context *ctx, const fp4_tune_key *key, int runs, fp4_tuning_cache *cache,
                           fp4_tune_result *res, fp4_tune_progress_fn progress, void *user, int index, int total) {
  const fp4_memory mem = fp4_context_device(ctx) >= 0 ? FP4_MEMORY_DEVICE : FP4_MEMORY_HOST;
  const int64_t M = fp4_tune_m_bucket(key->m), N = key->n, K = key->k;
  memset(res, 0, sizeof *res);
  res->key = *key;
  res->key.m = M;
  tune_buffers tb = {.memory = mem};
  size_t sa = 0, sb = 0;
  fp4_status st = fp4_scales_size(key->format, FP4_LAYOUT_128X4, M, K, &sa);
  if (!st) st = fp4_scales_size(key->format, FP4_LAYOUT_128X4, N, K, &sb);
  if (st) return st;
  const int scale_kind = key->format == FP4_FORMAT_NVFP4 ? FILL_E4M3 : FILL_UE8M0;
  const uint64_t seed = 0x5EEDull + (uint64_t)index * 7919u;
  if (key->op == FP4_TUNE_MM) {
    if (!st) st = make_buffer(ctx, mem, (size_t)(M * K / 2), FILL_CODES, seed + 1, &tb.a_data);
    if (!st) st = make_buffer(ctx, mem, sa, scale_kind, seed + 2, &tb.a_scales);
  } else {
    int kind = key->a_dtype == FP4_DTYPE_BF16 ? FILL_BF16 : key->a_dtype == FP4_DTYPE_F16 ? FILL_F16 : FILL_F32;
    if (!st) st = make_buffer(ctx, mem, (size_t)(M * K) * fp4_dtype_size(key->a_dtype), kind, seed + 3, &tb.a_dense);
  }
  if (!st) st = make_buffer(ctx, mem, (size_t)(N * K / 2), FILL_CODES, seed + 4, &tb.b_data);
  if (!st) st = make_buffer(ctx, mem, sb, scale_kind, seed + 5, &tb.b_scales);
  if (!st) st = fp4_alloc(ctx, mem, (size_t)(M * N) * fp4_dtype_size(key->out_dtype), &tb.out);
  float *got = malloc(sizeof *got * (size_t)(M * N)), *baseline = malloc(sizeof *baseline * (size_t)(M * N));
  if (!st && (!got || !baseline)) st = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_tune: out of host memory");
  if (st) goto done;

  tune_call c = {.ctx = ctx, .key = key};
  c.a_q = (fp4_qmatrix){tb.a_data, tb.a_scales, M, K, key->format, FP4_LAYOUT_128X4, 1.0f, mem};
  c.b = (fp4_qmatrix){tb.b_data, tb.b_scales, N, K, key->format, FP4_LAYOUT_128X4, 1.0f, mem};
  c.a = (fp4_matrix){tb.a_dense, M, K, 0, key->a_dtype, mem};
  c.out = (fp4_matrix){tb.out, M, N, 0, key->out_dtype, mem};
  fp4_problem p = {.op = key->op == FP4_TUNE_MM ? FP4_OP_MM : FP4_OP_MM_W4A16, .a_q = &c.a_q, .a = &c.a, .b = &c.b,
                   .alpha = 1.0f, .out = &c.out, .memory = mem};

  /* Candidates: every supporting backend's configs; the reference only when it is alone. They run in
   * heuristic order (likely winners first), so the best-so-far median that bounds the others is
   * small early and a very slow candidate is cut after one timed call. */
  int supporting = 0;
  char why[256];
  for (int bi = 0; bi < fp4_registry_count(); bi++)
    supporting += fp4_problem_supported(ctx, fp4_registry_get(bi), &p, why, sizeof why) == FP4_OK;
  const int cc = mem == FP4_MEMORY_DEVICE ? fp4_device_cc(fp4_context_device(ctx)) : 0;
  int order[64], norder = 0;
  for (int bi = 0; bi < fp4_registry_count() && norder < 64; bi++) {
    const fp4_backend *b = fp4_registry_get(bi);
    if (fp4_problem_supported(ctx, b, &p, why, sizeof why) != FP4_OK) continue;
    if (mem == FP4_MEMORY_DEVICE && fp4_heuristic_host_backend(b)) {
      /* A host backend that claims device operands would time host work as the device's. */
      fp4_log(FP4_LOG_WARN, "fp4_tune: %s is a host backend; not timed on device operands", b->name);
      continue;
    }
    const int rank = fp4_heuristic_rank(b, cc, mem, p.op, M, fp4_problem_weights(&p));
    if (rank >= FP4_RANK_CHECK_ONLY && supporting > 1) {
      fp4_log(FP4_LOG_INFO, "fp4_tune: %s runs here only %s; not timed", b->name,
              rank >= FP4_RANK_VERIFICATION_ONLY ? "as a verification build" : "to check other backends");
      continue;
    }
    int j = norder++;
    for (; j > 0 && fp4_heuristic_rank(fp4_registry_get(order[j - 1]), cc, mem, p.op, M, fp4_problem_weights(&p)) > rank; j--)
      order[j] = order[j - 1];
    order[j] = bi;
  }
  int have_baseline = 0;
  double best = INFINITY;
  const fp4_backend *winner = NULL;
  for (int oi = 0; oi < norder; oi++) {
    const fp4_backend *b = fp4_registry_get(order[oi]);
    const char *names[32];
    int nc = b->configs ? b->configs(ctx, &p, names, 32) : 0;
    if (nc <= 0) {
      names[0] = NULL;
      nc = 1;
    }
    for (int ci = 0; ci < nc; ci++) {
      char what[160];
      snprintf(what, sizeof what, "%s%s%s", b->name, names[ci] ? "/" : "", names[ci] ? names[ci] : "");
      if (progress) progress(user, index, total, what);
      c.opts = (fp4_options){.backend = b->name, .config = names[ci]};
      res->candidates++;
      fp4_status cs = call_once(&c, 0);
      if (!cs) cs = fetch_output(&c, got);
      char bad[200] = "";
      if (!cs) judge_output(got, have_baseline ? baseline : NULL, (size_t)(M * N), bad, sizeof bad);
      else fp4_reason(bad, sizeof bad, "%s", fp4_last_error());
      fp4_call_timing t = {0};
      /* One warm-up and one timed call first: a candidate far slower than the best so far is cut. */
      if (!bad[0] && isfinite(best) && (cs = fp4_tune_time(ctx, NULL, call_once, &c, 1, 1, &t)))
        fp4_reason(bad, sizeof bad, "%s", fp4_last_error());
      if (!bad[0] && isfinite(best) && t.median_us > FP4_TUNE_CUT_FACTOR * best) {
        res->cut++;
        fp4_log(FP4_LOG_INFO, "fp4_tune: M=%lld N=%lld K=%lld %s cut: %.2f us > %dx the best so far (%.2f us)",
                (long long)M, (long long)N, (long long)K, what, t.median_us, FP4_TUNE_CUT_FACTOR, best);
        continue;
      }
      if (!bad[0] && (cs = fp4_tune_time(ctx, NULL, call_once, &c, 2, runs, &t)))
        fp4_reason(bad, sizeof bad, "%s", fp4_last_error());
      if (bad[0]) {
        res->rejected++;
        fp4_log(FP4_LOG_WARN, "fp4_tune: M=%lld N=%lld K=%lld %s rejected: %s", (long long)M, (long long)N, (long long)K,
                what, bad);
        continue;
      }
      if (!have_baseline) {
        memcpy(baseline, got, sizeof *got * (size_t)(M * N));
        have_baseline = 1;
      }
      fp4_log(FP4_LOG_INFO, "fp4_tune: M=%lld N=%lld K=%lld %s median %.2f us", (long long)M, (long long)N, (long long)K,
              what, t.median_us);
      if (t.median_us < best) {
        best = t.median_us;
        winner = b;
        fp4_reason(res->backend, sizeof res->backend, "%s", b->name);
        fp4_reason(res->config, sizeof res->config, "%s", names[ci] ? names[ci] : "");
        res->median_us = t.median_us;
      }
    }
  }
  fp4_clear_error();
  /* A checking build (the oracle) wins only when it alone runs; auto reaches it then by the heuristic
   * and never follows a cache entry naming it, so it is not stored. */
  const int check_only = winner && fp4_heuristic_rank(winner, cc, mem, p.op, M, fp4_problem_weights(&p)) >= FP4_RANK_CHECK_ONLY;
  if (check_only)
    fp4_log(FP4_LOG_INFO, "fp4_tune: M=%lld N=%lld K=%lld: only %s ran; not cached (auto falls back to it anyway)",
            (long long)M, (long long)N, (long long)K, res->backend);
  if (res->backend[0] && cache && !check_only)
    st = fp4_tuning_cache_set(cache, &res->key, res->backend, res->config[0] ? res->config : NULL, res->median_us);
done:
  free(got);
  free(baseline);
  free_buffers(ctx, &tb);
  return st;
}

fp4_status fp4_tune(fp4_context *ctx, const fp4_tune_key *keys, int count, int runs, fp4_tuning_cache *cache,
                    fp4_tune_result *results, fp4_tune_progress_fn progress, void *user) {
  fp4_clear_error();
  static const char fn[] = "fp4_tune";
  if (!keys || count < 0) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: keys is NULL or count (%d) negative", fn, count);
  if (runs < 1) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: runs (%d) must be >= 1", fn, runs);
  for (int i = 0; i < count; i++) {
    char why[128];
    fp4_tune_key_problem(&keys[i], why, sizeof why); /* the rules every key of the cache follows */
    if (why[0]) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: keys[%d].%s", fn, i, why);
  }
  for (int i = 0; i < count; i++) {
    /* A key whose M shares an earlier key's bucket is the same GEMM, timed at the same M: it gets the
     * earlier result, never a second timing whose winner would replace the first in the cache. */
    int j = 0;
    while (j < i && !fp4_tune_same_entry(&keys[j], &keys[i])) j++;
    if (j < i) {
      if (results) results[i] = results[j];
      continue;
    }
    fp4_tune_result scratch;
    fp4_status st = tune_one(ctx, &keys[i], runs, cache, results ? &results[i] : &scratch, progress, user, i, count);
    if (st) return st;
  }
  if (progress) progress(user, count, count, "done");
  return FP4_OK;
}
