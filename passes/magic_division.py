"""Division of a machine word by a constant with one multiply-high (Granlund and Montgomery,
"Division by invariant integers using multiplication", 1994; Warren, *Hacker's Delight*, ch. 10).

Each function returns the numbers the emitted sequence needs; :func:`udiv_model` and
:func:`sdiv_model` evaluate that sequence in Python exactly as the instructions do, so the
numbers can be tested against exact division without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnsignedMagic:
    """``q = mulhi(x, multiplier) >> shift``; with ``add``: ``t = mulhi(x, multiplier)``,
    ``q = (((x - t) >> 1) + t) >> shift`` (the true multiplier is 2^bits + ``multiplier``)."""

    multiplier: int
    shift: int
    add: bool


@dataclass(frozen=True)
class SignedMagic:
    """``q = mulhi.s(x, multiplier)`` (+ x when ``add``), ``>>s shift``, + 1 when x < 0."""

    multiplier: int  # as unsigned bits
    shift: int
    add: bool


def unsigned_magic(d: int, bits: int) -> UnsignedMagic:
    """The multiplier for ``x // d`` over unsigned ``bits``-bit x (d >= 2, not a power of two):
    the smallest shift s with m = ceil(2^(bits+s) / d) and m*d - 2^(bits+s) <= 2^s, which makes
    floor(x*m / 2^(bits+s)) exact for every x < 2^bits."""
    if d < 2 or d & (d - 1) == 0 or d >= 1 << bits:
        raise ValueError(f"unsigned_magic: {d} is not a divisor this applies to")
    for s in range((d - 1).bit_length() + 1):
        m = -(-(1 << (bits + s)) // d)
        if m * d - (1 << (bits + s)) <= 1 << s:
            if m < 1 << bits:
                return UnsignedMagic(m, s, False)
            return UnsignedMagic(m - (1 << bits), s - 1, True)
    raise AssertionError("unreachable: s = ceil(log2 d) always works")


def signed_magic(d: int, bits: int) -> SignedMagic:
    """The multiplier for C's truncating ``x / d`` over signed ``bits``-bit x (d >= 3, not a
    power of two; Hacker's Delight 10-1): the smallest p >= bits with
    2^p > nc * (d - 2^p mod d), nc the largest x with x mod d == d - 1."""
    if d < 3 or d & (d - 1) == 0 or d >= 1 << (bits - 1):
        raise ValueError(f"signed_magic: {d} is not a divisor this applies to")
    half = 1 << (bits - 1)
    nc = half - 1 - half % d
    p = bits  # Hacker's Delight's loop runs once before testing: p >= bits
    while (1 << p) <= nc * (d - (1 << p) % d):
        p += 1
    m = ((1 << p) + d - (1 << p) % d) // d
    return SignedMagic(m & ((1 << bits) - 1), p - bits, m >= half)


def _mulhi(a: int, b: int, bits: int) -> int:
    return (a * b) >> bits


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def udiv_model(x: int, magic: UnsignedMagic, bits: int) -> int:
    mask = (1 << bits) - 1
    t = _mulhi(x, magic.multiplier, bits)
    if not magic.add:
        return t >> magic.shift
    return ((((x - t) & mask) >> 1) + t) >> magic.shift


def sdiv_model(x: int, magic: SignedMagic, bits: int) -> int:
    """``x`` signed; the quotient as a signed value."""
    q = _mulhi(x, _signed(magic.multiplier, bits), bits)
    if magic.add:
        q = _signed(q + x, bits)
    q >>= magic.shift
    return q + (1 if x < 0 else 0)
