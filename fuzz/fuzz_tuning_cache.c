/* libFuzzer target: any byte string handed to the tuning cache loader must give FP4_OK or an error
 * status, never a crash, a leak or undefined behaviour. What loads must save as text that loads
 * again to the same entries (no non-finite number, no entry lost), and every lookup of a loaded
 * key must answer with names that fit the entry's buffers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "tune/tuning.h"

/* The loader's cache is the host's (no context, no device): the device queries it links against are
 * never reached, and are answered here so the target needs neither the context nor the probe. */
int fp4_context_device(const fp4_context *ctx) {
  (void)ctx;
  return -1;
}
fp4_status fp4_probe_device(int device, fp4_device_probe *out) {
  (void)device;
  (void)out;
  return FP4_ERR_UNSUPPORTED;
}

static const fp4_tune_key probes[] = {
    {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 1, 4096, 4096},
    {FP4_TUNE_MM_W4A16, FP4_FORMAT_MXFP4, FP4_DTYPE_BF16, FP4_DTYPE_F32, 16, 256, 512},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fp4_tuning_cache *c = NULL, *d = NULL;
  if (fp4_tuning_cache_create(NULL, &c) != FP4_OK) abort();
  if (fp4_tuning_cache_parse(c, (const char *)data, size, "fuzz") != FP4_OK) {
    if (fp4_tuning_cache_count(c) != 0) abort(); /* a refused file leaves nothing behind */
    fp4_tuning_cache_destroy(c);
    return 0;
  }
  char backend[32], config[64];
  for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
    fp4_tuning_hit hit;
    fp4_status st = fp4_tuning_cache_find(c, &probes[i], &hit);
    if (st == FP4_OK && (!fp4_tuning_time_plausible(hit.median_us) || !hit.backend[0])) abort();
    if (fp4_tuning_cache_lookup(c, &probes[i], backend, sizeof backend, config, sizeof config) != st) abort();
  }
  char *text = fp4_tuning_cache_text(c);
  if (!text) abort();
  if (fp4_tuning_cache_create(NULL, &d) != FP4_OK) abort();
  if (fp4_tuning_cache_parse(d, text, strlen(text), "fuzz (saved)") != FP4_OK) abort();
  /* the same entries, none skipped (the detail says when some are) */
  if (fp4_tuning_cache_count(d) != fp4_tuning_cache_count(c) || fp4_last_error()[0]) abort();
  free(text);
  fp4_tuning_cache_destroy(d);
  fp4_tuning_cache_destroy(c);
  return 0;
}
