/* One test per validation rule: each bad argument gives a negative status and a message naming it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h" /* fp4_fail */
#include "fp4kit.h"
#include "testing.h"

static uint8_t qa_data[64 * 32], qa_scales[4096], qb_data[64 * 32], qb_scales[4096];
static float fbuf[64 * 64], obuf[64 * 64];

static fp4_qmatrix qa(void) {
  return (fp4_qmatrix){qa_data, qa_scales, 4, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
}
static fp4_qmatrix qb(void) {
  return (fp4_qmatrix){qb_data, qb_scales, 8, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
}
static fp4_matrix dense(int64_t r, int64_t c, float *p) { return (fp4_matrix){p, r, c, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}; }

int main(void) {
  fp4_qmatrix a = qa(), b = qb();
  fp4_matrix out = dense(4, 8, obuf), x = dense(4, 64, fbuf);
  CHECK(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL) == FP4_OK, "the valid call works: %s", fp4_last_error());
  CHECK(fp4_last_error()[0] == '\0', "success clears the message");

  /* A message may wrap the one before it (fp4_fail(st, "%s: %s", fn, fp4_last_error())): the
   * argument is the buffer being written, so the formatting must not read what it overwrites. */
  fp4_fail(FP4_ERR_INVALID_ARGUMENT, "inner: the reason");
  fp4_fail(FP4_ERR_INVALID_ARGUMENT, "outer: %s", fp4_last_error());
  CHECK(!strcmp(fp4_last_error(), "outer: inner: the reason"), "a wrapped message: '%s'", fp4_last_error());
  fp4_clear_error();

  CHECK_ERROR(fp4_mm(NULL, NULL, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a is NULL");
  CHECK_ERROR(fp4_mm(NULL, &a, NULL, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "b is NULL");
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "out is NULL");
  a.data = NULL;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a->data is NULL");
  a = qa();
  b.scales = NULL;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "b->scales is NULL");
  b = qb();
  a.rows = 0;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a rows (0)");
  a = qa();
  b.cols = -16;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "b cols (-16)");
  b = qb();
  a.rows = (int64_t)1 << 40;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "exceeds the limit");
  a = qa();
  a.cols = b.cols = 24;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "not a multiple of the nvfp4 block size 16");
  a = qa();
  b = qb();
  a.format = b.format = FP4_FORMAT_MXFP4;
  a.cols = b.cols = 48;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "not a multiple of the mxfp4 block size 32");
  a = qa();
  b = qb();
  b.format = FP4_FORMAT_MXFP4;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "share a format");
  b = qb();
  b.layout = (fp4_scale_layout)7;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "scale layout 7");
  b = qb();
  a.format = (fp4_format)9;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "format 9");
  a = qa();
  b.cols = 128;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "K = 64 columns but b has K = 128");
  b = qb();
  out.cols = 9;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "out is [4, 9]");
  out = dense(4, 8, obuf);
  out.dtype = FP4_DTYPE_E4M3;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "out dtype e4m3");
  out = dense(4, 8, obuf);
  out.ld = 3;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "out ld (3)");
  out = dense(4, 8, obuf);
  CHECK_ERROR(fp4_mm(NULL, &a, &b, NAN, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "alpha");
  a.multiplier = INFINITY;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a multiplier");
  a = qa();
  b.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "share one memory");
  b = qb();
  a.memory = b.memory = out.memory = FP4_MEMORY_DEVICE;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "context is NULL");
  a = qa();
  b = qb();
  out = dense(4, 8, obuf);
  fp4_options unknown = {.backend = "no-such-backend"};
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, &unknown), FP4_ERR_NOT_FOUND, "no backend named 'no-such-backend'");
  fp4_options badcfg = {.backend = "ref", .config = "tile-9x9"};
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, &badcfg), FP4_ERR_NOT_FOUND, "unknown config 'tile-9x9'");

  /* W4A16 */
  x.dtype = FP4_DTYPE_UE8M0;
  CHECK_ERROR(fp4_mm_w4a16(NULL, &x, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a dtype ue8m0");
  /* an enum cast from an integer no name has: the message gives the value that was passed */
  x = dense(4, 64, fbuf);
  x.dtype = (fp4_dtype)77;
  CHECK_ERROR(fp4_mm_w4a16(NULL, &x, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a dtype 77 is not f32");
  out.dtype = (fp4_dtype)-3;
  CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "out dtype -3 is not f32");
  out = dense(4, 8, obuf);
  x = dense(4, 64, fbuf);
  x.data = NULL;
  CHECK_ERROR(fp4_mm_w4a16(NULL, &x, &b, 1.0f, &out, NULL), FP4_ERR_INVALID_ARGUMENT, "a->data is NULL");
  x = dense(4, 64, fbuf);
  CHECK(fp4_mm_w4a16(NULL, &x, &b, 1.0f, &out, NULL) == FP4_OK, "valid w4a16");

  /* Typed elements are aligned to their size on every backend (the host backends read them through
   * typed pointers): one rule, checked before any backend is asked. */
  static uint16_t bf16buf[4 * 64 + 8];
  fp4_matrix xb = {(uint8_t *)bf16buf + 1, 4, 64, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  const char *host_backends[] = {NULL, "ref", "cpu"};
  for (int i = 0; i < 3; i++) {
    fp4_options o = {.backend = host_backends[i]};
    CHECK_ERROR(fp4_mm_w4a16(NULL, &xb, &b, 1.0f, &out, &o), FP4_ERR_INVALID_ARGUMENT, "fp4_mm_w4a16: a->data");
    xb.data = bf16buf;
    fp4_matrix out_mis = out;
    out_mis.data = (uint8_t *)obuf + 2;
    CHECK_ERROR(fp4_mm_w4a16(NULL, &xb, &b, 1.0f, &out_mis, &o), FP4_ERR_INVALID_ARGUMENT, "out->data");
    CHECK_ERROR(fp4_mm(NULL, &a, &b, 1.0f, &out_mis, &o), FP4_ERR_INVALID_ARGUMENT, "4-byte aligned (f32 elements)");
    size_t ws_bytes = 7;
    CHECK_ERROR(fp4_mm_workspace_size(NULL, &a, &b, &out_mis, &o, &ws_bytes), FP4_ERR_INVALID_ARGUMENT, "out->data");
    xb.data = (uint8_t *)bf16buf + 1;
  }
  fp4_matrix x_mis = x;
  x_mis.data = (uint8_t *)fbuf + 2;
  fp4_qmatrix q_ok = qa();
  CHECK_ERROR(fp4_quantize(NULL, &x_mis, 1.0f, &q_ok, NULL), FP4_ERR_INVALID_ARGUMENT, "x->data");
  CHECK_ERROR(fp4_quantize_modelopt(&x_mis, &q_ok, &(float){0}), FP4_ERR_INVALID_ARGUMENT, "x->data");
  CHECK_ERROR(fp4_dequantize(&q_ok, &x_mis), FP4_ERR_INVALID_ARGUMENT, "out->data");
  CHECK_ERROR(fp4_convert((uint8_t *)fbuf + 1, FP4_DTYPE_F32, obuf, FP4_DTYPE_BF16, 4), FP4_ERR_INVALID_ARGUMENT,
              "fp4_convert: src");
  CHECK_ERROR(fp4_convert(fbuf, FP4_DTYPE_F32, (uint8_t *)obuf + 1, FP4_DTYPE_F16, 4), FP4_ERR_INVALID_ARGUMENT,
              "fp4_convert: dst");
  CHECK(fp4_convert(fbuf, FP4_DTYPE_F32, (uint8_t *)obuf + 1, FP4_DTYPE_E4M3, 4) == FP4_OK, "byte elements: any address");
  CHECK(fp4_mm_w4a16(NULL, &x, &b, 1.0f, &out, NULL) == FP4_OK, "aligned operands still run: %s", fp4_last_error());

  /* quantize */
  fp4_qmatrix q = qa();
  CHECK_ERROR(fp4_quantize(NULL, &x, 0.0f, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "global_scale (0)");
  CHECK_ERROR(fp4_quantize(NULL, &x, NAN, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "global_scale");
  CHECK_ERROR(fp4_quantize(NULL, &x, -1.0f, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "global_scale (-1)");
  q.rows = 5;
  CHECK_ERROR(fp4_quantize(NULL, &x, 1.0f, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "differs from x");
  q = qa();
  CHECK_ERROR(fp4_quantize(NULL, NULL, 1.0f, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "x is NULL");
  CHECK_ERROR(fp4_quantize(NULL, &x, 1.0f, NULL, NULL), FP4_ERR_INVALID_ARGUMENT, "out is NULL");
  /* A refused quantize leaves out as it was; out->multiplier is an output, whatever it held before. */
  q.multiplier = 5.0f;
  CHECK_ERROR(fp4_quantize(NULL, NULL, 2.0f, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "x is NULL");
  CHECK(q.multiplier == 5.0f, "a refused fp4_quantize wrote out->multiplier (%g)", (double)q.multiplier);
  CHECK_ERROR(fp4_quantize(NULL, &x, NAN, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "global_scale");
  CHECK_ERROR(fp4_quantize_ordered(NULL, &x, NAN, FP4_ORDER_EXACT, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "global_scale");
  CHECK_ERROR(fp4_quantize_ordered(NULL, &x, 2.0f, FP4_ORDER_EXACT, &q, &(fp4_options){.backend = "cpu"}),
              FP4_ERR_UNSUPPORTED, "FP4_ORDER_EXACT");
  CHECK_ERROR(fp4_quantize(NULL, &x, 2.0f, &q, &(fp4_options){.backend = "nope"}), FP4_ERR_NOT_FOUND, "nope");
  CHECK_ERROR(fp4_quantize_modelopt(&x, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "weight_scale_2 is NULL");
  CHECK(q.multiplier == 5.0f, "a refused quantize wrote out->multiplier (%g)", (double)q.multiplier);
  q.multiplier = NAN; /* never read */
  CHECK(fp4_quantize(NULL, &x, 2.0f, &q, NULL) == FP4_OK && q.multiplier == 0.5f, "multiplier %g: %s",
        (double)q.multiplier, fp4_last_error());
  q.multiplier = NAN;
  CHECK(fp4_quantize_ordered(NULL, &x, 4.0f, FP4_ORDER_EXACT, &q, NULL) == FP4_OK && q.multiplier == 0.25f,
        "multiplier %g: %s", (double)q.multiplier, fp4_last_error());
  q = qa();
  q.format = FP4_FORMAT_MXFP4;
  float ws2;
  CHECK_ERROR(fp4_quantize_modelopt(&x, &q, &ws2), FP4_ERR_INVALID_ARGUMENT, "NVFP4 only");
  q = qa();
  CHECK_ERROR(fp4_quantize_modelopt(&x, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "weight_scale_2 is NULL");
  /* each entry names itself */
  CHECK_ERROR(fp4_quantize_modelopt_version(&x, (fp4_modelopt_version)9, &q, &ws2), FP4_ERR_INVALID_ARGUMENT,
              "fp4_quantize_modelopt_version: version 9");
  CHECK_ERROR(fp4_quantize_modelopt_version(&x, FP4_MODELOPT_0_44, &q, NULL), FP4_ERR_INVALID_ARGUMENT,
              "fp4_quantize_modelopt_version: weight_scale_2 is NULL");
  CHECK_ERROR(fp4_quantize_modelopt(&x, &q, NULL), FP4_ERR_INVALID_ARGUMENT, "fp4_quantize_modelopt: weight_scale_2");
  /* fp4_quantize_ordered in the default order (or MXFP4, which has one) runs fp4_quantize's checks
   * but is the function the caller called */
  CHECK_ERROR(fp4_quantize_ordered(NULL, NULL, 2.0f, FP4_ORDER_FLASHINFER, &q, NULL), FP4_ERR_INVALID_ARGUMENT,
              "fp4_quantize_ordered: x is NULL");
  CHECK_ERROR(fp4_quantize_ordered(NULL, &x, NAN, FP4_ORDER_FLASHINFER, &q, NULL), FP4_ERR_INVALID_ARGUMENT,
              "fp4_quantize_ordered: global_scale");
  CHECK_ERROR(fp4_quantize_ordered(NULL, &x, 2.0f, FP4_ORDER_FLASHINFER, &q, &(fp4_options){.backend = "nope"}),
              FP4_ERR_NOT_FOUND, "fp4_quantize_ordered: no backend named 'nope'");
  q.format = FP4_FORMAT_MXFP4;
  q.cols = 48;
  CHECK_ERROR(fp4_quantize_ordered(NULL, &x, 2.0f, FP4_ORDER_EXACT, &q, NULL), FP4_ERR_INVALID_ARGUMENT,
              "fp4_quantize_ordered: out cols (K = 48) is not a multiple of the mxfp4 block size 32");
  q = qa();
  fbuf[5] = NAN;
  CHECK_ERROR(fp4_quantize_modelopt(&x, &q, &ws2), FP4_ERR_INVALID_ARGUMENT, "w[0, 5]");
  fbuf[5] = 0;

  /* layouts, conversions, contexts */
  size_t bytes;
  CHECK_ERROR(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 4, 24, &bytes), FP4_ERR_INVALID_ARGUMENT, "block size 16");
  CHECK_ERROR(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 4, 32, NULL), FP4_ERR_INVALID_ARGUMENT, "bytes is NULL");
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, (fp4_scale_layout)7, 8, 64, 0, 0) == -1, "offset in an invalid layout");
  CHECK(strstr(fp4_last_error(), "fp4_scale_offset: scales scale layout 7"), "%s", fp4_last_error());
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 4, 32, 4, 0) == -1 &&
            strstr(fp4_last_error(), "fp4_scale_offset: scale (r, c) = (4, 0) is outside [0, 4) x [0, 2)"),
        "row past the end: %s", fp4_last_error());
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 4, 32, 3, 1) == 7 && fp4_last_error()[0] == 0,
        "an answer clears the error, as every successful call does: '%s'", fp4_last_error());
  /* each layout argument is named: the two share the format and shape, not the message */
  CHECK_ERROR(fp4_scales_convert(FP4_FORMAT_NVFP4, 4, 64, qa_scales, (fp4_scale_layout)4, qb_scales, FP4_LAYOUT_128X4),
              FP4_ERR_INVALID_ARGUMENT, "fp4_scales_convert: src_layout 4 is not linear, 128x4 or 8x4");
  CHECK_ERROR(fp4_scales_convert(FP4_FORMAT_NVFP4, 4, 64, qa_scales, FP4_LAYOUT_LINEAR, qb_scales, (fp4_scale_layout)-1),
              FP4_ERR_INVALID_ARGUMENT, "fp4_scales_convert: dst_layout -1 is not linear, 128x4 or 8x4");
  /* An architecture name is a compute capability as written: a number that only wraps to one (2^32 + 90),
   * or text around it, names none. */
  CHECK(fp4_arch_find("4294967386") == NULL && fp4_arch_find("sm_4294967386") == NULL, "a cc past int wraps to sm_90");
  CHECK(fp4_arch_find(" 90") == NULL && fp4_arch_find("+90") == NULL && fp4_arch_find("sm_ 90") == NULL &&
            fp4_arch_find("12.+0") == NULL && fp4_arch_find("12. 0") == NULL,
        "a number with a sign or blanks is no architecture name");
  CHECK(fp4_arch_find("90") && fp4_arch_find("sm_90a") && fp4_arch_find("12.1") && fp4_arch_find("12.1")->cc == 121,
        "the names the header lists still resolve");
  CHECK_ERROR(fp4_convert(NULL, FP4_DTYPE_F32, obuf, FP4_DTYPE_BF16, 4), FP4_ERR_INVALID_ARGUMENT, "src is NULL");
  CHECK_ERROR(fp4_convert(fbuf, (fp4_dtype)42, obuf, FP4_DTYPE_BF16, 4), FP4_ERR_INVALID_ARGUMENT, "src_dtype 42");
  fp4_context *ctx = NULL;
  CHECK_ERROR(fp4_context_create(&ctx, -5), FP4_ERR_INVALID_ARGUMENT, "device -5");
  CHECK_ERROR(fp4_context_create(NULL, 0), FP4_ERR_INVALID_ARGUMENT, "ctx is NULL");
  CHECK_ERROR(fp4_backend_available(NULL, "nope", NULL, 0), FP4_ERR_NOT_FOUND, "no backend named 'nope'");
  CHECK_ERROR(fp4_alloc(NULL, FP4_MEMORY_HOST, 0, (void **)&ctx), FP4_ERR_INVALID_ARGUMENT, "bytes is 0");
  void *p = NULL;
  CHECK_ERROR(fp4_alloc(NULL, (fp4_memory)5, 16, &p), FP4_ERR_INVALID_ARGUMENT, "fp4_alloc: memory 5");
  /* fp4_copy checks its memory values first, as fp4_alloc does: never "built without CUDA" for a
   * value that is no memory, never passed on to the device copy */
  CHECK_ERROR(fp4_copy(NULL, obuf, FP4_MEMORY_HOST, fbuf, (fp4_memory)7, 4), FP4_ERR_INVALID_ARGUMENT,
              "fp4_copy: src_memory 7 is neither host nor device");
  CHECK_ERROR(fp4_copy(NULL, obuf, (fp4_memory)-1, fbuf, FP4_MEMORY_HOST, 4), FP4_ERR_INVALID_ARGUMENT,
              "fp4_copy: dst_memory -1");
  fbuf[0] = 3.0f;
  CHECK(fp4_copy(NULL, obuf, FP4_MEMORY_HOST, fbuf, FP4_MEMORY_HOST, 4) == FP4_OK && obuf[0] == 3.0f, "host copy");
  fbuf[0] = 0.0f;
  CHECK(!strcmp(fp4_status_str(FP4_ERR_FORMAT), "FP4_ERR_FORMAT") && fp4_status_str((fp4_status)-99) != NULL, "status names");
  CHECK(!strcmp(fp4_version(), FP4KIT_VERSION_STRING), "version");
  return TEST_SUMMARY();
}
