#!/usr/bin/env bash
# The configure step's choices, checked from its output (configure only, nothing is compiled):
# - no cJSON on the system and none to fetch: one line saying what to install;
# - a cJSON source directory: compiled into libfp4kit;
# - the GPU code: FP4KIT_CUDA_ARCHITECTURES=all gives the five targets, a list gives those, none
#   (and auto without a visible GPU) the host backends only.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0
src=$root
check() { # name, expected text (grep -E), cmake arguments... (configures $src)
  local name=$1 want=$2 n=$((passed + failed + skipped))
  shift 2
  env -u FP4KIT_CUDA_ARCHITECTURES cmake -S "$src" -B "$work/b$n" -DFP4KIT_BUILD_TESTS=OFF -DFP4KIT_BUILD_TOOLS=OFF "$@" >"$work/log$n" 2>&1
  if grep -qE -- "$want" "$work/log$n"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name: no line matching '$want' in:"; tail -15 "$work/log$n"
  fi
}

# A checkout that holds cJSON's source in .deps/cjson-src (scripts/fetch_deps.sh) would find it:
# that case configures a copy of the sources without it.
if [ -e "$root/.deps/cjson-src" ]; then
  src=$work/src
  mkdir -p "$src"
  tar -C "$root" --exclude=./.deps --exclude=./.git --exclude='./build*' -cf - . | tar -C "$src" -xf -
fi
check "no cJSON: one line says what to install" \
  "^fp4kit needs cJSON: install it \(apt-get install libcjson-dev" \
  -DFP4KIT_BUNDLE_CJSON=ON -DFP4KIT_FETCH_CJSON=OFF -DFP4KIT_CUDA_ARCHITECTURES=none
src=$root
mkdir -p "$work/cjson"
printf '/* stand-in: configure only */\n' >"$work/cjson/cJSON.c"
printf '/* stand-in: configure only */\n' >"$work/cjson/cJSON.h"
check "a cJSON source directory is compiled in" \
  "cJSON.*: compiled into libfp4kit from $work/cjson" \
  -DFP4KIT_CJSON_SOURCE_DIR="$work/cjson" -DFP4KIT_CUDA_ARCHITECTURES=none
# The last configure (FP4KIT_CUDA_ARCHITECTURES=none) said so (one configure fewer: each takes seconds).
n=$((passed + failed + skipped - 1))
if grep -q "FP4KIT_CUDA_ARCHITECTURES=none: building the host backends only" "$work/log$n"; then
  passed=$((passed + 1)); echo "ok   FP4KIT_CUDA_ARCHITECTURES=none: host backends only"
else
  failed=$((failed + 1)); echo "FAIL FP4KIT_CUDA_ARCHITECTURES=none: no 'building the host backends only' line"
fi

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  check "FP4KIT_CUDA_ARCHITECTURES=all: the five targets" \
    "CUDA architectures 80-real;89-real;90a-real;100a-real;120a-real \(from FP4KIT_CUDA_ARCHITECTURES=all\)" \
    -DFP4KIT_CUDA_ARCHITECTURES=all
  check "FP4KIT_CUDA_ARCHITECTURES=sm_90a,120a: those two" \
    "CUDA architectures 90a-real;120a-real \(from FP4KIT_CUDA_ARCHITECTURES\)" \
    "-DFP4KIT_CUDA_ARCHITECTURES=sm_90a,120a"
  check "an explicit CMAKE_CUDA_ARCHITECTURES wins" \
    "CUDA architectures 89-real \(from CMAKE_CUDA_ARCHITECTURES\)" \
    -DCMAKE_CUDA_ARCHITECTURES=89-real -DFP4KIT_CUDA_ARCHITECTURES=all
  if nvidia-smi >/dev/null 2>&1; then
    check "auto with a visible GPU: its architecture" "CUDA architectures [0-9]+a?-real.* \(from the visible GPU\)"
  else
    check "auto without a visible GPU: host backends only" "no GPU visible: building the host backends only"
  fi
else
  skipped=$((skipped + 1)); echo "skip the CUDA architecture checks: no nvcc"
fi
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
