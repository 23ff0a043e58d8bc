/* The report files of the benchmark modes (report_files.h). */
#include "report_files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const kOptions[3] = {"--json", "--csv", "--html"};

int report_files_one_stdout(const char *cmd, const char *const paths[3]) {
  int n = 0;
  for (int i = 0; i < 3; i++) n += paths[i] && !strcmp(paths[i], "-");
  if (n <= 1) return 1;
  fprintf(stderr, "fp4kit %s: only one of --json, --csv and --html may write to stdout ('-')\n", cmd);
  return 0;
}

int report_files_writable(const char *cmd, const char *const paths[3]) {
  for (int i = 0; i < 3; i++) {
    if (!paths[i] || !strcmp(paths[i], "-")) continue;
    const int existed = access(paths[i], F_OK) == 0;
    FILE *f = fopen(paths[i], "a");
    if (!f) {
      fprintf(stderr, "fp4kit %s: cannot write the %s file '%s': %s; nothing was timed\n", cmd, kOptions[i], paths[i],
              strerror(errno));
      return 0;
    }
    fclose(f);
    if (!existed) remove(paths[i]);
  }
  return 1;
}
