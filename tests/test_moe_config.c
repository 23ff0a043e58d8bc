/*
 * The cuda backend's MoE config chooser (src/backends/cuda/config/moe_config.h) without a GPU: the
 * default variant of every GEMM of the Qwen3.5-397B and DeepSeek-R1 layers at B = 1-4096 equals the
 * choice recorded from the rules it replaced (moe_recorded_choices.h), but where a later rule moved
 * it (the lean kernel at 9-11 rows per slot on SM90); the later rules' thresholds (the lean kernel's
 * rows, the prefill tiles' rows on SM90 and SM80) at their edges; every name parses back to itself; a forced variant that cannot run a GEMM is refused with the rule, never replaced; SiLU*up
 * is fused into the gate_up GEMM exactly where its epilogue can run, and the shared expert into the
 * routed launches exactly where the rule allows.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/config/moe_config.h"
#include "backends/cuda/cuda_kernels.h"
#include "moe_recorded_choices.h"

static int g_checks, g_failures, g_lean_rows, g_clustered, g_route_fused;

#define EXPECT(cond, ...)                 \
  do {                                    \
    g_checks++;                           \
    if (!(cond)) {                        \
      g_failures++;                       \
      printf("FAIL: " __VA_ARGS__);       \
      printf("\n");                       \
    }                                     \
  } while (0)

/* The cluster K split the default adds to a recorded moe.lean.r32.k4.s1 choice (0: none), from the
 * rule as stated: SM90, the compile-time K walk, one wave (5 two-tile CTAs per SM) holding the CTAs
 * of the unsplit grid C times over and K leaving every warp 4 slabs of its CTA's part. */
static int cluster_expected(const fp4_moe_gemm_shape *s, const fp4_moe_arch *arch) {
  const int64_t slots = s->rows < s->experts ? s->rows : s->experts, mean = (s->rows + slots - 1) / slots;
  const int64_t ctas = (s->n + 31) / 32 * slots * ((mean + 7) / 8), wave = 5 * (int64_t)arch->sms;
  if (arch->major != 9 || s->format != FP4_FORMAT_NVFP4 || s->act != FP4_CUDA_ACT_BF16) return 0;
  for (int c = 4; c >= 2; c /= 2)
    if (ctas * c <= wave && s->k / 128 >= 16 * c) return c;
  return 0;
}

static fp4_moe_layer_shape layer_of(const struct moe_recorded_choice *c) {
  const int format = c->mxfp4 ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
  return (fp4_moe_layer_shape){.tokens = c->tokens, .top_k = c->top_k, .experts = c->experts, .hidden = c->hidden,
                               .inter = c->inter, .shared_inter = c->inter, .mode = c->mode, .format = format,
                               .layout = FP4_LAYOUT_128X4, .shared_format = format, .shared_layout = FP4_LAYOUT_128X4,
                               .hidden_dtype = FP4_DTYPE_BF16, .hidden_aligned = 1, .workspace_aligned = 1};
}

/* 1 when a variant name is the two-tile lean kernel (32 weight rows per CTA). */
static int is_lean(const char *name, int rows) {
  return !strncmp(name, "moe.lean.", 9) && rows == 32 && strstr(name, ".r32.") != NULL;
}

/* The recorded choices predate SiLU*up in the gate_up epilogue and the shared expert in the routed
 * launches: the plan fuses SiLU*up into every W4A16 NVFP4 set of at most 128 rows whose gate_up runs
 * the two-tile lean kernel (the model shapes take it on either K walk; the hidden states are bf16
 * here) and the shared expert into the routed launches where both routed GEMMs run that kernel on
 * the compile-time K walk, the expert width is 1024 or 2048 and the shared set streams; the shared
 * GEMMs then run the routed variants, every other variant is the recorded one. */
