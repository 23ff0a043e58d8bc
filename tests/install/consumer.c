#include <fp4kit.h>
#include <stdio.h>
#include <string.h>

/* Links the whole library: the registry names every backend, so a static link needs what the CUDA
 * backends' objects need (the CUDA and C++ runtimes) as well. */
int main(void) {
  if (strcmp(fp4_version(), FP4KIT_VERSION_STRING) != 0) return 1;
  char reason[256];
  const int n = fp4_backend_count();
  for (int i = 0; i < n; i++) {
    fp4_status st = fp4_backend_available(NULL, fp4_backend_name(i), reason, sizeof reason);
    printf("  %-15s %s%s%s\n", fp4_backend_name(i), st ? "unavailable" : "available", reason[0] ? ": " : "", reason);
  }
  printf("fp4kit %s: %d backends, e2m1(1.0) = 0x%x\n", fp4_version(), n, fp4_e2m1_encode(1.0f));
  return n >= 2 && fp4_e2m1_encode(1.0f) == 0x2 ? 0 : 1;
}
