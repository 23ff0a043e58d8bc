/* One test per validation rule of the grouped GEMM and MoE entry points: each bad argument gives a
 * negative status and a message naming it; the defined edge cases (T = 0, experts without tokens)
 * succeed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "testing.h"

enum { E = 4, H = 64, I = 32, T = 3, K2 = 2 };

static uint8_t w1_data[E * 2 * I * H / 2], w1_scales[E * 128 * 4], w2_data[E * H * I / 2], w2_scales[E * 128 * 4];
static uint8_t s1_data[2 * I * H / 2], s1_scales[128 * 4], s2_data[H * I / 2], s2_scales[128 * 4];
static float w1_mult[E] = {1, 1, 1, 1}, hidden[T * H], outbuf[T * H], tw[T * K2] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
static int32_t ids[T * K2] = {0, 1, 2, 3, 0, 0};
static int64_t offsets[E + 1] = {0, 1, 1, 3, 3};
static _Alignas(FP4_MOE_WORKSPACE_ALIGNMENT) uint8_t ws[1 << 20];

static fp4_grouped_qmatrix gq(void *d, void *s, int64_t e, int64_t n, int64_t k) {
  return (fp4_grouped_qmatrix){d, s, NULL, e, n, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_MEMORY_HOST};
}
static fp4_moe_layer layer0(void) {
  fp4_moe_layer l = {FP4_MOE_W4A4, {gq(w1_data, w1_scales, E, 2 * I, H), gq(w2_data, w2_scales, E, H, I), 10.0f, 10.0f}, NULL};
  l.routed.gate_up.multipliers = w1_mult;
  return l;
}
static fp4_moe_routing routing0(void) {
  return (fp4_moe_routing){ids, T, K2, {tw, T, K2, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
}
static fp4_matrix dense(float *p, int64_t r, int64_t c) { return (fp4_matrix){p, r, c, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}; }

#define MOE(l, h, r, o) fp4_moe_forward(NULL, (l), (h), (r), ws, sizeof ws, (o), NULL)

static void moe_rules(void) {
  fp4_moe_layer l = layer0();
  fp4_moe_routing r = routing0();
  fp4_matrix h = dense(hidden, T, H), o = dense(outbuf, T, H);
  for (int i = 0; i < T * H; i++) hidden[i] = (float)(i % 7) - 3.0f;
  CHECK(MOE(&l, &h, &r, &o) == FP4_OK, "the valid call works: %s", fp4_last_error());

  /* expert ids */
  ids[3] = E;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_ids[1, 1] is 4, outside [0, E = 4)");
  ids[3] = -1;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_ids[1, 1] is -1, outside [0, E = 4)");
  ids[3] = 3;
  /* shapes of the routing */
  r.topk_weights.cols = 3;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_weights is [3, 3] but must be [T, top_k] = [3, 2]");
  r = routing0();
  r.topk_weights.rows = 2;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_weights is [2, 2]");
  r = routing0();
  r.tokens = 2;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "routing->tokens (2) differs from hidden rows (T = 3)");
  r = routing0();
  r.top_k = 0;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "top_k (0) must be positive");
  /* A top_k past the routed-row limit is refused for what it is, not as "must be positive". */
  r.top_k = (int64_t)1 << 31;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "routing->top_k (2147483648) must be in [1, 2^31-1]");
  r = routing0();
  r.topk_weights.dtype = FP4_DTYPE_BF16;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "dtype is bf16; it must be f32");
  r = routing0();
  tw[2] = NAN;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_weights[1, 0] (nan) is not finite");
  tw[2] = 0.5f;
  float sw[T] = {1, 1, 1};
  r.shared_weights = sw;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "shared_weights is set but the layer has no shared expert");
  r = routing0();

  /* T = 0: a no-op returning FP4_OK, nothing read or written (NULL data is fine). */
  fp4_matrix h0 = {NULL, 0, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST}, o0 = {NULL, 0, H, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_moe_routing r0 = {NULL, 0, K2, {NULL, 0, K2, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
  CHECK(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, NULL) == FP4_OK, "T = 0: %s", fp4_last_error());
  size_t bytes = 1;
  CHECK(fp4_moe_workspace_size(&l, 0, K2, NULL, &bytes) == FP4_OK && bytes == 0, "T = 0 needs no workspace (%zu)", bytes);
  /* T = 0 still validates everything else: the options as for T > 0 too */
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.backend = "nope"}), FP4_ERR_NOT_FOUND,
              "fp4_moe_forward: no backend named 'nope'");
  CHECK_ERROR(fp4_moe_workspace_size(&l, 0, K2, &(fp4_options){.backend = "nope"}, &bytes), FP4_ERR_NOT_FOUND, "'nope'");
  CHECK_ERROR(fp4_moe_context_workspace_size(NULL, &l, &h0, &r0, &o0, &(fp4_options){.backend = "nope"}, &bytes),
              FP4_ERR_NOT_FOUND, "'nope'");
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.backend = "cpu", .config = "bogus"}),
              FP4_ERR_NOT_FOUND, "options->config of backend 'cpu': unknown config 'bogus'");
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.config = "generic"}),
              FP4_ERR_INVALID_ARGUMENT, "options->config ('generic') needs a named options->backend");
  static const float dev_alpha = 1.0f;
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.alpha_device = &dev_alpha}),
              FP4_ERR_INVALID_ARGUMENT, "options->alpha_device is a device scalar but the operands are in host memory");
  /* The layer's device scalars are named by their path from the argument, as the layer's other fields are. */
  fp4_moe_layer lsc = l;
  lsc.routed.act_scales_device = &dev_alpha;
  CHECK_ERROR(fp4_moe_forward(NULL, &lsc, &h0, &r0, NULL, 0, &o0, NULL), FP4_ERR_INVALID_ARGUMENT,
              "fp4_moe_forward: layer->routed.act_scales_device is a device scalar but the operands are in host memory");
