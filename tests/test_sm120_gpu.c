/*
 * The cuda-sm120 backend on a GPU, against the reference: on SM120/SM121 the real MMA kernel, on
 * SM90 (H100/H200) the same kernel with the MMA emulated (everything but the tensor-core
 * instruction executes). Skips (77) where neither exists.
 *
 * Covers M from 1 to 8192, NVFP4 and MXFP4, N and K of real models, every scale
 * layout, K tails (K not a multiple of the 128-K stage), odd M and N, edge-case data, every tile
 * configuration with PDL on (all three must give bit-identical f32 results: each output sees the
 * same sequence of MMAs), and the refusals. Outputs are pre-filled with NaN by the harness.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

#define L128 FP4_LAYOUT_128X4
#define LLIN FP4_LAYOUT_LINEAR
#define L8X4 FP4_LAYOUT_8X4
#define NV FP4_FORMAT_NVFP4
#define MX FP4_FORMAT_MXFP4
#define CASE(name, fmt, la, lb, m, n, k, out, data) \
  {name, FP4H_MM, fmt, la, lb, m, n, k, FP4_DTYPE_F32, out, data, .experts = 0}

static const fp4h_case cases[] = {
    CASE("nvfp4 M=1 2048x4096 bf16 (Qwen3.5 expert gate_up)", NV, L128, L128, 1, 2048, 4096, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=1 4096x1024 f32 (Qwen3.5 expert down)", NV, L128, L128, 1, 4096, 1024, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=3 4096x128 f32 (Qwen3.5 down, MoE-TP8)", NV, L128, L128, 3, 4096, 128, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=8 2048x96 f32 edges (Qwen3-30B down, TP8: K tail)", NV, L128, L128, 8, 2048, 96, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    CASE("nvfp4 M=16 1536x2048 f16 (Qwen3-30B gate_up)", NV, L128, L128, 16, 1536, 2048, FP4_DTYPE_F16, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=17 768x4096 f32 (Llama-8B qkv, TP8)", NV, L128, L128, 17, 768, 4096, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=64 512x7168 bf16 (DeepSeek-R1 gate_up, MoE-TP8)", NV, L128, L128, 64, 512, 7168, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=65 4096x1024 f32 linear weight scales", NV, L128, LLIN, 65, 4096, 1024, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=128 256x4096 f32 (Qwen3.5 gate_up, MoE-TP8)", NV, L128, L128, 128, 256, 4096, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=1000 256x4096 bf16 8x4 activation scales", NV, L8X4, L128, 1000, 256, 4096, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=4096 128x4096 f32 (Qwen3.5 in_proj_ba)", NV, L128, L128, 4096, 128, 4096, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=8192 2048x96 f32 (Qwen3-30B down, TP8)", NV, L128, L128, 8192, 2048, 96, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("nvfp4 M=2 9x16 f32 (smallest K, odd N)", NV, LLIN, LLIN, 2, 9, 16, FP4_DTYPE_F32, FP4H_DATA_UNIFORM),
    CASE("nvfp4 M=131 131x272 f32 edges (odd everything)", NV, LLIN, L128, 131, 131, 272, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    CASE("mxfp4 M=1 2048x4096 bf16", MX, L128, L128, 1, 2048, 4096, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    CASE("mxfp4 M=5 4096x1024 f32 edges", MX, L128, L128, 5, 4096, 1024, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    CASE("mxfp4 M=33 2048x768 f16 (Qwen3-30B down)", MX, L128, L128, 33, 2048, 768, FP4_DTYPE_F16, FP4H_DATA_NORMAL),
    CASE("mxfp4 M=300 512x7168 f32 (DeepSeek-R1 gate_up, MoE-TP8)", MX, L128, L128, 300, 512, 7168, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("mxfp4 M=8192 512x128 f32 (K = 128)", MX, L128, L128, 8192, 512, 128, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    CASE("mxfp4 M=2048 1024x96 f32 linear scales (K tail)", MX, LLIN, LLIN, 2048, 1024, 96, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    CASE("mxfp4 M=3 9x32 f32 (smallest K)", MX, LLIN, L128, 3, 9, 32, FP4_DTYPE_F32, FP4H_DATA_UNIFORM),
};

/* Random codes and in-range scales straight into a qmatrix (no quantizer), host memory. */
static int make_random(fp4h_rng *g, fp4_qmatrix *q, fp4_format fmt, int64_t rows, int64_t k) {
  size_t sbytes = 0;
  fp4_scales_size(fmt, L128, rows, k, &sbytes);
  *q = (fp4_qmatrix){malloc((size_t)(rows * k / 2)), calloc(1, sbytes), rows, k, fmt, L128, 1.0f, FP4_MEMORY_HOST};
  if (!q->data || !q->scales) return 0;
  for (int64_t i = 0; i < rows * k / 2; i++) ((uint8_t *)q->data)[i] = (uint8_t)fp4h_next(g);
  const int bs = fp4_format_block_size(fmt);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < k / bs; c++) {
      uint8_t s = fmt == NV ? (uint8_t)(0x28 + fp4h_next(g) % 0x30) : (uint8_t)(120 + fp4h_next(g) % 12);
      ((uint8_t *)q->scales)[fp4_scale_offset(fmt, L128, rows, k, r, c)] = s;
    }
  return 1;
}

