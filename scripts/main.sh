#!/usr/bin/env bash
# Sets up a fresh machine, builds fp4kit and runs the main job: `fp4kit check`, every available
# backend against the reference, then `fp4kit probe`, what runs on this machine and why not.
# Arguments are passed to `fp4kit check` (see --help).
# Without a visible GPU the build holds the host backends only (minutes on 2 cores: the CUDA
# backends could not run here anyway); FP4KIT_CUDA_ARCHITECTURES=all (or e.g. 90a) builds the CUDA
# backends too (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
bash scripts/setup.sh
# The command only: the tests are scripts/test.sh's.
BUILD_DIR=$BUILD_DIR BUILD_TARGET=fp4kit_cli bash scripts/build.sh
"$BUILD_DIR/tools/fp4kit" check "$@"
rc=0
"$BUILD_DIR/tools/fp4kit" probe || rc=$?
if grep -q "building the host backends only" "$BUILD_DIR/configure.log"; then
  echo "main: this build holds the host backends only; FP4KIT_CUDA_ARCHITECTURES=all bash scripts/main.sh builds the CUDA backends too (README: how long)"
fi
exit $rc
