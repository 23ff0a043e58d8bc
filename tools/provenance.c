/* The provenance of benchmark records (provenance.h). */
#define _GNU_SOURCE /* popen, gmtime_r */
#include "provenance.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* The command as typed, each argument shell-quoted where it needs it (getopt_long reorders argv, so
 * this runs before any option parsing). */
static void command_as_typed(char *out, size_t size, int argc, char **argv) {
  size_t len = (size_t)snprintf(out, size, "fp4kit");
  for (int i = 0; i < argc && len < size; i++) {
    const char *a = argv[i];
    int plain = *a != '\0';
    for (const char *p = a; *p; p++)
      if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/=:+@%", *p)) plain = 0;
    if (plain) {
      len += (size_t)snprintf(out + len, size - len, " %s", a);
      continue;
    }
    len += (size_t)snprintf(out + len, size - len, " '");
    for (const char *p = a; *p && len + 5 < size; p++)
      len += (size_t)snprintf(out + len, size - len, *p == '\'' ? "'\\''" : "%c", *p);
    if (len < size) len += (size_t)snprintf(out + len, size - len, "'");
  }
}

/* The commit the records name (see the usage text). */
static void source_commit(char *out, size_t size) {
  const char *env = getenv("FP4KIT_COMMIT");
  snprintf(out, size, "%s", env && *env ? env : "unknown");
  if (env && *env) return;
  /* The directory of this file as the compiler was given it: the source tree of this build. */
  char dir[1024], quoted[2048], cmd[2200], line[128];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  size_t q = 0;
  for (const char *p = dir; *p && q + 5 < sizeof quoted; p++) q += (size_t)snprintf(quoted + q, sizeof quoted - q, *p == '\'' ? "'\\''" : "%c", *p);
  quoted[q] = '\0';
  snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --verify --quiet HEAD 2>/dev/null", quoted);
  FILE *g = popen(cmd, "r");
  if (!g) return;
  const int got = fgets(line, sizeof line, g) != NULL;
  const int st = pclose(g);
  line[strcspn(line, "\n")] = '\0';
  if (!got || st != 0 || strlen(line) != 40 || strspn(line, "0123456789abcdef") != 40) return;
  snprintf(cmd, sizeof cmd, "git -C '%s' diff --quiet HEAD -- >/dev/null 2>&1", quoted);
  const int diff = system(cmd);
  const int dirty = diff != -1 && WIFEXITED(diff) && WEXITSTATUS(diff) == 1;
  snprintf(out, size, "%s%s", line, dirty ? "-dirty" : "");
}

void bench_provenance(int argc, char **argv, bench_origin *o) {
  command_as_typed(o->command, sizeof o->command, argc, argv);
  source_commit(o->commit, sizeof o->commit);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(o->date, sizeof o->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

