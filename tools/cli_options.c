/* The parsers and report outputs every fp4kit command mode shares, bench --step included: that mode
 * lives in a library of its own (fp4kit_step), which this file is part of, so one rule serves all. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* A base-10 integer, the whole text: no sign other than a leading '-', no space, no octal or hex
 * (a leading 0 is a decimal digit), nothing past the end of long long. 0, or -1 when it is not. */
static int parse_decimal(const char *s, long long *out) {
  if (!(*s == '-' ? s[1] >= '0' && s[1] <= '9' : *s >= '0' && *s <= '9')) return -1;
  char *end = NULL;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (*end || errno == ERANGE) return -1;
  *out = v;
  return 0;
}

int fp4cli_env_device(const char *cmd, int *device) {
  const char *env = getenv("FP4KIT_DEVICE");
  if (!env || !*env) return FP4CLI_OK;
  long long v = 0;
  if (parse_decimal(env, &v) || v < -1 || v > FP4CLI_MAX_DEVICE) {
    fprintf(stderr,
            "fp4kit%s%s: FP4KIT_DEVICE='%s' is not a device: give a CUDA ordinal from 0 to %d, or -1 for the host "
            "only (or unset it)\n",
            cmd ? " " : "", cmd ? cmd : "", env, FP4CLI_MAX_DEVICE);
    return FP4CLI_USAGE;
  }
  *device = (int)v;
  return FP4CLI_OK;
}

int fp4cli_resolve_device(const char *cmd, int *device) {
  if (*device != FP4CLI_DEVICE_UNSET) return FP4CLI_OK;
  const int rc = fp4cli_env_device(cmd, device);
  if (!rc && *device == FP4CLI_DEVICE_UNSET) *device = fp4_probe_device_count() > 0 ? 0 : -1;
  return rc;
}

int fp4cli_parse_int(const char *cmd, const char *opt, const char *value, long long lo, long long hi, long long *out) {
  long long v = 0;
  if (parse_decimal(value, &v) || v < lo || v > hi) {
    fprintf(stderr, "fp4kit %s: %s needs an integer from %lld to %lld, not '%s'\n", cmd, opt, lo, hi, value);
    return FP4CLI_USAGE;
  }
  *out = v;
  return FP4CLI_OK;
}

int fp4cli_parse_int_list(const char *cmd, const char *opt, const char *list, long long lo, long long hi, int max,
                          long long *out) {
  int n = 0;
  for (const char *s = list;; n++) {
    const size_t len = strcspn(s, ",");
    char item[32];
    long long v = 0;
    if (n == max) {
      int items = n + 1;
      for (const char *p = s; *p; p++) items += *p == ',';
      fprintf(stderr, "fp4kit %s: %s takes at most %d values, not %d\n", cmd, opt, max, items);
      return -1;
    }
    snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), s);
    if (len >= sizeof item || parse_decimal(item, &v) || v < lo || v > hi) {
      fprintf(stderr, "fp4kit %s: %s '%s': '%.*s' is not an integer from %lld to %lld (give up to %d, separated by commas)\n",
              cmd, opt, list, (int)len, s, lo, hi, max);
      return -1;
    }
    out[n] = v;
    if (!s[len]) return n + 1;
    s += len + 1;
  }
}

const char *const fp4cli_report_options[3] = {"--json", "--csv", "--html"};

int fp4cli_stdout_report(const char *cmd, int n, const char *const options[], const char *const paths[]) {
  int count = 0;
  for (int i = 0; i < n; i++) count += paths[i] && !strcmp(paths[i], "-");
  if (count <= 1) return count;
  fprintf(stderr, "fp4kit %s: only one of", cmd);
  for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", i == 0 ? " " : i + 1 < n ? ", " : " and ", options[i]);
  fprintf(stderr, " can write to stdout ('-')\nRun 'fp4kit %s --help' for the options.\n", cmd);
  return -1;
}

int fp4cli_reports_writable(const char *cmd, int n, const char *const options[], const char *const paths[]) {
  for (int i = 0; i < n; i++) {
    if (!paths[i] || !strcmp(paths[i], "-")) continue;
    const int existed = access(paths[i], F_OK) == 0;
    FILE *f = fopen(paths[i], "a");
    if (!f) {
      fprintf(stderr, "fp4kit %s: cannot write the %s file '%s': %s; nothing was timed\n", cmd, options[i], paths[i],
              strerror(errno));
      return FP4CLI_ERROR;
    }
    fclose(f);
    /* What was created goes: through a dangling link that is the file it now leads to, and the
     * link, which the user made, stays. */
    char created[PATH_MAX];
    if (!existed) remove(realpath(paths[i], created) ? created : paths[i]);
  }
  return FP4CLI_OK;
}

FILE *fp4cli_report_open(const char *cmd, const char *option, const char *path) {
  if (!strcmp(path, "-")) return stdout;
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "fp4kit %s: cannot write the %s file '%s': %s\n", cmd, option, path, strerror(errno));
  return f;
}

int fp4cli_report_close(const char *cmd, const char *option, const char *path, FILE *f, int failed) {
  failed |= ferror(f) != 0;
  const int closed = (f == stdout ? fflush(f) : fclose(f)) == 0, err = errno; /* what the final write met */
  if (!failed && closed) return FP4CLI_OK;
  fprintf(stderr, "fp4kit %s: writing the %s output '%s' failed%s%s\n", cmd, option, path, closed ? "" : ": ",
          closed ? "" : strerror(err));
  return FP4CLI_ERROR;
}