static void test_recorded(void) {
  const size_t n = sizeof kMoeRecordedChoices / sizeof *kMoeRecordedChoices;
  for (size_t i = 0; i < n; i++) {
    const struct moe_recorded_choice *c = &kMoeRecordedChoices[i];
    const fp4_moe_arch arch = {c->major, c->minor, c->sms, c->smem_optin, c->wgra};
    const fp4_moe_layer_shape L = layer_of(c);
    fp4_moe_layer_plan plan;
    char why[320] = "";
    const int rc = fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &arch, &plan, why, sizeof why);
    EXPECT(rc == 0 && plan.sets == 2, "%s E=%lld B=%lld: plan failed: %s", c->device, (long long)c->experts,
           (long long)c->tokens, why);
    /* SiLU*up fused where a set's gate_up runs the two-tile lean kernel (W4A16, NVFP4); the shared
     * expert in the routed launches (on their variants) where, besides, the routed down is on the
     * two-tile lean kernel and the shared set is not on the prefill tiles */
    const int w4a16_nv = c->mode == FP4_MOE_W4A16 && !c->mxfp4;
    const int64_t P = c->tokens * c->top_k, T = c->tokens;
    const int silu0 = w4a16_nv && is_lean(c->variant[FP4_MOE_GATE_UP], 32) && P <= 128;
    const int shared_prefill = !strncmp(c->variant[FP4_MOE_SHARED_GATE_UP], "moe.prefill.", 12);
    const int fixed = !strstr(c->variant[FP4_MOE_GATE_UP], "generic-k") && !strstr(c->variant[FP4_MOE_DOWN], "generic-k");
    const int shared_fused = silu0 && fixed && is_lean(c->variant[FP4_MOE_DOWN], 32) && !shared_prefill && T <= 128 &&
                             (c->inter == 1024 || c->inter == 2048);
    const int silu1 = shared_fused || (w4a16_nv && is_lean(c->variant[FP4_MOE_SHARED_GATE_UP], 32) && T <= 128);
    EXPECT(rc == 0 && plan.shared_fused == shared_fused && plan.silu_fused[0] == silu0 && plan.silu_fused[1] == silu1,
           "%s E=%lld B=%lld: shared expert fused %d (expected %d), SiLU*up fused %d %d (expected %d %d)", c->device,
           (long long)c->experts, (long long)c->tokens, plan.shared_fused, shared_fused, plan.silu_fused[0],
           plan.silu_fused[1], silu0, silu1);
    /* and predate the routing in the gate_up launch: wherever W4A16 fuses SiLU*up there on the
     * compile-time K walk, up to 32 pairs */
    const int route_fused = c->mode == FP4_MOE_W4A16 && silu0 && !strstr(c->variant[FP4_MOE_GATE_UP], "generic-k") &&
                            P <= FP4_MOE_ROUTE_FUSED_PAIRS;
    EXPECT(rc == 0 && plan.route_fused == route_fused, "%s E=%lld B=%lld: routing in gate_up %d (expected %d)", c->device,
           (long long)c->experts, (long long)c->tokens, plan.route_fused, route_fused);
    g_route_fused += route_fused;
    /* and predate the shared expert on the dense kernels: wanted wherever W4A16 put it on the prefill tiles */
    const int shared_dense = c->mode == FP4_MOE_W4A16 && shared_prefill;
    EXPECT(rc == 0 && plan.shared_dense == shared_dense, "%s E=%lld B=%lld: shared expert on the dense kernels %d (expected %d)",
           c->device, (long long)c->experts, (long long)c->tokens, plan.shared_dense, shared_dense);
    /* The recorded choices also predate the lean kernel at 9-11 routed rows per expert slot on SM90
     * (NVFP4; bf16 rows, W4A4 through them): there the routed GEMMs recorded on the tensor-core
     * kernel must now be on the two-tile lean one; its K split and span follow the rules recorded
     * at other points. */
    const int64_t slots = P < c->experts ? P : c->experts, mean = (P + slots - 1) / slots;
    const int lean_rows = c->major >= 9 && !c->mxfp4 && mean >= 9 && mean <= 11;
    for (int g = 0; rc == 0 && g < FP4_MOE_GEMMS; g++) {
      const char *got = fp4_moe_variant_name(&plan.variant[g]);
      const char *want = shared_fused && g >= FP4_MOE_SHARED_GATE_UP ? c->variant[g - 2] : c->variant[g];
      if (lean_rows && g < FP4_MOE_SHARED_GATE_UP && !strncmp(want, "moe.mma.", 8)) {
        EXPECT(is_lean(got, 32), "%s E=%lld %s B=%lld GEMM %d: %.1f rows per slot chose %s, not the lean kernel",
               c->device, (long long)c->experts, c->mode == FP4_MOE_W4A4 ? "w4a4" : "w4a16", (long long)c->tokens, g,
               (double)P / (double)slots, got);
        g_lean_rows++;
        continue;
      }
      /* The recorded choices predate the cluster K split: a recorded moe.lean.r32.k4.s1 takes the
       * clusters the rule gives it. */
      char clustered[64];
      const int src = shared_fused && g >= FP4_MOE_SHARED_GATE_UP ? g - 2 : g; /* the GEMM whose variant g runs */
      const int kparts = !strcmp(want, "moe.lean.r32.k4.s1") ? cluster_expected(&plan.gemm[src], &arch) : 0;
      if (kparts) {
        snprintf(clustered, sizeof clustered, "%s.c%d", want, kparts);
        want = clustered;
        g_clustered++;
      }
      EXPECT(!strcmp(got, want), "%s E=%lld %s %s B=%lld GEMM %d: chose %s, recorded %s (expected %s)", c->device,
             (long long)c->experts, c->mode == FP4_MOE_W4A4 ? "w4a4" : "w4a16", c->mxfp4 ? "mxfp4" : "nvfp4",
             (long long)c->tokens, g, got, c->variant[g], want);
    }
  }
}

