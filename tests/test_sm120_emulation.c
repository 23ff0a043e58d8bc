/*
 * The SM120 MMA emulation (src/backends/sm120/sm120_mma.h) against a plain matrix product.
 *
 * Fragments are built here from the PTX ISA tables, written out independently of the header's
 * inverse ownership functions. Sources (PTX ISA 9.0, "Warp Level Matrix Multiply-Accumulate
 * Instructions"):
 *   - A, B, C/D fragments: section 9.7.14.5.11 "Matrix Fragments for mma.m16n8k64", the .e2m1 rows
 *     of the Multiplicand A table (Figure 93), Multiplicand B (Figures 94, 95) and the
 *     Accumulators table (Figure 96): groupID = laneid >> 2, threadID_in_group = laneid % 4,
 *       A a_i: row = groupID for 0 <= i < 8 || 16 <= i < 24, else groupID + 8;
 *              col = threadID_in_group * 8 + (i & 7) (+ 32 for i >= 16); 8 elements per .b32,
 *              low to high
 *       B b_i: row = threadID_in_group * 8 + (i & 7) (+ 32 for i >= 8); col = groupID
 *       C c_i: row = groupID for i < 2, else groupID + 8; col = threadID_in_group * 2 + (i & 1)
 *   - scale fragments: section 9.7.14.3 "Block Scaling": thread-id-a = 0 selects the thread pair
 *     laneid % 4 == 0 or 1, thread-id-a = 1 the pair laneid % 4 == 2 or 3 (Figure 43), the lower
 *     lane of the pair carrying row groupID and the upper one row groupID + 8; thread-id-b selects
 *     the lane with laneid % 4 == thread-id-b, which carries column groupID (Figure 44); byte-id
 *     (Figure 45, Table 37): scale_vec::4X uses all four bytes, byte-id 0; scale_vec::2X uses the
 *     byte pair starting at byte-id 0 or 2.
 *     (The row carried by each lane of the pair is drawn in Figure 43; the same assignment is the
 *     SFA layout of CUTLASS's SM120 block-scaled MMA traits.)
 * Unselected lanes and bytes hold NaN scale bytes, so reading the wrong one cannot go unnoticed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/sm120/sm120_mma.h"
#include "testing.h"

typedef struct problem {
  uint8_t a[16][64]; /* A[m][k] codes */
  uint8_t b[64][8];  /* B[k][n] codes */
  uint8_t sfa[16][4];
  uint8_t sfb[4][8];
  float c[16][8];
} problem;

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static void make_problem(problem *p, int kind, int c_zero) {
  for (int m = 0; m < 16; m++)
    for (int k = 0; k < 64; k++) p->a[m][k] = (uint8_t)(rnd() & 0xF);
  for (int k = 0; k < 64; k++)
    for (int n = 0; n < 8; n++) p->b[k][n] = (uint8_t)(rnd() & 0xF);
  for (int q = 0; q < 4; q++) {
    for (int m = 0; m < 16; m++)
      p->sfa[m][q] = kind == FP4_SM120_NVF4 ? (uint8_t)(1 + rnd() % 0x7E) : (uint8_t)(110 + rnd() % 30);
    for (int n = 0; n < 8; n++)
      p->sfb[q][n] = kind == FP4_SM120_NVF4 ? (uint8_t)(1 + rnd() % 0x7E) : (uint8_t)(110 + rnd() % 30);
  }
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 8; n++) p->c[m][n] = c_zero ? 0.0f : (float)((int)(rnd() % 2001) - 1000) / 64.0f;
}

/* Fragments per the PTX tables quoted above; swap_rows = 1 builds a deliberately wrong A fragment
 * (rows groupID and groupID + 8 exchanged) to show the comparison can fail. */
static void build_fragments(const problem *p, int kind, int bid_a, int tid_a, int bid_b, int tid_b, int swap_rows,
                            fp4_sm120_warp_fragments *f) {
  const int chunks = kind == FP4_SM120_NVF4 ? 4 : 2;
  const uint8_t nan_byte = kind == FP4_SM120_NVF4 ? 0x7F : 0xFF;
  memset(f, 0, sizeof *f);
  for (int lane = 0; lane < 32; lane++) {
    const int gid = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 32; i++) { /* A: four .b32, eight e2m1 each, low to high */
      int row = ((i < 8) || (i >= 16 && i < 24)) ? gid : gid + 8;
      if (swap_rows) row ^= 8;
      int col = tig * 8 + (i & 7) + (i >= 16 ? 32 : 0);
      f->a[lane][i / 8] |= (uint32_t)p->a[row][col] << (4 * (i % 8));
    }
    for (int i = 0; i < 16; i++) { /* B: two .b32 */
      int row = tig * 8 + (i & 7) + (i >= 8 ? 32 : 0);
      f->b[lane][i / 8] |= (uint32_t)p->b[row][gid] << (4 * (i % 8));
    }
    for (int i = 0; i < 4; i++) f->c[lane][i] = p->c[i < 2 ? gid : gid + 8][tig * 2 + (i & 1)];
    /* Scales: NaN everywhere, then the selected lanes and bytes. */
    f->sfa[lane] = f->sfb[lane] = nan_byte * 0x01010101u;
    if (tig == 2 * tid_a || tig == 2 * tid_a + 1) {
      int row = tig == 2 * tid_a ? gid : gid + 8;
      for (int q = 0; q < chunks; q++) {
        f->sfa[lane] &= ~(0xFFu << (8 * (bid_a + q)));
        f->sfa[lane] |= (uint32_t)p->sfa[row][q] << (8 * (bid_a + q));
      }
    }
    if (tig == tid_b)
      for (int q = 0; q < chunks; q++) {
        f->sfb[lane] &= ~(0xFFu << (8 * (bid_b + q)));
        f->sfb[lane] |= (uint32_t)p->sfb[q][gid] << (8 * (bid_b + q));
      }
  }
}

