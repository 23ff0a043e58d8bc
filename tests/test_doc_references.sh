#!/usr/bin/env bash
# The documentation names only what exists. In README.md, docs/*.md, python/README.md,
# src/backends/cuda/README.md, bench/README.md and bench/results/README.md:
#   - every repository path (bench/results/..., src/..., tests/..., scripts/..., tools/..., include/...,
#     python/..., cmake/..., fuzz/...) exists; placeholders (<name>, *, {a,b}) are left alone;
#   - every cuda config name (small-m.*, large-m.*, moe.*), there and in the command's help texts
#     (tools/*.c), is one that src/backends/cuda/config/*.c defines;
# and every results folder bench/results/<machine>/<date>-<topic>/ is listed in bench/results/README.md.
# Run from ctest (doc_references) or by hand: bash tests/test_doc_references.sh [REPOSITORY_ROOT].
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 1
if [ ! -f bench/results/README.md ] || [ ! -d src/backends/cuda/config ]; then
  echo "test_doc_references: $root holds no results or cuda configs; nothing to check"
  exit 77
fi
docs=(README.md docs/*.md python/README.md src/backends/cuda/README.md bench/README.md bench/results/README.md)
status=0
fail() { echo "test_doc_references: $*"; status=1; }

# Paths. A name ends at a space, quote, bracket or backtick; trailing punctuation is the sentence's.
paths=0
while IFS=: read -r file line path; do
  path=${path%%[.,;:]}
  case "$path" in *'<'* | *'>'* | *'*'* | *'{'* | */tools/fp4kit | */CMakeFiles/*) continue ;; esac
  paths=$((paths + 1))
  [ -e "$path" ] || fail "$file:$line names $path, which does not exist"
done < <(grep -o -n -E '(^|[^A-Za-z0-9_./-])(bench/results|src|tests|scripts|tools|include|python|cmake|fuzz)/[A-Za-z0-9_./<>*{},-]*[A-Za-z0-9_/*>}]' "${docs[@]}" |
  sed -E 's/^([^:]*:[0-9]+:)[^A-Za-z]*/\1/' | grep -v -E ':python/sglang/')
# bench/results/README.md names its folders relative to itself.
while IFS=: read -r line path; do
  path=${path%%[.,;:]}
  paths=$((paths + 1))
  [ -e "bench/results/$path" ] || fail "bench/results/README.md:$line names $path, which is not under bench/results/"
done < <(grep -o -n -E '`(h200|h100|cpu|build)/[A-Za-z0-9_./-]*' bench/results/README.md | tr -d '`')

# Results folders listed.
folders=0
for d in bench/results/*/20[0-9][0-9]-*/; do
  d=${d#bench/results/}
  folders=$((folders + 1))
  grep -q -F "${d}" bench/results/README.md || fail "bench/results/README.md does not list ${d}"
done

# Config names.
known=$(grep -o -h -E '"(small-m|large-m|moe)\.[a-z0-9.-]+"' src/backends/cuda/config/*.c | tr -d '"' | sort -u)
names=0
while IFS=: read -r file line name; do
  name=${name%.}
  case "$name" in *.md | *'*'* | *'<'* | *'>'*) continue ;; esac
  names=$((names + 1))
  grep -q -x -F "$name" <<<"$known" || fail "$file:$line names config $name, which src/backends/cuda/config/ does not define"
done < <(grep -o -n -E '\b(small-m|large-m|moe)\.[A-Za-z0-9.*<>_-]+' "${docs[@]}" tools/*.c)

[ $status = 0 ] && echo "test_doc_references: $paths paths, $folders results folders and $names config names, all present"
exit $status
