#include "dispatch/validate_moe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "format/matrix_check.h"

#define BAD(...) fp4_fail(FP4_ERR_INVALID_ARGUMENT, __VA_ARGS__)

fp4_status fp4_check_matrix_rows0(const char *fn, const char *name, const fp4_matrix *m) {
  if (!m || m->rows != 0) return fp4_check_matrix(fn, name, m);
  /* Check everything but the data pointer and the row count on a one-row stand-in. */
  fp4_matrix one = *m;
  one.rows = 1;
  if (!one.data) one.data = &one;
  return fp4_check_matrix(fn, name, &one);
}

fp4_status fp4_check_qmatrix_rows0(const char *fn, const char *name, const fp4_qmatrix *q) {
  if (!q || q->rows != 0) return fp4_check_qmatrix(fn, name, q);
  fp4_qmatrix one = *q;
  one.rows = 1;
  if (!one.data) one.data = &one;
  if (!one.scales) one.scales = &one;
  return fp4_check_qmatrix(fn, name, &one);
}

fp4_status fp4_check_grouped_qmatrix(const char *fn, const char *name, const fp4_grouped_qmatrix *g) {
  if (!g) return BAD("%s: %s is NULL", fn, name);
  if (!g->data) return BAD("%s: %s->data is NULL", fn, name);
  if (!g->scales) return BAD("%s: %s->scales is NULL", fn, name);
  fp4_status st = fp4_check_format_layout(fn, name, g->format, g->layout);
  if (st) return st;
  if (g->experts <= 0 || g->experts > FP4_MAX_EXPERTS)
    return BAD("%s: %s experts (%lld) must be in [1, 2^20]", fn, name, (long long)g->experts);
  if ((st = fp4_check_shape(fn, name, g->rows, g->cols))) return st;
  int bs = fp4_format_block_size(g->format);
  if (g->cols % bs)
    return BAD("%s: %s cols (K = %lld) is not a multiple of the %s block size %d", fn, name, (long long)g->cols,
               fp4_format_name(g->format), bs);
  if (!fp4_memory_name(g->memory))
    return BAD("%s: %s memory %d is neither host nor device", fn, name, (int)g->memory);
  /* Per-expert bytes are below 2^62 (rows, cols <= 2^31); E of them must fit an int64. */
  size_t sbytes = 0;
  if ((st = fp4_scales_size(g->format, g->layout, g->rows, g->cols, &sbytes))) return st;
  int64_t per_expert = g->rows * (g->cols / 2) + (int64_t)sbytes;
  if (per_expert > INT64_MAX / g->experts || (uint64_t)(per_expert * g->experts) > (uint64_t)SIZE_MAX)
    return BAD("%s: %s [%lld experts x %lld x %lld] does not fit in memory sizes", fn, name, (long long)g->experts,
               (long long)g->rows, (long long)g->cols);
  if (g->multipliers && ((uintptr_t)g->multipliers & (sizeof(float) - 1))) { /* the name made on failure only */
    char arg[80];
    snprintf(arg, sizeof arg, "%s->multipliers", name);
    return fp4_check_aligned(fn, arg, g->multipliers, sizeof(float), "f32 elements");
  }
  if (g->multipliers && g->memory == FP4_MEMORY_HOST)
    for (int64_t e = 0; e < g->experts; e++)
      if (!isfinite(g->multipliers[e]))
        return BAD("%s: %s multipliers[%lld] (%g) is not finite", fn, name, (long long)e, (double)g->multipliers[e]);
  return FP4_OK;
}

