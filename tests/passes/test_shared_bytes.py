"""Buffers laid out in one shared array keep saying which bytes they hold (the ``within``
property of their start): ``place_in_dynamic_shared`` marks each buffer's start with its bytes
and shifts the marks of earlier merges (``merge_shared``'s: ``test_emitter_prologue.py``); the property prints and parses; ptx-fold never merges two starts that say
different bytes; and in the W4A16 kernel, whose eight dots stage their operands in one array,
ptx-sync-cleanup drops the barrier after each dot (the next dot writes other bytes)."""

from __future__ import annotations

import re

import numpy as np

import kaio
from kaio.dialects import ptx
from kaio.dialect_registry import kaio_context
from kaio.passes.to_ptx.emitter import place_in_dynamic_shared
from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.parser import Parser


def test_the_dynamic_array_holds_every_buffer_at_its_offset_with_its_marks_shifted() -> None:
    decls = [ptx.SharedDeclOp("a", 64, 16), ptx.SharedDeclOp("b", 128, 16)]
    a, b = ptx.MovOp("u32", [], [i32], symbol="a"), ptx.MovOp("u32", [], [i32], symbol="b")
    inside = ptx.AddOp("u32", [a.outs[0], ptx.ConstOp(16, i32).result], [i32], within=("a", 16, 32))
    _, prologue = place_in_dynamic_shared("k", decls, [a, b, inside.srcs[1].owner, inside])
    marks = [ptx.within_of(op) for op in prologue if ptx.within_of(op) is not None]
    assert marks == [("k_dynamic_smem", 0, 64), ("k_dynamic_smem", 64, 192), ("k_dynamic_smem", 16, 32)]


def test_within_prints_and_parses_and_keeps_two_starts_apart_in_ptx_fold() -> None:
    from kaio.passes.ptx_fold import value_key

    one = ptx.MovOp("u32", [], [i32], symbol="s", within=("s", 0, 64))
    other = ptx.MovOp("u32", [], [i32], symbol="s", within=("s", 64, 128))
    plain = ptx.MovOp("u32", [], [i32], symbol="s")
    assert len({value_key(op) for op in (one, other, plain)}) == 3
    text = str(one)
    assert "within @s[0, 64]" in text
    parsed = Parser(kaio_context(), f'"builtin.module"() ({{\n  {text}\n}}) : () -> ()').parse_module()
    assert isinstance(parsed, ModuleOp)
    assert ptx.within_of(next(iter(parsed.body.block.ops))) == ("s", 0, 64)


def test_w4a16_keeps_one_barrier_per_dot_and_its_result(monkeypatch, rng) -> None:
    monkeypatch.setenv("KAIO_CACHE", "0")
    import sys
    from pathlib import Path

    from kaio.ops_library import w4a16_matmul

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from quantized import gptq_host

    x, qw, sc, qz = gptq_host(rng, 3, 256, 64, np.float16)
    dev = kaio.Device("sim")
    y = np.asarray(w4a16_matmul(x, qw, sc, qz, group_size=128, device=dev)).astype(np.float64)
    zeros = ((qz[:, :, None] >> (4 * np.arange(8))) & 15).reshape(2, 64) + 1
    q = ((qw[:, None, :] >> (4 * np.arange(8))[None, :, None]) & 15).reshape(256, 64)
    w = ((q - np.repeat(zeros, 128, 0)) * np.repeat(sc.astype(np.float32), 128, 0)).astype(np.float16)
    np.testing.assert_allclose(y, x.astype(np.float64) @ w.astype(np.float64), rtol=2e-3, atol=2e-3)
    assert _barriers() == 12  # one before each of the eight dots, and four of the K step


def _barriers() -> int:
    from kaio import dtypes
    from kaio.ops_library.w4a16_matmul import w4a16_tile_kernel

    w4a16_tile_kernel.cache_clear()  # a fresh kernel: compiled here, not taken from memory
    text = kaio.compile(w4a16_tile_kernel(dtypes.f16, dtypes.f16, dtypes.f16), "sm_80", BM=16, BN=64, BK=128,
                        HAS_ZEROS=True, SCALES_IN_T=True,
                        __divisible__=(("n", 64), ("k", 64), ("group", 64))).ptx  # fmt: skip
    return len(re.findall(r"bar\.sync 0;", text))


def test_marks_read_as_the_whole_array_keep_the_barriers_after_the_dots(monkeypatch) -> None:
    """Planted bug: ptx-sync-cleanup taking every buffer's start for its whole array keeps the
    eight barriers after the dots (19), which the count above tells apart."""
    from kaio.passes import ptx_sync_cleanup

    monkeypatch.setenv("KAIO_CACHE", "0")
    whole = ptx_sync_cleanup._Regions._segments
    monkeypatch.setattr(ptx_sync_cleanup._Regions, "_segments", lambda self, name, lo, hi: whole(self, name, 0, None))
    assert _barriers() == 19
