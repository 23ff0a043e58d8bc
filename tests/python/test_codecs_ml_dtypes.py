"""Independent cross-check of the E2M1 and E4M3 encoders against ml_dtypes on over 10^6 float32
inputs: every rounding boundary and its float32 neighbours, random values across all exponents,
and the special values. Where fp4kit's encoders and ml_dtypes differ, it is handled explicitly:
ml_dtypes maps NaN to 0x8 for float4_e2m1fn (fp4kit: 0x7), and float8_e4m3fn does not saturate
(inputs are clamped to +-448)."""
import ctypes

import ml_dtypes
import numpy as np

F32, E2M1X2, E4M3 = 0, 3, 4
E2M1_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]


def neighbours(values):
    v = np.asarray(values, dtype=np.float32)
    out = [v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]
    return np.concatenate(out + [-x for x in out])


def inputs(rng):
    e4m3_codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    e4m3_codes = e4m3_codes[np.isfinite(e4m3_codes)]
    mids = (e4m3_codes[:-1].astype(np.float64) + e4m3_codes[1:]) / 2
    parts = [
        neighbours(E2M1_BOUNDS + [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 448.0, 464.0, 2.0**-9, 2.0**-10]),
        neighbours(e4m3_codes),
        neighbours(mids.astype(np.float32)),
        # random bit patterns cover every exponent, subnormals and huge values
        rng.integers(0, 2**32, size=600_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        rng.uniform(-8, 8, size=300_000).astype(np.float32),
        (rng.standard_normal(200_000) * 100).astype(np.float32),
        np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38], dtype=np.float32),
    ]
    x = np.concatenate(parts).astype(np.float32)
    return x[~np.isnan(x)]


def convert(lib, x, dst_dtype):
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.size if dst_dtype != E2M1X2 else x.size - (x.size & 1)
    out = np.zeros(n if dst_dtype == E4M3 else n // 2, dtype=np.uint8)
    st = lib.fp4_convert(x.ctypes.data_as(ctypes.c_void_p), F32, out.ctypes.data_as(ctypes.c_void_p), dst_dtype,
                         ctypes.c_size_t(n))
    assert st == 0
    return out, x[:n]


def test_e2m1_matches_ml_dtypes(lib):
    rng = np.random.default_rng(1)
    x = inputs(rng)
    assert x.size >= 1_000_000
    packed, x = convert(lib, x, E2M1X2)
    codes = np.empty(x.size, dtype=np.uint8)
    codes[0::2] = packed & 0xF
    codes[1::2] = packed >> 4
    ref = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    mismatch = np.nonzero(codes != ref)[0]
    assert mismatch.size == 0, f"{mismatch.size} mismatches, first inputs {x[mismatch[:5]]}: {codes[mismatch[:5]]} vs {ref[mismatch[:5]]}"


def test_e2m1_nan_is_positive_six(lib):
    packed, _ = convert(lib, np.array([np.nan, -np.nan], dtype=np.float32), E2M1X2)
    assert packed[0] == 0x77


def test_e4m3_matches_ml_dtypes_after_clamping(lib):
    rng = np.random.default_rng(2)
    x = inputs(rng)
    assert x.size >= 1_000_000
    codes, x = convert(lib, x, E4M3)
    ref = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    mismatch = np.nonzero(codes != ref)[0]
    assert mismatch.size == 0, f"{mismatch.size} mismatches, first inputs {x[mismatch[:5]]}: {codes[mismatch[:5]]} vs {ref[mismatch[:5]]}"


def test_e4m3_nan(lib):
    codes, _ = convert(lib, np.array([np.nan], dtype=np.float32), E4M3)
    assert codes[0] == 0x7F
