/*
 * AVX2 + FMA + F16C kernels of the cpu backend (f32 arithmetic; bf16 activations are converted to
 * f32 exactly). Compiled with per-function target attributes; called only when the CPU has them.
 *
 * Weight decoding (byte-table lookup, FP4_CPU_ORDER_LUT128): 32 weight bytes (64 elements) are
 * split into low and high nibbles; vpshufb looks each nibble up in two 16-byte tables, the low and
 * the high byte of the element's bf16 value, and vpunpck{l,h}bw interleaves them into bf16 words.
 * A 32-bit lane holding two bf16 words gives two exact f32 values with one shift (low word) or one
 * mask (high word). That is 19 instructions per 64 elements, against 40-odd for a vpermps decode
 * with the sign moved in separately. Each 4-lane half of a decoded vector lies in one NVFP4 block
 * (in half an MXFP4 block), and the four vectors of one "map" (a 32-byte half of a 128-element
 * chunk and the lo/hi unpack) share the lane-to-block assignment, so a map's products are summed
 * per lane and the block scales applied with one FMA per map: per 128 weights 16 multiply-adds,
 * 4 scale FMAs and half a scale conversion (two chunks' scales at once; E4M3 via fp16, 2^-8 folded
 * into the output scale, as in kernels_avx512.c). A is packed in that order, so the hot loop never
 * moves activations.
 */
#include "backends/cpu/cpu_kernels.h"

#if FP4_CPU_X86
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "format/codec.h"
#include "format/format.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
/* Bytes ahead of the current weight chunk to prefetch in the streaming kernel (weights are read once). */
#define FP4_CPU_PREFETCH 4096

/* Low and high bytes of the bf16 values of the 16 E2M1 codes (0, 0.5, ..., 6, -0, ..., -6). */
static const uint8_t e2m1_bf16_lo[16] = {0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,
                                         0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0};
static const uint8_t e2m1_bf16_hi[16] = {0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                         0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0};

typedef struct lut2 {
  __m256i lo, hi, nib, top; /* the two tables (in both 128-bit lanes), 0x0F bytes, 0xFFFF0000 lanes */
} lut2;

T2 INLINE lut2 lut2_make(void) {
  lut2 t;
  t.lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)e2m1_bf16_lo));
  t.hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)e2m1_bf16_hi));
  t.nib = _mm256_set1_epi8(0x0F);
  t.top = _mm256_set1_epi32((int)0xFFFF0000u);
  return t;
}

/* The decoded words of 32 weight bytes (bf16 pairs: even element in the low half of a 32-bit lane,
 * odd in the high half): words[0], words[1] hold map 0 of the chunk half (lanes 0-3 in block 0 of
 * the half, lanes 4-7 in block 2), words[2], words[3] map 1 (blocks 1 and 3). */
T2 INLINE void decode32_words(const lut2 *t, const uint8_t *w, __m256i words[4]) {
  const __m256i x = _mm256_loadu_si256((const __m256i *)w);
  const __m256i nl = _mm256_and_si256(x, t->nib), nh = _mm256_and_si256(_mm256_srli_epi16(x, 4), t->nib);
  const __m256i ll = _mm256_shuffle_epi8(t->lo, nl), hl = _mm256_shuffle_epi8(t->hi, nl);
  const __m256i lh = _mm256_shuffle_epi8(t->lo, nh), hh = _mm256_shuffle_epi8(t->hi, nh);
  words[0] = _mm256_unpacklo_epi8(ll, hl), words[1] = _mm256_unpacklo_epi8(lh, hh);
  words[2] = _mm256_unpackhi_epi8(ll, hl), words[3] = _mm256_unpackhi_epi8(lh, hh);
}

/* The four f32 vectors of one map from its two words, in the packed order: exact (a bf16 pattern
 * in the top half of an f32 is the same value). */
