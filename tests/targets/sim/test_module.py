"""Module-level features: variables and initializers, local memory, scoping blocks, debug
directives, struct parameters, special registers, mov pack/unpack, literal formats."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from kaio.errors import KaioLaunchError

from .conftest import HEADER, check_ptx

MODULE = HEADER + r"""
.file 1 "kernel.py"
.global .align 4 .u32 table[6] = {1, 0x10, 0b11, 010, 0xFFFFFFFF, 0x3F800000};
.const .align 8 .f64 coeffs[2] = {0d4000000000000000, 0d3FF8000000000000};
.global .align 8 .u64 table_address = table;

.func (.param .b32 unused_ret) helper(.param .b32 unused_in)
{
	.reg .b32 %r<2>;
	ld.param.b32 %r1, [unused_in];
	st.param.b32 [unused_ret], %r1;
	ret;
}

.visible .entry features(
	.param .u64 f_out,
	.param .align 8 .b8 f_pair[16]
)
.reqntid 64, 1, 1
{
	.local .align 4 .b8 scratch[16];
	.reg .pred 	%p<3>;
	.reg .b16 	%h<3>;
	.reg .b32 	%r<20>;
	.reg .f32 	%f<3>;
	.reg .f64 	%d<3>;
	.reg .b64 	%rd<12>;
	.loc 1 10 4
	ld.param.u64 	%rd1, [f_out];
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd2, %r1, 64;
	add.s64 	%rd3, %rd1, %rd2;

	// 0: table lookups with symbolic addresses (absolute and through a pointer)
	ld.global.u32 	%r2, [table+4];
	ld.global.u64 	%rd4, [table_address];
	ld.global.u32 	%r3, [%rd4+12];
	add.s32 	%r2, %r2, %r3;
	st.global.u32 	[%rd3], %r2;
	ld.global.u32 	%r4, [table+8];
	st.global.u32 	[%rd3+4], %r4;
	ld.global.u32 	%r4, [table+16];
	st.global.u32 	[%rd3+8], %r4;
	ld.global.f32 	%f1, [table+20];
	st.global.f32 	[%rd3+12], %f1;

	// 16: constant bank, f64
	ld.const.f64 	%d1, [coeffs];
	ld.const.f64 	%d2, [coeffs+8];
	mul.f64 	%d1, %d1, %d2;
	st.global.f64 	[%rd3+16], %d1;

	// 24: a struct parameter read field by field
	ld.param.u32 	%r5, [f_pair+4];
	ld.param.u64 	%rd5, [f_pair+8];
	cvt.u32.u64 	%r6, %rd5;
	add.s32 	%r5, %r5, %r6;
	st.global.u32 	[%rd3+24], %r5;

	// 28: local memory, directly and through a generic pointer
	mov.u64 	%rd6, scratch;
	cvta.local.u64 	%rd7, %rd6;
	st.local.u32 	[scratch+4], %r1;
	ld.u32 	%r7, [%rd7+4];
	mul.lo.s32 	%r7, %r7, 3;
	st.u32 	[%rd7+8], %r7;
	ld.local.u32 	%r8, [%rd6+8];
	st.global.u32 	[%rd3+28], %r8;

	// 32: scoping blocks: an inner %r1 shadows the outer one; labels are per block
	{
	.reg .b32 %r1;
	mov.u32 	%r1, 1000;
	setp.ne.u32 	%p1, %r1, 1000;
	@%p1 bra 	$L__inner;
	add.s32 	%r9, %r1, 1;
$L__inner:
	}
	add.s32 	%r9, %r9, %r1;
	st.global.u32 	[%rd3+32], %r9;

	// 36: Triton-style inline asm block: predicated one-element vector load
	// begin inline asm
	{
	.reg .pred %p_in;
	setp.lt.u32 %p_in, %r1, 32;
	mov.u32 %r10, 0x0;
	@%p_in ld.global.b32 { %r10 }, [ %rd4 + 0 ];
	}
	// end inline asm
	st.global.u32 	[%rd3+36], %r10;

	// 40: mov pack / unpack
	mov.b32 	%r11, {%h1, %h2};
	mov.u16 	%h1, 0x1234;
	mov.u16 	%h2, 0xABCD;
	mov.b32 	%r11, {%h1, %h2};
	st.global.u32 	[%rd3+40], %r11;
	mov.b64 	%rd8, {%r11, %r1};
	mov.b64 	{%r12, %r13}, %rd8;
	st.global.u32 	[%rd3+44], %r13;
	mov.b32 	{%h1, _}, %r11;
	{
	.reg .b16 lo16, hi16;  // nvcc's inline asm declares registers without a '%'
	mov.b32 	{_, hi16}, %r11;
	add.u16 	lo16, %h1, hi16;
	cvt.u32.u16 	%r14, lo16;
	}
	st.global.u32 	[%rd3+48], %r14;

	// 52: special registers
	mov.u32 	%r15, %lanemask_lt;
	st.global.u32 	[%rd3+52], %r15;
	mov.u32 	%r16, %nctaid.x;
	mov.u32 	%r17, %ntid.x;
	mad.lo.s32 	%r16, %r16, 1000, %r17;
	st.global.u32 	[%rd3+56], %r16;
	mov.u64 	%rd9, %clock64;
	mov.u64 	%rd10, %clock64;
	setp.gt.u64 	%p2, %rd10, %rd9;
	selp.u32 	%r18, 1, 0, %p2;
	st.global.u32 	[%rd3+60], %r18;
	ret;
}
"""


def test_module_features(sim, dev):
    check_ptx(MODULE)
    module = sim.load(MODULE)
    assert list(module.entries) == ["features"]  # .func bodies are not kernels
    assert module.entries["features"].params == [("f_out", "u64", 8), ("f_pair", "b8", 16)]
    out = dev.empty((64, 16), np.uint32)
    pair = struct.pack("<IIQ", 0, 5, 1000)
    module.launch("features", (3, 1, 1), (64, 1, 1), [struct.pack("<Q", out.address), pair])
    got = dev.read(out)
    tid = np.arange(64, dtype=np.uint32)
    assert (got[:, 0] == 0x10 + 8).all()  # table[1] + table[3] (010 is octal 8)
    assert (got[:, 1] == 3).all() and (got[:, 2] == 0xFFFFFFFF).all()
    assert (got[:, 3].view(np.float32) == 1.0).all()
    assert (got[:, 4:6].copy().view(np.float64)[:, 0] == 3.0).all()
    assert (got[:, 6] == 1005).all()
    np.testing.assert_array_equal(got[:, 7], 3 * tid)
    np.testing.assert_array_equal(got[:, 8], tid + 1001)  # inner %r1 = 1000 (+1), then outer %r1 = tid
    np.testing.assert_array_equal(got[:, 9], np.where(tid < 32, 1, 0))
    assert (got[:, 10] == 0xABCD1234).all()
    np.testing.assert_array_equal(got[:, 11], tid)
    assert (got[:, 12] == 0x1234 + 0xABCD).all()
    np.testing.assert_array_equal(got[:, 13], ((1 << (tid % 32)) - 1).astype(np.uint32))
    assert (got[:, 14] == 3064).all()
    assert (got[:, 15] == 1).all()


def test_module_variables_are_visible_to_the_host(sim):
    module = sim.load(MODULE)
    table = module.variables["table"]
    np.testing.assert_array_equal(sim.memory.read(table, 24).view(np.uint32), [1, 16, 3, 8, 0xFFFFFFFF, 0x3F800000])
    assert int(sim.memory.read(module.variables["table_address"], 8).view(np.uint64)[0]) == table


def test_reqntid_is_enforced(sim):
    module = sim.load(MODULE)
    with pytest.raises(KaioLaunchError, match="requires block"):
        module.launch("features", (1, 1, 1), (32, 1, 1), [b"\0" * 8, b"\0" * 16])


TRITON_LIKE = HEADER + """
.extern .shared .align 16 .b8 global_smem[];

