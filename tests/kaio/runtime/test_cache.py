"""The disk cache: hits skip IR building, keys change with everything that changes the PTX,
corrupt entries are rebuilt, writes are atomic, and it can be turned off."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import kaio
from kaio import cache
from kaio.frontend.kernel import GpuKernel

KERNEL = """
@kaio.gpu_kernel(block_size=128)
def scale(x: MutArray[f32], n: u32, FACTOR: kaio.constexpr = 2.0):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        x[i] = x[i] * FACTOR
"""


@pytest.fixture
def scale(load_kernels: Callable[[str], ModuleType]) -> GpuKernel:
    return load_kernels(KERNEL).scale  # type: ignore[no-any-return]


def entries(folder: Path) -> list[Path]:
    return sorted((folder / "kernels").glob("*.json"))


def test_a_hit_returns_the_same_ptx_without_building_ir(
    scale: GpuKernel, builds: list[object], kaio_cache: Path
) -> None:
    first = kaio.compile(scale, arch="sm_80")
    assert len(builds) == 1 and len(entries(kaio_cache)) == 1
    second = kaio.compile(scale, arch="sm_80")
    assert len(builds) == 1, "a cache hit must not build IR"
    assert second.ptx == first.ptx and second.params == first.params
    assert (second.name, second.arch, second.block_size, second.shared_bytes) == (
        first.name,
        first.arch,
        first.block_size,
        first.shared_bytes,
    )
    assert second.constexprs == first.constexprs == {"FACTOR": 2.0}
    assert second.cache_key == first.cache_key != ""
    assert "frontend" in second.stages and "ptx" in second.stages  # recompiled on demand
    assert len(builds) == 2


def test_the_key_covers_constexprs_arch_and_pipeline(scale: GpuKernel, kaio_cache: Path) -> None:
    keys = {
        kaio.compile(scale).cache_key,
        kaio.compile(scale, FACTOR=3.0).cache_key,
        kaio.compile(scale, FACTOR=3).cache_key,  # an int compiles differently from a float
        kaio.compile(scale, arch="sm_90").cache_key,
        kaio.compile(scale, pipeline="canonicalize,lower-to-ptx").cache_key,
    }
    assert len(keys) == 5 and len(entries(kaio_cache)) == 5


def test_the_key_covers_the_source_and_device_helpers(
    load_kernels: Callable[[str], ModuleType],
) -> None:
    base = """
@kaio.device
def twice(v: f32) -> f32:
    return v * {helper}

@kaio.gpu_kernel(block_size=128)
def k(x: MutArray[f32]):
    x[thread_idx_x()] = twice(x[thread_idx_x()]) + {body}
