/*
 * AVX-512 kernels of the cpu backend (F, BW, VL, DQ; the bf16 streaming kernel also needs
 * AVX512_BF16). The panel path (larger M) is f32 for every input: with A converted exactly to f32,
 * two FMA ports outran vdpbf16ps in the micro-kernel on the machine measured (bench/results/cpu).
 * Compiled with per-function target attributes so the library still runs on any x86-64: the
 * dispatcher calls them only when the CPU reports the features.
 *
 * Decoding: 64 bytes of weights (128 elements) are seen as 32 16-bit words; vpermw with a 32-entry
 * table (the 16 E2M1 values twice, so bit 4 of the index does not matter) turns nibble j of every
 * word into bf16, giving four vectors where word w holds element 4w+j (A is packed in that order).
 * vdpbf16ps pairs words 2i and 2i+1, so f32 lane i only ever sums elements of one block (8i..8i+7):
 * the block scales are applied once per lane with an FMA on the f32 partial sums. The f32 kernels
 * use vpermps on zero-extended bytes (low nibble; high nibble after a shift) and the same trick.
 */
#include "backends/cpu/cpu_kernels.h"

#if FP4_CPU_X86
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "format/codec.h"
#include "format/format.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
/* Bytes ahead of the current weight chunk to prefetch in the streaming kernels (past the row end
 * it reaches into the next row, which is read next). */
#define FP4_CPU_PREFETCH 4096

/* bf16 bits of the 16 E2M1 values, twice (vpermw reads 5 index bits). */
static const uint16_t e2m1_bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};

/* Scale bytes of the blocks of one 128-element chunk: 8 NVFP4 blocks or 4 MXFP4 blocks, zero past
 * the last block. Every layout stores groups of 4 consecutive scale columns contiguously. */
INLINE uint64_t chunk_scale_bytes(const fp4_cpu_gemm *g, int64_t base, int64_t chunk) {
  const int nblk = g->mx ? 4 : 8;
  const int64_t c0 = chunk * nblk;
  uint32_t lo = 0, hi = 0;
  if (c0 + nblk <= g->c) {
    memcpy(&lo, g->bs + base + (c0 >> 2) * g->gstride, 4);
    if (nblk == 8) memcpy(&hi, g->bs + base + ((c0 >> 2) + 1) * g->gstride, 4);
    return (uint64_t)lo | ((uint64_t)hi << 32);
  }
  uint64_t v = 0;
  for (int i = 0; i < nblk && c0 + i < g->c; i++) {
    int64_t c = c0 + i;
    v |= (uint64_t)g->bs[base + (c >> 2) * g->gstride + (c & 3)] << (8 * i);
  }
  return v;
}

/* The 16 f32 lane scales of a chunk: lane i gets the scale of elements 8i..8i+7, i.e. NVFP4 block
 * i/2 or MXFP4 block i/4 of the chunk. Exact decoding without arithmetic on subnormals. */
T512 INLINE __m512 chunk_scales(const fp4_cpu_gemm *g, int64_t base, int64_t chunk) {
  __m128i x = _mm_cvtsi64_si128((long long)chunk_scale_bytes(g, base, chunk));
  x = _mm_unpacklo_epi8(x, x);
  if (g->mx) x = _mm_unpacklo_epi16(x, x);
  __m512i d = _mm512_cvtepu8_epi32(x);
  if (g->mx) {
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(d, 23));
    f = _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(d, _mm512_setzero_si512()),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000))); /* 2^-127 */
    return _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(d, _mm512_set1_epi32(0xFF)),
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
  }
  __m512i mag = _mm512_and_si512(d, _mm512_set1_epi32(0x7F));
  /* normal: exponent rebias 7 -> 127 on the shifted bits; subnormal (mag < 8): m * 2^-9 */
  __m512 f = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
  __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0.001953125f));
  f = _mm512_mask_mov_ps(f, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), sub);
  f = _mm512_or_ps(f, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(0x80)), 24)));
  return _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)),
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

