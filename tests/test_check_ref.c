/* The embedded `fp4kit check` cases pass on the reference backend, and a backend that cannot take the
 * operands is reported as a failure of the case, not as a pass. */
#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

int main(void) {
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
