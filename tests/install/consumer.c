#include <fp4kit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (strcmp(fp4_version(), FP4KIT_VERSION_STRING) != 0) return 1;
  printf("fp4kit %s: e2m1(1.0) = 0x%x\n", fp4_version(), fp4_e2m1_encode(1.0f));
  return fp4_e2m1_encode(1.0f) == 0x2 ? 0 : 1;
}
