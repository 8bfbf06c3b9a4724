"""Every launch error is raised before anything reaches the device and names what is wrong."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from acceptance_kernels import half_math, matmul, saxpy, vector_add

import kaio
from kaio import KaioLaunchError, KaioTypeError


@pytest.fixture
def saxpy_args(sim: kaio.Device) -> tuple[kaio.Buffer, kaio.Buffer]:
    return sim.alloc_from(np.ones(64, np.float32)), sim.zeros(64, np.float32)


def untouched(buf: kaio.Buffer) -> bool:
    return bool((buf.to_host() == 0).all())


def test_wrong_dtype_names_the_parameter(sim: kaio.Device, saxpy_args) -> None:
    x, y = saxpy_args
    wrong = sim.zeros(64, np.float16)
    with pytest.raises(KaioTypeError, match=r"parameter `y: MutArray\[f32\]`.*f16 buffer"):
        saxpy[1](x, wrong, 2.0, 64)
    with pytest.raises(KaioTypeError, match=r"`x: Array\[f32\]`.*i32 buffer"):
        saxpy[1](sim.zeros(64, np.int32), y, 2.0, 64)
    assert untouched(y)


@pytest.mark.parametrize(
    ("args", "kwargs", "pattern"),
    [
        (3, {}, r"takes 4 runtime arguments; missing: n"),
        (5, {}, r"takes 4 runtime arguments, got 5 positional"),
        (4, {"beta": 1.0}, r"no parameter `beta`"),
        (4, {"n": 3}, r"parameter `n` given twice"),
    ],
)
def test_wrong_argument_count_or_keyword(saxpy_args, args: int, kwargs: dict, pattern: str) -> None:
    x, y = saxpy_args
    values = [x, y, 2.0, 64, 7][:args]
    with pytest.raises(KaioTypeError, match=pattern):
        saxpy[1](*values, **kwargs)
    assert untouched(y)


def test_keywords_bind_like_python(saxpy_args) -> None:
    x, y = saxpy_args
    saxpy[1](x, y, n=64, alpha=3.0)
    np.testing.assert_array_equal(y.to_host(), np.full(64, 3.0, np.float32))


def test_read_only_buffer_refused_as_output(saxpy_args) -> None:
    x, y = saxpy_args
    with pytest.raises(KaioTypeError, match=r"`y: MutArray\[f32\]`: got a read-only buffer view"):
        saxpy[1](x, y.readonly(), 2.0, 64)
    saxpy[1](x.readonly(), y, 2.0, 64)  # a read-only view is fine where the kernel only reads
    np.testing.assert_array_equal(y.to_host(), np.full(64, 2.0, np.float32))


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        (-1, r"-1 is out of range for u32 \[0, 4294967295\]"),
        (2**32, r"out of range for u32"),
        (2.5, r"non-integral float 2.5"),
        (float("nan"), r"non-integral float nan"),
        (True, r"got a bool"),
        ("64", r"expected an int, got a str"),
        (np.int64(-5), r"-5 is out of range"),
        (None, r"expected an int, got a NoneType"),
    ],
)
def test_scalar_out_of_range_or_wrong_kind(saxpy_args, value: object, pattern: str) -> None:
    x, y = saxpy_args
    with pytest.raises(KaioTypeError, match=r"parameter `n: u32`: .*" + pattern):
        saxpy[1](x, y, 2.0, value)
    assert untouched(y)


def test_integral_values_of_other_types_are_accepted(saxpy_args) -> None:
    x, y = saxpy_args
    saxpy[1](x, y, np.float32(1.0), np.uint64(64))
    saxpy[1](x, y, 1, 64.0)  # an int for a float, an integral float for an int
    np.testing.assert_array_equal(y.to_host(), np.full(64, 2.0, np.float32))


def test_signed_range_and_float_overflow(sim: kaio.Device) -> None:
    a = sim.zeros((4, 4), np.float32)
    with pytest.raises(KaioTypeError, match=r"`n: i32`: 1099511627776 is out of range for i32"):
        matmul[1, 1](a, a, a, 2**40)
    with pytest.raises(KaioTypeError, match=r"`alpha: f32`: 1e\+39 overflows f32"):
        saxpy[1](a.reshape(16), a.reshape(16), 1e39, 16)
    h = sim.zeros(8, np.float16)
    with pytest.raises(KaioTypeError, match=r"`scale: f16`: 70000.0 overflows f16"):
        half_math[1](h, h, 70000.0, 8)
    half_math[1](h, h, float("inf"), 8)  # infinities and NaNs are values, not overflows


def test_host_array_gets_a_hint(saxpy_args) -> None:
    x, y = saxpy_args
    with pytest.raises(KaioTypeError, match=r"host numpy array.*dev.alloc_from\(x\)"):
        saxpy[1](np.ones(64, np.float32), y, 2.0, 64)
    with pytest.raises(KaioTypeError, match=r"expected a device array.*got a list"):
        saxpy[1]([1.0] * 64, y, 2.0, 64)


def test_freed_buffer_and_other_device(sim: kaio.Device, saxpy_args) -> None:
    x, y = saxpy_args
    other = kaio.Device("sim", arch="sm_90")
    with pytest.raises(
        KaioTypeError,
        match=r"lives on Device\(\"sim\", arch=\"sm_90\"\) "
        r"but the launch runs on Device\(\"sim\"\)",
    ):
        saxpy[1](x, other.zeros(64, np.float32), 2.0, 64)
    gone = sim.zeros(64, np.float32)
    gone.free()
    with pytest.raises(KaioTypeError, match=r"`y: MutArray\[f32\]`: the buffer was freed"):
        saxpy[1](x, gone, 2.0, 64)


@pytest.mark.parametrize(
    ("grid", "pattern"),
    [
        (2**31, r"grid dimension x = 2147483648 is outside 1..2147483647"),
        ((1, 65536), r"grid dimension y = 65536 is outside 1..65535"),
        (0, r"grid dimension x = 0"),
        (-3, r"grid dimension x = -3"),
        ((1, 1, 1, 1), r"1 to 3 ints"),
        (2.0, r"1 to 3 ints, got 2.0"),
        ((), r"1 to 3 ints"),
        (lambda meta: 0, r"grid dimension x = 0"),
        (lambda meta: meta["missing"], r"the grid function raised KeyError"),
    ],
)
def test_bad_grid_is_a_launch_error(saxpy_args, grid: object, pattern: str) -> None:
    x, y = saxpy_args
    with pytest.raises(KaioLaunchError, match=pattern):
        saxpy[grid](x, y, 2.0, 64)
    assert untouched(y)


def test_block_larger_than_the_kernel_is_refused(saxpy_args) -> None:
    x, y = saxpy_args
    with pytest.raises(
        KaioLaunchError,
        match=r"block \(512, 1, 1\) is larger than kernel `saxpy`'s block_size \(256, 1, 1\)",
    ):
        saxpy[1, (512,)](x, y, 2.0, 64)
    with pytest.raises(KaioLaunchError, match=r"block \(2048, 1, 1\)"):
        saxpy.launch(None, x, y, 2.0, 64, grid=1, block=2048)
    with pytest.raises(KaioLaunchError, match=r"block \(16, 32, 1\) is larger"):
        matmul[(1, 1), (16, 32)](x, x, y, 4)
    assert untouched(y)


def test_too_much_dynamic_shared_memory(sim: kaio.Device, saxpy_args) -> None:
    x, y = saxpy_args
    with pytest.raises(KaioLaunchError, match=r"allows 166912"):
        saxpy.launch(sim, x, y, 2.0, 64, grid=1, shared_bytes=200_000)
    with pytest.raises(KaioLaunchError, match=r"non-negative int"):
        saxpy.launch(sim, x, y, 2.0, 64, grid=1, shared_bytes=-1)


def test_calling_a_kernel_like_a_function(saxpy_args) -> None:
    with pytest.raises(KaioTypeError, match=r"launch it with saxpy\[grid\]\(\.\.\.\)"):
        saxpy(*saxpy_args, 2.0, 64)
    with pytest.raises(KaioLaunchError, match=r"one subscript"):
        saxpy[1][2]


BROKEN_PTX = """\
.version 8.0
.target sm_80
.address_size 64
.visible .entry broken(.param .u64 p)
{
    .reg .b32 %r<2>;
    frobnicate.b32 %r1, 3;
    ret;
}
"""


def test_jit_failure_carries_the_log_and_the_ptx_path(sim: kaio.Device, kaio_cache: Path) -> None:
    """The loader path of a launch, fed PTX that the simulator's parser rejects."""
    with pytest.raises(KaioLaunchError) as info:
        sim._modules.function(BROKEN_PTX, "broken")
    err = info.value
    assert "cannot load kernel `broken`" in str(err)
    assert "frobnicate" in err.log and "line 7" in err.log
    assert err.ptx_path is not None and Path(err.ptx_path).read_text() == BROKEN_PTX
    assert Path(err.ptx_path).parent == kaio_cache / "failed"
    assert err.ptx_path in str(err) and "--- JIT log ---" in str(err)


