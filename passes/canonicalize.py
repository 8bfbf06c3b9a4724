"""``canonicalize``: xDSL's canonicalization pass, with what depends only on an op's class
looked up once per class.

xDSL's pass asks, for every op it visits (~800 visits in a matmul's tile IR), whether the op's
class folds, is constant-like, is a terminator or a symbol (dead-code removal) and which
canonicalization patterns its traits give, and builds those patterns again each time: a
third of the pass. Traits belong to the class, so the answers are kept per class; the walk,
the order of the rewrites (dead-code removal, then folding, then the patterns in the traits'
order) and so the result are xDSL's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.folder import Folder
from xdsl.ir import Operation, Region
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriterListener,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.traits import (
    ConstantLike,
    HasCanonicalizationPatternsTrait,
    HasFolder,
    IsTerminator,
    MemoryEffect,
    NoMemoryEffect,
    SymbolOpInterface,
)
from xdsl.transforms.dead_code_elimination import LiveSet, result_only_effects

# per op class: False (a terminator or a symbol: never dead), True (no effect whatever the op:
# its only memory-effect traits are ``NoMemoryEffect``'s, ``Pure`` say), None (ask the op)
_may_die: dict[type[Operation], bool | None] = {}
_NO_EFFECTS = NoMemoryEffect.get_effects.__func__  # pyright: ignore[reportFunctionMemberAccess]


def _class_may_die(cls: type[Operation]) -> bool | None:
    if cls.has_trait(IsTerminator, value_if_unregistered=False) or cls.has_trait(
        SymbolOpInterface, value_if_unregistered=False
    ):
        return False
    effects = cls.get_traits_of_type(MemoryEffect)
    if effects and all(getattr(type(t).get_effects, "__func__", None) is _NO_EFFECTS for t in effects):
        return True  # get_effects gives the empty set for every op of the class
    return None


def would_be_trivially_dead(op: Operation) -> bool:
    """xDSL's ``would_be_trivially_dead``, its trait look-ups kept per op class (and its effect
    query too where the class's traits answer it alone)."""
    cls = type(op)
    if cls in _may_die:
        may_die = _may_die[cls]
    else:
        may_die = _may_die[cls] = _class_may_die(cls)
    if may_die is None:
        return result_only_effects(op)
    return may_die


def is_trivially_dead(op: Operation) -> bool:
    """xDSL's ``is_trivially_dead``: no result used, and no effect but its results."""
    return all(result.first_use is None for result in op.results) and would_be_trivially_dead(op)


class _LiveSet(LiveSet):
    """xDSL's live set, with :func:`would_be_trivially_dead` as above."""

    def propagate_op_liveness(self, op: Operation) -> None:
        for region in op.regions:
            self.propagate_region_liveness(region)
        live = self._live_ops  # (the set itself: is_live and set_live are a call each)
        if op in live:
            return
        if not would_be_trivially_dead(op) or any(
            use.operation in live for result in op.results for use in result.uses
        ):
            self.changed = True
            live.add(op)


def region_dce(region: Region, listener: PatternRewriterListener | None = None) -> bool:
    """xDSL's ``region_dce`` over :class:`_LiveSet`."""
    live_set = _LiveSet()
    while live_set.changed:
        live_set.changed = False
        live_set.propagate_region_liveness(region)
    live_set.delete_dead(region, listener)
    return live_set.changed


def _class_patterns(cls: type[Operation]) -> RewritePattern | None:
    """What xDSL's ``CanonicalizationRewritePattern`` applies to an op of ``cls``: its one
    pattern, or a greedy applier over several (or none: it still removes dead ops)."""
    traits = cls.get_traits_of_type(HasCanonicalizationPatternsTrait)
    if not traits:
        return None
    patterns = tuple(pattern for trait in traits for pattern in trait.get_patterns(cls))
    if len(patterns) == 1:
        return patterns[0]
    return GreedyRewritePatternApplier(list(patterns))


@dataclass(eq=False)
class _Canonicalizer(RewritePattern):
    """Dead-code removal, folding and the canonicalization patterns of an op's traits, as
    xDSL's ``GreedyRewritePatternApplier([CanonicalizationRewritePattern()], folding_enabled=True)``."""

    folder: Folder
    _folds: dict[type[Operation], bool] = field(default_factory=dict[type[Operation], bool])
    _patterns: dict[type[Operation], RewritePattern | None] = field(
        default_factory=dict[type[Operation], RewritePattern | None]
    )

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if is_trivially_dead(op):
            rewriter.erase(op)
            return
        cls = type(op)
        folds = self._folds.get(cls)
        if folds is None:  # constant ops are not folded: they would fold into themselves forever
            folds = self._folds[cls] = cls.has_trait(HasFolder, value_if_unregistered=False) and not cls.has_trait(
                ConstantLike, value_if_unregistered=True
            )
        if folds:
            folded = self.folder.try_fold(op)
            if folded is not None:
                values, new_ops = folded
                rewriter.replace(op, new_ops=new_ops, new_results=values)
                return
        if cls in self._patterns:
            pattern = self._patterns[cls]
        else:
            pattern = self._patterns[cls] = _class_patterns(cls)
        if pattern is not None:
            pattern.match_and_rewrite(op, rewriter)


class CanonicalizePass(ModulePass):
    """Applies all canonicalization patterns (xDSL's ``canonicalize``)."""

    name = "canonicalize"

    def apply(self, ctx: Context, op: builtin.ModuleOp) -> None:
        PatternRewriteWalker(_Canonicalizer(Folder(ctx)), post_walk_func=region_dce).rewrite_module(op)
