"""Which modifiers a PTX instruction takes with which of its types, as ptxas enforces them.

An op's ``INFO`` lists every type and every modifier the instruction ever takes; that alone
accepts ``mul.lo.f32`` (``.lo`` is a modifier of ``mul``, ``.f32`` one of its types) and
``add.rn.s32``, which ptxas refuses. The rules here say, per type class, which of the op's
modifiers apply and which are required, so such IR fails at the verifier (``kaio-opt``,
``load_ir``, the pass manager) instead of at the driver's JIT on a GPU. ptxas is the oracle:
``tests/dialects/test_ptx_grammar.py`` checks every rule's planted case against it.

Only the op class and its spec decide these, so the verifier applies them once per spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from xdsl.utils.exceptions import VerifyException

FLOAT_ROUNDING = frozenset(("rn", "rz", "rm", "rp"))  # to the nearest float
INTEGER_ROUNDING = frozenset(("rni", "rzi", "rmi", "rpi"))  # to an integral value
ROUNDING = FLOAT_ROUNDING | INTEGER_ROUNDING
VECTORS = {"v2": 2, "v4": 4}

# modifiers of which a spec holds at most one, whatever the instruction
EXCLUSIVE = (ROUNDING, frozenset(VECTORS), frozenset(("lo", "hi", "wide")))


@dataclass(frozen=True)
class TypeRule:
    """The modifiers an instruction takes with the types in ``types``."""

    types: frozenset[str]
    allowed: frozenset[str] = frozenset()
    required: tuple[frozenset[str], ...] = ()  # exactly one of each group must be present
    # a modifier that only comes with one of others: mad's .sat needs .hi
    needs: Mapping[str, frozenset[str]] = field(default_factory=dict)


def rule(
    types: Iterable[str],
    allowed: Iterable[str] = (),
    required: Iterable[Iterable[str]] = (),
    needs: Mapping[str, Iterable[str]] | None = None,
) -> TypeRule:
    groups = tuple(frozenset(g) for g in required)
    return TypeRule(
        frozenset(types),
        frozenset(allowed).union(*groups),
        groups,
        {m: frozenset(v) for m, v in (needs or {}).items()},
    )


def _names(mods: Iterable[str]) -> str:
    return "/".join(f".{m}" for m in sorted(mods))


def check_exclusive(opcode: str, mods: Iterable[str]) -> None:
    present = set(mods)
    for group in EXCLUSIVE:
        clash = present & group
        if len(clash) > 1:
            raise VerifyException(f"{opcode}: {_names(clash)} exclude each other")


def check_type_rules(opcode: str, rules: tuple[TypeRule, ...], mods: list[str], ptx_type: str) -> None:
    """``mods`` against the rule for ``ptx_type`` (an op with rules takes no other type)."""
    found = next((r for r in rules if ptx_type in r.types), None)
    if found is None:
        raise VerifyException(f"{opcode}: .{ptx_type} is not a type of this instruction")
    for m in mods:
        if m not in found.allowed:
            raise VerifyException(f"{opcode}: .{m} does not apply to .{ptx_type}")
    for group in found.required:
        if len(group.intersection(mods)) != 1:
            raise VerifyException(f"{opcode}: .{ptx_type} needs exactly one of {_names(group)}")
    for m, partners in found.needs.items():
        if m in mods and not partners.intersection(mods):
            raise VerifyException(f"{opcode}: .{m} needs {_names(partners)}")


def vector_count(mods: Iterable[str]) -> int:
    return next((VECTORS[m] for m in mods if m in VECTORS), 1)


# ld and st: state spaces, cache operators and memory orders
LOAD_SPACES = frozenset(("global", "shared", "local", "param", "const"))
STORE_SPACES = frozenset(("global", "shared", "local"))
LOAD_CACHING = frozenset(("ca", "cg", "cs", "lu", "cv"))
STORE_CACHING = frozenset(("wb", "cg", "cs", "wt"))
SCOPES = frozenset(("cta", "gpu", "sys"))


def check_memory_spec(opcode: str, mods: list[str], bits: int, store: bool) -> None:
    """ld/st: one state space of the instruction's, one cache operator, one memory order with
    its scope (``.relaxed.gpu``), ``.nc`` on global loads only, at most 128 bits a vector."""
    spaces = STORE_SPACES if store else LOAD_SPACES
    caching = STORE_CACHING if store else LOAD_CACHING
    orders = frozenset(("volatile", "relaxed", "release" if store else "acquire"))
    present = set(mods)
    foreign = (LOAD_SPACES | LOAD_CACHING | STORE_CACHING | {"nc", "acquire", "release"}) - (
        spaces | caching | orders | (frozenset() if store else {"nc"})
    )
    for m in sorted(present & foreign):
        raise VerifyException(f"{opcode}: .{m} does not apply to {'st' if store else 'ld'}")
    for group, what in ((spaces, "state space"), (caching, "cache operator"), (orders, "memory order")):
        if len(present & group) > 1:
            raise VerifyException(f"{opcode}: one {what}, got {_names(present & group)}")
    order = present & orders
    scope = present & SCOPES
    if len(scope) > 1 or (scope and not order - {"volatile"}) or (order - {"volatile"} and not scope):
        raise VerifyException(f"{opcode}: .relaxed/.acquire/.release take one scope (.cta/.gpu/.sys) and a scope needs one of them")
    if "volatile" in present and present & caching:
        raise VerifyException(f"{opcode}: .volatile takes no cache operator")
    if "nc" in present and ("global" not in present or order):
        raise VerifyException(f"{opcode}: .nc is for plain global loads")
    if vector_count(mods) * bits > 128:
        raise VerifyException(f"{opcode}: a vector access moves at most 128 bits")


def check_cvt_spec(
    opcode: str, mods: list[str], dst: str, src: str, bits: Mapping[str, int], floats: frozenset[str]
) -> None:
    """cvt's rounding between integers and the float types ``floats`` (``bits`` wide): to an
    integer from a float needs ``.rni``-like rounding, to a float from an integer or a wider
    float ``.rn``-like rounding; a widening or same-width float conversion takes no float
    rounding (the same width may round to an integral value: ``cvt.rzi.f32.f32``)."""
    width = {t: bits[t] // 2 if t.endswith("x2") else bits[t] for t in (dst, src)}
    present = set(mods)
    to_float, from_float = dst in floats, src in floats
    if to_float and (not from_float or width[dst] < width[src]):
        expected, what = FLOAT_ROUNDING, "a float rounding"
    elif from_float and not to_float:
        expected, what = INTEGER_ROUNDING, "an integer rounding"
    else:
        expected, what = frozenset(), "no rounding"
    optional = INTEGER_ROUNDING if to_float and from_float and width[dst] == width[src] else frozenset()
    given = present & ROUNDING
    if (expected and not given & expected) or given - expected - optional:
        raise VerifyException(f"{opcode}: a .{src} -> .{dst} conversion takes {what}")
    if "ftz" in present and "f32" not in (dst, src):
        raise VerifyException(f"{opcode}: .ftz needs an .f32 side")
    if "sat" in present and not (to_float or from_float):
        # between integers .sat clamps what the destination cannot hold: a narrower one, or
        # the other signedness where values would wrap
        signed_src, signed_dst = src[0] == "s", dst[0] == "s"
        wraps = width[dst] < width[src] or (signed_src and not signed_dst) or (
            signed_dst and not signed_src and width[dst] <= width[src]
        )
        if not wraps:
            raise VerifyException(f"{opcode}: every .{src} fits a .{dst}; .sat clamps nothing")