T2 INLINE void map_vectors(const lut2 *t, __m256i w0, __m256i w1, __m256 v[4]) {
  v[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
  v[1] = _mm256_castsi256_ps(_mm256_and_si256(w0, t->top));
  v[2] = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
  v[3] = _mm256_castsi256_ps(_mm256_and_si256(w1, t->top));
}

/* Scales of a 128-element chunk as 8 lanes f, from which map_scale() spreads the lane scales of
 * each map. NVFP4: the 8 E4M3 bytes are g0[0..3], g1[0..3] (two groups of 4 columns), f =
 * [s0 s1 s4 s5 | s2 s3 s6 s7] (g0 and g1 interleaved in byte pairs) times 2^-8: a byte
 * sign-extended to 16 bits and shifted left by 7 has the sign in bits 15 and 14 and the code in
 * bits 13-7, and with bit 14 cleared it is the fp16 pattern of the value times 2^-8 (exact for
 * subnormals too). MXFP4: the 4 UE8M0 bytes g0[0..3], f = [m0 m0 m2 m2 | m1 m1 m3 m3], exact (the
 * code shifted into the exponent; the max with the f32 subnormal 2^-127 turns code 0 into 2^-127
 * and leaves every other code as it is). NaN codes are not decoded but folded into the returned
 * track (max of the bytes; E4M3 bytes doubled, so that 0x7F and 0xFF both become 0xFE, the
 * largest), which the caller tests once per row with nan_seen(). */
T2 INLINE __m128i chunk_scales(const uint8_t *g0, const uint8_t *g1, const int MX, __m128i track, __m256 *f) {
  uint32_t l0, l1;
  memcpy(&l0, g0, 4);
  if (MX) {
    const __m128i x = _mm_cvtsi32_si128((int)l0);
    track = _mm_max_epu8(x, track);
    const __m256i d = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(x, _mm_setr_epi8(0, 0, 2, 2, 1, 1, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1)));
    *f = _mm256_max_ps(_mm256_castsi256_ps(_mm256_slli_epi32(d, 23)), _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  } else {
    memcpy(&l1, g1, 4);
    const __m128i x = _mm_unpacklo_epi16(_mm_cvtsi32_si128((int)l0), _mm_cvtsi32_si128((int)l1)); /* s0 s1 s4 s5 s2 s3 s6 s7 */
    track = _mm_max_epu8(_mm_add_epi8(x, x), track);
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(x), 7), _mm_set1_epi16((short)0xBFFF));
    *f = _mm256_cvtph_ps(h);
  }
  return track;
}

/* chunk_scales() for two consecutive chunks (fa: the chunk whose scales start at g, fb: the next),
 * so that one load-combine-convert sequence and one NaN track update serve 256 weights: NVFP4 one
 * 16-byte sign extension, shift and mask for both, then one vcvtph2ps per chunk; MXFP4 one byte
 * shuffle per chunk puts each code in the top byte of its lanes and one shift right by 1 makes it
 * the f32 exponent. */
T2 INLINE __m128i chunk_scales2(const uint8_t *g, int64_t gs, const int MX, __m128i track, __m256 *fa, __m256 *fb) {
  uint32_t l0, l1, l2, l3;
  memcpy(&l0, g, 4);
  memcpy(&l1, g + gs, 4);
  if (MX) {
    const __m128i x = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)l0), _mm_cvtsi32_si128((int)l1));
    track = _mm_max_epu8(x, track);
    const __m256i xb = _mm256_broadcastq_epi64(x);
    const __m256i ca = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 0, -1, -1, -1, 2, -1, -1, -1, 2, /* m0 m0 m2 m2 */
                                        -1, -1, -1, 1, -1, -1, -1, 1, -1, -1, -1, 3, -1, -1, -1, 3); /* m1 m1 m3 m3 */
    const __m256i cb = _mm256_setr_epi8(-1, -1, -1, 4, -1, -1, -1, 4, -1, -1, -1, 6, -1, -1, -1, 6,
                                         -1, -1, -1, 5, -1, -1, -1, 5, -1, -1, -1, 7, -1, -1, -1, 7);
    const __m256 sub = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)); /* 2^-127 */
    *fa = _mm256_max_ps(_mm256_castsi256_ps(_mm256_srli_epi32(_mm256_shuffle_epi8(xb, ca), 1)), sub);
    *fb = _mm256_max_ps(_mm256_castsi256_ps(_mm256_srli_epi32(_mm256_shuffle_epi8(xb, cb), 1)), sub);
  } else {
    memcpy(&l2, g + 2 * gs, 4);
    memcpy(&l3, g + 3 * gs, 4);
    const __m128i x = _mm_unpacklo_epi64(_mm_unpacklo_epi16(_mm_cvtsi32_si128((int)l0), _mm_cvtsi32_si128((int)l1)),
                                         _mm_unpacklo_epi16(_mm_cvtsi32_si128((int)l2), _mm_cvtsi32_si128((int)l3)));
    track = _mm_max_epu8(_mm_add_epi8(x, x), track);
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7), _mm256_set1_epi16((short)0xBFFF));
    *fa = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *fb = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
  return track;
}