static void test_names(void) {
  int count = 0;
  const char *const *names = fp4_moe_variant_names(&count);
  EXPECT(count >= 40, "only %d variant names", count);
  for (int i = 0; i < count; i++) {
    fp4_moe_variant v;
    EXPECT(fp4_moe_variant_parse(names[i], &v) == 0, "%s does not parse", names[i]);
    EXPECT(!strcmp(fp4_moe_variant_name(&v), names[i]), "%s parses to %s", names[i], fp4_moe_variant_name(&v));
    for (int j = 0; j < i; j++) EXPECT(strcmp(names[i], names[j]), "%s listed twice", names[i]);
  }
  fp4_moe_variant v;
  EXPECT(fp4_moe_variant_parse("moe.lean.r32.k3.s1", &v) == -1, "an unknown name parsed");
  EXPECT(fp4_moe_variant_parse("moe.default", &v) == -1, "moe.default is the chooser, not a variant");
  EXPECT(fp4_moe_path_parse("moe.default") == FP4_MOE_PATH_DEFAULT && fp4_moe_path_parse("moe.streaming") ==
             FP4_MOE_PATH_STREAMING && fp4_moe_path_parse("moe.prefill") == FP4_MOE_PATH_PREFILL &&
             fp4_moe_path_parse("moe.lean.r32.k2.s1") == -1,
         "path names");
}

/* Forced variants on shapes they cannot run: refused with the rule. */
static void test_refusals(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1}, a100 = {8, 0, 108, 166912, 0};
  const fp4_moe_gemm_shape qwen_gu = {2048, 4096, 10, 512, FP4_CUDA_ACT_BF16, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1};
  fp4_moe_gemm_shape s = qwen_gu;
  fp4_moe_variant v;
  char why[320];
  fp4_moe_variant_parse("moe.lean.r32.k2.s1", &v);
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == 0, "fixed-K lean on Qwen3.5 gate_up: %s", why);
  s.k = 1536;
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == -1 && strstr(why, "compile-time K"),
         "fixed-K lean at K = 1536 not refused (%s)", why);
  fp4_moe_variant_parse("moe.lean.generic-k.r32.k2.s1", &v);
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == 0, "generic-K lean at K = 1536: %s", why);
  s.format = FP4_FORMAT_MXFP4;
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == -1, "MXFP4 K split 2 not refused");
  s = qwen_gu;
  s.act = FP4_CUDA_ACT_F32;
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == -1, "lean with f32 rows not refused");
  fp4_moe_variant_parse("moe.prefill.wgra128", &v);
  EXPECT(fp4_moe_variant_check(&v, &qwen_gu, &a100, why, sizeof why) == -1 && strstr(why, "SM90"),
         "register-A tiles on SM80 not refused (%s)", why);
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == -1, "prefill with f32 rows not refused");
  fp4_moe_variant_parse("moe.mma.w8", &v);
  s = qwen_gu;
  s.k = 512;
  EXPECT(fp4_moe_variant_check(&v, &s, &h200, why, sizeof why) == -1, "8 warps over 4 slabs not refused");
  /* a forced layer variant must run every GEMM: f32 hidden states cannot take the lean kernel */
  const fp4_moe_layer_shape L = {.tokens = 4, .top_k = 10, .experts = 512, .hidden = 4096, .inter = 1024,
                                 .mode = FP4_MOE_W4A16, .format = FP4_FORMAT_NVFP4, .layout = FP4_LAYOUT_128X4,
                                 .hidden_dtype = FP4_DTYPE_F32, .hidden_aligned = 1, .workspace_aligned = 1};
  fp4_moe_layer_plan plan;
  fp4_moe_variant_parse("moe.lean.r32.k2.s1", &v);
  EXPECT(fp4_moe_plan_layer(&L, &v, 0, &h200, &plan, why, sizeof why) == -1 && strstr(why, "gate_up"),
         "lean forced on f32 hidden states not refused (%s)", why);
  fp4_moe_layer_shape big = L;
  big.tokens = 4096;
  big.hidden_dtype = FP4_DTYPE_BF16;
  EXPECT(fp4_moe_plan_layer(&big, NULL, FP4_MOE_PATH_STREAMING, &h200, &plan, why, sizeof why) == 0 &&
             plan.variant[FP4_MOE_GATE_UP].kernel < FP4_MOE_KERNEL_PREFILL_MMA && !plan.prefill[0],
         "moe.streaming at B = 4096 chose %s", fp4_moe_variant_name(&plan.variant[FP4_MOE_GATE_UP]));
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 &&
             plan.variant[FP4_MOE_GATE_UP].kernel == FP4_MOE_KERNEL_MMA && !plan.silu_fused[0],
         "f32 hidden states: gate_up default is %s, not the tensor-core kernel (or SiLU*up fused on it)",
         fp4_moe_variant_name(&plan.variant[FP4_MOE_GATE_UP]));
}

