"""Where new ops go: the current block, hoisted constants, and source-line markers.

Constants and shared buffers are hoisted to the top of the kernel's entry block, so a value
materialized inside a branch or a loop dominates every later use and each (type, value) pair
exists once. Source markers (``kernel.loc``) are emitted lazily: a statement that produces no op
(``x = 0``, ``pass``) leaves no marker. Every op added for a statement carries the statement's
MLIR location (``loc("file":line:col)``, see :mod:`kaio.locations`); hoisted ops belong to no
one statement and keep an unknown location.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.dialects import arith
from xdsl.dialects.builtin import FileLineColLoc, FloatAttr, IntegerAttr, IntegerType
from xdsl.ir import Block, Operation, SSAValue

from kaio.dialects.kernel import SourceLocOp
from kaio.dtypes import ScalarType
from kaio.locations import source_location


class Emitter:
    def __init__(self, entry: Block):
        self.entry = entry
        self.block = entry
        self._constants: dict[tuple[str, int | str], SSAValue] = {}
        self._hoisted_last: Operation | None = None
        self._pending_loc: tuple[str, int, str] | None = None
        self._location: FileLineColLoc | None = None  # of the statement being compiled

    # ------------------------------------------------------------------ ops

    def add(self, op: Operation) -> Operation:
        if self._pending_loc is not None:
            self._flush_loc()
        if self._location is not None:
            op.location = self._location
        self.block.add_op(op)
        return op

    def value(self, op: Operation) -> SSAValue:
        """Add a single-result op and return its result."""
        self.add(op)
        return op.results[0]

    def hoist(self, op: Operation) -> Operation:
        """Put ``op`` at the top of the entry block, after earlier hoisted ops."""
        if self._hoisted_last is not None:
            self.entry.insert_op_after(op, self._hoisted_last)
        elif (first := self.entry.first_op) is not None:
            self.entry.insert_op_before(op, first)
        else:
            self.entry.add_op(op)
        self._hoisted_last = op
        return op

    def constant(self, value: int | float | bool, t: ScalarType) -> SSAValue:
        """A materialized constant of kaio type ``t`` (``value`` already fits ``t``)."""
        # Keyed by IR type and bit pattern: i32 and u32 share constants; 0.0 and -0.0 do not.
        if t.is_float:
            key: tuple[str, int | str] = (t.name, float(value).hex())
        else:
            key = (f"i{t.bits}", int(value) & ((1 << t.bits) - 1))
        if (cached := self._constants.get(key)) is not None:
            return cached
        ir_type = t.ir_type
        if t.is_float:
            attr: IntegerAttr | FloatAttr = FloatAttr(float(value), ir_type)
        else:
            assert isinstance(ir_type, IntegerType)
            attr = IntegerAttr(int(value), ir_type, truncate_bits=True)
        op = arith.ConstantOp(attr, ir_type)
        self.hoist(op)
        self._constants[key] = op.result
        return op.result

    # ------------------------------------------------------------------ blocks

    @contextmanager
    def in_block(self, block: Block) -> Iterator[Block]:
        """Emit into ``block`` (a nested region's block) for the duration of the context."""
        if self._pending_loc is not None:
            # The statement that opens the region owns its marker in the outer block.
            self._flush_loc()
        outer, location = self.block, self._location
        self.block = block
        try:
            yield block
        finally:
            self.block = outer
            self._pending_loc = None
            self._location = location  # ops after the region belong to the statement opening it

    # ------------------------------------------------------------------ source markers

    def mark(self, file: str, line: int, column: int, text: str) -> None:
        """The next ops belong to statement ``text`` at ``file:line``, starting at ``column``
        (1-based)."""
        self._pending_loc = (file, line, text)
        self._location = source_location(file, line, column)

    def _flush_loc(self) -> None:
        loc = self._pending_loc
        assert loc is not None
        self._pending_loc = None
        marker = SourceLocOp(*loc)
        marker.location = self._location or source_location(loc[0], loc[1])
        self.block.add_op(marker)
