"""What ``ptx-iv-reduce`` does (the pass is :class:`~kaio.passes.ptx_optimize.PtxIvReducePass`,
which calls :func:`iv_reduce_module`): induction-variable strength reduction on the flat ``ptx``
form.

A loop (:func:`~kaio.passes.ptx_loops.find_loops`: a label, its body, one backward ``bra``) whose
body writes a register ``i`` once, ``assign i <- i + c`` with ``c`` a constant or a loop
invariant, has ``i`` as a basic induction variable. A pure value of the body that is linear in
``i`` (``f(i) = b + i*s`` through ``add``/``sub``/``neg``, ``mul.lo``/``mad.lo``/``shl`` by an
invariant, and widenings of ``i`` itself by ``mul.wide``/``mad.wide``/``cvt``) is computed by
the lowering on every trip, e.g. ``x[j*stride + col]``'s index ``j*stride + col`` or a tile
loop's row and column coordinates. The pass gives such a value a register of its own,
``D = f(i)`` computed once before the loop and advanced by ``c*s`` right after ``i``'s update,
and the body reads ``D`` instead of recomputing ``f(i)``.

Exactness. ``D`` and ``f(i)`` must agree bit for bit on every trip, so ``f(i + c) - f(i)`` must
be the same constant step whatever ``i`` is:

- 32-bit and 64-bit ``add``/``sub``/``mul.lo``/``mad.lo``/``shl`` are ring operations modulo
  2^bits: a wrapped ``f`` is advanced by a step that wraps the same way, so they are rewritten
  whatever the values (a 32-bit value stays a 32-bit register: a wrapped 32-bit add never
  becomes a 64-bit one).
- A widening (``mul.wide.s32``, ``mad.wide.s32``, ``cvt.s64.s32``, and their ``.u32`` forms)
  is not linear modulo 2^32: ``sext(i + 1) != sext(i) + 1`` when ``i + 1`` wraps. It is
  rewritten only when its 32-bit operand is ``i`` itself and ``i`` provably never wraps: the
  step is ``+1``, ``i``'s last assignment before the loop is a constant ``i0`` with
  ``i0 + 1`` representable, and the loop continues only while ``i < n`` (``setp.lt`` of the
  updated ``i``, signed for a signed widening; a ``.u32`` widening also needs ``i0 >= 0`` under
  a signed test). Then every trip's ``i`` is at most ``n - 1`` before its increment, so the
  increment never wraps. Anything else (``x[j*stride + col]``'s ``j*stride + col`` may wrap in
  32 bits) keeps its widening in the loop and only the 32-bit part is reduced.

Where ``D`` is read. ``D`` equals ``f(i)`` everywhere in the loop except between ``i``'s update
and ``D``'s (adjacent). A value is replaced only if every use of it lies in the body after it
and before ``i``'s update, and no inner loop contains that update: then no use can see a
different ``i`` from the one the value was computed with.

Cost. Each new register costs one (two for 64 bits) for the whole loop, and its advance is one
instruction per trip: a value is taken only if the instructions its replacement removes (itself
and the linear math only it reads) exceed that, by at least one per trip, and only while the
loop's new registers fit ``budget``.

What it changes. ptxas does not do this itself on the strided SIMT sum above: with the pass
its loop (unrolled four times by ptxas) takes 20 SASS instructions per trip instead of 23 on
sm_80 (19 instead of 22 on sm_90a). The library's tile loops barely change: their linear values
are single adds from the counter shared by several coordinates (``k0 + 64`` then ``+ col``,
``+ row``: carrying them saves nothing per register), and their global addresses widen
``k0 + col``, which may wrap in 32 bits, so the 64-bit pointer increments stay out of reach of
an exact rewrite (a bounds proof from the copy's mask would be needed).

Stage counters of copy rings (``r = r + 1 == N ? 0 : r + 1``, read as ``r * stage_bytes``) are
not linear; :mod:`~kaio.passes.ptx_ring_offsets` turns them into rotating byte offsets first
(the attention key loop on sm_80: 37 integer SASS instructions per trip down to 21).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kaio.dialects import ptx
from kaio.passes.ptx_loops import Loop, entry_constant, for_each_loop, loop_assignments
from kaio.passes.ptx_ring_offsets import rotate_rings
from kaio.passes.ptx_scalar import (
    ConstPool,
    Emit,
    block_ops,
    const_int,
    entries,
    is_pure,
    signed,
    spec_parts,
    word_type,
)
from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.ir import Operation, SSAValue

Step = int | SSAValue
"""How much a value grows per trip: a constant (unsigned bits) or a loop-invariant value."""


class Steps:
    """Builds steps before the loop's label, folding constants (a step of 1 times ``s`` is
    ``s`` itself: no instruction)."""

    def __init__(self, emit: Emit):
        self.emit = emit
        self.made: list[Operation] = []  # what was built: the unused part goes at the end

    def _build(self, cls: type[ptx.PtxInstr], spec: str, args: list[Step], bits: int) -> SSAValue:
        value = self.emit(cls, spec, args, bits)
        self.made.append(value.owner)  # type: ignore[arg-type]
        return value

    def drop_unused(self) -> None:
        for op in reversed(self.made):
            if not op.results[0].uses:
                op.detach()
                op.erase()

    def _fold(self, a: Step, b: Step, bits: int, op: Callable[[int, int], int],
              cls: type[ptx.PtxInstr], spec: str) -> Step:  # fmt: skip
        if isinstance(a, int) and isinstance(b, int):
            return op(a, b) & ((1 << bits) - 1)
        return self._build(cls, spec, [a, b], bits)

    def add(self, a: Step, b: Step, bits: int) -> Step:
        if a == 0:
            return b
        if b == 0:
            return a
        return self._fold(a, b, bits, int.__add__, ptx.AddOp, f"s{bits}")

    def sub(self, a: Step, b: Step, bits: int) -> Step:
        if b == 0:
            return a
        return self._fold(a, b, bits, int.__sub__, ptx.SubOp, f"s{bits}")

    def mul(self, a: Step, b: Step, bits: int) -> Step:
        if a == 1:
            return b
        if b == 1:
            return a
        if a == 0 or b == 0:
            return 0
        return self._fold(a, b, bits, int.__mul__, ptx.MulOp, f"lo.s{bits}")

    def widen(self, a: Step, sign: bool) -> Step:
        """A 32-bit step as 64 bits (sign- or zero-extended)."""
        if isinstance(a, int):
            return signed(a, 32) & ((1 << 64) - 1) if sign else a
        return self._build(ptx.CvtOp, f"{'s' if sign else 'u'}64.{'s' if sign else 'u'}32", [a], 64)


@dataclass
class Induction:
    """A basic induction register of one loop: ``assign reg <- reg + step`` once per trip."""

    reg: SSAValue
    update: ptx.AssignOp
    step: Step
    bits: int
    exact_signed: bool  # i never wraps as a signed value: widening it by sign is linear
    exact_unsigned: bool  # ... as an unsigned value: widening it by zero is linear


def _invariant(v: SSAValue, inside: set[Operation], assigned: set[SSAValue]) -> bool:
    return v.owner not in inside and v not in assigned


def _int_word(op: Operation) -> tuple[int, bool] | None:
    """(bits, signed) of a plain (no rounding, saturation or carry) 32/64-bit integer op."""
    mods, types = spec_parts(op)  # type: ignore[arg-type]
    if (
        not types
        or types[-1] not in ("s32", "u32", "s64", "u64", "b32", "b64")
        or mods not in ((), ("lo",), ("wide",))
    ):
        return None
    return int(types[-1][1:]), types[-1][0] == "s"


def _no_wrap(ops: list[Operation], loop: Loop, iv: Induction) -> tuple[bool, bool]:
    """Whether ``i`` provably never wraps (signed, unsigned): see the module doc."""
    latch = ops[loop.latch]
    if iv.step != 1 or iv.bits != 32 or latch.guard is None or latch.guard.data != "@":  # type: ignore[attr-defined]
        return False, False
    test = latch.operands[-1].owner
    at = {op: n for n, op in enumerate(ops)}
    if (
        type(test) is not ptx.SetpOp
        or at.get(test, -1) < at[iv.update]
        or test.srcs[0] is not iv.reg
    ):  # type: ignore[union-attr, attr-defined]
        return False, False
    mods, types = spec_parts(test)  # type: ignore[arg-type]
    i0 = entry_constant(ops, loop.head, iv.reg)
    if mods[:1] != ("lt",) or len(mods) != 1 or i0 is None:
        return False, False
    if types[0] == "s32":
        fits = signed(i0, 32) < (1 << 31) - 1
        return fits, fits and signed(i0, 32) >= 0
    return False, types[0] == "u32" and i0 < (1 << 32) - 1


def inductions(ops: list[Operation], loop: Loop) -> list[Induction]:
    """The loop's basic induction registers."""
    inside, writes = loop_assignments(ops, loop)
    assigned = set(writes)
    found = []
    for reg, updates in writes.items():
        if (
            len(updates) != 1
            or reg.type not in (i32, word_type(64))
            or "guard" in updates[0].properties
        ):
            continue
        add = updates[0].operands[1].owner
        if (
            type(add) is not ptx.AddOp
            or add not in inside
            or not is_pure(add)
            or _int_word(add) is None
        ):
            continue
        a, b = add.srcs  # type: ignore[attr-defined]
        other = b if a is reg else a if b is reg else None
        if other is None or not _invariant(other, inside, assigned):
            continue
        bits = 32 if reg.type == i32 else 64
        c = const_int(other)
        iv = Induction(reg, updates[0], other if c is None else c, bits, False, False)
        iv.exact_signed, iv.exact_unsigned = _no_wrap(ops, loop, iv)
        found.append(iv)
    return found


