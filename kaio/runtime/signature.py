"""Binding launch arguments to a kernel's declared parameters, Triton style.

A kernel's parameters are runtime parameters (arrays and scalars, passed to the device) and
``kaio.constexpr`` parameters (compile-time values: each distinct set compiles its own
specialization). Both may be passed by position or by keyword, in declaration order; missing
ones take their defaults. ``bind`` returns the runtime values in runtime-parameter order and the
constexpr values, plus a hashable key of the latter for the specialization cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kaio.errors import KaioTypeError


@dataclass(frozen=True)
class DeclaredParam:
    name: str
    is_constexpr: bool
    has_default: bool
    default: Any = None


def constexpr_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """Hashable and type-exact: ``1``, ``1.0`` and ``True`` compare equal in Python but compile
    to different kernels."""
    return tuple((type(v), v) for v in values)


class Signature:
    def __init__(self, kernel_name: str, params: Sequence[DeclaredParam]) -> None:
        self.kernel = kernel_name
        self.params = tuple(params)
        self.names = tuple(p.name for p in self.params)
        self.runtime_names = tuple(p.name for p in self.params if not p.is_constexpr)
        self.constexpr_names = tuple(p.name for p in self.params if p.is_constexpr)
        self.n_runtime = len(self.runtime_names)
        leading = self.names[: self.n_runtime] == self.runtime_names
        trailing_defaults = all(p.has_default for p in self.params if p.is_constexpr)
        # The common call: exactly the runtime arguments, positionally, constexprs defaulted.
        self.fast_path = leading and trailing_defaults
        # The constexprs that have defaults, and (used on the fast path only) their key.
        self.default_constexprs: dict[str, Any] = {
            p.name: p.default for p in self.params if p.is_constexpr and p.has_default
        }
        self.default_key: tuple[Any, ...] = constexpr_key(list(self.default_constexprs.values()))

    def bind(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Sequence[Any], dict[str, Any], tuple[Any, ...]]:
        """(runtime values, constexpr values, constexpr key); KaioTypeError on a bad call."""
        if not kwargs and len(args) == self.n_runtime and self.fast_path:
            return args, self.default_constexprs, self.default_key
        if len(args) > len(self.params):
            raise KaioTypeError(
                f"kernel `{self.kernel}` takes {self._counts()}, "
                f"got {len(args)} positional arguments"
            )
        bound: dict[str, Any] = dict(zip(self.names, args, strict=False))  # fewer args: defaults
        for name, value in kwargs.items():
            if name not in self.names:
                raise KaioTypeError(
                    f"kernel `{self.kernel}` has no parameter `{name}` "
                    f"(parameters: {', '.join(self.names)})"
                )
            if name in bound:
                raise KaioTypeError(f"kernel `{self.kernel}`: parameter `{name}` given twice")
            bound[name] = value
        missing = []
        for p in self.params:
            if p.name not in bound:
                if p.has_default:
                    bound[p.name] = p.default
                else:
                    missing.append(p.name)
        if missing:
            raise KaioTypeError(
                f"kernel `{self.kernel}` takes {self._counts()}; missing: {', '.join(missing)}"
            )
        runtime = [bound[n] for n in self.runtime_names]
        constexprs = {n: bound[n] for n in self.constexpr_names}
        for name, value in constexprs.items():
            if getattr(type(value), "__hash__", None) is None:  # a list, an array: no key
                raise KaioTypeError(
                    f"kernel `{self.kernel}`: constexpr `{name}` must be an int, float or bool, "
                    f"got {type(value).__name__}"
                )
        return runtime, constexprs, constexpr_key(list(constexprs.values()))

    def _counts(self) -> str:
        text = f"{self.n_runtime} runtime argument{'s' if self.n_runtime != 1 else ''}"
        if self.constexpr_names:
            text += f" and constexpr {', '.join(self.constexpr_names)}"
        return text
