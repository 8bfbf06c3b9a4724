"""Which dialects kaio parses: xDSL's, kaio's, those installed packages list in an
``xdsl.universe`` entry point, and those registered from Python with :func:`register_dialect`.

One list for everything that reads IR: ``kaio.compile``'s passes, ``kaio.load_ir`` (and so
dumped stages) and ``kaio-opt``. A name means one dialect for the whole process: registering
the same dialect again is harmless, another dialect under a taken name is an error naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from xdsl.context import Context
from xdsl.ir import Dialect

from kaio.entry_points import installed
from kaio.errors import KaioPipelineError, KaioTypeError

DialectFactory = Callable[[], Dialect]

_registered: dict[str, Dialect] = {}


def register_dialect(dialect: Dialect) -> Dialect:
    """Make ``dialect`` (an xDSL ``Dialect``) known wherever kaio parses IR: ``kaio.load_ir``
    reads dumped stages holding its ops, ``kaio-opt`` run from this process parses them, and
    passes see it in their context. Returns ``dialect``."""
    if not isinstance(dialect, Dialect):
        raise KaioTypeError(f"kaio.register_dialect: `dialect` must be an xdsl Dialect, got {dialect!r}")
    name = dialect.name
    taken = _registered.get(name)
    if taken is None:
        factory = _discovered_dialects().get(name)
        taken = factory() if factory is not None else None
    if taken is not None and taken is not dialect:
        raise KaioPipelineError(
            f"kaio.register_dialect: the dialect name '{name}' is taken by another dialect "
            f"(ops {', '.join(sorted(op.name for op in taken.operations)[:3]) or 'none'}); "
            "give yours another name"
        )
    _registered[name] = dialect
    kaio_context.cache_clear()  # the next context knows it
    return dialect


@cache
def kaio_context() -> Context:
    """An xDSL context that knows every dialect of :func:`available_dialects` (each loaded on
    first use), built once until a registration or a rediscovery changes the list."""
    ctx = Context()
    for name, factory in available_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx


def available_dialects() -> dict[str, DialectFactory]:
    """Every dialect kaio parses, by name, as factories (the xDSL registry convention: a
    dialect nobody parses is never imported)."""
    found = dict(_discovered_dialects())
    for name, dialect in _registered.items():
        found[name] = _factory(dialect)
    return found


def registered_dialects() -> dict[str, DialectFactory]:
    """Those given to :func:`register_dialect` in this process (kaio-opt adds them to the
    entry points' that xDSL's own driver reads)."""
    return {name: _factory(d) for name, d in _registered.items()}


def _factory(dialect: Dialect) -> DialectFactory:
    return lambda: dialect


@cache
def _discovered_dialects() -> dict[str, DialectFactory]:
    """xDSL's dialects, kaio's, then the entry points' (the first of a name wins). A package
    whose entry point does not load is skipped with a warning naming it."""
    from xdsl.dialects import get_all_dialects as xdsl_dialects

    from kaio.dialects import get_all_dialects

    found: dict[str, DialectFactory] = {**xdsl_dialects(), **get_all_dialects()}
    for name, factory in installed("all_dialects").items():
        found.setdefault(name, factory)
    return found


def rediscover_dialects() -> None:
    """Read the entry points again (after installing a package into the running process)."""
    _discovered_dialects.cache_clear()
    kaio_context.cache_clear()