/* 64 weight bytes of a chunk (zero past the end of the row). */
T512 INLINE __m512i chunk_weights(const uint8_t *w, int64_t chunk, int64_t row_bytes) {
  int64_t off = chunk * 64;
  if (off + 64 <= row_bytes) return _mm512_loadu_si512((const void *)(w + off));
  __mmask64 m = ((__mmask64)1 << (row_bytes - off)) - 1; /* row_bytes - off < 64 */
  return _mm512_maskz_loadu_epi8(m, w + off);
}

/* ---- streaming kernels (small M) ---------------------------------------------------------------- */

/* Lane scales of a full chunk from its scale bytes, cheaper than chunk_scales: E4M3 becomes fp16
 * exactly by moving the sign up one bit and shifting left by 7 (the value is then 2^-8 times the
 * E4M3 value, subnormals included; the caller folds 2^8 into the output scale) and vcvtph2ps widens
 * it; UE8M0 is the f32 exponent field. NaN codes are tracked separately (nan_track). */
T512 INLINE __m512 fast_scales(const uint8_t *p, int64_t gstride, const int MX, __m128i *nan_track) {
  if (MX) {
    uint32_t b;
    memcpy(&b, p, 4);
    __m128i x = _mm_cvtsi32_si128((int)b);
    *nan_track = _mm_max_epu8(*nan_track, x);
    x = _mm_unpacklo_epi8(x, x);
    x = _mm_unpacklo_epi16(x, x);
    __m512i d = _mm512_cvtepu8_epi32(x);
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(d, 23));
    return _mm512_mask_mov_ps(f, _mm512_cmpeq_epi32_mask(d, _mm512_setzero_si512()),
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000))); /* 2^-127 */
  }
  uint32_t lo, hi;
  memcpy(&lo, p, 4);
  memcpy(&hi, p + gstride, 4);
  __m128i x = _mm_insert_epi32(_mm_cvtsi32_si128((int)lo), (int)hi, 1);
  *nan_track = _mm_max_epu8(*nan_track, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
  __m256i w = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x, x));
  w = _mm256_slli_epi16(_mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x80))), 7);
  return _mm512_cvtph_ps(w);
}

/* 1 when a tracked scale byte was a NaN code (E4M3 0x7F/0xFF, UE8M0 0xFF). */
T512 INLINE int nan_seen(__m128i track, const int MX) {
  return _mm_movemask_epi8(_mm_cmpeq_epi8(track, _mm_set1_epi8(MX ? (char)0xFF : 0x7F))) != 0;
}

/* Lane scales of two consecutive full chunks (see fast_scales; NVFP4 values again times 2^-8).
 * Converting the 16 (NVFP4) or 8 (MXFP4) scale bytes of both chunks at once and spreading them
 * over the lanes with one vpermps per chunk costs about half the vector operations of two
 * fast_scales calls; NaN codes are tracked with scalar bit tricks (off the vector ports) in
 * *nan_bits (nonzero when one was seen). */
