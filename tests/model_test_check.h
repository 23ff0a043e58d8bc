/* CHECK(cond, fmt, ...) for the model tests: counts a failure and says where and why. */
#ifndef FP4_TESTS_MODEL_TEST_CHECK_H
#define FP4_TESTS_MODEL_TEST_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      failures++;                                                       \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, "\n");                                            \
    }                                                                   \
  } while (0)

#endif
