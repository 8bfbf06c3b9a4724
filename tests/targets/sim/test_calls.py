"""call: device functions are inlined at load time (the nvcc fixture covers the common
callseq; these are the corner cases)."""

from __future__ import annotations

import numpy as np
import pytest

from kaio.errors import KaioLaunchError

from .conftest import HEADER, check_ptx

# f(x) = x < 10 ? 2x (early return from inside a branch) : g(x) + 1, with g(y) = y * y in a
# .local frame; h takes and returns .reg parameters.
FUNCTIONS = """
.func (.param .b32 g_ret) g(.param .b32 g_y)
{
	.local .align 4 .b8 frame[4];
	.reg .b32 %r<3>;
	ld.param.b32 %r1, [g_y];
	mul.lo.s32 %r2, %r1, %r1;
	st.local.b32 [frame], %r2;
	ld.local.b32 %r2, [frame];
	st.param.b32 [g_ret], %r2;
	ret;
}

.func (.param .b32 f_ret) f(.param .b32 f_x)
{
	.reg .pred %p1;
	.reg .b32 %r<4>;
	ld.param.b32 %r1, [f_x];
	setp.lt.s32 %p1, %r1, 10;
	@!%p1 bra BIG;
	shl.b32 %r2, %r1, 1;
	st.param.b32 [f_ret], %r2;
	ret;
BIG:
	{
	.param .b32 param0;
	st.param.b32 [param0], %r1;
	.param .b32 retval0;
	call.uni (retval0), g, (param0);
	ld.param.b32 %r3, [retval0];
	}
	add.s32 %r3, %r3, 1;
	st.param.b32 [f_ret], %r3;
	ret;
}

.func (.reg .b32 %h_out) h(.reg .b32 %h_in)
{
	add.s32 %h_out, %h_in, 1000;
	ret;
}
"""

KERNEL = HEADER + FUNCTIONS + """
.visible .entry k(.param .u64 k_out)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_out];
	mov.u32 %r1, %tid.x;
	mov.u32 %r5, 7;
	{
	.param .b32 param0;
	st.param.b32 [param0], %r1;
	.param .b32 retval0;
	call.uni (retval0), f, (param0);
	ld.param.b32 %r2, [retval0];
	}
	setp.eq.u32 %p1, %r1, 3;
	@%p1 call (%r5), h, (%r2);
	{
	.param .b32 param0;
	st.param.b32 [param0], %r5;
	.param .b32 retval0;
	call.uni (retval0), f, (param0);
	ld.param.b32 %r3, [retval0];
	}
	add.s32 %r4, %r2, %r3;
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r4;
	ret;
}
"""


def _f(x: int) -> int:
    return 2 * x if x < 10 else x * x + 1


def test_calls_are_inlined(sim, dev):
    check_ptx(KERNEL)
    out = dev.empty(64, np.uint32)
    sim.load(KERNEL).launch("k", (1, 1, 1), (64, 1, 1), dev.params(out))
    tid = np.arange(64)
    r5 = np.where(tid == 3, [_f(t) + 1000 for t in tid], 7)
    np.testing.assert_array_equal(dev.read(out), [_f(t) + _f(int(v)) for t, v in zip(tid, r5)])


def _call_kernel(call: str, extra: str = "") -> str:
    return HEADER + extra + f"""
.visible .entry k()
{{
	.reg .b32 %r<4>;
	.reg .b64 %rd<2>;
	{call}
	ret;
}}
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_call_kernel("call nowhere;"), "call of nowhere, which is not a .func"),
        (_call_kernel("call ext;", ".extern .func ext();\n"), "ext, which has no body"),
        (_call_kernel("call (%r1), h, (%r2, %r3);", FUNCTIONS), "h takes 1 argument"),
        (_call_kernel("call %rd1, ();", ""), "indirect calls"),
        (_call_kernel("call loop;", ".func loop()\n{\n\tcall loop;\n\tret;\n}\n"), "recursive call of loop"),
    ],
)
def test_unsupported_calls_are_load_errors(sim, text, message):
    with pytest.raises(KaioLaunchError, match=message) as info:
        sim.load(text)
    assert "line" in str(info.value)