T512 INLINE void pair_scales(const uint8_t *p, int64_t gstride, const int MX, uint64_t *nan_bits, __m512 *s0,
                             __m512 *s1) {
  uint32_t l0, l1;
  memcpy(&l0, p, 4);
  memcpy(&l1, p + gstride, 4);
  if (MX) {
    const uint64_t q = (uint64_t)l0 | ((uint64_t)l1 << 32);
    /* a 0xFF byte: the byte of ~q is zero */
    const uint64_t inv = ~q;
    *nan_bits |= (inv - 0x0101010101010101ull) & q & 0x8080808080808080ull;
    __m256i d = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)q));
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(d, 23));
    f = _mm256_mask_mov_ps(f, _mm256_cmpeq_epi32_mask(d, _mm256_setzero_si256()),
                           _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000))); /* 2^-127 */
    const __m512 f8 = _mm512_castps256_ps512(f);
    /* chunk lane i takes block i/4 of the chunk: scales 0-3, then 4-7 */
    *s0 = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), f8);
    *s1 = _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4), f8);
    return;
  }
  uint32_t l2, l3;
  memcpy(&l2, p + 2 * gstride, 4);
  memcpy(&l3, p + 3 * gstride, 4);
  const uint64_t q0 = (uint64_t)l0 | ((uint64_t)l1 << 32), q1 = (uint64_t)l2 | ((uint64_t)l3 << 32);
  /* a byte with (b & 0x7F) == 0x7F becomes 0x80 after the add; no byte carries into the next */
  *nan_bits |= ((q0 & 0x7F7F7F7F7F7F7F7Full) + 0x0101010101010101ull) & 0x8080808080808080ull;
  *nan_bits |= ((q1 & 0x7F7F7F7F7F7F7F7Full) + 0x0101010101010101ull) & 0x8080808080808080ull;
  __m256i w = _mm256_cvtepu8_epi16(_mm_insert_epi64(_mm_cvtsi64_si128((long long)q0), (long long)q1, 1));
  w = _mm256_slli_epi16(_mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x80))), 7);
  const __m512 f16 = _mm512_cvtph_ps(w);
  /* chunk lane i takes block i/2 of the chunk: scales 0-7, then 8-15 */
  *s0 = _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), f16);
  *s1 = _mm512_permutexvar_ps(_mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), f16);
}

/* acc[i] += s * (dot products of one chunk's 128 weights with row i of A, per lane). */
T512BF INLINE void chunk_dot(__m512i x, __m512i lut, __m512 s, const uint16_t *a, int64_t lda, const int MR,
                             __m512 *acc) {
  __m512bh v0 = (__m512bh)_mm512_permutexvar_epi16(x, lut);
  __m512bh v1 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 4), lut);
  __m512bh v2 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 8), lut);
  __m512bh v3 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(x, 12), lut);
  for (int i = 0; i < MR; i++) {
    const uint16_t *ap = a + i * lda;
    __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), v0, (__m512bh)_mm512_loadu_si512((const void *)ap));
    p = _mm512_dpbf16_ps(p, v1, (__m512bh)_mm512_loadu_si512((const void *)(ap + 32)));
    p = _mm512_dpbf16_ps(p, v2, (__m512bh)_mm512_loadu_si512((const void *)(ap + 64)));
    p = _mm512_dpbf16_ps(p, v3, (__m512bh)_mm512_loadu_si512((const void *)(ap + 96)));
    acc[i] = _mm512_fmadd_ps(p, s, acc[i]);
  }
}

/* Full chunks [c0, c1) of one weight row into acc: pairs with one scale conversion for both
 * (pair_scales(), NaN codes into *nan_bits), then a single one (fast_scales(), into *nan_track).
 * pf: the bytes to prefetch along with them (c1 - c0 chunks' worth): FP4_CPU_PREFETCH bytes further
 * on in the row at M = 1, the weights read FP4_CPU_GEMV_PF_ITEMS items later in the blocked kernel
 * (gemv_bf16_t()). */
T512BF INLINE void row_chunks(const fp4_cpu_gemm *g, __m512i lut, const uint8_t *w, const uint8_t *sp,
                              const uint16_t *a, int64_t c0, int64_t c1, const uint8_t *pf, uint64_t *nan_bits,
                              __m128i *nan_track, const int MR, const int MX, __m512 *acc) {
  const int64_t gstep = MX ? g->gstride : 2 * g->gstride; /* scale bytes per chunk */
  int64_t ch = c0;
  pf -= 64 * c0;
  /* Two at a time: one scale conversion per pair, no per-chunk tail tests. */
  for (; ch + 2 <= c1; ch += 2) {
    /* Weights are read once: ask for them well ahead so several misses are in flight per core. */
    _mm_prefetch((const char *)(pf + ch * 64), _MM_HINT_T0);
    _mm_prefetch((const char *)(pf + ch * 64 + 64), _MM_HINT_T0);
    __m512 s0, s1;
    pair_scales(sp + ch * gstep, g->gstride, MX, nan_bits, &s0, &s1);
    chunk_dot(_mm512_loadu_si512((const void *)(w + ch * 64)), lut, s0, a + ch * 128, g->lda, MR, acc);
    chunk_dot(_mm512_loadu_si512((const void *)(w + ch * 64 + 64)), lut, s1, a + ch * 128 + 128, g->lda, MR, acc);
  }
  if (ch < c1) {
    const __m512 s = fast_scales(sp + ch * gstep, g->gstride, MX, nan_track);
    chunk_dot(_mm512_loadu_si512((const void *)(w + ch * 64)), lut, s, a + ch * 128, g->lda, MR, acc);
  }
}

