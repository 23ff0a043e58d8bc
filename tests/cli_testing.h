/*
 * Shared by the tests that run the fp4kit command (FP4KIT_CLI): `dir` is the test's temporary
 * directory (the test fills it with mkdtemp); cli_run runs `ENV fp4kit ARGS` with stdout to DIR/NAME
 * and stderr to DIR/NAME.err and returns the exit status; cli_slurp reads DIR/NAME (NULL if absent);
 * cli_count counts occurrences of a needle (0 for a NULL text). A test calls cli_require() first.
 */
#ifndef FP4_TESTS_CLI_TESTING_H
#define FP4_TESTS_CLI_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#ifndef FP4KIT_CLI
#define FP4KIT_CLI "" /* the command is not built (FP4KIT_BUILD_TOOLS=OFF): cli_require() skips */
#endif

static char dir[64];

/* Exits 77 (a skipped ctest), saying why, when the command is not built. */
static inline void cli_require(void) {
  if (FP4KIT_CLI[0]) return;
  printf("skip: the fp4kit command is not built (FP4KIT_BUILD_TOOLS=OFF)\n");
  exit(77);
}

static int cli_run(const char *env, const char *args, const char *name) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "FP4KIT_NUM_THREADS=2 %s '%s' %s >'%s/%s' 2>'%s/%s.err'", env, FP4KIT_CLI, args, dir, name, dir,
           name);
  int s = system(cmd);
  return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

static char *cli_slurp(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (s) s[n] = '\0';
  fclose(f);
  return s;
}

static int cli_count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; s && (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

#endif