/* A device copy of a host qmatrix. */
static fp4_status to_device(fp4_context *ctx, const fp4_qmatrix *h, fp4_qmatrix *d) {
  size_t sbytes = 0;
  fp4_scales_size(h->format, h->layout, h->rows, h->cols, &sbytes);
  *d = *h;
  d->memory = FP4_MEMORY_DEVICE;
  d->data = d->scales = NULL;
  size_t dbytes = (size_t)(h->rows * h->cols / 2);
  fp4_status st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, dbytes, &d->data);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, sbytes, &d->scales);
  if (!st) st = fp4_copy(ctx, d->data, FP4_MEMORY_DEVICE, h->data, FP4_MEMORY_HOST, dbytes);
  if (!st) st = fp4_copy(ctx, d->scales, FP4_MEMORY_DEVICE, h->scales, FP4_MEMORY_HOST, sbytes);
  return st;
}

/* Every configuration, PDL on, on one problem: each must match the reference, fill every output,
 * report what ran, and agree bit for bit with the others. */
static void sweep_configs(fp4_context *ctx, fp4_format fmt, int64_t m, int64_t n, int64_t k) {
  static const char *const names[] = {"m16n64", "m64n128", "m128n128"};
  fp4h_rng g = {(uint64_t)(m * 131 + n * 7 + k + fmt)};
  fp4_qmatrix ha, hb, da = {0}, db = {0};
  float *ref = malloc((size_t)(m * n) * sizeof *ref), *got = malloc((size_t)(m * n) * sizeof *got);
  float *first = malloc((size_t)(m * n) * sizeof *first);
  void *dout = NULL;
  int ok = make_random(&g, &ha, fmt, m, k) && make_random(&g, &hb, fmt, n, k) && ref && got && first;
  CHECK(ok, "host allocation");
  if (!ok) return;
  hb.multiplier = 0.5f;
  fp4_matrix ref_out = {ref, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options ro = {.backend = "ref"};
  fp4_status st = fp4_mm(NULL, &ha, &hb, 1.25f, &ref_out, &ro);
  if (!st) st = to_device(ctx, &ha, &da);
  if (!st) st = to_device(ctx, &hb, &db);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * n) * sizeof(float), &dout);
  CHECK(st == FP4_OK, "setup: %s", fp4_last_error());
  for (int c = 0; !st && c < 3; c++) {
    for (int64_t i = 0; i < m * n; i++) got[i] = NAN;
    fp4_copy(ctx, dout, FP4_MEMORY_DEVICE, got, FP4_MEMORY_HOST, (size_t)(m * n) * sizeof(float));
    fp4_run_info info;
    fp4_options o = {.backend = "cuda-sm120", .config = names[c], .enable_pdl = 1, .info = &info};
    fp4_matrix out = {dout, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
    fp4_status rs = fp4_mm(ctx, &da, &db, 1.25f, &out, &o);
    if (!rs) rs = fp4_synchronize(ctx);
    if (!rs) rs = fp4_copy(ctx, got, FP4_MEMORY_HOST, dout, FP4_MEMORY_DEVICE, (size_t)(m * n) * sizeof(float));
    CHECK(rs == FP4_OK, "%s config %s: %s", fp4_format_name(fmt), names[c], fp4_last_error());
    if (rs) continue;
    double num = 0, den = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; i++) {
      bad += !isfinite(got[i]);
      num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
      den += (double)ref[i] * ref[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    int same = c == 0 || memcmp(first, got, (size_t)(m * n) * sizeof(float)) == 0;
    if (c == 0) memcpy(first, got, (size_t)(m * n) * sizeof(float));
    int pass = bad == 0 && rel <= 1e-5 && same && info.pdl == 1 && !strcmp(info.config, names[c]);
    printf("%s  config %-8s %s M=%lld N=%lld K=%lld, PDL on: rel err %.3g, %lld unwritten/NaN, %s (%s)\n",
           pass ? "PASS" : "FAIL", names[c], fp4_format_name(fmt), (long long)m, (long long)n, (long long)k, rel,
           (long long)bad, same ? "bit-identical to m16n64" : "DIFFERS from m16n64", info.note);
    CHECK(pass, "config %s", names[c]);
  }
  fp4_free(ctx, FP4_MEMORY_DEVICE, da.data);
  fp4_free(ctx, FP4_MEMORY_DEVICE, da.scales);
  fp4_free(ctx, FP4_MEMORY_DEVICE, db.data);
  fp4_free(ctx, FP4_MEMORY_DEVICE, db.scales);
  fp4_free(ctx, FP4_MEMORY_DEVICE, dout);
  free(ha.data), free(ha.scales), free(hb.data), free(hb.scales), free(ref), free(got), free(first);
}

int main(void) {
  fp4_context *ctx = NULL;
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    printf("SKIP: no CUDA device here (%s)\n", fp4_last_error());
    return 77;
  }
  char reason[256];
  if (fp4_backend_available(ctx, "cuda-sm120", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: cuda-sm120 cannot run on device 0: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  printf("cuda-sm120 on device 0: %s\n", reason);

  /* The shared correctness suite. */
  int n = 0;
  const fp4h_case *defaults = fp4h_default_cases(&n);
  for (int i = 0; i < n + (int)(sizeof cases / sizeof *cases); i++) {
    const fp4h_case *c = i < n ? &defaults[i] : &cases[i - n];
    if (c->op != FP4H_MM) continue;
    fp4h_result r;
    fp4h_run(ctx, "cuda-sm120", FP4_MEMORY_DEVICE, c, 1000 + (uint64_t)i, &r);
    printf("%s  %s: %s\n", r.status == FP4_OK && r.passed ? "PASS" : "FAIL", c->name, r.message);
    CHECK(r.status == FP4_OK && r.passed, "%s: %s", c->name, r.message);
  }

  sweep_configs(ctx, NV, 77, 200, 640);
  sweep_configs(ctx, MX, 150, 136, 416);

  /* Refusals say why. */
  float x = 1.0f;
  fp4_matrix dense = {&x, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  uint8_t qd[8], qs[512];
  fp4_qmatrix q = {qd, qs, 1, 16, NV, L128, 1.0f, FP4_MEMORY_HOST};
  fp4_options o = {.backend = "cuda-sm120"};
  CHECK_ERROR(fp4_quantize(ctx, &dense, 1.0f, &q, &o), FP4_ERR_UNSUPPORTED, "W4A4 GEMM (fp4_mm) only");
  float outv[1];
  fp4_matrix out = {outv, 1, 1, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix w = q;
  CHECK_ERROR(fp4_mm(ctx, &q, &w, 1.0f, &out, &o), FP4_ERR_UNSUPPORTED, "device memory");

  fp4_context_destroy(ctx);
  return TEST_SUMMARY();
}
