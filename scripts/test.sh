#!/usr/bin/env bash
# Sets up a fresh machine, builds with warnings as errors, and runs every test: the C tests (ctest;
# GPU tests skip visibly without a GPU) and the Python tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build} bash scripts/build.sh -DFP4KIT_WERROR=ON
BUILD_DIR=${BUILD_DIR:-build}
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$(nproc)")
FP4KIT_LIB="$PWD/$BUILD_DIR/libfp4kit.so" ${PYTHON:-python3} -m pytest -q tests/python