/* The last, partial chunk of a row (K not a multiple of 128; its lanes past K zero, general scale
 * loads) into accumulators of its own, and the row's outputs. */
T512BF INLINE void row_finish(const fp4_cpu_gemm *g, __m512i lut, const uint8_t *w, int64_t base, const uint16_t *a,
                              int64_t m0, int64_t n, uint64_t nan_bits, __m128i nan_track, const int MR, const int MX,
                              const __m512 *acc) {
  const int64_t row_bytes = g->k / 2, nchunks = g->kp / 128, nfull = row_bytes / 64;
  const float fast_fix = MX ? 1.0f : 256.0f; /* fast_scales returns E4M3 values times 2^-8 */
  __m512 tail[FP4_CPU_GEMV_MAX_M];
  for (int i = 0; i < FP4_CPU_GEMV_MAX_M; i++) tail[i] = _mm512_setzero_ps();
  if (nfull < nchunks)
    chunk_dot(chunk_weights(w, nfull, row_bytes), lut, chunk_scales(g, base, nfull), a + nfull * 128, g->lda, MR, tail);
  const int has_nan = nan_bits != 0 || nan_seen(nan_track, MX);
  for (int i = 0; i < MR; i++) {
    float sum = _mm512_reduce_add_ps(acc[i]) * fast_fix + _mm512_reduce_add_ps(tail[i]);
    fp4_cpu_store(g, m0 + i, n, has_nan ? NAN : sum);
  }
}

/* Chunks per K block of the blocked streaming kernel (2 to 4 rows of A). */
#define GEMV_KCHUNKS 16
/* Bytes of A (its rows in bf16) up to which each weight row is streamed whole: A of that size
 * stays in the 48 KiB L1 of the Zen 5 measured, where walking K blocks ran 0.86-0.97x as fast
 * (M = 4 at K = 4096, M = 2 at K = 8192; bench/results/cpu/2026-12-04-avx512-m4-blocked). */
#define GEMV_WHOLE_A_BYTES 32768

/* MR and MX are compile-time constants in every instantiation, so the accumulators stay in
 * registers and the format branches disappear. One row of A (M = 1), or A up to
 * GEMV_WHOLE_A_BYTES, streams each weight row from start to end. Larger A does not stay in L1 and
 * each weight row read it again from L2: M = 4 ran 4096 x 14336 (112 KiB of A) at half the speed
 * of 28672 x 4096 (32 KiB). So, as in kernels_avx2.c, FP4_CPU_GEMV_ROWS weight rows are walked
 * together, GEMV_KCHUNKS chunks of each in turn (16 KiB of A at M = 4), their accumulators and NaN
 * tracks kept in memory between K blocks, and the weights prefetched in that reading order. Every
 * output still takes its chunks in order, in the same pairs, into the same accumulators: the bits
 * do not change (bench/results/cpu/2026-12-04-avx512-m4-blocked). */
