/* Helpers the cpu backend's kernels and GEMM drivers share (declared in cpu_kernels.h): decoded
 * scale tables, scale addressing, row access and the output store. */
#include <pthread.h>

#include "backends/cpu/cpu_kernels.h"
#include "format/codec.h"
#include "format/format.h"

const float fp4_cpu_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static float e4m3_table[256], ue8m0_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
  for (int i = 0; i < 256; i++) {
    e4m3_table[i] = fp4_e4m3_decode_inline((uint8_t)i);
    ue8m0_table[i] = fp4_ue8m0_decode_inline((uint8_t)i);
  }
}

const float *fp4_cpu_e4m3_table(void) {
  pthread_once(&tables_once, tables_init);
  return e4m3_table;
}

const float *fp4_cpu_ue8m0_table(void) {
  pthread_once(&tables_once, tables_init);
  return ue8m0_table;
}

int64_t fp4_cpu_scale_base(const fp4_cpu_gemm *g, int64_t r) {
  int64_t cp = fp4_round_up(g->c, 4);
  switch (g->layout) {
  case FP4_LAYOUT_128X4: return (r / 128) * (cp / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4;
  case FP4_LAYOUT_8X4: return (r / 8) * cp * 8 + (r % 8) * 4;
  default: return r * g->c;
  }
}

float fp4_cpu_scale_value(const fp4_cpu_gemm *g, int64_t r, int64_t c) {
  uint8_t s = g->bs[fp4_cpu_scale_base(g, r) + (c >> 2) * g->gstride + (c & 3)];
  return g->mx ? fp4_cpu_ue8m0_table()[s] : fp4_cpu_e4m3_table()[s];
}

const void *fp4_cpu_dense_row(const fp4_matrix *x, int64_t r) {
  const int64_t ld = x->ld ? x->ld : x->cols;
  return (const unsigned char *)x->data + (size_t)(r * ld) * fp4_dtype_size(x->dtype);
}

float fp4_cpu_block_scale(fp4_qmatrix *out, const fp4_nvfp4_recipe *recipe, int64_t r, int64_t c, float vmax) {
  const int64_t C = fp4_scale_cols(out->format, out->cols);
  float os;
  uint8_t sb = out->format == FP4_FORMAT_MXFP4 ? fp4_mxfp4_block_scale(vmax, &os)
                                               : fp4_nvfp4_block_scale(vmax, *recipe, &os);
  ((uint8_t *)out->scales)[fp4_layout_offset((int)out->layout, C, r, c)] = sb;
  return os;
}

void fp4_cpu_store(const fp4_cpu_gemm *g, int64_t m, int64_t n, float sum) {
  fp4_matrix_set(g->out, m, n, (float)((double)sum * g->scale));
}