"""
    a = load_kernels(base.format(helper="2.0", body="1.0")).k
    b = load_kernels(base.format(helper="2.0", body="1.0")).k
    c = load_kernels(base.format(helper="3.0", body="1.0")).k
    d = load_kernels(base.format(helper="2.0", body="5.0")).k
    ka, kb, kc, kd = (kaio.compile(k).cache_key for k in (a, b, c, d))
    # b has a's text in another file: the PTX quotes file and line in comments, so it differs.
    assert len({ka, kb, kc, kd}) == 4


def test_launches_go_through_the_cache(
    scale: GpuKernel, sim: kaio.Device, kaio_cache: Path
) -> None:
    x = sim.alloc_from(np.arange(5, dtype=np.float32))
    scale[1](x, 5)
    assert len(entries(kaio_cache)) == 1
    np.testing.assert_array_equal(x.to_host(), np.arange(5, dtype=np.float32) * 2)


CORRUPTIONS: dict[str, Callable[[Path], object]] = {
    "truncated JSON": lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2]),
    "garbage bytes": lambda p: p.write_bytes(b"\x00\xff\xfe garbage \x80" * 10),
    "empty file": lambda p: p.write_text(""),
    "wrong key": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "key": "0" * 64})),
    "ptx does not match its hash": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "ptx": "// tampered\n"})
    ),
    "unknown dtype": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "params": [["x", "f128", True, True]]})
    ),
    "wrong types": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "block_size": "big"})
    ),
    "a JSON list": lambda p: p.write_text("[1, 2, 3]"),
    # json.loads recurses once per level: RecursionError before the fix
    "deeply nested JSON": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "nested in a field": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "constexprs": {"FACTOR": 1}})[:-1]
        + ', "extra": '
        + "[" * 100_000
        + "]" * 100_000
        + "}"
    ),
    # int(inf) raised OverflowError before the fix
    "infinite block size": lambda p: p.write_text(
        p.read_text().replace('"block_size": [128, 1, 1]', '"block_size": [Infinity, 1, 1]')
    ),
    "NaN shared bytes": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "shared_bytes": float("nan")})
    ),
    "negative block size": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "block_size": [-128, 1, 1]})
    ),
    "fractional block size": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "block_size": [1.5, 1, 1]})
    ),
    "two block dims": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "block_size": [128, 1]})
    ),
    "boolean format": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "format": True})),
    "unknown arch": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "arch": "sm_1"})),
    "param row of strings": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "params": [["x", "f32", "yes", "no"]]})
    ),
    "constexpr infinity": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "constexprs": {"FACTOR": float("inf")}})
    ),
    "constexprs a list": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "constexprs": [1, 2]})
    ),
    "old format": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "format": 0})),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_entry_is_ignored_and_rebuilt(
    corrupt: Callable[[Path], object], scale: GpuKernel, builds: list[object], kaio_cache: Path
) -> None:
    good = kaio.compile(scale)
    (path,) = entries(kaio_cache)
    corrupt(path)
    rebuilt = kaio.compile(scale)
    assert len(builds) == 2, "the corrupt entry was not used"
    assert rebuilt.ptx == good.ptx
    assert json.loads(path.read_text())["ptx"] == good.ptx, "the entry was rewritten"
    kaio.compile(scale)
    assert len(builds) == 2, "the rewritten entry is a hit again"


def test_writes_are_atomic_and_leave_no_temporary_files(scale: GpuKernel, kaio_cache: Path) -> None:
    kaio.compile(scale)
    kaio.compile(scale, FACTOR=4.0)
    names = [p.name for p in (kaio_cache / "kernels").iterdir()]
    assert len(names) == 2 and all(n.endswith(".json") and not n.startswith(".") for n in names)


def test_kaio_cache_0_disables_it(
    scale: GpuKernel, builds: list[object], kaio_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIO_CACHE", "0")
    kaio.compile(scale)
    kaio.compile(scale)
    assert len(builds) == 2 and not kaio_cache.exists()


def test_an_unwritable_cache_directory_only_means_no_caching(
    scale: GpuKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KAIO_CACHE_DIR", str(blocker / "cache"))
    assert kaio.compile(scale).ptx.startswith("//")


def test_dump_ir_compiles_even_on_a_hit(scale: GpuKernel, builds: list[object]) -> None:
    kaio.compile(scale)
    stages: list[str] = []
    kaio.compile(scale, dump_ir=lambda stage, text: stages.append(stage))
    assert len(builds) == 2 and stages[0] == "frontend" and stages[-1] == "ptx"


def test_default_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KAIO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "kaio"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "kaio"


def test_raw_modules_are_not_cached(scale: GpuKernel, kaio_cache: Path) -> None:
    module = scale.build().module
    compiled = kaio.compile(module)
    assert compiled.cache_key == ""
    assert not entries(kaio_cache)


def test_custom_pipeline_is_part_of_the_key(tmp_path, monkeypatch):
    """A kernel recompiled with another pipeline (with_pipeline) must not hit the default's entry."""
    import custom_op

    import kaio

    monkeypatch.setenv("KAIO_CACHE_DIR", str(tmp_path))
    plain = kaio.compile(custom_op.clamp01, "sm_80")
    saturating = kaio.compile(custom_op.clamp01.with_pipeline(custom_op.pipeline), "sm_80")
    assert plain.cache_key != saturating.cache_key
    assert "cvt.sat" in saturating.ptx and "cvt.sat" not in plain.ptx
