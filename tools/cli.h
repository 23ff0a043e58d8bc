/* The fp4kit command: one function per subcommand, registered in the table of fp4kit.c. The value
 * parsers (fp4cli_env_device, fp4cli_resolve_device, fp4cli_bad_option, fp4cli_parse_int,
 * fp4cli_parse_int_list) and the report outputs (fp4cli_stdout_report ... fp4cli_report_close) are in
 * cli_options.c, part of the fp4kit_step library, so that bench --step (bench_step.c) can share them;
 * the rest is in fp4kit.c. */
#ifndef FP4_TOOLS_CLI_H
#define FP4_TOOLS_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "fp4kit.h"

typedef struct fp4cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand name; returns the exit status */
} fp4cli_command;

/* Exit statuses: 0 success, 1 a check failed, 2 usage error, 3 runtime error. */
enum { FP4CLI_OK = 0, FP4CLI_FAILED = 1, FP4CLI_USAGE = 2, FP4CLI_ERROR = 3 };

int fp4cli_check(int argc, char **argv);
int fp4cli_bench(int argc, char **argv);
int fp4cli_inspect(int argc, char **argv);
int fp4cli_quantize(int argc, char **argv);
int fp4cli_probe(int argc, char **argv);
int fp4cli_tune(int argc, char **argv);

/* "fp4kit: <what>: <status> (<fp4_last_error()>)" on stderr; returns FP4CLI_ERROR. */
int fp4cli_report(const char *what, fp4_status st);

/* Devices: a CUDA ordinal from 0 to FP4CLI_MAX_DEVICE, or -1 for the host only; FP4CLI_DEVICE_UNSET
 * stands for "no --device given". */
enum { FP4CLI_MAX_DEVICE = 1024, FP4CLI_DEVICE_UNSET = -2 };

/* FP4KIT_DEVICE, the device of a command given no --device. Unset or empty: *device is left as it is.
 * A value other than -1 or an ordinal (decimal, whole text) is a usage error: prints "fp4kit CMD:
 * FP4KIT_DEVICE='...' is not a device: ..." with the accepted values (CMD NULL: "fp4kit: ...") and
 * returns FP4CLI_USAGE; else FP4CLI_OK with *device set. */
int fp4cli_env_device(const char *cmd, int *device);
/* The device of a command: *device as given unless it is FP4CLI_DEVICE_UNSET, then FP4KIT_DEVICE
 * (fp4cli_env_device), else 0 when a CUDA device is present, else -1. FP4CLI_OK or FP4CLI_USAGE. */
int fp4cli_resolve_device(const char *cmd, int *device);

/* Whether a CUDA ordinal can be used: a context on it allocates and frees device memory. When it
 * cannot (no driver, no GPU, no such ordinal, a build without CUDA), why receives the runtime's
 * message and the result is 0. */
int fp4cli_device_usable(int device, char *why, size_t size);

/* Option parsing (getopt_long, opterr = 0) shares its messages: the option getopt_long refused
 * (c is '?' for an unknown option, ':' for a missing value; optstrings start with ':'), and a value
 * that is not an integer in [lo, hi]. fp4cli_bad_option prints "fp4kit CMD: ..." and the hint to run
 * --help; both return FP4CLI_USAGE. Integers are decimal (a leading 0 is not octal, no hex), the whole
 * value, within long long; the message gives the range. */
int fp4cli_bad_option(const char *cmd, int c, char **argv);
int fp4cli_parse_int(const char *cmd, const char *opt, const char *value, long long lo, long long hi, long long *out);
/* A comma list of at most max integers in [lo, hi] (e.g. --m 1,2,4) into out: returns how many, or -1
 * after printing "fp4kit CMD: OPT ..." with the bad item and the limits (or the count over max). */
int fp4cli_parse_int_list(const char *cmd, const char *opt, const char *list, long long lo, long long hi, int max,
                          long long *out);
/* Whether a backend of that name is registered; when not, prints "fp4kit CMD: no backend named
 * 'NAME'; registered: ..." and returns 0. */
int fp4cli_backend_known(const char *cmd, const char *name);

/* Report files (--json FILE, --csv FILE, ...; "-" is stdout), n options with their paths (NULL: not
 * asked for). fp4cli_stdout_report: how many write to stdout, 0 or 1 (the human table then goes to
 * stderr); more than one is a usage error, said with the hint to run --help, and -1 is returned.
 * fp4cli_reports_writable: every file can be written, and its folder takes the temporary file, checked
 * before the run so a wrong path costs nothing (a file already there keeps its contents; one that was
 * not is removed again), else FP4CLI_ERROR after naming it. fp4cli_report_open: r->f is stdout for
 * "-", else a new temporary file beside the file the path names (a link is followed to the file it
 * leads to, which the report then replaces, the link staying; a path to something other than a
 * regular file, such as /dev/null, is written in place); FP4CLI_OK, or FP4CLI_ERROR after naming it.
 * fp4cli_report_close: flushes stdout, or closes the temporary file and renames it over that file,
 * which keeps its permissions (a new one gets 0666 less the umask); FP4CLI_OK when that and every
 * write went through (failed: the writer's own verdict), else FP4CLI_ERROR after saying which output
 * is incomplete, the temporary file removed and the file there before left as it was. */
typedef struct fp4cli_report_file {
  FILE *f;
  char *target, *tmp; /* the file replaced and the temporary one; NULL when written in place */
  int existed;
} fp4cli_report_file;
int fp4cli_stdout_report(const char *cmd, int n, const char *const options[], const char *const paths[]);
/* The report options of the benchmark modes, in the order their paths are passed above. */
extern const char *const fp4cli_report_options[3];
int fp4cli_reports_writable(const char *cmd, int n, const char *const options[], const char *const paths[]);
int fp4cli_report_open(const char *cmd, const char *option, const char *path, fp4cli_report_file *r);
int fp4cli_report_close(const char *cmd, const char *option, const char *path, fp4cli_report_file *r, int failed);

/* "bf16", "f16"/"fp16", "f32"/"fp32"; 0 on success, -1 for another name. */
int fp4cli_parse_dtype(const char *s, fp4_dtype *t);
/* Arguments left after the options: none is expected. Prints the first and returns FP4CLI_USAGE. */
int fp4cli_no_operands(const char *cmd, int argc, char **argv);

#endif
