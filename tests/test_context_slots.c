/* The context keeps what other parts of the library store per context through one generic hook: a
 * slot per owner, taken on first use, its state freed by the owner's release when the context is
 * destroyed (last taken first); the core knows nothing of backends, tuning or dispatch. */
#include <stdio.h>
#include <stdlib.h>

#include "core/context.h"
#include "dispatch/backend.h"
#include "fp4kit.h"
#include "testing.h"

static int released[4], order[4], nreleased;

static void release_a(void *s) { released[0] = *(int *)s, order[nreleased++] = 0, free(s); }
static void release_b(void *s) { released[1] = *(int *)s, order[nreleased++] = 1, free(s); }

int main(void) {
  static const char owner_a = 0, owner_b = 0, owner_c = 0;
  fp4_context *ctx = NULL;
  CHECK(fp4_context_create(&ctx, -1) == FP4_OK, "create");
  void **a = fp4_context_slot(ctx, &owner_a, release_a);
  void **b = fp4_context_slot(ctx, &owner_b, release_b);
  void **c = fp4_context_slot(ctx, &owner_c, release_a); /* never stores a state: nothing to free */
  CHECK(a && b && c && a != b && b != c && a != c, "one slot per owner");
  CHECK(*a == NULL && *b == NULL, "a slot starts empty");
  CHECK(fp4_context_slot(ctx, &owner_a, release_a) == a, "the same owner finds its slot again");
  CHECK(fp4_context_slot(NULL, &owner_a, release_a) == NULL && fp4_context_slot(ctx, NULL, release_a) == NULL,
        "no slot without a context or an owner");
  *a = malloc(sizeof(int));
  *b = malloc(sizeof(int));
  *(int *)*a = 11;
  *(int *)*b = 22;
  /* Backends reach their slot by name through the registry. */
  void **cpu = fp4_context_state(ctx, "cpu");
  CHECK(cpu && cpu != a && cpu != b && fp4_context_state(ctx, "cpu") == cpu, "a backend's slot");
  CHECK(fp4_context_state(ctx, "no-such-backend") == NULL, "no slot for an unknown backend");
  static char owners[FP4_CONTEXT_SLOTS];
  int taken = 0;
  for (int i = 0; i < FP4_CONTEXT_SLOTS; i++) taken += fp4_context_slot(ctx, &owners[i], NULL) != NULL;
  CHECK(taken == FP4_CONTEXT_SLOTS - 4, "the slots run out after %d owners (took %d more)", FP4_CONTEXT_SLOTS, taken);
  fp4_context_destroy(ctx);
  CHECK(nreleased == 2 && released[0] == 11 && released[1] == 22, "each stored state released once (%d)", nreleased);
  CHECK(order[0] == 1 && order[1] == 0, "released last taken first");
  return TEST_SUMMARY();
}
