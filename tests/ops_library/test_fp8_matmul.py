"""fp8_matmul and quantize_fp8 on the simulator: e4m3/e5m2 operands (and one of each) with
per-tensor and per-row/per-column scales against numpy with ml_dtypes (the f32 sums agree to
f32 rounding: each mma.sync rounds its partial sum once), ragged M/N/K on sm_89 and sm_90a,
NaN propagation, the quantiser bit-exact against ml_dtypes' conversion, Buffers and torch
tensors, each bad input named (fp8 on sm_80 included), ptxas -arch=sm_89/sm_90a without spills."""

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library import fp8_matmul, quantize_fp8
from kaio.ops_library.scaled_matmul import block_m, scaled_matmul_kernel
from kaio.targets.ptx import toolchain

import kaio
from kaio import dtypes
from kaio.errors import KaioTargetError, KaioTypeError, KaioValueError

FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
QMAX = {"e4m3": 448, "e5m2": 57344}
OUT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def fp8(rng, t, shape):
    return rng.standard_normal(shape).astype(np.float32).astype(FP8[t])


def reference(a, b, sa, sb, bias=None):
    """The op's math in f32 after an exact sum: (a @ b) * scale_a * scale_b (+ bias)."""
    acc = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    out = acc * sa.reshape(-1, 1)[: acc.shape[0]] * sb.reshape(1, -1)
    return out if bias is None else out + bias


