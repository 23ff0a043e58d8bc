/* The workspace queries and the context workspace on the host: host backends need no device
 * workspace (0 bytes), bad operands are refused as the call would refuse them, and a host-only
 * context cannot reserve device memory. The device side (sizes equal to what run() takes, capture
 * failing cleanly when the reservation is short) is in test_cuda_graph and test_cuda_moe. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fp4kit.h"
#include "testing.h"

enum { E = 2, N = 32, K = 64, T = 3 };

static uint8_t codes[E * N * K / 2], scales[E * 4096], a_codes[T * K / 2], a_scales[4096];
static uint16_t act[T * K];
static float out[T * N];
static const int64_t offsets[E + 1] = {0, 1, T};

int main(void) {
  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "host context: %s", fp4_last_error());
  fp4_qmatrix b = {codes, scales, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {a_codes, a_scales, T, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix a = {act, T, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  fp4_matrix o = {out, T, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_grouped_qmatrix g = {codes, scales, NULL, E, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_MEMORY_HOST};
  const char *backends[] = {NULL, "cpu", "ref"};
  for (int i = 0; i < 3; i++) {
    fp4_options opt = {.backend = backends[i]};
    size_t bytes = 12345;
    CHECK(fp4_mm_workspace_size(ctx, &aq, &b, &o, &opt, &bytes) == FP4_OK && bytes == 0, "mm %s: %zu (%s)",
          backends[i] ? backends[i] : "auto", bytes, fp4_last_error());
    bytes = 12345;
    CHECK(fp4_mm_w4a16_workspace_size(ctx, &a, &b, &o, &opt, &bytes) == FP4_OK && bytes == 0, "w4a16 %s: %zu (%s)",
          backends[i] ? backends[i] : "auto", bytes, fp4_last_error());
    bytes = 12345;
    CHECK(fp4_grouped_mm_workspace_size(ctx, &aq, &g, offsets, &o, &opt, &bytes) == FP4_OK && bytes == 0,
          "grouped %s: %zu (%s)", backends[i] ? backends[i] : "auto", bytes, fp4_last_error());
    bytes = 12345;
    CHECK(fp4_grouped_mm_w4a16_workspace_size(ctx, &a, &g, offsets, &o, &opt, &bytes) == FP4_OK && bytes == 0,
          "grouped w4a16 %s: %zu (%s)", backends[i] ? backends[i] : "auto", bytes, fp4_last_error());
  }
  size_t bytes = 0;
  CHECK_ERROR(fp4_mm_w4a16_workspace_size(ctx, &a, &b, &o, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "bytes");
  fp4_matrix wrong = o;
  wrong.cols = N + 1;
  CHECK_ERROR(fp4_mm_w4a16_workspace_size(ctx, &a, &b, &wrong, NULL, &bytes), FP4_ERR_INVALID_ARGUMENT, "out is");
  CHECK_ERROR(fp4_grouped_mm_workspace_size(ctx, &aq, &g, offsets, &wrong, NULL, &bytes), FP4_ERR_INVALID_ARGUMENT, "out");
  /* Operands of two formats: the call refuses them, so the query must too (it said 0 bytes, FP4_OK). */
  fp4_qmatrix mx = b;
  mx.format = FP4_FORMAT_MXFP4;
  for (int i = 0; i < 3; i++) {
    fp4_options opt = {.backend = backends[i]};
    CHECK_ERROR(fp4_mm(ctx, &aq, &mx, 1.0f, &o, &opt), FP4_ERR_INVALID_ARGUMENT, "both operands must share a format");
    bytes = 99;
    CHECK_ERROR(fp4_mm_workspace_size(ctx, &aq, &mx, &o, &opt, &bytes), FP4_ERR_INVALID_ARGUMENT,
                "fp4_mm_workspace_size: a is nvfp4 but b is mxfp4; both operands must share a format");
    CHECK(bytes == 0, "a refused query says 0 bytes (%zu)", bytes);
  }
  fp4_options named = {.backend = "no-such-backend"};
  CHECK_ERROR(fp4_mm_workspace_size(ctx, &aq, &b, &o, &named, &bytes), FP4_ERR_NOT_FOUND, "no-such-backend");
  /* A device scalar on host operands is refused by the call; the query refuses it the same way. */
  static const float one = 1.0f;
  const fp4_options dev = {.alpha_device = &one}, dev_cpu = {.backend = "cpu", .alpha_device = &one};
  CHECK_ERROR(fp4_mm_w4a16(ctx, &a, &b, 1.0f, &o, &dev), FP4_ERR_INVALID_ARGUMENT, "device scalar");
  CHECK_ERROR(fp4_mm_w4a16_workspace_size(ctx, &a, &b, &o, &dev, &bytes), FP4_ERR_INVALID_ARGUMENT,
              "fp4_mm_w4a16_workspace_size: options->alpha_device is a device scalar");
  CHECK_ERROR(fp4_mm_workspace_size(NULL, &aq, &b, &o, &dev, &bytes), FP4_ERR_INVALID_ARGUMENT, "device scalar");
  CHECK_ERROR(fp4_mm_workspace_size(NULL, &aq, &b, &o, &dev_cpu, &bytes), FP4_ERR_INVALID_ARGUMENT, "device scalar");
  CHECK_ERROR(fp4_grouped_mm_workspace_size(ctx, &aq, &g, offsets, &o, &dev, &bytes), FP4_ERR_INVALID_ARGUMENT,
              "device scalar");
  CHECK_ERROR(fp4_grouped_mm_w4a16_workspace_size(ctx, &a, &g, offsets, &o, &dev_cpu, &bytes), FP4_ERR_INVALID_ARGUMENT,
              "device scalar");

  /* A config the call refuses is refused by the query with the same status and message: an unknown
   * name, a cpu level this machine does not run, a config of a backend that has only "default". */
