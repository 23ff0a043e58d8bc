/* Public entry points of the grouped GEMM and the MoE layer: validate, build the problem, run it on
 * the backend the options name (or auto) through fp4_problem_run. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "dispatch/backend.h"
#include "dispatch/dispatch.h"
#include "dispatch/moe_workspace.h"
#include "dispatch/validate_moe.h"
#include "format/matrix_check.h"

#define BAD(...) fp4_fail(FP4_ERR_INVALID_ARGUMENT, __VA_ARGS__)

fp4_status fp4_grouped_expert(const fp4_grouped_qmatrix *g, int64_t e, fp4_qmatrix *view) {
  fp4_clear_error();
  static const char fn[] = "fp4_grouped_expert";
  if (!view) return BAD("%s: view is NULL", fn);
  fp4_status st = fp4_check_grouped_qmatrix(fn, "g", g);
  if (st) return st;
  if (e < 0 || e >= g->experts) return BAD("%s: expert %lld is outside [0, E = %lld)", fn, (long long)e, (long long)g->experts);
  if (g->multipliers && g->memory != FP4_MEMORY_HOST)
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "%s: g->multipliers are in device memory and cannot be read here; view with multipliers = NULL "
                    "and apply multipliers[%lld] yourself",
                    fn, (long long)e);
  size_t sbytes = 0;
  fp4_scales_size(g->format, g->layout, g->rows, g->cols, &sbytes);
  *view = (fp4_qmatrix){(uint8_t *)g->data + e * g->rows * (g->cols / 2), (uint8_t *)g->scales + (size_t)e * sbytes,
                        g->rows, g->cols, g->format, g->layout, g->multipliers ? g->multipliers[e] : 1.0f, g->memory};
  return FP4_OK;
}

static fp4_status check_device_context(const char *fn, fp4_context *ctx, fp4_memory memory) {
  if (memory == FP4_MEMORY_DEVICE && fp4_context_device(ctx) < 0)
    return BAD("%s: operands are in device memory but the context is %s", fn,
               ctx ? "host-only (device -1)" : "NULL; create one with fp4_context_create(&ctx, device)");
  return FP4_OK;
}

/* What the two grouped GEMMs share once the activations' rows (T), K and memory are known. */
static fp4_status check_grouped_common(const char *fn, fp4_context *ctx, const fp4_grouped_qmatrix *b,
                                       const int64_t *offsets, int64_t T, int64_t K, fp4_memory a_mem, float alpha,
                                       const fp4_matrix *out) {
  fp4_status st = fp4_check_grouped_qmatrix(fn, "b", b);
  if (st) return st;
  if ((st = fp4_check_matrix_rows0(fn, "out", out))) return st;
  if (b->cols != K)
    return BAD("%s: a has K = %lld columns but b has K = %lld", fn, (long long)K, (long long)b->cols);
  if (out->rows != T || out->cols != b->rows)
    return BAD("%s: out is [%lld, %lld] but must be [T, N] = [%lld, %lld]", fn, (long long)out->rows,
               (long long)out->cols, (long long)T, (long long)b->rows);
  if (b->memory != a_mem || out->memory != a_mem)
    return BAD("%s: a, b and out must share one memory (a %s, b %s, out %s)", fn, fp4_memory_name(a_mem),
               fp4_memory_name(b->memory), fp4_memory_name(out->memory));
  if (!isfinite(alpha)) return BAD("%s: alpha (%g) is not finite", fn, (double)alpha);
  if ((st = fp4_check_offsets(fn, offsets, b->experts, T, a_mem))) return st;
  return check_device_context(fn, ctx, a_mem);
}

fp4_status fp4_grouped_mm(fp4_context *ctx, const fp4_qmatrix *a, const fp4_grouped_qmatrix *b, const int64_t *offsets,
                          float alpha, fp4_matrix *out, const fp4_options *options) {
  fp4_clear_error();
  static const char fn[] = "fp4_grouped_mm";
  fp4_status st = fp4_check_qmatrix_rows0(fn, "a", a);
  if (st) return st;
  if ((st = check_grouped_common(fn, ctx, b, offsets, a->rows, a->cols, a->memory, alpha, out))) return st;
  if (a->format != b->format)
    return BAD("%s: a is %s but b is %s; both operands must share a format", fn, fp4_format_name(a->format),
               fp4_format_name(b->format));
  fp4_problem p = {.op = FP4_OP_GROUPED_MM, .a_q = a, .gb = b, .offsets = offsets, .alpha = alpha, .out = out,
                   .memory = a->memory};
  return a->rows ? fp4_problem_run(ctx, &p, options, fn) : fp4_problem_check(ctx, &p, options, fn);
}