/* Lane scales of map m of chunk half h: lanes 0-3 take f lane 2h+m, lanes 4-7 f lane 4+2h+m, i.e.
 * NVFP4 blocks 4h+m and 4h+2+m (MXFP4 blocks 2h and 2h+1). */
T2 INLINE __m256 map_scale(__m256 f, int h, int m) {
  switch (2 * h + m) {
  case 0: return _mm256_permute_ps(f, 0x00);
  case 1: return _mm256_permute_ps(f, 0x55);
  case 2: return _mm256_permute_ps(f, 0xAA);
  default: return _mm256_permute_ps(f, 0xFF);
  }
}

/* 1 when a tracked scale byte was a NaN code (E4M3 0x7F/0xFF, tracked doubled as 0xFE; UE8M0 0xFF). */
T2 INLINE int nan_seen(__m128i track, const int MX) {
  return _mm_movemask_epi8(_mm_cmpeq_epi8(track, _mm_set1_epi8(MX ? (char)0xFF : (char)0xFE))) != 0;
}

/* acc[i][.] += per-lane scaled products of one 128-element chunk (64 weight bytes at w) with the
 * packed rows a + i*lda. Each map's four products are summed in a fixed order, then scaled. One map
 * is expanded to f32 at a time (its 4 vectors, the other map's 2 words kept): expanding both maps
 * first left four rows' 8 accumulators too few of the 16 vector registers, and the spills took
 * 0.567 instructions per weight-row product at M = 4 against 0.431 now
 * (bench/results/cpu/2026-12-02-quiet-machine/instructions.csv).
 * Folding the four map sums into one vector of block sums with three vhaddps (one scale FMA per
 * chunk instead of 4 vpermilps + 4 FMAs) takes fewer instructions (0.617 a weight at M = 1 against
 * 0.644) but ran 12-16% slower in cache on Zen 4, where this loop is bound by the shuffle and FMA
 * pipes rather than by instruction count (bench/results/cpu/2026-12-03-avx2-scale-pairs/in_cache.csv). */
T2 INLINE void chunk_dot(const lut2 *t, const uint8_t *w, __m256 f, const float *a, int64_t lda, const int MR,
                         __m256 acc[][2]) {
  for (int h = 0; h < 2; h++) {
    __m256i words[4];
    decode32_words(t, w + 32 * h, words);
    for (int m = 0; m < 2; m++) {
      __m256 v[4];
      map_vectors(t, words[2 * m], words[2 * m + 1], v);
      for (int i = 0; i < MR; i++) {
        const float *ap = a + i * lda + 64 * h + 32 * m;
        __m256 p = _mm256_mul_ps(v[0], _mm256_loadu_ps(ap));
        p = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(ap + 8), p);
        p = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(ap + 16), p);
        p = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(ap + 24), p);
        acc[i][m] = _mm256_fmadd_ps(p, map_scale(f, h, m), acc[i][m]);
      }
    }
  }
}

T2 INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Scale bytes of chunk ch of a row into g[0..7] (zero past the last column; every layout keeps
 * groups of 4 consecutive columns together, gstride bytes apart). */
