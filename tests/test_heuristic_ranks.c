/* Auto selection ranks backends exactly as before the backends carried their own properties: the
 * ranks derived from each backend's table (host/device, ranks per regime, verification-only ops)
 * equal the recorded answers of the previous heuristic for every backend, memory, compute
 * capability, op and M of tests/heuristic_recorded_ranks.h (but for the SM90 crossover moved since,
 * recorded_index_of); and the host flag marks exactly the backends that compute on the host. */
#include <stdio.h>

#include "dispatch/dispatch.h"
#include "fp4kit.h"
#include "heuristic_recorded_ranks.h"
#include "testing.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* The one deliberate change since the recording: on SM90 the dequantize crossover moved from M = 64
 * to M = 257 for weights of unknown size (the register-A tiles, src/dispatch/dispatch.c; the recorded
 * ranks knew no weight size and are compared with weights = 0), so there M = 64-256 on the device
 * ranks as the recorded M = 63 did. Index of the recorded column to compare against for (cc, M). */
static int recorded_index_of(int cc, int device, int64_t m, int index) {
  if (!device || cc != 90 || m < 64 || m > 256) return index;
  for (int i = 0; i < COUNT(recorded_ms); i++)
    if (recorded_ms[i] == 63) return i;
  return index;
}

static void ranks_equal_recorded(void) {
  long checked = 0, differ = 0;
  for (int b = 0; b < COUNT(recorded_backends); b++) {
    const fp4_backend *backend = fp4_registry_find(recorded_backends[b]);
    CHECK(backend != NULL, "%s is registered", recorded_backends[b]);
    if (!backend) continue;
    for (int mem = 0; mem < 2; mem++)
      for (int c = 0; c < COUNT(recorded_ccs); c++)
        for (int op = FP4_OP_QUANTIZE; op <= FP4_OP_MOE; op++)
          for (int m = 0; m < COUNT(recorded_ms); m++) {
            const fp4_memory memory = mem ? FP4_MEMORY_DEVICE : FP4_MEMORY_HOST;
            const int got = fp4_heuristic_rank(backend, recorded_ccs[c], memory, (fp4_op)op, recorded_ms[m], 0);
            const int want = recorded_ranks[b][mem][c][op][recorded_index_of(recorded_ccs[c], mem, recorded_ms[m], m)];
            checked++;
            if (got != want && differ++ < 20)
              CHECK(0, "%s, %s memory, cc %d, op %d, M %lld: rank %d, recorded %d", recorded_backends[b],
                    mem ? "device" : "host", recorded_ccs[c], op, (long long)recorded_ms[m], got, want);
          }
  }
  CHECK(differ == 0, "%ld of %ld ranks differ from the recorded ones", differ, checked);
  printf("  %ld ranks checked against the recorded heuristic\n", checked);
}

static void host_flag(void) {
  for (int i = 0; i < fp4_registry_count(); i++) {
    const fp4_backend *b = fp4_registry_get(i);
    /* The backends that ranked on host memory before are the ones that compute there. */
    const int ranked_on_host = fp4_heuristic_rank(b, 0, FP4_MEMORY_HOST, FP4_OP_MM, 1, 0) != FP4_RANK_UNKNOWN;
    CHECK(fp4_heuristic_host_backend(b) == ranked_on_host, "%s: host flag %d", b->name, fp4_heuristic_host_backend(b));
  }
  static const fp4_backend unranked = {.name = "someone-new"};
  CHECK(fp4_heuristic_rank(&unranked, 90, FP4_MEMORY_DEVICE, FP4_OP_MM, 1, 0) == FP4_RANK_UNKNOWN &&
            fp4_heuristic_rank(&unranked, 0, FP4_MEMORY_HOST, FP4_OP_MM, 1, 0) == FP4_RANK_UNKNOWN &&
            !fp4_heuristic_host_backend(&unranked) && fp4_heuristic_rank(NULL, 90, FP4_MEMORY_DEVICE, FP4_OP_MM, 1, 0) == FP4_RANK_UNKNOWN,
        "a backend without ranks is unknown everywhere and not a host backend");
}

int main(void) {
  ranks_equal_recorded();
  host_flag();
  return TEST_SUMMARY();
}
