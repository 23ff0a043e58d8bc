/* Minimal test helpers: CHECK counts and reports; main ends with TEST_SUMMARY() which prints
 * "N passed, N failed" and returns the exit status. */
#ifndef FP4_TESTS_TESTING_H
#define FP4_TESTS_TESTING_H

#include <stdio.h>
#include <string.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                                                   \
  do {                                                                                                     \
    if (cond) {                                                                                            \
      test_passed++;                                                                                       \
    } else {                                                                                               \
      test_failed++;                                                                                       \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fputc('\n', stderr);                                                                                 \
    }                                                                                                      \
  } while (0)

/* A failing call must return `status` and say `needle` in fp4_last_error(). */
#define CHECK_ERROR(call, status, needle)                                                                  \
  do {                                                                                                     \
    fp4_status st_ = (call);                                                                               \
    CHECK(st_ == (status) && strstr(fp4_last_error(), (needle)) != NULL,                                   \
          "%s returned %s with message '%s'; expected %s mentioning '%s'", #call, fp4_status_str(st_),      \
          fp4_last_error(), fp4_status_str(status), (needle));                                             \
  } while (0)

#define TEST_SUMMARY()                                                                                     \
  (printf("%d passed, %d failed\n", test_passed, test_failed), test_failed ? 1 : 0)

#endif
