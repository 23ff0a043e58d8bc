/* dlopen of the vendor libraries (vendor_lib.h): once per library and process, under one lock. */
#define _GNU_SOURCE
#include "core/vendor_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static void open_locked(fp4_vendor_lib *lib) {
  dlerror(); /* clear an older message */
  void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(lib->error, sizeof lib->error, "%s not found (%s)", lib->soname, e ? e : "dlopen failed");
    atomic_store_explicit(&lib->state, -1, memory_order_release);
    return;
  }
  for (int i = 0; i < lib->count; i++) {
    dlerror();
    void *fn = dlsym(h, lib->symbols[i]);
    if (!fn) {
      const char *e = dlerror();
      snprintf(lib->error, sizeof lib->error, "%s has no %s (%s): a version older than the one fp4kit was built with?",
               lib->soname, lib->symbols[i], e ? e : "dlsym failed");
      /* The handle stays open: closing vendor libraries is not safe in every version. */
      atomic_store_explicit(&lib->state, -1, memory_order_release);
      return;
    }
    /* Function pointers and object pointers have the same representation on every platform with
     * dlsym (POSIX requires it); the table is count such pointers in a row. */
    memcpy((char *)lib->table + (size_t)i * sizeof fn, &fn, sizeof fn);
  }
  lib->error[0] = '\0';
  atomic_store_explicit(&lib->state, 1, memory_order_release);
}

fp4_status fp4_vendor_lib_load(fp4_vendor_lib *lib, char *reason, size_t reason_size) {
  int state = atomic_load_explicit(&lib->state, memory_order_acquire);
  if (state == 0) {
    pthread_mutex_lock(&load_lock);
    if (atomic_load_explicit(&lib->state, memory_order_relaxed) == 0) open_locked(lib);
    pthread_mutex_unlock(&load_lock);
    state = atomic_load_explicit(&lib->state, memory_order_acquire);
  }
  if (state > 0) {
    if (reason && reason_size) reason[0] = '\0';
    return FP4_OK;
  }
  if (reason && reason_size) snprintf(reason, reason_size, "%s", lib->error);
  return FP4_ERR_UNSUPPORTED;
}