.visible .entry triton_like(
	.param .u64 .ptr .global .align 1 triton_like_param_0,
	.param .u32 triton_like_param_1
)
.maxntid 128, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<5>;
	.loc	1 7 0
$L__func_begin0:
	.loc	1 7 0

	ld.param.u64 	%rd2, [triton_like_param_0];
	ld.param.u32 	%r3, [triton_like_param_1];
$L__tmp0:
	.loc	1 9 24
	mov.u32 	%r4, %tid.x;
	and.b32  	%r5, %r4, 127;
	setp.lt.s32 	%p1, %r5, %r3;
	mul.wide.s32 	%rd3, %r5, 4;
	add.s64 	%rd1, %rd2, %rd3;
	mov.b32 	%r2, 0f40490FDB;
	createpolicy.fractional.L2::evict_last.b64 	%rd3, 1.0;
	// begin inline asm
	@%p1 st.global.L2::cache_hint.b32 [ %rd1 + 0 ], { %r2 }, %rd3;
	// end inline asm
	ret;
$L__tmp1:
$L__func_end0:

}
	.file	1 "/path/to/kernel.py"
	.section	.debug_abbrev
	{
.b8 1
.b8 17
.b8 0
	}
	.section	.debug_info
	{
.b32 60
.b8 2
	}
	.section	.debug_macinfo	{	}
"""


def test_triton_style_module_with_debug_sections(sim, dev):
    check_ptx(TRITON_LIKE)
    module = sim.load(TRITON_LIKE)
    out = dev.empty(128, np.float32)
    module.launch("triton_like", (1, 1, 1), (128, 1, 1), [struct.pack("<Q", out.address), struct.pack("<i", 100)])
    got = dev.read(out)
    assert (got[:100] == np.float32(np.pi)).all() and np.isnan(got[100:]).all()


@pytest.mark.parametrize(
    "literal,ptx_type,expected",
    [("-1", "s32", -1), ("0xFFFFFFFF", "u32", 0xFFFFFFFF), ("017", "u32", 15), ("0b101", "u32", 5),
     ("0f3FC00000", "f32", 1.5), ("0d3FF8000000000000", "f32", 1.5), ("0fBF800000", "f32", -1.0), ("2.5", "f64", 2.5)],
)  # fmt: skip
def test_literal_formats(elementwise, literal, ptx_type, expected):
    out = elementwise(f"mov.{ptx_type} %d, {literal};", {"x": ("u32", np.zeros(4, np.uint32))}, {"d": ptx_type})["d"]
    assert (out == expected).all()