static void tail_scale_bytes(const fp4_cpu_gemm *g, const uint8_t *sp, int64_t ch, uint8_t gb[8]) {
  const int nblk = g->mx ? 4 : 8;
  memset(gb, 0, 8);
  for (int i = 0; i < nblk && ch * nblk + i < g->c; i++) {
    const int64_t c = ch * nblk + i;
    gb[i] = sp[(c >> 2) * g->gstride + (c & 3)];
  }
}

/* Chunks [c0, c1) of one weight row (full chunks only) into acc: pairs of chunks with one scale
 * conversion for both (chunk_scales2()), then a single one. pf: the bytes to prefetch along with
 * them (c1 - c0 chunks' worth): FP4_CPU_PREFETCH bytes further on in the row at M = 1, the
 * weights read FP4_CPU_GEMV_PF_ITEMS items later in the blocked kernel (gemv_t()). */
T2 INLINE __m128i row_chunks(const fp4_cpu_gemm *g, const lut2 *t, const uint8_t *w, const uint8_t *sp, const float *a,
                             int64_t c0, int64_t c1, const uint8_t *pf, __m128i track, const int MR, const int MX,
                             __m256 acc[][2]) {
  const int64_t gstep = MX ? g->gstride : 2 * g->gstride; /* scale bytes per chunk */
  /* Two chunks per iteration (one scale conversion for both, see chunk_scales2(); one loop test),
   * indexed by one weight-byte offset o: chunk o / 64 reads A from a + 2 * o. 76 instructions per
   * 128 weights at M = 1 against 83 one chunk at a time; the same speed streaming from memory and
   * 1.04x in cache (bench/results/cpu/2026-12-03-avx2-scale-pairs/README.md). */
  const uint8_t *gp = sp + c0 * gstep;
  int64_t o = 64 * c0;
  pf -= o;
  for (; o + 128 <= 64 * c1; o += 128, gp += 2 * gstep) {
    _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
    _mm_prefetch((const char *)(pf + o + 64), _MM_HINT_T0);
    __m256 fa, fb;
    track = chunk_scales2(gp, g->gstride, MX, track, &fa, &fb);
    chunk_dot(t, w + o, fa, a + 2 * o, g->lda, MR, acc);
    chunk_dot(t, w + o + 64, fb, a + 2 * o + 128, g->lda, MR, acc);
  }
  if (o < 64 * c1) {
    _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
    __m256 f;
    track = chunk_scales(gp, gp + g->gstride, MX, track, &f);
    chunk_dot(t, w + o, f, a + 2 * o, g->lda, MR, acc);
  }
  return track;
}

/* The last, partial chunk of a row (K not a multiple of 128), copied into zero-filled buffers
 * first (A is zero there: packed rows are padded with zeros), and the row's outputs. */
T2 INLINE void row_finish(const fp4_cpu_gemm *g, const lut2 *t, const uint8_t *w, const uint8_t *sp, const float *a,
                          int64_t m0, int64_t n, __m128i track, const int MR, const int MX, __m256 acc[][2]) {
  const int64_t row_bytes = g->k / 2, nfull = row_bytes / 64, nchunks = g->kp / 128;
  const float fix = MX ? 1.0f : 256.0f; /* NVFP4 lane scales are 2^-8 times the value */
  if (nfull < nchunks) {
    _Alignas(32) uint8_t wb[64] = {0};
    uint8_t gb[8];
    memcpy(wb, w + nfull * 64, (size_t)(row_bytes - nfull * 64));
    tail_scale_bytes(g, sp, nfull, gb);
    __m256 f;
    track = chunk_scales(gb, gb + 4, MX, track, &f);
    chunk_dot(t, wb, f, a + nfull * 128, g->lda, MR, acc);
  }
  const int has_nan = nan_seen(track, MX);
  for (int i = 0; i < MR; i++) fp4_cpu_store(g, m0 + i, n, has_nan ? NAN : hsum8(_mm256_add_ps(acc[i][0], acc[i][1])) * fix);
}

/* Chunks per K block of the blocked streaming kernel (2 to 4 rows of A). */
#define GEMV_KCHUNKS 8

