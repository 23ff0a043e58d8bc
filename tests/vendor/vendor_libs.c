/*
 * Run by run.sh with the vendor libraries hidden (the dynamic loader told to skip its cache): this
 * program, linked to the shared libfp4kit, must start at all, the host backends must run a GEMM, and
 * the cuBLASLt and cuDNN backends must say which library file was not found.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "fp4kit.h"

static int failures;

#define CHECK(cond, ...)                                                                                              \
  do {                                                                                                                \
    if (!(cond)) {                                                                                                    \
      failures++;                                                                                                     \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                     \
      printf(__VA_ARGS__);                                                                                            \
      printf("\n");                                                                                                   \
    }                                                                                                                 \
  } while (0)

#if FP4KIT_HAVE_CUDA
/* The mapped file of a vendor library, when the loader found one anyway (a default system
 * directory cannot be hidden): "" otherwise. */
static void mapped(const char *prefix, char *path, size_t size) {
  path[0] = '\0';
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *p = strchr(line, '/');
    if (p && strstr(p, prefix)) {
      p[strcspn(p, "\n")] = '\0';
      snprintf(path, size, "%s", p);
      break;
    }
  }
  fclose(f);
}
#endif

/* A backend whose library is hidden: unavailable, and the reason names the file. */
static int check_vendor(const char *backend, const char *lib_prefix) {
  char reason[256];
  fp4_status st = fp4_backend_available(NULL, backend, reason, sizeof reason);
  printf("%-15s %s: %s\n", backend, st ? "unavailable" : "available", reason);
  CHECK(st == FP4_ERR_UNSUPPORTED, "%s is available with its library hidden", backend);
#if FP4KIT_HAVE_CUDA
  if (!strstr(reason, "not found")) {
    char path[512];
    mapped(lib_prefix, path, sizeof path);
    if (path[0]) {
      printf("SKIP: %s was loaded from %s, a directory the loader always searches\n", lib_prefix, path);
      return 77;
    }
  }
  CHECK(strncmp(reason, lib_prefix, strlen(lib_prefix)) == 0 && strstr(reason, ".so.") && strstr(reason, " not found ("),
        "%s: the reason does not name the missing %s*.so.N file: %s", backend, lib_prefix, reason);
#else
  (void)lib_prefix;
  CHECK(strstr(reason, "without CUDA") != NULL, "%s: %s", backend, reason);
#endif
  return 0;
}

int main(void) {
  int skip = 0;
  skip |= check_vendor("cublaslt", "libcublasLt");
  skip |= check_vendor("cublas-dequant", "libcublasLt");
  skip |= check_vendor("cudnn", "libcudnn");
  /* The host backends work: a 1x16x16 NVFP4 W4A16 GEMM on the cpu backend (all codes 1.0, scales 1.0). */
  uint8_t codes[16 * 8], scales[16];
  memset(codes, 0x22, sizeof codes);
  memset(scales, 0x38, sizeof scales); /* E4M3 1.0 */
  float a[16], out[16];
  for (int i = 0; i < 16; i++) a[i] = 1.0f, out[i] = -1.0f;
  fp4_qmatrix b = {codes, scales, 16, 16, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix am = {a, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, om = {out, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options o = {.backend = "cpu"};
  fp4_status st = fp4_mm_w4a16(NULL, &am, &b, 1.0f, &om, &o);
  CHECK(st == FP4_OK, "cpu fp4_mm_w4a16: %s %s", fp4_status_str(st), fp4_last_error());
  for (int i = 0; st == FP4_OK && i < 16; i++) CHECK(out[i] == 16.0f, "out[%d] = %g, want 16", i, (double)out[i]);
  printf("%d failures\n", failures);
  return failures ? 1 : skip ? 77 : 0;
}