@pytest.mark.parametrize(
    "arch,ta,tb,m,n,k,per_row",
    [("sm_89", "e4m3", "e4m3", 33, 40, 100, False), ("sm_89", "e5m2", "e4m3", 1, 24, 64, True),
     ("sm_90a", "e4m3", "e5m2", 40, 17, 96, True)],
)  # fmt: skip
def test_matches_numpy(rng, poison, arch, ta, tb, m, n, k, per_row):
    a, b = fp8(rng, ta, (m, k)), fp8(rng, tb, (k, n))
    sa = (rng.random(m if per_row else 1) + 0.5).astype(np.float32)
    sb = (rng.random(n if per_row else 1) + 0.5).astype(np.float32)
    dev = kaio.Device("sim", arch=arch)
    got = fp8_matmul(a, b, sa, sb, out_dtype="f32", device=dev)
    want = reference(a, b, sa, sb)
    assert got.dtype == np.float32 and got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_column_major_b_on_wgmma(rng, poison):
    a, w = fp8(rng, "e4m3", (64, 96)), fp8(rng, "e5m2", (40, 96))
    got = fp8_matmul(a, w.T, np.float32([0.5]), np.ones(40, np.float32), out_dtype="f32", device=kaio.Device("sim", arch="sm_90a"))
    want = reference(a, w.T, np.float32([0.5]), np.ones(40, np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("out", ["bf16"])
def test_bias_and_output_types(rng, poison, out):
    a, b = fp8(rng, "e4m3", (20, 64)), fp8(rng, "e4m3", (64, 40))
    sa, sb = np.float32([0.25]), (rng.random(40) + 0.5).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    got = fp8_matmul(a, b, sa, sb, bias=bias, out_dtype=out, device=kaio.Device("sim", arch="sm_89"))
    assert got.dtype == OUT[out]
    want = reference(a, b, sa, sb, bias).astype(OUT[out]).astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_nan_propagates(rng):
    a, b = fp8(rng, "e4m3", (16, 32)), fp8(rng, "e4m3", (32, 16))
    a.view(np.uint8)[3, 5] = 0x7F  # e4m3's NaN
    got = fp8_matmul(a, b, np.ones(1, np.float32), np.ones(1, np.float32), out_dtype="f32", device=kaio.Device("sim", arch="sm_89"))
    assert np.isnan(got[3]).all() and np.isfinite(np.delete(got, 3, axis=0)).all()


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
@pytest.mark.parametrize("per_row", [False, True])
def test_quantize_fp8_matches_ml_dtypes(rng, poison, dtype, per_row):
    x = (rng.standard_normal((37, 300)) * rng.random((37, 1)) * 100).astype(np.float32)
    x[4] = 0.0
    q, scale = quantize_fp8(x, per_row=per_row, dtype=dtype, device=kaio.Device("sim", arch="sm_89"))
    amax = np.abs(x).max(axis=1) if per_row else np.abs(x).max(keepdims=True).reshape(1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(QMAX[dtype]) / amax, np.float32(0)).astype(np.float32)
    want = (x * (inv[:, None] if per_row else inv)).astype(FP8[dtype])
    assert q.dtype == FP8[dtype] and scale.shape == ((37,) if per_row else (1,))
    np.testing.assert_array_equal(scale, amax / np.float32(QMAX[dtype]))
    np.testing.assert_array_equal(q.view(np.uint8), want.view(np.uint8))  # same bits: one rounding
    assert np.abs(q.astype(np.float32)).max() == QMAX[dtype]  # the largest |x| maps to the type's max


@pytest.mark.slow
def test_quantize_then_matmul_approximates_the_float_product(rng):
    dev = kaio.Device("sim", arch="sm_89")
    x, w = rng.standard_normal((24, 128)).astype(np.float32), rng.standard_normal((128, 40)).astype(np.float32)
    qx, sx = quantize_fp8(x, per_row=True, device=dev)
    qw, sw = quantize_fp8(w, device=dev)
    y = fp8_matmul(qx, qw, sx, sw, out_dtype="f32", device=dev)
    want = x.astype(np.float64) @ w
    assert np.linalg.norm(y - want) / np.linalg.norm(want) < 5e-2


@pytest.mark.slow
def test_torch_tensors_in_tensor_out(rng):
    torch = pytest.importorskip("torch")
    dev = kaio.Device("sim", arch="sm_89")
    x = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    q, s = quantize_fp8(x, device=dev)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (1,)
    b = torch.from_numpy(fp8(rng, "e5m2", (64, 16)).view(np.uint8)).view(torch.float8_e5m2)
    y = fp8_matmul(q, b, s, torch.ones(16), device=dev)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and tuple(y.shape) == (4, 16)


def _good():
    return {"a": np.ones((4, 64), FP8["e4m3"]), "b": np.ones((64, 16), FP8["e4m3"]),
            "scale_a": np.ones(1, np.float32), "scale_b": np.ones(16, np.float32)}  # fmt: skip


BAD = [  # (what is wrong, changes to a good call, error, what the message names)
    ("int8 a", {"a": np.ones((4, 64), np.int8)}, KaioTypeError, "`a` must be a 2-D f8e4m3/f8e5m2 array"),
    ("f16 b", {"b": np.ones((64, 16), np.float16)}, KaioTypeError, "`b` must be a 2-D f8e4m3/f8e5m2 array"),
    ("K mismatch", {"b": np.ones((32, 16), FP8["e4m3"])}, KaioValueError, "K differs"),
    ("scale_a shape", {"scale_a": np.ones(3, np.float32)}, KaioTypeError, r"`scale_a` must be f32 of shape \(4,\) or \(1,\) or \(\)"),
    ("f16 scale_b", {"scale_b": np.ones(16, np.float16)}, KaioTypeError, "`scale_b` must be f32"),
    ("bias dtype", {"bias": np.ones(16, np.float16)}, KaioTypeError, "`bias` must be f32 or bf16"),
    ("out_dtype", {"out_dtype": "e4m3"}, KaioValueError, "`out_dtype` must be one of"),
]  # fmt: skip


@pytest.mark.parametrize("what,changes,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(what, changes, error, message):
    kw = {**_good(), **changes}
    with pytest.raises(error, match=message):
        fp8_matmul(kw.pop("a"), kw.pop("b"), kw.pop("scale_a"), kw.pop("scale_b"), device=kaio.Device("sim", arch="sm_89"), **kw)


def test_fp8_on_sm80_is_refused():
    with pytest.raises(KaioTargetError, match=r"fp8_matmul: fp8 tensor cores .* needs sm_89 or newer; the target is sm_80"):
        fp8_matmul(*_good().values(), device=kaio.Device("sim", arch="sm_80"))


def test_bad_quantize_input_is_named():
    with pytest.raises(KaioTargetError, match=r"quantize_fp8: conversion to fp8 .* needs sm_89"):
        quantize_fp8(np.ones((2, 2), np.float32), device=kaio.Device("sim", arch="sm_80"))
    with pytest.raises(KaioValueError, match="`dtype` must be 'e4m3' or 'e5m2'"):
        quantize_fp8(np.ones((2, 2), np.float32), dtype="e3m4", device="sim")
    with pytest.raises(KaioTypeError, match="quantize_fp8: `x` must be a 2-D f16, bf16 or f32"):
        quantize_fp8(np.ones((2, 2), FP8["e4m3"]), device="sim")


needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_assembles_without_spills(arch):
    e4m3, e5m2 = dtypes.BY_NAME["f8e4m3"], dtypes.BY_NAME["f8e5m2"]
    kernel = scaled_matmul_kernel(e4m3, e5m2, dtypes.f32, dtypes.bf16, dtypes.f32)
    compiled = kaio.compile(kernel, arch, BM=block_m(64), BN=128, BK=64, HAS_BIAS=True,
                            specialization={"a": 16, "b": 16, "y": 16, "m": 16, "n": 16, "k": 64})  # fmt: skip
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32" in compiled.ptx
    report = toolchain.assemble(compiled.ptx, arch)
    assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