/* MR and MX are compile-time constants in every instantiation, so the accumulators stay in
 * registers. One row of A (M = 1) streams each weight row from start to end. With 2-4 rows the
 * whole of A (up to 128 KiB at K = 8192) does not stay in L1, and each weight row read it again
 * from L2: in cache, M = 4 ran 30 Gprod/s with A in L1 (K = 1152) against 24 with it in L2
 * (K = 4224). So FP4_CPU_GEMV_ROWS weight rows are walked together, GEMV_KCHUNKS chunks (1024
 * elements, 16 KiB of A at M = 4) of each in turn, their accumulators kept in memory between K
 * blocks.
 * Every output still takes its chunks in order into the same accumulators: the bits do not
 * change (bench/results/cpu/2026-12-04-avx2-m4-m16). */
T2 INLINE void gemv_t(const fp4_cpu_gemm *g, int64_t m0, int64_t n0, int64_t n1, const int MR, const int MX) {
  const lut2 t = lut2_make();
  const int64_t row_bytes = g->k / 2, nfull = row_bytes / 64;
  const float *a = (const float *)g->a + m0 * g->lda;
  if (MR == 1) {
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t *w = g->b + n * row_bytes;
      const uint8_t *sp = g->bs + fp4_cpu_scale_base(g, n);
      __m256 acc[1][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}};
      __m128i track = row_chunks(g, &t, w, sp, a, 0, nfull, w + FP4_CPU_PREFETCH, _mm_setzero_si128(), 1, MX, acc);
      row_finish(g, &t, w, sp, a, m0, n, track, 1, MX, acc);
    }
    return;
  }
  __m256 accs[FP4_CPU_GEMV_ROWS][FP4_CPU_GEMV_MAX_M][2];
  __m128i tracks[FP4_CPU_GEMV_ROWS];
  /* The prefetches follow the reading order, FP4_CPU_GEMV_PF_ITEMS items ahead. Prefetching a fixed
   * distance ahead in the address order instead left, at K = 14336 (7 KiB rows), the first 4 KiB
   * of 7 of every 8 rows to the hardware: 4096 x 14336 ran 0.83x as fast a product as
   * 28672 x 4096 (bench/results/cpu/2026-12-04-avx2-m4-prefetch). */
  fp4_cpu_gemv_cursor ahead = fp4_cpu_gemv_cursor_make(n0, n1);
  for (int i = 0; i < FP4_CPU_GEMV_PF_ITEMS; i++) fp4_cpu_gemv_cursor_next(&ahead, n1, nfull, GEMV_KCHUNKS);
  for (int64_t r0 = n0; r0 < n1; r0 += FP4_CPU_GEMV_ROWS) {
    const int64_t nr = n1 - r0 < FP4_CPU_GEMV_ROWS ? n1 - r0 : FP4_CPU_GEMV_ROWS;
    const uint8_t *sps[FP4_CPU_GEMV_ROWS];
    for (int64_t r = 0; r < nr; r++) {
      sps[r] = g->bs + fp4_cpu_scale_base(g, r0 + r);
      tracks[r] = _mm_setzero_si128();
      for (int i = 0; i < MR; i++) accs[r][i][0] = accs[r][i][1] = _mm256_setzero_ps();
    }
    const uint8_t *w0 = g->b + r0 * row_bytes;
    for (int64_t c0 = 0; c0 < nfull; c0 += GEMV_KCHUNKS) {
      const int64_t c1 = c0 + GEMV_KCHUNKS < nfull ? c0 + GEMV_KCHUNKS : nfull;
      for (int64_t r = 0; r < nr; r++) {
        const uint8_t *w = w0 + r * row_bytes;
        const uint8_t *pf = fp4_cpu_gemv_prefetch_next(&ahead, g->b, row_bytes, n1, nfull, GEMV_KCHUNKS, w, c0, c1);
        __m256 acc[FP4_CPU_GEMV_MAX_M][2];
        for (int i = 0; i < MR; i++) acc[i][0] = accs[r][i][0], acc[i][1] = accs[r][i][1];
        tracks[r] = row_chunks(g, &t, w, sps[r], a, c0, c1, pf, tracks[r], MR, MX, acc);
        for (int i = 0; i < MR; i++) accs[r][i][0] = acc[i][0], accs[r][i][1] = acc[i][1];
      }
    }
    for (int64_t r = 0; r < nr; r++) row_finish(g, &t, w0 + r * row_bytes, sps[r], a, m0, r0 + r, tracks[r], MR, MX, accs[r]);
  }
}

