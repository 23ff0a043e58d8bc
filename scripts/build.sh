#!/usr/bin/env bash
# Configures and builds fp4kit into ${BUILD_DIR:-build}. Extra arguments go to cmake's configure step;
# BUILD_TARGET builds one target (and what it needs) instead of all, e.g. fp4kit_cli.
# The GPU code follows FP4KIT_CUDA_ARCHITECTURES: auto (default) the visible GPU's architecture, and
# with no GPU the host backends only (minutes on 2 cores); all the five targets sm_80, sm_89, sm_90a,
# sm_100a, sm_120a (about 20 minutes of CPU: 10-15 minutes on 2 free cores); none; or a list such as 90a.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p "$BUILD_DIR"
t0=$SECONDS
# fp4kit._native is built for the Python that runs the tests (PYTHON, else python3 on PATH).
python_arg=()
if python_path=$(command -v "${PYTHON:-python3}"); then python_arg=(-DPython3_EXECUTABLE="$python_path"); fi
if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DFP4KIT_CUDA_ARCHITECTURES="${FP4KIT_CUDA_ARCHITECTURES:-auto}" "${python_arg[@]}" "$@" >"$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log" >&2
  exit 1
fi
# What was chosen (GPU code, cJSON), from the configure output.
grep -E '^(-- )?fp4kit' "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
echo "build: $BUILD_DIR built in $((SECONDS - t0)) s"