fp4_status fp4_check_offsets(const char *fn, const int64_t *offsets, int64_t experts, int64_t rows, fp4_memory memory) {
  if (!offsets) return BAD("%s: offsets is NULL", fn);
  fp4_status st = fp4_check_aligned(fn, "offsets", offsets, sizeof(int64_t), "int64 elements");
  if (st || memory != FP4_MEMORY_HOST) return st;
  if (offsets[0] != 0) return BAD("%s: offsets[0] is %lld; it must be 0", fn, (long long)offsets[0]);
  for (int64_t e = 0; e < experts; e++)
    if (offsets[e + 1] < offsets[e])
      return BAD("%s: offsets are not monotonic: offsets[%lld] = %lld < offsets[%lld] = %lld", fn, (long long)(e + 1),
                 (long long)offsets[e + 1], (long long)e, (long long)offsets[e]);
  if (offsets[experts] != rows)
    return BAD("%s: offsets[E = %lld] is %lld but the activations have T = %lld rows", fn, (long long)experts,
               (long long)offsets[experts], (long long)rows);
  return FP4_OK;
}

static fp4_status check_experts(const char *fn, const char *name, const fp4_moe_experts *x, fp4_moe_mode mode) {
  char gname[64], dname[64];
  snprintf(gname, sizeof gname, "%s.gate_up", name);
  snprintf(dname, sizeof dname, "%s.down", name);
  const fp4_grouped_qmatrix *gu = &x->gate_up, *dn = &x->down;
  fp4_status st = fp4_check_grouped_qmatrix(fn, gname, gu);
  if (st) return st;
  if ((st = fp4_check_grouped_qmatrix(fn, dname, dn))) return st;
  if (gu->rows % 2)
    return BAD("%s: %s rows (%lld) must be even: I gate rows, then I up rows", fn, gname, (long long)gu->rows);
  const int64_t I = gu->rows / 2, H = gu->cols;
  if (dn->experts != gu->experts)
    return BAD("%s: %s has %lld experts but %s has %lld", fn, dname, (long long)dn->experts, gname,
               (long long)gu->experts);
  if (dn->rows != H || dn->cols != I)
    return BAD("%s: %s is [%lld, %lld] per expert but must be [H, I] = [%lld, %lld] to match %s [2I, H] = [%lld, %lld]",
               fn, dname, (long long)dn->rows, (long long)dn->cols, (long long)H, (long long)I, gname,
               (long long)gu->rows, (long long)H);
  if (dn->memory != gu->memory)
    return BAD("%s: %s is in %s memory but %s in %s memory", fn, gname, fp4_memory_name(gu->memory), dname,
               fp4_memory_name(dn->memory));
  if (mode == FP4_MOE_W4A4 && !x->act_scales_device) { /* W4A4 NVFP4 quantizes the activations with them */
    if (gu->format == FP4_FORMAT_NVFP4) st = fp4_check_global_scale(fn, name, "gate_up_act_scale", x->gate_up_act_scale);
    if (!st && dn->format == FP4_FORMAT_NVFP4) st = fp4_check_global_scale(fn, name, "down_act_scale", x->down_act_scale);
    return st;
  }
  return FP4_OK;
}

fp4_status fp4_check_moe_layer(const char *fn, const fp4_moe_layer *layer) {
  if (!layer) return BAD("%s: layer is NULL", fn);
  if (layer->mode != FP4_MOE_W4A16 && layer->mode != FP4_MOE_W4A4)
    return BAD("%s: layer->mode %d is neither FP4_MOE_W4A16 nor FP4_MOE_W4A4", fn, (int)layer->mode);
  fp4_status st = check_experts(fn, "layer->routed", &layer->routed, layer->mode);
  if (st || !layer->shared) return st;
  const fp4_moe_experts *s = layer->shared;
  if ((st = check_experts(fn, "layer->shared", s, layer->mode))) return st;
  if (s->gate_up.experts != 1)
    return BAD("%s: layer->shared has %lld experts; a shared expert set must have exactly 1", fn,
               (long long)s->gate_up.experts);
  if (s->gate_up.cols != layer->routed.gate_up.cols)
    return BAD("%s: layer->shared has H = %lld but the routed experts have H = %lld", fn, (long long)s->gate_up.cols,
               (long long)layer->routed.gate_up.cols);
  if (s->gate_up.memory != layer->routed.gate_up.memory)
    return BAD("%s: layer->shared is in %s memory but the routed experts in %s memory", fn,
               fp4_memory_name(s->gate_up.memory), fp4_memory_name(layer->routed.gate_up.memory));
  return FP4_OK;
}

