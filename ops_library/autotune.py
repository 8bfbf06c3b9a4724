"""On-disk autotuning shared by the library ops: time each candidate config once, remember the
winner.

Each op keeps one JSON file in the kaio cache directory (``autotune/<op>.json``): a map from a
key (the GPU's name and sm, then what the op says decides its best config: dtypes, a shape
class) to the winning config and the median time of every candidate. A later call with the
same key reuses the winner without timing anything. A missing, unreadable or corrupt file, an
entry that does not decode, or a stored config that is not among today's candidates (another
kaio version) is measured again and overwritten, never a crash. ``KAIO_CACHE=0`` measures every
time and stores nothing.

Configs are frozen dataclasses of ints, bools, strings and tuples of ints; they are stored as
their fields and rebuilt field by field, each value checked against the type of its default.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kaio import cache

C = TypeVar("C")


def device_key(dev: Any) -> str:
    """The part of every key that names the GPU the timings were taken on."""
    return f"{dev.name}|sm_{dev.sm}"


def path(op: str) -> Path:
    return cache.cache_dir() / "autotune" / f"{op}.json"


def load(op: str) -> dict[str, Any]:
    """The op's stored entries; {} when the file is missing or not a JSON object."""
    try:
        data = json.loads(path(op).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or corrupt: measure again
    return data if isinstance(data, dict) else {}


def store(op: str, entries: dict[str, Any]) -> bool:
    if not cache.enabled():
        return False
    return cache.write_atomic(path(op), json.dumps(entries, indent=1, sort_keys=True))


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
    if not candidates:
        raise ValueError(f"autotune {op}: no candidate config for {key}")
    cls = type(candidates[0])
    entries = load(op)
    entry = entries.get(key)
    if isinstance(entry, dict):
        try:
            best = decode(cls, entry.get("config"))
        except (TypeError, ValueError):
            best = None  # written by another kaio version, or damaged: measure again
        if best is not None and best in candidates:
            return best
    timings = [(float(time_ms(c)), c) for c in candidates]
    best = min(timings, key=lambda t: t[0])[1]
    entries = load(op)  # another process may have tuned another key meanwhile
    entries[key] = {"config": encode(best), "median_ms": {label(c): t for t, c in timings}}
    store(op, entries)
    return best
