/* config.json and its kin: read as UTF-8 JSON, and integer fields range-checked before any cast. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/model_internal.h"

cJSON *fp4_model_load_json(const char *dir, const char *file, const char *fn, fp4_status *status) {
  char path[PATH_MAX], *text = NULL;
  size_t len = 0;
  *status = FP4_OK;
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) {
    *status = fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the path %s/%s is too long", fn, dir, file);
    return NULL;
  }
  fp4_status st = fp4_model_read_text(path, 64u << 20, &text, &len);
  if (st == FP4_ERR_NOT_FOUND) {
    fp4_clear_error();
    return NULL;
  }
  if (st) {
    *status = st;
    return NULL;
  }
  /* JSON is UTF-8; a string that is not would be echoed into invalid reports and configs. */
  const size_t valid = fp4_model_utf8_span(text, len);
  cJSON *j = valid == len ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  if (valid != len) *status = fp4_fail(FP4_ERR_FORMAT, "%s: %s is not valid UTF-8 (byte %zu)", fn, path, valid);
  else if (!cJSON_IsObject(j)) *status = fp4_fail(FP4_ERR_FORMAT, "%s: %s is not a JSON object", fn, path);
  if (*status) {
    cJSON_Delete(j);
    return NULL;
  }
  return j;
}

const cJSON *fp4_model_config_item(const cJSON *config, const char *key) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
  const cJSON *v = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, key) : NULL;
  return v ? v : cJSON_GetObjectItemCaseSensitive(config, key);
}

fp4_status fp4_model_config_int(const cJSON *config, const char *key, const char *fn, long *out) {
  const cJSON *v = fp4_model_config_item(config, key);
  *out = 0;
  if (!cJSON_IsNumber(v)) return FP4_OK;
  const double d = v->valuedouble;
  /* The range test comes first: casting 1e999 (infinity) or 1e300 to an integer is undefined. */
  if (!(d >= 0.0 && d <= (double)INT_MAX) || d != (double)(long)d)
    return fp4_fail(FP4_ERR_FORMAT, "%s: config.json's %s is %g, not a whole number in [0, %d]", fn, key, d, INT_MAX);
  *out = (long)d;
  return FP4_OK;
}
