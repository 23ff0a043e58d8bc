/* The embedded `fp4kit check` cases pass on the reference backend, and a backend that cannot take the
 * operands is reported as a failure of the case, not as a pass; the comparison's overflow rule. */
#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

#include <math.h>

/* f16 outputs: inf where the reference sum sits at the overflow threshold is a summation-order
 * difference; inf where the reference is well inside the range, or of the other sign, is an error. */
static void test_overflow_rule(void) {
  const float ref[4] = {1.0f, 2.0f, 65519.0f, 3.0f};
  float got[4] = {1.0f, 2.0f, INFINITY, 3.0f};
  fp4h_result r = {.tolerance = 1e-3};
  fp4h_compare(got, ref, 4, FP4_DTYPE_F16, &r);
  CHECK(r.passed, "inf against a reference at the f16 overflow edge passes: %s", r.message);
  got[2] = -INFINITY;
  fp4h_compare(got, ref, 4, FP4_DTYPE_F16, &r);
  CHECK(!r.passed, "-inf against +65519 fails");
  got[2] = INFINITY;
  const float far[4] = {1.0f, 2.0f, 60000.0f, 3.0f};
  fp4h_compare(got, far, 4, FP4_DTYPE_F16, &r);
  CHECK(!r.passed, "inf against 60000 fails");
  const float over[4] = {1.0f, 2.0f, 70000.0f, 3.0f};
  got[2] = 65504.0f;
  fp4h_compare(got, over, 4, FP4_DTYPE_F16, &r);
  CHECK(!r.passed, "65504 against a reference sum of 70000 (well past the edge) fails");
  const float edge[4] = {1.0f, 2.0f, 65530.0f, 3.0f};
  fp4h_compare(got, edge, 4, FP4_DTYPE_F16, &r);
  CHECK(r.passed, "65504 against a reference sum of 65530 (inf in f16, at the edge) passes: %s", r.message);
}

int main(void) {
  test_overflow_rule();
  int n = 0;
  const fp4h_case *cases = fp4h_default_cases(&n);
  CHECK(n >= 10, "at least ten embedded cases (%d)", n);
  for (int i = 0; i < n; i++) {
    fp4h_result r;
    fp4h_run(NULL, "ref", FP4_MEMORY_HOST, &cases[i], 7 + (uint64_t)i, &r);
    CHECK(r.status == FP4_OK && r.passed, "%s: %s", cases[i].name, r.message);
  }
  fp4h_result r;
  fp4h_run(NULL, "ref", FP4_MEMORY_DEVICE, &cases[4], 1, &r);
  CHECK(r.status != FP4_OK && !r.passed, "device operands without a device are refused: %s", r.message);
  return TEST_SUMMARY();
}