/* Qwen3.5's layer (H 4096, I 1024, a shared expert of the same width; W4A16, NVFP4 128x4, bf16
 * hidden states) at T tokens, top_k of experts. */
static fp4_moe_layer_shape qwen_layer(int64_t tokens, int64_t top_k, int64_t experts) {
  return (fp4_moe_layer_shape){.tokens = tokens, .top_k = top_k, .experts = experts, .hidden = 4096, .inter = 1024,
                               .shared_inter = 1024, .mode = FP4_MOE_W4A16, .format = FP4_FORMAT_NVFP4,
                               .layout = FP4_LAYOUT_128X4, .shared_format = FP4_FORMAT_NVFP4,
                               .shared_layout = FP4_LAYOUT_128X4, .hidden_dtype = FP4_DTYPE_BF16,
                               .hidden_aligned = 1, .workspace_aligned = 1};
}

/* SiLU*up in the gate_up epilogue: forced variants are fused only as they are; W4A4, MXFP4, f16
 * hidden states, f32 SiLU*up rows and an I that is not a multiple of 16 are never fused. */
static void test_silu_fusion(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1};
  const fp4_moe_layer_shape qwen = qwen_layer(1, 10, 512);
  fp4_moe_layer_plan plan;
  fp4_moe_variant v;
  char why[320] = "";
  EXPECT(fp4_moe_plan_layer(&qwen, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 &&
             plan.silu_fused[0] && plan.silu_fused[1] && plan.shared_fused,
         "Qwen3.5 W4A16 B = 1: SiLU*up or the shared expert not fused (%s, %s)",
         fp4_moe_variant_name(&plan.variant[FP4_MOE_GATE_UP]), why);
  fp4_moe_layer_shape wide = qwen; /* a shared expert of another width runs its own launches */
  wide.shared_inter = 2048;
  EXPECT(fp4_moe_plan_layer(&wide, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 &&
             !plan.shared_fused && plan.silu_fused[0],
         "shared expert of I = 2048 beside routed I = 1024 fused into the routed launches (%s)", why);
  fp4_moe_variant_parse("moe.lean.r32.k1.s1", &v);
  EXPECT(fp4_moe_plan_layer(&qwen, &v, 0, &h200, &plan, why, sizeof why) == 0 && plan.silu_fused[0] &&
             plan.variant[FP4_MOE_GATE_UP].fixed_k,
         "forced compile-time K walk: changed or not fused (%s)", why);
  fp4_moe_variant_parse("moe.lean.generic-k.r32.k1.s1", &v);
  EXPECT(fp4_moe_plan_layer(&qwen, &v, 0, &h200, &plan, why, sizeof why) == 0 && plan.silu_fused[0] &&
             plan.silu_fused[1],
         "forced run-time K walk: SiLU*up not fused (%s)", why);
  fp4_moe_layer_shape small = qwen; /* hidden 1024: a compile-time K walk without a fused form */
  small.hidden = 1024;
  fp4_moe_variant_parse("moe.lean.r32.k1.s1", &v);
  EXPECT(fp4_moe_plan_layer(&small, &v, 0, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "compile-time K walk at K = 1024 fused (%s)", why);
  fp4_moe_variant_parse("moe.lean.generic-k.r32.k1.s1", &v);
  EXPECT(fp4_moe_plan_layer(&small, &v, 0, &h200, &plan, why, sizeof why) == 0 && plan.silu_fused[0],
         "run-time K walk at K = 1024 not fused (%s)", why);
  fp4_moe_variant_parse("moe.lean.generic-k.r16.k4.s1", &v);
  EXPECT(fp4_moe_plan_layer(&qwen, &v, 0, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "one-tile lean kernel fused (%s)", why);
  fp4_moe_layer_shape L = qwen;
  L.mode = FP4_MOE_W4A4;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 &&
             !plan.silu_fused[0] && !plan.silu_fused[1] && !plan.shared_fused,
         "W4A4 fused (%s)", why);
  L = qwen;
  L.format = L.shared_format = FP4_FORMAT_MXFP4;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "MXFP4 fused (%s)", why);
  L = qwen;
  L.hidden_dtype = FP4_DTYPE_F16;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "f16 hidden states fused (%s)", why);
  L = qwen;
  L.workspace_aligned = 0; /* SiLU*up rows in f32: the down GEMM cannot read the bf16 act */
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "f32 SiLU*up rows fused (%s)", why);
  L = qwen;
  L.inter = L.shared_inter = 1032; /* I % 16 == 8 */
  L.hidden = 4096;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "I %% 16 != 0 fused (%s)", why);
  L = qwen;
  L.tokens = 13; /* 130 routed rows: SiLU*up stays a kernel of its own */
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0] &&
             !plan.shared_fused,
         "Qwen3.5 B = 13: SiLU*up fused %d, shared %d (%s)", plan.silu_fused[0], plan.shared_fused, why);
  L = qwen;
  L.tokens = 4096; /* the prefill tiles */
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.silu_fused[0],
         "prefill fused (%s)", why);
}

