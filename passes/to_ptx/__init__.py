"""Lowering rules to the ``ptx`` dialect, one table for every dialect that reaches PTX.

A rule is a function ``(emitter, op) -> None`` registered for an op type with
:func:`lowering`; ``lower-to-ptx`` walks a kernel and calls the rule of each op, so adding an op
to kaio means adding one rule here. ``emitter`` holds the state of lowering one kernel, and the
rules live in one module per source dialect or op family:

- ``arith_math`` (``arith``, ``math``; with ``fp8`` and ``lop3_fusion``), ``control_flow``
  (``scf``), ``kernel_ops`` (``kernel``), ``random`` (``kernel.philox``);
- the tile dialect: ``tile_distribution`` (which thread holds which element: the layout
  arithmetic the others share), ``tile_elementwise`` (making tiles, ``tile.map``; with
  ``half_pairs``), ``tile_views`` and ``tile_memory`` (loads, stores, gathers, scatters),
  ``tile_reduce`` (with ``reduce_scratch``), ``tile_atomics``, ``relayout`` (layout changes:
  ``convert_layout``, ``broadcast``, ``expand_dims``, ``trans``), ``tile_dot`` (the SIMT dot);
- ``smem_cpasync`` (``smem``, ``cpasync``; with ``shared_reuse``), ``mma_sync`` (``mma``),
  ``wgmma``, ``tma_mbarrier`` (``tma``, ``mbarrier``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from xdsl.ir import Attribute, Operation

if TYPE_CHECKING:
    from kaio.passes.to_ptx.emitter import PtxEmitter

OpT = TypeVar("OpT", bound=Operation)
Rule = Callable[["PtxEmitter", Operation], None]

LOWERINGS: dict[type[Operation], Rule] = {}

# IR types held in several registers (an mma fragment, a thread's share of a tile): type class ->
# function giving the register types of one value's parts (it may ask the emitter, e.g. for the
# kernel's number of warps).
Parts = Callable[[Attribute, "PtxEmitter"], list[Attribute]]
AGGREGATES: dict[type[Attribute], Parts] = {}


def register_parts(type_class: type[Attribute]) -> Callable[[Parts], Parts]:
    """Declare how a value of ``type_class`` splits into registers."""

    def register(parts: Parts) -> Parts:
        AGGREGATES[type_class] = parts
        return parts

    return register


def lowering(*op_types: type[Operation]) -> Callable[[Callable[["PtxEmitter", OpT], None]], Callable[["PtxEmitter", OpT], None]]:
    """Register a rule for one or more op types."""

    def register(rule: Callable[["PtxEmitter", OpT], None]) -> Callable[["PtxEmitter", OpT], None]:
        for t in op_types:
            if t in LOWERINGS:
                raise ValueError(f"two PTX lowering rules for {t.name}")
            LOWERINGS[t] = rule  # type: ignore[assignment]
        return rule

    return register
