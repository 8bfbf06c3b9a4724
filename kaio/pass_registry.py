"""Which passes a pipeline string may name: xDSL's, kaio's, those third-party packages list in
an ``xdsl.universe`` entry point (as ``kaio-opt`` and ``xdsl-opt`` find them), and those
registered from Python with :func:`register_pass`.

A name means one pass class for the whole process: registering the same class again is
harmless, another class under a taken name is an error naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from xdsl.passes import ModulePass

from kaio.entry_points import installed
from kaio.errors import KaioPipelineError, KaioTypeError

PassFactory = Callable[[], type[ModulePass]]

_registered: dict[str, type[ModulePass]] = {}



def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Make ``cls`` (a ``ModulePass`` subclass with a ``name``) usable in pipeline strings
    (``Pipeline.parse("my-pass,lower-to-ptx")``, ``kaio.compile(..., pipeline="...")``).

    Returns ``cls``, so it works as a class decorator. Registering the same class twice is
    fine; a different class under a name already taken raises :class:`KaioPipelineError`."""
    if not (isinstance(cls, type) and issubclass(cls, ModulePass)):
        raise KaioTypeError(f"kaio.register_pass: `cls` must be a ModulePass subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise KaioTypeError(f"kaio.register_pass: {cls.__qualname__} has no `name` (the name pipeline strings use)")
    if not _nameable(name):
        raise KaioPipelineError(
            f"kaio.register_pass: {cls.__qualname__}'s name {name!r} cannot be written in a pipeline string "
            "(one word of letters, digits, '-' and '_')"
        )
    taken = _registered.get(name)
    if taken is None:
        factory = _discovered_passes().get(name)
        taken = factory() if factory is not None else None
    if taken is not None and taken is not cls:
        raise KaioPipelineError(
            f"kaio.register_pass: the pass name '{name}' is taken by {taken.__module__}.{taken.__qualname__}; "
            f"{cls.__module__}.{cls.__qualname__} needs another name"
        )
    _registered[name] = cls
    return cls


def _nameable(name: str) -> bool:
    """Whether ``name`` reads as one pass name in a pipeline string (the parser's own lexer)."""
    from xdsl.utils.arg_spec import PipelineLexer, SpecTokenKind

    lexer = PipelineLexer(name)
    try:
        first = lexer.lex()
        return first.kind is SpecTokenKind.IDENT and first.span.text == name and lexer.lex().kind is SpecTokenKind.EOF
    except Exception:  # xDSL's ArgSpecParseError: a character the lexer does not know
        return False


def available_passes() -> dict[str, PassFactory]:
    """Every pass a pipeline string may name, by name (the xDSL registry convention: a factory
    returning the class, so unused passes are never imported)."""
    found = dict(_discovered_passes())
    for name, cls in _registered.items():
        found[name] = _factory(cls)
    return found


def registered_passes() -> dict[str, PassFactory]:
    """Those given to :func:`register_pass` in this process (kaio-opt adds them to the entry
    points' that xDSL's own driver reads)."""
    return {name: _factory(cls) for name, cls in _registered.items()}


def _factory(cls: type[ModulePass]) -> PassFactory:
    return lambda: cls


def _kaio_canonicalize() -> type[ModulePass]:
    """kaio's ``canonicalize`` (:mod:`kaio.passes.canonicalize`): the name stays xDSL's in
    kaio-opt's universe, where a second definition of it is an error."""
    from kaio.passes.canonicalize import CanonicalizePass

    return CanonicalizePass


@cache
def _discovered_passes() -> dict[str, PassFactory]:
    """xDSL's passes, kaio's, then the entry points' (the first of a name wins, as in kaio-opt).
    A package whose entry point does not load is skipped with a warning naming it."""
    from xdsl.transforms import get_all_passes as xdsl_passes

    from kaio.passes import get_all_passes

    found: dict[str, PassFactory] = {**xdsl_passes(), **get_all_passes()}
    found["canonicalize"] = _kaio_canonicalize  # xDSL's rewrites, its per-class look-ups kept
    for name, factory in installed("all_passes").items():
        found.setdefault(name, factory)
    return found


@cache
def builtin_pass_names() -> frozenset[str]:
    """The names of xDSL's passes and kaio's (which no entry point nor registration can take):
    known without importing any of them."""
    from xdsl.transforms import get_all_passes as xdsl_passes

    from kaio.passes import get_all_passes

    return frozenset(xdsl_passes()) | frozenset(get_all_passes())


def rediscover_passes() -> None:
    """Read the entry points again (after installing a package into the running process)."""
    _discovered_passes.cache_clear()
