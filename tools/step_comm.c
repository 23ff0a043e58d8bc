#define _GNU_SOURCE
/* The multi-GPU decode step's collectives: NCCL loaded at run time, and the ranks' agreement. */
#include "step_comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double step_comm_ring_bytes(double bytes, int n) { return n > 1 ? bytes * 2.0 * (double)(n - 1) / (double)n : 0.0; }

struct step_agree {
  int n, arrived;
  int64_t acc, result;
  pthread_mutex_t mu;
  pthread_barrier_t bar;
};

step_agree *step_agree_create(int n) {
  step_agree *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->n = n;
  pthread_mutex_init(&a->mu, NULL);
  pthread_barrier_init(&a->bar, NULL, (unsigned)n);
  return a;
}

void step_agree_destroy(step_agree *a) {
  if (!a) return;
  pthread_mutex_destroy(&a->mu);
  pthread_barrier_destroy(&a->bar);
  free(a);
}

int64_t step_agree_min(step_agree *a, int64_t value) {
  pthread_mutex_lock(&a->mu);
  a->acc = a->arrived == 0 || value < a->acc ? value : a->acc;
  if (++a->arrived == a->n) { /* the last to arrive publishes */
    a->result = a->acc;
    a->arrived = 0;
  }
  pthread_mutex_unlock(&a->mu);
  pthread_barrier_wait(&a->bar); /* published; the next round publishes only when this thread arrives */
  pthread_mutex_lock(&a->mu);
  const int64_t r = a->result;
  pthread_mutex_unlock(&a->mu);
  return r;
}

#if FP4KIT_HAVE_CUDA && FP4KIT_HAVE_NCCL_H
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

typedef struct nccl_api {
  void *lib;
  char why[256];
  ncclResult_t (*get_version)(int *);
  const char *(*error_string)(ncclResult_t);
  ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)(void);
  ncclResult_t (*group_end)(void);
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} nccl_api;

static nccl_api g_nccl;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names && !g_nccl.lib; i++) g_nccl.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!g_nccl.lib) {
    snprintf(g_nccl.why, sizeof g_nccl.why, "NCCL not found: %s", dlerror());
    return;
  }
  *(void **)&g_nccl.get_version = dlsym(g_nccl.lib, "ncclGetVersion");
  *(void **)&g_nccl.error_string = dlsym(g_nccl.lib, "ncclGetErrorString");
  *(void **)&g_nccl.comm_init_all = dlsym(g_nccl.lib, "ncclCommInitAll");
  *(void **)&g_nccl.comm_destroy = dlsym(g_nccl.lib, "ncclCommDestroy");
  *(void **)&g_nccl.all_reduce = dlsym(g_nccl.lib, "ncclAllReduce");
  *(void **)&g_nccl.group_start = dlsym(g_nccl.lib, "ncclGroupStart");
  *(void **)&g_nccl.group_end = dlsym(g_nccl.lib, "ncclGroupEnd");
  *(void **)&g_nccl.send = dlsym(g_nccl.lib, "ncclSend"); /* NCCL 2.7 and later */
  *(void **)&g_nccl.recv = dlsym(g_nccl.lib, "ncclRecv");
  if (!g_nccl.get_version || !g_nccl.error_string || !g_nccl.comm_init_all || !g_nccl.comm_destroy || !g_nccl.all_reduce ||
      !g_nccl.group_start || !g_nccl.group_end || !g_nccl.send || !g_nccl.recv) {
    snprintf(g_nccl.why, sizeof g_nccl.why, "the NCCL library found lacks an entry point this command uses (NCCL 2.7 "
             "or later has them all)");
    dlclose(g_nccl.lib);
    g_nccl.lib = NULL;
  }
}

static const nccl_api *api(void) {
  pthread_once(&g_once, load);
  return g_nccl.lib ? &g_nccl : NULL;
}

int step_comm_version(char *why, size_t why_size) {
  const nccl_api *n = api();
  int v = 0;
  if (!n) {
    snprintf(why, why_size, "%s", g_nccl.why);
    return 0;
  }
  if (n->get_version(&v) != ncclSuccess || v <= 0) {
    snprintf(why, why_size, "ncclGetVersion failed");
    return 0;
  }
  /* Codes since 2.9 are major * 10000 + minor * 100 + patch; before, major * 1000 + minor * 100 + patch. */
  return v >= 10000 ? v : (v / 1000) * 10000 + v % 1000;
}

struct step_comms {
  int n;
  ncclComm_t *comm;
  step_agree *agree;
};

