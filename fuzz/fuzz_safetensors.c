/* libFuzzer target: any byte string handed to the safetensors parser must give FP4_OK or an error
 * status, never a crash, a leak or an out-of-bounds read; accepted tensors must lie in the image. */
#include <stdint.h>
#include <stdlib.h>

#include "fp4kit_model.h"

/* The reader parses shards on the cpu backend's threads; this target links the reader without the
 * backend's kernels, and a memory image is one shard, parsed on the calling thread anyway. */
int fp4_cpu_current_threads(void);
int fp4_cpu_current_threads(void) { return 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fp4_safetensors *st = NULL;
  if (fp4_safetensors_open_memory(data, size, &st) != FP4_OK) return 0;
  for (int64_t i = 0; i < fp4_safetensors_count(st); i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    if (t->offset + t->bytes > size || t->offset < 8) abort();
    volatile uint8_t sink = 0;
    if (t->bytes) sink ^= ((const uint8_t *)t->data)[t->bytes - 1];
    (void)sink;
    if (fp4_safetensors_find(st, t->name) != t) abort();
  }
  fp4_qmatrix q;
  if (fp4_safetensors_count(st) > 0) {
    const char *name = fp4_safetensors_at(st, 0)->name;
    (void)fp4_safetensors_qmatrix(st, name, &q);
  }
  fp4_safetensors_close(st);
  return 0;
}
