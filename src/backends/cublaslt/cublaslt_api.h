/* cuBLASLt through dlopen (core/vendor_lib.h): the functions the cublaslt and cublas-dequant
 * backends call, resolved from libcublasLt.so.<major of the toolkit fp4kit was built with>. */
#ifndef FP4_BACKENDS_CUBLASLT_CUBLASLT_API_H
#define FP4_BACKENDS_CUBLASLT_CUBLASLT_API_H

#include <stddef.h>

#include "fp4kit.h"

#if FP4KIT_HAVE_CUDA
#include <cublasLt.h>

#include "core/vendor_lib.h"

#define FP4_CUBLASLT_FUNCTIONS(X)                                                                   \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusName)               \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)    \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                        \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

typedef struct fp4_cublaslt_api {
  FP4_CUBLASLT_FUNCTIONS(FP4_VENDOR_FIELD)
} fp4_cublaslt_api;
#endif

/* The file name fp4kit opens ("libcublasLt.so.13"); "" in a build without CUDA. */
const char *fp4_cublaslt_soname(void);
#if FP4KIT_HAVE_CUDA
/* The table, or NULL with the reason ("libcublasLt.so.13 not found (...)"). */
const fp4_cublaslt_api *fp4_cublaslt(char *reason, size_t reason_size);
#endif
/* cublasLtGetVersion() (130100 = 13.1.0), 0 when cuBLASLt cannot be loaded or without CUDA. */
int fp4_cublaslt_version(void);

#endif