fp4_status step_comms_create(int n, const int *devices, step_comms **out) {
  *out = NULL;
  const nccl_api *a = api();
  if (!a) return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s", g_nccl.why);
  step_comms *c = calloc(1, sizeof *c);
  if (!c || !(c->comm = calloc((size_t)n, sizeof *c->comm))) {
    free(c);
    return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for %d communicators", n);
  }
  c->n = n;
  if (!(c->agree = step_agree_create(n))) {
    free(c->comm);
    free(c);
    return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the ranks' agreement");
  }
  const ncclResult_t r = a->comm_init_all(c->comm, n, devices);
  if (r != ncclSuccess) {
    step_agree_destroy(c->agree);
    free(c->comm);
    free(c);
    return fp4_set_error(FP4_ERR_CUDA, "ncclCommInitAll over %d GPUs: %s", n, a->error_string(r));
  }
  *out = c;
  return FP4_OK;
}

void step_comms_destroy(step_comms *c) {
  if (!c) return;
  const nccl_api *a = api();
  for (int i = 0; a && i < c->n; i++)
    if (c->comm[i]) a->comm_destroy(c->comm[i]);
  step_agree_destroy(c->agree);
  free(c->comm);
  free(c);
}

fp4_status step_comm_allreduce_bf16(step_comms *c, int rank, void *buf, size_t elems, void *stream) {
  const nccl_api *a = api();
  const ncclResult_t r = a->all_reduce(buf, buf, elems, ncclBfloat16, ncclSum, c->comm[rank], (cudaStream_t)stream);
  return r == ncclSuccess ? FP4_OK
                          : fp4_set_error(FP4_ERR_CUDA, "ncclAllReduce (rank %d, %zu bf16): %s", rank, elems, a->error_string(r));
}

fp4_status step_comm_alltoallv_bf16(step_comms *c, int rank, const void *send, const int64_t *send_count, void *recv,
                                    const int64_t *recv_count, int64_t width, void *stream) {
  const nccl_api *a = api();
  const cudaStream_t s = (cudaStream_t)stream;
  const size_t row = (size_t)width * 2;
  size_t sent = 0, got = 0;
  ncclResult_t r = a->group_start();
  if (r != ncclSuccess) return fp4_set_error(FP4_ERR_CUDA, "ncclGroupStart (rank %d): %s", rank, a->error_string(r));
  for (int p = 0; p < c->n && r == ncclSuccess; p++) {
    if (send_count[p] > 0)
      r = a->send((const uint8_t *)send + sent * row, (size_t)send_count[p] * (size_t)width, ncclBfloat16, p, c->comm[rank], s);
    if (r == ncclSuccess && recv_count[p] > 0)
      r = a->recv((uint8_t *)recv + got * row, (size_t)recv_count[p] * (size_t)width, ncclBfloat16, p, c->comm[rank], s);
    sent += (size_t)(send_count[p] > 0 ? send_count[p] : 0);
    got += (size_t)(recv_count[p] > 0 ? recv_count[p] : 0);
  }
  const ncclResult_t end = a->group_end(); /* closes the group even after a failed call in it */
  if (r == ncclSuccess) r = end;
  return r == ncclSuccess ? FP4_OK
                          : fp4_set_error(FP4_ERR_CUDA, "the all-to-all of rank %d (%zu rows out, %zu in): %s", rank, sent,
                                          got, a->error_string(r));
}

int64_t step_comm_agree_min(step_comms *c, int64_t value) { return step_agree_min(c->agree, value); }

#else /* no CUDA or no nccl.h at configure time */

int step_comm_version(char *why, size_t why_size) {
#if FP4KIT_HAVE_CUDA
  snprintf(why, why_size, "this fp4kit was built without nccl.h (CMake found no NCCL beside the CUDA toolkit)");
#else
  snprintf(why, why_size, "this fp4kit was built without CUDA");
#endif
  return 0;
}

fp4_status step_comms_create(int n, const int *devices, step_comms **out) {
  (void)n;
  (void)devices;
  *out = NULL;
  char why[160];
  step_comm_version(why, sizeof why);
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "%s", why);
}

void step_comms_destroy(step_comms *c) { (void)c; }

fp4_status step_comm_allreduce_bf16(step_comms *c, int rank, void *buf, size_t elems, void *stream) {
  (void)c;
  (void)rank;
  (void)buf;
  (void)elems;
  (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "no NCCL in this build");
}

fp4_status step_comm_alltoallv_bf16(step_comms *c, int rank, const void *send, const int64_t *send_count, void *recv,
                                    const int64_t *recv_count, int64_t width, void *stream) {
  (void)c, (void)rank, (void)send, (void)send_count, (void)recv, (void)recv_count, (void)width, (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "no NCCL in this build");
}

int64_t step_comm_agree_min(step_comms *c, int64_t value) {
  (void)c;
  return value;
}

#endif