/* The row limits at their edges: the lean kernel at 11 and 12 routed rows per slot of a Qwen3.5
 * gate_up on the H200 (SM90 table), 9 rows in MXFP4, in f32 rows and on the A100 (SM80 table: 8);
 * the prefill tiles from 13 rows per slot on the H200 and from 16 on the A100. */
static void test_row_limits(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1}, a100 = {8, 0, 108, 166912, 0};
  fp4_moe_gemm_shape s = {.n = 2048, .k = 4096, .rows = 563 * 10, .experts = 512, .act = FP4_CUDA_ACT_BF16,
                          .format = FP4_FORMAT_NVFP4, .w_layout = FP4_LAYOUT_128X4, .aligned = 1};
  EXPECT(fp4_moe_choose_gemm(&s, 0, &h200).kernel == FP4_MOE_KERNEL_LEAN, "11 rows per slot: not the lean kernel");
  s.rows = 614 * 10;
  EXPECT(fp4_moe_choose_gemm(&s, 0, &h200).kernel == FP4_MOE_KERNEL_MMA, "12 rows per slot: not the tensor-core kernel");
  s.rows = 461 * 10;
  EXPECT(fp4_moe_choose_gemm(&s, 0, &a100).kernel == FP4_MOE_KERNEL_MMA, "9 rows per slot on SM80: lean");
  s.format = FP4_FORMAT_MXFP4;
  EXPECT(fp4_moe_choose_gemm(&s, 0, &h200).kernel == FP4_MOE_KERNEL_MMA, "9 MXFP4 rows per slot: lean");
  s.format = FP4_FORMAT_NVFP4;
  s.act = FP4_CUDA_ACT_F32;
  EXPECT(fp4_moe_choose_gemm(&s, 0, &h200).kernel == FP4_MOE_KERNEL_MMA, "9 f32 rows per slot: lean");
  s.act = FP4_CUDA_ACT_BF16;
  s.rows = 400 * 10; /* 8 rows: the lean kernel on every table */
  EXPECT(fp4_moe_choose_gemm(&s, 0, &a100).kernel == FP4_MOE_KERNEL_LEAN, "8 rows per slot on SM80: not lean");
  /* the lean kernel's grid keeps a slice for a shared expert: 65534 active experts at most; at 65535
   * (which the grouped kernels' rule admits) the tensor-core kernel, whose grid takes them all */
  fp4_moe_gemm_shape many = s;
  char why[320];
  many.experts = many.rows = 65534;
  const fp4_moe_variant at_limit = fp4_moe_choose_gemm(&many, 0, &h200);
  EXPECT(at_limit.kernel == FP4_MOE_KERNEL_LEAN, "65534 active experts: not the lean kernel");
  many.experts = many.rows = 65535;
  const fp4_moe_variant over = fp4_moe_choose_gemm(&many, 0, &h200);
  EXPECT(over.kernel == FP4_MOE_KERNEL_MMA && fp4_moe_variant_check(&over, &many, &h200, why, sizeof why) == 0,
         "65535 active experts: %s, not the tensor-core kernel", fp4_moe_variant_name(&over));
  EXPECT(fp4_moe_variant_check(&at_limit, &many, &h200, why, sizeof why) == -1 && strstr(why, "at most 65534") &&
             strstr(why, "65535"),
         "%s on 65535 active experts: %s", fp4_moe_variant_name(&at_limit), why);
  EXPECT(!fp4_moe_prefill_wanted(512 * 12, 512, &h200) && fp4_moe_prefill_wanted(512 * 12 + 1, 512, &h200),
         "SM90: the prefill tiles not from 13 rows per slot");
  EXPECT(!fp4_moe_prefill_wanted(512 * 15, 512, &a100) && fp4_moe_prefill_wanted(512 * 15 + 1, 512, &a100),
         "SM80: the prefill tiles not from 16 rows per slot");
}

