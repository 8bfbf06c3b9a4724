"""cp.async: data lands in shared memory only when a wait of the issuing thread releases its
group; src-size zero fill; checks at the cp.async line."""

from __future__ import annotations

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioLaunchError, KaioMemoryError, KaioSimError

from .conftest import HEADER, Device, check_ptx

SENTINEL = 0x5A5A5A5A


def kernel(body: str) -> str:
    """Each thread: %rd3 = in + 64 * tid (4 chunks of 16 bytes), %r3 = its 64-byte shared slot
    (filled with SENTINEL first), %rd6 = out + 64 * tid."""
    return HEADER + f"""
.visible .entry k(.param .u64 k_in, .param .u64 k_out)
{{
	.reg .pred %p<4>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<10>;
	.shared .align 16 .b8 slots[4096];
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [k_in];
	mul.wide.u32 %rd2, %r1, 64;
	add.s64 %rd3, %rd1, %rd2;
	ld.param.u64 %rd4, [k_out];
	add.s64 %rd6, %rd4, %rd2;
	mov.u32 %r2, slots;
	mad.lo.s32 %r3, %r1, 64, %r2;
	mov.u32 %r4, {SENTINEL};
	st.shared.v4.u32 [%r3], {{%r4, %r4, %r4, %r4}};
	st.shared.v4.u32 [%r3+16], {{%r4, %r4, %r4, %r4}};
	st.shared.v4.u32 [%r3+32], {{%r4, %r4, %r4, %r4}};
	st.shared.v4.u32 [%r3+48], {{%r4, %r4, %r4, %r4}};
{body}
	ret;
}}
"""


def dump(chunk: int, slot: str = "%r3") -> str:
    """Copy 16 bytes of the thread's shared slot (chunk 0..3) to out chunk."""
    return f"""	ld.shared.v4.u32 {{%r5, %r6, %r7, %r8}}, [{slot}+{16 * chunk}];
	st.global.v4.u32 [%rd6+{16 * chunk}], {{%r5, %r6, %r7, %r8}};"""


def run(sim: Simulator, body: str, threads: int = 32, data: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    text = kernel(body)
    check_ptx(text)
    dev = Device(sim)
    data = np.arange(threads * 16, dtype=np.uint32).reshape(threads, 16) + 1 if data is None else data
    out = dev.empty((threads, 16), np.uint32)
    dev.launch(sim.load(text), "k", (1, 1, 1), (threads, 1, 1), dev.array(data), out)
    return data, dev.read(out)


def test_data_lands_only_at_the_wait(sim):
    body = "\n".join([
        "	cp.async.cg.shared.global [%r3], [%rd3], 16;",
        "	cp.async.commit_group;",
        dump(1),  # chunk 1 of out <- the slot before the wait: still the sentinel
        "	cp.async.wait_group 0;",
        dump(0),
    ])  # fmt: skip
    data, out = run(sim, body)
    np.testing.assert_array_equal(out[:, 0:4], data[:, 0:4])
    assert (out[:, 4:8] == SENTINEL).all()


def test_reading_before_the_wait_is_an_uninitialized_read(sim, dev):
    text = HEADER + """
.visible .entry k(.param .u64 k_in, .param .u64 k_out)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<4>;
	.shared .align 16 .b8 tile[512];
	mov.u32 %r1, %tid.x;
	ld.param.u64 %rd1, [k_in];
	mul.wide.u32 %rd2, %r1, 16;
	add.s64 %rd3, %rd1, %rd2;
	mov.u32 %r2, tile;
	mad.lo.s32 %r2, %r1, 16, %r2;
	cp.async.ca.shared.global [%r2], [%rd3], 16;
	cp.async.commit_group;
	ld.shared.u32 %r3, [%r2];
	ret;
}
"""
    check_ptx(text)
    with pytest.raises(KaioMemoryError, match="uninitialized shared read") as info:
        dev.launch(sim.load(text), "k", (1, 1, 1), (32, 1, 1), dev.array(np.zeros(128, np.uint32)), dev.empty(1, np.uint32))
    assert info.value.ptx_line == text.splitlines().index("\tld.shared.u32 %r3, [%r2];") + 1


def test_wait_group_keeps_the_newest_groups_pending(sim):
    copies = [f"	cp.async.cg.shared.global [%r3+{16 * g}], [%rd3+{16 * g}], 16;\n	cp.async.commit_group;" for g in range(3)]
    body = "\n".join([
        *copies,
        "	cp.async.wait_group 2;", "	add.s32 %r9, %r3, 0;", dump(0, "%r9"),  # group 0 only
        "	cp.async.wait_group 1;", dump(1, "%r9"),  # groups 0 and 1
        dump(2, "%r9"),  # group 2: still pending
        "	cp.async.wait_group 1;", dump(3, "%r9"),  # chunk 3 was never copied
        "	cp.async.wait_group 0;",  # group 2 lands after the dumps: no copy outlives its thread
    ])  # fmt: skip
    data, out = run(sim, body)
    np.testing.assert_array_equal(out[:, 0:8], data[:, 0:8])
    assert (out[:, 8:16] == SENTINEL).all()


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "uncommitted"])
def test_a_thread_may_not_exit_with_a_copy_in_flight(sim, commit):
    """A planted missing drain (the wait_group 0 after a pipelined loop, which CUTLASS and
    Triton emit): the ISA completes a copy only at its thread's wait."""
    body = "\n".join(["	cp.async.cg.shared.global [%r3], [%rd3], 16;", *(["	cp.async.commit_group;"] if commit else [])])
    with pytest.raises(KaioSimError, match=r"exits with a cp.async of PTX line \d+ still in flight"):
        run(sim, body)