T2 static void gemv_f32(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1) {
  if (g->mx) {
    switch (mr) {
    case 1: gemv_t(g, m0, n0, n1, 1, 1); break;
    case 2: gemv_t(g, m0, n0, n1, 2, 1); break;
    case 3: gemv_t(g, m0, n0, n1, 3, 1); break;
    default: gemv_t(g, m0, n0, n1, 4, 1); break;
    }
  } else {
    switch (mr) {
    case 1: gemv_t(g, m0, n0, n1, 1, 0); break;
    case 2: gemv_t(g, m0, n0, n1, 2, 0); break;
    case 3: gemv_t(g, m0, n0, n1, 3, 0); break;
    default: gemv_t(g, m0, n0, n1, 4, 0); break;
    }
  }
}

/* The 8 lane scales of a chunk (chunk_scales()' lanes) decoded one by one from the table, NaN
 * codes included: the rare path of a chunk with a NaN scale (the panel path has no NaN track). */
T2 static __m256 exact_scales(const fp4_cpu_gemm *g, const uint8_t *g0, const uint8_t *g1) {
  static const int lane_nv[8] = {0, 1, 4, 5, 2, 3, 6, 7}, lane_mx[8] = {0, 0, 2, 2, 1, 1, 3, 3};
  uint8_t sb[8] = {0};
  memcpy(sb, g0, 4);
  if (!g->mx) memcpy(sb + 4, g1, 4);
  const float *stab = g->mx ? fp4_cpu_ue8m0_table() : fp4_cpu_e4m3_table();
  float fl[8];
  for (int i = 0; i < 8; i++) fl[i] = stab[sb[g->mx ? lane_mx[i] : lane_nv[i]]];
  return _mm256_loadu_ps(fl);
}

/* The 128 weights of one chunk (64 bytes at wp) times their lane scales f (the values), at d. */
T2 INLINE void panel_chunk(const lut2 *t, const uint8_t *wp, __m256 f, float *d) {
  for (int h = 0; h < 2; h++) {
    __m256i words[4];
    decode32_words(t, wp + 32 * h, words);
    for (int m = 0; m < 2; m++) {
      __m256 v[4];
      map_vectors(t, words[2 * m], words[2 * m + 1], v);
      const __m256 sc = map_scale(f, h, m);
      for (int q = 0; q < 4; q++) _mm256_storeu_ps(d + 64 * h + 32 * m + 8 * q, _mm256_mul_ps(v[q], sc));
    }
  }
}

/* Decoded weights with scales applied (exact: at most 6 significant bits), LUT128 order. NaN
 * scale codes decode to NaN here (the panel path has no separate tracking). Full chunks go in
 * pairs with one scale conversion and one NaN test for both (as in the streaming kernel), MX a
 * compile-time constant: 1.07 instructions a weight one chunk at a time with the format tested
 * per chunk, a fifth of the time at M = 16 (bench/results/cpu/2026-12-04-avx2-m4-m16). */
