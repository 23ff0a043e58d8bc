/*
 * What the SM120 block-scaled warp MMA computes, written once for the host (C) and the device
 * (CUDA), so that the emulation used on SM90 is the same code the host unit test checks against
 * the PTX ISA fragment tables.
 *
 * Instructions emulated (PTX ISA 8.7+, sm_120a / sm_121a):
 *   mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3
 *   mma.sync.aligned.kind::mxf4.block_scale.scale_vec::2X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue8m0
 * D[16x8] = (A[16x64] * scale_A) * (B[64x8] * scale_B) + C with scale_A [16 x 4|2], scale_B [4|2 x 8].
 *
 * Which lane holds what (PTX ISA 9.0, section 9.7.14.5.11 "Matrix Fragments for mma.m16n8k64",
 * and section 9.7.14.3 "Block Scaling", Table 37 and Figures 43-45), with g = lane >> 2 and
 * t = lane % 4:
 *   A: register r holds 8 codes (low nibble first) of row g + 8*(r & 1), K = 8t + 32*(r >> 1) + 0..7
 *   B: register r holds 8 codes of column g, K = 8t + 32*r + 0..7
 *   C/D: element i is row g + 8*(i >> 1), column 2t + (i & 1)                (the SM80 m16n8 layout)
 *   scale_A: the lane pair 4*g + 2*thread_id_a + {0, 1} supplies rows g and g + 8;
 *   scale_B: lane 4*g + thread_id_b supplies column g;
 *   bytes: 4X uses all four bytes (byte_id 0), byte q = K chunk q of 16; 2X uses bytes
 *          byte_id and byte_id + 1 (byte_id 0 or 2) for the two K chunks of 32.
 *
 * Arithmetic: every chunk product sum_k e2m1(a) * e2m1(b) over 16 (or 32) K is a multiple of 1/4
 * below 2^11 and therefore exact in float; multiplying it by the two scales is exact too (4-bit by
 * 4-bit significands for UE4M3, a power of two for UE8M0) unless the result leaves the float range.
 * The chunk results and C are then summed in float, C first, chunks in K order. The PTX ISA does
 * not specify the order or width of that last accumulation, so a real SM120 may differ from this
 * emulation by float rounding of the final sum (never by a mapping, scale or chunk error); the GPU
 * tests therefore compare with a 1e-5 relative tolerance.
 */
#ifndef FP4_BACKENDS_SM120_MMA_H
#define FP4_BACKENDS_SM120_MMA_H

#include <math.h>
#include <stdint.h>

#include "format/codec.h"

/* The two instruction variants fp4kit uses. */
enum {
  FP4_SM120_NVF4 = 0, /* kind::mxf4nvf4, scale_vec::4X, UE4M3 scales per 16 K */
  FP4_SM120_MXF4 = 1  /* kind::mxf4, scale_vec::2X, UE8M0 scales per 32 K     */
};

/* ---- ownership: which lane and register hold an element (inverse of the PTX tables) ---------- */

FP4_HD int fp4_sm120_a_lane(int row, int k) { return 4 * (row & 7) + ((k & 31) >> 3); }
FP4_HD int fp4_sm120_a_reg(int row, int k) { return (row >> 3) + 2 * (k >> 5); }
FP4_HD int fp4_sm120_b_lane(int col, int k) { return 4 * col + ((k & 31) >> 3); }
FP4_HD int fp4_sm120_b_reg(int k) { return k >> 5; }
FP4_HD int fp4_sm120_sfa_lane(int row, int thread_id_a) { return 4 * (row & 7) + 2 * thread_id_a + (row >> 3); }
FP4_HD int fp4_sm120_sfb_lane(int col, int thread_id_b) { return 4 * col + thread_id_b; }

/* ---- one lane's result from the rows, columns and scales it needs ------------------------------ */

/* The operands one lane needs for its four outputs, gathered from the lanes that own them:
 * a_rows[h][w] = 8 codes of A row g + 8h at K = 8w..8w+7; b_cols[j][w] = 8 codes of B column 2t + j;
 * sfa[h] = the scale word of row g + 8h; sfb[j] = the scale word of column 2t + j. */
typedef struct fp4_sm120_lane_operands {
  uint32_t a_rows[2][8];
  uint32_t b_cols[2][8];
  uint32_t sfa[2];
  uint32_t sfb[2];
} fp4_sm120_lane_operands;

/* Sum of e2m1(a) * e2m1(b) over the 8 code pairs of two registers: exact in float. */
FP4_HD float fp4_sm120_dot8(uint32_t a, uint32_t b) {
  float s = 0.0f;
  for (int j = 0; j < 8; j++) {
    float x = fp4_e2m1_decode_inline((uint8_t)((a >> (4 * j)) & 0xF));
    float y = fp4_e2m1_decode_inline((uint8_t)((b >> (4 * j)) & 0xF));
    s = s + FP4_MUL(x, y);
  }
  return s;
}