/* The shared expert on the dense kernels: on the default path in W4A16 where its T rows would put it
 * on the prefill tiles (from 13 rows on SM90, 16 on SM80), never where it joins the routed launches,
 * in W4A4, or under a forced variant or path. */
static void test_shared_dense(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1}, a100 = {8, 0, 108, 166912, 0};
  /* one rank of Qwen3.5 at EP8: 64 experts, 2 of them per token, the shared expert of the same width */
  const fp4_moe_layer_shape ep8 = qwen_layer(64, 2, 64);
  fp4_moe_layer_plan plan;
  fp4_moe_variant v;
  char why[320] = "";
  EXPECT(fp4_moe_plan_layer(&ep8, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 &&
             plan.shared_dense && !plan.shared_fused && plan.prefill[1] && !plan.prefill[0],
         "EP8 rank, 64 tokens: shared expert dense %d fused %d (%s)", plan.shared_dense, plan.shared_fused, why);
  fp4_moe_layer_shape L = ep8;
  for (int64_t t = 1; t <= 1024; t++) {
    L.tokens = t;
    for (int sm = 0; sm < 2; sm++) {
      const fp4_moe_arch *arch = sm ? &a100 : &h200;
      const int64_t from = sm ? 16 : 13;
      const int rc = fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, arch, &plan, why, sizeof why);
      EXPECT(rc == 0 && plan.shared_dense == (t >= from) && (!plan.shared_dense || !plan.shared_fused),
             "SM%d0 T = %lld: shared expert dense %d fused %d (expected dense from %lld rows)", arch->major,
             (long long)t, plan.shared_dense, plan.shared_fused, (long long)from);
    }
  }
  L = ep8;
  L.mode = FP4_MOE_W4A4;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.shared_dense,
         "W4A4: shared expert on the dense kernels (%s)", why);
  EXPECT(fp4_moe_plan_layer(&ep8, NULL, FP4_MOE_PATH_PREFILL, &h200, &plan, why, sizeof why) == 0 && !plan.shared_dense,
         "moe.prefill: shared expert on the dense kernels (%s)", why);
  EXPECT(fp4_moe_plan_layer(&ep8, NULL, FP4_MOE_PATH_STREAMING, &h200, &plan, why, sizeof why) == 0 && !plan.shared_dense,
         "moe.streaming: shared expert on the dense kernels (%s)", why);
  fp4_moe_variant_parse("moe.prefill.wgra64", &v);
  EXPECT(fp4_moe_plan_layer(&ep8, &v, 0, &h200, &plan, why, sizeof why) == 0 && !plan.shared_dense,
         "forced moe.prefill.wgra64: shared expert on the dense kernels (%s)", why);
  L = ep8;
  L.shared_inter = 0;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.shared_dense,
         "no shared expert, yet shared_dense (%s)", why);
}

