#define _POSIX_C_SOURCE 200809L
/* CPU feature detection, the level and thread count in force, and the public level query. The
 * environment (FP4KIT_CPU_LEVEL, FP4KIT_NUM_THREADS) is read on every call, so a program (or a test)
 * may change it between calls; a bad value is reported once per distinct value. */
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
static char last_level_env[32] = "";
static fp4_cpu_level_id last_level = FP4_CPU_LEVEL_COUNT;
static char last_threads_env[32] = "";
static int last_threads = 0;

fp4_cpu_level_id fp4_cpu_current_level(void) {
  fp4_cpu_level_id have = fp4_cpu_detected_level();
  const char *env = getenv("FP4KIT_CPU_LEVEL");
  if (!env || !*env) return have;
  pthread_mutex_lock(&env_lock);
  if (last_level == FP4_CPU_LEVEL_COUNT || strncmp(env, last_level_env, sizeof last_level_env) != 0) {
    fp4_cpu_level_id want = FP4_CPU_LEVEL_COUNT;
    for (int i = 0; i < FP4_CPU_LEVEL_COUNT; i++)
      if (!strcmp(env, level_names[i])) want = (fp4_cpu_level_id)i;
    if (want == FP4_CPU_LEVEL_COUNT) {
      fp4_log(FP4_LOG_WARN, "cpu: FP4KIT_CPU_LEVEL='%s' is not generic, avx2, avx512 or neon; using %s", env,
              level_names[have]);
      want = have;
    } else if (!level_usable(want, have)) {
      fp4_log(FP4_LOG_WARN, "cpu: FP4KIT_CPU_LEVEL=%s refused: this CPU (or build) supports up to %s; using %s", env,
              level_names[have], level_names[have]);
      want = have;
    }
    snprintf(last_level_env, sizeof last_level_env, "%s", env);
    last_level = want;
  }
  fp4_cpu_level_id level = last_level;
  pthread_mutex_unlock(&env_lock);
  return level;
}

const fp4_cpu_kernels *fp4_cpu_current_kernels(void) {
  switch (fp4_cpu_current_level()) {
  case FP4_CPU_LEVEL_AVX512: return fp4_cpu_kernels_avx512();
  case FP4_CPU_LEVEL_AVX2: return fp4_cpu_kernels_avx2();
  case FP4_CPU_LEVEL_NEON: return fp4_cpu_kernels_neon();
  default: return fp4_cpu_kernels_generic();
  }
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
  const fp4_cpu_kernels *k = fp4_cpu_current_kernels();
  if (!strcmp(kernel, "quantize") || !strcmp(kernel, "gemv_f32") || !strcmp(kernel, "gemm_f32")) return k->name;
  if (!strcmp(kernel, "gemv_bf16")) return k->gemv_bf16 ? k->name_bf16 : k->name;
  if (!strcmp(kernel, "gemm_bf16")) return k->name; /* the panel path is f32 (exact conversion) */
  return NULL;
}

int fp4_cpu_threads(void) { return fp4_cpu_current_threads(); }
