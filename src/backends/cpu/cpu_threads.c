/* A persistent pthread pool for the cpu backend: workers are created on first use (up to the largest
 * thread count asked for) and sleep on a condition variable between jobs, so a call pays a wake-up,
 * not a thread creation. One job runs at a time; concurrent callers queue on a mutex. Units are
 * handed out with an atomic counter; the caller works too (thread 0). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernels.h"
#include "core/error.h"

enum { POOL_MAX = 1024 };

typedef struct pool {
  pthread_mutex_t job_lock; /* serializes jobs                                  */
  pthread_mutex_t m;        /* guards everything below except the atomics       */
  pthread_cond_t start, done;
  int created;              /* workers alive (thread ids 1..created)            */
  uint64_t generation;      /* bumped per job                                   */
  int job_threads;          /* threads taking part in the current job           */
  int pending;              /* workers of the current job still running         */
  void (*fn)(void *, int64_t, int);
  void *arg;
  int64_t units;
  atomic_llong next;
  uint64_t born[POOL_MAX];  /* generation when each worker was created: it joins the next job */
} pool;

static pool the_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                        PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, NULL, 0, 0, {0}};

static void run_units(pool *p, void (*fn)(void *, int64_t, int), void *arg, int64_t units, int tid) {
  for (;;) {
    long long u = atomic_fetch_add(&p->next, 1);
    if (u >= units) break;
    fn(arg, (int64_t)u, tid);
  }
}

static void *worker(void *varg) {
  pool *p = &the_pool;
  int tid = (int)(intptr_t)varg;
  pthread_mutex_lock(&p->m);
  uint64_t seen = p->born[tid];
  for (;;) {
    while (p->generation == seen) pthread_cond_wait(&p->start, &p->m);
    seen = p->generation;
    if (tid >= p->job_threads) continue; /* not needed for this job */
    void (*fn)(void *, int64_t, int) = p->fn;
    void *arg = p->arg;
    int64_t units = p->units;
    pthread_mutex_unlock(&p->m);
    run_units(p, fn, arg, units, tid);
    pthread_mutex_lock(&p->m);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  return NULL;
}

/* A forked child has only the forking thread: forget the parent's workers (Python multiprocessing
 * forks processes that then call the library). */
static void reset_in_child(void) {
  pool *p = &the_pool;
  pthread_mutex_init(&p->job_lock, NULL);
  pthread_mutex_init(&p->m, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->done, NULL);
  p->created = 0;
  p->pending = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, reset_in_child); }

void fp4_cpu_parallel(int nthreads, int64_t units, void (*fn)(void *arg, int64_t unit, int thread), void *arg) {
  pool *p = &the_pool;
  if (nthreads > units) nthreads = (int)units;
  if (nthreads > POOL_MAX) nthreads = POOL_MAX;
  if (nthreads <= 1) {
    for (int64_t u = 0; u < units; u++) fn(arg, u, 0);
    return;
  }
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&p->job_lock);
  pthread_mutex_lock(&p->m);
  while (p->created < nthreads - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    p->born[p->created + 1] = p->generation;
    int rc = pthread_create(&t, &attr, worker, (void *)(intptr_t)(p->created + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      fp4_log(FP4_LOG_WARN, "cpu: could not start worker thread %d (error %d); running with %d threads",
              p->created + 1, rc, p->created + 1);
      break;
    }
    p->created++;
  }
  int workers = p->created < nthreads - 1 ? p->created : nthreads - 1;
  p->fn = fn;
  p->arg = arg;
  p->units = units;
  p->job_threads = workers + 1;
  p->pending = workers;
  atomic_store(&p->next, 0);
  p->generation++;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->m);

  run_units(p, fn, arg, units, 0);

  pthread_mutex_lock(&p->m);
  while (p->pending > 0) pthread_cond_wait(&p->done, &p->m);
  pthread_mutex_unlock(&p->m);
  pthread_mutex_unlock(&p->job_lock);
}
