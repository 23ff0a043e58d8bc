/* The report files of the benchmark modes (--json, --csv, --html): the rules every mode checks
 * before it times anything, so that a wrong path costs no run. */
#ifndef FP4_TOOLS_REPORT_FILES_H
#define FP4_TOOLS_REPORT_FILES_H

/* paths: the --json, --csv and --html values (NULL: not asked for; "-": stdout). At most one may be
 * "-": otherwise prints "fp4kit CMD: ..." and returns 0. */
int report_files_one_stdout(const char *cmd, const char *const paths[3]);

/* Every named file can be written: one that is there is opened for appending (its contents stay
 * until the report replaces them), one that is not is created and removed again. Otherwise prints
 * "fp4kit CMD: cannot write the --json file 'P': <reason>; nothing was timed" and returns 0. */
int report_files_writable(const char *cmd, const char *const paths[3]);

#endif
