/*
 * GPU self-test of the register-A wgmma tiles' weight decode (gemm_large_m_wgra.cu): the consumer
 * path (scale bits -> 16-bit scale pairs as the producer converts them, byte gather of the A
 * fragment, then rd_decode_word2's lookups or, for NVFP4 with bf16, also the dense two-CTA tiles'
 * multiply form, whose values the kernel multiplies back by 2^8) run on the device for every E2M1
 * code x every scale byte (NVFP4 E4M3 with bf16 and f16 activations, MXFP4 UE8M0 with bf16), each
 * 16-bit result compared bit for bit with e2m1 * scale computed on the host from codec.h and rounded
 * once (it is exact), NaN where either factor is NaN. It also checks which fragment register holds
 * which (row, k) pair: the two rows of the test tile hold different code sequences, so a wrong byte
 * gather fails.
 * Skips (77) without a CUDA build or without a GPU.
 */
#include <stdint.h>
#include <stdio.h>

#include "fp4kit.h"

#if FP4KIT_HAVE_CUDA
#include "backends/cuda/cuda_kernels.h"
#include "format/codec.h"

/* The test tile's code of element k of row lo (hi = 0) or hi (= 1) for thread offset c; must match
 * wgra_selftest_code in gemm_large_m_wgra.cu. */
static uint32_t selftest_code(int c, int hi, int k) { return (uint32_t)(hi ? c + 3 * k + 7 : c + k) & 15u; }

static int is_nan16(uint16_t h, int f16) {
  return f16 ? (h & 0x7C00) == 0x7C00 && (h & 0x03FF) : (h & 0x7F80) == 0x7F80 && (h & 0x007F);
}

/* Returns the number of mismatching 16-bit values (printing the first few); -1 when the run failed. */
static int check_decode(fp4_format format, int act, int mul) {
  static uint32_t out[4096 * 16];
  const int f16 = act == FP4_CUDA_ACT_F16;
  const int e = fp4_cuda_wgra_decode_selftest((int)format, act, mul, out);
  if (e) {
    printf("FAIL decode self-test %s %s: CUDA error %d\n", fp4_format_name(format), f16 ? "f16" : "bf16", e);
    return -1;
  }
  int bad = 0;
  for (int t = 0; t < 4096; t++) {
    const int b = t >> 4, c = t & 15, q = t & 3;
    const float scale = format == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode_inline((uint8_t)b) : fp4_ue8m0_decode_inline((uint8_t)b);
    for (int s = 0; s < 4; s++)
      for (int i = 0; i < 4; i++) {
        /* register a_i of k16 step s: rows g (i = 0, 2) / g + 8 (i = 1, 3), k 2q (+ 8 for i >= 2) and + 1 */
        const int hi = i & 1, k = 16 * s + 2 * q + (i >> 1) * 8;
        const uint32_t got = out[t * 16 + 4 * s + i];
        for (int e2 = 0; e2 < 2; e2++) {
          const float v = fp4_e2m1_decode_inline((uint8_t)selftest_code(c, hi, k + e2)) * scale;
          const uint16_t want = f16 ? fp4_f16_from_f32_inline(v) : fp4_bf16_from_f32_inline(v);
          const uint16_t have = (uint16_t)(got >> (16 * e2));
          const int ok = is_nan16(want, f16) ? is_nan16(have, f16) : have == want;
          if (!ok && bad++ < 8)
            printf("FAIL decode %s %s: scale byte 0x%02x, code %u (row %s, k %d): got 0x%04x, want 0x%04x\n",
                   fp4_format_name(format), f16 ? "f16" : "bf16", b, selftest_code(c, hi, k + e2), hi ? "g+8" : "g",
                   k + e2, have, want);
        }
      }
  }
  return bad;
}
#endif

int main(void) {
#if !FP4KIT_HAVE_CUDA
  printf("SKIP: this build has no CUDA\n");
  return 77;
#else
  fp4_context *ctx = NULL;
  char reason[256];
  const fp4_status created = fp4_context_create(&ctx, 0);
  if (created != FP4_OK) {
    /* A build without CUDA refuses device contexts: nothing here can run. */
    printf("%s: no context on device 0: %s\n", created == FP4_ERR_UNSUPPORTED ? "SKIP" : "FAIL", fp4_last_error());
    return created == FP4_ERR_UNSUPPORTED ? 77 : 1;
  }
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: the cuda backend cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  fp4_context_destroy(ctx);
  int failures = 0;
  const struct {
    fp4_format f;
    int act, mul;
  } runs[] = {{FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16, 0},
              {FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16, 1},
              {FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16, 0},
              {FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16, 0}};
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
    const int bad = check_decode(runs[i].f, runs[i].act, runs[i].mul);
    printf("decode %s %s%s: 16 codes x 256 scale bytes x 64 positions: %d mismatches\n", fp4_format_name(runs[i].f),
           runs[i].act == FP4_CUDA_ACT_F16 ? "f16" : "bf16", runs[i].mul ? " (multiply form)" : "", bad);
    if (bad) failures++;
  }
  printf("test_cuda_wgra: %d failures\n", failures);
  return failures ? 1 : 0;
#endif
}
