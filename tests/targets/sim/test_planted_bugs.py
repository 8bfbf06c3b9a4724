"""Kernels with planted bugs: every one must be reported with where it happened, or (where no
check can see it, or with the check turned off) give a detectably wrong result."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kaio.targets.sim import Simulator

from kaio.errors import KaioLaunchError, KaioMemoryError, KaioSimError

from .conftest import HEADER, PTX_DIR, Device, check_ptx, load_fixture, rel_error


def _line_of(module_text: str, needle: str, after: str = "") -> int:
    lines = module_text.splitlines()
    start = next(i for i, text in enumerate(lines) if after in text) if after else 0
    return next(i for i in range(start, len(lines)) if needle in lines[i]) + 1


def _bugs_text() -> str:
    from .conftest import PTX_DIR

    return (PTX_DIR / "bugs.ptx").read_text()


def test_out_of_bounds_store_names_kernel_line_thread_block_address(ptx_file, dev):
    module = ptx_file("bugs")
    n = 1000
    out = dev.empty(n, np.uint32)
    with pytest.raises(KaioMemoryError) as info:
        dev.launch(module, "oob_store", (8, 1, 1), (128, 1, 1), out, np.uint32(n))
    err = info.value
    assert err.kernel == "oob_store"
    assert err.ptx_line == _line_of(_bugs_text(), "st.global.u32", after="oob_store")
    assert err.thread == (1000 % 128, 0, 0) and err.block == (1000 // 128, 0, 0)
    assert err.address == out.address + 4 * n
    assert "out-of-bounds global store" in str(err)


def test_misaligned_store(ptx_file, dev):
    module = ptx_file("bugs")
    out = dev.empty(64, np.uint32)
    with pytest.raises(KaioMemoryError, match="misaligned global store") as info:
        dev.launch(module, "misaligned", (1, 1, 1), (32, 1, 1), out)
    assert info.value.thread == (0, 0, 0) and info.value.address == out.address + 2


def test_barrier_skipped_by_exited_threads_is_reported_under_synccheck():
    from .conftest import PTX_DIR

    strict = Simulator(synccheck=True)
    module = strict.load((PTX_DIR / "bugs.ptx").read_text())
    with pytest.raises(KaioSimError, match="16 of 32 threads") as info:
        module.launch("barrier_in_branch", (1, 1, 1), (32, 1, 1), [b"\0" * 8])
    assert info.value.ptx_line == _line_of(_bugs_text(), "bar.sync", after="barrier_in_branch")
    assert "16 exited without arriving" in str(info.value)


def test_barrier_skipped_by_exited_threads_releases_by_default(ptx_file, dev):
    # hardware semantics: exited threads count as arrived (this deadlocked before)
    module = ptx_file("bugs")
    dev.launch(module, "barrier_in_branch", (2, 1, 1), (32, 1, 1), dev.empty(1, np.uint32))


def test_threads_at_two_different_barriers(ptx_file, dev):
    module = ptx_file("bugs")
    text = _bugs_text()
    with pytest.raises(KaioSimError, match="different barrier instructions") as info:
        dev.launch(module, "barrier_if_else", (1, 1, 1), (64, 1, 1), dev.empty(1, np.uint32))
    first = _line_of(text, "bar.sync", after="barrier_if_else")
    assert str(first) in str(info.value)


def test_shuffle_with_non_converged_member_lanes(ptx_file, dev):
    module = ptx_file("bugs")
    with pytest.raises(KaioSimError, match=r"lanes 16-31 that are not converged") as info:
        dev.launch(module, "shfl_diverged", (1, 1, 1), (32, 1, 1), dev.empty(32, np.uint32))
    assert info.value.ptx_line == _line_of(_bugs_text(), "shfl.sync", after="shfl_diverged")


def test_shuffle_reading_a_diverged_lane(ptx_file, dev):
    module = ptx_file("bugs")
    with pytest.raises(KaioSimError, match="reads lane 16, which does not execute"):
        dev.launch(module, "shfl_reads_inactive", (1, 1, 1), (32, 1, 1), dev.empty(32, np.uint32))


def test_deadlock_on_named_barriers(ptx_file, dev):
    module = ptx_file("bugs")
    text = _bugs_text()
    with pytest.raises(KaioSimError, match="deadlock") as info:
        dev.launch(module, "deadlock", (1, 1, 1), (64, 1, 1), dev.empty(1, np.uint32))
    assert info.value.ptx_line == _line_of(text, "bar.sync \t1, 64")
    assert str(_line_of(text, "bar.sync \t2, 64")) in str(info.value)


def test_uninitialized_shared_read(ptx_file, dev):
    module = ptx_file("bugs")
    with pytest.raises(KaioMemoryError, match="uninitialized shared read") as info:
        dev.launch(module, "uninit_shared", (1, 1, 1), (32, 1, 1), dev.empty(32, np.uint32))
    assert info.value.thread == (0, 0, 0)


def test_uninitialized_shared_check_can_be_turned_off(dev):
    from .conftest import PTX_DIR

    sim = Simulator(check_uninitialized_shared=False)
    module = sim.load((PTX_DIR / "bugs.ptx").read_text())
    out = sim.memory.alloc(128)
    module.launch("uninit_shared", (1, 1, 1), (32, 1, 1), [out.to_bytes(8, "little")])
    np.testing.assert_array_equal(sim.memory.read(out, 128), np.zeros(128, np.uint8))


def _kernel(body: str, regs: str = ".reg .b32 %r<4>;") -> str:
    return HEADER + f".visible .entry k()\n{{\n  {regs}\n{body}\n  ret;\n}}\n"


def test_unknown_instruction_names_it_and_the_line(sim):
    text = _kernel("  mov.u32 %r1, 1;\n  frobnicate.b32 %r2, %r1;")
    with pytest.raises(KaioLaunchError, match="unknown instruction frobnicate.b32") as info:
        sim.load(text)
    assert "line 8" in str(info.value) and "frobnicate.b32 %r2, %r1;" in info.value.log


def test_unknown_modifier_is_an_error(sim):
    with pytest.raises(KaioLaunchError, match=r"unsupported modifier \.wobbly in add\.wobbly\.s32"):
        sim.load(_kernel("  add.wobbly.s32 %r1, %r2, %r3;"))


def test_instruction_of_an_unsupported_type_family(sim):
    with pytest.raises(KaioLaunchError, match="no .half form of popc"):
        sim.load(_kernel("  popc.f16 %r1, %r2;"))


def test_syntax_error_names_the_line(sim):
    with pytest.raises(KaioLaunchError, match="line 7"):
        sim.load(_kernel("  add.s32 %r1, %r2 %r3;"))


def test_undeclared_register(sim):
    with pytest.raises(KaioLaunchError, match="undeclared register %q9"):
        sim.load(_kernel("  add.s32 %r1, %r2, %q9;"))


def test_branch_to_missing_label(sim):
    with pytest.raises(KaioLaunchError, match="unknown label NOWHERE"):
        sim.load(_kernel("  bra NOWHERE;"))


def test_endless_loop_is_stopped(rng):
    sim = Simulator(max_steps=10_000)
    module = sim.load(_kernel("SPIN:\n  bra SPIN;"))
    with pytest.raises(KaioSimError, match="step limit"):
        module.launch("k", (1, 1, 1), (32, 1, 1), [])


def test_trap_is_reported(sim):
    text = _kernel("  .reg .pred %p;\n  mov.u32 %r1, %tid.x;\n  setp.eq.u32 %p, %r1, 5;\n  @%p trap;", regs=".reg .b32 %r<4>;")
    check_ptx(text)
    with pytest.raises(KaioSimError, match="trap") as info:
        sim.load(text).launch("k", (1, 1, 1), (32, 1, 1), [])
    assert info.value.thread == (5, 0, 0)


def test_launch_argument_checks(ptx_file, dev):
    module = ptx_file("saxpy")
    with pytest.raises(KaioLaunchError, match="takes 4 parameters"):
        module.launch("saxpy", (1, 1, 1), (32, 1, 1), [])
    with pytest.raises(KaioLaunchError, match="takes 4 bytes, got 8"):
        module.launch("saxpy", (1, 1, 1), (32, 1, 1), [b"\0" * 8] * 4)
    with pytest.raises(KaioLaunchError, match="no kernel named"):
        module.launch("nope", (1, 1, 1), (32, 1, 1), [])
    with pytest.raises(KaioLaunchError, match="exceeds 1024"):
        module.launch("saxpy", (1, 1, 1), (64, 32, 1), [b"\0" * 4] * 2 + [b"\0" * 8] * 2)


def test_reset_invalidates_loaded_modules(sim):
    module = sim.load(_kernel("  mov.u32 %r1, 1;"))
    sim.memory.reset()
    with pytest.raises(KaioLaunchError, match="reset"):
        module.launch("k", (1, 1, 1), (1, 1, 1), [])


# --- tensor-core bugs, planted in the nvcc and Triton matmul fixtures ------------------------


def _nvcc_matmul(sim, text: str, shape: tuple[int, int, int], rng):  # type: ignore[no-untyped-def]
    """Run a variant of the nvcc matmul fixture; returns (relative error, output)."""
    module, kernel, block, _ = load_fixture(sim, "nvcc_matmul", text)
    dev = Device(sim)
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = dev.empty((m, n), np.float32)
    dev.launch(module, kernel, (-(-n // 64), -(-m // 64), 1), (block, 1, 1), dev.array(a), dev.array(b), c, *(np.int32(v) for v in (m, n, k)))
    return rel_error(dev.read(c), a.astype(np.float64) @ b.astype(np.float64))


def _fixture(name: str) -> str:
    return (PTX_DIR / f"{name}.ptx").read_text()


def test_fixtures_are_correct_before_the_bugs_are_planted(sim, rng):
    assert _nvcc_matmul(sim, _fixture("nvcc_matmul"), (64, 64, 96), rng) < 1e-6


def test_missing_cp_async_wait_is_an_uninitialized_read(sim, rng):
    text = _fixture("nvcc_matmul")
    no_wait = re.sub(r"^\s*cp\.async\.wait_group \d+;\n", "", text, flags=re.M)
    assert no_wait != text
    with pytest.raises(KaioMemoryError, match="uninitialized shared read") as info:
        _nvcc_matmul(sim, no_wait, (64, 64, 96), rng)
    assert "ldmatrix" in no_wait.splitlines()[info.value.ptx_line - 1]


def test_missing_cp_async_wait_is_rejected_without_the_uninitialized_check(rng):
    """Without the uninitialized-shared check the tiles' absence showed only as a wrong result;
    the copies still in flight at the threads' exit are an error in their own right."""
    sim = Simulator(check_uninitialized_shared=False)
    no_wait = re.sub(r"^\s*cp\.async\.wait_group \d+;\n", "", _fixture("nvcc_matmul"), flags=re.M)
    with pytest.raises(KaioSimError, match="still in flight"):
        _nvcc_matmul(sim, no_wait, (64, 64, 96), rng)


