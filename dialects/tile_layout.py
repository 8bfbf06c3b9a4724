"""Layouts of tiles: how the elements of a power-of-two tile spread over a CTA's threads.

A tile value is a ``tensor<64x32xf16, #layout>``. Every tile dim is a power of two, so a layout
is a map of *bits*: each bit of an element's coordinates comes from one bit of the register
index, of the lane, or of the warp (Triton's "linear layouts", restricted to bit permutations).
A lane or warp bit that maps to no coordinate bit means those threads hold the same elements
(replication: a small tile over many threads). :class:`Distribution` is that map for one shape.

Three layouts name such maps independently of the shape, as Triton's encodings do:

- ``#tile.blocked<[1, 8], [4, 8], [4, 1]>``: size per thread, threads per warp and warps per
  CTA along each dim (the last dim fastest); a tile larger than what one pass covers wraps
  around into more registers. Loads, stores and elementwise code use it (``[.., 8]`` halves =
  one 16-byte vector access per thread).
- ``#tile.mma<[2, 2]>``: the ``mma.sync.m16n8`` accumulator layout, with 2x2 warps each owning
  a contiguous (M/2)x(N/2) block of 16x8 fragments; lane L holds rows L/4 and L/4 + 8, columns
  2*(L%4) and 2*(L%4) + 1 of each fragment.
- ``#tile.slice<1, #parent>``: a tile of one dim less, spread as ``#parent`` spreads the tile it
  was reduced from (so ``kt.sum(t, 1)`` needs no data movement, and ``kt.expand_dims`` back
  neither).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from xdsl.dialects.builtin import ArrayAttr, IntAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

Bit = tuple[int, int] | None  # (tile dim, coordinate bit) or None (replicated)


def log2(n: int) -> int:
    if n < 1 or n & (n - 1):
        raise VerifyException(f"{n} is not a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True)
class Distribution:
    """Where each coordinate bit of a ``shape`` tile lives: ``reg[i]`` is what bit i of the
    register index selects, ``lane[i]``/``warp[i]`` what bit i of the lane/warp id selects."""

    shape: tuple[int, ...]
    reg: tuple[tuple[int, int], ...]
    lane: tuple[Bit, ...]
    warp: tuple[Bit, ...]

    @property
    def registers(self) -> int:
        return 1 << len(self.reg)

    @cached_property
    def offsets(self) -> tuple[tuple[int, ...], ...]:
        """Coordinates register r adds to its thread's base coordinates, for every r."""
        result = []
        for r in range(self.registers):
            coord = [0] * len(self.shape)
            for i, (d, b) in enumerate(self.reg):
                if r >> i & 1:
                    coord[d] |= 1 << b
            result.append(tuple(coord))
        return tuple(result)

    @cached_property
    def register_of(self) -> dict[tuple[int, ...], int]:
        return {off: r for r, off in enumerate(self.offsets)}

    def thread_bits(self) -> tuple[Bit, ...]:
        return self.lane + self.warp

    def replicated_bits(self) -> list[tuple[str, int]]:
        """(``lane``/``warp``, bit) of the thread bits that select no coordinate."""
        return [("lane", i) for i, b in enumerate(self.lane) if b is None] + [
            ("warp", i) for i, b in enumerate(self.warp) if b is None
        ]

    def contiguous(self, dim: int) -> int:
        """How many consecutive registers hold consecutive elements along ``dim`` from bit 0."""
        n = 0
        while n < len(self.reg) and self.reg[n] == (dim, n):
            n += 1
        return 1 << n

    def check(self) -> None:
        seen = [b for b in (*self.reg, *self.lane, *self.warp) if b is not None]
        want = {(d, b) for d, size in enumerate(self.shape) for b in range(log2(size))}
        if len(seen) != len(set(seen)) or set(seen) != want:
            raise VerifyException(f"layout does not cover the {self.shape} tile exactly once")


def project(dist: Distribution, keep: Sequence[int | None]) -> Distribution:
    """The distribution seen through a coordinate map: ``keep[d]`` is the new index of dim d
    (None: the dim disappears; its register bits go, its thread bits become replicated)."""
    shape = [0] * sum(k is not None for k in keep)
    for d, k in enumerate(keep):
        if k is not None:
            shape[k] = dist.shape[d]

    def moved(b: Bit) -> Bit:
        if b is None or keep[b[0]] is None:
            return None
        return (keep[b[0]], b[1])  # type: ignore[return-value]

    reg = tuple(moved(b) for b in dist.reg if moved(b) is not None)
    return Distribution(tuple(shape), reg, tuple(map(moved, dist.lane)), tuple(map(moved, dist.warp)))  # type: ignore[arg-type]