#if defined(__aarch64__)
  const char *foreign_level = "avx2";
#else
  const char *foreign_level = "neon";
#endif
  const struct {
    const char *backend, *config;
    fp4_status status;
  } configs[] = {{"cpu", "bogus", FP4_ERR_NOT_FOUND},
                 {"cpu", foreign_level, FP4_ERR_UNSUPPORTED},
                 {"ref", "generic", FP4_ERR_NOT_FOUND},
                 {NULL, "generic", FP4_ERR_INVALID_ARGUMENT}};
  for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
    const fp4_options opt = {.backend = configs[i].backend, .config = configs[i].config};
    const fp4_status want = configs[i].status;
    char call_msg[512];
    CHECK_ERROR(fp4_mm(ctx, &aq, &b, 1.0f, &o, &opt), want, "options->config");
    snprintf(call_msg, sizeof call_msg, "%s", strchr(fp4_last_error(), ':'));
    bytes = 99;
    CHECK_ERROR(fp4_mm_workspace_size(ctx, &aq, &b, &o, &opt, &bytes), want, call_msg);
    CHECK(bytes == 0, "a refused query says 0 bytes (%zu)", bytes);
    CHECK_ERROR(fp4_mm_w4a16_workspace_size(ctx, &a, &b, &o, &opt, &bytes), want, "options->config");
    CHECK_ERROR(fp4_grouped_mm_workspace_size(ctx, &aq, &g, offsets, &o, &opt, &bytes), want, "options->config");
    CHECK_ERROR(fp4_grouped_mm_w4a16_workspace_size(ctx, &a, &g, offsets, &o, &opt, &bytes), want, "options->config");
    CHECK_ERROR(fp4_grouped_mm_w4a16(ctx, &a, &g, offsets, 1.0f, &o, &opt), want, "options->config");
  }
  const fp4_options cpu_generic = {.backend = "cpu", .config = "generic"}, ref_default = {.backend = "ref", .config = "default"};
  CHECK(fp4_mm_workspace_size(ctx, &aq, &b, &o, &cpu_generic, &bytes) == FP4_OK && bytes == 0, "%s", fp4_last_error());
  CHECK(fp4_grouped_mm_workspace_size(ctx, &aq, &g, offsets, &o, &ref_default, &bytes) == FP4_OK, "%s", fp4_last_error());
  CHECK_ERROR(fp4_context_reserve_workspace(ctx, 1 << 20), FP4_ERR_INVALID_ARGUMENT, "host-only");
  CHECK_ERROR(fp4_context_reserve_workspace(NULL, 1 << 20), FP4_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(fp4_context_workspace_bytes(ctx) == 0 && fp4_context_workspace_bytes(NULL) == 0, "no workspace on the host");
  fp4_context_destroy(ctx);
#if !FP4KIT_HAVE_CUDA
  /* A build without CUDA has no device to make a context for: refused, never created silently. */
  fp4_context *dev_ctx = NULL;
  CHECK_ERROR(fp4_context_create(&dev_ctx, 99), FP4_ERR_UNSUPPORTED, "built without CUDA");
  CHECK(dev_ctx == NULL, "no context may come back from a refused create");
#endif
  return TEST_SUMMARY();
}
