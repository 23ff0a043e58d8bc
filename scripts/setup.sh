#!/usr/bin/env bash
# Installs what building and testing fp4kit needs on a fresh Debian machine (idempotent; quiet when
# everything is already there). CUDA is optional: with nvcc on PATH the CUDA backends are built too.
set -euo pipefail

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
dpkg -s libcjson-dev >/dev/null 2>&1 || need_apt+=(libcjson-dev)
# Python's headers, for fp4kit._native (the Python package's compiled hot path); Debian's python3
# keeps them in python3-dev, an interpreter of its own (pyenv, a venv's base) ships them.
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
   && [[ "$(readlink -f "$(command -v "$PYTHON")")" == /usr/bin/* ]]; then
  need_apt+=(python3-dev)
fi
if ((${#need_apt[@]})); then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! "$PYTHON" -c 'import numpy, ml_dtypes, pytest' 2>/dev/null; then
  echo "setup: installing Python packages: numpy ml_dtypes pytest"
  "$PYTHON" -m pip install -q --disable-pip-version-check numpy ml_dtypes pytest
fi