T2 INLINE void panel_t(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel,
                       const int MX) {
  const lut2 t = lut2_make();
  const int64_t row_bytes = g->k / 2, nfull = row_bytes / 64;
  const int64_t gstep = MX ? g->gstride : 2 * g->gstride;
  const int64_t ce = k1 / 128, cf = ce < nfull ? ce : nfull;
  const __m256 fix = _mm256_set1_ps(256.0f); /* NVFP4: exact, (value * 2^-8) * 2^8 */
  for (int64_t r = 0; r < FP4_CPU_NR; r++) {
    float *d = panel + r * g->lda;
    if (r >= nr) {
      memset(d + k0, 0, sizeof(float) * (size_t)(k1 - k0));
      continue;
    }
    const uint8_t *w = g->b + (n0 + r) * row_bytes;
    const uint8_t *sp = g->bs + fp4_cpu_scale_base(g, n0 + r);
    int64_t ch = k0 / 128;
    for (; ch + 2 <= cf; ch += 2) {
      const uint8_t *g0 = sp + ch * gstep;
      __m256 fa, fb;
      if (nan_seen(chunk_scales2(g0, g->gstride, MX, _mm_setzero_si128(), &fa, &fb), MX)) {
        fa = exact_scales(g, g0, g0 + g->gstride);
        fb = exact_scales(g, g0 + gstep, g0 + gstep + g->gstride);
      } else if (!MX) {
        fa = _mm256_mul_ps(fa, fix), fb = _mm256_mul_ps(fb, fix);
      }
      panel_chunk(&t, w + ch * 64, fa, d + ch * 128);
      panel_chunk(&t, w + ch * 64 + 64, fb, d + ch * 128 + 128);
    }
    for (; ch < ce; ch++) {
      _Alignas(32) uint8_t wb[64];
      uint8_t gb[8];
      const uint8_t *wp = w + ch * 64, *g0 = sp + ch * gstep, *g1 = g0 + g->gstride;
      if (ch >= nfull) {
        memset(wb, 0, sizeof wb);
        if (ch * 64 < row_bytes) memcpy(wb, wp, (size_t)(row_bytes - ch * 64));
        tail_scale_bytes(g, sp, ch, gb);
        wp = wb, g0 = gb, g1 = gb + 4;
      }
      __m256 f;
      if (nan_seen(chunk_scales(g0, g1, MX, _mm_setzero_si128(), &f), MX)) f = exact_scales(g, g0, g1);
      else if (!MX) f = _mm256_mul_ps(f, fix);
      panel_chunk(&t, wp, f, d + ch * 128);
    }
  }
}

T2 static void panel_f32(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel) {
  if (g->mx) panel_t(g, n0, nr, k0, k1, panel, 1);
  else panel_t(g, n0, nr, k0, k1, panel, 0);
}

/* MR x 3 register block (16 ymm registers at MR = 4: 12 accumulators, 3 B vectors, 1 A vector), run
 * for columns 0-2 and 3-5 of the panel; accumulators persist in acc between K blocks. Each output's
 * sum is one FMA chain over its K lanes, so the blocking does not change its bits. (A 4 x 2 block
 * issued 6 loads per 8 FMAs; this one 7 per 12.) */
T2 INLINE void micro_third(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t n0, int64_t j0, int64_t nr,
                           int64_t k0, int64_t k1, float *acc, int first, int last, const int MR) {
  const float *a = (const float *)g->a + m0 * g->lda;
  const int64_t lda = g->lda;
  __m256 c[FP4_CPU_MR][3];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < 3; j++)
      c[i][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + (i * FP4_CPU_NR + j0 + j) * FP4_CPU_ACC);
  const float *b0 = panel + j0 * lda, *b1 = b0 + lda, *b2 = b1 + lda;
  for (int64_t k = k0; k < k1; k += 8) {
    const __m256 x0 = _mm256_loadu_ps(b0 + k), x1 = _mm256_loadu_ps(b1 + k), x2 = _mm256_loadu_ps(b2 + k);
    for (int i = 0; i < MR; i++) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + k);
      c[i][0] = _mm256_fmadd_ps(av, x0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(av, x1, c[i][1]);
      c[i][2] = _mm256_fmadd_ps(av, x2, c[i][2]);
    }
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < 3; j++) {
      if (!last) _mm256_storeu_ps(acc + (i * FP4_CPU_NR + j0 + j) * FP4_CPU_ACC, c[i][j]);
      else if (j0 + j < nr) fp4_cpu_store(g, m0 + i, n0 + j0 + j, hsum8(c[i][j]));
    }
}

_Static_assert(FP4_CPU_NR % 3 == 0, "the AVX2 micro-kernel covers the panel three weight rows at a time");

