"""GGUF (llama.cpp) quantised block formats, as the kernels of ``gguf_matmul`` read them.

A quantised GGUF tensor of shape (N, K) is stored row by row; each row is ``K / QK`` blocks of
``QK`` elements and ``NB`` bytes, exactly as ``gguf.GGUFReader`` returns it (``tensor.data``:
uint8 ``(N, K / QK * NB)``). The byte layouts (llama.cpp ``ggml-common.h``; the ``gguf``
package's ``quants.py`` decodes them the same way), ``j`` the element's place in its block:

* **Q8_0** (QK 32, 34 B): ``d`` f16 | 32 x int8 ``q``.  ``w = d * q``.
* **Q4_0** (QK 32, 18 B): ``d`` f16 | 16 bytes of nibbles: byte ``i`` holds element ``i`` in
  its low nibble and element ``i + 16`` in its high one.  ``w = d * (q - 8)``.
* **Q4_K** (QK 256, 144 B): ``d`` f16 | ``dmin`` f16 | 12 bytes of eight 6-bit scales ``sc``
  and eight 6-bit mins ``m`` (one each per sub-block of 32) | 128 bytes of nibbles. Scales
  packing, byte ``b[i]``, sub-block ``s``: for ``s < 4`` ``sc = b[s] & 63``,
  ``m = b[s + 4] & 63``; for ``s >= 4`` ``sc = (b[s + 4] & 15) | (b[s - 4] >> 6) << 4``,
  ``m = (b[s + 4] >> 4) | (b[s] >> 6) << 4``. Nibbles: each 32-byte chunk ``c`` holds
  elements ``64c .. 64c + 31`` in its low nibbles and ``64c + 32 .. 64c + 63`` in its high
  ones.  ``w = d * sc[s] * q - dmin * m[s]``.
* **Q5_K** (QK 256, 176 B): as Q4_K, with 32 bytes of high bits ``qh`` between the scales and
  the nibbles: bit ``s`` of ``qh[j % 32]`` is bit 4 of element ``j`` (``s = j // 32``).
* **Q6_K** (QK 256, 210 B): 128 bytes ``ql`` (low 4 bits: each 64-byte half ``c`` holds
  elements ``128c .. 128c + 63`` low nibbles first, ``128c + 64 ..`` in the high nibbles) | 64
  bytes ``qh`` (bits 4-5: byte ``32c + i`` holds elements ``128c + 32t + i`` for t = 0..3 at
  bits ``2t``) | 16 int8 scales (one per 16 elements) | ``d`` f16 at byte 208.
  ``w = d * scale[j // 16] * (q - 32)``.

Every format is read here as integers: ``w = d * S * q - dmin * M`` with integer quant ``q``,
integer sub-block scale ``S`` and min ``M`` (1 and 0 where a format has none), so that one
kernel serves every format and the decoding path can keep the integer product exact. The
``@kaio.device`` functions below give each format's byte offsets and bit fields for an element
``j`` of a block (lifted over tiles element by element); their format argument ``F`` is a
compile-time constant at every call, so only its branch is compiled. ``j`` is never negative,
so its fields are taken with shifts and masks (``j >> 5`` is ``j // 32``): a signed division
would cost a fix-up per element.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import kaio
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import bitcast, f16, i8, i32, prmt, u16

# The formats' codes are ggml's type numbers (gguf.GGMLQuantizationType's values); the kernels
# compare them: the K-quants (sub-block scales) are >= Q4_K, those with high bits >= Q5_K.
Q4_0, Q8_0, Q4_K, Q5_K, Q6_K = 2, 8, 12, 13, 14


@dataclass(frozen=True)
class BlockFormat:
    """One GGUF block format: its ggml type number, elements and bytes per block, and where its
    f16 super-scales sit in a block, counted in halves (``dmin_at`` -1: none)."""

    name: str
    code: int
    elements: int
    nbytes: int
    d_at: int
    dmin_at: int = -1
    decode_step: int = 32  # elements of K per trip of the decoding kernel (K-quants: both nibbles of a byte)


FORMATS = {
    f.name: f
    for f in (
        BlockFormat("Q8_0", Q8_0, 32, 34, 0),
        BlockFormat("Q4_0", Q4_0, 32, 18, 0),
        BlockFormat("Q4_K", Q4_K, 256, 144, 0, 1, 64),
        BlockFormat("Q5_K", Q5_K, 256, 176, 0, 1, 64),
        BlockFormat("Q6_K", Q6_K, 256, 210, 104),
    )
}


def block_format(op: str, qtype: Any) -> BlockFormat:
    """The format ``qtype`` names: a name ("Q4_K") or a ``gguf.GGMLQuantizationType`` (any enum
    member with that name and ggml's number; gguf itself is never imported)."""
    if isinstance(qtype, enum.Enum):
        fmt = FORMATS.get(qtype.name)
        if fmt is None or qtype.value != fmt.code:
            raise KaioValueError(f"{op}: `qtype` {qtype!r} is not one of the supported formats {', '.join(FORMATS)}")
        return fmt
    if not isinstance(qtype, str):
        raise KaioTypeError(
            f"{op}: `qtype` must be a format name or a gguf.GGMLQuantizationType, got {type(qtype).__name__}"
        )
    fmt = FORMATS.get(qtype.upper())
    if fmt is None:
        raise KaioValueError(f"{op}: `qtype` {qtype!r} is not one of the supported formats {', '.join(FORMATS)}")
    return fmt


@kaio.device
def quant_byte(j: i32, F: i32) -> i32:
    """The block byte holding element ``j``'s low bits (all of them for Q8_0)."""
    if F == Q8_0:
        return 2 + j
    if F == Q4_0:
        return 2 + (j & 15)
    if F == Q4_K:
        return 16 + (j >> 6 << 5) + (j & 31)
    if F == Q5_K:
        return 48 + (j >> 6 << 5) + (j & 31)
    return (j >> 7 << 6) + (j & 63)  # Q6_K


@kaio.device
def high_byte(j: i32, F: i32) -> i32:
    """The block byte holding element ``j``'s high bits (Q5_K, Q6_K)."""
    if F == Q5_K:
        return 16 + (j & 31)
    return 128 + (j >> 7 << 5) + (j & 31)  # Q6_K


@kaio.device
def scale_byte(j: i32, F: i32) -> i32:
    """The first scale byte of the step of 32 elements starting at ``j``: Q6_K's int8 scale of
    its first 16 elements (the next byte: its last 16), or byte ``s % 4`` of the K-quants' 12
    packed ones (their fields also need bytes ``+ 4`` and ``+ 8``)."""
    if F == Q6_K:
        return 192 + (j >> 4)
    return 4 + (j >> 5 & 3)


@kaio.device
def scale_stride(F: i32) -> i32:
    """Bytes from one of a step's scale bytes to the next (see :func:`scale_byte`)."""
    if F == Q6_K:
        return 1
    return 4


@kaio.device
def quant(lo: i32, hi: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s integer quant, zero point removed, from its low byte ``lo`` and high
    byte ``hi`` (both read as unsigned)."""
    if F == Q8_0:
        return i32(i8(lo))
    if F == Q4_0:
        return (lo >> (j >> 4 << 2) & 15) - 8
    if F == Q4_K:
        return lo >> ((j >> 5 & 1) << 2) & 15
    if F == Q5_K:
        return (lo >> ((j >> 5 & 1) << 2) & 15) | (hi >> (j >> 5) & 1) << 4
    return ((lo >> ((j >> 6 & 1) << 2) & 15) | (hi >> ((j >> 5 & 3) << 1) & 3) << 4) - 32  # Q6_K


@kaio.device
def sub_scale(s0: i32, s1: i32, s2: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s sub-block scale from its step's scale bytes (:func:`scale_byte`, then
    every :func:`scale_stride`): Q6_K's int8, the K-quants' 6-bit field; 1 for the formats
    without."""
    if F == Q6_K:
        return i32(i8(s0 if j & 16 == 0 else s1))
    if F >= Q4_K:
        return s0 & 63 if j < 128 else (s2 & 15) | (s0 >> 6) << 4
    return 1


@kaio.device
def sub_min(s0: i32, s1: i32, s2: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s sub-block min (Q4_K, Q5_K: a 6-bit field of the step's scale bytes);
    0 for the formats without."""
    if F == Q4_K or F == Q5_K:
        return s1 & 63 if j < 128 else (s2 >> 4) | (s1 >> 6) << 4
    return 0


# --- the decoding kernel's words -----------------------------------------------------------------
# It reads a block's quants 32 bits at a time, through the f16 view of the weight bytes (every
# format's blocks are only 2-byte aligned: Q8_0 34 B, Q4_0 18 B, Q6_K 210 B), each word from two
# halves, as llama.cpp's get_int_b2 does; nibbles are split with a shift and a mask per word.

NIBBLES = 0x0F0F0F0F  # the low nibble of each byte
ONES = 0x01010101  # dp4a(x, ONES, 0): the sum of x's four signed bytes


@kaio.device
def join(lo: f16, hi: f16) -> i32:
    """The 32-bit word whose low half is ``lo``'s bits and high half ``hi``'s (one ``prmt``)."""
    return prmt(i32(bitcast(lo, u16)), i32(bitcast(hi, u16)), 0x5410)


@kaio.device
def q6_word(ql: i32, qh: i32, t: i32) -> i32:
    """Q6_K's four 6-bit quants of group ``t`` (0..3) of a 128-element half at one ``i``: low
    nibbles of ``ql`` for ``t < 2``, high ones above, bits ``2t`` of the ``qh`` bytes on top."""
    return (ql >> (t >> 1 << 2) & NIBBLES) | (qh >> 2 * t & 0x03030303) << 4