T512BF INLINE void gemv_bf16_t(const fp4_cpu_gemm *g, int64_t m0, int64_t n0, int64_t n1, const int MR, const int MX) {
  const __m512i lut = _mm512_loadu_si512((const void *)e2m1_bf16);
  const int64_t row_bytes = g->k / 2, nfull = row_bytes / 64;
  const uint16_t *a = (const uint16_t *)g->a + m0 * g->lda;
  if (MR == 1 || MR * g->kp * 2 <= GEMV_WHOLE_A_BYTES) {
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t *w = g->b + n * row_bytes;
      const int64_t base = fp4_cpu_scale_base(g, n);
      __m128i nan_track = _mm_setzero_si128();
      uint64_t nan_bits = 0;
      __m512 acc[FP4_CPU_GEMV_MAX_M];
      for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
      row_chunks(g, lut, w, g->bs + base, a, 0, nfull, w + FP4_CPU_PREFETCH, &nan_bits, &nan_track, MR, MX, acc);
      row_finish(g, lut, w, base, a, m0, n, nan_bits, nan_track, MR, MX, acc);
    }
    return;
  }
  __m512 accs[FP4_CPU_GEMV_ROWS][FP4_CPU_GEMV_MAX_M];
  __m128i tracks[FP4_CPU_GEMV_ROWS];
  uint64_t bits[FP4_CPU_GEMV_ROWS];
  int64_t bases[FP4_CPU_GEMV_ROWS];
  fp4_cpu_gemv_cursor ahead = fp4_cpu_gemv_cursor_make(n0, n1);
  for (int i = 0; i < FP4_CPU_GEMV_PF_ITEMS; i++) fp4_cpu_gemv_cursor_next(&ahead, n1, nfull, GEMV_KCHUNKS);
  for (int64_t r0 = n0; r0 < n1; r0 += FP4_CPU_GEMV_ROWS) {
    const int64_t nr = n1 - r0 < FP4_CPU_GEMV_ROWS ? n1 - r0 : FP4_CPU_GEMV_ROWS;
    for (int64_t r = 0; r < nr; r++) {
      bases[r] = fp4_cpu_scale_base(g, r0 + r);
      tracks[r] = _mm_setzero_si128();
      bits[r] = 0;
      for (int i = 0; i < MR; i++) accs[r][i] = _mm512_setzero_ps();
    }
    const uint8_t *w0 = g->b + r0 * row_bytes;
    for (int64_t c0 = 0; c0 < nfull; c0 += GEMV_KCHUNKS) {
      const int64_t c1 = c0 + GEMV_KCHUNKS < nfull ? c0 + GEMV_KCHUNKS : nfull;
      for (int64_t r = 0; r < nr; r++) {
        const uint8_t *w = w0 + r * row_bytes;
        const uint8_t *pf = fp4_cpu_gemv_prefetch_next(&ahead, g->b, row_bytes, n1, nfull, GEMV_KCHUNKS, w, c0, c1);
        __m512 acc[FP4_CPU_GEMV_MAX_M];
        for (int i = 0; i < MR; i++) acc[i] = accs[r][i];
        row_chunks(g, lut, w, g->bs + bases[r], a, c0, c1, pf, &bits[r], &tracks[r], MR, MX, acc);
        for (int i = 0; i < MR; i++) accs[r][i] = acc[i];
      }
    }
    for (int64_t r = 0; r < nr; r++)
      row_finish(g, lut, w0 + r * row_bytes, bases[r], a, m0, r0 + r, bits[r], tracks[r], MR, MX, accs[r]);
  }
}

/* One function per number of rows: with all of them inlined into one, gcc reloaded the M = 1
 * loop's constants from memory in the loop, which then ran 0.92x as fast in cache
 * (bench/results/cpu/2026-12-04-avx512-m4-blocked). */
#define FP4_GEMV_BF16_ROWS(mr)                                                                                     \
  T512BF __attribute__((noinline)) static void gemv_bf16_##mr(const fp4_cpu_gemm *g, int64_t m0, int64_t n0,      \
                                                             int64_t n1) {                                      \
    if (g->mx) gemv_bf16_t(g, m0, n0, n1, mr, 1);                                                                 \
    else gemv_bf16_t(g, m0, n0, n1, mr, 0);                                                                       \
  }
