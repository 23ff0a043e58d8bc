/*
 * GPU tests of the cublas-dequant backend (skipped with exit 77 and the reason when it cannot run
 * here): its dequantize kernel (8-element units, 4-byte code loads when the pointer allows)
 * feeding cuBLASLt, against the reference, for both formats and weight-scale layouts, W4A16 and
 * W4A4, bf16 and (NVFP4) f16 activations, f32/bf16 outputs, random and edge-case data (zero
 * blocks, ties, saturating and tiny values, subnormal scales), K with and without a 32-element tail
 * (K % 32 == 16 for NVFP4), and FP4 codes placed 1 and 3 bytes past an aligned address (the
 * byte-wise load path); and once more on a context whose reserved workspace holds only cuBLASLt's
 * 32 MiB plus 2 MiB, so the weights run as N chunks with a narrower last one, without the call
 * growing the workspace; and activations and outputs one and eight elements past an aligned address
 * (cuBLASLt is told each buffer's alignment). The backend's workspace size query names what the
 * default plan takes.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fp4kit.h"
#include "harness.h"

static int g_runs, g_failures;

static void run_case(fp4_context *ctx, const fp4h_case *c, const char *pass, uint64_t seed) {
  fp4h_result r;
  fp4h_run(ctx, "cublas-dequant", FP4_MEMORY_DEVICE, c, seed, &r);
  g_runs++;
  if (r.status == FP4_OK && r.passed) return;
  g_failures++;
  printf("FAIL%s %s %s M=%lld N=%lld K=%lld lb=%s a=%s out=%s codes+%d dense+%d %s: %s (%s)\n", pass,
         c->op == FP4H_MM ? "w4a4" : "w4a16", fp4_format_name(c->format), (long long)c->m, (long long)c->n,
         (long long)c->k, fp4_layout_name(c->layout_b), fp4_dtype_name(c->a_dtype), fp4_dtype_name(c->out_dtype),
         c->offset_codes, c->offset_dense, c->data == FP4H_DATA_EDGES ? "edges" : "random", r.message, fp4_status_str(r.status));
}

typedef struct shape {
  int64_t m, n, k;
} shape;

/* Every format, layout, op, output, code offset, data kind and (NVFP4 W4A16) activation dtype. */
static void run_shapes(fp4_context *ctx, const shape *shapes, int count, const char *pass, uint64_t *seed) {
  static const fp4_format formats[] = {FP4_FORMAT_NVFP4, FP4_FORMAT_MXFP4};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4};
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16};
  static const fp4_dtype acts[] = {FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const int offsets[] = {0, 1, 3};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES};
  enum { VARIANTS = 2 * 2 * 2 * 2 * 3 * 2 * 2 };
  for (int s = 0; s < count; s++)
    for (int v = 0; v < VARIANTS; v++) {
      const int f = v & 1, l = (v >> 1) & 1, op = (v >> 2) & 1, o = (v >> 3) & 1, off = (v >> 4) % 3,
                d = (v / 48) & 1, a16 = (v / 96) & 1;
      if (formats[f] == FP4_FORMAT_MXFP4 && shapes[s].k % 32) continue; /* MXFP4 blocks are 32 wide */
      /* f16 activations make the GEMM (and the weights' dequantization) f16: NVFP4 W4A16 only */
      if (a16 && (op || formats[f] == FP4_FORMAT_MXFP4)) continue;
      const fp4h_case c = {.name = "cublas-dequant",
                           .op = op ? FP4H_MM : FP4H_MM_W4A16,
                           .format = formats[f],
                           .layout_a = FP4_LAYOUT_LINEAR,
                           .layout_b = layouts[l],
                           .m = shapes[s].m,
                           .n = shapes[s].n,
                           .k = shapes[s].k,
                           .a_dtype = acts[a16],
                           .out_dtype = outs[o],
                           .data = datas[d],
                           .offset_codes = offsets[off]};
      run_case(ctx, &c, pass, (*seed)++);
    }
}

