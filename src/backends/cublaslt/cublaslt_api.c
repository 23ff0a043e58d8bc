/* The cuBLASLt table (cublaslt_api.h). */
#include "core/vendor_lib.h"
#include "backends/cublaslt/cublaslt_api.h"

#if FP4KIT_HAVE_CUDA
#define FP4_STR2(x) #x
#define FP4_STR(x) FP4_STR2(x)
#define SONAME "libcublasLt.so." FP4_STR(CUBLAS_VER_MAJOR)

static const char *const symbols[] = {FP4_CUBLASLT_FUNCTIONS(FP4_VENDOR_NAME)};
static fp4_cublaslt_api api;
_Static_assert(sizeof api == sizeof symbols / sizeof *symbols * sizeof(void *), "one pointer per symbol");
static fp4_vendor_lib lib = {SONAME, symbols, (int)(sizeof symbols / sizeof *symbols), &api};

const char *fp4_cublaslt_soname(void) { return SONAME; }

const fp4_cublaslt_api *fp4_cublaslt(char *reason, size_t reason_size) {
  return fp4_vendor_lib_load(&lib, reason, reason_size) ? NULL : &api;
}

int fp4_cublaslt_version(void) {
  const fp4_cublaslt_api *lt = fp4_cublaslt(NULL, 0);
  return lt ? (int)lt->cublasLtGetVersion() : 0;
}
#else
const char *fp4_cublaslt_soname(void) { return ""; }
int fp4_cublaslt_version(void) { return 0; }
#endif