def test_waiting_for_one_group_too_few_is_rejected(sim, rng):
    # the last K step must wait for everything (wait_group 0); waiting for all but one leaves
    # the last tile in flight: the step reads the tile the buffer held two steps earlier, and
    # the copy never lands before the threads end
    text = _fixture("nvcc_matmul")
    off_by_one = text.replace("cp.async.wait_group 0;", "cp.async.wait_group 1;")
    assert off_by_one != text
    with pytest.raises(KaioSimError, match="still in flight"):
        _nvcc_matmul(sim, off_by_one, (64, 64, 96), rng)


def test_missing_wait_in_the_triton_pipeline_is_reported(sim, rng):
    text = _fixture("triton_matmul")
    no_wait = re.sub(r"^\s*cp\.async\.wait_group \s*\d+;\n", "", text, flags=re.M)
    module, kernel, block, shared = load_fixture(sim, "triton_matmul", no_wait)
    dev = Device(sim)
    a, b, c = dev.array(np.ones((64, 64), np.float16)), dev.array(np.ones((64, 64), np.float16)), dev.empty((64, 64), np.float32)
    params = Device.params(a, b, c, *(np.int32(v) for v in (64, 64, 64, 64, 64, 64)))
    params += [b"\0" * 8] * (len(module.entries[kernel].params) - len(params))
    with pytest.raises(KaioMemoryError, match="uninitialized shared read"):
        module.launch(kernel, (1, 1, 1), (block, 1, 1), params, shared_bytes=shared)


def test_two_swapped_mma_fragment_registers_give_a_wrong_result(sim, rng):
    # swap A registers 1 and 2 (rows g+8 of columns 0-7 and rows g of columns 8-15) in every mma
    text = _fixture("nvcc_matmul")
    swapped = re.sub(r"(mma\.sync[^{]*\{[^}]*\}, \{)(%r\d+),(%r\d+),(%r\d+),", r"\1\2,\4,\3,", text)
    assert swapped != text
    assert _nvcc_matmul(sim, swapped, (64, 64, 96), rng) > 0.5
