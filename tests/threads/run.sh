#!/usr/bin/env bash
# Runs a ThreadSanitizer test program: a race it reports fails the test (exit 66); a machine where
# ThreadSanitizer itself cannot start (its memory layout refused by the kernel) skips it (77).
set -uo pipefail
out=$(TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$1" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] && echo "$out" | grep -q -E "ThreadSanitizer: (unexpected memory mapping|failed to)|FATAL: ThreadSanitizer"; then
  echo "SKIP: ThreadSanitizer cannot run here"
  exit 77
fi
exit $rc
