"""What the memory-bound ops compile to: every kernel assembles for sm_80 and sm_90 without
spills (the wheel's ptxas), rows kept whole up to the one-pass limits included, rows of halves
whose length is a multiple of 8 move 16 bytes per access (``ld.global.v4``), and 16-bit maps
compute two elements per packed instruction."""

from __future__ import annotations

import pytest

import kaio
from kaio import dtypes
from kaio.ops_library import rows as rowops
from kaio.ops_library.activations import gated_kernel
from kaio.ops_library.cross_entropy import cross_entropy_kernel
from kaio.ops_library.norms import layer_norm_kernel, rms_norm_kernel
from kaio.ops_library.rope import rope_blocks, rope_kernel
from kaio.ops_library.softmax import softmax_kernel

TYPES = {"f16": dtypes.f16, "bf16": dtypes.bf16, "f32": dtypes.f32}


def specs(t: dtypes.ScalarType) -> list[tuple[str, object, dict, tuple, int]]:
    """(name, kernel, constexprs, divisibility, warps) of each op at (8192, 4096), one pass and
    looped, and of rope at (B, S, 32, 128)."""
    b = rowops.blocks(8192, 4096)
    w = b.warps
    one = {"R": b.rows, "C": b.cols, "SINGLE": True}
    loop = {"R": b.rows, "C": b.cols, "SINGLE": False}
    cols = (("cols", 16), ("rows", 16))
    out = []
    for name, shape in (("", one), ("-looped", loop)):
        out += [
            (f"softmax{name}", softmax_kernel(t), {**shape, "LOG": False}, cols, w),
            (f"log_softmax{name}", softmax_kernel(t), {**shape, "LOG": True}, cols, w),
            (f"layer_norm{name}", layer_norm_kernel(t), {**shape, "HAS_W": True, "HAS_B": True}, cols, w),
            (f"rms_norm{name}", rms_norm_kernel(t), {**shape, "HAS_W": True, "HAS_RES": True}, cols, w),
            (f"cross_entropy{name}", cross_entropy_kernel(t, dtypes.i64), shape, cols, w),
        ]
    for n, name, kernel, extra in (  # rows kept whole in one program's registers: read once
        (rowops.ONE_PASS_LIGHT, "softmax", softmax_kernel(t), {"LOG": False}),
        (rowops.ONE_PASS_LIGHT, "log_softmax", softmax_kernel(t), {"LOG": True}),
        (rowops.ONE_PASS, "layer_norm", layer_norm_kernel(t), {"HAS_W": True, "HAS_B": True}),
        (rowops.ONE_PASS_LIGHT if t.bits == 16 else rowops.ONE_PASS, "rms_norm", rms_norm_kernel(t),
         {"HAS_W": True, "HAS_RES": True}),
    ):  # fmt: skip
        lb = rowops.blocks(1, n, one_pass=n)
        assert lb.single and lb.cols == n
        out.append((f"{name}-{n}", kernel, {"R": 1, "C": lb.cols, "SINGLE": True, **extra}, cols, lb.warps))
    half = (("half", 16), ("S", 16), ("H", 16))
    for act in (0, 1, 2):
        gated = {"R": b.rows, "C": b.cols, "ACT": act}
        out.append((f"gated{act}", gated_kernel(t), gated, (("d", 16), ("rows", 16)), w))
    for bshd in (True, False):
        for inter in (False, True):
            rb = rope_blocks(32, 64, inter)
            rope = {"R": rb.rows, "C": rb.cols, "BSHD": bshd, "INTERLEAVED": inter}
            out.append((f"rope-{bshd}-{inter}", rope_kernel(t, t), rope, half, rb.warps))
    return out


def compiled(kernel: object, arch: str, constexprs: dict, divisible: tuple, warps: int = 8) -> object:
    return kaio.compile(rowops.with_warps(kernel, warps), arch, __divisible__=divisible, **constexprs)