/* chunk_sum * sf_a * sf_b for scale bytes of the given kind; exact while in float range. */
FP4_HD float fp4_sm120_scale_chunk(int kind, float chunk_sum, uint8_t sa, uint8_t sb) {
  if (kind == FP4_SM120_NVF4) {
    /* UE4M3 is a 7-bit format; the register byte's MSB is padding (PTX ISA 5.2.3). */
    float fa = fp4_e4m3_decode_inline((uint8_t)(sa & 0x7F)), fb = fp4_e4m3_decode_inline((uint8_t)(sb & 0x7F));
    return FP4_MUL(FP4_MUL(chunk_sum, fa), fb);
  }
  if (sa == 0xFF || sb == 0xFF) return fp4_f32_from_bits(0x7FC00000u); /* UE8M0 NaN */
  return ldexpf(chunk_sum, (int)sa + (int)sb - 254);
}

/* d[i] = C + chunk results for the lane's four outputs (row g + 8*(i >> 1), column 2t + (i & 1)).
 * byte_id_a / byte_id_b select the first scale byte (always 0 for 4X; 0 or 2 for 2X). */
FP4_HD void fp4_sm120_mma_lane(int kind, const fp4_sm120_lane_operands *op, int byte_id_a, int byte_id_b,
                               const float c[4], float d[4]) {
  const int chunks = kind == FP4_SM120_NVF4 ? 4 : 2;
  const int words_per_chunk = 8 / chunks; /* 8 codes per word: 2 words per 16 K, 4 per 32 K */
  for (int i = 0; i < 4; i++) {
    const int h = i >> 1, j = i & 1;
    float acc = c[i];
    for (int q = 0; q < chunks; q++) {
      float s = 0.0f;
      for (int w = q * words_per_chunk; w < (q + 1) * words_per_chunk; w++)
        s = s + fp4_sm120_dot8(op->a_rows[h][w], op->b_cols[j][w]);
      uint8_t sa = (uint8_t)(op->sfa[h] >> (8 * (byte_id_a + q)));
      uint8_t sb = (uint8_t)(op->sfb[j] >> (8 * (byte_id_b + q)));
      acc = acc + fp4_sm120_scale_chunk(kind, s, sa, sb);
    }
    d[i] = acc;
  }
}

/* ---- the whole warp on the host: fragments as the 32 lanes hold them ---------------------------- */

/* Registers of all 32 lanes, indexed [lane][register]. */
typedef struct fp4_sm120_warp_fragments {
  uint32_t a[32][4];
  uint32_t b[32][2];
  float c[32][4];
  uint32_t sfa[32];
  uint32_t sfb[32];
} fp4_sm120_warp_fragments;

/* Gathers lane's operands from the warp's registers through the ownership functions above: the
 * host twin of the shuffles the emulated kernel performs. */
FP4_HD void fp4_sm120_gather_host(const fp4_sm120_warp_fragments *f, int lane, int thread_id_a, int thread_id_b,
                                  fp4_sm120_lane_operands *op) {
  const int g = lane >> 2, t = lane & 3;
  for (int h = 0; h < 2; h++) {
    const int row = g + 8 * h;
    for (int w = 0; w < 8; w++) op->a_rows[h][w] = f->a[fp4_sm120_a_lane(row, 8 * w)][fp4_sm120_a_reg(row, 8 * w)];
    op->sfa[h] = f->sfa[fp4_sm120_sfa_lane(row, thread_id_a)];
  }
  for (int j = 0; j < 2; j++) {
    const int col = 2 * t + j;
    for (int w = 0; w < 8; w++) op->b_cols[j][w] = f->b[fp4_sm120_b_lane(col, 8 * w)][fp4_sm120_b_reg(8 * w)];
    op->sfb[j] = f->sfb[fp4_sm120_sfb_lane(col, thread_id_b)];
  }
}

/* The instruction on the host: d[lane][i] for every lane. */
FP4_HD void fp4_sm120_mma_warp_host(int kind, const fp4_sm120_warp_fragments *f, int byte_id_a, int thread_id_a,
                                    int byte_id_b, int thread_id_b, float d[32][4]) {
  for (int lane = 0; lane < 32; lane++) {
    fp4_sm120_lane_operands op;
    fp4_sm120_gather_host(f, lane, thread_id_a, thread_id_b, &op);
    fp4_sm120_mma_lane(kind, &op, byte_id_a, byte_id_b, f->c[lane], d[lane]);
  }
}

#endif /* FP4_BACKENDS_SM120_MMA_H */
