/* The decode step's plan (bench_step.h): host arithmetic on the shape sets, the seeded routing,
 * and --plan's printout, checked without a GPU (tests/test_bench_step.c). */
#include "bench_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_exchange.h"
#include "step_report.h"

static int64_t fp4_bytes(int64_t n, int64_t k) {
  size_t sb = 0;
  if (fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, n, k, &sb)) return -1;
  return n * k / 2 + (int64_t)sb;
}

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}

int64_t step_bf16_nonfinite(const void *values, int64_t n) {
  int64_t bad = 0;
  const uint8_t *b = values;
  for (int64_t i = 0; i < n; i++) {
    uint16_t v;
    memcpy(&v, b + 2 * i, 2);
    bad += (v & 0x7F80u) == 0x7F80u; /* exponent all ones */
  }
  return bad;
}

int64_t step_out_width(const step_type *t) { return t->kind == STEP_MOE ? t->hidden : t->n; }

/* The MoE type from the routed gate_up / down and the shared expert's shapes (NULL: none). */
static fp4_status moe_type(const fp4_gemm_shape *gu, const fp4_gemm_shape *dn, const fp4_gemm_shape *sgu,
                           const fp4_gemm_shape *sdn, int ep, step_type *t) {
  if (!gu || !dn)
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "the routed experts lack a %s shape",
                         gu ? "down_proj" : "gate_up_proj");
  if (gu->n % 2 || dn->k != gu->n / 2 || dn->n != gu->k || dn->experts != gu->experts)
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "routed gate_up %lld x %lld and down %lld x %lld do not form "
                         "one gated MLP", (long long)gu->n, (long long)gu->k, (long long)dn->n, (long long)dn->k);
  if ((sgu == NULL) != (sdn == NULL) ||
      (sgu && (sgu->n % 2 || sdn->k != sgu->n / 2 || sdn->n != gu->k || sgu->k != gu->k)))
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "the shared expert's shapes do not form one gated MLP of H %lld",
                         (long long)gu->k);
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", sgu ? "mlp.experts+shared_expert" : "mlp.experts");
  t->kind = STEP_MOE;
  t->n = gu->n;
  t->k = gu->k;
  t->experts = gu->experts;
  t->active = gu->active;
  t->top_k = (gu->active + ep - 1) / ep;
  if (t->top_k > t->experts) t->top_k = t->experts;
  t->hidden = gu->k;
  t->inter = gu->n / 2;
  t->shared_inter = sgu ? sgu->n / 2 : 0;
  t->weight_bytes = fp4_bytes(gu->n, gu->k) + fp4_bytes(dn->n, dn->k);
  t->shared_bytes = sgu ? fp4_bytes(sgu->n, sgu->k) + fp4_bytes(sdn->n, sdn->k) : 0;
  return FP4_OK;
}

fp4_status step_plan_make(const char *model, int tp, int ep, step_plan *plan) {
  enum { MAXS = 32 };
  fp4_gemm_shape s[MAXS];
  int count = 0;
  memset(plan, 0, sizeof *plan);
  fp4_status st = fp4_shape_set(model, tp, ep, s, MAXS, &count);
  if (st) return st;
  if (count > MAXS) return fp4_set_error(FP4_ERR_INTERNAL, "%s has %d shapes, more than %d", model, count, MAXS);
  snprintf(plan->model, sizeof plan->model, "%s", model);
  plan->tp = tp;
  plan->ep = ep;
  const fp4_gemm_shape *gu = NULL, *dn = NULL, *sgu = NULL, *sdn = NULL;
  int moe_at = -1;
  int64_t layers = -1;
  for (int i = 0; i < count; i++) {
    const fp4_gemm_shape *g = &s[i];
    if (strcmp(g->storage, "nvfp4")) continue; /* BF16 / FP8 linears are not the FP4 part */
    if (fp4_bytes(g->n, g->k) < 0) { /* a shard's K no whole number of blocks: it has no FP4 bytes */
      char why[256];
      snprintf(why, sizeof why, "%s", fp4_last_error());
      return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s: %lld x %lld at tp %d, ep %d is not an NVFP4 weight (%s)", g->name,
                           (long long)g->n, (long long)g->k, tp, ep, why);
    }
    const int shared = strstr(g->name, "shared_expert") != NULL;
    int64_t per_layer = 1;
    if ((g->experts > 0 || shared) && moe_at < 0) {
      if (plan->ntypes >= STEP_MAX_TYPES)
        return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s has more than %d FP4 layer types", model, STEP_MAX_TYPES);
      moe_at = plan->ntypes++;
    }
    if (g->experts > 0 || shared) {
      const int up = ends_with(g->name, "gate_up_proj");
      if (!up && !ends_with(g->name, "down_proj"))
        return fp4_set_error(FP4_ERR_UNSUPPORTED, "MoE linear %s is neither gate_up_proj nor down_proj", g->name);
      if (g->experts > 0) {
        per_layer = (g->active + ep - 1) / ep;
        if (per_layer > g->experts) per_layer = g->experts;
        *(up ? &gu : &dn) = g;
      } else {
        *(up ? &sgu : &sdn) = g;
      }
    } else {
      if (plan->ntypes >= STEP_MAX_TYPES)
        return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s has more than %d FP4 layer types", model, STEP_MAX_TYPES);
      step_type *t = &plan->types[plan->ntypes++];
      memset(t, 0, sizeof *t);
      snprintf(t->name, sizeof t->name, "%s", g->name);
      t->kind = STEP_DENSE;
      t->n = g->n;
      t->k = g->k;
      t->weight_bytes = fp4_bytes(g->n, g->k);
    }
    if (per_layer < 1 || g->count % per_layer)
      return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s: count %lld is not a whole number of layers", g->name,
                           (long long)g->count);
    if (layers >= 0 && g->count / per_layer != layers)
      return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s's FP4 linears do not all occur once per layer (%s in %lld "
                           "layers, others in %lld): its decode step is not one repeated layer", model, g->name,
                           (long long)(g->count / per_layer), (long long)layers);
    layers = g->count / per_layer;
  }
  if (plan->ntypes == 0)
    return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s stores no linear in NVFP4", model);
  if (moe_at >= 0 && (st = moe_type(gu, dn, sgu, sdn, ep, &plan->types[moe_at]))) return st;
  plan->layers = layers;
  /* The chain: each type reads the first K columns of the previous type's output (the last type
   * feeds the next layer's first). */
  for (int i = 0; i < plan->ntypes; i++) {
    const step_type *t = &plan->types[i], *prev = &plan->types[(i + plan->ntypes - 1) % plan->ntypes];
    const int64_t in = t->kind == STEP_MOE ? t->hidden : t->k;
    if (t->kind == STEP_MOE ? step_out_width(prev) != in : step_out_width(prev) < in)
      return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s reads %lld features but %s writes %lld: the layers "
                           "do not chain", t->name, (long long)in, prev->name, (long long)step_out_width(prev));
  }
  plan->hidden = step_out_width(&plan->types[plan->ntypes - 1]);
  return FP4_OK;
}

