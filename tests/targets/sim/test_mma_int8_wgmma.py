"""wgmma on 8-bit inputs (sm_90a, K = 32, K-major operands): ``.s32.{s8,u8}.{s8,u8}`` (exact
int32 sums, wrapping or ``.satfinite``) and ``.f32.{e4m3,e5m2}`` against numpy, with the
operands written into shared memory here in the ISA's canonical no-swizzle K-major layout and
the accumulator read back through the ISA's D-fragment table (plain loops in test_hopper), A
from a descriptor or from registers; planted bugs (swapped A registers, operands named with the
wrong type) must be caught; malformed forms are load errors; ptxas -arch=sm_90a assembles each."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kaio.errors import KaioLaunchError

from .test_hopper import accumulator_matrix, check_sm90a
from .test_tensor_core import pack_a

HEADER = ".version 8.4\n.target sm_90a\n.address_size 64\n"  # mixed s8/u8 wgmma: PTX 8.4
NP = {"s8": np.int8, "u8": np.uint8, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
K = 32  # one k32 step: 32 bytes of K per row
SBO, CORE = 128, 128  # 8-row groups 128 bytes apart; a 16-byte k chunk is LBO further

KERNEL = HEADER + """
.visible .entry wg8(.param .u64 p_img, .param .u64 p_areg, .param .u64 p_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<12>;
	.reg .b32 %d<{acc}>;
	.reg .b32 %v<4>;
	.reg .b32 %ra<4>;
	.shared .align 128 .b8 smem[{smem}];
	ld.param.u64 %rd1, [p_img];
	ld.param.u64 %rd2, [p_areg];
	ld.param.u64 %rd3, [p_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, smem;
	mov.u32 %r5, %r1;
COPY:  // 16-byte chunks of the shared image, 128 threads at a time
	setp.ge.u32 %p1, %r5, {chunks};
	@%p1 bra COPIED;
	mul.wide.u32 %rd4, %r5, 16;
	add.s64 %rd5, %rd1, %rd4;
	ld.global.v4.b32 {{%v0, %v1, %v2, %v3}}, [%rd5];
	mad.lo.s32 %r6, %r5, 16, %r2;
	st.shared.v4.b32 [%r6], {{%v0, %v1, %v2, %v3}};
	add.s32 %r5, %r5, 128;
	bra COPY;
COPIED:
	bar.sync 0;
	fence.proxy.async.shared::cta;  // the generic writes, visible to wgmma's operand reads
	mul.wide.u32 %rd6, %r1, 16;
	add.s64 %rd6, %rd2, %rd6;
	ld.global.v4.b32 {{%ra0, %ra1, %ra2, %ra3}}, [%rd6];
	cvt.u64.u32 %rd7, %r2;
	shr.u64 %rd7, %rd7, 4;
	and.b64 %rd7, %rd7, 16383;
	or.b64 %rd8, %rd7, {desc_a};
	add.s64 %rd9, %rd7, {b_start};
	or.b64 %rd9, %rd9, {desc_b};
{init}
	setp.ne.u32 %p3, {scale_d}, 0;
	wgmma.fence.sync.aligned;
	wgmma.mma_async.sync.aligned.m64n{n}k32{sat}.{td}.{ta}.{tb} {{{accs}}}, {a}, %rd9, %p3{imm};
	wgmma.commit_group.sync.aligned;
	wgmma.wait_group.sync.aligned 0;
	mul.wide.u32 %rd10, %r1, {row_bytes};
	add.s64 %rd10, %rd3, %rd10;
{stores}
	ret;
}}
"""


def canonical(m: np.ndarray) -> np.ndarray:
    """A rows x 32-byte K-major slice in the no-swizzle canonical layout: byte (r, kb) at
    (kb / 16) LBO + (r / 8) SBO + (r % 8) 16 + kb % 16, LBO = rows * 16."""
    rows = m.shape[0]
    raw = m.view(np.uint8).reshape(rows, K)
    out = np.zeros(rows * K, np.uint8)
    for r in range(rows):
        for kb in range(K):
            out[(kb // 16) * rows * 16 + (r // 8) * SBO + (r % 8) * 16 + kb % 16] = raw[r, kb]
    return out


def _desc(lbo: int) -> int:
    return ((lbo >> 4) << 16) | ((SBO >> 4) << 32)


def kernel(n: int, td: str, ta: str, tb: str, sat: str = "", a_regs: str | None = None, scale_d: int = 0, c: int = 0) -> str:
    accs = ", ".join(f"%d{i}" for i in range(n // 2))
    stores = "\n".join(f"\tst.global.v4.b32 [%rd10+{16 * j}], {{%d{4 * j}, %d{4 * j + 1}, %d{4 * j + 2}, %d{4 * j + 3}}};" for j in range(n // 8))
    return KERNEL.format(
        acc=n // 2, smem=(64 + n) * K, chunks=(64 + n) * K // 16, desc_a=_desc(64 * 16), b_start=64 * K >> 4,
        desc_b=_desc(n * 16), init="\n".join(f"\tmov.b32 %d{i}, {c};" for i in range(n // 2)), scale_d=scale_d,
        n=n, sat=sat, td=td, ta=ta, tb=tb, accs=accs, a="%rd8" if a_regs is None else "{" + a_regs + "}",
        imm="" if td == "s32" else ", 1, 1", row_bytes=n * 2, stores=stores,
    )  # fmt: skip


def a_registers(a: np.ndarray) -> np.ndarray:
    """(128 threads, 4) A registers: warp w holds the m16n8k32 A fragment of rows 16w.. (pack_a)."""
    return np.concatenate([pack_a(a[16 * w : 16 * w + 16], 4) for w in range(4)])


def run(sim, dev, text, a, b, c_value=0):  # type: ignore[no-untyped-def]
    n = b.shape[1]
    image = np.concatenate([canonical(a), canonical(np.ascontiguousarray(b.T))])
    out = dev.empty((128, n // 2), np.uint32)
    sim.load(text).launch("wg8", 1, 128, dev.params(dev.array(image), dev.array(a_registers(a)), out))
    return accumulator_matrix(dev.read(out).view(np.float32), n).view(np.uint32)


def values(rng, t, shape):  # type: ignore[no-untyped-def]
    if t in ("s8", "u8"):
        info = np.iinfo(NP[t])
        return rng.integers(info.min, info.max + 1, shape).astype(NP[t])
    return rng.standard_normal(shape).astype(np.float32).astype(NP[t])


def exact(a, b):  # type: ignore[no-untyped-def]
    wide = np.int64 if a.dtype.kind in "iu" else np.float64
    return a.astype(wide) @ b.astype(wide)


@pytest.mark.parametrize(
    "n,ta,tb,a_in_regs",
    [(64, "s8", "s8", False), (128, "u8", "s8", True), (64, "s8", "u8", False), (64, "e4m3", "e5m2", False),
     (128, "e5m2", "e4m3", True)],
)  # fmt: skip
def test_8bit_wgmma_matches_numpy(sim, dev, rng, n, ta, tb, a_in_regs):
    td = "s32" if ta in ("s8", "u8") else "f32"
    text = kernel(n, td, ta, tb, a_regs="%ra0, %ra1, %ra2, %ra3" if a_in_regs else None)
    check_sm90a(text, "wg8")
    a, b = values(rng, ta, (64, K)), values(rng, tb, (K, n))
    got = run(sim, dev, text, a, b)
    if td == "s32":
        np.testing.assert_array_equal(got.view(np.int32), exact(a, b).astype(np.int32))
    else:
        np.testing.assert_array_equal(got.view(np.float32), exact(a, b).astype(np.float32))


@pytest.mark.parametrize("sat", ["", ".satfinite"])
def test_integer_wgmma_accumulates_and_wraps_or_saturates(sim, dev, sat):
    c = 2**31 - 2**16  # + 32 * 255 * 255 overflows int32
    text = kernel(64, "s32", "u8", "u8", sat=sat, scale_d=1, c=c)
    check_sm90a(text, "wg8")
    a, b = np.full((64, K), 255, np.uint8), np.full((K, 64), 255, np.uint8)
    got = run(sim, dev, text, a, b).view(np.int32)
    total = c + 32 * 255 * 255
    want = min(total, 2**31 - 1) if sat else total - 2**32
    np.testing.assert_array_equal(got, np.full((64, 64), want, np.int32))


@pytest.mark.parametrize("a_regs", ["%ra1, %ra0, %ra2, %ra3", "%ra0, %ra2, %ra1, %ra3"])
def test_planted_a_register_bugs_are_caught(sim, dev, rng, a_regs):
    a, b = values(rng, "s8", (64, K)), values(rng, "s8", (K, 64))
    got = run(sim, dev, kernel(64, "s32", "s8", "s8", a_regs=a_regs), a, b).view(np.int32)
    assert not np.array_equal(got, exact(a, b).astype(np.int32))


def test_planted_signedness_bug_is_caught(sim, dev, rng):
    # u8 data read as s8: values of 128 and more turn negative
    a, b = values(rng, "u8", (64, K)), values(rng, "u8", (K, 64))
    got = run(sim, dev, kernel(64, "s32", "s8", "u8"), a, b).view(np.int32)
    assert not np.array_equal(got, exact(a, b).astype(np.int32))


@pytest.mark.parametrize(
    "form,message",
    [
        ("m64n64k32.s32.s8.s8 {{ACC}}, %rd8, %rd9, %p3, 1, 1;", "d, a, b-desc, scale-d"),
        ("m64n64k32.f32.e4m3.e4m3 {{ACC}}, %rd8, %rd9, %p3, 1, 1, 0, 0;", "imm-scale-a, imm-scale-b"),
        ("m64n40k32.s32.s8.s8 {{ACC40}}, %rd8, %rd9, %p3;", "integer wgmma takes N in"),
        ("m64n64k32.s32.e4m3.s8 {{ACC}}, %rd8, %rd9, %p3;", "the simulator supports"),
        ("m64n64k16.f32.e4m3.e4m3 {{ACC}}, %rd8, %rd9, %p3, 1, 1, 0, 0;", "the simulator supports"),
        ("m64n64k32.satfinite.f32.e4m3.e4m3 {{ACC}}, %rd8, %rd9, %p3, 1, 1;", "satfinite applies to integer"),
    ],
)
def test_malformed_8bit_wgmma_is_a_load_error(sim, form, message):
    acc = ", ".join(f"%d{i}" for i in range(32))
    acc40 = ", ".join(f"%d{i}" for i in range(20))
    body = form.replace("{{ACC}}", "{" + acc + "}").replace("{{ACC40}}", "{" + acc40 + "}")
    text = HEADER + (
        ".visible .entry k()\n{\n\t.reg .pred %p3;\n\t.reg .b64 %rd<10>;\n\t.reg .b32 %d<32>;\n"
        f"\twgmma.mma_async.sync.aligned.{body}\n\tret;\n}}\n"
    )
    with pytest.raises(KaioLaunchError, match=message):
        sim.load(text)
