/* Thread-local error detail and logging, shared by every part of the library. */
#ifndef FP4_CORE_ERROR_H
#define FP4_CORE_ERROR_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FP4_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define FP4_PRINTF_LIKE(f, a)
#endif

/* Records the detail message for fp4_last_error() and returns status, so callers can write
 * `return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_mm: a is NULL");`. */
fp4_status fp4_fail(fp4_status status, const char *fmt, ...) FP4_PRINTF_LIKE(2, 3);
/* Clears the detail message (called at the start of every public entry point). */
void fp4_clear_error(void);

/* Log levels: FP4KIT_LOG=error|warn|info|debug (default: silent). */
typedef enum fp4_log_level { FP4_LOG_ERROR = 1, FP4_LOG_WARN = 2, FP4_LOG_INFO = 3, FP4_LOG_DEBUG = 4 } fp4_log_level;
void fp4_log(fp4_log_level level, const char *fmt, ...) FP4_PRINTF_LIKE(2, 3);

/* snprintf into a reason buffer that may be NULL or zero-sized. */
void fp4_reason(char *reason, size_t reason_size, const char *fmt, ...) FP4_PRINTF_LIKE(3, 4);

#ifdef __cplusplus
}
#endif

#endif
