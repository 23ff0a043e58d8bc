/* Helpers shared by the model files (not public). */
#ifndef FP4_MODEL_INTERNAL_H
#define FP4_MODEL_INTERNAL_H

#include <stddef.h>
#include <sys/stat.h>

#include "fp4kit_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path read-only as a regular file without ever blocking in open (a FIFO would wait for a
 * writer): the descriptor, with *sb filled. -1 when it is not one: *kind then names what it is ("a
 * FIFO (named pipe)", "a directory", ...), else *kind is NULL and errno says why open failed. */
int fp4_model_open_regular(const char *path, struct stat *sb, const char **kind);
/* Whether the first n characters of s match the glob p: '*' any run of characters (dots included),
 * '?' one, [...] one of a set (ranges, '!' or '^' negation; an unclosed '[' is itself), anything else
 * itself (no escapes). Time linear in the lengths of p and s: patterns come from checkpoints. */
int fp4_model_glob(const char *p, const char *s, size_t n);
/* Reads a whole text file of at most max_bytes into a malloc'ed NUL-terminated buffer. */
fp4_status fp4_model_read_text(const char *path, size_t max_bytes, char **text, size_t *len);
/* Writes bytes to path atomically (temporary file in the same directory, fsync, rename). */
fp4_status fp4_model_write_file(const char *path, const void *data, size_t len);
/* Length of the longest valid UTF-8 prefix of text[0..len): len when all of it is valid, else the
 * offset of the first byte of the first invalid sequence. */
size_t fp4_model_utf8_span(const char *text, size_t len);
/* A malloc'ed copy of the NUL-terminated text with every byte that is not part of a valid UTF-8
 * sequence replaced by U+FFFD (NULL when out of memory). */
char *fp4_model_utf8_repair(const char *text);

/* JSON files beside a checkpoint (config.c). */
struct cJSON;
/* dir/file parsed; NULL with *status FP4_OK when absent; FP4_ERR_FORMAT when not UTF-8 or not a JSON
 * object. Errors name fn. */
struct cJSON *fp4_model_load_json(const char *dir, const char *file, const char *fn, fp4_status *status);
/* A field of the text model: nested text_config first (multimodal wrappers), then the root. */
const struct cJSON *fp4_model_config_item(const struct cJSON *config, const char *key);
/* An integer field: 0 when absent or not a number; FP4_ERR_FORMAT for a number that is not a whole
 * number in [0, INT_MAX] (1e999 reads as infinity). */
fp4_status fp4_model_config_int(const struct cJSON *config, const char *key, const char *fn, long *out);

/* An output directory written through a temporary sibling (out_dir.c). */
enum { FP4_OUT_PATH_MAX = 4096 }; /* Linux's PATH_MAX */
typedef struct fp4_out_dir {
  char out[FP4_OUT_PATH_MAX];    /* the output directory, absolute                     */
  char parent[FP4_OUT_PATH_MAX]; /* its parent                                         */
  char tmp[FP4_OUT_PATH_MAX];    /* the temporary directory written into; "" once gone */
  int exists;            /* the output existed (empty, or replaced under force)    */
} fp4_out_dir;
/* Checks out_dir (not the input in_real, not holding it, empty unless force), removes the temporaries
 * of earlier runs that were killed, and creates od->tmp. Errors name fn. */
fp4_status fp4_model_out_begin(const char *fn, const char *out_dir, const char *in_real, int force, fp4_out_dir *od);
/* Puts od->tmp in the output's place (the old output, if any, is removed afterwards). */
fp4_status fp4_model_out_commit(const char *fn, fp4_out_dir *od);
/* Removes od->tmp and what was written there. */
void fp4_model_out_abort(fp4_out_dir *od);

#ifdef __cplusplus
}
#endif

#endif