int main(void) {
  fp4_context *ctx = NULL;
  char reason[256];
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    printf("SKIP: no device context: %s\n", fp4_last_error());
    return 77;
  }
  if (fp4_backend_available(ctx, "cublas-dequant", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: cublas-dequant cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  static const shape shapes[] = {{37, 136, 96}, {300, 1000, 2048}, {1, 64, 80}};
  uint64_t seed = 1;
  run_shapes(ctx, shapes, 3, "", &seed);
  /* Activations and outputs that are views into larger buffers, one element (2 or 4 bytes) and eight
   * elements past an aligned address: cuBLASLt is told their alignment, so it picks an algorithm
   * that takes them (its heuristic assumes 256-byte aligned buffers otherwise). */
  for (int v = 0; v < 8; v++) {
    const fp4h_case c = {.name = "cublas-dequant",
                         .op = v & 1 ? FP4H_MM : FP4H_MM_W4A16,
                         .format = FP4_FORMAT_NVFP4,
                         .layout_a = FP4_LAYOUT_LINEAR,
                         .layout_b = FP4_LAYOUT_128X4,
                         .m = 37,
                         .n = 136,
                         .k = 96,
                         .a_dtype = FP4_DTYPE_BF16,
                         .out_dtype = v & 2 ? FP4_DTYPE_F32 : FP4_DTYPE_BF16,
                         .data = FP4H_DATA_NORMAL,
                         .offset_dense = v & 4 ? 8 : 1};
    run_case(ctx, &c, " (offset views)", seed++);
  }
  /* The size query: cuBLASLt's 32 MiB plus the bf16 weights of N = 1000, K = 2048 (4000 KiB). */
  void *buf = NULL; /* device memory for the operands' pointers: the query reads no data */
  fp4_status st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, 1 << 20, &buf);
  fp4_qmatrix qb = {buf, buf, 1000, 2048, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  fp4_matrix qa = {buf, 300, 2048, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  fp4_matrix qo = {buf, 300, 1000, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  const fp4_options dq = {.backend = "cublas-dequant"};
  size_t want = 0;
  if (!st) st = fp4_mm_w4a16_workspace_size(ctx, &qa, &qb, &qo, &dq, &want);
  fp4_free(ctx, FP4_MEMORY_DEVICE, buf);
  g_runs++;
  if (st != FP4_OK || want < ((size_t)32 << 20) + (size_t)1000 * 2048 * 2) {
    g_failures++;
    printf("FAIL workspace size query: %s, %zu bytes (%s)\n", fp4_status_str(st), want, fp4_last_error());
  }
  /* A context holding 34 MiB: N = 1000, K = 2048 (4 KiB bf16 rows) runs as chunks of 384, 384 and
   * 232 rows in W4A16 and of 128 rows (the last 104) in W4A4, the last chunk with its own cuBLASLt
   * answer; the workspace is not grown. */
  fp4_context *small = NULL;
  const size_t held = (size_t)34 << 20;
  if (fp4_context_create(&small, 0) != FP4_OK || fp4_context_reserve_workspace(small, held) != FP4_OK) {
    printf("FAIL: a context with a %zu-byte workspace: %s\n", held, fp4_last_error());
    g_failures++;
  } else {
    run_shapes(small, &shapes[1], 1, " (34 MiB workspace)", &seed);
    g_runs++;
    if (fp4_context_workspace_bytes(small) != held) {
      g_failures++;
      printf("FAIL: the calls grew the reserved workspace from %zu to %zu bytes\n", held, fp4_context_workspace_bytes(small));
    }
  }
  fp4_context_destroy(small);
  printf("cublas-dequant: %d cases, %d failures\n", g_runs, g_failures);
  fp4_context_destroy(ctx);
  return g_failures ? 1 : 0;
}
