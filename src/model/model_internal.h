/* Helpers shared by the model files (not public). */
#ifndef FP4_MODEL_INTERNAL_H
#define FP4_MODEL_INTERNAL_H

#include <stddef.h>

#include "fp4kit_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads a whole text file of at most max_bytes into a malloc'ed NUL-terminated buffer. */
fp4_status fp4_model_read_text(const char *path, size_t max_bytes, char **text, size_t *len);
/* Writes bytes to path atomically (temporary file in the same directory, fsync, rename). */
fp4_status fp4_model_write_file(const char *path, const void *data, size_t len);

#ifdef __cplusplus
}
#endif

#endif
