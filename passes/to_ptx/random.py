"""``kernel.philox`` to PTX: each round spelled out as 32-bit ``mul.hi``/``mul.lo``, ``xor`` and
``add`` (the algorithm: kaio.dialects.kernel_random). ptxas pairs each ``mul.hi``/``mul.lo`` of
one product into a single ``IMAD.WIDE.U32`` and each double ``xor`` into a ``LOP3``; the key's
schedule depends on the seed alone, so a tile's elements share it."""

from __future__ import annotations

from kaio.dialects import ptx
from kaio.dialects.kernel_random import PhiloxOp
from kaio.passes.to_ptx import lowering
from kaio.passes.to_ptx.emitter import PtxEmitter
from kaio.random import KEY_A, KEY_B, ROUND_A, ROUND_B
from xdsl.dialects.builtin import i32


def _signed(w: int) -> int:
    """A 32-bit constant as the signed value of an i32 register."""
    return w - (1 << 32) if w >> 31 else w


@lowering(PhiloxOp)
def lower_philox(em: PtxEmitter, op: PhiloxOp) -> None:
    c0, c1, c2, c3, k0, k1 = (em.value(v) for v in op.operands)
    a, b = em.const(_signed(ROUND_A), i32), em.const(_signed(ROUND_B), i32)
    key_a, key_b = em.const(_signed(KEY_A), i32), em.const(_signed(KEY_B), i32)
    rounds = op.rounds.value.data
    for n in range(rounds):
        hi0, lo0 = em.instr(ptx.MulOp, "hi.u32", [c2, b], i32), em.instr(ptx.MulOp, "lo.u32", [c2, b], i32)
        hi1, lo1 = em.instr(ptx.MulOp, "hi.u32", [c0, a], i32), em.instr(ptx.MulOp, "lo.u32", [c0, a], i32)
        x0 = em.instr(ptx.XorOp, "b32", [em.instr(ptx.XorOp, "b32", [hi0, c1], i32), k0], i32)
        x2 = em.instr(ptx.XorOp, "b32", [em.instr(ptx.XorOp, "b32", [hi1, c3], i32), k1], i32)
        c0, c1, c2, c3 = x0, lo0, x2, lo1
        if n + 1 < rounds:  # the last round's key is never read
            k0, k1 = em.instr(ptx.AddOp, "u32", [k0, key_a], i32), em.instr(ptx.AddOp, "u32", [k1, key_b], i32)
    for result, word in zip(op.results, (c0, c1, c2, c3)):
        em.bind(result, word)