@pytest.mark.parametrize(
    "dtype, arch",
    [
        pytest.param(d, a, marks=[] if d == "bf16" else [pytest.mark.slow])  # the 16-bit path; f16, f32: slow
        for d in TYPES
        for a in ("sm_80", "sm_90")
    ],
)
def test_every_op_assembles_without_spills(dtype, arch):
    from kaio.targets.ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    for name, kernel, constexprs, divisible, warps in specs(TYPES[dtype]):
        c = compiled(kernel, arch, constexprs, divisible, warps)
        report = toolchain.assemble(c.ptx, arch)
        assert report.spill_stores[c.name] == 0 and report.spill_loads[c.name] == 0, name


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_rows_of_halves_load_and_store_16_bytes_at_a_time(dtype):
    for name, kernel, constexprs, divisible, warps in specs(TYPES[dtype]):
        text = compiled(kernel, "sm_80", constexprs, divisible, warps).ptx
        if name.startswith("rope") and constexprs["INTERLEAVED"]:
            assert "ld.global.b16" in text, name  # pairs are gathered (see rope's doc)
            continue
        assert "ld.global.v4.b32" in text, name
        if not name.startswith("cross_entropy"):  # its output is one f32 per row
            assert "st.global.v4.b32" in text, name


@pytest.mark.parametrize("dtype, arch", [("f16", "sm_80"), ("bf16", "sm_80"), ("bf16", "sm_90")])
def test_16_bit_math_is_packed_two_elements_per_instruction(dtype, arch):
    """The gate product of silu_and_mul and the fused add of rms_norm are one packed instruction
    per pair (bf16 add/mul before sm_90: fma.rn.bf16x2), and f32 results leave as pairs."""
    x2 = f"{dtype}x2"
    mul = f"mul.rn.{x2}" if dtype == "f16" or arch == "sm_90" else f"fma.rn.{x2}"
    add = f"add.rn.{x2}" if dtype == "f16" or arch == "sm_90" else f"fma.rn.{x2}"
    for name, kernel, constexprs, divisible, warps in specs(TYPES[dtype]):
        text = compiled(kernel, arch, constexprs, divisible, warps).ptx
        if name.startswith("gated"):
            assert mul in text and f"cvt.rn.{x2}.f32" in text, name
        if name.startswith("rms_norm"):  # with the residual
            assert add in text and f"cvt.rn.{x2}.f32" in text, name
        if name.startswith("softmax"):
            assert f"cvt.rn.{x2}.f32" in text, name


def test_unaligned_rows_of_halves_still_move_16_bytes_at_a_time():
    """A row length that is not a multiple of 8, or a base offset by one element: the loads read
    the aligned 16-byte chunks around each thread's 8 halves (``ld.global.v4`` + ``prmt``) and
    read only the row ends element by element; stores write the aligned chunk below each
    thread's bytes, completed with the previous lane's (``shfl.sync.up``)."""
    from kaio.targets.ptx import toolchain

    kernel = softmax_kernel(dtypes.f16)
    text = compiled(kernel, "sm_80", {"R": 1, "C": 4096, "SINGLE": True}, (("cols", 4),)).ptx
    assert "ld.global.v4.b32" in text and "st.global.v4.b32" in text and "prmt" not in text  # whole words
    for arch in ("sm_80", "sm_90"):
        for name, kernel, constexprs, divisible, warps in specs(dtypes.f16)[:5]:  # every row op, one pass
            c = compiled(kernel, arch, {**constexprs, "BASE_X": 2}, (("cols", 1), ("rows", 16)), warps)
            assert "ld.global.v4.b32" in c.ptx and "prmt.b32" in c.ptx, name
            if not name.startswith("cross_entropy"):
                assert "st.global.v4.b32" in c.ptx and "shfl.sync.up.b32" in c.ptx, name
            if toolchain.find_ptxas() is not None:
                report = toolchain.assemble(c.ptx, arch)
                assert report.spill_stores[c.name] == 0 and report.spill_loads[c.name] == 0, name


