#include "dispatch/moe_workspace.h"

#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "format/codec.h"

_Static_assert(FP4_MOE_WS_ALIGN % FP4_MOE_WORKSPACE_ALIGNMENT == 0, "sections keep the workspace's alignment");

/* Size arithmetic in uint64 with overflow detection: a sticky flag instead of checks at each use. */
typedef struct sizer {
  uint64_t cursor;
  int overflow;
} sizer;

static uint64_t mul(sizer *s, uint64_t a, uint64_t b) {
  if (a && b > UINT64_MAX / a) {
    s->overflow = 1;
    return 0;
  }
  return a * b;
}

/* Appends a section of bytes at the next aligned offset; absent sections (0 bytes) get offset 0. */
static size_t section(sizer *s, uint64_t bytes) {
  if (bytes == 0) return 0;
  uint64_t start = (s->cursor + FP4_MOE_WS_ALIGN - 1) / FP4_MOE_WS_ALIGN * FP4_MOE_WS_ALIGN;
  if (start < s->cursor || bytes > UINT64_MAX - start) {
    s->overflow = 1;
    return 0;
  }
  s->cursor = start + bytes;
  return (size_t)start;
}

/* Codes, then 128x4 scales, of a [rows, cols] FP4 matrix. */
static uint64_t code_bytes(sizer *s, uint64_t rows, uint64_t cols) { return mul(s, rows, cols / 2); }
static uint64_t scale_bytes(fp4_format format, uint64_t rows, uint64_t cols) {
  return (uint64_t)fp4_layout_bytes((int)FP4_LAYOUT_128X4, (int64_t)rows, (int64_t)cols / fp4_format_block_size(format));
}
static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

fp4_status fp4_moe_ws_layout_make(const char *fn, const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                  fp4_moe_ws_layout *ws) {
  memset(ws, 0, sizeof *ws);
  if (tokens == 0) return FP4_OK;
  const fp4_moe_experts *r = &layer->routed, *sh = layer->shared;
  const uint64_t T = (uint64_t)tokens, P = T * (uint64_t)top_k, E = (uint64_t)r->gate_up.experts;
  const uint64_t H = (uint64_t)r->gate_up.cols;
  uint64_t I = (uint64_t)r->gate_up.rows / 2, R = P;
  if (sh) {
    I = max64(I, (uint64_t)sh->gate_up.rows / 2);
    R = max64(R, T);
  }
  sizer s = {0, 0};
  ws->pairs = (int64_t)P;
  ws->rows = (int64_t)R;
  ws->inter = (int64_t)I;
  ws->sorted = section(&s, mul(&s, P, sizeof(int32_t)));
  ws->inverse = section(&s, mul(&s, P, sizeof(int32_t)));
  ws->offsets = section(&s, mul(&s, E + 1, sizeof(int64_t)));
  if (layer->mode == FP4_MOE_W4A4) {
    /* The hidden states are quantized once per expert set; size for the larger block count. */
    uint64_t hs = scale_bytes(r->gate_up.format, T, H);
    if (sh) hs = max64(hs, scale_bytes(sh->gate_up.format, T, H));
    ws->hidden_q = section(&s, code_bytes(&s, T, H));
    ws->hidden_q_scales = section(&s, hs);
  }
  ws->gate_up_out = section(&s, mul(&s, mul(&s, R, 2 * I), sizeof(float)));
  /* f32 (4 bytes an element) or bf16 */
  ws->act = section(&s, mul(&s, mul(&s, R, I), sizeof(float)));
  if (layer->mode == FP4_MOE_W4A4) {
    uint64_t as = scale_bytes(r->down.format, R, I);
    if (sh) as = max64(as, scale_bytes(sh->down.format, R, I));
    ws->act_q = section(&s, code_bytes(&s, R, I));
    ws->act_q_scales = section(&s, as);
  }
  ws->down_out = section(&s, mul(&s, mul(&s, P, H), sizeof(float)));
  if (sh) ws->shared_out = section(&s, mul(&s, mul(&s, T, H), sizeof(float)));
  if (s.overflow || s.cursor > (uint64_t)SIZE_MAX)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the workspace for T = %lld, top_k = %lld does not fit in size_t", fn,
                    (long long)tokens, (long long)top_k);
  ws->total = (size_t)s.cursor;
  return FP4_OK;
}