/* The routing in the routed gate_up launch: on the default path in W4A16 where gate_up runs the lean
 * kernel with SiLU*up fused, up to 32 pairs (Qwen3.5 top-10: 1-3 tokens; DeepSeek-R1 top-8: 1-4),
 * with or without a shared expert; never in W4A4, on the prefill tiles, or under a forced path or
 * variant. The combine in the routed down launch goes with it up to 12 pairs where down is on the
 * compile-time K walk and no shared expert runs launches of its own. */
static void test_route_rule(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1}, a100 = {8, 0, 108, 166912, 0};
  fp4_moe_layer_shape L = qwen_layer(1, 10, 64);
  fp4_moe_layer_plan plan;
  char why[320] = "";
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && plan.route_fused,
         "EP8 rank, 1 token: no routing in gate_up (%s)", why);
  for (int64_t k = 8; k <= 10; k += 2)
    for (int64_t t = 1; t <= 8; t++)
      for (int sm = 0; sm < 2; sm++)
        for (int shared = 0; shared < 2; shared++) {
          L.tokens = t, L.top_k = k, L.shared_inter = shared ? L.inter : 0;
          const int rc = fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, sm ? &a100 : &h200, &plan, why, sizeof why);
          EXPECT(rc == 0 && plan.silu_fused[0] && plan.route_fused == (t * k <= 32),
                 "SM%d0 top-%lld T = %lld shared %d: routing in gate_up %d, SiLU*up fused %d (%s)", sm ? 8 : 9,
                 (long long)k, (long long)t, shared, plan.route_fused, plan.silu_fused[0], why);
          /* Qwen3.5's down (K = 1024) is on the compile-time K walk, its shared expert in the routed
           * launches: the combine goes with the routing up to 12 pairs */
          EXPECT(rc == 0 && (!shared || plan.shared_fused) && plan.combine_fused == (plan.route_fused && t * k <= 12),
                 "SM%d0 top-%lld T = %lld shared %d: combine in down %d, routing in gate_up %d, shared fused %d",
                 sm ? 8 : 9, (long long)k, (long long)t, shared, plan.combine_fused, plan.route_fused,
                 plan.shared_fused);
        }
  /* no combine in down where down is not on the compile-time K walk (I = 1536 is not one of its K) or
   * the shared expert runs launches of its own (a shared expert of another width) */
  L = qwen_layer(1, 10, 64);
  L.inter = L.shared_inter = 1536;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && plan.route_fused &&
             !plan.combine_fused,
         "I = 1536: routing in gate_up %d, combine in down %d (down %s; %s)", plan.route_fused, plan.combine_fused,
         fp4_moe_variant_name(&plan.variant[FP4_MOE_DOWN]), why);
  L = qwen_layer(1, 10, 64);
  L.shared_inter = 2048;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && plan.route_fused &&
             !plan.shared_fused && !plan.combine_fused,
         "shared I = 2048: routing in gate_up %d, shared fused %d, combine in down %d (%s)", plan.route_fused,
         plan.shared_fused, plan.combine_fused, why);
  L = qwen_layer(1, 10, 64); /* 10 pairs: the routing in gate_up on the default path */
  L.mode = FP4_MOE_W4A4;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.route_fused,
         "W4A4: routing in gate_up (%s)", why);
  L.mode = FP4_MOE_W4A16;
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_STREAMING, &h200, &plan, why, sizeof why) == 0 && !plan.route_fused &&
             !plan.combine_fused,
         "moe.streaming: routing in gate_up or combine in down (%s)", why);
  fp4_moe_variant v;
  fp4_moe_variant_parse("moe.lean.r32.k4.s1", &v);
  EXPECT(fp4_moe_plan_layer(&L, &v, 0, &h200, &plan, why, sizeof why) == 0 && !plan.route_fused,
         "forced moe.lean.r32.k4.s1: routing in gate_up (%s)", why);
  L.hidden_dtype = FP4_DTYPE_F32; /* f32 hidden states: no SiLU*up in the lean kernel's epilogue */
  EXPECT(fp4_moe_plan_layer(&L, NULL, FP4_MOE_PATH_DEFAULT, &h200, &plan, why, sizeof why) == 0 && !plan.route_fused,
         "f32 hidden states: routing in gate_up (%s)", why);
}

/* The cluster K split's rule at its edges, on one rank of Qwen3.5 at EP8 (64 experts; gate_up 2048 x
 * 4096, down 4096 x 1024) and DeepSeek-R1's gate_up (4096 x 7168): two CTAs per cluster on gate_up
 * while the doubled grid fits a wave (5 x 132 CTAs), none on down (8 slabs), none past the wave, on
 * SM80, on MXFP4 or on the run-time K walk; four CTAs nowhere below K = 8192. */
