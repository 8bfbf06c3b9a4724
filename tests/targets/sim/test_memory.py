"""The simulated device memory: the host API, guard gaps, and the sanitizer checks of every
state space."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioMemoryError

from .conftest import HEADER, check_ptx


def test_alloc_alignment_and_distinct_addresses(sim):
    addrs = [sim.memory.alloc(n) for n in (1, 256, 1000, 0, 4096)]
    assert all(a % 256 == 0 and a != 0 for a in addrs)
    assert len(set(addrs)) == len(addrs)
    spans = sorted(addrs)
    assert all(b - a >= 512 for a, b in zip(spans, spans[1:]))  # data plus a guard gap


def test_write_read_roundtrip_and_host_bounds(sim, rng):
    data = rng.integers(0, 256, 1000).astype(np.uint8)
    a = sim.memory.alloc(1000)
    sim.memory.write(a, data)
    sim.memory.write(a + 10, b"\x01\x02")
    data[10:12] = [1, 2]
    np.testing.assert_array_equal(sim.memory.read(a, 1000), data)
    got = sim.memory.read(a, 4)
    got[:] = 0  # a copy, not a view
    assert sim.memory.read(a, 1)[0] == data[0]
    with pytest.raises(ValueError, match="inside one allocation"):
        sim.memory.write(a + 999, b"\0\0")
    with pytest.raises(ValueError, match="inside one allocation"):
        sim.memory.read(a - 4, 8)


def test_free_reuses_space_and_reset_releases_everything(sim):
    a = sim.memory.alloc(4096)
    b = sim.memory.alloc(4096)
    sim.memory.free(a)
    with pytest.raises(ValueError):
        sim.memory.free(a)
    c = sim.memory.alloc(1024)
    assert c == a  # first fit into the freed hole
    assert sim.memory.allocation_of(b + 100) == (b, 4096)
    sim.memory.reset()
    assert sim.memory.bytes_allocated == 0 and sim.memory.capacity == 0
    assert sim.memory.allocation_of(b) is None


LOADER = HEADER + """
.visible .entry peek(.param .u64 src, .param .u64 dst, .param .u64 offset)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd1, [src];
	ld.param.u64 	%rd2, [dst];
	ld.param.u64 	%rd3, [offset];
	add.s64 	%rd4, %rd1, %rd3;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd2], %r1;
	ret;
}
"""


def _peek(sim, src: int, dst: int, offset: int) -> None:  # type: ignore[no-untyped-def]
    module = sim.load(LOADER)
    module.launch("peek", (1, 1, 1), (1, 1, 1), [struct.pack("<Q", src), struct.pack("<Q", dst), struct.pack("<q", offset)])


def test_guard_gap_catches_a_read_just_past_the_end(sim):
    check_ptx(LOADER)
    a = sim.memory.alloc(100)
    b = sim.memory.alloc(4)
    _peek(sim, a, b, 96)
    with pytest.raises(KaioMemoryError, match="out-of-bounds global load") as info:
        _peek(sim, a, b, 100)  # 4 bytes past the last valid word
    assert info.value.address == a + 100 and info.value.kernel == "peek"
    with pytest.raises(KaioMemoryError):
        _peek(sim, a, b, -4)


def test_use_after_free_and_null_pointer(sim):
    a = sim.memory.alloc(64)
    b = sim.memory.alloc(4)
    sim.memory.free(a)
    with pytest.raises(KaioMemoryError, match="out-of-bounds"):
        _peek(sim, a, b, 0)
    with pytest.raises(KaioMemoryError) as info:
        _peek(sim, 0, b, 0)
    assert info.value.address == 0


SPACES = HEADER + """
.visible .entry spaces(.param .u32 which, .param .u32 offset)
{
	.local .align 4 .b8 frame[64];
	.shared .align 4 .b8 tile[128];
	.reg .pred 	%p<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<4>;
	ld.param.u32 	%r1, [which];
	ld.param.u32 	%r2, [offset];
	setp.eq.u32 	%p1, %r1, 0;
	setp.eq.u32 	%p2, %r1, 1;
	setp.eq.u32 	%p3, %r1, 2;
	mov.u32 	%r3, 7;
	@%p1 st.local.u32 	[%r2], %r3;
	@%p2 st.shared.u32 	[%r2], %r3;
	cvt.u64.u32 	%rd1, %r2;
	@%p3 ld.param.u32 	%r4, [%rd1];
	ret;
}
"""


@pytest.mark.parametrize("which,space,limit", [(0, "local", 64), (1, "shared", 128), (2, "param", 8)])
def test_local_shared_param_bounds(sim, which, space, limit):
    check_ptx(SPACES)
    module = sim.load(SPACES)
    launch = lambda off: module.launch("spaces", (2, 1, 1), (32, 1, 1), [struct.pack("<I", which), struct.pack("<I", off)])  # noqa: E731
    launch(limit - 4)
    with pytest.raises(KaioMemoryError, match=f"out-of-bounds {space}") as info:
        launch(limit)
    assert info.value.thread == (0, 0, 0) and info.value.block == (0, 0, 0) and info.value.address == limit
    with pytest.raises(KaioMemoryError, match=f"misaligned {space}"):
        launch(2)


def test_dynamic_shared_memory_size_comes_from_the_launch(sim):
    text = HEADER + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u32 off)
{
	.reg .b32 	%r<4>;
	ld.param.u32 	%r1, [off];
	mov.u32 	%r2, dyn;
	add.s32 	%r2, %r2, %r1;
	st.shared.u32 	[%r2], %r1;
	ret;
}
"""
    check_ptx(text)
    module = sim.load(text)
    module.launch("k", (1, 1, 1), (1, 1, 1), [struct.pack("<I", 252)], shared_bytes=256)
    with pytest.raises(KaioMemoryError, match="out-of-bounds shared"):
        module.launch("k", (1, 1, 1), (1, 1, 1), [struct.pack("<I", 256)], shared_bytes=256)


def test_generic_access_to_an_unmapped_address(sim):
    b = sim.memory.alloc(4)
    with pytest.raises(KaioMemoryError, match="out-of-bounds global"):
        _peek(sim, 0x1234_5678, b, 0)


def test_memory_state_survives_between_launches(rng):
    sim = Simulator()
    a = sim.memory.alloc(16)
    b = sim.memory.alloc(16)
    sim.memory.write(a, np.array([42, 0, 0, 0], np.uint32))
    _peek(sim, a, b, 0)
    assert sim.memory.read(b, 4).view(np.uint32)[0] == 42
