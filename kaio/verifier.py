"""Verification after every pass, at the price of what the pass changed.

MLIR verifies the IR after every pass; done naively that re-verifies every op of a 2000-op PTX
module after each pass, and costs more than the passes. Most passes change few ops, and an op's
own checks (its IRDL constraints, its ``verify_``, its traits) read only what is local to it:
its operands and their types, its result types, its properties and attributes, its
successors, and where it sits (its block, whether it ends it, the region's op). So
:class:`IncrementalVerifier` keeps, per op, a *fingerprint* of exactly those things (by
identity: attributes are immutable, so the same object means the same value) and re-verifies
an op only when its fingerprint changed, or it is new. An op with regions is verified again
when it or anything inside changed (its traits, ``IsolatedFromAbove`` say, read its body):
an op inside verified again, or the number of ops inside changed. The structure (parent
pointers, empty blocks) is checked every time. Ops of the simplest IRDL shape skip xDSL's
generic definition interpreter (:mod:`kaio.irdl_shortcut`).

Each op's ``kaio.*`` attributes are checked against their stage contracts too
(:mod:`kaio.dialects.stage_attrs`), which xDSL's verifier does not know.

The verifier only answers *whether* the module verifies. On a failure the caller re-verifies
the whole module the ordinary way (:func:`verify_module`) to find and print the culprit, so the
error text is exactly the full verifier's.
"""

from __future__ import annotations

from operator import attrgetter

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, ErasedSSAValue, Operation, OpResult
from xdsl.traits import NoTerminator

from kaio.dialects.stage_attrs import check_stage_attrs
from kaio.ir_walk import ops_of
from kaio.irdl_shortcut import install_shortcut

Fingerprint = tuple[object, ...]
_LIVE_VALUES = (OpResult, BlockArgument)  # the SSA values that are not erased ones
_held_type = attrgetter("_type")  # an SSA value's type field


def fingerprint(op: Operation, block: Block) -> Fingerprint:
    """Everything an op's own verification reads (see the module docstring)."""
    operands = op._operands  # pyright: ignore[reportPrivateUsage]  # the tuple: no wrapper
    region = block.parent
    last = block._last_op is op  # pyright: ignore[reportPrivateUsage]  # the field: no property call
    props = op.properties
    attrs = op.attributes
    return (
        operands,
        # the types as the values hold them (``.type`` is a property: a call per value), read
        # by ``attrgetter`` (a comprehension is a function call of its own)
        *map(_held_type, operands),
        None,  # separates the operand types from the result types
        *map(_held_type, op.results),
        *props.keys(),
        *props.values(),
        *(attrs.items() if attrs else ()),
        op._successors,  # pyright: ignore[reportPrivateUsage]
        block,
        region,
        region.parent if region is not None else None,
        last,
        # a block's last op must be a terminator unless its region has one block under a
        # NoTerminator op: both facts matter only for the last op
        len(region.blocks) if last and region is not None else 0,
    )


class IncrementalVerifier:
    """Verifies one module again and again (after each pass), re-checking only changed ops."""

    def __init__(self) -> None:
        self._seen: dict[Operation, Fingerprint] = {}  # holds the ops: no id is reused
        self._sizes: dict[Operation, int] = {}  # ops directly inside each op with regions
        self._walked = 0  # ops counted by the walk under way
        self.op_count = 0
        """The ops of the module last verified, itself included (as ``module.walk()``
        counts them): the pass manager's op counts, without a walk of its own."""

    def verifies(self, module: ModuleOp) -> bool:
        """Whether ``module`` verifies (the same answer as :func:`verify_module` not raising)."""
        self._walked = 1  # the module
        try:
            inner = self._verify_body(module)
            # the module's own traits (IsolatedFromAbove) read its body too
            key = (
                *module.properties.items(),
                None,
                *module.attributes.items(),
                self._sizes[module],
            )
            if inner or self._seen.get(module) != key:
                module.verify(verify_nested_ops=False)
                check_stage_attrs(module)
                self._seen[module] = key
        except Exception:  # noqa: BLE001  (any failure: the caller re-verifies whole for the message)
            self._seen.clear()  # the caller reports it; start afresh if asked again
            self._sizes.clear()
            return False
        self.op_count = self._walked
        return True

    def _verify_body(self, op: Operation) -> bool:
        """Verify the ops inside ``op``; whether any of them changed (was verified again, or
        the number of ops inside changed: one erased or moved out)."""
        seen = self._seen
        changed = False
        count = 0  # ops directly inside
        for region in op.regions:
            if region.parent is not op:
                raise ValueError("region parent pointer")
            single = len(region.blocks) == 1
            for block in region.blocks:
                if block.parent is not region:
                    raise ValueError("block parent pointer")
                if block.first_op is None and single and not op.has_trait(NoTerminator):
                    raise ValueError("empty block in a single-block region")
                for child in ops_of(block):
                    count += 1
                    if child.parent is not block:
                        raise ValueError("op parent pointer")
                    key = fingerprint(child, block)
                    if child.regions:
                        # its traits (IsolatedFromAbove, say) read its body: verified again
                        # when the body or the op changed
                        inner = self._verify_body(child)
                        key = (*key, self._sizes[child])
                        if inner or seen.get(child) != key:
                            self._verify_one(child)
                            seen[child] = key
                            changed = True
                    elif seen.get(child) != key:
                        if child._successors or block._last_op is child:  # pyright: ignore[reportPrivateUsage]
                            self._verify_one(child)  # a branch, or a block's last op: the whole check
                        else:
                            _verify_plain(child)
                        seen[child] = key
                        changed = True
        self._walked += count
        if self._sizes.get(op) != count:
            self._sizes[op] = count
            changed = True
        return changed

    def _verify_one(self, op: Operation) -> None:
        install_shortcut(type(op))
        op.verify(verify_nested_ops=False)
        check_stage_attrs(op)


def _verify_plain(op: Operation) -> None:
    """``op.verify(verify_nested_ops=False)`` for an op without regions or successors that does
    not end its block (most ops): of ``Operation.verify``'s structural checks only the erased
    operands apply, then the op's own ``verify_``. The pass/fail answer is the same; a failure's
    message comes from the caller's full re-verification."""
    for operand in op._operands:  # pyright: ignore[reportPrivateUsage]
        # exact types first: isinstance on xDSL's ABC-derived values is slow
        if type(operand) not in _LIVE_VALUES and isinstance(operand, ErasedSSAValue):
            raise ValueError("Erased SSA value is used by the operation")
    install_shortcut(type(op))
    op.verify_()
    check_stage_attrs(op)


def first_failing_op(module: Operation) -> tuple[Operation, BaseException] | None:
    """The first op (in walk order) that does not verify on its own, and its error: what a
    message shows instead of the whole module. None when each op verifies by itself."""
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
            check_stage_attrs(op)
        except Exception as e:
            return op, e.__cause__ or e
    return None


def verify_module(module: Operation) -> None:
    """``module.verify()``, then the stage contracts (``kaio.*`` attributes) of every op, which
    xDSL's verifier does not know: what the incremental verifier answers, the ordinary way."""
    module.verify()
    for op in module.walk():
        check_stage_attrs(op)