int step_ranks(int tp, int ep) { return ep <= tp ? tp : tp == 1 ? ep : 0; }

int step_type_reduced(const step_plan *plan, const step_type *t) {
  if (t->kind == STEP_MOE) return plan->tp > 1 || plan->ep > 1;
  return plan->tp > 1 && step_out_width(t) == plan->hidden;
}

int64_t step_layer_bytes(const step_plan *plan, int64_t touched) {
  int64_t bytes = 0;
  for (int i = 0; i < plan->ntypes; i++) {
    const step_type *t = &plan->types[i];
    bytes += t->kind == STEP_MOE ? t->shared_bytes + touched * t->weight_bytes : t->weight_bytes;
  }
  return bytes;
}

uint64_t step_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void step_routing(uint64_t seed, int64_t layer, int64_t tokens, int64_t top_k, int64_t experts, int32_t *ids,
                  float *weights) {
  for (int64_t t = 0; t < tokens; t++) {
    uint64_t g = step_mix64(step_mix64(seed ^ 0x5354455052ull) + (uint64_t)layer * 0x100000001B3ull + (uint64_t)t);
    int32_t *row = ids + t * top_k;
    float *w = weights + t * top_k, sum = 0.0f;
    for (int64_t j = 0; j < top_k; j++) {
      int32_t e;
      int again;
      do { /* distinct experts per token: top_k <= experts */
        g = step_mix64(g);
        e = (int32_t)(g % (uint64_t)experts);
        again = 0;
        for (int64_t i = 0; i < j; i++) again |= row[i] == e;
      } while (again);
      row[j] = e;
      g = step_mix64(g);
      w[j] = 0.25f + (float)(g >> 40) * (1.0f / 16777216.0f); /* [0.25, 1.25) before normalization */
      sum += w[j];
    }
    for (int64_t j = 0; j < top_k; j++) w[j] /= sum;
  }
}

int64_t step_touched(const int32_t *ids, int64_t n, int64_t experts) {
  unsigned char *seen = calloc((size_t)experts, 1);
  int64_t touched = 0;
  if (!seen) return -1;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < experts && !seen[ids[i]]) {
      seen[ids[i]] = 1;
      touched++;
    }
  free(seen);
  return touched;
}


/* ---- --plan ----------------------------------------------------------------------------------- */

const step_type *step_moe_type(const step_plan *p) {
  for (int t = 0; t < p->ntypes; t++)
    if (p->types[t].kind == STEP_MOE) return &p->types[t];
  return NULL;
}