fp4_status fp4_grouped_mm_w4a16(fp4_context *ctx, const fp4_matrix *a, const fp4_grouped_qmatrix *b,
                                const int64_t *offsets, float alpha, fp4_matrix *out, const fp4_options *options) {
  fp4_clear_error();
  static const char fn[] = "fp4_grouped_mm_w4a16";
  fp4_status st = fp4_check_matrix_rows0(fn, "a", a);
  if (st) return st;
  if ((st = check_grouped_common(fn, ctx, b, offsets, a->rows, a->cols, a->memory, alpha, out))) return st;
  fp4_problem p = {.op = FP4_OP_GROUPED_MM_W4A16, .a = a, .gb = b, .offsets = offsets, .alpha = alpha, .out = out,
                   .memory = a->memory};
  return a->rows ? fp4_problem_run(ctx, &p, options, fn) : fp4_problem_check(ctx, &p, options, fn);
}

fp4_status fp4_grouped_mm_workspace_size(fp4_context *ctx, const fp4_qmatrix *a, const fp4_grouped_qmatrix *b,
                                         const int64_t *offsets, const fp4_matrix *out, const fp4_options *options,
                                         size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_grouped_mm_workspace_size";
  if (!bytes) return BAD("%s: bytes is NULL", fn);
  *bytes = 0;
  fp4_status st = fp4_check_qmatrix_rows0(fn, "a", a);
  if (st) return st;
  if ((st = check_grouped_common(fn, ctx, b, offsets, a->rows, a->cols, a->memory, 1.0f, out))) return st;
  if (a->format != b->format)
    return BAD("%s: a is %s but b is %s; both operands must share a format", fn, fp4_format_name(a->format),
               fp4_format_name(b->format));
  fp4_problem p = {.op = FP4_OP_GROUPED_MM, .a_q = a, .gb = b, .offsets = offsets, .alpha = 1.0f,
                   .out = (fp4_matrix *)out /* not written: a size query */, .memory = a->memory};
  return a->rows ? fp4_problem_workspace_size(ctx, &p, options, fn, bytes) : fp4_problem_check(ctx, &p, options, fn);
}

fp4_status fp4_grouped_mm_w4a16_workspace_size(fp4_context *ctx, const fp4_matrix *a, const fp4_grouped_qmatrix *b,
                                               const int64_t *offsets, const fp4_matrix *out,
                                               const fp4_options *options, size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_grouped_mm_w4a16_workspace_size";
  if (!bytes) return BAD("%s: bytes is NULL", fn);
  *bytes = 0;
  fp4_status st = fp4_check_matrix_rows0(fn, "a", a);
  if (st) return st;
  if ((st = check_grouped_common(fn, ctx, b, offsets, a->rows, a->cols, a->memory, 1.0f, out))) return st;
  fp4_problem p = {.op = FP4_OP_GROUPED_MM_W4A16, .a = a, .gb = b, .offsets = offsets, .alpha = 1.0f,
                   .out = (fp4_matrix *)out /* not written: a size query */, .memory = a->memory};
  return a->rows ? fp4_problem_workspace_size(ctx, &p, options, fn, bytes) : fp4_problem_check(ctx, &p, options, fn);
}

/* The workspace a backend needs: its own declaration, else the common layout. */
static size_t backend_workspace(const fp4_backend *b, const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                size_t common) {
  if (!b->moe_workspace_size || !(b->extra_ops & FP4_OP_BIT(FP4_OP_MOE))) return common;
  size_t own = b->moe_workspace_size(layer, tokens, top_k);
  return own > common ? own : common;
}

static fp4_status workspace_need(const char *fn, const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                 const fp4_options *options, size_t *bytes) {
  *bytes = 0;
  const char *name = options ? options->backend : NULL;
  const fp4_backend *named = NULL;
  if (name && strcmp(name, "auto") != 0 && !(named = fp4_registry_find(name)))
    return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no backend named '%s'", fn, name); /* at T = 0 too */
  fp4_moe_ws_layout ws;
  fp4_status st = fp4_moe_ws_layout_make(fn, layer, tokens, top_k, &ws);
  if (st || tokens == 0) return st;
  if (named) {
    *bytes = backend_workspace(named, layer, tokens, top_k, ws.total);
    return FP4_OK;
  }
  /* Auto may pick any backend: the most any of them needs is always enough. */
  for (int i = 0; i < fp4_registry_count(); i++) {
    size_t need = backend_workspace(fp4_registry_get(i), layer, tokens, top_k, ws.total);
    if (need > *bytes) *bytes = need;
  }
  return FP4_OK;
}

fp4_status fp4_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                  const fp4_options *options, size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_moe_workspace_size";
  if (!bytes) return BAD("%s: bytes is NULL", fn);
  *bytes = 0;
  fp4_status st = fp4_check_moe_layer(fn, layer);
  if (st) return st;
  if (tokens < 0 || tokens > FP4_MAX_DIM) return BAD("%s: tokens (%lld) must be in [0, 2^31]", fn, (long long)tokens);
  /* The same bound as a call's routing->top_k, which is checked at T = 0 too. */
  if (top_k > FP4_MAX_MOE_PAIRS) return BAD("%s: top_k (%lld) must be in [1, 2^31-1]", fn, (long long)top_k);
  if (top_k <= 0 || (tokens && top_k > FP4_MAX_MOE_PAIRS / tokens))
    return BAD("%s: top_k (%lld) must be positive with T * top_k below 2^31", fn, (long long)top_k);
  return workspace_need(fn, layer, tokens, top_k, options, bytes);
}