FP4_GEMV_BF16_ROWS(1)
FP4_GEMV_BF16_ROWS(2)
FP4_GEMV_BF16_ROWS(3)
FP4_GEMV_BF16_ROWS(4)
#undef FP4_GEMV_BF16_ROWS

T512BF static void gemv_bf16(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1) {
  switch (mr) {
  case 1: gemv_bf16_1(g, m0, n0, n1); break;
  case 2: gemv_bf16_2(g, m0, n0, n1); break;
  case 3: gemv_bf16_3(g, m0, n0, n1); break;
  default: gemv_bf16_4(g, m0, n0, n1); break;
  }
}

/* Lane scales of sub-chunk q (32 elements): lanes 0-7 take S16 lane 4q, lanes 8-15 lane 4q+2
 * (NVFP4 blocks 2q and 2q+1; for MXFP4 both are block q). */
T512 INLINE __m512 sub_scales(__m512 s16, int q) {
  const __m512i idx = _mm512_set_epi32(4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 2,
                                       4 * q + 2, 4 * q, 4 * q, 4 * q, 4 * q, 4 * q, 4 * q, 4 * q, 4 * q);
  return _mm512_permutexvar_ps(idx, s16);
}

T512 INLINE void gemv_f32_t(const fp4_cpu_gemm *g, int64_t m0, int64_t n0, int64_t n1, const int MR) {
  const __m512 lut = _mm512_loadu_ps(fp4_cpu_e2m1_values);
  const int64_t row_bytes = g->k / 2, nchunks = g->kp / 128;
  const float *a = (const float *)g->a + m0 * g->lda;
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t *w = g->b + n * row_bytes;
    const int64_t base = fp4_cpu_scale_base(g, n);
    __m512 acc[FP4_CPU_GEMV_MAX_M];
    for (int i = 0; i < FP4_CPU_GEMV_MAX_M; i++) acc[i] = _mm512_setzero_ps();
    for (int64_t ch = 0; ch < nchunks; ch++) {
      _mm_prefetch((const char *)(w + ch * 64 + FP4_CPU_PREFETCH), _MM_HINT_T0);
      __m512i x = chunk_weights(w, ch, row_bytes);
      __m512 s16 = chunk_scales(g, base, ch);
      for (int q = 0; q < 4; q++) {
        __m512i idx = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x, 0)); /* replaced below */
        switch (q) { /* extract needs an immediate */
        case 1: idx = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x, 1)); break;
        case 2: idx = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x, 2)); break;
        case 3: idx = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(x, 3)); break;
        default: break;
        }
        __m512 lo = _mm512_permutexvar_ps(idx, lut);
        __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), lut);
        __m512 s = sub_scales(s16, q);
        for (int i = 0; i < MR; i++) {
          const float *ap = a + i * g->lda + ch * 128 + q * 32;
          __m512 p = _mm512_mul_ps(lo, _mm512_loadu_ps(ap));
          p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(ap + 16), p);
          acc[i] = _mm512_fmadd_ps(p, s, acc[i]);
        }
      }
    }
    for (int i = 0; i < MR; i++) fp4_cpu_store(g, m0 + i, n, _mm512_reduce_add_ps(acc[i]));
  }
}

T512 static void gemv_f32(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1) {
  switch (mr) {
  case 1: gemv_f32_t(g, m0, n0, n1, 1); break;
  case 2: gemv_f32_t(g, m0, n0, n1, 2); break;
  case 3: gemv_f32_t(g, m0, n0, n1, 3); break;
  default: gemv_f32_t(g, m0, n0, n1, 4); break;
  }
}

/* ---- panel path (larger M) ---------------------------------------------------------------------- */

