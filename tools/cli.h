/* The fp4kit command: one function per subcommand, registered in the table of fp4kit.c. */
#ifndef FP4_TOOLS_CLI_H
#define FP4_TOOLS_CLI_H

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

/* The device to use: the FP4KIT_DEVICE environment variable, else 0 when a CUDA device is
 * present, else -1 (host only). */
int fp4cli_default_device(void);

#endif
