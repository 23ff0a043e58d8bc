/* The cuDNN table (cudnn_api.h). */
#include "backends/cudnn/cudnn_api.h"

#if FP4KIT_HAVE_CUDA && FP4KIT_HAVE_CUDNN
#define FP4_STR2(x) #x
#define FP4_STR(x) FP4_STR2(x)
#define SONAME "libcudnn.so." FP4_STR(CUDNN_MAJOR)

static const char *const symbols[] = {FP4_CUDNN_FUNCTIONS(FP4_VENDOR_NAME)};
static fp4_cudnn_api api;
_Static_assert(sizeof api == sizeof symbols / sizeof *symbols * sizeof(void *), "one pointer per symbol");
static fp4_vendor_lib lib = {SONAME, symbols, (int)(sizeof symbols / sizeof *symbols), &api};

const char *fp4_cudnn_soname(void) { return SONAME; }

const fp4_cudnn_api *fp4_cudnn(char *reason, size_t reason_size) {
  return fp4_vendor_lib_load(&lib, reason, reason_size) ? NULL : &api;
}

int fp4_cudnn_version(void) {
  const fp4_cudnn_api *dnn = fp4_cudnn(NULL, 0);
  return dnn ? (int)dnn->cudnnGetVersion() : 0;
}
#else
const char *fp4_cudnn_soname(void) { return ""; }
int fp4_cudnn_version(void) { return 0; }
#endif