class TileLayout(ParametrizedAttribute):
    """A layout attribute: gives the distribution of any shape over ``num_warps`` warps."""

    def distribution(self, shape: Sequence[int], num_warps: int) -> Distribution:
        raise NotImplementedError


def _ints(values: Sequence[int]) -> ArrayAttr[IntAttr]:
    return ArrayAttr([IntAttr(v) for v in values])


def _parse_list(parser: AttrParser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)


def _print_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(map(str, values)) + "]")


@irdl_attr_definition
class BlockedLayout(TileLayout):
    """``#tile.blocked<[size per thread], [threads per warp], [warps per CTA]>``, last dim fastest."""

    name = "tile.blocked"
    size_per_thread: ArrayAttr[IntAttr]
    threads_per_warp: ArrayAttr[IntAttr]
    warps_per_cta: ArrayAttr[IntAttr]

    def __init__(self, size_per_thread: Sequence[int], threads_per_warp: Sequence[int], warps_per_cta: Sequence[int]):
        super().__init__(_ints(size_per_thread), _ints(threads_per_warp), _ints(warps_per_cta))

    @property
    def params(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return tuple(
            tuple(a.data for a in p.data) for p in (self.size_per_thread, self.threads_per_warp, self.warps_per_cta)
        )  # type: ignore[return-value]

    @property
    def rank(self) -> int:
        return len(self.size_per_thread.data)

    def verify(self) -> None:
        spt, tpw, wpc = self.params
        if not len(spt) == len(tpw) == len(wpc) or not spt:
            raise VerifyException("blocked layout lists must have one entry per dim")
        for v in (*spt, *tpw, *wpc):
            log2(v)
        if math.prod(tpw) != 32:
            raise VerifyException(f"threads per warp must multiply to 32, got {list(tpw)}")

    def distribution(self, shape: Sequence[int], num_warps: int) -> Distribution:
        spt, tpw, wpc = self.params
        if len(shape) != len(spt):
            raise VerifyException(f"a rank-{len(spt)} layout on a rank-{len(shape)} tile")
        if math.prod(wpc) != num_warps:
            raise VerifyException(f"layout for {math.prod(wpc)} warps in a {num_warps}-warp kernel")
        order = list(reversed(range(len(shape))))  # the last dim is the fastest
        size = [log2(s) for s in shape]
        nxt = [0] * len(shape)

        def take(d: int) -> tuple[int, int] | None:
            if nxt[d] >= size[d]:
                return None
            nxt[d] += 1
            return (d, nxt[d] - 1)

        reg: list[tuple[int, int]] = []
        for d in order:
            reg += [b for _ in range(log2(spt[d])) if (b := take(d)) is not None]
        lane = [take(d) for d in order for _ in range(log2(tpw[d]))]
        warp = [take(d) for d in order for _ in range(log2(wpc[d]))]
        for d in order:  # what one pass does not cover wraps around into more registers
            while (b := take(d)) is not None:
                reg.append(b)
        return Distribution(tuple(shape), tuple(reg), tuple(lane), tuple(warp))

    def print_parameters(self, printer: Printer) -> None:
        spt, tpw, wpc = self.params
        printer.print_string("<")
        for i, p in enumerate((spt, tpw, wpc)):
            if i:
                printer.print_string(", ")
            _print_list(printer, p)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            spt = _parse_list(parser)
            parser.parse_punctuation(",")
            tpw = _parse_list(parser)
            parser.parse_punctuation(",")
            wpc = _parse_list(parser)
        return (_ints(spt), _ints(tpw), _ints(wpc))


@irdl_attr_definition
class MmaLayout(TileLayout):
    """``#tile.mma<[WM, WN]>``: the accumulator of ``mma.sync.m16n8k16`` with WM x WN warps
    (extra warps of the kernel hold copies)."""

    name = "tile.mma"
    warps: ArrayAttr[IntAttr]

    def __init__(self, warps: Sequence[int]):
        super().__init__(_ints(warps))

    @property
    def warp_grid(self) -> tuple[int, int]:
        wm, wn = (w.data for w in self.warps.data)
        return wm, wn

    def verify(self) -> None:
        if len(self.warps.data) != 2:
            raise VerifyException("mma layout takes [warps along M, warps along N]")
        for w in self.warp_grid:
            log2(w)

    def warp_tile(self, shape: Sequence[int]) -> tuple[int, int]:
        wm, wn = self.warp_grid
        return shape[0] // wm, shape[1] // wn

    def distribution(self, shape: Sequence[int], num_warps: int) -> Distribution:
        if len(shape) != 2:
            raise VerifyException("the mma layout is for 2-D tiles")
        wm, wn = self.warp_grid
        if wm * wn > num_warps:
            raise VerifyException(f"mma layout for {wm}x{wn} warps in a {num_warps}-warp kernel")
        m, n = shape
        rows, cols = log2(m), log2(n)
        lwm, lwn = log2(wm), log2(wn)
        frag_rows = max(rows - 4 - lwm, 0)  # 16-row fragments per warp, as bits
        frag_cols = max(cols - 3 - lwn, 0)

        def bit(d: int, b: int) -> tuple[int, int] | None:
            return (d, b) if b < (rows if d == 0 else cols) else None

        reg = [bit(1, 0), bit(0, 3)]
        reg += [bit(1, 3 + i) for i in range(frag_cols)]
        reg += [bit(0, 4 + i) for i in range(frag_rows)]
        lane = [bit(1, 1), bit(1, 2), bit(0, 0), bit(0, 1), bit(0, 2)]
        warp = [bit(1, 3 + frag_cols + i) for i in range(lwn)] + [bit(0, 4 + frag_rows + i) for i in range(lwm)]
        warp += [None] * (log2(num_warps) - lwm - lwn)
        return Distribution(tuple(shape), tuple(b for b in reg if b is not None), tuple(lane), tuple(warp))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        _print_list(printer, self.warp_grid)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            warps = _parse_list(parser)
        return (_ints(warps),)


@irdl_attr_definition
class SliceLayout(TileLayout):
    """``#tile.slice<D, #parent>``: the parent's spread of a tile with dim D removed."""

    name = "tile.slice"
    dim: IntAttr
    parent: Attribute

    def __init__(self, dim: int, parent: Attribute):
        super().__init__(IntAttr(dim), parent)

    def verify(self) -> None:
        if not isinstance(self.parent, TileLayout):
            raise VerifyException("a slice layout's parent is a tile layout")

    def parent_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        d = self.dim.data
        return (*shape[:d], 1, *shape[d:])

    def distribution(self, shape: Sequence[int], num_warps: int) -> Distribution:
        assert isinstance(self.parent, TileLayout)
        d = self.dim.data
        full = self.parent.distribution(self.parent_shape(shape), num_warps)
        keep = [None if i == d else i - (i > d) for i in range(len(shape) + 1)]
        return project(full, keep)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.dim.data}, ")
        printer.print_attribute(self.parent)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            dim = parser.parse_integer()
            parser.parse_punctuation(",")
            parent = parser.parse_attribute()
        return (IntAttr(dim), parent)


