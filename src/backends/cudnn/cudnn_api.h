/* cuDNN through dlopen (core/vendor_lib.h): the graph-API functions the cudnn backend calls,
 * resolved from libcudnn.so.<major of the cuDNN headers fp4kit was built with>. */
#ifndef FP4_BACKENDS_CUDNN_CUDNN_API_H
#define FP4_BACKENDS_CUDNN_CUDNN_API_H

#include <stddef.h>

#include "fp4kit.h"

#if FP4KIT_HAVE_CUDA && FP4KIT_HAVE_CUDNN
#include <cudnn_graph.h>

#include "core/vendor_lib.h"

#define FP4_CUDNN_FUNCTIONS(X)                                                                      \
  X(cudnnGetVersion) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) X(cudnnGetErrorString)        \
  X(cudnnGetLastErrorString) X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor)        \
  X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)

typedef struct fp4_cudnn_api {
  FP4_CUDNN_FUNCTIONS(FP4_VENDOR_FIELD)
} fp4_cudnn_api;

/* The table, or NULL with the reason ("libcudnn.so.9 not found (...)"). */
const fp4_cudnn_api *fp4_cudnn(char *reason, size_t reason_size);
#endif

/* The file name fp4kit opens ("libcudnn.so.9"); "" in a build without cuDNN headers. */
const char *fp4_cudnn_soname(void);
/* cudnnGetVersion() (91300 = 9.13.0), 0 when cuDNN cannot be loaded or was not built in. */
int fp4_cudnn_version(void);

#endif