/* Decodes a weight row with scales applied (exact: at most 6 significant bits), PAIR32 order. */
T512 INLINE void decode_row(const fp4_cpu_gemm *g, int64_t n, int64_t k0, int64_t k1, float *dst) {
  const __m512 lut = _mm512_loadu_ps(fp4_cpu_e2m1_values);
  const int64_t row_bytes = g->k / 2;
  const uint8_t *w = g->b + n * row_bytes;
  const int64_t base = fp4_cpu_scale_base(g, n);
  for (int64_t ch = k0 / 128; ch < k1 / 128; ch++) {
    __m512i x = chunk_weights(w, ch, row_bytes);
    __m512 s16 = chunk_scales(g, base, ch);
    __m128i parts[4] = {_mm512_extracti32x4_epi32(x, 0), _mm512_extracti32x4_epi32(x, 1),
                        _mm512_extracti32x4_epi32(x, 2), _mm512_extracti32x4_epi32(x, 3)};
    for (int q = 0; q < 4; q++) {
      __m512i idx = _mm512_cvtepu8_epi32(parts[q]);
      __m512 s = sub_scales(s16, q);
      int64_t off = ch * 128 + q * 32;
      _mm512_storeu_ps(dst + off, _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), s));
      _mm512_storeu_ps(dst + off + 16, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), lut), s));
    }
  }
}

T512 static void panel_f32(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel) {
  for (int64_t r = 0; r < FP4_CPU_NR; r++) {
    if (r < nr) decode_row(g, n0 + r, k0, k1, panel + r * g->lda);
    else memset(panel + r * g->lda + k0, 0, sizeof(float) * (size_t)(k1 - k0));
  }
}

/* MR x FP4_CPU_NR register block (at most 24 accumulators, MR A vectors and one B vector of the
 * 32 registers), A and B streamed along K; accumulators persist in acc between K blocks. */
T512 INLINE void micro_f32_t(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t n0, int64_t nr, int64_t k0,
                             int64_t k1, float *acc, int first, int last, const int MR) {
  const int64_t lda = g->lda;
  const float *a = (const float *)g->a + m0 * lda;
  __m512 c[FP4_CPU_MR][FP4_CPU_NR];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < FP4_CPU_NR; j++)
      c[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + (i * FP4_CPU_NR + j) * FP4_CPU_ACC);
  for (int64_t k = k0; k < k1; k += 16) {
    __m512 av[FP4_CPU_MR];
    for (int i = 0; i < MR; i++) av[i] = _mm512_loadu_ps(a + i * lda + k);
    for (int j = 0; j < FP4_CPU_NR; j++) {
      __m512 bv = _mm512_loadu_ps(panel + j * lda + k);
      for (int i = 0; i < MR; i++) c[i][j] = _mm512_fmadd_ps(av[i], bv, c[i][j]);
    }
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < FP4_CPU_NR; j++) {
      if (!last) _mm512_storeu_ps(acc + (i * FP4_CPU_NR + j) * FP4_CPU_ACC, c[i][j]);
      else if (j < nr) fp4_cpu_store(g, m0 + i, n0 + j, _mm512_reduce_add_ps(c[i][j]));
    }
}

#define FP4_MICRO_SWITCH(fn)                                                                                       \
  switch (mr) {                                                                                                    \
  case 1: fn(g, panel, m0, n0, nr, k0, k1, acc, first, last, 1); break;                                            \
  case 2: fn(g, panel, m0, n0, nr, k0, k1, acc, first, last, 2); break;                                            \
  case 3: fn(g, panel, m0, n0, nr, k0, k1, acc, first, last, 3); break;                                            \
  default: fn(g, panel, m0, n0, nr, k0, k1, acc, first, last, 4); break;                                           \
  }

T512 static void micro_f32(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                           int64_t k0, int64_t k1, float *acc, int first, int last) {
  FP4_MICRO_SWITCH(micro_f32_t)
}

/* ---- quantization --------------------------------------------------------------------------------- */

