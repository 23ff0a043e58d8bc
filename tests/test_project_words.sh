#!/usr/bin/env bash
# The project speaks only of itself: no tracked file (code, comments, tests, scripts, docs, recorded
# results) and no tracked path names how it was made. Each pattern below is one such way of speaking,
# written to leave the ordinary words alone:
#   session ............ any case, except pytest's fixture scope (scope="session")
#   run N, runs N-M .... a numbered run ("run 4", "run8", "run-2", "runs 3-5", "runs 1 and 2"); the verb
#                        with a quantity ("runs 469-598 TFLOP/s", "runs 2 threads", "--runs 50") is fine
#   issue N ............ a tracker reference ("issue 6", "issue #6", "issue-5", "the issue's", "#3's");
#                        the verb ("issues the copies", "instruction issue") is fine
#   SPEC, MODELS.md, DESIGN.md ... documents that are not in the repository
#   next-<name> ........ branch names
#   against main, main's, than main ... the main branch as a point of comparison
# Run from ctest (project_words) or by hand: bash tests/test_project_words.sh [REPOSITORY_ROOT].
# Exits 77 (skipped) where the tree is not a git checkout (an sdist build).
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "test_project_words: $root is not a git checkout; nothing to check"
  exit 77
fi
self=tests/test_project_words.sh
# The words, as one PCRE (grep -P takes one pattern).
units='(?![0-9.]*(-[0-9.]+)?\s*(x\b|%|[KMGT]?FLOP|[KMGT]?B/s|GB|us\b|ms\b|threads|times|calls|instructions|CTAs|warps))'
re="(?i:session)(?<!scope=\"session)"
re+="|\\b[Rr]un-?[0-9]+\\b|\\b[Rr]un [0-9]+\\b${units}"
re+="|\\b[Rr]uns [0-9]{1,2}( ?- ?| and |, )[0-9]{1,2}\\b${units}"
re+="|(?i:\\bissues? ?[#-]?[0-9]+\\b)${units}|(?i:\\bissue's)|#[0-9]+'s"
re+="|\\bSPEC\\b|MODELS\\.md|DESIGN\\.md"
re+="|\\bnext-[a-z][a-z0-9]*(-[a-z0-9]+)*\\b(?!-)"
re+="|(?i:against main\\b)|\\bmain's\\b|\\bthan main\\b"

status=0
# Contents of every tracked text file but the licence (its legal text says "issue tracking").
hits=$(git -C "$root" ls-files -z | grep -z -v -x -e LICENSE -e "$self" |
  (cd "$root" && xargs -0 grep -I -n -P "$re" 2>/dev/null))
if [ -n "$hits" ]; then
  echo "test_project_words: words about how the project was made, in tracked files:"
  printf '%s\n' "$hits" | head -50
  echo "($(printf '%s\n' "$hits" | wc -l) lines; say what the code or the measurement is, name the results file under bench/results/)"
  status=1
fi
# Paths.
paths=$(git -C "$root" ls-files | grep -i -E 'session|(^|[/_.-])runs?-?[0-9]+([/_.-]|$)|next-[a-z]')
if [ -n "$paths" ]; then
  echo "test_project_words: tracked paths named after how the project was made:"
  printf '%s\n' "$paths" | head -20
  status=1
fi
[ $status = 0 ] && echo "test_project_words: $(git -C "$root" ls-files | wc -l) tracked files, none names how the project was made"
exit $status
