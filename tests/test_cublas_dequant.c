/*
 * GPU tests of the cublas-dequant backend (skipped with exit 77 and the reason when it cannot run
 * here): its dequantize kernel (8-element units, 4-byte code loads when the pointer allows)
 * feeding cuBLASLt, against the reference, for both formats and weight-scale layouts, W4A16 and
 * W4A4, bf16 and (NVFP4) f16 activations, f32/bf16 outputs, random and edge-case data (zero
 * blocks, ties, saturating and tiny values, subnormal scales), K with and without a 32-element tail
 * (K % 32 == 16 for NVFP4), and FP4 codes placed 1 and 3 bytes past an aligned address (the
 * byte-wise load path).
 */
#include <stdio.h>

#include "fp4kit.h"
#include "harness.h"

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
  static const struct { int64_t m, n, k; } shapes[] = {{37, 136, 96}, {300, 1000, 2048}, {1, 64, 80}};
  static const fp4_format formats[] = {FP4_FORMAT_NVFP4, FP4_FORMAT_MXFP4};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4};
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16};
  static const int offsets[] = {0, 1, 3};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES};
  int runs = 0, failures = 0;
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int f = 0; f < 2; f++)
      for (int l = 0; l < 2; l++)
        for (int op = 0; op < 2; op++)
          for (int o = 0; o < 2; o++)
            for (int off = 0; off < 3; off++)
              for (int dd = 0; dd < 2; dd++)
                for (int act16 = 0; act16 < 2; act16++) {
              if (formats[f] == FP4_FORMAT_MXFP4 && shapes[s].k % 32) continue; /* MXFP4 blocks are 32 wide */
              /* f16 activations make the GEMM (and the weights' dequantization) f16: NVFP4 W4A16 only */
              if (act16 && (op || formats[f] == FP4_FORMAT_MXFP4)) continue;
              const fp4h_case c = {.name = "cublas-dequant",
                                   .op = op ? FP4H_MM : FP4H_MM_W4A16,
                                   .format = formats[f],
                                   .layout_a = FP4_LAYOUT_LINEAR,
                                   .layout_b = layouts[l],
                                   .m = shapes[s].m,
                                   .n = shapes[s].n,
                                   .k = shapes[s].k,
                                   .a_dtype = act16 ? FP4_DTYPE_F16 : FP4_DTYPE_BF16,
                                   .out_dtype = outs[o],
                                   .data = datas[dd],
                                   .offset_codes = offsets[off]};
              fp4h_result r;
              fp4h_run(ctx, "cublas-dequant", FP4_MEMORY_DEVICE, &c, seed++, &r);
              runs++;
              if (r.status == FP4_OK && r.passed) continue;
              failures++;
              printf("FAIL %s %s M=%lld N=%lld K=%lld lb=%s a=%s out=%s codes+%d %s: %s (%s)\n", op ? "w4a4" : "w4a16",
                     fp4_format_name(c.format), (long long)c.m, (long long)c.n, (long long)c.k,
                     fp4_layout_name(c.layout_b), fp4_dtype_name(c.a_dtype), fp4_dtype_name(c.out_dtype),
                     c.offset_codes, dd ? "edges" : "random", r.message,
                     fp4_status_str(r.status));
            }
  printf("cublas-dequant: %d cases, %d failures\n", runs, failures);
  fp4_context_destroy(ctx);
  return failures ? 1 : 0;
}
