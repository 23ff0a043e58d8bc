/*
 * `fp4kit probe --arch` (fp4_probe_backend_arch) for fp4kit's own GPU backends, against this build's
 * CUDA targets read independently here: for every architecture of the table, `cuda` runs where the
 * build holds code for it (SM80+), `cuda-sm120` on SM120/SM121 with code for exactly that target
 * (and, emulated, on SM90 with sm_90 code); every answer is yes or no (never unknown), from the
 * table, with a reason. Runs without a GPU: nothing executes.
 */
#include <stdlib.h>

#include "fp4kit.h"
#include "testing.h"

/* Does a target of fp4_build_cuda_targets() ("90a-real,120a-real") run natively on cc? An "a"
 * target only on its own cc; a plain or "f" target on its major version from its minor up. */
static int build_runs_on(int cc) {
  const char *s = fp4_build_cuda_targets();
  while (*s) {
    char *end = NULL;
    long t = strtol(s, &end, 10);
    if (end == s) break;
    const char suffix = *end;
    if (t > 0 && (suffix == 'a' ? t == cc : (t / 10 == cc / 10 && cc >= t))) return 1;
    s = end;
    while (*s && *s != ',' && *s != ';') s++;
    while (*s == ',' || *s == ';') s++;
  }
  return 0;
}

static void check_answer(const fp4_arch_info *arch, const char *backend, int want_available, const int want_caps[FP4_CAP_COUNT]) {
  fp4_backend_probe p;
  fp4_status st = fp4_probe_backend_arch(arch->name, backend, &p);
  CHECK(st == FP4_OK, "%s %s: %s %s", arch->name, backend, fp4_status_str(st), fp4_last_error());
  if (st) return;
  const fp4_support want = want_available ? FP4_SUPPORT_YES : FP4_SUPPORT_NO;
  CHECK(p.available == want, "%s %s: available %s, the build's targets (%s) say %s: %s", arch->name, backend,
        fp4_support_name(p.available), fp4_build_cuda_targets(), fp4_support_name(want), p.reason);
  CHECK(p.reason[0] != '\0', "%s %s: no reason given", arch->name, backend);
  for (int c = 0; c < FP4_CAP_COUNT; c++) {
    const fp4_capability *cap = &p.caps[c];
    const fp4_support wc = want_available && want_caps[c] ? FP4_SUPPORT_YES : FP4_SUPPORT_NO;
    CHECK(cap->support == wc, "%s %s %s: %s, expected %s: %s", arch->name, backend, fp4_cap_name((fp4_cap)c),
          fp4_support_name(cap->support), fp4_support_name(wc), cap->reason);
    CHECK(cap->evidence == FP4_EVIDENCE_TABLE, "%s %s %s: evidence %s, expected table", arch->name, backend,
          fp4_cap_name((fp4_cap)c), fp4_evidence_name(cap->evidence));
    CHECK(cap->reason[0] != '\0', "%s %s %s: no reason", arch->name, backend, fp4_cap_name((fp4_cap)c));
  }
  /* What ran and what was only compiled is said, not implied. */
  if (p.available == FP4_SUPPORT_YES)
    CHECK(strstr(p.reason, "executed") || strstr(p.reason, "tests ran") || strstr(p.reason, "compiled") ||
              strstr(p.reason, "emulated"),
          "%s %s: the reason does not say how the answer is known: %s", arch->name, backend, p.reason);
  printf("%-7s %-10s %-3s %s\n", arch->name, backend, fp4_support_name(p.available), p.reason);
}

int main(void) {
  printf("build targets: %s\n", fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "(none)");
  for (int i = 0; i < fp4_arch_count(); i++) {
    const fp4_arch_info *a = fp4_arch_get(i);
    const int code = build_runs_on(a->cc);
    /* cuda: every operation with mma.sync kernels on SM80+; PDL where the architecture has it. */
    const int cuda_caps[FP4_CAP_COUNT] = {1, 1, 1, 1, a->pdl};
    check_answer(a, "cuda", a->cc >= 80 && code, cuda_caps);
    /* cuda-sm120: W4A4 in both formats only. */
    const int sm120_caps[FP4_CAP_COUNT] = {1, 1, 0, 0, 1};
    check_answer(a, "cuda-sm120", (a->cc == 120 || a->cc == 121 || a->cc == 90) && code, sm120_caps);
  }
  return TEST_SUMMARY();
}
