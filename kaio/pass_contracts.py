"""What a pass promises and what it needs, declared on the pass class and checked by the
pipeline runner (:mod:`kaio.pass_manager`).

A pass declares ``contract = PassContract(...)`` as a class attribute:

- ``after``: passes that, when a pipeline uses them, must run before this one. A pipeline that
  runs one of them later gets a :class:`~kaio.errors.KaioPipelineWarning` before anything runs;
  one that leaves it out gets the warning only when the IR shows the missing work (that pass's
  ``removes`` rules match an op), so a SIMT kernel without ``tile-layout`` hears nothing.
- ``removes``: ops that must not survive the pass (its postcondition; one left is a
  ``KaioCompileError`` naming the pass and the op).
- ``options``: integer options and their bounds, checked whenever a :class:`~kaio.Pipeline` is
  made, so ``pipeline-cp-async{stages=1000}`` is refused before it prints megabytes of PTX.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from kaio.errors import KaioCompileError, KaioPipelineError
from kaio.ir_walk import ops_within


@dataclass(frozen=True)
class OpRule:
    """Ops of one kind: ``what`` says which in words, ``matches`` finds them."""

    what: str
    matches: Callable[[Operation], bool]

    def first(self, module: ModuleOp) -> Operation | None:
        return next((op for op in ops_within(module)[1:] if self.matches(op)), None)


@dataclass(frozen=True)
class OptionRange:
    """An integer option's inclusive bounds (``None``, where it is the default, means unset)."""

    name: str
    low: int
    high: int


@dataclass(frozen=True)
class PassContract:
    after: tuple[str, ...] = ()
    removes: tuple[OpRule, ...] = ()
    options: tuple[OptionRange, ...] = ()


NO_CONTRACT = PassContract()


def contract_of(p: ModulePass | type[ModulePass]) -> PassContract:
    contract = getattr(p, "contract", NO_CONTRACT)
    return contract if isinstance(contract, PassContract) else NO_CONTRACT


def check_options(p: ModulePass) -> None:
    """Refuse option values out of the pass's declared bounds, and an ``arch`` kaio does not
    know (``KaioTargetError``)."""
    arch = getattr(p, "arch", None)
    if isinstance(arch, str):
        from kaio.targets.ptx.arch import get_arch

        get_arch(arch)
    for option in contract_of(p).options:
        value = getattr(p, option.name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not option.low <= value <= option.high:
            raise KaioPipelineError(
                f"pass '{p.name}': option {option.name}={value!r} is out of range: "
                f"at least {option.low}, at most {option.high}"
            )


def order_problems(passes: Sequence[ModulePass]) -> list[str]:
    """Passes that run before a pass their contract says must come first."""
    names = [p.name for p in passes]
    problems = []
    for i, p in enumerate(passes):
        for needed in contract_of(p).after:
            if needed in names[i + 1 :] and needed not in names[:i]:
                problems.append(f"pass '{p.name}' runs before '{needed}', which it needs to run first")
    return problems


def missing_work(
    p: ModulePass, ran: Sequence[str], later: Sequence[str], module: ModuleOp,
    known: Mapping[str, Callable[[], type[ModulePass]]],
) -> list[str]:
    """Before ``p``: the work of passes it comes after that the pipeline lacks, seen in the IR
    (those it runs later are :func:`order_problems`); ``known``: the passes by name (the
    registry's, handed in: passes import this module, so it imports no registry of passes)."""
    problems = []
    for needed in contract_of(p).after:
        if needed in ran or needed in later or needed not in known:
            continue
        for rule in contract_of(known[needed]()).removes:
            op = rule.first(module)
            if op is not None:
                problems.append(
                    f"pass '{p.name}' is given {rule.what} (`{op.name}`), which '{needed}' handles, "
                    f"but '{needed}' did not run before it"
                )
                break
    return problems


def check_postconditions(p: ModulePass, stage: str, module: ModuleOp) -> None:
    """The ops ``p`` promised to remove are gone."""
    for rule in contract_of(p).removes:
        op = rule.first(module)
        if op is not None:
            raise KaioCompileError(f"pass '{stage}' left {rule.what}:\n    {op_text(op)}")


def op_text(op: Operation, limit: int = 400) -> str:
    """The op as printed (its first line only when it holds regions), for error messages."""
    try:
        text = str(op).strip().splitlines()[0]
    except Exception:  # an op too broken to print
        text = op.name
    return text if len(text) <= limit else text[:limit] + " ..."