static double scale_value(int kind, uint8_t s) {
  return kind == FP4_SM120_NVF4 ? (double)fp4_e4m3_decode_inline(s) : ldexp(1.0, (int)s - 127);
}

/* Plain product in double: C + sum_k A*sfa * B*sfb. */
static double reference(const problem *p, int kind, int m, int n) {
  const int bs = kind == FP4_SM120_NVF4 ? 16 : 32;
  double acc = p->c[m][n];
  for (int k = 0; k < 64; k++)
    acc += (double)fp4_e2m1_decode_inline(p->a[m][k]) * scale_value(kind, p->sfa[m][k / bs]) *
           (double)fp4_e2m1_decode_inline(p->b[k][n]) * scale_value(kind, p->sfb[k / bs][n]);
  return acc;
}

/* Runs the emulation; returns the largest relative error against the reference (inf for NaN). */
static double run(const problem *p, int kind, int bid_a, int tid_a, int bid_b, int tid_b, int swap_rows) {
  static fp4_sm120_warp_fragments f;
  float d[32][4];
  build_fragments(p, kind, bid_a, tid_a, bid_b, tid_b, swap_rows, &f);
  fp4_sm120_mma_warp_host(kind, &f, bid_a, tid_a, bid_b, tid_b, d);
  double worst = 0.0;
  for (int lane = 0; lane < 32; lane++)
    for (int i = 0; i < 4; i++) {
      int m = (lane >> 2) + (i < 2 ? 0 : 8), n = (lane % 4) * 2 + (i & 1);
      double ref = reference(p, kind, m, n), got = d[lane][i];
      if (!isfinite(got)) return INFINITY;
      double err = fabs(got - ref) / fmax(fabs(ref), 1e-30);
      if (err > worst) worst = err;
    }
  return worst;
}

int main(void) {
  static problem p;
  const char *names[2] = {"mxf4nvf4 4X ue4m3", "mxf4 2X ue8m0"};
  for (int kind = 0; kind < 2; kind++) {
    for (int trial = 0; trial < 20; trial++) {
      make_problem(&p, kind, trial % 2);
      /* Every valid selector combination (Table 37). */
      const int nbid = kind == FP4_SM120_NVF4 ? 1 : 2;
      for (int ba = 0; ba < nbid; ba++)
        for (int ta = 0; ta < 2; ta++)
          for (int bb = 0; bb < nbid; bb++)
            for (int tb = 0; tb < 4; tb++) {
              double err = run(&p, kind, 2 * ba, ta, 2 * bb, tb, 0);
              /* Only the final float sum of five terms rounds: a few ulp relative to the largest
               * term; 1e-5 is far below any mapping error, which is O(1). */
              CHECK(err <= 1e-5, "%s trial %d byte-id-a %d thread-id-a %d byte-id-b %d thread-id-b %d: rel err %g",
                    names[kind], trial, 2 * ba, ta, 2 * bb, tb, err);
            }
      /* The check can fail: a wrong A mapping is caught. */
      double wrong = run(&p, kind, 0, 0, 0, 0, 1);
      CHECK(wrong > 1e-3, "%s trial %d: a swapped-rows A fragment went unnoticed (rel err %g)", names[kind], trial,
            wrong);
    }
    /* With C = 0 and a single nonzero chunk, the result is exact (one exact product). */
    make_problem(&p, kind, 1);
    int bs = kind == FP4_SM120_NVF4 ? 16 : 32;
    for (int m = 0; m < 16; m++)
      for (int k = bs; k < 64; k++) p.a[m][k] = 0;
    static fp4_sm120_warp_fragments f;
    float d[32][4];
    build_fragments(&p, kind, 0, 0, 0, 0, 0, &f);
    fp4_sm120_mma_warp_host(kind, &f, 0, 0, 0, 0, d);
    int exact = 1;
    for (int lane = 0; lane < 32; lane++)
      for (int i = 0; i < 4; i++)
        exact &= (double)d[lane][i] == reference(&p, kind, (lane >> 2) + (i < 2 ? 0 : 8), (lane % 4) * 2 + (i & 1));
    CHECK(exact, "%s: a single-chunk product is not exact", names[kind]);
  }
  /* UE4M3 ignores the padding MSB: 0xB8 scales like 0x38 (1.0). */
  make_problem(&p, FP4_SM120_NVF4, 1);
  double base = run(&p, FP4_SM120_NVF4, 0, 0, 0, 0, 0);
  for (int m = 0; m < 16; m++) p.sfa[m][0] = 0x38;
  static fp4_sm120_warp_fragments f;
  float d1[32][4], d2[32][4];
  build_fragments(&p, FP4_SM120_NVF4, 0, 0, 0, 0, 0, &f);
  fp4_sm120_mma_warp_host(FP4_SM120_NVF4, &f, 0, 0, 0, 0, d1);
  for (int lane = 0; lane < 32; lane++)
    if ((lane & 3) < 2) f.sfa[lane] |= 0x80u;
  fp4_sm120_mma_warp_host(FP4_SM120_NVF4, &f, 0, 0, 0, 0, d2);
  CHECK(base <= 1e-5 && memcmp(d1, d2, sizeof d1) == 0, "UE4M3 scale byte MSB must be ignored");
  return TEST_SUMMARY();
}