T2 static void micro_f32(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                         int64_t k0, int64_t k1, float *acc, int first, int last) {
  for (int64_t j0 = 0; j0 < FP4_CPU_NR; j0 += 3) {
    switch (mr) {
    case 1: micro_third(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 1); break;
    case 2: micro_third(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 2); break;
    case 3: micro_third(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 3); break;
    default: micro_third(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 4); break;
    }
  }
}

/* ---- quantization ---------------------------------------------------------------------------------- */

T2 INLINE __m256 load8(const fp4_matrix *x, const void *row, int64_t k) {
  switch (x->dtype) {
  case FP4_DTYPE_BF16:
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k))), 16));
  case FP4_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
  default: return _mm256_loadu_ps((const float *)row + k);
  }
}

T2 INLINE __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* max |x| ignoring NaN lanes (the reference's fmaxf does). */
T2 INLINE __m256 absmax_acc(__m256 m, __m256 v) {
  return _mm256_max_ps(m, _mm256_and_ps(abs8(v), _mm256_cmp_ps(v, v, _CMP_ORD_Q)));
}

/* E2M1 codes of 8 floats (codec.h's decision table), as 32-bit lanes. */
T2 INLINE __m256i encode8(__m256 y) {
  __m256 a = abs8(y);
  __m256i c = _mm256_setzero_si256();
#define FP4_STEP(t, op) c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), op)))
  FP4_STEP(0.25f, _CMP_GT_OQ);
  FP4_STEP(0.75f, _CMP_GE_OQ);
  FP4_STEP(1.25f, _CMP_GT_OQ);
  FP4_STEP(1.75f, _CMP_GE_OQ);
  FP4_STEP(2.5f, _CMP_GT_OQ);
  FP4_STEP(3.5f, _CMP_GE_OQ);
  FP4_STEP(5.0f, _CMP_GT_OQ);
#undef FP4_STEP
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_UNORD_Q));
  __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(y), 31), 3);
  c = _mm256_or_si256(c, _mm256_andnot_si256(nan, sign));
  return _mm256_blendv_epi8(c, _mm256_set1_epi32(7), nan); /* NaN -> +6 */
}

T2 static void quantize_rows(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0, int64_t nrows) {
  const int bs = fp4_format_block_size(out->format);
  const fp4_nvfp4_recipe recipe = fp4_nvfp4_recipe_make(global_scale);
  for (int64_t r = r0; r < r0 + nrows; r++) {
    const void *row = fp4_cpu_dense_row(x, r);
    uint8_t *dst = (uint8_t *)out->data + r * (out->cols / 2);
    for (int64_t c = 0; c < out->cols / bs; c++) {
      __m256 v[4];
      __m256 m = _mm256_setzero_ps();
      for (int i = 0; i < bs / 8; i++) m = absmax_acc(m, v[i] = load8(x, row, c * bs + 8 * i));
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const __m256 vs = _mm256_set1_ps(fp4_cpu_block_scale(out, &recipe, r, c, _mm_cvtss_f32(h)));
      for (int i = 0; i < bs / 8; i++) {
        int32_t codes[8];
        _mm256_storeu_si256((__m256i *)codes, encode8(_mm256_mul_ps(v[i], vs)));
        for (int e = 0; e < 8; e += 2) dst[(c * bs + 8 * i + e) / 2] = (uint8_t)(codes[e] | (codes[e + 1] << 4));
      }
    }
  }
}

static const fp4_cpu_kernels avx2 = {
    .name = "avx2",
    .name_bf16 = "avx2",
    .order_f32 = FP4_CPU_ORDER_LUT128,
    .order_gemv_bf16 = FP4_CPU_ORDER_LUT128,
    .gemv_f32 = gemv_f32,
    .gemv_bf16 = NULL,
    .panel_f32 = panel_f32,
    .micro_f32 = micro_f32,
    .quantize_rows = quantize_rows,
};

const fp4_cpu_kernels *fp4_cpu_kernels_avx2(void) { return &avx2; }

#endif
