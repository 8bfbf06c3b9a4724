"""Triton's counter-based random numbers on the host, in numpy: the same bits as ``kt.rand`` /
``kt.randint`` / ``kt.randint4x`` (and the SIMT ``rand``/``randint``/``randint4x``) give in a
kernel, for references and for regenerating a kernel's dropout mask on the host.

    kaio.random.rand(seed, offsets)      # float32 in [0, 1), one per offset
    kaio.random.randint(seed, offsets)   # int32 (the bits of Philox's first word)
    kaio.random.randn(seed, offsets)     # float32 ~ N(0, 1), Box-Muller on the first two words

``seed`` is an integer taken modulo 2**64 (Triton casts it to uint64): its low word is Philox's
key k0, its high word k1. Each offset is a counter: its low 32 bits are c0, its high 32 bits c1
when the offsets are 64-bit integers (else 0), c2 = c3 = 0. 10 rounds. The algorithm and its
constants: :mod:`kaio.dialects.kernel_random`.

``randn`` is computed here in float32 with numpy's log, sqrt and cos; a kernel's come from the
GPU's, so the two may differ in the last bits (the integers and ``rand`` never do).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kaio.errors import KaioTypeError

ROUNDS = 10
KEY_A, KEY_B = 0x9E3779B9, 0xBB67AE85  # the key's increments per round (golden ratio, sqrt(3) - 1)
ROUND_A, ROUND_B = 0xD2511F53, 0xCD9E8D57  # the round multipliers
UNIFORM_SCALE = np.float32(4.6566127342e-10)  # the largest s with (2**31 - 1) * s < 1 in float32
MIN_UNIFORM = np.float32(1.0e-7)  # Box-Muller's floor under the uniform it takes the log of
TWO_PI = np.float32(6.283185307179586)
_MASK = 0xFFFFFFFF


def seed_words(seed: Any) -> tuple[int, int]:
    """The key (k0, k1) of an integer seed (modulo 2**64); a non-integer is a KaioTypeError."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise KaioTypeError(f"a random seed must be an integer, got {type(seed).__name__} {seed!r}")
    s = int(seed) % (1 << 64)
    return s & _MASK, s >> 32


def philox(seed: Any, c0: Any, c1: Any = 0, c2: Any = 0, c3: Any = 0, rounds: int = ROUNDS) -> tuple[np.ndarray, ...]:
    """Philox 4x32: four uint32 arrays from the counter words (broadcast) and the seed's key."""
    k0, k1 = (np.uint64(k) for k in seed_words(seed))
    c = [np.asarray(w).astype(np.uint64) & _MASK for w in np.broadcast_arrays(c0, c1, c2, c3)]
    mask = np.uint64(_MASK)
    for _ in range(rounds):
        p0, p1 = c[2] * np.uint64(ROUND_B), c[0] * np.uint64(ROUND_A)  # exact in 64 bits
        c = [(p0 >> np.uint64(32)) ^ c[1] ^ k0, p0 & mask, (p1 >> np.uint64(32)) ^ c[3] ^ k1, p1 & mask]
        k0, k1 = (k0 + np.uint64(KEY_A)) & mask, (k1 + np.uint64(KEY_B)) & mask
    return tuple(w.astype(np.uint32) for w in c)


def _counter(offsets: Any) -> tuple[np.ndarray, np.ndarray]:
    o = np.asarray(offsets)
    if o.dtype.kind not in "iu":
        raise KaioTypeError(f"random offsets must be integers, got {o.dtype}")
    wide = o.astype(np.int64 if o.dtype.kind == "i" else np.uint64)
    lo = (wide.astype(np.uint64) & _MASK).astype(np.uint32)
    hi = (wide.astype(np.uint64) >> np.uint64(32)).astype(np.uint32) if o.dtype.itemsize == 8 else np.zeros_like(lo)
    return lo, hi


def randint4x(seed: Any, offsets: Any, rounds: int = ROUNDS) -> tuple[np.ndarray, ...]:
    """Four int32 arrays per offset: Philox of (offset low word, offset high word, 0, 0)."""
    lo, hi = _counter(offsets)
    return tuple(w.view(np.int32) for w in philox(seed, lo, hi, 0, 0, rounds))


def randint(seed: Any, offsets: Any, rounds: int = ROUNDS) -> np.ndarray:
    return randint4x(seed, offsets, rounds)[0]


def uniform(words: np.ndarray) -> np.ndarray:
    """Triton's ``uint_to_uniform_float``: a word (as int32) to float32 in [0, 1)."""
    x = np.asarray(words).view(np.int32)
    x = np.where(x < 0, ~x, x)
    return x.astype(np.float32) * UNIFORM_SCALE


def rand(seed: Any, offsets: Any, rounds: int = ROUNDS) -> np.ndarray:
    return uniform(randint(seed, offsets, rounds))


def randn(seed: Any, offsets: Any, rounds: int = ROUNDS) -> np.ndarray:
    w0, w1, _, _ = randint4x(seed, offsets, rounds)
    u1, u2 = np.maximum(MIN_UNIFORM, uniform(w0)), uniform(w1)
    r = np.sqrt(np.float32(-2.0) * np.log(u1))
    return (r * np.cos(TWO_PI * u2)).astype(np.float32)


__all__ = ["philox", "rand", "randint", "randint4x", "randn", "seed_words", "uniform"]
