/* What every record of an fp4kit bench mode names (dense GEMMs, --moe, --step): the command as typed,
 * the commit of the sources it measured and when it ran. */
#ifndef FP4KIT_TOOLS_PROVENANCE_H
#define FP4KIT_TOOLS_PROVENANCE_H

typedef struct bench_origin {
  char date[32];    /* ISO 8601 UTC */
  char commit[64];  /* FP4KIT_COMMIT; else the git commit of the sources this fp4kit was built from, with
                       -dirty when their tracked files differ from it; else "unknown" */
  char command[1024];
} bench_origin;

/* Fills o for the command "fp4kit argv..." (argc arguments), each argument shell-quoted where it
 * needs it. Call it before option parsing: getopt_long reorders argv. */
void bench_provenance(int argc, char **argv, bench_origin *o);

#endif
