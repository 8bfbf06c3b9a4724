"""Source locations on ops: where each op of a kernel came from in the user's Python file.

The frontend gives every op it builds the MLIR location of its statement
(``loc("kernel.py":12:5)``, line and 1-based column) and leaves a ``kernel.loc`` marker before
the statement's first op; the marker carries the statement's text and survives every pass down
to ``lower-to-ptx``, which turns it into the PTX ``.loc`` directives (and so into ``ptxas
-lineinfo`` line tables and simulator faults that name the Python line).

Passes build new ops without a location, as xDSL's rewriters do. For a dump,
:func:`print_with_locations` first gives each such op the location of the marker before it, so
every op of every stage says which Python line it implements, and the text parses back with its
locations (xDSL's parser reads a trailing ``loc(...)``).
"""

from __future__ import annotations

from io import StringIO

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Block, Operation
from xdsl.printer import Printer

from kaio.dialects.kernel import SourceLocOp


def source_location(file: str, line: int, column: int = 0) -> FileLineColLoc:
    """``loc("file":line:column)``; column 0 means "the whole line" (as in DWARF)."""
    return FileLineColLoc(StringAttr(file), IntAttr(line), IntAttr(column))


def marker_location(marker: SourceLocOp) -> FileLineColLoc:
    """The location a ``kernel.loc`` marker stands for: its own location when that names the
    marker's file and line (the frontend adds the column there), else the line, column 0."""
    file, line = marker.file.data, marker.line.value.data
    loc = marker.location
    if isinstance(loc, FileLineColLoc) and loc.filename.data == file and loc.line.data == line:
        return loc
    return source_location(file, line)


def stamp_locations(module: Operation) -> None:
    """Give every op without a location the location of the ``kernel.loc`` marker before it in
    its block (or, before the first marker, the location its enclosing op has)."""
    for region in module.regions:
        for block in region.blocks:
            _stamp_block(block, None)


def _stamp_block(block: Block, inherited: FileLineColLoc | None) -> None:
    current = inherited
    for op in block.ops:
        if isinstance(op, SourceLocOp):
            current = marker_location(op)
            if isinstance(op.location, UnknownLoc):
                op.location = current
        elif isinstance(op.location, UnknownLoc) and current is not None:
            op.location = current
        own = op.location if isinstance(op.location, FileLineColLoc) else current
        for region in op.regions:
            for inner in region.blocks:
                _stamp_block(inner, own)


def op_source_location(op: Operation) -> FileLineColLoc | None:
    """The Python line ``op`` implements: its own location, else that of the ``kernel.loc``
    marker before it in its block or, failing one, of the enclosing op (as :func:`stamp_locations`
    would give it), without changing the IR."""
    current: Operation | None = op
    while current is not None:
        if isinstance(current.location, FileLineColLoc):
            return current.location
        before = current.prev_op
        while before is not None:
            if isinstance(before, SourceLocOp):
                return marker_location(before)
            before = before.prev_op
        current = current.parent_op()
    return None


def print_with_locations(module: ModuleOp) -> str:
    """The module's text with an MLIR ``loc(...)`` after every op (what the dumps show)."""
    stamp_locations(module)
    out = StringIO()
    Printer(stream=out, print_debuginfo=True).print_op(module)
    return out.getvalue()
