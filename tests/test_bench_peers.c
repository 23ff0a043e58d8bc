/* Same-run peers and the machine description: argument checks, host peers measure something
 * plausible, device peers say why they cannot run without a device (and run when one is present). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "fp4kit_bench.h"

#include "testing.h"

/* The exchange's row moves on the device against the host, bit for bit: rows gathered from a strided
 * source, and per token the base plus k indexed rows added in f32 in order and rounded once; the
 * outputs start as NaN. width 4096 / ld 4104 moves 16-byte vectors, width 13 / ld 21 single
 * elements; one pass without a base. */
static uint64_t g_mix = 0x243F6A8885A308D3ull;
static uint16_t rnd_bf16(void) {
  g_mix = g_mix * 6364136223846793005ull + 1442695040888963407ull;
  return fp4_bf16_from_f32((float)((double)(g_mix >> 11) * (1.0 / 9007199254740992.0) * 8.0 - 4.0));
}

static void check_exchange_moves(fp4_context *ctx, int64_t width, int64_t ld, int with_base) {
  enum { SRC_ROWS = 40, N = 57, TOKENS = 9, K = 6 };
  const size_t src_b = (size_t)(SRC_ROWS * ld) * 2, dst_b = (size_t)(N * width) * 2, tok_b = (size_t)(TOKENS * width) * 2;
  uint16_t *src = malloc(src_b), *dst = malloc(dst_b), *base = malloc(tok_b), *out = malloc(tok_b);
  int32_t rows[N], index[TOKENS * K];
  for (size_t i = 0; i < src_b / 2; i++) src[i] = rnd_bf16();
  for (size_t i = 0; i < tok_b / 2; i++) base[i] = rnd_bf16();
  for (int i = 0; i < N; i++) rows[i] = (int32_t)((i * 7 + 3) % SRC_ROWS);
  for (int i = 0; i < TOKENS * K; i++) index[i] = (int32_t)((i * 11 + 5) % N);
  void *d_src = NULL, *d_dst = NULL, *d_base = NULL, *d_out = NULL, *d_rows = NULL, *d_index = NULL;
  fp4_status st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, src_b, &d_src);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, dst_b, &d_dst);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, tok_b, &d_base);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, tok_b, &d_out);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, sizeof rows, &d_rows);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, sizeof index, &d_index);
  memset(dst, 0xFF, dst_b); /* NaN */
  memset(out, 0xFF, tok_b);
  if (!st) st = fp4_copy(ctx, d_src, FP4_MEMORY_DEVICE, src, FP4_MEMORY_HOST, src_b);
  if (!st) st = fp4_copy(ctx, d_base, FP4_MEMORY_DEVICE, base, FP4_MEMORY_HOST, tok_b);
  if (!st) st = fp4_copy(ctx, d_dst, FP4_MEMORY_DEVICE, dst, FP4_MEMORY_HOST, dst_b);
  if (!st) st = fp4_copy(ctx, d_out, FP4_MEMORY_DEVICE, out, FP4_MEMORY_HOST, tok_b);
  if (!st) st = fp4_copy(ctx, d_rows, FP4_MEMORY_DEVICE, rows, FP4_MEMORY_HOST, sizeof rows);
  if (!st) st = fp4_copy(ctx, d_index, FP4_MEMORY_DEVICE, index, FP4_MEMORY_HOST, sizeof index);
  if (!st) st = fp4_exchange_gather_bf16_queue(d_dst, d_src, ld, d_rows, N, width, NULL);
  if (!st) st = fp4_exchange_sum_bf16_queue(d_out, with_base ? d_base : NULL, d_dst, d_index, TOKENS, K, width, NULL);
  if (!st) st = fp4_synchronize(ctx);
  if (!st) st = fp4_copy(ctx, dst, FP4_MEMORY_HOST, d_dst, FP4_MEMORY_DEVICE, dst_b);
  if (!st) st = fp4_copy(ctx, out, FP4_MEMORY_HOST, d_out, FP4_MEMORY_DEVICE, tok_b);
  CHECK(st == FP4_OK, "exchange moves, width %lld: %s", (long long)width, fp4_last_error());
  int64_t bad_gather = 0, bad_sum = 0;
  for (int i = 0; !st && i < N; i++)
    for (int64_t c = 0; c < width; c++) bad_gather += dst[i * width + c] != src[rows[i] * ld + c];
  for (int t = 0; !st && t < TOKENS; t++)
    for (int64_t c = 0; c < width; c++) {
      float acc = with_base ? fp4_bf16_to_f32(base[t * width + c]) : 0.0f;
      for (int j = 0; j < K; j++) acc += fp4_bf16_to_f32(dst[index[t * K + j] * width + c]);
      bad_sum += out[t * width + c] != fp4_bf16_from_f32(acc);
    }
  CHECK(!st && bad_gather == 0 && bad_sum == 0, "exchange moves, width %lld ld %lld%s: %lld gathered and %lld summed "
        "values differ from the host", (long long)width, (long long)ld, with_base ? "" : ", no base",
        (long long)bad_gather, (long long)bad_sum);
  void *dev[] = {d_src, d_dst, d_base, d_out, d_rows, d_index};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) fp4_free(ctx, FP4_MEMORY_DEVICE, dev[i]);
  free(src);
  free(dst);
  free(base);
  free(out);
}

