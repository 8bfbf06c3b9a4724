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
* **Q4_1** (QK 32, 20 B): ``d`` f16 | ``m`` f16 | 16 bytes of nibbles as Q4_0.
  ``w = d * q + m`` (the model's ``dmin`` is ``m``, ``M = -1``).
* **Q5_0** (QK 32, 22 B): ``d`` f16 | 4 bytes ``qh`` (bit ``j`` of the little-endian word: bit
  4 of element ``j``) | 16 bytes of nibbles as Q4_0.  ``w = d * (q - 16)``.
* **Q5_1** (QK 32, 24 B): ``d`` f16 | ``m`` f16 | ``qh`` | nibbles.  ``w = d * q + m``.
* **Q2_K** (QK 256, 84 B): 16 scale bytes (one per 16 elements: the scale in the low nibble,
  the min in the high one) | 64 bytes of 2-bit quants (byte ``32h + i`` holds elements
  ``128h + 32t + i`` at bits ``2t``) | ``d`` f16 | ``dmin`` f16 at byte 80.
  ``w = d * sc * q - dmin * m``.
* **Q3_K** (QK 256, 110 B): 32 bytes ``hmask`` (bit ``j // 32`` of byte ``j % 32``: bit 2 of
  element ``j``, *set* for no offset) | 64 bytes of 2-bit quants as Q2_K's | 12 bytes of sixteen
  6-bit scales (sub-block ``s`` of 16: low 4 bits in byte ``s % 8`` at bit ``4 (s // 8)``, high 2
  bits in byte ``8 + s % 4`` at bit ``2 (s // 4)``; stored + 32) | ``d`` f16 at byte 108.
  ``w = d * (sc - 32) * (q2 + 4 hbit - 4)``.
* **IQ4_NL** (QK 32, 18 B): as Q4_0, each nibble an index into the int8 table
  :data:`IQ4NL_VALUES`.  ``w = d * kvalues[q]``.
* **IQ4_XS** (QK 256, 136 B): ``d`` f16 | ``scales_h`` u16 | 4 bytes ``scales_l`` | 128 bytes of
  nibbles: sub-block ``s`` of 32 takes bytes ``16s ..`` as IQ4_NL's block, its 6-bit scale the
  nibble ``4 (s % 2)`` of ``scales_l[s // 2]`` and bits ``2s`` of ``scales_h``, stored + 32.
  ``w = d * (sc - 32) * kvalues[q]``.
* **MXFP4** (QK 32, 17 B; gpt-oss): ``e`` u8 (an e8m0 exponent) | 16 bytes of nibbles as Q4_0,
  each an e2m1 code whose value *doubled* is the integer :data:`MXFP4_VALUES` (0, ±1, ±2, ±3,
  ±4, ±6, ±8, ±12).  ``w = 2**(e - 128) * kvalues[q]`` (``gguf``'s ``e8m0_to_fp32_half``: f32
  subnormal for e < 2, and 2**127, not NaN, for e = 255).
* **F32, F16, BF16** (QK 1): the weights as they are, read through the same byte array.

Every quantised format is read here as integers: ``w = (d * S) * q - dmin * M`` with integer
quant ``q``, integer sub-block scale ``S`` and min ``M`` (1 and 0 where a format has none), so
that one kernel serves every format and the decoding path can keep the integer product exact.
The products are exact in f32 (an f16 times integers of at most 8 bits each, and MXFP4's power of
two), and ``(d * S) * q`` is ``gguf``'s order, so the one rounding of the subtraction and even
the sign of a zero match ``gguf.quants.dequantize`` bit for bit. Two formats do not fit with a
plain integer ``q``: the IQ4 formats and MXFP4 map a nibble through a 16-entry table of integers
(looked up with two ``prmt`` byte permutes of the table's four 32-bit words and a select: an
integer ``q`` again), and MXFP4's ``d`` is no f16 field but an exponent, built as an f32's bits.
MXFP4's 17-byte blocks are the one layout not 2-byte aligned. The ``@kaio.device`` functions
below give each format's byte offsets and bit fields for an element ``j`` of a block (lifted over
tiles element by element); their format argument ``F`` is a compile-time constant at every call,
so only its branch is compiled. ``j`` is never negative, so its fields are taken with shifts and
masks (``j >> 5`` is ``j // 32``): a signed division would cost a fix-up per element.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import kaio
from kaio.errors import KaioTypeError, KaioValueError
from kaio.prelude import bitcast, f16, f32, i8, i32, prmt, u16

# The formats' codes are ggml's type numbers (gguf.GGMLQuantizationType's values).
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14
IQ4_NL, IQ4_XS, BF16, MXFP4 = 20, 23, 30, 39

IQ4NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)  # ggml's kvalues_iq4nl
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # e2m1, doubled (kvalues_mxfp4)


def table_words(values: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A 16-entry int8 table as four little-endian 32-bit words (entries 0-3, 4-7, ...), as
    signed ints (a kernel's i32 constants)."""
    b = [v & 255 for v in values]
    words = [b[4 * w] | b[4 * w + 1] << 8 | b[4 * w + 2] << 16 | b[4 * w + 3] << 24 for w in range(4)]
    return tuple(w - (1 << 32) if w >= 1 << 31 else w for w in words)  # type: ignore[return-value]


# the kernels' constants are names of ints (a kernel indexes no Python tuple)
IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3 = table_words(IQ4NL_VALUES)
MXFP4_W0, MXFP4_W1, MXFP4_W2, MXFP4_W3 = table_words(MXFP4_VALUES)


@dataclass(frozen=True)
class BlockFormat:
    """One GGUF block format: its ggml type number, elements and bytes per block, where its
    f16 super-scales sit in a block, counted in halves (``dmin_at`` -1: none; MXFP4's ``d_at``
    is its exponent byte), and how many scale bytes a step of 32 elements reads (0: none)."""

    name: str
    code: int
    elements: int
    nbytes: int
    d_at: int
    dmin_at: int = -1
    decode_step: int = 32  # elements of K per trip of the decoding kernel (Q4_K/Q5_K: both nibbles of a byte)
    scale_bytes: int = 0

    @property
    def passthrough(self) -> bool:
        """The float formats: the weights as they are, no blocks."""
        return self.elements == 1


FORMATS = {
    f.name: f
    for f in (
        BlockFormat("Q8_0", Q8_0, 32, 34, 0),
        BlockFormat("Q4_0", Q4_0, 32, 18, 0),
        BlockFormat("Q4_1", Q4_1, 32, 20, 0, 1),
        BlockFormat("Q5_0", Q5_0, 32, 22, 0),
        BlockFormat("Q5_1", Q5_1, 32, 24, 0, 1),
        BlockFormat("Q2_K", Q2_K, 256, 84, 40, 41, 32, 2),
        BlockFormat("Q3_K", Q3_K, 256, 110, 54, -1, 32, 4),
        BlockFormat("Q4_K", Q4_K, 256, 144, 0, 1, 64, 3),
        BlockFormat("Q5_K", Q5_K, 256, 176, 0, 1, 64, 3),
        BlockFormat("Q6_K", Q6_K, 256, 210, 104, -1, 32, 2),
        BlockFormat("IQ4_NL", IQ4_NL, 32, 18, 0),
        BlockFormat("IQ4_XS", IQ4_XS, 256, 136, 0, -1, 32, 2),
        BlockFormat("MXFP4", MXFP4, 32, 17, 0),
        BlockFormat("F32", F32, 1, 4, 0),
        BlockFormat("F16", F16, 1, 2, 0),
        BlockFormat("BF16", BF16, 1, 2, 0),
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
    if F == Q4_0 or F == IQ4_NL:
        return 2 + (j & 15)
    if F == Q4_1:
        return 4 + (j & 15)
    if F == Q5_0:
        return 6 + (j & 15)
    if F == Q5_1:
        return 8 + (j & 15)
    if F == MXFP4:
        return 1 + (j & 15)
    if F == Q2_K:
        return 16 + (j >> 7 << 5) + (j & 31)
    if F == Q3_K:
        return 32 + (j >> 7 << 5) + (j & 31)
    if F == IQ4_XS:
        return 8 + (j >> 5 << 4) + (j & 15)
    if F == Q4_K:
        return 16 + (j >> 6 << 5) + (j & 31)
    if F == Q5_K:
        return 48 + (j >> 6 << 5) + (j & 31)
    return (j >> 7 << 6) + (j & 63)  # Q6_K


@kaio.device
def high_byte(j: i32, F: i32) -> i32:
    """The block byte holding element ``j``'s high bit(s) (Q5_0, Q5_1, Q3_K, Q5_K, Q6_K)."""
    if F == Q5_0:
        return 2 + (j >> 3)
    if F == Q5_1:
        return 4 + (j >> 3)
    if F == Q3_K:
        return j & 31
    if F == Q5_K:
        return 16 + (j & 31)
    return 128 + (j >> 7 << 5) + (j & 31)  # Q6_K


@kaio.device
def scale_byte(j: i32, r: i32, F: i32) -> i32:
    """Scale byte ``r`` (0 .. ``scale_bytes - 1``) of the step of 32 elements starting at
    ``j``: Q6_K's int8 scales of its two halves of 16; byte ``s % 4``, ``+ 4`` and ``+ 8`` of
    the K-quants' 12 packed ones; Q2_K's two of 16 elements; Q3_K's two low-nibble bytes then
    its two high-bit bytes; IQ4_XS's ``scales_l`` byte then its ``scales_h`` byte."""
    if F == Q6_K:
        return 192 + (j >> 4) + r
    if F == Q2_K:
        return (j >> 4) + r
    if F == Q3_K:
        return 96 + (j >> 4 & 7) + r if r < 2 else 104 + (j >> 4 & 3) + r - 2
    if F == IQ4_XS:
        return 4 + (j >> 6) if r == 0 else 2 + (j >> 7)
    return 4 + (j >> 5 & 3) + 4 * r  # Q4_K, Q5_K


@kaio.device
def lookup(nib: i32, w0: i32, w1: i32, w2: i32, w3: i32) -> i32:
    """Entry ``nib`` (0..15) of the int8 table of words ``w0..w3`` (:func:`table_words`),
    sign-extended: a byte permute of each half of the table, then a select."""
    s = nib & 7  # prmt's bit 3 would sign-replicate: the halves are picked by the select instead
    return i32(i8(prmt(w2, w3, s) if nib & 8 != 0 else prmt(w0, w1, s)))


@kaio.device
def quant(lo: i32, hi: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s integer quant, zero point removed (or its table value), from its low
    byte ``lo`` and high byte ``hi`` (both read as unsigned)."""
    if F == Q8_0:
        return i32(i8(lo))
    if F == Q4_0:
        return (lo >> (j >> 4 << 2) & 15) - 8
    if F == Q4_1:
        return lo >> (j >> 4 << 2) & 15
    if F == Q5_0:
        return ((lo >> (j >> 4 << 2) & 15) | (hi >> (j & 7) & 1) << 4) - 16
    if F == Q5_1:
        return (lo >> (j >> 4 << 2) & 15) | (hi >> (j & 7) & 1) << 4
    if F == IQ4_NL:
        return lookup(lo >> (j >> 4 << 2) & 15, IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3)
    if F == IQ4_XS:
        return lookup(lo >> ((j >> 4 & 1) << 2) & 15, IQ4NL_W0, IQ4NL_W1, IQ4NL_W2, IQ4NL_W3)
    if F == MXFP4:
        return lookup(lo >> (j >> 4 << 2) & 15, MXFP4_W0, MXFP4_W1, MXFP4_W2, MXFP4_W3)
    if F == Q2_K:
        return lo >> ((j >> 5 & 3) << 1) & 3
    if F == Q3_K:
        return (lo >> ((j >> 5 & 3) << 1) & 3) + ((hi >> (j >> 5) & 1) << 2) - 4
    if F == Q4_K:
        return lo >> ((j >> 5 & 1) << 2) & 15
    if F == Q5_K:
        return (lo >> ((j >> 5 & 1) << 2) & 15) | (hi >> (j >> 5) & 1) << 4
    return ((lo >> ((j >> 6 & 1) << 2) & 15) | (hi >> ((j >> 5 & 3) << 1) & 3) << 4) - 32  # Q6_K


@kaio.device
def sub_scale(s0: i32, s1: i32, s2: i32, s3: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s sub-block scale from its step's scale bytes (:func:`scale_byte` ``r`` =
    0..3): Q6_K's int8, the K-quants' 6-bit fields; 1 for the formats without."""
    if F == Q6_K:
        return i32(i8(s0 if j & 16 == 0 else s1))
    if F == Q2_K:
        return (s0 if j & 16 == 0 else s1) & 15
    if F == Q3_K:
        low = (s0 if j & 16 == 0 else s1) >> (j >> 7 << 2) & 15
        return (low | ((s2 if j & 16 == 0 else s3) >> (j >> 6 << 1) & 3) << 4) - 32
    if F == IQ4_XS:
        return ((s0 >> ((j >> 5 & 1) << 2) & 15) | (s1 >> ((j >> 5 & 3) << 1) & 3) << 4) - 32
    if F == Q4_K or F == Q5_K:
        return s0 & 63 if j < 128 else (s2 & 15) | (s0 >> 6) << 4
    return 1


@kaio.device
def sub_min(s0: i32, s1: i32, s2: i32, s3: i32, j: i32, F: i32) -> i32:
    """Element ``j``'s sub-block min (Q2_K: the high nibble of its scale byte; Q4_K, Q5_K: a
    6-bit field of the step's scale bytes); Q4_1's and Q5_1's ``m`` is added: -1; 0 for the
    formats without."""
    if F == Q4_K or F == Q5_K:
        return s1 & 63 if j < 128 else (s2 >> 4) | (s1 >> 6) << 4
    if F == Q2_K:
        return (s0 if j & 16 == 0 else s1) >> 4
    if F == Q4_1 or F == Q5_1:
        return -1
    return 0


@kaio.device
def e8m0_half(e: i32) -> f32:
    """MXFP4's block scale ``2**(e - 128)`` from its exponent byte, exactly as ggml's
    ``ggml_e8m0_to_fp32_half``: the f32 bits, subnormal below e = 2."""
    return bitcast(0x00200000 << e if e < 2 else (e - 1) << 23, f32)


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


@kaio.device
def lookup4(q: i32, w0: i32, w1: i32, w2: i32, w3: i32) -> i32:
    """The table entries (:func:`table_words`) of the four nibbles of ``q``'s low 16 bits, nibble
    ``k`` to byte ``k``: each half of the table permuted by the nibbles' low 3 bits, then byte
    ``k`` taken from the upper half's result where nibble ``k``'s bit 3 is set (llama.cpp's
    ``get_int_from_table_16``; the selectors' bit 3 masked, as ``prmt`` would sign-replicate)."""
    s = q & 0x7777
    return prmt(prmt(w0, w1, s), prmt(w2, w3, s), 0x3210 | (q & 0x8888) >> 1)


@kaio.device
def spread4(bits: i32) -> i32:
    """Bits 0..3 of ``bits`` to bit 4 of bytes 0..3 (Q5_0/Q5_1's high bits beside their nibbles):
    one multiply puts bit ``b`` at bit ``8b`` (the four partial products never overlap)."""
    return ((bits & 15) * 0x00204081 & ONES) << 4
