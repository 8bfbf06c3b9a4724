"""ldmatrix and mma.sync against the PTX ISA's fragment tables, written here as plain loops
(independently of the simulator's vectorized layouts), and their warp-convergence checks."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kaio.errors import KaioSimError

from .conftest import HEADER, check_ptx

# --- ldmatrix --------------------------------------------------------------------------------

LDMATRIX = HEADER + """
.visible .entry ldm(.param .u64 p_tile, .param .u64 p_rows, .param .u64 p_out)
{{
	.reg .b32 %r<12>;
	.reg .b64 %rd<10>;
	.shared .align 16 .b8 tile[1024];
	mov.u32 %r1, %tid.x;
	// the 32 x 8 tile of u16 (512 bytes) into shared memory, 16 bytes per lane
	ld.param.u64 %rd1, [p_tile];
	mul.wide.u32 %rd2, %r1, 16;
	add.s64 %rd3, %rd1, %rd2;
	ld.global.v4.u32 {{%r2, %r3, %r4, %r5}}, [%rd3];
	mov.u32 %r6, tile;
	mul.lo.s32 %r7, %r1, 16;
	add.s32 %r8, %r6, %r7;
	st.shared.v4.u32 [%r8], {{%r2, %r3, %r4, %r5}};
	bar.sync 0;
	// this lane's row address: tile + 16 * rows[lane]
	ld.param.u64 %rd4, [p_rows];
	mul.wide.u32 %rd5, %r1, 4;
	add.s64 %rd6, %rd4, %rd5;
	ld.global.u32 %r9, [%rd6];
	mad.lo.s32 %r10, %r9, 16, %r6;
	{load}
	ld.param.u64 %rd7, [p_out];
	mul.wide.u32 %rd8, %r1, 16;
	add.s64 %rd9, %rd7, %rd8;
	st.global.v4.u32 [%rd9], {{%r2, %r3, %r4, %r5}};
	ret;
}}
"""


def ldmatrix_reference(tile: np.ndarray, rows: np.ndarray, count: int, trans: bool) -> np.ndarray:
    """out[lane][i]: register i of the lane, from the ISA's description of ldmatrix."""
    out = np.zeros((32, 4), dtype=np.uint32)
    for i in range(count):
        matrix = np.array([tile[rows[8 * i + r]] for r in range(8)])  # lanes 8i..8i+7 give rows
        if trans:
            matrix = matrix.T
        for lane in range(32):
            row, col = lane // 4, 2 * (lane % 4)
            out[lane, i] = int(matrix[row, col]) | int(matrix[row, col + 1]) << 16
    return out


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("space", [".shared", ".shared::cta", ""])
def test_ldmatrix_distributes_rows_as_the_isa_says(sim, dev, rng, count, trans, space):
    regs = ", ".join(f"%r{2 + i}" for i in range(count))
    address = "%r10" if space else "%rd9"
    generic = "" if space else "cvt.u64.u32 %rd9, %r10;\n\tcvta.shared.u64 %rd9, %rd9;\n\t"
    load = f"{generic}ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}{space}.b16 {{{regs}}}, [{address}];"
    text = LDMATRIX.format(load=load)
    check_ptx(text)
    tile = rng.integers(0, 2**16, (32, 8)).astype(np.uint16)
    rows = rng.permutation(32).astype(np.uint32)
    out = dev.empty((32, 4), np.uint32)
    dev.launch(sim.load(text), "ldm", (1, 1, 1), (32, 1, 1), dev.array(tile), dev.array(rows), out)
    got = dev.read(out)
    want = ldmatrix_reference(tile, rows, count, trans)
    np.testing.assert_array_equal(got[:, :count], want[:, :count])


def test_ldmatrix_on_diverged_lanes_is_reported(sim, dev):
    load = ".reg .pred %p1;\n\tsetp.lt.u32 %p1, %r1, 16;\n\t@%p1 ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r10];"
    text = LDMATRIX.format(load=load)
    check_ptx(text)
    args = dev.array(np.zeros((32, 8), np.uint16)), dev.array(np.arange(32, dtype=np.uint32)), dev.empty((32, 4), np.uint32)
    with pytest.raises(KaioSimError, match=r"lanes 16-31 that are not converged"):
        dev.launch(sim.load(text), "ldm", (1, 1, 1), (32, 1, 1), *args)


