#include "core/error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

static fp4_status record(fp4_status status, const char *fmt, va_list ap) {
  /* Formatted aside first: an argument may be the message being replaced (a caller wrapping
   * fp4_last_error()), and formatting into it would read what it had just overwritten. */
  char msg[sizeof last_error];
  vsnprintf(msg, sizeof msg, fmt, ap);
  memcpy(last_error, msg, strlen(msg) + 1);
  fp4_log(FP4_LOG_DEBUG, "%s: %s", fp4_status_str(status), last_error);
  return status;
}

fp4_status fp4_fail(fp4_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(status, fmt, ap);
  va_end(ap);
  return status;
}

void fp4_clear_error(void) { last_error[0] = '\0'; }

fp4_status fp4_set_error(fp4_status status, const char *fmt, ...) {
  if (!fmt) {
    fp4_clear_error();
    return status;
  }
  va_list ap;
  va_start(ap, fmt);
  record(status, fmt, ap);
  va_end(ap);
  return status;
}

const char *fp4_last_error(void) { return last_error; }

const char *fp4_status_str(fp4_status status) {
  switch (status) {
  case FP4_OK: return "FP4_OK";
  case FP4_ERR_INVALID_ARGUMENT: return "FP4_ERR_INVALID_ARGUMENT";
  case FP4_ERR_UNSUPPORTED: return "FP4_ERR_UNSUPPORTED";
  case FP4_ERR_OUT_OF_MEMORY: return "FP4_ERR_OUT_OF_MEMORY";
  case FP4_ERR_CUDA: return "FP4_ERR_CUDA";
  case FP4_ERR_IO: return "FP4_ERR_IO";
  case FP4_ERR_FORMAT: return "FP4_ERR_FORMAT";
  case FP4_ERR_NOT_FOUND: return "FP4_ERR_NOT_FOUND";
  case FP4_ERR_INTERNAL: return "FP4_ERR_INTERNAL";
  }
  return "FP4_ERR_UNKNOWN_STATUS";
}

/* FP4KIT_LOG's level; an unknown value is said once on stderr (it was set to ask for messages) and
 * the default, silent, stays. */
static int log_level = -1;

static void read_log_level(void) {
  const char *env = getenv("FP4KIT_LOG");
  int level = 0;
  if (env && *env) {
    if (!strcmp(env, "error")) level = FP4_LOG_ERROR;
    else if (!strcmp(env, "warn")) level = FP4_LOG_WARN;
    else if (!strcmp(env, "info")) level = FP4_LOG_INFO;
    else if (!strcmp(env, "debug")) level = FP4_LOG_DEBUG;
    else
      fprintf(stderr, "fp4kit warn: FP4KIT_LOG='%s' is not a log level: use error, warn, info or debug; "
                      "logging stays off\n", env);
  }
  log_level = level;
}

static int log_threshold(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_log_level);
  return log_level;
}

void fp4_log(fp4_log_level level, const char *fmt, ...) {
  static const char *const names[] = {"", "error", "warn", "info", "debug"};
  if ((int)level > log_threshold()) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fp4kit %s: ", names[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void fp4_reason(char *reason, size_t reason_size, const char *fmt, ...) {
  if (!reason || reason_size == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, reason_size, fmt, ap);
  va_end(ap);
}

const char *fp4_version(void) { return FP4KIT_VERSION_STRING; }

size_t fp4_struct_size(const char *name) {
#define FP4_STRUCT(t) {#t, sizeof(t)}
  static const struct {
    const char *name;
    size_t size;
  } sizes[] = {FP4_STRUCT(fp4_qmatrix),         FP4_STRUCT(fp4_matrix),        FP4_STRUCT(fp4_run_info),
               FP4_STRUCT(fp4_options),         FP4_STRUCT(fp4_gemm_shape),    FP4_STRUCT(fp4_grouped_qmatrix),
               FP4_STRUCT(fp4_moe_experts),     FP4_STRUCT(fp4_moe_layer),     FP4_STRUCT(fp4_moe_routing),
               FP4_STRUCT(fp4_arch_info),
               FP4_STRUCT(fp4_capability),      FP4_STRUCT(fp4_backend_probe), FP4_STRUCT(fp4_device_probe),
               FP4_STRUCT(fp4_tune_key),        FP4_STRUCT(fp4_tune_result)};
#undef FP4_STRUCT
  for (size_t i = 0; name && i < sizeof sizes / sizeof *sizes; i++)
    if (!strcmp(sizes[i].name, name)) return sizes[i].size;
  return 0;
}
