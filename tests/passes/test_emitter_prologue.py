"""The emitter keeps the set of values its prologue defines (what ``hoisted`` asks), extended
as the prologue grows instead of rebuilt per question: it must equal the set rebuilt from the
prologue, also after ``merge_shared`` replaced a buffer's address op inside the prologue; and
``merge_shared`` marks each merged buffer's start with the bytes it keeps (``within``), shifts
those marks when the array moves into another, and leaves the merged region's start unmarked."""

from __future__ import annotations

import pytest

import kaio
from kaio.dialects import kernel, ptx
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.prelude import Array, MutArray, f32, thread_idx_x
from kaio.targets.ptx.arch import get_arch


def _emitter() -> PtxEmitter:
    @kaio.gpu_kernel(block_size=32)
    def copy(a: Array[f32], b: MutArray[f32]):
        b[thread_idx_x()] = a[thread_idx_x()]

    (func,) = kernel.kernel_funcs(copy.build({}).module)
    return PtxEmitter(func, get_arch("sm_80"))


def _rebuilt(em: PtxEmitter) -> set[object]:
    return {r for op in em.prologue for r in op.results}


def test_kept_prologue_values_equal_the_rebuilt_set_as_the_prologue_grows_and_is_rewritten() -> None:
    em = _emitter()
    first = em.shared("x", 64, 16)
    assert em._prologue_values() == _rebuilt(em) == {first}
    second = em.shared("y", 128, 16)
    third = em.shared("z", 32, 16)
    assert em._prologue_values() == _rebuilt(em)
    merged = em.merge_shared([first, second, third], 256, 16)  # second's, third's movs replaced
    values = em._prologue_values()
    assert values == _rebuilt(em)
    assert merged in values and second not in values and third not in values
    em.const(7, merged.type)
    assert em._prologue_values() == _rebuilt(em)


def test_a_set_not_reset_after_merge_would_keep_the_replaced_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted bug: the kept set extended but never reset still holds the replaced movs'
    results, which the comparison with the rebuilt set catches."""
    em = _emitter()
    first, second = em.shared("x", 64, 16), em.shared("y", 64, 16)
    em._prologue_values()
    kept = em._prologue_known
    em.merge_shared([first, second], 128, 16)
    em._prologue_known = kept  # undo the reset merge_shared does
    assert em._prologue_values() != _rebuilt(em)


def _within(v) -> tuple[str, int, int] | None:
    return ptx.within_of(v.owner)


def test_merged_buffers_keep_their_bytes_and_an_array_moved_into_another_shifts_them() -> None:
    em = _emitter()
    w = em.shared("w", 64, 16)
    x, y, z = em.shared("x", 64, 16), em.shared("y", 100, 16), em.shared("z", 32, 16)
    em.values.update({"X": x, "Y": y, "Z": z, "W": w})  # bound buffers follow their moves
    region = em.merge_shared([x, y, z], 256, 16)
    xs = "copy_x"
    assert _within(region) is None and region.owner.symbol.data == xs  # the reuse: any byte
    assert [_within(em.values[k]) for k in "XYZ"] == [(xs, 0, 64), (xs, 64, 164), (xs, 176, 208)]
    em.values["R"] = region
    em.merge_shared([w, region], 512, 16)  # x's array moves 64 bytes into w's
    ws = "copy_w"
    assert [_within(em.values[k]) for k in "XYZR"] == [(ws, 64, 128), (ws, 128, 228), (ws, 240, 272), (ws, 64, 320)]
    assert _within(em.values["W"]) == (ws, 0, 64)
