"""On-disk autotuning shared by the library ops: time each candidate config once, remember the
winner.

Each op keeps one JSON file in the kaio cache directory (``autotune/<op>.json``): a map from a
key (the GPU's name and sm, then what the op says decides its best config: dtypes, a shape
class) to the winning config and the median time of every candidate. A later call with the
same key reuses the winner without timing anything; within a process the winner is remembered
too (:func:`remembered`), so a call with a known key reads neither the file nor the candidates
(on an H200 reading the file on every call cost a matmul at 1024^3 ~0.4 ms). A missing,
unreadable or corrupt file (not
JSON, nested too deep, larger than :data:`MAX_FILE_BYTES`, a FIFO or a device in its place), an
entry that does not decode, or a stored config that is not among today's candidates (another
kaio version) is measured again and overwritten, never a crash, a hang or an unbounded read
(:mod:`kaio.cache_files`). A new winner is merged into the file under a lock on
``<op>.json.lock`` and the file replaced atomically, so processes tuning at once keep each
other's keys. A candidate whose timing is not a finite number (a failed measurement) is left
out; when none is, the first candidate (the rule's) runs and nothing is stored. The file is
strict JSON (no NaN, no infinities). ``KAIO_CACHE=0`` measures every time and stores nothing.

Configs are frozen dataclasses of ints, bools, strings and tuples of ints; they are stored as
their fields and rebuilt field by field, each value checked against the type of its default.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kaio import cache, cache_files

C = TypeVar("C")

# An entry (a config and the median time of each of a few dozen candidates) is a few KB, and a
# file holds one per GPU, dtype and shape class: 16 MiB is thousands of entries.
MAX_FILE_BYTES = 16 << 20


_known: dict[tuple[Path, str], Any] = {}  # (the op's file, key) -> the winner found or read


def device_key(dev: Any) -> str:
    """The part of every key that names the GPU the timings were taken on and the target kaio
    compiled for there (an H100 runs sm_90 and sm_90a code, whose candidates differ)."""
    return f"{dev.name}|sm_{dev.sm}|{dev.compile_arch}"


def remembered(op: str, key: str) -> Any:
    """The winner for ``key`` this process already knows, else None (then call :func:`tuned`)."""
    return _known.get((path(op), key))


def forget() -> None:
    """Forget the winners this process knows: the next call of each key reads its file again
    (as a new process would), e.g. after the file was deleted or edited."""
    _known.clear()


def path(op: str) -> Path:
    return cache.cache_dir() / "autotune" / f"{op}.json"


def load(op: str) -> dict[str, Any]:
    """The op's stored entries; {} when the file is missing, unusable or not a JSON object."""
    try:
        data = cache_files.read_json(path(op), MAX_FILE_BYTES)
    except cache_files.UnusableFile:
        return {}  # measure again
    return data if isinstance(data, dict) else {}


def record(op: str, key: str, entry: dict[str, Any]) -> bool:
    """Store ``entry`` under ``key``, keeping every other key in the file, even those another
    process wrote since this one read it; False when nothing was written (cache off, folder
    unwritable, lock not taken in time)."""
    if not cache.enabled():
        return False
    with cache_files.exclusive(path(op)) as held:
        if not held:
            return False
        entries = {k: v for k, v in load(op).items() if _strict_json(v)}  # another writer's NaN: dropped
        entries[key] = entry
        text = json.dumps(entries, indent=1, sort_keys=True, allow_nan=False)
        if len(text.encode()) > MAX_FILE_BYTES:  # ``load`` would refuse it, losing every key
            return False
        return cache_files.write_atomic(path(op), text)


def _strict_json(value: Any) -> bool:
    """Whether ``value`` is JSON without NaN or infinities (which ``json`` writes as bare words
    that other readers refuse)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def encode(config: Any) -> dict[str, Any]:
    return {f.name: list(v) if isinstance(v := getattr(config, f.name), tuple) else v for f in dataclasses.fields(config)}


def decode(cls: type[C], data: Any) -> C:
    """``cls`` rebuilt from :func:`encode`'s fields; ValueError if any is missing or mistyped."""
    if not isinstance(data, dict):
        raise ValueError(f"a stored config is an object, not {data!r}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            raise ValueError(f"stored config lacks {f.name}")
        default, value = f.default, data[f.name]
        if isinstance(default, tuple):
            if not isinstance(value, list) or not all(type(v) is int for v in value):
                raise ValueError(f"{f.name}: expected a list of ints, got {value!r}")
            value = tuple(value)
        elif type(value) is not type(default):  # bool is not int here, nor int bool
            raise ValueError(f"{f.name}: expected {type(default).__name__}, got {value!r}")
        values[f.name] = value
    return cls(**values)


def tuned(op: str, key: str, candidates: Sequence[C], time_ms: Callable[[C], float], label: Callable[[C], str] = str) -> C:
    """The fastest of ``candidates`` for ``key``: the stored winner when there is a valid one,
    else each candidate timed with ``time_ms`` (milliseconds, lower is better) and the winner
    stored. Candidates are dataclass configs of one class."""
    if (known := remembered(op, key)) is not None:
        return known  # type: ignore[no-any-return]
    if not candidates:
        raise ValueError(f"autotune {op}: no candidate config for {key}")
    cls = type(candidates[0])
    entries = load(op)
    entry = entries.get(key)
    best = None
    if isinstance(entry, dict):
        try:
            best = decode(cls, entry.get("config"))
        except (TypeError, ValueError):
            best = None  # written by another kaio version, or damaged: measure again
        if best not in candidates:
            best = None
    if best is None:
        timings = [(t, c) for c in candidates if math.isfinite(t := float(time_ms(c)))]  # NaN: no timing
        if not timings:  # nothing could be timed: the first candidate (the rule's), not stored
            return candidates[0]
        best = min(timings, key=lambda t: t[0])[1]
        record(op, key, {"config": encode(best), "median_ms": {label(c): t for t, c in timings}})
    if cache.enabled():  # KAIO_CACHE=0: measured on every call, as documented
        _known[(path(op), key)] = best
    return best
