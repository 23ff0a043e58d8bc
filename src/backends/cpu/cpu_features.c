#define _POSIX_C_SOURCE 200809L
/* CPU feature detection, the kernel levels a config names, the thread count in force, and the
 * public level query. The level is the cpu backend's config (fp4_options.config: generic, avx2,
 * avx512, neon; default the highest this CPU and build support), never the environment;
 * FP4KIT_NUM_THREADS is read on every call, so a program (or a test) may change it between calls,
 * a bad value reported once per distinct value. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static fp4_cpu_level_id detected = FP4_CPU_LEVEL_GENERIC;

static void detect(void) {
#if FP4_CPU_X86 && defined(__GNUC__)
  __builtin_cpu_init();
  /* __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 register state. */
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && fp4_cpu_kernels_avx2())
    detected = FP4_CPU_LEVEL_AVX2;
  if (detected == FP4_CPU_LEVEL_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && fp4_cpu_kernels_avx512())
    detected = FP4_CPU_LEVEL_AVX512;
#elif defined(__aarch64__)
  if (fp4_cpu_kernels_neon()) detected = FP4_CPU_LEVEL_NEON;
#endif
}

fp4_cpu_level_id fp4_cpu_detected_level(void) {
  pthread_once(&detect_once, detect);
  return detected;
}

static const char *const level_names[FP4_CPU_LEVEL_COUNT] = {"generic", "avx2", "avx512", "neon"};

/* Levels form a chain per architecture: generic < avx2 < avx512 on x86, generic < neon on arm. */
static int level_usable(fp4_cpu_level_id want, fp4_cpu_level_id have) {
  if (want == FP4_CPU_LEVEL_GENERIC) return 1;
  if (want == FP4_CPU_LEVEL_NEON || have == FP4_CPU_LEVEL_NEON) return want == have;
  return want <= have;
}

static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_threads_env[32] = "";
static int last_threads = 0;

const char *fp4_cpu_level_name(fp4_cpu_level_id level) {
  return level >= 0 && level < FP4_CPU_LEVEL_COUNT ? level_names[level] : "?";
}

const fp4_cpu_kernels *fp4_cpu_level_kernels(fp4_cpu_level_id level) {
  switch (level) {
  case FP4_CPU_LEVEL_AVX512: return fp4_cpu_kernels_avx512();
  case FP4_CPU_LEVEL_AVX2: return fp4_cpu_kernels_avx2();
  case FP4_CPU_LEVEL_NEON: return fp4_cpu_kernels_neon();
  default: return fp4_cpu_kernels_generic();
  }
}

fp4_status fp4_cpu_config_level(const char *config, fp4_cpu_level_id *level, char *why, size_t why_size) {
  const fp4_cpu_level_id have = fp4_cpu_detected_level();
  *level = have;
  if (!config || !strcmp(config, "default")) return FP4_OK;
  for (int i = 0; i < FP4_CPU_LEVEL_COUNT; i++)
    if (!strcmp(config, level_names[i])) {
      if (!level_usable((fp4_cpu_level_id)i, have)) {
        fp4_reason(why, why_size, "the %s kernels need a CPU (and build) with %s; this one runs up to %s", config,
                   i == FP4_CPU_LEVEL_NEON ? "NEON (aarch64)" : i == FP4_CPU_LEVEL_AVX512 ? "AVX-512 F/BW/VL/DQ" : "AVX2 and FMA",
                   level_names[have]);
        return FP4_ERR_UNSUPPORTED;
      }
      *level = (fp4_cpu_level_id)i;
      return FP4_OK;
    }
  fp4_reason(why, why_size, "unknown config '%s' (the cpu backend's configs: default, generic, avx2, avx512, neon: "
             "the instruction-set level of its kernels)", config);
  return FP4_ERR_NOT_FOUND;
}

int fp4_cpu_level_configs(const char **names, int max) {
  const fp4_cpu_level_id have = fp4_cpu_detected_level();
  int n = 0;
  if (n < max) names[n++] = level_names[have]; /* the default first */
  for (int i = FP4_CPU_LEVEL_COUNT - 1; i >= 0 && n < max; i--)
    if (i != (int)have && level_usable((fp4_cpu_level_id)i, have)) names[n++] = level_names[i];
  return n;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

int fp4_cpu_current_threads(void) {
  const char *env = getenv("FP4KIT_NUM_THREADS");
  if (!env || !*env) return online_cpus();
  pthread_mutex_lock(&env_lock);
  if (last_threads == 0 || strncmp(env, last_threads_env, sizeof last_threads_env) != 0) {
    char *end = NULL;
    long n = strtol(env, &end, 10);
    if (!end || *end || n < 1 || n > 1024) {
      fp4_log(FP4_LOG_WARN, "cpu: FP4KIT_NUM_THREADS='%s' is not a number in [1, 1024]; using %d threads", env,
              online_cpus());
      n = online_cpus();
    }
    snprintf(last_threads_env, sizeof last_threads_env, "%s", env);
    last_threads = (int)n;
  }
  int n = last_threads;
  pthread_mutex_unlock(&env_lock);
  return n;
}

/* ---- public queries ---- */

static const char *const kernel_names[] = {"quantize", "gemv_f32", "gemv_bf16", "gemm_f32", "gemm_bf16"};

const char *fp4_cpu_kernel_name(int index) {
  return index >= 0 && index < (int)(sizeof kernel_names / sizeof *kernel_names) ? kernel_names[index] : NULL;
}

const char *fp4_cpu_level(const char *kernel) {
  if (!kernel) return NULL;
  const fp4_cpu_kernels *k = fp4_cpu_level_kernels(fp4_cpu_detected_level());
  if (!strcmp(kernel, "quantize") || !strcmp(kernel, "gemv_f32") || !strcmp(kernel, "gemm_f32")) return k->name;
  if (!strcmp(kernel, "gemv_bf16")) return k->gemv_bf16 ? k->name_bf16 : k->name;
  if (!strcmp(kernel, "gemm_bf16")) return k->name; /* the panel path is f32 (exact conversion) */
  return NULL;
}

int fp4_cpu_threads(void) { return fp4_cpu_current_threads(); }
