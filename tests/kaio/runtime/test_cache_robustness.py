"""Both on-disk caches (compiled kernels, autotune winners) against files a careless or hostile
hand put in their place: a FIFO (reading it waits for a writer for ever), symlinks to endless
devices, a directory, a huge sparse file, nesting deep enough to exhaust the JSON parser,
garbage, and a kernel entry whose parameters are not its PTX's. Each is a miss that is built or
measured again promptly, never a crash, a hang or an unbounded read."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kaio.ops_library import autotune as tuning

import kaio
from kaio import cache, cache_files
from kaio.frontend.kernel import GpuKernel

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_dev = pytest.mark.skipif(
    not os.path.exists("/dev/zero"), reason="no /dev/zero on this platform"
)

KERNEL = """
@kaio.gpu_kernel(block_size=64)
def axpy(x: Array[f32], y: MutArray[f32], a: f32, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        y[i] = a * x[i] + y[i]
"""


def promptly(fn: Callable[[], Any], path: Path, seconds: float = 30.0) -> Any:
    """``fn()``, failing (not hanging the suite) when it has not returned within ``seconds``:
    a reader blocked on a FIFO at ``path`` is released by opening the FIFO for writing."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        try:  # unblock a reader waiting for a writer, so the thread can end
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        pytest.fail(f"reading the cache file {path.name} did not return within {seconds} s")
    if errors:
        raise errors[0]
    return result[0]


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def symlink_to(target: str) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)

    return corrupt


def replace_with_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("{}")


def huge_sparse_file(limit: int) -> Callable[[Path], None]:
    def corrupt(path: Path) -> None:
        with path.open("wb") as f:  # a hole: no disk used, but a read would return every byte
            f.truncate(limit + 1)

    return corrupt


