"""Bugs the differential fuzzer found, each kept as a small regular test: compile-time folding
must give the bits the runtime op gives (IEEE), so a constant expression means the same whether
it is folded or not."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import kaio

from .harness import load_kernel


def _run(text: str, dev: kaio.Device, dtype: object, inputs: list[np.ndarray] | None = None) -> np.ndarray:
    kernel = load_kernel(text)
    out = dev.zeros(4, dtype)
    kernel.launch(dev, *(dev.alloc_from(a) for a in inputs or []), out, grid=1)
    return out.to_host()


def test_folded_floor_and_ceil_keep_the_sign_of_zero(dev: kaio.Device) -> None:
    # found as `r1 = (floor(f16(-0.0)) - 0.0)`: +0.0 instead of -0.0 (math.floor returns an int)
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[f16]):
    out[0] = floor(f16(-0.0)) - 0.0
    out[1] = ceil(f16(-0.5))
    out[2] = floor(f16(-0.5))
    out[3] = ceil(f16(0.25))
""",
        dev,
        np.float16,
    )
    assert got.view(np.uint16).tolist() == np.array([-0.0, -0.0, -1.0, 1.0], np.float16).view(np.uint16).tolist()


def test_folded_float_division_by_zero_is_ieee(dev: kaio.Device) -> None:
    # found as `r0 = (f16(0.0) / 0.0)`: "division by zero in a compile-time expression"
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[f32]):
    out[0] = f32(0.0) / 0.0
    out[1] = f32(-3.0) / 0.0
    out[2] = f32(3.0) % 0.0
    out[3] = sqrt(f32(-1.0))
""",
        dev,
        np.float32,
    )
    assert np.isnan(got[0]) and got[1] == -np.inf and np.isnan(got[2]) and np.isnan(got[3])


def test_folded_float_remainder_matches_the_runtime_expansion(dev: kaio.Device) -> None:
    # float % is x - trunc(x / y) * y at runtime, each step rounded to the type; the folder used
    # math.fmod (exact), so a constant operand gave other bits than a runtime one
    pairs = np.array([[1e10, 3.0], [-7.5, 0.1], [5.0e8, 7.0], [-0.0, 2.0]], np.float32)
    text = "@kaio.gpu_kernel(block_size=4)\ndef fuzz(x: Array[f32], y: Array[f32], out: MutArray[f32]):\n"
    text += "    i = thread_idx_x()\n    out[i] = x[i] % y[i]\n"
    runtime = _run(text, dev, np.float32, [pairs[:, 0].copy(), pairs[:, 1].copy()])
    folded_text = "@kaio.gpu_kernel(block_size=1)\ndef fuzz(out: MutArray[f32]):\n" + "".join(
        f"    out[{k}] = f32({float(a)!r}) % f32({float(b)!r})\n" for k, (a, b) in enumerate(pairs)
    )
    folded = _run(folded_text, dev, np.float32)
    assert folded.view(np.uint32).tolist() == runtime.view(np.uint32).tolist()


def test_a_bf16_literal_rounds_once(dev: kaio.Device) -> None:
    # 1 + 2**-8 + 2**-52 is just above the halfway point between bf16 1.0 and 1.0078125;
    # ml_dtypes rounds an f64 through f32 (to exactly the halfway point, then to even: 1.0)
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[bf16]):
    out[0] = bf16(1.0039062500000002)
    out[1] = bf16(1.0) * 1.0039062500000002
""",
        dev,
        ml_dtypes.bfloat16,
    )
    assert got[:2].astype(np.float32).tolist() == [1.0078125, 1.0078125]


def test_float_add_sub_mul_are_rounded_per_op_on_hardware_too() -> None:
    # Without a rounding modifier ptxas may fuse mul.f32 + add.f32 into one fma (one rounding):
    # the GPU would then differ from kaio's semantics and from the simulator.
    kernel = load_kernel(
        """
@kaio.gpu_kernel(block_size=32)
def fuzz(x: Array[f32], h: Array[f16], out: MutArray[f32], hout: MutArray[f16]):
    i = thread_idx_x()
    out[i] = x[i] * x[i] + x[i] - x[i]
    hout[i] = h[i] * h[i] + h[i]
"""
    )
    ptx = kaio.compile(kernel, "sm_80").ptx
    for op in ("mul.rn.f32", "add.rn.f32", "sub.rn.f32", "mul.rn.f16", "add.rn.f16"):
        assert op in ptx
    assert "fma" not in ptx


def test_folded_min_and_max_follow_the_runtime_op(dev: kaio.Device) -> None:
    # found as `r0 = min(f16(0.0), f16(-0.0))`: Python's min kept +0.0 (and min(nan, 1.0) is nan)
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[f16]):
    out[0] = min(f16(0.0), f16(-0.0))
    out[1] = max(f16(-0.0), f16(0.0))
    out[2] = min(f16(0.0) / 0.0, f16(1.0))
    out[3] = max(f16(2.0), f16(0.0) / 0.0)
""",
        dev,
        np.float16,
    )
    assert got.view(np.uint16).tolist() == np.array([-0.0, 0.0, 1.0, 2.0], np.float16).view(np.uint16).tolist()


def test_negative_and_positive_zero_constants_stay_apart(dev: kaio.Device) -> None:
    # the PTX emitter keyed its constants by value, and -0.0 == 0.0: both stores got -0.0
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[f32]):
    out[0] = f32(-0.0)
    out[1] = f32(0.0)
""",
        dev,
        np.float32,
    )
    assert got.view(np.uint32)[:2].tolist() == [0x80000000, 0]


def test_folded_integer_power_wraps_without_building_a_huge_int(dev: kaio.Device) -> None:
    # a typed constant exponent of 2**62 made the folder compute 3**(2**62) as a Python int
    got = _run(
        """
@kaio.gpu_kernel(block_size=1)
def fuzz(out: MutArray[u64]):
    out[0] = u64(3) ** u64(4611686018427387904)
    out[1] = u64(3) ** u64(5)
""",
        dev,
        np.uint64,
    )
    assert got[:2].tolist() == [pow(3, 1 << 62, 1 << 64), 243]


def test_an_if_that_negates_a_zero_keeps_both_signs_apart(dev: kaio.Device) -> None:
    # found as `if (bool_(r0) and (v < v)): r1 = (-r1)`: the join saw the constants 0.0 and -0.0
    # as one value (0.0 == -0.0) and kept -0.0 on the path that never negated
    got = _run(
        """
@kaio.gpu_kernel(block_size=4)
def fuzz(x: Array[i16], out: MutArray[f16]):
    i = thread_idx_x()
    r = f16(0.0)
    if x[i] < 0:
        r = -r
    out[i] = r
""",
        dev,
        np.float16,
        [np.array([-1, 2, -3, 4], np.int16)],
    )
    assert got.view(np.uint16).tolist() == [0x8000, 0, 0x8000, 0]