static void check_timing(const char *what, fp4_status st, const fp4_timing *t, double rate, double min_rate) {
  CHECK(st == FP4_OK, "%s: status %s", what, fp4_status_str(st));
  if (st) return;
  CHECK(t->runs > 0 && t->min_us > 0 && t->min_us <= t->median_us && t->median_us <= t->max_us,
        "%s: timing min %g median %g max %g runs %d", what, t->min_us, t->median_us, t->max_us, t->runs);
  CHECK(rate >= min_rate, "%s: rate %g below %g", what, rate, min_rate);
  printf("%-14s median %10.2f us  rate %.4g /s\n", what, t->median_us, rate);
}

int main(void) {
  for (int p = FP4_PEER_COPY; p <= FP4_PEER_HOST_FMA; p++) CHECK(fp4_peer_name((fp4_peer)p) != NULL, "peer %d has no name", p);
  CHECK(fp4_peer_name((fp4_peer)99) == NULL, "unknown peer has a name");

  fp4_timing t;
  double rate = 0.0;
  CHECK(fp4_time_peer(NULL, FP4_PEER_HOST_READ, 1, 1024, 1024, 5, NULL, &rate) == FP4_ERR_INVALID_ARGUMENT, "NULL timing");
  CHECK(fp4_time_peer(NULL, FP4_PEER_HOST_READ, 1, 1024, 1024, 0, &t, &rate) == FP4_ERR_INVALID_ARGUMENT, "runs 0");
  CHECK(fp4_time_peer(NULL, FP4_PEER_HOST_READ, 1, 0, 1024, 5, &t, &rate) == FP4_ERR_INVALID_ARGUMENT, "n 0");
  CHECK(fp4_time_peer(NULL, FP4_PEER_HOST_FMA, 0, 16, 16, 5, &t, &rate) == FP4_ERR_INVALID_ARGUMENT, "m 0");
  CHECK(fp4_time_peer(NULL, (fp4_peer)42, 1, 16, 16, 5, &t, &rate) == FP4_ERR_INVALID_ARGUMENT, "unknown peer");
  CHECK(strstr(fp4_last_error(), "42") != NULL, "the message names the bad peer");

  /* Host peers: 64 MiB read; 2^28 FLOPs of FMAs. Any machine does more than 100 MB/s and 100 MFLOP/s. */
  rate = 0.0;
  fp4_status st = fp4_time_peer(NULL, FP4_PEER_HOST_READ, 1, 64 << 10, 1 << 10, 5, &t, &rate);
  check_timing("host-read", st, &t, rate, 1e8);
  rate = 0.0;
  st = fp4_time_peer(NULL, FP4_PEER_HOST_FMA, 1, 1 << 10, 1 << 17, 5, &t, &rate);
  check_timing("host-fma", st, &t, rate, 1e8);

  /* Device peers refuse a host context with a reason. */
  for (int p = FP4_PEER_COPY; p <= FP4_PEER_CUBLASLT_FP8; p++) {
    st = fp4_time_peer(NULL, (fp4_peer)p, 16, 256, 256, 3, &t, &rate);
    CHECK(st == FP4_ERR_UNSUPPORTED, "%s without a device: %s", fp4_peer_name((fp4_peer)p), fp4_status_str(st));
    CHECK(strstr(fp4_last_error(), "device") || strstr(fp4_last_error(), "CUDA"), "%s: reason says why",
          fp4_peer_name((fp4_peer)p));
  }

  /* The ranged read: a count out of range or a range not in whole 16-byte vectors is refused before
   * anything is queued, naming the range (a device, below, reads two valid ones). */
  static unsigned char host_bytes[64] __attribute__((aligned(16)));
  const void *srcs[2] = {host_bytes, host_bytes + 32};
  size_t lens[2] = {32, 16};
  CHECK(fp4_peer_read_ranges_queue(srcs, lens, 0, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT, "0 ranges");
  CHECK(fp4_peer_read_ranges_queue(srcs, lens, FP4_PEER_READ_MAX_RANGES + 1, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT,
        "too many ranges");
  CHECK(fp4_peer_read_ranges_queue(NULL, lens, 2, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT, "NULL ranges");
  lens[1] = 17;
  CHECK(fp4_peer_read_ranges_queue(srcs, lens, 2, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "range 1"),
        "a size of 17 bytes: %s", fp4_last_error());
  lens[1] = 16;
  srcs[1] = host_bytes + 8;
  CHECK(fp4_peer_read_ranges_queue(srcs, lens, 2, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "range 1"),
        "an address 8 bytes past alignment: %s", fp4_last_error());
  srcs[1] = host_bytes + 32;

  /* The exchange's row moves refuse what is not a move, naming the counts, before touching memory. */
  static int32_t idx[4];
  CHECK(fp4_exchange_gather_bf16_queue(host_bytes, host_bytes, 4, idx, 2, 8, NULL) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "width 8 from rows 4 apart"),
        "gather with ld < width: %s", fp4_last_error());
  CHECK(fp4_exchange_gather_bf16_queue(host_bytes, NULL, 8, idx, 2, 8, NULL) == FP4_ERR_INVALID_ARGUMENT, "gather from NULL");
  CHECK(fp4_exchange_gather_bf16_queue(NULL, NULL, 8, NULL, 0, 8, NULL) == FP4_OK, "gathering 0 rows does nothing");
  CHECK(fp4_exchange_sum_bf16_queue(host_bytes, NULL, host_bytes, idx, -1, 2, 8, NULL) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "-1 tokens"),
        "sum of -1 tokens: %s", fp4_last_error());
  CHECK(fp4_exchange_sum_bf16_queue(host_bytes, NULL, host_bytes, NULL, 2, 2, 8, NULL) == FP4_ERR_INVALID_ARGUMENT,
        "sum without an index");
  CHECK(fp4_exchange_sum_bf16_queue(NULL, NULL, NULL, NULL, 0, 2, 8, NULL) == FP4_OK, "summing 0 tokens does nothing");

  fp4_device_info info;
  CHECK(fp4_device_info_get(NULL, NULL) == FP4_ERR_INVALID_ARGUMENT, "NULL info");
  st = fp4_device_info_get(NULL, &info);
  CHECK(st == FP4_OK && info.device == -1 && info.name[0] && info.processors >= 1, "host info");
  printf("host: %s, %d threads, cache %lld bytes, memory %lld bytes\n", info.name, info.processors,
         (long long)info.cache_bytes, (long long)info.memory_bytes);

  /* With a CUDA device: every device peer runs on small sizes and reports a positive rate. */
  fp4_context *ctx = NULL;
  if (fp4_context_create(&ctx, 0) == FP4_OK && fp4_device_info_get(ctx, &info) == FP4_OK) {
    printf("device 0: %s (SM%d%d, %d SMs, L2 %lld bytes), driver %d, runtime %d\n", info.name, info.cc_major,
           info.cc_minor, info.processors, (long long)info.cache_bytes, info.driver_version, info.runtime_version);
    CHECK(info.cache_bytes > 0 && info.processors > 0, "device info");
    st = fp4_time_peer(ctx, FP4_PEER_COPY, 1, 256 << 10, 1 << 10, 10, &t, &rate);
    check_timing("copy", st, &t, rate, 1e9);
    st = fp4_time_peer(ctx, FP4_PEER_READ, 1, 256 << 10, 1 << 10, 10, &t, &rate);
    check_timing("read", st, &t, rate, 1e9);
    /* the ranged read over two device ranges, queued and finished without an error */
    void *dev = NULL, *sink = NULL;
    if (fp4_alloc(ctx, FP4_MEMORY_DEVICE, 1 << 20, &dev) == FP4_OK &&
        fp4_alloc(ctx, FP4_MEMORY_DEVICE, 4096 * 8, &sink) == FP4_OK) {
      const void *dsrcs[2] = {dev, (const unsigned char *)dev + (512 << 10)};
      size_t dlens[2] = {256 << 10, 512 << 10};
      st = fp4_peer_read_ranges_queue(dsrcs, dlens, 2, sink, NULL);
      CHECK(st == FP4_OK && fp4_synchronize(ctx) == FP4_OK, "ranged read on the device: %s", fp4_last_error());
    }
    fp4_free(ctx, FP4_MEMORY_DEVICE, sink);
    fp4_free(ctx, FP4_MEMORY_DEVICE, dev);
    check_exchange_moves(ctx, 4096, 4104, 1);
    check_exchange_moves(ctx, 13, 21, 1);
    check_exchange_moves(ctx, 4096, 4096, 0);
    st = fp4_time_peer(ctx, FP4_PEER_CUBLAS_BF16, 16, 4096, 4096, 10, &t, &rate);
    check_timing("cublas-bf16", st, &t, rate, 1e9);
    st = fp4_time_peer(ctx, FP4_PEER_CUBLASLT_FP8, 16, 4096, 4096, 10, &t, &rate);
    if (st == FP4_ERR_UNSUPPORTED) printf("cublaslt-fp8: unsupported here: %s\n", fp4_last_error());
    else check_timing("cublaslt-fp8", st, &t, rate, 1e9);
  } else {
    printf("device peers: no CUDA device here (%s); only their refusal was checked\n", fp4_last_error());
  }
  fp4_context_destroy(ctx);

  if (test_failed) fprintf(stderr, "%d check(s) failed\n", test_failed);
  return test_failed ? 1 : 0;
}