@pytest.mark.parametrize("dtype", ["bf16", pytest.param("f32", marks=pytest.mark.slow)])
def test_unaligned_rows_are_kept_whole_only_as_long_as_their_registers_allow(dtype):
    """Realigned accesses take registers: a row not 16-byte aligned is one tile up to
    ONE_PASS_UNALIGNED columns (no spills there), and loops past it."""
    from kaio.targets.ptx import toolchain

    t = TYPES[dtype]
    n = rowops.ONE_PASS_UNALIGNED
    assert rowops.blocks(1, n, one_pass=rowops.ONE_PASS_LIGHT, aligned=False).single
    assert not rowops.blocks(1, n + 1, one_pass=rowops.ONE_PASS_LIGHT, aligned=False).single
    assert rowops.blocks(1, n + 1, one_pass=rowops.ONE_PASS_LIGHT).single
    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    b = rowops.blocks(1, n, one_pass=n, aligned=False)
    base = 2 if t.bits == 16 else 4
    for name, kernel, extra in (
        ("softmax", softmax_kernel(t), {"LOG": False}),
        ("log_softmax", softmax_kernel(t), {"LOG": True}),
        ("layer_norm", layer_norm_kernel(t), {"HAS_W": True, "HAS_B": True, "BASE_W": base, "BASE_B": base}),
        ("rms_norm", rms_norm_kernel(t), {"HAS_W": True, "HAS_RES": True, "BASE_R": base, "BASE_W": base}),
    ):  # fmt: skip
        for arch in ("sm_80", "sm_90"):
            constexprs = {"R": 1, "C": b.cols, "SINGLE": True, "BASE_X": base, "BASE_Y": base, **extra}
            c = compiled(kernel, arch, constexprs, (("cols", 1), ("rows", 16)), b.warps)
            report = toolchain.assemble(c.ptx, arch)
            assert report.spill_stores[c.name] == 0 and report.spill_loads[c.name] == 0, (name, arch)
            if toolchain.find_ptxas() is not None:
                report = toolchain.assemble(c.ptx, arch)
                assert report.spill_stores[c.name] == 0 and report.spill_loads[c.name] == 0, name


# SASS instructions per element of Triton 3's one-row kernels (benchmarks/triton_kernels.py) for
# f16 rows of 4096, as benchmarks/codegen.py measures them, and kaio's own (at or below them): a
# change that adds an instruction to a row kernel shows here
TRITON_PER_ELEMENT = {
    "sm_80": {"rms_norm": 10.0, "layer_norm": 15.75, "softmax": 17.3125},
    "sm_90a": {"rms_norm": 10.4375, "layer_norm": 16.25, "softmax": 17.5},
}
KAIO_PER_ELEMENT = {
    "sm_80": {"rms_norm": 9.625, "layer_norm": 15.4375, "softmax": 16.4375},
    "sm_90a": {"rms_norm": 10.125, "layer_norm": 16.1875, "softmax": 16.8125},
}


@pytest.mark.parametrize("arch", sorted(TRITON_PER_ELEMENT))
@pytest.mark.parametrize("op", sorted(TRITON_PER_ELEMENT["sm_80"]))
def test_f16_rows_of_4096_take_no_more_sass_per_element_than_triton(op, arch):
    from kaio.targets.ptx import sass

    if not sass.tools_available():
        pytest.skip("ptxas/cuobjdump wheels not installed")
    t = dtypes.f16
    kernel, extra = {
        "rms_norm": (rms_norm_kernel(t), {"HAS_W": True}),
        "layer_norm": (layer_norm_kernel(t), {"HAS_W": True, "HAS_B": True}),
        "softmax": (softmax_kernel(t), {"LOG": False}),
    }[op]
    b = rowops.blocks(8192, 4096)
    c = compiled(kernel, arch, {"R": b.rows, "C": b.cols, "SINGLE": b.single, **extra},
                 (("cols", 16), ("rows", 16)), b.warps)  # fmt: skip
    report = sass.analyze(c.ptx, arch)[c.name]
    assert report.spill_bytes == 0
    opcodes = [i.opcode for i in report.instructions]
    if op != "softmax":  # masks preset (no select after a load), no division's slow-path call
        assert not [o for o in opcodes if o.startswith(("SEL", "CALL"))]
    # the statistics' cross-warp reductions share one scratch (one symbol, one address to build)
    assert len([line for line in c.ptx.splitlines() if line.strip().startswith(".shared")]) == 1
    assert "%laneid" not in c.ptx  # a thread's columns are one run of tid.x's bits
    per_element = report.counts["total"] * b.warps * 32 / 4096
    assert per_element <= KAIO_PER_ELEMENT[arch][op] <= TRITON_PER_ELEMENT[arch][op]