@pytest.mark.parametrize("between", ["	cp.async.commit_group;", ""], ids=["another group", "one group"])
def test_two_copies_in_flight_to_the_same_bytes_are_an_error(sim, between):
    """A planted missing drain between two pipelined loops: the first loop's last prefetch (a
    zero fill past its end) and the second loop's first copy into the same ring stage, then one
    wait. Landing them in issue order would hide it; the ISA does not order two cp.async."""
    body = "\n".join([
        "	cp.async.cg.shared.global [%r3+16], [%rd3], 16, 0;", between,
        "	cp.async.ca.shared.global [%r3+24], [%rd3+8], 8;", "	cp.async.commit_group;",
        "	cp.async.wait_group 0;",
    ])  # fmt: skip
    with pytest.raises(KaioSimError, match=r"a cp.async of PTX line \d+ by the same thread, still in flight"):
        run(sim, body)


def test_a_wait_between_two_copies_to_the_same_bytes_orders_them(sim):
    body = "\n".join([
        "	cp.async.cg.shared.global [%r3], [%rd3], 16, 0;", "	cp.async.commit_group;", "	cp.async.wait_group 0;",
        "	cp.async.cg.shared.global [%r3], [%rd3], 16;", "	cp.async.cg.shared.global [%r3+16], [%rd3+16], 16;",
        "	cp.async.commit_group;", "	cp.async.wait_group 0;", dump(0), dump(1),
    ])  # fmt: skip
    data, out = run(sim, body)
    np.testing.assert_array_equal(out[:, 0:8], data[:, 0:8])


def test_wait_all_lands_uncommitted_copies(sim):
    body = "\n".join(["	cp.async.ca.shared.global [%r3], [%rd3], 8;", "	cp.async.ca.shared.global [%r3+8], [%rd3+8], 4;", "	cp.async.wait_all;", dump(0)])
    data, out = run(sim, body)
    np.testing.assert_array_equal(out[:, 0:3], data[:, 0:3])
    assert (out[:, 3] == SENTINEL).all()


