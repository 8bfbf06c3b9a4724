"""Every atomic operation, in shared and global memory and through generic addresses, against
a sequential reference in thread order."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import HEADER, check_ptx

OPS = {
    "add.u32": lambda m, b: (m + b) & 0xFFFFFFFF,
    "min.s32": lambda m, b: min(m, b),
    "max.u32": lambda m, b: max(m, b),
    "and.b32": lambda m, b: m & b,
    "or.b32": lambda m, b: m | b,
    "xor.b32": lambda m, b: m ^ b,
    "exch.b32": lambda m, b: b,
    "inc.u32": lambda m, b: 0 if m >= b else m + 1,
    "dec.u32": lambda m, b: b if (m == 0 or m > b) else m - 1,
}


def _kernel(op: str, space: str) -> str:
    # thread i applies `op` with operand b[i] to slot[i % slots]; old values are stored.
    # "generic" works on the shared cells through a generic (cvta.shared) address.
    sh = space != "global"
    target = {"global": "global.", "shared": "shared.", "generic": ""}[space]
    address = {"global": "%rd7", "shared": "%rd9", "generic": "%rd10"}[space]
    return HEADER + f"""
.visible .entry k(.param .u64 k_b, .param .u64 k_old, .param .u64 k_slots, .param .u32 k_nslots)
{{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<12>;
	.shared .align 4 .b8 cells[256];
	ld.param.u64 	%rd1, [k_b];
	ld.param.u64 	%rd2, [k_old];
	ld.param.u64 	%rd3, [k_slots];
	ld.param.u32 	%r1, [k_nslots];
	mov.u32 	%r2, %tid.x;
	mul.wide.u32 	%rd4, %r2, 4;
	add.s64 	%rd5, %rd1, %rd4;
	ld.global.u32 	%r3, [%rd5];
	rem.u32 	%r4, %r2, %r1;
	mul.wide.u32 	%rd6, %r4, 4;
	add.s64 	%rd7, %rd3, %rd6;
	mov.u64 	%rd8, cells;
	add.s64 	%rd9, %rd8, %rd6;
	cvta.shared.u64 	%rd10, %rd9;
	setp.lt.u32 	%p1, %r2, %r1;
	@!%p1 bra 	$INIT_DONE;
	ld.global.u32 	%r5, [%rd7];
	{"st.shared.u32 	[%rd9], %r5;" if sh else ""}
$INIT_DONE:
	bar.sync 	0;
	atom.{target}{op} 	%r6, [{address}], %r3;
	add.s64 	%rd11, %rd2, %rd4;
	st.global.u32 	[%rd11], %r6;
	bar.sync 	0;
	@!%p1 bra 	$END;
	{"ld.shared.u32 	%r7, [%rd9];" if sh else "ld.global.u32 	%r7, [%rd7];"}
	st.global.u32 	[%rd7], %r7;
$END:
	ret;
}}
"""


@pytest.mark.parametrize("space", ["global", "shared", "generic"])
@pytest.mark.parametrize("op", list(OPS))
def test_atomic_ops_in_thread_order(sim, dev, rng, op, space):
    text = _kernel(op, space)
    check_ptx(text)
    module = sim.load(text)
    n, nslots = 96, 5
    if op.startswith(("inc", "dec")):
        b = rng.integers(0, 6, n).astype(np.uint32)
        init = rng.integers(0, 6, nslots).astype(np.uint32)
    else:
        b = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        init = rng.integers(0, 2**32, nslots, dtype=np.uint64).astype(np.uint32)
    signed = op.endswith("s32")
    view = (lambda a: [int(v) for v in a.view(np.int32)]) if signed else (lambda a: [int(v) for v in a])
    slots, old = dev.array(init), dev.empty(n, np.uint32)
    dev.launch(module, "k", (1, 1, 1), (n, 1, 1), dev.array(b), old, slots, np.uint32(nslots))
    mem = view(init)
    want_old = []
    for i, bv in enumerate(view(b)):
        s = i % nslots
        want_old.append(mem[s])
        mem[s] = OPS[op](mem[s], bv)
    assert view(dev.read(old)) == want_old
    assert view(dev.read(slots)) == mem


ATOM_MISC = HEADER + """
.visible .entry misc(.param .u64 m_f64, .param .u64 m_h2, .param .u64 m_cas, .param .u64 m_x, .param .u64 m_h2old)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<12>;
	.reg .f64 	%d<4>;
	.reg .b64 	%rd<12>;
	ld.param.u64 	%rd1, [m_f64];
	ld.param.u64 	%rd2, [m_h2];
	ld.param.u64 	%rd3, [m_cas];
	ld.param.u64 	%rd4, [m_x];
	ld.param.u64 	%rd9, [m_h2old];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd5, %r1, 8;
	add.s64 	%rd6, %rd4, %rd5;
	ld.global.f64 	%d1, [%rd6];
	red.global.add.f64 	[%rd1], %d1;
	cvt.rn.f32.f64 	%r2, %d1;
	cvt.rn.f16x2.f32 	%r3, %r2, %r2;
	atom.global.add.noftz.f16x2 	%r4, [%rd2], %r3;
	mul.wide.u32 	%rd10, %r1, 4;
	add.s64 	%rd11, %rd9, %rd10;
	st.global.u32 	[%rd11], %r4;
	// first thread to find 0 claims the cell with its id + 1; everyone else sees the winner
	add.s32 	%r5, %r1, 1;
	atom.cas.b32 	%r6, [%rd3], 0, %r5;
	ret;
}
"""


def test_f64_add_packed_half_add_and_generic_cas(sim, dev, rng):
    check_ptx(ATOM_MISC)
    module = sim.load(ATOM_MISC)
    n = 64
    x = rng.standard_normal(n)
    f64, h2, cas = dev.array(np.zeros(1)), dev.array(np.zeros(2, np.float16)), dev.array(np.zeros(1, np.uint32))
    h2old = dev.empty(n, np.uint32)
    dev.launch(module, "misc", (1, 1, 1), (n, 1, 1), f64, h2, cas, dev.array(x), h2old)
    assert dev.read(f64)[0] == np.cumsum(x)[-1]  # sequential f64 sum in thread order
    halves = x.astype(np.float32).astype(np.float16)
    acc = np.float16(0)
    seen = []
    for v in halves:
        seen.append(acc)
        acc = np.float16(np.float32(acc) + np.float32(v))
    np.testing.assert_array_equal(dev.read(h2), [acc, acc])
    np.testing.assert_array_equal(dev.read(h2old).view(np.float16).reshape(-1, 2)[:, 0], seen)
    assert dev.read(cas)[0] == 1