def test_ldmatrix_misaligned_row_is_a_memory_error(sim, dev):
    from kaio.errors import KaioMemoryError

    text = LDMATRIX.format(load="add.s32 %r10, %r10, 4;\n\tldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r10];")
    args = dev.array(np.zeros((32, 8), np.uint16)), dev.array(np.arange(32, dtype=np.uint32)), dev.empty((32, 4), np.uint32)
    with pytest.raises(KaioMemoryError, match="misaligned shared ldmatrix read"):
        dev.launch(sim.load(text), "ldm", (1, 1, 1), (32, 1, 1), *args)


# --- mma.sync ----------------------------------------------------------------------------------

MMA = HEADER + """
.visible .entry mma(.param .u64 p_a, .param .u64 p_b, .param .u64 p_c, .param .u64 p_d)
{{
	.reg .b32 %a<4>, %b<2>, %c<4>, %d<4>;
	.reg .b32 %r1;
	.reg .b64 %rd<4>;
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd1, %r1, 16;
	ld.param.u64 %rd2, [p_a];
	add.s64 %rd3, %rd2, %rd1;
	ld.global.v4.b32 {{%a0, %a1, %a2, %a3}}, [%rd3];
	ld.param.u64 %rd2, [p_b];
	add.s64 %rd3, %rd2, %rd1;
	ld.global.v2.b32 {{%b0, %b1}}, [%rd3];
	ld.param.u64 %rd2, [p_c];
	add.s64 %rd3, %rd2, %rd1;
	ld.global.v4.b32 {{%c0, %c1, %c2, %c3}}, [%rd3];
	{guard}mma.sync.aligned.{shape}.row.col{sat}.{td}.{ta}.{tb}.{tc} {{{d}}}, {{{a}}}, {{{b}}}, {{{c}}};
	ld.param.u64 %rd2, [p_d];
	add.s64 %rd3, %rd2, %rd1;
	st.global.v4.b32 [%rd3], {{%d0, %d1, %d2, %d3}};
	ret;
}}
"""
_NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "s8": np.int8, "u8": np.uint8, "f32": np.float32, "s32": np.int32}