#if !FP4KIT_HAVE_CUDA
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.backend = "cuda"}), FP4_ERR_UNSUPPORTED,
              "built without CUDA");
#endif
  fp4_run_info info;
  memset(&info, 0x55, sizeof info);
  CHECK(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, &(fp4_options){.backend = "cpu", .info = &info}) == FP4_OK &&
            info.backend[0] == 0,
        "T = 0 runs nothing, and info says so: %s '%.32s'", fp4_last_error(), info.backend);
  h0.cols = H + 16;
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h0, &r0, NULL, 0, &o0, NULL), FP4_ERR_INVALID_ARGUMENT, "hidden has 80 columns");

  /* experts with no tokens (experts 1..3 unused, duplicates in every row): valid */
  int32_t only0[T * K2] = {0, 0, 0, 0, 0, 0};
  r.topk_ids = only0;
  CHECK(MOE(&l, &h, &r, &o) == FP4_OK, "experts without tokens, duplicate ids: %s", fp4_last_error());
  r = routing0();

  /* NULLs */
  CHECK_ERROR(MOE(NULL, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "layer is NULL");
  CHECK_ERROR(MOE(&l, NULL, &r, &o), FP4_ERR_INVALID_ARGUMENT, "hidden is NULL");
  CHECK_ERROR(MOE(&l, &h, NULL, &o), FP4_ERR_INVALID_ARGUMENT, "routing is NULL");
  CHECK_ERROR(MOE(&l, &h, &r, NULL), FP4_ERR_INVALID_ARGUMENT, "out is NULL");
  r.topk_ids = NULL;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_ids is NULL");
  r = routing0();
  r.topk_weights.data = NULL;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "topk_weights->data is NULL");
  r = routing0();
  l.routed.down.scales = NULL;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "layer->routed.down->scales is NULL");
  l = layer0();
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r, NULL, sizeof ws, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "workspace is NULL");
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r, ws, 100, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "workspace_bytes (100) is less than");

  /* Typed arrays aligned to their elements, the workspace to FP4_MOE_WORKSPACE_ALIGNMENT, on every
   * backend (the host backends read them through typed pointers): refused before any backend runs. */
  const char *host_backends[] = {NULL, "ref", "cpu"};
  for (int i = 0; i < 3; i++) {
    const fp4_options opt = {.backend = host_backends[i]};
    size_t need = 0;
    CHECK(fp4_moe_workspace_size(&l, T, K2, &opt, &need) == FP4_OK && need + 64 <= sizeof ws, "%s", fp4_last_error());
    CHECK(fp4_moe_forward(NULL, &l, &h, &r, ws + FP4_MOE_WORKSPACE_ALIGNMENT, need, &o, &opt) == FP4_OK,
          "a workspace at FP4_MOE_WORKSPACE_ALIGNMENT: %s", fp4_last_error());
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r, ws + 4, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT,
                "fp4_moe_forward: workspace");
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r, ws + 1, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT,
                "16-byte aligned");
    fp4_matrix h_mis = h, o_mis = o;
    h_mis.data = (uint8_t *)hidden + 2;
    o_mis.data = (uint8_t *)outbuf + 2;
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h_mis, &r, ws, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT, "hidden->data");
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r, ws, need, &o_mis, &opt), FP4_ERR_INVALID_ARGUMENT, "out->data");
    fp4_moe_routing r_mis = r;
    static int32_t ids_buf[T * K2 + 1];
    memcpy((uint8_t *)ids_buf + 2, ids, sizeof ids);
    r_mis.topk_ids = (const int32_t *)(const void *)((uint8_t *)ids_buf + 2);
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r_mis, ws, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT,
                "routing->topk_ids");
    r_mis = r;
    r_mis.topk_weights.data = (uint8_t *)tw + 1;
    CHECK_ERROR(fp4_moe_forward(NULL, &l, &h, &r_mis, ws, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT,
                "routing->topk_weights->data");
    fp4_moe_layer l_mis = l;
    l_mis.routed.gate_up.multipliers = (const float *)(const void *)((uint8_t *)w1_mult + 2);
    CHECK_ERROR(fp4_moe_forward(NULL, &l_mis, &h, &r, ws, need, &o, &opt), FP4_ERR_INVALID_ARGUMENT,
                "layer->routed.gate_up->multipliers");
  }

  /* K alignment and shapes */
  l.routed.gate_up.cols = l.routed.down.rows = 72;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "gate_up cols (K = 72) is not a multiple of the nvfp4 block size 16");
  l = layer0();
  l.routed.down.cols = I + 8;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "down cols (K = 40) is not a multiple");
  l = layer0();
  l.routed.gate_up.format = l.routed.down.format = FP4_FORMAT_MXFP4;
  l.routed.gate_up.cols = l.routed.down.rows = 48;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "not a multiple of the mxfp4 block size 32");
  l = layer0();
  l.routed.gate_up.rows = 2 * I + 1;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "rows (65) must be even");
  l = layer0();
  l.routed.down.cols = 2 * I;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "must be [H, I] = [64, 32]");
  l = layer0();
  l.routed.down.experts = E - 1;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "down has 3 experts but layer->routed.gate_up has 4");
  l = layer0();
  l.routed.gate_up.experts = l.routed.down.experts = 0;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "experts (0) must be in [1, 2^20]");
  l = layer0();
  h.cols = H / 2;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "hidden has 32 columns but the experts take H = 64");
  h = dense(hidden, T, H);
  o.cols = H / 2;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "out is [3, 32] but must be [T, H] = [3, 64]");
  o = dense(outbuf, T, H);

  /* mode, activation scales, multipliers, memory */
  l.mode = (fp4_moe_mode)5;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "mode 5 is neither");
  l = layer0();
  l.routed.down_act_scale = 0.0f;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "down_act_scale (0) must be finite and positive");
  l.routed.down_act_scale = 1e-45f; /* its reciprocal, the activations' multiplier, is not a float */
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "down_act_scale (1.4013e-45) must be finite and positive");
  l.routed.down_act_scale = 10.0f;
  l.routed.gate_up_act_scale = 1e-45f;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "layer->routed.gate_up_act_scale (1.4013e-45)");
  l.routed.gate_up_act_scale = 10.0f;
  l.routed.down_act_scale = 0.0f;
  l.mode = FP4_MOE_W4A16; /* W4A16 does not use the activation scales */
  CHECK(MOE(&l, &h, &r, &o) == FP4_OK, "W4A16 ignores act scales: %s", fp4_last_error());
  l = layer0();
  w1_mult[2] = INFINITY;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "gate_up multipliers[2] (inf) is not finite");
  w1_mult[2] = 1.0f;
  l.routed.down.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "gate_up is in host memory but layer->routed.down in device memory");
  l = layer0();
  l.routed.gate_up.memory = l.routed.down.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "must share one memory");
  l = layer0();

  /* the shared expert */
  fp4_moe_experts sh = {gq(s1_data, s1_scales, 1, 2 * I, H), gq(s2_data, s2_scales, 1, H, I), 10.0f, 10.0f};
  l.shared = &sh;
  CHECK(MOE(&l, &h, &r, &o) == FP4_OK, "with a shared expert: %s", fp4_last_error());
  sh.gate_up.experts = sh.down.experts = 2;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "layer->shared has 2 experts; a shared expert set must have exactly 1");
  sh.gate_up.experts = sh.down.experts = 1;
  sh.gate_up.cols = sh.down.rows = 32;
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "layer->shared has H = 32 but the routed experts have H = 64");

  /* workspace size query */
  l = layer0();
  size_t b1 = 0, b2 = 0;
  CHECK(fp4_moe_workspace_size(&l, 1, K2, NULL, &b1) == FP4_OK && fp4_moe_workspace_size(&l, 64, K2, NULL, &b2) == FP4_OK &&
            b1 > 0 && b2 > b1 && b2 <= sizeof ws,
        "workspace grows with T: %zu, %zu", b1, b2);
  CHECK_ERROR(fp4_moe_workspace_size(&l, 1, K2, &(fp4_options){.backend = "nope"}, &b1), FP4_ERR_NOT_FOUND, "no backend named 'nope'");
  CHECK_ERROR(fp4_moe_workspace_size(&l, -1, K2, NULL, &b1), FP4_ERR_INVALID_ARGUMENT, "tokens (-1)");
  CHECK_ERROR(fp4_moe_workspace_size(&l, 1, K2, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "bytes is NULL");
  CHECK_ERROR(fp4_moe_workspace_size(&l, (int64_t)1 << 30, 8, NULL, &b1), FP4_ERR_INVALID_ARGUMENT, "T * top_k below 2^31");
  /* At T = 0 the call refuses a top_k past 2^31-1 (its routing is checked); so does the query. */
  fp4_moe_routing rbig = routing0();
  fp4_matrix h_empty = dense(hidden, 0, H), o_empty = dense(outbuf, 0, H);
  rbig.tokens = 0;
  rbig.top_k = (int64_t)1 << 31;
  rbig.topk_weights.rows = 0;
  rbig.topk_weights.cols = rbig.top_k;
  rbig.topk_weights.ld = 0;
  CHECK_ERROR(fp4_moe_forward(NULL, &l, &h_empty, &rbig, ws, sizeof ws, &o_empty, NULL), FP4_ERR_INVALID_ARGUMENT,
              "top_k (2147483648) must be in [1, 2^31-1]");
  b1 = 7;
  CHECK_ERROR(fp4_moe_workspace_size(&l, 0, rbig.top_k, NULL, &b1), FP4_ERR_INVALID_ARGUMENT,
              "top_k (2147483648) must be in [1, 2^31-1]");
  CHECK(b1 == 0, "a refused query says 0 bytes (%zu)", b1);

  /* context workspace query: validated as the call; host backends take none */
  size_t cb = 1;
  CHECK(fp4_moe_context_workspace_size(NULL, &l, &h, &r, &o, NULL, &cb) == FP4_OK && cb == 0,
        "host layer: context workspace %zu (%s)", cb, fp4_last_error());
  CHECK_ERROR(fp4_moe_context_workspace_size(NULL, &l, &h, &r, &o, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "bytes is NULL");
  CHECK_ERROR(fp4_moe_context_workspace_size(NULL, &l, &h0, &r, &o, NULL, &cb), FP4_ERR_INVALID_ARGUMENT,
              "hidden has 80 columns");
  CHECK_ERROR(fp4_moe_context_workspace_size(NULL, &l, &h, &r, &o, &(fp4_options){.backend = "nope"}, &cb),
              FP4_ERR_NOT_FOUND, "nope");
  /* The query reads no data: routing it is given before the router has run (ids out of range, weights
   * not yet written) is sized like any other, while the call refuses it. */
  ids[1] = E + 7;
  tw[0] = NAN;
  cb = 1;
  CHECK(fp4_moe_context_workspace_size(NULL, &l, &h, &r, &o, NULL, &cb) == FP4_OK && cb == 0,
        "the query read the routing: %s", fp4_last_error());
  CHECK_ERROR(MOE(&l, &h, &r, &o), FP4_ERR_INVALID_ARGUMENT, "routing->topk_weights[0, 0] (nan) is not finite");
  ids[1] = 1;
  tw[0] = 0.5f;
  /* Shapes every check passes whose layer workspace does not fit size_t (H = 2^31, I = 2^30, T * k =
   * 2^30: two sections of 2^63 bytes): the call refuses them, so the query refuses them as the call does
   * (it read none of the 4 GiB routing arrays this would take, nor any other data). */
  const int64_t bigH = (int64_t)1 << 31, bigI = (int64_t)1 << 30, bigK = (int64_t)1 << 30;
  fp4_moe_layer big = {FP4_MOE_W4A16, {gq(w1_data, w1_scales, 1, 2 * bigI, bigH), gq(w2_data, w2_scales, 1, bigH, bigI), 1, 1},
                       NULL};
  fp4_matrix hb = dense(hidden, 1, bigH), ob = dense(outbuf, 1, bigH);
  fp4_moe_routing rb = {ids, 1, bigK, {tw, 1, bigK, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
  cb = 1;
  CHECK_ERROR(fp4_moe_workspace_size(&big, 1, bigK, NULL, &cb), FP4_ERR_INVALID_ARGUMENT, "does not fit in size_t");
  CHECK_ERROR(fp4_moe_context_workspace_size(NULL, &big, &hb, &rb, &ob, NULL, &cb), FP4_ERR_INVALID_ARGUMENT,
              "fp4_moe_context_workspace_size: the workspace for T = 1, top_k = 1073741824 does not fit in size_t");
  CHECK(cb == 0, "a refused query says 0 bytes (%zu)", cb);
}

static void grouped_rules(void) {
  static uint8_t a_data[T * H / 2], a_scales[128 * 4];
  fp4_qmatrix a = {a_data, a_scales, T, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_grouped_qmatrix b = gq(w1_data, w1_scales, E, 2 * I, H);
  fp4_matrix o = dense(outbuf, T, 2 * I), ad = dense(hidden, T, H);
  CHECK(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL) == FP4_OK, "valid: %s", fp4_last_error());
  CHECK(fp4_grouped_mm_w4a16(NULL, &ad, &b, offsets, 1.0f, &o, NULL) == FP4_OK, "valid: %s", fp4_last_error());

  int64_t bad0[E + 1] = {1, 1, 1, 3, 3}, down[E + 1] = {0, 2, 1, 3, 3}, short_end[E + 1] = {0, 1, 1, 2, 2};
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, bad0, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "offsets[0] is 1; it must be 0");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, down, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT,
              "offsets are not monotonic: offsets[2] = 1 < offsets[1] = 2");
  CHECK_ERROR(fp4_grouped_mm_w4a16(NULL, &ad, &b, short_end, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT,
              "offsets[E = 4] is 2 but the activations have T = 3 rows");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, NULL, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "offsets is NULL");
  /* offsets are int64 and multipliers f32 read through typed pointers: aligned to their elements */
  static int64_t off_buf[E + 2];
  memcpy((uint8_t *)off_buf + 4, offsets, sizeof offsets);
  const int64_t *off_mis = (const int64_t *)(const void *)((uint8_t *)off_buf + 4);
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, off_mis, 1.0f, &o, &(fp4_options){.backend = "ref"}), FP4_ERR_INVALID_ARGUMENT,
              "offsets (");
  CHECK_ERROR(fp4_grouped_mm_w4a16(NULL, &ad, &b, off_mis, 1.0f, &o, &(fp4_options){.backend = "cpu"}),
              FP4_ERR_INVALID_ARGUMENT, "8-byte aligned (int64 elements)");
  fp4_grouped_qmatrix b_mis = b;
  b_mis.multipliers = (const float *)(const void *)((uint8_t *)w1_mult + 1);
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b_mis, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "b->multipliers");
  CHECK_ERROR(fp4_grouped_expert(&b_mis, 0, &(fp4_qmatrix){0}), FP4_ERR_INVALID_ARGUMENT, "g->multipliers");
  CHECK_ERROR(fp4_grouped_mm(NULL, NULL, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "a is NULL");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, NULL, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "b is NULL");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "out is NULL");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, NAN, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "alpha (nan) is not finite");
  b.cols = 40;
  a.cols = 40;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "not a multiple of the nvfp4 block size 16");
  a.cols = H;
  b = gq(w1_data, w1_scales, E, 2 * I, H);
  b.format = FP4_FORMAT_MXFP4;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "share a format");
  b = gq(w1_data, w1_scales, E, 2 * I, H);
  b.cols = 2 * H;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "a has K = 64 columns but b has K = 128");
  b = gq(w1_data, w1_scales, E, 2 * I, H);
  o.cols = I;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "out is [3, 32] but must be [T, N] = [3, 64]");
  o = dense(outbuf, T, 2 * I);
  b.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "share one memory");
  b = gq(w1_data, w1_scales, E, 2 * I, H);
  b.experts = ((int64_t)1 << 20) + 1;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "experts (1048577)");
  b = gq(w1_data, w1_scales, E, 2 * I, H);
  /* device operands need a device context */
  a.memory = b.memory = o.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a, &b, offsets, 1.0f, &o, NULL), FP4_ERR_INVALID_ARGUMENT, "context is NULL");
  a.memory = b.memory = o.memory = FP4_MEMORY_HOST;
  /* T = 0 */
  int64_t zeros[E + 1] = {0};
  fp4_qmatrix a0 = {NULL, NULL, 0, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix o0 = {NULL, 0, 2 * I, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  CHECK(fp4_grouped_mm(NULL, &a0, &b, zeros, 1.0f, &o0, NULL) == FP4_OK, "T = 0: %s", fp4_last_error());
  /* T = 0 does nothing but checks the options as any T does */
  fp4_matrix ad0 = {NULL, 0, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  static const float dev_alpha = 1.0f;
  const fp4_options nope = {.backend = "nope"}, host_alpha = {.alpha_device = &dev_alpha},
                    bogus = {.backend = "cpu", .config = "bogus"}, ref_generic = {.backend = "ref", .config = "generic"};
  size_t bytes = 1;
  CHECK_ERROR(fp4_grouped_mm(NULL, &a0, &b, zeros, 1.0f, &o0, &nope), FP4_ERR_NOT_FOUND, "no backend named 'nope'");
  CHECK_ERROR(fp4_grouped_mm_w4a16(NULL, &ad0, &b, zeros, 1.0f, &o0, &nope), FP4_ERR_NOT_FOUND, "'nope'");
  CHECK_ERROR(fp4_grouped_mm_workspace_size(NULL, &a0, &b, zeros, &o0, &nope, &bytes), FP4_ERR_NOT_FOUND, "'nope'");
  CHECK_ERROR(fp4_grouped_mm_w4a16_workspace_size(NULL, &ad0, &b, zeros, &o0, &nope, &bytes), FP4_ERR_NOT_FOUND, "'nope'");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a0, &b, zeros, 1.0f, &o0, &host_alpha), FP4_ERR_INVALID_ARGUMENT,
              "options->alpha_device is a device scalar but the operands are in host memory");
  CHECK_ERROR(fp4_grouped_mm_workspace_size(NULL, &a0, &b, zeros, &o0, &host_alpha, &bytes), FP4_ERR_INVALID_ARGUMENT,
              "options->alpha_device");
  CHECK_ERROR(fp4_grouped_mm(NULL, &a0, &b, zeros, 1.0f, &o0, &bogus), FP4_ERR_NOT_FOUND, "unknown config 'bogus'");
  CHECK_ERROR(fp4_grouped_mm_w4a16(NULL, &ad0, &b, zeros, 1.0f, &o0, &ref_generic), FP4_ERR_NOT_FOUND,
              "options->config of backend 'ref'");
#if !FP4KIT_HAVE_CUDA
  CHECK_ERROR(fp4_grouped_mm(NULL, &a0, &b, zeros, 1.0f, &o0, &(fp4_options){.backend = "cuda"}), FP4_ERR_UNSUPPORTED,
              "built without CUDA");
#endif
  CHECK(fp4_grouped_mm_w4a16_workspace_size(NULL, &ad0, &b, zeros, &o0, &(fp4_options){.backend = "cpu"}, &bytes) ==
                FP4_OK && bytes == 0,
        "T = 0 query: %s", fp4_last_error());

  /* out = alpha * a.multiplier * b.multipliers[e] * ...: a product of the three is formed as the
   * reference forms it, so alpha and a.multiplier whose float product overflows (1e40) or underflows
   * (1e-50) with a multiplier that brings it back give the reference's finite values on every backend. */
  {
    static uint8_t xa[T * 64 / 2], xs[T * 4], xw[2 * 8 * 64 / 2], xws[2 * 8 * 4];
    memset(xa, 0x22, sizeof xa); /* codes of 1.0, scales of 1.0: every product 1, every sum 64 */
    memset(xw, 0x22, sizeof xw);
    memset(xs, 0x38, sizeof xs);
    memset(xws, 0x38, sizeof xws);
    const float cases[2][3] = {{1e20f, 1e20f, 1e-30f}, {1e-20f, 1e-30f, 1e30f}}; /* alpha, a's, b's multiplier */
    for (int c = 0; c < 2; c++) {
      float xm[2] = {cases[c][2], cases[c][2]}, got[2][T * 8];
      fp4_qmatrix xq = {xa, xs, T, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, cases[c][1], FP4_MEMORY_HOST};
      fp4_grouped_qmatrix xb = {xw, xws, xm, 2, 8, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, FP4_MEMORY_HOST};
      const int64_t xoff[3] = {0, 1, T};
      for (int i = 0; i < 2; i++) {
        fp4_matrix xo = dense(got[i], T, 8);
        CHECK(fp4_grouped_mm(NULL, &xq, &xb, xoff, cases[c][0], &xo, &(fp4_options){.backend = i ? "ref" : "cpu"}) == FP4_OK,
              "%s", fp4_last_error());
      }
      const float want = (float)(64.0 * ((double)cases[c][0] * cases[c][2] * cases[c][1]));
      CHECK(got[1][0] == want && got[0][0] == want && got[0][T * 8 - 1] == want,
            "scale products out of float range: cpu %g, ref %g, want %g", (double)got[0][0], (double)got[1][0],
            (double)want);
    }
  }

  /* expert views */
  fp4_qmatrix v;
  b.multipliers = w1_mult;
  w1_mult[3] = 0.5f;
  CHECK(fp4_grouped_expert(&b, 3, &v) == FP4_OK && v.multiplier == 0.5f && v.rows == 2 * I &&
            v.data == w1_data + 3 * 2 * I * H / 2 && v.scales == w1_scales + 3 * 128 * 4,
        "expert view: %s", fp4_last_error());
  w1_mult[3] = 1.0f;
  CHECK_ERROR(fp4_grouped_expert(&b, E, &v), FP4_ERR_INVALID_ARGUMENT, "expert 4 is outside [0, E = 4)");
  b.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(fp4_grouped_expert(&b, 0, &v), FP4_ERR_UNSUPPORTED, "multipliers are in device memory");
}

int main(void) {
  moe_rules();
  grouped_rules();
  return TEST_SUMMARY();
}
