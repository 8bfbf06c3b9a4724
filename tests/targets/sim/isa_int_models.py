"""Python-integer models of the PTX ISA's packed-integer instructions (dp4a, dp2a, prmt, lop3)
and a source of 32-bit test words: shared by the simulator's tests and the language's builtin
tests, so both check against the same reading of the ISA."""

from __future__ import annotations

import numpy as np

M32 = (1 << 32) - 1


def lanes(x: int, width: int, signed: bool) -> list[int]:
    vals = [(x >> (width * k)) & ((1 << width) - 1) for k in range(32 // width)]
    return [v - (1 << width) if signed and v >> (width - 1) else v for v in vals]


def dot_model(a: int, b: int, c: int, sa: bool, sb: bool, pairs: int = 4, hi: bool = False) -> int:
    """dp4a (pairs=4) or dp2a (pairs=2, ``hi``: b's upper two bytes), wrapping to 32 bits."""
    xs = lanes(a, 8 if pairs == 4 else 16, sa)
    ys = lanes(b, 8, sb)[2 if hi else 0 :][:pairs]
    return (c + sum(x * y for x, y in zip(xs, ys))) & M32


def prmt_model(a: int, b: int, sel: int) -> int:
    """prmt.b32 in its default mode: each selector nibble picks a byte of b:a, bit 3 replicates its sign."""
    src, out = (b << 32) | a, 0
    for k in range(4):
        s = (sel >> (4 * k)) & 0xF
        byte = (src >> (8 * (s & 7))) & 0xFF
        out |= ((0xFF if byte & 0x80 else 0) if s & 8 else byte) << (8 * k)
    return out


def lop3_model(a: int, b: int, c: int, lut: int) -> int:
    return sum(((lut >> ((((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1))) & 1) << i for i in range(32))


EDGE_WORDS = [0, M32, 0x80808080, 0x7F7F7F7F, 0x8000_8000, 0x7FFF_7FFF, 0x01FF_80FF, 1, 0xFF00_00FF, 0xFFFF_0000, 0x8000_7FFF]


def words(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` u32 words: the sign and carry edge cases first, then random ones."""
    return np.concatenate([np.array(EDGE_WORDS, np.uint64), rng.integers(0, 1 << 32, n - len(EDGE_WORDS), dtype=np.uint64)]).astype(np.uint32)