def pack_a(a: np.ndarray, per: int) -> np.ndarray:
    """(32 lanes, 4 registers) of raw bits holding A (16 x K), per the ISA's A-fragment table."""
    regs = a.shape[1] * 16 // 32 // per
    out = np.zeros((32, 4 * 4), dtype=np.uint8)
    raw = a.view(np.uint8).reshape(16, a.shape[1], a.itemsize)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(regs):
            for j in range(per):
                row = g + 8 * (r % 2)
                col = (t + 4 * (r // 2)) * per + j
                out[lane, (r * per + j) * a.itemsize : (r * per + j + 1) * a.itemsize] = raw[row, col]
    return out.view(np.uint32)


def pack_b(b: np.ndarray, per: int) -> np.ndarray:
    """(32, 2 registers, padded to 4) of B (K x 8): register r holds rows (t + 4r) * per + j of
    column g."""
    regs = b.shape[0] * 8 // 32 // per
    out = np.zeros((32, 4 * 4), dtype=np.uint8)
    raw = b.view(np.uint8).reshape(b.shape[0], 8, b.itemsize)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(regs):
            for j in range(per):
                k = (t + 4 * r) * per + j
                out[lane, (r * per + j) * b.itemsize : (r * per + j + 1) * b.itemsize] = raw[k, g]
    return out.view(np.uint32)


def pack_c(c: np.ndarray) -> np.ndarray:
    """(32, 4 elements) of C/D (16 x 8): element i is row g + 8 (i // 2), column 2t + i % 2."""
    out = np.zeros((32, 4), dtype=c.dtype)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            out[lane, i] = c[g + 8 * (i // 2), 2 * t + i % 2]
    return out


def unpack_c(frag: np.ndarray) -> np.ndarray:
    c = np.zeros((16, 8), dtype=frag.dtype)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            c[g + 8 * (i // 2), 2 * t + i % 2] = frag[lane, i]
    return c


def _inputs(rng: np.random.Generator, t: str, shape: tuple[int, int]) -> np.ndarray:
    if t == "s8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if t == "u8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.standard_normal(shape).astype(_NP[t])


CASES = [  # shape, D, A, B, C
    ("m16n8k16", "f32", "f16", "f16", "f32"),
    ("m16n8k16", "f32", "bf16", "bf16", "f32"),
    ("m16n8k16", "f16", "f16", "f16", "f16"),
    ("m16n8k8", "f32", "f16", "f16", "f32"),
    ("m16n8k8", "f32", "bf16", "bf16", "f32"),
    ("m16n8k32", "s32", "s8", "s8", "s32"),
    ("m16n8k32", "s32", "u8", "s8", "s32"),
    ("m16n8k32", "s32", "u8", "u8", "s32"),
    ("m16n8k16", "s32", "s8", "u8", "s32"),
]


def _run_mma(sim, dev, rng, shape, td, ta, tb, tc, sat="", warps=1, c_fill=None):  # type: ignore[no-untyped-def]
    k = int(shape.split("k")[1])
    per = 32 // (8 * np.dtype(_NP[ta]).itemsize)
    n_a, n_b = 16 * k // 32 // per, k * 8 // 32 // per
    n_c, n_d = (2 if tc == "f16" else 4), (2 if td == "f16" else 4)
    text = MMA.format(
        shape=shape, sat=sat, td=td, ta=ta, tb=tb, tc=tc, guard="",
        d=", ".join(f"%d{i}" for i in range(n_d)), a=", ".join(f"%a{i}" for i in range(n_a)),
        b=", ".join(f"%b{i}" for i in range(n_b)), c=", ".join(f"%c{i}" for i in range(n_c)),
    )  # fmt: skip
    check_ptx(text)
    a = [_inputs(rng, ta, (16, k)) for _ in range(warps)]
    b = [_inputs(rng, tb, (k, 8)) for _ in range(warps)]
    c = [(rng.integers(-(2**20), 2**20, (16, 8)) if tc == "s32" else rng.standard_normal((16, 8))).astype(_NP[tc]) for _ in range(warps)]
    if c_fill is not None:
        c = [np.full((16, 8), c_fill, dtype=_NP[tc]) for _ in range(warps)]
    frag_c = [pack_c(x) for x in c]
    if tc == "f16":  # two f16x2 registers: elements 0,1 and 2,3
        frag_c = [np.pad(f.view(np.uint32), ((0, 0), (0, 2))) for f in frag_c]
    out = dev.empty((32 * warps, 4), np.uint32)
    dev.launch(
        sim.load(text), "mma", (1, 1, 1), (32 * warps, 1, 1),
        dev.array(np.concatenate([pack_a(x, per) for x in a])), dev.array(np.concatenate([pack_b(x, per) for x in b])),
        dev.array(np.concatenate([f.view(np.uint32) for f in frag_c])), out,
    )  # fmt: skip
    raw = dev.read(out).reshape(warps, 32, 4)
    got = [unpack_c(r[:, :2].copy().view(np.float16) if td == "f16" else r.view(_NP[td])) for r in raw]
    wide = np.int64 if ta in ("s8", "u8") else np.float64
    want = [x.astype(wide) @ y.astype(wide) + z.astype(wide) for x, y, z in zip(a, b, c)]
    return got, want


@pytest.mark.parametrize(("shape", "td", "ta", "tb", "tc"), CASES)
def test_mma_matches_the_isa_fragment_layout(sim, dev, rng, shape, td, ta, tb, tc):
    got, want = _run_mma(sim, dev, rng, shape, td, ta, tb, tc, warps=2)
    for g, w in zip(got, want):
        if td == "s32":
            np.testing.assert_array_equal(g, w.astype(np.int32))
        else:  # one rounding of the exact sum (f16 inputs: the float64 sum is exact)
            np.testing.assert_array_equal(g, w.astype(_NP[td]))


def test_integer_mma_wraps_or_saturates(sim, dev, rng):
    # C = 2^31 - 2^16: adding up to 32 * 255 * 255 overflows s32
    for sat in ("", ".satfinite"):
        got, want = _run_mma(sim, dev, rng, "m16n8k32", "s32", "u8", "u8", "s32", sat=sat, c_fill=2**31 - 2**16)
        exact = want[0]
        assert (exact > 2**31 - 1).any()
        expected = np.clip(exact, -(2**31), 2**31 - 1) if sat else exact
        np.testing.assert_array_equal(got[0], expected.astype(np.int32))


def test_mma_on_diverged_lanes_is_reported(sim, dev):
    text = MMA.replace("{guard}", ".reg .pred %p1;\n\tsetp.eq.u32 %p1, %r1, 0;\n\t@%p1 ")
    text = text.format(shape="m16n8k16", sat="", td="f32", ta="f16", tb="f16", tc="f32",
                       d="%d0, %d1, %d2, %d3", a="%a0, %a1, %a2, %a3", b="%b0, %b1", c="%c0, %c1, %c2, %c3")  # fmt: skip
    check_ptx(text)
    bufs = [dev.array(np.zeros((32, 4), np.uint32)) for _ in range(3)] + [dev.empty((32, 4), np.uint32)]
    with pytest.raises(KaioSimError, match=r"mma\.sync.*lanes 1-31 that are not converged"):
        dev.launch(sim.load(text), "mma", (1, 1, 1), (32, 1, 1), *bufs)


def test_mma_in_a_partial_warp_is_reported(sim, dev):
    text = MMA.format(shape="m16n8k16", sat="", td="f32", ta="f16", tb="f16", tc="f32", guard="",
                      d="%d0, %d1, %d2, %d3", a="%a0, %a1, %a2, %a3", b="%b0, %b1", c="%c0, %c1, %c2, %c3")  # fmt: skip
    bufs = [dev.array(np.zeros((48, 4), np.uint32)) for _ in range(3)] + [dev.empty((48, 4), np.uint32)]
    with pytest.raises(KaioSimError, match="needs all 32 lanes"):
        dev.launch(sim.load(text), "mma", (1, 1, 1), (48, 1, 1), *bufs)


@pytest.mark.parametrize(
    ("instruction", "message"),
    [
        ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f16 {%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1};", "accumulators"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%d0, %d1, %d2, %d3}, {%a0, %a1}, {%b0, %b1}, {%c0, %c1, %c2, %c3};", "A is a vector of 4"),
        ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f16 {%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1};", "D and C have one type"),
        ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%d0, %d1, %d2, %d3}, {%a0, %a1}, {%b0, %b1}, {%c0, %c1, %c2, %c3};", "supported shapes"),
        ("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%d0}, [%rd1];", "writes 2 register"),
        ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%d0}, [%rd1];", "only the .m8n8 shape"),
    ],
)
def test_malformed_tensor_core_instructions_are_load_errors(sim, instruction, message):
    from kaio.errors import KaioLaunchError

    text = HEADER + f".visible .entry k()\n{{\n\t.reg .b32 %a<4>, %b<2>, %c<4>, %d<4>;\n\t.reg .b64 %rd1;\n\t{instruction}\n\tret;\n}}\n"
    with pytest.raises(KaioLaunchError, match=message):
        sim.load(text)


def test_warps_may_run_mma_at_different_instructions(sim, dev, rng):
    # warp 0 takes one mma, warp 1 another (C negated): divergence between warps is fine
    text = MMA.format(shape="m16n8k16", sat="", td="f32", ta="f16", tb="f16", tc="f32", guard="",
                      d="%d0, %d1, %d2, %d3", a="%a0, %a1, %a2, %a3", b="%b0, %b1", c="%c0, %c1, %c2, %c3")  # fmt: skip
    mma = next(line.strip() for line in text.splitlines() if "mma.sync" in line)
    negate = "".join(f"\tneg.f32 %c{i}, %c{i};\n" for i in range(4))
    branchy = f".reg .pred %p1;\n\tsetp.ge.u32 %p1, %r1, 32;\n\t@%p1 bra SECOND;\n\t{mma}\n\tbra.uni JOIN;\nSECOND:\n{negate}\t{mma}\nJOIN:"
    text = text.replace(mma, branchy)
    check_ptx(text)
    a = [rng.standard_normal((16, 16)).astype(np.float16) for _ in range(2)]
    b = [rng.standard_normal((16, 8)).astype(np.float16) for _ in range(2)]
    c = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(2)]
    out = dev.empty((64, 4), np.uint32)
    dev.launch(
        sim.load(text), "mma", (1, 1, 1), (64, 1, 1), dev.array(np.concatenate([pack_a(x, 2) for x in a])),
        dev.array(np.concatenate([pack_b(x, 2) for x in b])), dev.array(np.concatenate([pack_c(x) for x in c])), out,
    )  # fmt: skip
    raw = dev.read(out).reshape(2, 32, 4).view(np.float32)
    for w, sign in ((0, 1), (1, -1)):
        want = a[w].astype(np.float64) @ b[w].astype(np.float64) + sign * c[w].astype(np.float64)
        np.testing.assert_array_equal(unpack_c(raw[w]), want.astype(np.float32))
