/*
 * The architecture table is read by any thread (fp4_arch_get, fp4_arch_for_cc, the probe): built
 * with ThreadSanitizer from src/dispatch/arch.c alone, threads asking for rows at once while others
 * read the rows they got must race on nothing. Its `compiled` column is filled from the build's
 * targets on first use, so the filling is what this exercises.
 */
#include <pthread.h>
#include <stdio.h>

#include "fp4kit.h"

enum { THREADS = 4, ROUNDS = 200 };

static void *reader(void *arg) {
  long sum = 0;
  for (int r = 0; r < ROUNDS; r++)
    for (int i = 0; i < fp4_arch_count(); i++) {
      const fp4_arch_info *a = fp4_arch_get(i);
      sum += a->compiled + a->cc;
      const fp4_arch_info *b = fp4_arch_for_cc(a->cc);
      sum += b ? b->compiled : 0;
    }
  *(long *)arg = sum;
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  long sums[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, reader, &sums[i])) {
      printf("SKIP: no threads\n");
      return 77;
    }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 1; i < THREADS; i++)
    if (sums[i] != sums[0]) {
      printf("FAIL: threads read different tables (%ld, %ld)\n", sums[0], sums[i]);
      return 1;
    }
  printf("arch table read by %d threads: no race reported\n", THREADS);
  return 0;
}