def garbage(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x00 not utf-8 \x80" * 100)


def deeply_nested(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


# Corruptions of either cache's file, and whether the rebuilt file can be written back (a
# directory in the way cannot be replaced by a file: every call is then a miss, still no crash).
SPECIAL_FILES: dict[str, tuple[Callable[[Path], None], bool]] = {
    "a FIFO": (replace_with_fifo, True),
    "a symlink to /dev/zero": (symlink_to("/dev/zero"), True),
    "a symlink to /dev/urandom": (symlink_to("/dev/urandom"), True),
    "a directory": (replace_with_directory, False),
    "garbage bytes": (garbage, True),
    "deeply nested JSON": (deeply_nested, True),
}
MARKS = {
    "a FIFO": needs_fifo,
    "a symlink to /dev/zero": needs_dev,
    "a symlink to /dev/urandom": needs_dev,
}


def special_cases(huge_limit: int) -> list[Any]:
    cases = {
        **SPECIAL_FILES,
        "a sparse file past the size bound": (huge_sparse_file(huge_limit), True),
    }
    return [
        pytest.param(corrupt, rewritable, id=name, marks=[MARKS[name]] if name in MARKS else [])
        for name, (corrupt, rewritable) in cases.items()
    ]


# --------------------------------------------------------------------------- the kernel cache


@pytest.fixture
def axpy(load_kernels: Callable[[str], ModuleType]) -> GpuKernel:
    return load_kernels(KERNEL).axpy  # type: ignore[no-any-return]


def the_entry(folder: Path) -> Path:
    (path,) = (folder / "kernels").iterdir()
    return path


@pytest.mark.parametrize("corrupt, rewritable", special_cases(cache.MAX_ENTRY_BYTES))
def test_a_special_kernel_entry_is_rebuilt_promptly(
    corrupt: Callable[[Path], None],
    rewritable: bool,
    axpy: GpuKernel,
    builds: list[object],
    kaio_cache: Path,
) -> None:
    good = kaio.compile(axpy)
    path = the_entry(kaio_cache)
    corrupt(path)
    rebuilt = promptly(lambda: kaio.compile(axpy), path)
    assert len(builds) == 2, "the special entry was not ignored"
    assert rebuilt.ptx == good.ptx and rebuilt.params == good.params
    if rewritable:
        assert path.is_file() and not path.is_symlink(), "the entry was not replaced by a file"
        assert cache.load(good.cache_key) is not None
        kaio.compile(axpy)
        assert len(builds) == 2, "the rewritten entry is a hit again"


def rewrite_entry(path: Path, **fields: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


PARAM_DAMAGE: dict[str, Callable[[list[Any]], list[Any]]] = {
    "no parameters": lambda params: [],
    "one parameter missing": lambda params: params[:-1],
    "a parameter too many": lambda params: [*params, ["extra", "f32", False, False, 4]],
    "parameters reordered": lambda params: [params[1], params[0], *params[2:]],
    "a parameter renamed": lambda params: [["z", *params[0][1:]], *params[1:]],
}


@pytest.mark.parametrize("damage", PARAM_DAMAGE.values(), ids=PARAM_DAMAGE.keys())
def test_an_entry_whose_parameters_are_not_its_ptx_is_rebuilt(
    damage: Callable[[list[Any]], list[Any]],
    axpy: GpuKernel,
    builds: list[object],
    kaio_cache: Path,
) -> None:
    """``"params": []`` was served for every later run: the launch then passed no arguments."""
    good = kaio.compile(axpy)
    path = the_entry(kaio_cache)
    rewrite_entry(path, params=damage(json.loads(path.read_text())["params"]))
    assert cache.load(good.cache_key) is None
    rebuilt = kaio.compile(axpy)
    assert len(builds) == 2 and rebuilt.params == good.params
    assert [row[0] for row in json.loads(path.read_text())["params"]] == ["x", "y", "a", "n"]


def test_an_entry_whose_ptx_has_no_entry_is_rebuilt(
    axpy: GpuKernel, builds: list[object], kaio_cache: Path
) -> None:
    good = kaio.compile(axpy)
    path = the_entry(kaio_cache)
    ptx = good.ptx.replace(".visible .entry", ".visible .func")
    rewrite_entry(
        path, ptx=ptx, ptx_sha256=cache._sha(ptx)
    )  # a consistent hash: the entry is the fault
    assert cache.load(good.cache_key) is None
    kaio.compile(axpy)
    assert len(builds) == 2


def test_an_entry_larger_than_the_bound_is_not_written(
    axpy: GpuKernel, kaio_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRY_BYTES", 100)
    kaio.compile(axpy)
    assert not (kaio_cache / "kernels").exists() or not list((kaio_cache / "kernels").iterdir())


# --------------------------------------------------------------------------- the autotune cache


@dataclasses.dataclass(frozen=True)
class Tile:
    """A stand-in config: the autotune cache stores any frozen dataclass of plain fields."""

    size: int = 64
    label: str = "t"


CANDIDATES = [Tile(32, "a"), Tile(64, "b"), Tile(128, "c")]


class Timer:
    """A fake ``time_ms``: each candidate's time is its size, so Tile(32) wins; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, config: Tile) -> float:
        self.calls += 1
        return float(config.size)


def tune(key: str = "gpu|sm_80|f32") -> tuple[Tile, int]:
    """One call of a fresh process: what the file holds decides (nothing remembered in memory)."""
    tuning.forget()
    timer = Timer()
    best = tuning.tuned("robustness", key, CANDIDATES, timer)
    return best, timer.calls


@pytest.mark.parametrize("corrupt, rewritable", special_cases(tuning.MAX_FILE_BYTES))
def test_a_special_autotune_file_is_measured_again_promptly(
    corrupt: Callable[[Path], None], rewritable: bool, kaio_cache: Path
) -> None:
    assert tune() == (Tile(32, "a"), 3)
    assert tune() == (Tile(32, "a"), 0), "the winner was not stored"
    path = tuning.path("robustness")
    corrupt(path)
    assert promptly(tune, path) == (Tile(32, "a"), 3), "the special file was not measured again"
    if rewritable:
        assert path.is_file() and not path.is_symlink()
        assert list(tuning.load("robustness")) == ["gpu|sm_80|f32"]
        assert tune() == (Tile(32, "a"), 0)


AUTOTUNE_DAMAGE: dict[str, str] = {
    "truncated": '{"gpu|sm_80|f32": {"config": {"size": 32,',
    "a JSON list": "[1, 2, 3]",
    "an entry that is a string": '{"gpu|sm_80|f32": "fast"}',
    "a config of the wrong type": '{"gpu|sm_80|f32": {"config": {"size": "32", "label": "a"}}}',
    "a config no longer a candidate": '{"gpu|sm_80|f32": {"config": {"size": 16, "label": "z"}}}',
    "nested deep inside an entry": '{"gpu|sm_80|f32": {"config": '
    + "[" * 100_000
    + "]" * 100_000
    + "}}",
    "empty": "",
}


@pytest.mark.parametrize("text", AUTOTUNE_DAMAGE.values(), ids=AUTOTUNE_DAMAGE.keys())
def test_a_damaged_autotune_entry_is_measured_again(text: str, kaio_cache: Path) -> None:
    path = tuning.path("robustness")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert tune() == (Tile(32, "a"), 3)
    assert tune() == (Tile(32, "a"), 0)


def test_a_new_winner_keeps_the_other_keys(kaio_cache: Path) -> None:
    tune("gpu|sm_80|f32")
    tune("gpu|sm_80|f16")
    assert sorted(tuning.load("robustness")) == ["gpu|sm_80|f16", "gpu|sm_80|f32"]


def test_a_held_lock_skips_the_store_instead_of_hanging(
    kaio_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the lock for ever costs a re-measure later, never a hang."""
    fcntl = pytest.importorskip("fcntl")
    path = tuning.path("robustness")
    path.parent.mkdir(parents=True)
    holder = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with cache_files.exclusive(path, timeout_s=0.05) as held:
            assert not held
        real = cache_files.exclusive
        monkeypatch.setattr(cache_files, "exclusive", lambda p: real(p, timeout_s=0.05))
        assert tune() == (Tile(32, "a"), 3)
        assert not path.exists(), "stored without the lock"
    finally:
        os.close(holder)
    assert tune() == (Tile(32, "a"), 3)
    assert tune() == (Tile(32, "a"), 0)


def test_cache_files_read_bounds_and_refuses(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text('{"a": [1, 2]}')
    assert cache_files.read_json(path, 100) == {"a": [1, 2]}
    with pytest.raises(cache_files.UnusableFile, match="larger than 5 bytes"):
        cache_files.read_json(path, 5)
    with pytest.raises(cache_files.UnusableFile, match="f.json"):
        cache_files.read_json(tmp_path / "missing" / "f.json", 100)
    with pytest.raises(cache_files.UnusableFile, match="not a regular file"):
        cache_files.read_text(tmp_path, 100)


def test_a_nan_timing_is_dropped_and_the_file_stays_strict_json(kaio_cache: Path) -> None:
    """The autotuner once kept a candidate timed NaN (every comparison with NaN is false, so
    min() may pick it) and wrote a bare NaN into its JSON file."""
    times = {32: float("nan"), 64: 2.0, 128: float("inf")}
    tuning.forget()
    best = tuning.tuned("robustness", "nan-key", CANDIDATES, lambda c: times[c.size])
    assert best == Tile(64, "b")
    text = tuning.path("robustness").read_text()
    json.loads(text, parse_constant=lambda word: pytest.fail(f"{word} in the file"))
    assert list(json.loads(text)["nan-key"]["median_ms"]) == ["Tile(size=64, label='b')"]
    tuning.forget()
    all_nan = tuning.tuned("robustness", "all-nan", CANDIDATES, lambda c: float("nan"))
    assert all_nan == CANDIDATES[0] and "all-nan" not in json.loads(tuning.path("robustness").read_text())


def test_another_writers_nan_is_dropped_when_the_file_is_rewritten(kaio_cache: Path) -> None:
    path = tuning.path("robustness")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"old": {"config": {"size": 32, "label": "a"}, "median_ms": {"a": NaN}}, "good": {"config": {"size": 64, "label": "b"}}}')
    assert tuning.record("robustness", "new", {"config": {"size": 128, "label": "c"}})
    text = path.read_text()
    assert "NaN" not in text and set(json.loads(text)) == {"good", "new"}