def default_blocked(shape: Sequence[int], elem_bytes: int, num_warps: int) -> BlockedLayout:
    """A layout that spreads a tile evenly, each thread holding up to 16 contiguous bytes of a
    row (so loads and stores vectorise), neighbouring lanes on neighbouring vectors (so a warp's
    accesses coalesce), warps stacked along the rows."""
    rank = len(shape)
    threads = 32 * num_warps
    total = math.prod(shape)
    last = shape[-1]
    vec = max(1, min(16 // max(elem_bytes, 1), last, max(total // threads, 1)))
    spt = [1] * (rank - 1) + [vec]
    tpw = [1] * rank
    lanes = 32
    for d in reversed(range(rank)):  # lanes along the fastest dim first
        room = max(shape[d] // spt[d], 1)
        tpw[d] = min(lanes, room) if d > 0 else lanes
        lanes //= tpw[d]
    wpc = [1] * rank
    warps = num_warps
    for d in range(rank):  # warps along the slowest dim first
        room = max(shape[d] // (spt[d] * tpw[d]), 1)
        wpc[d] = min(warps, room) if d < rank - 1 else warps
        warps //= wpc[d]
    return BlockedLayout(spt, tpw, wpc)


def mma_warps(shape: Sequence[int], num_warps: int) -> tuple[int, int]:
    """Warps along M and N for an mma accumulator: split the larger per-warp extent (M on a
    tie) while a warp keeps at least a 16x16 block."""
    m, n = shape
    wm = wn = 1
    while wm * wn < num_warps:
        tm, tn = m // wm, n // wn
        if tm >= tn and tm >= 32:
            wm *= 2
        elif tn >= 32:
            wn *= 2
        elif tm >= 32:
            wm *= 2
        else:
            break
    return wm, wn


def layout_of(t: Attribute) -> TileLayout | None:
    enc = getattr(t, "encoding", None)
    return enc if isinstance(enc, TileLayout) else None
