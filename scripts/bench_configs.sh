#!/usr/bin/env bash
# Times named cuda configs side by side: one `fp4kit bench --backend cuda --config NAME` per config
# of the list, plus the default choice (no --config) with the same-run peers (cuBLAS BF16, copy and
# read kernels), all with the same bench arguments. The config runs skip the peers (their ratios
# come from the default run's records of the same points). A config that refuses a point says why
# in its table and the others still run.
#
#   OUT=dir bash scripts/bench_configs.sh BUILD_DIR CONFIG[,CONFIG...] [fp4kit bench arguments]
#   e.g. OUT=/tmp/o bash scripts/bench_configs.sh build large-m.wgra.128x32,large-m.wgra.128x64 \
#          --model llama-3.3-70b --m 16,32,64 --op w4a16
#
# Writes $OUT/default.json and $OUT/<config>.json (records with device, commit and command) and
# the printed tables to $OUT/<name>.txt.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
build=$1 configs=$2
shift 2
F=$build/tools/fp4kit
[ -x "$F" ] || { echo "bench_configs.sh: $F is missing: build first"; exit 1; }
OUT=${OUT:-./bench-out}
mkdir -p "$OUT"
failed=()
echo "== default (with peers)"
"$F" bench --backend cuda --json "$OUT/default.json" "$@" >"$OUT/default.txt" 2>&1 || failed+=(default)
IFS=, read -r -a list <<<"$configs"
for c in "${list[@]}"; do
  echo "== $c"
  "$F" bench --backend cuda --config "$c" --no-peers --json "$OUT/$c.json" "$@" >"$OUT/$c.txt" 2>&1 || failed+=("$c")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "bench_configs.sh: failed: ${failed[*]} (see their .txt)"
  exit 1
fi