def test_src_size_zero_fills_and_reads_nothing_past_it(sim):
    body = "\n".join([
        "	cp.async.cg.shared.global.L2::128B [%r3], [%rd3], 16, 6;",  # 6 bytes read, 10 zeros
        "	mov.u64 %rd9, 16;",  # a wild source address: src-size 0 must not touch it
        "	cp.async.cg.shared.global [%r3+16], [%rd9], 16, 0;",
        "	setp.eq.u32 %p1, %r1, %r1;",
        "	cp.async.ca.shared.global [%r3+32], [%rd9], 16, %p1;",  # ignore-src: the same
        "	createpolicy.fractional.L2::evict_last.b64 %rd8, 1.0;",
        "	cp.async.ca.shared.global.L2::cache_hint [%r3+48], [%rd3+48], 4, %rd8;",
        "	cp.async.wait_all;",
        *(dump(c) for c in range(4)),
    ])  # fmt: skip
    data, out = run(sim, body)
    raw_in, raw_out = data.view(np.uint8).reshape(32, 64), out.view(np.uint8).reshape(32, 64)
    np.testing.assert_array_equal(raw_out[:, :6], raw_in[:, :6])
    assert (raw_out[:, 6:48] == 0).all()
    np.testing.assert_array_equal(out[:, 12], data[:, 12])
    assert (out[:, 13:16] == SENTINEL).all()


def test_a_wait_lands_only_the_waiting_threads_copies(sim):
    # every thread copies; only odd threads wait; after a barrier, every thread reads its
    # neighbour's slot: odd slots hold the data, even slots are still the sentinel.
    body = "\n".join([
        "	cp.async.cg.shared.global [%r3], [%rd3], 16;",
        "	cp.async.commit_group;",
        "	and.b32 %r10, %r1, 1;",
        "	setp.eq.u32 %p1, %r10, 0;",
        "	@%p1 bra SKIP;",
        "	cp.async.wait_group 0;",
        "SKIP:",
        "	bar.sync 0;",
        "	xor.b32 %r11, %r1, 1;",
        "	mad.lo.s32 %r9, %r11, 64, %r2;",
        dump(0, "%r9"),
        "	cp.async.wait_group 0;",  # the even threads' copies land after the dump
    ])  # fmt: skip
    data, out = run(sim, body)
    neighbour = np.arange(32) ^ 1
    odd = neighbour % 2 == 1
    np.testing.assert_array_equal(out[odd, 0:4], data[neighbour[odd], 0:4])
    assert (out[~odd, 0:4] == SENTINEL).all()


@pytest.mark.parametrize(
    ("copy", "error", "message"),
    [
        ("cp.async.cg.shared.global [%r3], [%rd3+4096], 16;", KaioMemoryError, "out-of-bounds cp.async global read"),
        ("cp.async.cg.shared.global [%r3], [%rd3+8], 16;", KaioMemoryError, "misaligned cp.async global read"),
        ("cp.async.ca.shared.global [%r3+4], [%rd3], 8;", KaioMemoryError, "misaligned shared cp.async write"),
        ("cp.async.ca.shared.global [%r3+4096], [%rd3], 4;", KaioMemoryError, "out-of-bounds shared cp.async write"),
        ("mov.u32 %r12, 9;\n\tcp.async.ca.shared.global [%r3], [%rd3], 8, %r12;", KaioSimError, "src-size 9 exceeds cp-size 8"),
    ],
)
def test_bad_copies_are_reported_at_the_cp_async(sim, copy, error, message):
    with pytest.raises(error, match=message) as info:
        run(sim, f"\t{copy}\n\tcp.async.wait_all;")
    last = copy.splitlines()[-1].strip()
    assert info.value.ptx_line == kernel(f"\t{copy}").splitlines().index(f"\t{last}") + 1


@pytest.mark.parametrize(
    ("copy", "message"),
    [
        ("cp.async.cg.shared.global [%r3], [%rd3], 8;", "cp-size must be one of 16"),
        ("cp.async.ca.shared.global [%r3], [%rd3], 2;", "cp-size must be one of 4, 8, 16"),
        ("cp.async.ca.shared.global [%r3], [%rd3], 8, 9;", "src-size 9 exceeds cp-size 8"),
        ("cp.async.ca.global.shared [%rd3], [%r3], 4;", "copies .global to .shared"),
        ("cp.async.wait_group %r1;", "non-negative integer constant"),
        ("cp.async.bulk.shared::cluster.global [%r3], [%rd3], 16;", "bulk"),
    ],
)
def test_malformed_copies_are_load_errors(sim, copy, message):
    with pytest.raises(KaioLaunchError, match=message):
        sim.load(kernel(f"\t{copy}"))
