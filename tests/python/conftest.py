"""Locates the shared library the tests load through ctypes: FP4KIT_LIB, else build/libfp4kit.so."""
import ctypes
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def find_library() -> pathlib.Path:
    env = os.environ.get("FP4KIT_LIB")
    if env:
        return pathlib.Path(env)
    for candidate in sorted(ROOT.glob("build*/libfp4kit.so")):
        return candidate
    raise FileNotFoundError("libfp4kit.so not found: build first (cmake -S . -B build) or set FP4KIT_LIB")


@pytest.fixture(scope="session")
def lib():
    return ctypes.CDLL(str(find_library()))
