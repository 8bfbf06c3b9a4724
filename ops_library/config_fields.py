"""Checks of the fields of the ops' config dataclasses (``MatmulConfig``, ``AttentionConfig``).

A config is built by users (and rebuilt from the autotune cache), so each field is checked where
the config is made, not deep in the op where a zero tile would divide by zero: a value of the
wrong type is a ``KaioTypeError``, a value of the right type that cannot run a ``KaioValueError``
(a ``ValueError`` too: the autotune cache measures again on either). Each message names the
config, the field and the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kaio.dtypes import is_int_value
from kaio.errors import KaioTypeError, KaioValueError


def _is_power_of_two(n: int) -> bool:
    return n > 0 and not n & (n - 1)


def int_field(owner: str, name: str, value: Any, low: int, high: int | None = None, *, power_of_two: bool = False,
              rule: str | None = None) -> int:  # fmt: skip
    """``value`` as an int in ``low..high`` (a power of two if asked); ``rule`` says what is
    allowed in the message (default: the range)."""
    allowed = rule or _range_text(low, high, power_of_two)
    if not is_int_value(value):
        raise KaioTypeError(
            f"{owner}: `{name}` is {allowed}, got {value!r} ({type(value).__name__})"
        )
    n = int(value)
    if n < low or (high is not None and n > high) or (power_of_two and not _is_power_of_two(n)):
        raise KaioValueError(f"{owner}: `{name}` is {allowed}, got {n}")
    return n


def int_tuple_field(
    owner: str, name: str, value: Any, parts: Sequence[str], *, power_of_two: bool = False
) -> tuple[int, ...]:
    """``value`` as a tuple of positive ints, one per name in ``parts`` (a list is accepted and
    made a tuple, so the frozen config stays hashable)."""
    kind = "positive powers of two" if power_of_two else "positive ints"
    allowed = f"({', '.join(parts)}), {len(parts)} {kind}"
    if not isinstance(value, (tuple, list)) or not all(is_int_value(v) for v in value):
        raise KaioTypeError(f"{owner}: `{name}` is {allowed}, got {value!r}")
    if len(value) != len(parts) or not all(
        v > 0 and (not power_of_two or _is_power_of_two(int(v))) for v in value
    ):
        raise KaioValueError(f"{owner}: `{name}` is {allowed}, got {tuple(value)!r}")
    return tuple(int(v) for v in value)


def bool_field(owner: str, name: str, value: Any) -> bool:
    """``value`` if it is a bool: ``tensor_cores="no"`` or ``causal=1`` would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise KaioTypeError(
            f"{owner}: `{name}` is True or False, got {value!r} ({type(value).__name__})"
        )
    return bool(value)


def choice_field(owner: str, name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``choices`` (a list or other unhashable value is a
    KaioTypeError, not Python's ``unhashable type``)."""
    allowed = " or ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise KaioTypeError(
            f"{owner}: `{name}` is {allowed}, got {value!r} ({type(value).__name__})"
        )
    if value not in choices:
        raise KaioValueError(f"{owner}: `{name}` is {allowed}, got {value!r}")
    return value


def _range_text(low: int, high: int | None, power_of_two: bool) -> str:
    kind = "a power of two" if power_of_two else "an int"
    if high is None:
        return f"{kind} >= {low}"
    return f"{kind} from {low} to {high}"


def settle(config: Any, **fields: Any) -> None:
    """Store checked (normalised) values on a frozen dataclass from its ``__post_init__``."""
    for name, value in fields.items():
        object.__setattr__(config, name, value)