void step_print_plan(FILE *f, const step_plan *p) {
  const step_type *moe = step_moe_type(p);
  fprintf(f, "%s, tp %d, ep %d: %lld layers, hidden %lld; FP4 layer types of one rank's layer:\n", p->model, p->tp, p->ep,
          (long long)p->layers, (long long)p->hidden);
  for (int i = 0; i < p->ntypes; i++) {
    const step_type *t = &p->types[i];
    if (t->kind == STEP_DENSE)
      fprintf(f, "  %-28s dense  N %6lld K %6lld  %12lld bytes\n", t->name, (long long)t->n, (long long)t->k,
              (long long)t->weight_bytes);
    else
      fprintf(f, "  %-28s moe    E %lld (top-%lld of %lld per token on the rank), gate_up %lld x %lld, down %lld x %lld: "
                 "%lld bytes per expert; shared expert I %lld: %lld bytes\n",
              t->name, (long long)t->experts, (long long)t->top_k, (long long)t->active, (long long)t->n,
              (long long)t->k, (long long)t->hidden, (long long)t->inter, (long long)t->weight_bytes,
              (long long)t->shared_inter, (long long)t->shared_bytes);
  }
  fprintf(f, "  one layer reads %lld FP4 bytes%s; the rank's step has %lld layers\n",
          (long long)step_layer_bytes(p, moe ? moe->top_k : 0), moe ? " at batch 1 (top-k distinct routed experts)" : "",
          (long long)p->layers);
}

/* The MoE step per batch, from the seeded routing alone (no GPU): the distinct routed experts a
 * layer touches on a rank and the FP4 bytes the rank's step reads (with --moe-comm all-to-all they
 * differ between ranks: the mean and the largest rank's, whose read floor bounds the step), and with
 * all-to-all the rows a rank receives and the bytes it sends to the others per step. */
int step_print_plan_batches(FILE *f, const step_plan *p, const step_opts *o) {
  const step_type *moe = step_moe_type(p);
  if (!moe) return 0;
  /* All-reduce form: one rank's tokens pick top_k of its experts; all-to-all: every rank's tokens
   * pick `active` of all ranks' experts. Either is a one-pass count of one routing per layer. */
  const int ranks = o->a2a ? o->ep : 1;
  const int64_t top_k = o->a2a ? moe->active : moe->top_k;
  const int64_t layers = o->layers && o->layers < p->layers ? o->layers : p->layers;
  const int nb = o->nbatches;
  int64_t bmax = 0;
  for (int i = 0; i < nb; i++)
    if (o->batches[i] > bmax) bmax = o->batches[i];
  const size_t pairs = (size_t)ranks * (size_t)bmax * (size_t)top_k;
  int32_t *ids = malloc(pairs * sizeof *ids);
  float *w = malloc(pairs * sizeof *w);
  unsigned char *seen = malloc((size_t)ranks * (size_t)moe->experts);
  step_exchange_count *c = malloc((size_t)ranks * sizeof *c);
  /* per batch and rank: experts touched and rows received summed over the layers, FP4 bytes and
   * bytes sent per step */
  double *acc = calloc((size_t)nb * (size_t)ranks * 4, sizeof *acc);
  if (!ids || !w || !seen || !c || !acc) {
    free(ids), free(w), free(seen), free(c), free(acc);
    return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the routing");
  }
  for (int64_t l = 0; l < layers; l++) {
    step_routing(o->seed, l, (int64_t)ranks * bmax, top_k, (int64_t)ranks * moe->experts, ids, w);
    for (int i = 0; i < nb; i++) {
      step_exchange_counts(ids, ranks, o->batches[i], bmax, top_k, moe->experts, seen, c);
      for (int r = 0; r < ranks; r++) {
        double *a = acc + ((size_t)i * (size_t)ranks + (size_t)r) * 4;
        a[0] += (double)c[r].touched;
        a[1] += (double)c[r].received;
        a[2] += (double)step_layer_bytes(p, c[r].touched);
        a[3] += (double)(c[r].rows_out + c[r].rows_back) * (double)moe->hidden * 2.0;
      }
    }
  }
  fprintf(f, "  per batch, from the routing (seed %llu, %lld layers)%s:\n", (unsigned long long)o->seed,
          (long long)layers, o->a2a ? "; rank means, and the largest rank's" : "");
  if (o->a2a)
    fprintf(f, "  %6s %7s %15s %19s %17s %14s\n", "batch", "tokens", "experts/layer", "FP4 MB/step", "rows in/layer",
            "MB sent/step");
  else
    fprintf(f, "  %6s %7s %15s %19s\n", "batch", "tokens", "experts/layer", "FP4 MB/step");
  for (int i = 0; i < nb; i++) {
    double mean[4] = {0}, most[4] = {0};
    for (int r = 0; r < ranks; r++)
      for (int q = 0; q < 4; q++) {
        const double v = acc[((size_t)i * (size_t)ranks + (size_t)r) * 4 + (size_t)q] / (q < 2 ? (double)layers : 1.0);
        mean[q] += v / ranks;
        if (v > most[q]) most[q] = v;
      }
    const long long B = (long long)o->batches[i];
    if (o->a2a)
      fprintf(f, "  %6lld %7lld %6.1f (%6.1f) %8.1f (%8.1f) %7.1f (%7.1f) %6.2f (%5.2f)\n", B, B * ranks, mean[0],
              most[0], mean[2] / 1e6, most[2] / 1e6, mean[1], most[1], mean[3] / 1e6, most[3] / 1e6);
    else
      fprintf(f, "  %6lld %7lld %15.1f %19.1f\n", B, B, mean[0], mean[2] / 1e6);
  }
  free(ids), free(w), free(seen), free(c), free(acc);
  return 0;
}
