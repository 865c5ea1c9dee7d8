"""The library's fp8 E4M3 conversions (core/backend/fp8.h) against NumPy's reference of the
format (ml_dtypes.float8_e4m3fn): every code decodes to the reference's value, and fp32 values
(every code's value, the midpoints between neighbouring codes, subnormals, signed zeros, random
values at every scale) encode to the reference's code, rounding to nearest even. Past 448 the
reference gives NaN where the library saturates to +-448 (CUDA's __NV_SATFINITE), which the
host tier's scales never reach; that is checked apart."""
import numpy as np
import ml_dtypes
import subprocess

E4M3 = ml_dtypes.float8_e4m3fn


def encode(tool, tmp_path, values):
    src, dst = tmp_path / "in.f32", tmp_path / "out.u8"
    np.asarray(values, dtype="<f4").tofile(src)
    subprocess.run([str(tool("pulse-fp8-codes")), "encode", str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype=np.uint8)


def test_every_code_decodes_to_the_reference_value(tool, tmp_path):
    out = tmp_path / "decoded.f32"
    subprocess.run([str(tool("pulse-fp8-codes")), "decode", str(out)], check=True)
    got = np.fromfile(out, dtype="<f4")
    want = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    nan = np.isnan(want)
    assert list(np.flatnonzero(nan)) == [0x7F, 0xFF]
    assert np.isnan(got[nan]).all()
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # -0 too


def test_values_encode_to_the_reference_code(tool, tmp_path):
    finite = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float32)
    finite = np.sort(finite[np.isfinite(finite) & (finite >= 0)])
    midpoints = (finite[:-1].astype(np.float64) + finite[1:]) / 2  # exact in fp32: ties
    rng = np.random.default_rng(7)
    random = rng.standard_normal(200_000) * np.exp2(rng.integers(-14, 9, 200_000))
    values = np.concatenate([finite, midpoints, np.nextafter(midpoints, 0),
                             np.nextafter(midpoints, 1e9), random,
                             [0.0, 2.0**-10, 3 * 2.0**-11, 2.0**-20, 1e-40, 463.9, 464.0]])
    values = np.concatenate([values, -values]).astype(np.float32)
    values = values[np.abs(values) <= 464]  # where the reference does not overflow
    got = encode(tool, tmp_path, values)
    want = values.astype(E4M3).view(np.uint8)
    wrong = np.flatnonzero(got != want)
    assert wrong.size == 0, [(float(values[i]), int(got[i]), int(want[i])) for i in wrong[:10]]


def test_past_the_largest_value_saturates_and_nan_stays_nan(tool, tmp_path):
    values = np.array([464.5, 480, 1e6, np.inf, -500, -np.inf, np.nan, -np.nan], dtype=np.float32)
    got = encode(tool, tmp_path, values)
    assert list(got[:6]) == [0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE]
    assert all(code & 0x7F == 0x7F for code in got[6:])
