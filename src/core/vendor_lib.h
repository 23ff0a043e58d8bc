/*
 * Vendor libraries (cuBLASLt, cuDNN) opened with dlopen at first use, not linked: libfp4kit loads,
 * and its host backends run, on a machine without them, and a backend whose library is missing
 * says which file was not found. Each library is a table of function pointers resolved once per
 * process (thread-safe); the table's types come from the vendor's own header, so every call is
 * checked by the compiler as if it were linked.
 */
#ifndef FP4_CORE_VENDOR_LIB_H
#define FP4_CORE_VENDOR_LIB_H

#include <stdatomic.h>
#include <stddef.h>

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_vendor_lib {
  const char *soname;          /* the file dlopen looks for: "libcudnn.so.9"                  */
  const char *const *symbols;  /* the functions to resolve, in the order of the table        */
  int count;
  void *table;                 /* count function pointers, written once the library is open */
  /* Filled by fp4_vendor_lib_load. */
  atomic_int state;            /* 0 not tried yet, 1 open, -1 failed (error says why)        */
  char error[256];
} fp4_vendor_lib;

/* Declares the fields of a table struct from an X-macro list of function names:
 * `struct { FP4_VENDOR_FIELDS(LIST) }` holds one pointer of each function's exact type. */
#define FP4_VENDOR_FIELD(fn) __typeof__(fn) *fn;
#define FP4_VENDOR_NAME(fn) #fn,

/* Opens lib and resolves its table the first time (later calls return the first answer): FP4_OK,
 * or FP4_ERR_UNSUPPORTED with reason "libcudnn.so.9 not found (<dlerror>)" or "libcudnn.so.9 has no
 * cudnnBackendExecute (<dlerror>)". Never closes the library. */
fp4_status fp4_vendor_lib_load(fp4_vendor_lib *lib, char *reason, size_t reason_size);

#ifdef __cplusplus
}
#endif

#endif
