/* The parsers and report outputs every fp4kit command mode shares, bench --step included: that mode
 * lives in a library of its own (fp4kit_step), which this file is part of, so one rule serves all. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int fp4cli_bad_option(const char *cmd, int c, char **argv) {
  const char *arg = argv[optind - 1];
  if (c == ':') fprintf(stderr, "fp4kit %s: option '%s' needs a value\n", cmd, arg);
  else if (strncmp(arg, "--", 2)) fprintf(stderr, "fp4kit %s: unknown option '-%c'\n", cmd, optopt);
  else if (strchr(arg, '='))
    fprintf(stderr, "fp4kit %s: unknown option '%.*s', or it takes no value\n", cmd, (int)(strchr(arg, '=') - arg), arg);
  else fprintf(stderr, "fp4kit %s: unknown option '%s'\n", cmd, arg);
  fprintf(stderr, "Run 'fp4kit %s --help' for the options.\n", cmd);
  return FP4CLI_USAGE;
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

/* The file a report path names: the path, or the file its links lead to, followed even where the last
 * one leads nowhere yet (the report is then made there). Allocated; NULL with errno set. */
static char *link_target(const char *path) {
  char *p = strdup(path);
  for (int hops = 0; p && hops < 40; hops++) {
    struct stat sb;
    char to[PATH_MAX];
    if (lstat(p, &sb) != 0 || !S_ISLNK(sb.st_mode)) return p; /* a path that cannot be looked at fails when written */
    const ssize_t n = readlink(p, to, sizeof to - 1);
    if (n < 0) break;
    to[n] = '\0';
    const char *slash = strrchr(p, '/');
    const int dir_len = to[0] != '/' && slash ? (int)(slash - p) + 1 : 0; /* a relative link is read from its folder */
    const size_t size = (size_t)dir_len + (size_t)n + 1;
    char *next = malloc(size);
    if (next) snprintf(next, size, "%.*s%s", dir_len, p, to);
    free(p);
    p = next;
  }
  if (p) errno = ELOOP;
  free(p);
  return NULL;
}

/* The file of r->tmp, new and empty beside r->target: the permissions of the file it replaces, set
 * while it is empty so the report is never readable beyond what that file allowed, or a new file's
 * (0666 less the umask, as fopen gives). The descriptor, or -1 with errno set. */
static int create_temporary(fp4cli_report_file *r, const struct stat *old) {
  const size_t size = strlen(r->target) + 32;
  if (!(r->tmp = malloc(size))) return -1;
  int fd = -1;
  for (unsigned i = 0; fd < 0 && i < 100; i++) {
    snprintf(r->tmp, size, "%s.%ld-%u.tmp", r->target, (long)getpid(), i);
    fd = open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666); /* O_EXCL: never through a link */
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd >= 0 && old && fchmod(fd, old->st_mode & 07777) != 0) {
    const int err = errno;
    close(fd);
    unlink(r->tmp);
    errno = err;
    fd = -1;
  }
  return fd;
}

static void free_names(fp4cli_report_file *r) {
  free(r->target);
  free(r->tmp);
  r->target = r->tmp = NULL;
}

/* Starts a report (fp4cli_report_open): 0, or -1 with errno set and *beside set when what failed is
 * the temporary file. Something other than a regular file (a device, a pipe) holds nothing a failed
 * write could lose, and renaming a file over it would take its place, so it is written in place. */
static int start_report(const char *path, fp4cli_report_file *r, int *beside) {
  memset(r, 0, sizeof *r);
  *beside = 0;
  if (!strcmp(path, "-")) {
    r->f = stdout;
    return 0;
  }
  struct stat sb;
  r->existed = stat(path, &sb) == 0;
  if (r->existed && !S_ISREG(sb.st_mode)) return (r->f = fopen(path, "w")) ? 0 : -1;
  if (!(r->target = link_target(path))) return -1;
  const int fd = create_temporary(r, r->existed ? &sb : NULL);
  *beside = 1;
  if (fd >= 0 && (r->f = fdopen(fd, "w"))) return 0;
  const int err = errno;
  if (fd >= 0) {
    close(fd);
    unlink(r->tmp);
  }
  free_names(r);
  errno = err;
  return -1;
}

static void cannot_write(const char *cmd, const char *option, const char *path, int beside, int err,
                         const char *after) {
  fprintf(stderr, "fp4kit %s: cannot write the %s file '%s': %s%s%s\n", cmd, option, path,
          beside ? "no temporary file can be made beside it: " : "", strerror(err), after);
}

int fp4cli_reports_writable(const char *cmd, int n, const char *const options[], const char *const paths[]) {
  for (int i = 0; i < n; i++) {
    if (!paths[i] || !strcmp(paths[i], "-")) continue;
    const int existed = access(paths[i], F_OK) == 0;
    FILE *f = fopen(paths[i], "a");
    if (!f) {
      cannot_write(cmd, options[i], paths[i], 0, errno, "; nothing was timed");
      return FP4CLI_ERROR;
    }
    fclose(f);
    /* What was created goes: through a dangling link that is the file it now leads to, and the
     * link, which the user made, stays. */
    char created[PATH_MAX];
    if (!existed) remove(realpath(paths[i], created) ? created : paths[i]);
    /* The report is written beside the file and renamed over it: that folder must take a new file. */
    fp4cli_report_file r;
    int beside = 0;
    if (start_report(paths[i], &r, &beside)) {
      cannot_write(cmd, options[i], paths[i], beside, errno, "; nothing was timed");
      return FP4CLI_ERROR;
    }
    if (r.f != stdout) fclose(r.f);
    if (r.tmp) unlink(r.tmp);
    free_names(&r);
  }
  return FP4CLI_OK;
}

int fp4cli_report_open(const char *cmd, const char *option, const char *path, fp4cli_report_file *r) {
  int beside = 0;
  if (!start_report(path, r, &beside)) return FP4CLI_OK;
  cannot_write(cmd, option, path, beside, errno, beside && r->existed ? "; the file there is left as it was" : "");
  return FP4CLI_ERROR;
}

int fp4cli_report_close(const char *cmd, const char *option, const char *path, fp4cli_report_file *r, int failed) {
  failed |= ferror(r->f) != 0;
  int done = (r->f == stdout ? fflush(r->f) : fclose(r->f)) == 0, err = errno; /* what the final write met */
  if (!failed && done && r->tmp && rename(r->tmp, r->target) != 0) done = 0, err = errno;
  r->f = NULL;
  if (!failed && done) {
    free_names(r);
    return FP4CLI_OK;
  }
  if (r->tmp) unlink(r->tmp);
  fprintf(stderr, "fp4kit %s: writing the %s output '%s' failed%s%s%s\n", cmd, option, path, done ? "" : ": ",
          done ? "" : strerror(err),
          !r->tmp ? "" : r->existed ? "; the file there is left as it was" : "; no file was left there");
  free_names(r);
  return FP4CLI_ERROR;
}
