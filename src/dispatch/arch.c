/*
 * The one architecture table: what each GPU generation's tensor cores and launch machinery offer
 * (from NVIDIA's PTX ISA and tuning guides) and which nvcc target the fast kernels need. Every
 * capability answer starts here; the vendor libraries are then asked at run time for what only
 * they know.
 */
#include "dispatch/arch.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FP4KIT_CUDA_TARGETS
#define FP4KIT_CUDA_TARGETS ""
#endif

static const char no_fp4[] = "none: no FP4 tensor-core instruction (dequantize to BF16/FP16 instead)";
static const char sm100_fp4[] = "tcgen05.mma kind::mxf4nvf4.block_scale (TMEM)";
static const char sm120_fp4[] = "mma.sync kind::mxf4nvf4.block_scale.scale_vec::4X m16n8k64 (OMMA.SF)";

/* compiled is filled in on first use from the build targets. hardware_tested: GPUs the GPU test
 * suite has run on (bench/results/h200: an H200). */
static fp4_arch_info table[] = {
    {"sm_80", 80, "A100, A30", 0, no_fp4, "mma.sync m16n8k16", 0, 0, 163, "sm_80", 0, 0},
    {"sm_86", 86, "A10, A40, RTX 3090", 0, no_fp4, "mma.sync m16n8k16", 0, 0, 99, "sm_80", 0, 0},
    {"sm_89", 89, "L4, L40S, RTX 4090", 0, no_fp4, "mma.sync m16n8k16 (FP8 mma.sync too)", 0, 0, 99, "sm_89", 0, 0},
    {"sm_90", 90, "H100, H200, GH200", 0, no_fp4, "wgmma (needs sm_90a)", 1, 1, 227, "sm_90a", 0, 1},
    {"sm_100", 100, "B200, GB200", 1, sm100_fp4, "tcgen05.mma", 1, 1, 227, "sm_100a", 0, 0},
    {"sm_103", 103, "B300, GB300", 1, sm100_fp4, "tcgen05.mma", 1, 1, 227, "sm_103a", 0, 0},
    {"sm_120", 120, "RTX PRO 6000, RTX 5090", 1, sm120_fp4, "mma.sync m16n8k16", 1, 1, 99, "sm_120a", 0, 0},
    {"sm_121", 121, "DGX Spark (GB10)", 1, sm120_fp4, "mma.sync m16n8k16", 1, 1, 99, "sm_121a", 0, 0},
};
enum { ARCH_COUNT = (int)(sizeof table / sizeof *table) };

const char *fp4_build_cuda_targets(void) { return FP4KIT_CUDA_TARGETS; }

/* Walks the CMake architecture list ("80-real;90a-real;100a"): calls fn for every entry that puts
 * SASS in the binary (not "-virtual"), with its number and whether it is an "a"/"f" target. */
static int any_target(int (*fn)(int cc, char suffix, const void *arg), const void *arg) {
  const char *s = FP4KIT_CUDA_TARGETS;
  while (*s) {
    char item[32];
    size_t n = strcspn(s, ";,");
    if (n < sizeof item) {
      memcpy(item, s, n);
      item[n] = 0;
      char *end = NULL;
      long cc = strtol(item, &end, 10);
      char suffix = (end && (*end == 'a' || *end == 'f')) ? *end : 0;
      if (cc > 0 && !strstr(item, "-virtual") && fn((int)cc, suffix, arg)) return 1;
    }
    s += n;
    if (*s == ';' || *s == ',') s++;
  }
  return 0;
}

static int runs_on(int target, char suffix, const void *arg) {
  int cc = *(const int *)arg;
  if (suffix == 'a') return target == cc;                       /* arch-specific: exactly one CC */
  if (suffix == 'f') return target / 10 == cc / 10 && target <= cc; /* family: same major     */
  return target / 10 == cc / 10 && target <= cc;                /* plain SASS: same major, minor <= */
}

int fp4_arch_build_runs_on(int cc) { return any_target(runs_on, &cc); }

static int is_target(int target, char suffix, const void *arg) {
  char name[24];
  snprintf(name, sizeof name, "sm_%d%s", target, suffix == 'a' ? "a" : suffix == 'f' ? "f" : "");
  return !strcmp(name, (const char *)arg);
}

int fp4_arch_build_has_target(const char *target) { return target && any_target(is_target, target); }

static void fill_compiled(void) {
  for (int i = 0; i < ARCH_COUNT; i++) table[i].compiled = fp4_arch_build_has_target(table[i].build_target);
}

int fp4_arch_count(void) { return ARCH_COUNT; }

const fp4_arch_info *fp4_arch_get(int index) {
  if (index < 0 || index >= ARCH_COUNT) return NULL;
  /* Once per process: rows handed out are read by any thread, so no call may write them again
   * (rewriting the same values is still a data race on the readers). */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fill_compiled);
  return &table[index];
}

const fp4_arch_info *fp4_arch_for_cc(int cc) {
  for (int i = 0; i < ARCH_COUNT; i++)
    if (table[i].cc == cc) return fp4_arch_get(i);
  return NULL;
}

const fp4_arch_info *fp4_arch_find(const char *name) {
  if (!name) return NULL;
  const char *s = name;
  if (!strncmp(s, "sm_", 3) || !strncmp(s, "SM_", 3)) s += 3;
  else if (!strncmp(s, "sm", 2) || !strncmp(s, "SM", 2)) s += 2;
  else if (!strncmp(s, "compute_", 8)) s += 8;
  /* Digits only, and few: strtol would also take blanks and a sign, and a number past int that the
   * cast below wraps onto a real compute capability (2^32 + 90 -> 90). */
  if (!isdigit((unsigned char)*s) || strspn(s, "0123456789") > 4) return NULL;
  char *end = NULL;
  long major = strtol(s, &end, 10);
  if (end == s || major <= 0) return NULL;
  long cc = major;
  if (*end == '.') { /* "12.0" */
    if (!isdigit((unsigned char)end[1])) return NULL;
    char *end2 = NULL;
    long minor = strtol(end + 1, &end2, 10);
    if (end2 == end + 1 || minor < 0 || minor > 9) return NULL;
    cc = major * 10 + minor;
    end = end2;
  }
  if (*end == 'a' || *end == 'f') end++;
  if (*end) return NULL;
  return fp4_arch_for_cc((int)cc);
}
