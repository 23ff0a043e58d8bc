#!/usr/bin/env bash
# The manylinux wheel on its own: builds a host-only wheel with scripts/build_wheel.sh (cJSON compiled
# in, auditwheel repair), installs it into a fresh virtual environment, checks that its libfp4kit
# needs no cJSON (nor any library outside the manylinux set) and that it carries fp4kit._native,
# and runs the package's CPU tests against the installed package, not the checkout.
#
#   bash tests/wheel/run.sh [WHEEL]     # WHEEL: test this wheel instead of building one
#
# Needs PyPI (build tools, numpy, ml_dtypes, pytest). About 4 minutes on 2 idle cores; not part of
# scripts/test.sh (CMake: -DFP4KIT_TEST_WHEEL=ON adds it to ctest).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHON=${PYTHON:-python3}
if [ $# -ge 1 ]; then
  wheel=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
  wheel=$(FP4KIT_CUDA_ARCHITECTURES=none DIST="$work/dist" bash "$root/scripts/build_wheel.sh" | tail -n1)
fi
case "$(basename "$wheel")" in
  *manylinux*) ;;
  *) echo "FAIL: $wheel is not a manylinux wheel"; exit 1 ;;
esac
"$PYTHON" -m venv "$work/venv"
py=$work/venv/bin/python
"$py" -m pip install -q --disable-pip-version-check "$wheel" pytest
so=$("$py" -c 'import fp4kit._lib as l, os; print(os.path.realpath(l.LIB._name))')
case "$so" in
  "$work/venv/"*) ;;
  *) echo "FAIL: the installed package loaded $so, not its own library"; exit 1 ;;
esac
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "wheel: $(basename "$wheel"); libfp4kit needs: $needed"
if grep -q cjson <<<"$needed"; then
  echo "FAIL: the wheel's libfp4kit still needs a system cJSON"
  exit 1
fi
"$py" -c 'import fp4kit; print("wheel: backends", fp4kit.backends())'
# The compiled hot path is in the package (fp4kit._native, built for the wheel's Python).
"$py" -c 'import fp4kit, sys; p = fp4kit.call_path(); print("wheel: compiled path", p); sys.exit(0 if p["module"] else 1)' ||
  { echo "FAIL: the wheel has no fp4kit._native"; exit 1; }
# The package tests use the installed package when FP4KIT_LIB is unset; the codec tests load a
# library by path: the wheel's.
cd "$work"
env -u FP4KIT_LIB "$py" -m pytest -q -p no:cacheprovider \
  "$root/tests/python/test_package.py" "$root/tests/python/test_package_dropin.py"
FP4KIT_LIB=$so "$py" -m pytest -q -p no:cacheprovider \
  "$root/tests/python/test_codecs_ml_dtypes.py" "$root/tests/python/test_quantize_modelopt.py"