/* The operand checks of a layer call (fp4_moe_forward and its context-workspace query); read_values:
 * also the routing's host elements, which the call reads and the query, which reads no data, does not. */
static fp4_status check_layer_call(const char *fn, fp4_context *ctx, const fp4_moe_layer *layer,
                                   const fp4_matrix *hidden, const fp4_moe_routing *routing, const fp4_matrix *out,
                                   int read_values) {
  fp4_status st = fp4_check_moe_layer(fn, layer);
  if (st) return st;
  const fp4_moe_experts *r = &layer->routed;
  const fp4_memory mem = r->gate_up.memory;
  const int64_t H = r->gate_up.cols;
  if ((st = fp4_check_matrix_rows0(fn, "hidden", hidden))) return st;
  if ((st = fp4_check_matrix_rows0(fn, "out", out))) return st;
  const int64_t T = hidden->rows;
  if (hidden->cols != H)
    return BAD("%s: hidden has %lld columns but the experts take H = %lld", fn, (long long)hidden->cols, (long long)H);
  if (out->rows != T || out->cols != H)
    return BAD("%s: out is [%lld, %lld] but must be [T, H] = [%lld, %lld]", fn, (long long)out->rows,
               (long long)out->cols, (long long)T, (long long)H);
  if (hidden->memory != mem || out->memory != mem)
    return BAD("%s: hidden, out and the experts must share one memory (hidden %s, out %s, experts %s)", fn,
               fp4_memory_name(hidden->memory), fp4_memory_name(out->memory), fp4_memory_name(mem));
  if ((st = fp4_check_moe_routing(fn, routing, T, mem))) return st;
  if (read_values && (st = fp4_check_moe_routing_values(fn, routing, r->gate_up.experts, mem))) return st;
  if (routing->shared_weights && !layer->shared)
    return BAD("%s: routing->shared_weights is set but the layer has no shared expert", fn);
  return check_device_context(fn, ctx, mem);
}

fp4_status fp4_moe_context_workspace_size(fp4_context *ctx, const fp4_moe_layer *layer, const fp4_matrix *hidden,
                                          const fp4_moe_routing *routing, const fp4_matrix *out,
                                          const fp4_options *options, size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_moe_context_workspace_size";
  if (!bytes) return BAD("%s: bytes is NULL", fn);
  *bytes = 0;
  fp4_status st = check_layer_call(fn, ctx, layer, hidden, routing, out, 0);
  if (st) return st;
  /* The call sizes its layer workspace before anything else: a layer whose workspace cannot be sized
   * (it overflows size_t) is refused by the call, and so here, with the call's status and reason. */
  size_t layer_bytes = 0;
  if ((st = workspace_need(fn, layer, hidden->rows, routing->top_k, options, &layer_bytes))) return st;
  fp4_problem p = {.op = FP4_OP_MOE, .a = hidden, .out = (fp4_matrix *)out /* not written: a size query */,
                   .memory = layer->routed.gate_up.memory, .moe = layer, .routing = routing};
  return hidden->rows ? fp4_problem_workspace_size(ctx, &p, options, fn, bytes) : fp4_problem_check(ctx, &p, options, fn);
}

fp4_status fp4_moe_forward(fp4_context *ctx, const fp4_moe_layer *layer, const fp4_matrix *hidden,
                           const fp4_moe_routing *routing, void *workspace, size_t workspace_bytes, fp4_matrix *out,
                           const fp4_options *options) {
  fp4_clear_error();
  static const char fn[] = "fp4_moe_forward";
  fp4_status st = check_layer_call(fn, ctx, layer, hidden, routing, out, 1);
  if (st) return st;
  const int64_t T = hidden->rows;
  const fp4_memory mem = layer->routed.gate_up.memory;
  size_t need = 0;
  if ((st = workspace_need(fn, layer, T, routing->top_k, options, &need))) return st;
  fp4_problem p = {.op = FP4_OP_MOE, .a = hidden, .out = out, .memory = mem, .moe = layer, .routing = routing,
                   .workspace = workspace, .workspace_bytes = workspace_bytes};
  if (T == 0) return fp4_problem_check(ctx, &p, options, fn); /* nothing to do: the options checked as for T > 0 */
  if (!workspace) return BAD("%s: workspace is NULL; fp4_moe_workspace_size() says %zu bytes", fn, need);
  if ((st = fp4_check_aligned(fn, "workspace", workspace, FP4_MOE_WORKSPACE_ALIGNMENT,
                              "FP4_MOE_WORKSPACE_ALIGNMENT")))
    return st;
  if (workspace_bytes < need)
    return BAD("%s: workspace_bytes (%zu) is less than the %zu bytes fp4_moe_workspace_size() asks for", fn,
               workspace_bytes, need);
  return fp4_problem_run(ctx, &p, options, fn);
}