fp4_status fp4_check_moe_routing(const char *fn, const fp4_moe_routing *r, int64_t tokens, fp4_memory memory) {
  if (!r) return BAD("%s: routing is NULL", fn);
  if (r->tokens != tokens)
    return BAD("%s: routing->tokens (%lld) differs from hidden rows (T = %lld)", fn, (long long)r->tokens,
               (long long)tokens);
  if (r->top_k <= 0) return BAD("%s: routing->top_k (%lld) must be positive", fn, (long long)r->top_k);
  if (r->top_k > FP4_MAX_MOE_PAIRS)
    return BAD("%s: routing->top_k (%lld) must be in [1, 2^31-1]", fn, (long long)r->top_k);
  if (tokens > FP4_MAX_MOE_PAIRS / r->top_k)
    return BAD("%s: T * top_k = %lld * %lld exceeds 2^31-1 routed rows", fn, (long long)tokens, (long long)r->top_k);
  const fp4_matrix *w = &r->topk_weights;
  fp4_status st = fp4_check_matrix_rows0(fn, "routing->topk_weights", w);
  if (st) return st;
  if (w->rows != tokens || w->cols != r->top_k)
    return BAD("%s: routing->topk_weights is [%lld, %lld] but must be [T, top_k] = [%lld, %lld]", fn,
               (long long)w->rows, (long long)w->cols, (long long)tokens, (long long)r->top_k);
  if (w->dtype != FP4_DTYPE_F32)
    return BAD("%s: routing->topk_weights dtype is %s; it must be f32", fn, fp4_dtype_name(w->dtype));
  if (w->memory != memory)
    return BAD("%s: routing->topk_weights is in %s memory but the experts in %s memory", fn,
               fp4_memory_name(w->memory), fp4_memory_name(memory));
  if (r->topk_ids && (st = fp4_check_aligned(fn, "routing->topk_ids", r->topk_ids, sizeof(int32_t), "int32 elements")))
    return st;
  if (r->shared_weights &&
      (st = fp4_check_aligned(fn, "routing->shared_weights", r->shared_weights, sizeof(float), "f32 elements")))
    return st;
  if (tokens > 0 && !r->topk_ids) return BAD("%s: routing->topk_ids is NULL", fn);
  return FP4_OK;
}

fp4_status fp4_check_moe_routing_values(const char *fn, const fp4_moe_routing *r, int64_t experts, fp4_memory memory) {
  const int64_t tokens = r->tokens;
  if (memory != FP4_MEMORY_HOST || tokens == 0) return FP4_OK;
  const fp4_matrix *w = &r->topk_weights;
  const int64_t ld = w->ld ? w->ld : w->cols;
  const float *wd = w->data;
  for (int64_t t = 0; t < tokens; t++)
    for (int64_t j = 0; j < r->top_k; j++) {
      int32_t id = r->topk_ids[t * r->top_k + j];
      if (id < 0 || id >= experts)
        return BAD("%s: routing->topk_ids[%lld, %lld] is %d, outside [0, E = %lld)", fn, (long long)t, (long long)j,
                   (int)id, (long long)experts);
      if (!isfinite(wd[t * ld + j]))
        return BAD("%s: routing->topk_weights[%lld, %lld] (%g) is not finite", fn, (long long)t, (long long)j,
                   (double)wd[t * ld + j]);
    }
  if (r->shared_weights)
    for (int64_t t = 0; t < tokens; t++)
      if (!isfinite(r->shared_weights[t]))
        return BAD("%s: routing->shared_weights[%lld] (%g) is not finite", fn, (long long)t, (double)r->shared_weights[t]);
  return FP4_OK;
}