def test_jit_failure_without_a_cache_writes_a_temporary_file(
    sim: kaio.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIO_CACHE", "0")
    with pytest.raises(KaioLaunchError) as info:
        sim._modules.function(BROKEN_PTX.replace("frobnicate", "frobnicate2"), "broken")
    path = info.value.ptx_path
    assert path is not None and Path(path).read_text().count("frobnicate2") == 1
    os.unlink(path)


def test_a_launch_that_faults_on_the_simulator_names_the_thread(sim: kaio.Device) -> None:
    """Passing n larger than the buffers is not a type error; the simulator catches the access."""
    small = sim.zeros(10, np.float32)
    with pytest.raises(kaio.KaioMemoryError, match=r"kernel 'vector_add'") as info:
        vector_add[1](small, small, small, 256)
    assert info.value.thread[0] >= 10 and info.value.block == (0, 0, 0)


def test_a_wrongly_typed_grid_equal_to_a_cached_one_is_still_refused(saxpy_args) -> None:
    """Python says 2.0 == 2 and True == 1: the caches of validated shapes must not."""
    x, y = saxpy_args
    saxpy[2](x, y, 1.0, 64)
    saxpy[(1, 1)](x, y, 1.0, 64)
    saxpy[1, (256,)](x, y, 1.0, 64)
    for grid in (2.0, True, (1.0, 1), (True,)):
        with pytest.raises(KaioLaunchError, match="1 to 3 ints"):
            saxpy[grid](x, y, 1.0, 64)
    with pytest.raises(KaioLaunchError, match="1 to 3 ints"):
        saxpy[1, (256.0,)](x, y, 1.0, 64)