@dataclass
class Linear:
    """A value of the body that grows by ``step`` per trip (``bits`` wide)."""

    step: Step
    bits: int


class Chains:
    """The linear values of one loop for one induction register, with their steps."""

    def __init__(self, ops: list[Operation], loop: Loop, iv: Induction, steps: Steps):
        self.iv = iv
        self.steps = steps
        body = ops[loop.head + 1 : loop.latch + 1]
        self.inside, writes = loop_assignments(ops, loop)
        self.assigned = set(writes)
        self.linear: dict[SSAValue, Linear] = {}
        self.order: list[Operation] = []  # linear ops in program order
        for op in body:
            if op is iv.update:
                break
            if is_pure(op) and len(op.results) == 1 and type(op) is not ptx.ConstOp:
                step = self._step(op)
                if step is not None:
                    self.linear[op.results[0]] = step
                    self.order.append(op)

    def _grow(self, v: SSAValue) -> Linear | None:
        """``v``'s growth: the register's own step, a linear value's, 0 for an invariant."""
        if v is self.iv.reg:
            return Linear(self.iv.step, self.iv.bits)
        if v in self.linear:
            return self.linear[v]
        if _invariant(v, self.inside, self.assigned):
            return Linear(0, 32 if v.type == i32 else 64)
        return None

    def _step(self, op: Operation) -> Linear | None:
        cls = type(op)
        word = _int_word(op)
        if word is None or cls not in _RULES:
            return None
        grows = [self._grow(v) for v in op.srcs]  # type: ignore[attr-defined]
        if any(g is None for g in grows) or all(g.step == 0 for g in grows):  # type: ignore[union-attr]
            return None
        return _RULES[cls](self, op, grows, word)  # type: ignore[arg-type]

    def widen_ok(self, v: SSAValue, sign: bool) -> bool:
        """Whether widening ``v`` grows by a constant: only ``i`` itself, when it never wraps."""
        return v is self.iv.reg and (self.iv.exact_signed if sign else self.iv.exact_unsigned)