static void test_cluster_rule(void) {
  const fp4_moe_arch h200 = {9, 0, 132, 232448, 1}, a100 = {8, 0, 108, 166912, 0};
  static const struct {
    int64_t n, k, rows;
    int format, sm80;
    const char *want;
  } cases[] = {
      {2048, 4096, 2, FP4_FORMAT_NVFP4, 0, "moe.lean.r32.k4.s1.c2"},  /* 128 CTAs -> 256 */
      {2048, 4096, 5, FP4_FORMAT_NVFP4, 0, "moe.lean.r32.k4.s1.c2"},  /* 320 -> 640 <= 660 */
      {2048, 4096, 6, FP4_FORMAT_NVFP4, 0, "moe.lean.r32.k4.s1"},     /* 384 -> 768 > 660 */
      {4096, 1024, 2, FP4_FORMAT_NVFP4, 0, "moe.lean.r32.k4.s1"},     /* down: 2 slabs per warp at c2 */
      {4096, 7168, 1, FP4_FORMAT_NVFP4, 0, "moe.lean.r32.k4.s1.c2"},  /* 56 slabs: c4 would leave 3.5 */
      {2048, 4096, 2, FP4_FORMAT_NVFP4, 1, "moe.lean.r32.k4.s1"},     /* SM80 */
      {2048, 4096, 2, FP4_FORMAT_MXFP4, 0, "moe.lean.generic-k.r32.k4.s1"},
      {2048, 8192, 2, FP4_FORMAT_NVFP4, 0, "moe.lean.generic-k.r32.k4.s1"}, /* no compile-time walk */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const fp4_moe_gemm_shape s = {cases[i].n, cases[i].k, cases[i].rows, 64, FP4_CUDA_ACT_BF16, cases[i].format,
                                  FP4_LAYOUT_128X4, 1};
    const fp4_moe_arch *arch = cases[i].sm80 ? &a100 : &h200;
    const fp4_moe_variant v = fp4_moe_choose_gemm(&s, 0, arch);
    const char *got = fp4_moe_variant_name(&v);
    EXPECT(!strcmp(got, cases[i].want), "%lld x %lld, %lld rows, %s, SM%d: chose %s, expected %s", (long long)s.n,
           (long long)s.k, (long long)s.rows, cases[i].format == FP4_FORMAT_NVFP4 ? "NVFP4" : "MXFP4", arch->major * 10,
           got, cases[i].want);
    char why[320] = "";
    EXPECT(fp4_moe_variant_check(&v, &s, arch, why, sizeof why) == 0, "the chosen %s is refused: %s", got, why);
  }
  /* forced: refused below SM90 and where a warp would get no slab, with the rule */
  fp4_moe_variant c4;
  fp4_moe_variant_parse("moe.lean.r32.k4.s1.c4", &c4);
  const fp4_moe_gemm_shape down = {4096, 1024, 2, 64, FP4_CUDA_ACT_BF16, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1};
  fp4_moe_gemm_shape up = down;
  up.n = 2048, up.k = 4096;
  char why[320];
  EXPECT(fp4_moe_variant_check(&c4, &down, &h200, why, sizeof why) == -1 && strstr(why, "K >= 2048"),
         "c4 on K = 1024: %s", why);
  EXPECT(fp4_moe_variant_check(&c4, &up, &a100, why, sizeof why) == -1 && strstr(why, "SM90"), "c4 on SM80: %s", why);
  EXPECT(fp4_moe_variant_check(&c4, &up, &h200, why, sizeof why) == 0, "c4 on K = 4096, SM90: %s", why);
}

int main(void) {
  test_cluster_rule();
  test_recorded();
  EXPECT(g_clustered > 0, "no recorded choice took the cluster K split");
  printf("(%d recorded GEMM choices take the cluster K split)\n", g_clustered);
  EXPECT(g_lean_rows == 4, "%d routed GEMMs moved to the lean kernel at 9-11 rows, expected 4 (Qwen3.5 B = 512)",
         g_lean_rows);
  test_row_limits();
  test_names();
  test_refusals();
  test_silu_fusion();
  test_shared_dense();
  test_route_rule();
  EXPECT(g_route_fused > 0, "no recorded choice has the routing in gate_up");
  printf("test_moe_config: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