/* 16 elements of row r starting at column k, as exact f32. */
T512 INLINE __m512 load16(const fp4_matrix *x, const void *row, int64_t k) {
  (void)x;
  switch (x->dtype) {
  case FP4_DTYPE_BF16:
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k))), 16));
  case FP4_DTYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k)));
  default: return _mm512_loadu_ps((const float *)row + k);
  }
}

/* max |x| ignoring NaN, like fmaxf in the reference. */
T512 INLINE float absmax16(__m512 v) {
  __m512 a = _mm512_abs_ps(v);
  a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), a);
  return _mm512_reduce_max_ps(a);
}

/* E2M1 codes of 16 floats (codec.h's decision table) packed two per byte into 8 bytes. */
T512 INLINE void encode16(__m512 y, uint8_t *dst) {
  const __m512i one = _mm512_set1_epi32(1);
  __m512 a = _mm512_abs_ps(y);
  __m512i c = _mm512_setzero_si512();
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), c, one);
  c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.0f), _CMP_GT_OQ), c, one);
  __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
  __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(_mm512_castps_si512(y), 31), 3);
  c = _mm512_or_si512(c, _mm512_maskz_mov_epi32((__mmask16)~nan, sign));
  c = _mm512_mask_mov_epi32(c, nan, _mm512_set1_epi32(7)); /* NaN -> +6 */
  __m512i packed = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
  _mm_storel_epi64((__m128i *)dst, _mm512_cvtepi64_epi8(packed));
}

T512 static void quantize_rows(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0, int64_t nrows) {
  const int mx = out->format == FP4_FORMAT_MXFP4;
  const int bs = mx ? 32 : 16;
  const fp4_nvfp4_recipe recipe = fp4_nvfp4_recipe_make(global_scale);
  for (int64_t r = r0; r < r0 + nrows; r++) {
    const void *row = fp4_cpu_dense_row(x, r);
    uint8_t *dst = (uint8_t *)out->data + r * (out->cols / 2);
    for (int64_t c = 0; c < out->cols / bs; c++) {
      __m512 v0 = load16(x, row, c * bs), v1 = mx ? load16(x, row, c * bs + 16) : _mm512_setzero_ps();
      float vmax = mx ? fmaxf(absmax16(v0), absmax16(v1)) : absmax16(v0);
      const __m512 vs = _mm512_set1_ps(fp4_cpu_block_scale(out, &recipe, r, c, vmax));
      encode16(_mm512_mul_ps(v0, vs), dst + c * bs / 2);
      if (mx) encode16(_mm512_mul_ps(v1, vs), dst + c * bs / 2 + 8);
    }
  }
}

static const fp4_cpu_kernels avx512 = {
    .name = "avx512",
    .name_bf16 = "avx512_bf16",
    .order_f32 = FP4_CPU_ORDER_PAIR32,
    .order_gemv_bf16 = FP4_CPU_ORDER_NIB128,
    .gemv_f32 = gemv_f32,
    .gemv_bf16 = gemv_bf16,
    /* From 2^-100 up every product with an e2m1 value, and every nonzero sum of such products (a
     * multiple of 2^-109), is a normal float. */
    .gemv_bf16_min_exp = -100,
    .panel_f32 = panel_f32,
    .micro_f32 = micro_f32,
    .quantize_rows = quantize_rows,
};

/* Without AVX512_BF16 the bf16 entries stay NULL and bf16 inputs take the f32 kernels. */
static const fp4_cpu_kernels avx512_nobf16 = {
    .name = "avx512",
    .name_bf16 = "avx512",
    .order_f32 = FP4_CPU_ORDER_PAIR32,
    .order_gemv_bf16 = FP4_CPU_ORDER_PAIR32,
    .gemv_f32 = gemv_f32,
    .gemv_bf16 = NULL,
    .panel_f32 = panel_f32,
    .micro_f32 = micro_f32,
    .quantize_rows = quantize_rows,
};

const fp4_cpu_kernels *fp4_cpu_kernels_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") ? &avx512 : &avx512_nobf16;
}

#endif