def _add(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    return Linear(ch.steps.add(g[0].step, g[1].step, word[0]), word[0])


def _sub(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    return Linear(ch.steps.sub(g[0].step, g[1].step, word[0]), word[0])


def _neg(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    return Linear(ch.steps.sub(0, g[0].step, word[0]), word[0])


def _scaled(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Step | None:
    """``a * b``'s step (one factor invariant); widening forms only of ``i`` itself."""
    mods = spec_parts(op)[0]  # type: ignore[arg-type]
    a, b = op.srcs[:2]  # type: ignore[attr-defined]
    moving, factor = (a, b) if g[0].step != 0 else (b, a)
    if (g[0].step != 0 and g[1].step != 0) or not _invariant(factor, ch.inside, ch.assigned):
        return None
    step = g[0].step if g[0].step != 0 else g[1].step
    c = const_int(factor)
    scale: Step = factor if c is None else c
    if mods == ("lo",):
        return ch.steps.mul(step, scale, word[0])
    if mods == ("wide",) and word[0] == 32 and ch.widen_ok(moving, word[1]):
        wide = ch.steps.widen(scale, word[1])
        return ch.steps.mul(ch.steps.widen(step, word[1]), wide, 64)
    return None


def _mul(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    step = _scaled(ch, op, g, word)
    bits = 64 if spec_parts(op)[0] == ("wide",) else word[0]  # type: ignore[arg-type]
    return None if step is None else Linear(step, bits)


def _mad(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    bits = 64 if spec_parts(op)[0] == ("wide",) else word[0]  # type: ignore[arg-type]
    product: Step | None = 0
    if g[0].step != 0 or g[1].step != 0:
        product = _scaled(ch, op, g[:2], word)
    return None if product is None else Linear(ch.steps.add(product, g[2].step, bits), bits)


def _shl(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    k = const_int(op.srcs[1])  # type: ignore[attr-defined]
    if k is None or k >= word[0] or g[1].step != 0:
        return None
    return Linear(ch.steps.mul(g[0].step, 1 << k, word[0]), word[0])


def _cvt(ch: Chains, op: Operation, g: list[Linear], word: tuple[int, bool]) -> Linear | None:
    mods, types = spec_parts(op)  # type: ignore[arg-type]
    if (
        mods
        or types not in (("s64", "s32"), ("u64", "u32"))
        or not ch.widen_ok(op.srcs[0], types[0][0] == "s")
    ):  # type: ignore[attr-defined]
        return None
    return Linear(ch.steps.widen(g[0].step, types[0][0] == "s"), 64)


_RULES: dict[type[Operation], Callable[[Chains, Operation, list[Linear], tuple[int, bool]], Linear | None]] = {
    ptx.AddOp: _add, ptx.SubOp: _sub, ptx.NegOp: _neg, ptx.MulOp: _mul, ptx.MadOp: _mad,
    ptx.ShlOp: _shl, ptx.CvtOp: _cvt,
}  # fmt: skip


def _body_positions(ops: list[Operation], loop: Loop) -> dict[int, int]:
    """The body's ops' positions, keyed by id (an op hashes through a Python ``__hash__``);
    ``ops`` holds them all alive."""
    return {id(op): n for n, op in enumerate(ops[loop.head : loop.latch + 1], loop.head)}


def _window_ok(at: dict[int, int], iv: Induction, root: Operation) -> bool:
    """Every use of ``root`` after it and before ``i``'s update, in the body (``at``:
    :func:`_body_positions`)."""
    lo, hi = at[id(root)], at[id(iv.update)]
    return all(lo < at.get(id(u.operation), -1) < hi for u in root.results[0].uses)


def _update_in_inner_loop(ops: list[Operation], loop: Loop, iv: Induction) -> bool:
    at = ops.index(iv.update)
    labels = {op.sym_name.data: n for n, op in enumerate(ops) if type(op) is ptx.LabelOp}  # type: ignore[attr-defined]
    for n in range(loop.head + 1, loop.latch):
        op = ops[n]
        if type(op) is ptx.BraOp and op.symbol is not None:  # type: ignore[attr-defined]
            target = labels.get(op.symbol.data, n + 1)  # type: ignore[attr-defined]
            if target <= at <= n and target > loop.head:
                return True
    return False


def _dead_after(chosen: list[Operation], chain_ops: list[Operation]) -> set[Operation]:
    """The linear ops nobody reads once ``chosen``'s results are replaced."""
    dead = set(chosen)
    for op in reversed(chain_ops):
        if op not in dead and all(u.operation in dead for u in op.results[0].uses):
            dead.add(op)
    return dead


def reduce_loop(ops: list[Operation], loop: Loop, pool: ConstPool, budget: int) -> int:
    """Give the loop's profitable linear values registers of their own; returns how many."""
    if any(type(op) is ptx.BraOp and op.symbol is not None and op.symbol.data == ops[loop.head].sym_name.data  # type: ignore[attr-defined]
           for op in ops[loop.head + 1 : loop.latch]):  # fmt: skip
        return 0  # more than one backward branch: the updates need not run once per trip
    head = ops[loop.head]
    done = 0
    for iv in inductions(ops, loop):
        if _update_in_inner_loop(ops, loop, iv):
            continue
        steps = Steps(Emit(head, pool))
        chains = Chains(ops, loop, iv, steps)
        linear = set(chains.order)
        at = _body_positions(ops, loop)
        roots = [op for op in chains.order
                 if any(u.operation not in linear for u in op.results[0].uses) and _window_ok(at, iv, op)]  # fmt: skip
        chosen: list[Operation] = []
        dead: set[Operation] = set()
        for root in sorted(roots, key=lambda r: -chains.order.index(r)):  # latest (widest) first
            cost = 2 if root.results[0].type != i32 else 1
            more = _dead_after([*chosen, root], chains.order)
            if len(more) - len(dead) >= 2 and cost <= budget:
                chosen.append(root)
                dead = more
                budget -= cost
        for root in chosen:
            _carry(root, chains, iv, head)
            done += 1
        for op in reversed(chains.order):
            if op in dead and not op.results[0].uses:
                op.detach()
                op.erase()
        steps.drop_unused()
        latch = ops[loop.latch]
        ops[:] = block_ops(head.parent_block())  # type: ignore[arg-type]
        loop.head, loop.latch = ops.index(head), ops.index(latch)
    return done


def _carry(root: Operation, chains: Chains, iv: Induction, head: Operation) -> None:
    """``D = f(i)`` before the loop, ``D += step`` after ``i``'s update, uses read ``D``."""
    value = root.results[0]
    bits = 32 if value.type == i32 else 64
    # the chain of ``root``, cloned before the label: it reads ``i``'s value on entry
    needed: set[Operation] = set()
    work = [root]
    while work:
        op = work.pop()
        if op in needed:
            continue
        needed.add(op)
        work += [v.owner for v in op.operands if v in chains.linear]  # type: ignore[misc]
    mapping: dict[SSAValue, SSAValue] = {}
    block = head.parent_block()
    for op in chains.order:
        if op in needed:
            clone = op.clone(value_mapper=mapping)
            block.insert_op_before(clone, head)  # type: ignore[union-attr]
            mapping[op.results[0]] = clone.results[0]
    reg = ptx.RegOp(value.type)
    block.insert_op_before(reg, head)  # type: ignore[union-attr]
    init = ptx.AssignOp(f"b{bits}", [reg.result, mapping[value]])
    block.insert_op_before(init, head)  # type: ignore[union-attr]
    step = chains.linear[value].step
    step_value = step if isinstance(step, SSAValue) else chains.steps.emit.const(step, bits)
    advance = ptx.AddOp(f"s{bits}", [reg.result, step_value], [value.type])
    move = ptx.AssignOp(f"b{bits}", [reg.result, advance.outs[0]])
    advance.location = move.location = iv.update.location
    block.insert_op_after(advance, iv.update)  # type: ignore[union-attr]
    block.insert_op_after(move, advance)  # type: ignore[union-attr]
    value.replace_all_uses_with(reg.result)


def iv_reduce_entry(entry: ptx.EntryOp, budget: int = 8) -> int:
    """Reduce every single-entry loop of the entry, inner loops first (stage counters first:
    :mod:`~kaio.passes.ptx_ring_offsets`); returns how many values got registers."""
    pool = ConstPool(entry)

    def visit(ops: list[Operation], loop: Loop) -> int:
        return rotate_rings(ops, loop, pool) + reduce_loop(ops, loop, pool, budget)

    return for_each_loop(entry.body.block, visit)


def iv_reduce_module(module: ModuleOp, budget: int) -> None:
    """``ptx-iv-reduce`` on every entry of ``module``: the new loop-carried values of one loop
    take at most ``budget`` registers."""
    for entry in entries(module):
        iv_reduce_entry(entry, budget)
