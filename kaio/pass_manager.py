"""The pipeline runner: MLIR's pass-manager comforts around a list of xDSL passes.

- The module is verified before the first pass and after every pass (MLIR's default); invalid
  IR stops the compile with a ``KaioCompileError`` naming the pass and the offending op, instead
  of printing PTX from it. ``Pipeline(..., verify_each=False)`` turns it off. After the first
  pass only the ops a pass changed are re-verified (:mod:`kaio.verifier`); a failure is
  re-verified in full for its message.
- Pass contracts (:mod:`kaio.pass_contracts`): passes out of order and missing work are warned
  about, a pass that leaves what it promised to remove is an error.
- The pipeline's ``callback(previous_pass, module, next_pass)`` is called as xDSL's
  ``PassPipeline.apply`` calls it: once before the first pass (``previous_pass`` None), between
  passes, once after the last (``next_pass`` None).
- Each pass is timed and its op counts recorded (:class:`PassTiming`, ``compiled.pass_times``);
  :func:`print_after_change` is a callback printing the IR after each pass that changed it.
"""

from __future__ import annotations

import linecache
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass, PassPipeline

from kaio.dialect_registry import kaio_context
from kaio.errors import KaioCompileError, KaioError, KaioPipelineWarning
from kaio.ir_walk import ops_within
from kaio.locations import op_source_location, print_with_locations
from kaio.pass_contracts import check_postconditions, missing_work, op_text, order_problems
from kaio.pass_registry import available_passes
from kaio.verifier import IncrementalVerifier, first_failing_op, verify_module

DumpCallback = Callable[[str, str], None]
PipelineCallback = Callable[[ModulePass | None, ModuleOp, ModulePass | None], None]


@dataclass(frozen=True)
class PassTiming:
    """One pass of a compile: its stage name (``cse.2`` for the second ``cse``), wall time in
    seconds (verification and contract checks not included) and the op counts around it."""

    stage: str
    seconds: float
    ops_before: int
    ops_after: int


def timing_table(times: tuple[PassTiming, ...]) -> str:
    """``times`` as a table, like ``mlir-opt --mlir-timing``: one line per pass and a total."""
    total = sum(t.seconds for t in times) or 1e-12
    width = max([len(t.stage) for t in times] + [5])
    lines = [f"{'pass':<{width}}  {'ms':>9}  {'%':>5}  {'ops before':>10}  {'ops after':>9}"]
    for t in times:
        lines.append(
            f"{t.stage:<{width}}  {t.seconds * 1e3:9.3f}  {100 * t.seconds / total:5.1f}  "
            f"{t.ops_before:>10}  {t.ops_after:>9}"
        )
    lines.append(f"{'total':<{width}}  {sum(t.seconds for t in times) * 1e3:9.3f}  {100.0:5.1f}")
    return "\n".join(lines)


def stage_names(passes: tuple[ModulePass, ...]) -> list[str]:
    """One name per pass: its pipeline name, numbered from the second use on (``cse.2``)."""
    seen: dict[str, int] = {}
    names = []
    for p in passes:
        seen[p.name] = seen.get(p.name, 0) + 1
        names.append(p.name if seen[p.name] == 1 else f"{p.name}.{seen[p.name]}")
    return names


def run_pipeline(
    module: ModuleOp,
    pipeline: PassPipeline,
    watch: DumpCallback | None = None,
) -> tuple[PassTiming, ...]:
    """Apply the passes in order (see the module docstring); ``watch(stage, ir_text)`` sees the
    module after each one. Returns each pass's timing."""
    ctx = kaio_context()
    verify_each = getattr(pipeline, "verify_each", True)
    passes = pipeline.passes
    names = stage_names(passes)
    for problem in order_problems(passes):
        warnings.warn(problem, KaioPipelineWarning, stacklevel=3)
    known = available_passes()
    verifier = IncrementalVerifier()
    if verify_each:
        _verify(module, "the module given to the pipeline does not verify", verifier)
    callback = _guarded(pipeline.callback)
    if callback is not None:
        callback(None, module, passes[0] if passes else None)
    times = []
    ops = verifier.op_count if verify_each else _count_ops(module)
    for i, (name, p) in enumerate(zip(names, passes)):
        for problem in missing_work(p, [q.name for q in passes[:i]], [q.name for q in passes[i + 1 :]], module, known):
            warnings.warn(problem, KaioPipelineWarning, stacklevel=3)
        start = time.perf_counter()
        try:
            p.apply(ctx, module)
        except KaioError:
            raise
        except Exception as e:  # an xDSL failure inside a pass: name the pass, keep the cause
            raise KaioCompileError(f"pass '{name}' failed: {e}") from e
        seconds = time.perf_counter() - start
        if verify_each:
            _verify(module, f"pass '{name}' produced invalid IR", verifier)
            check_postconditions(p, name, module)
        # the verifier counted the ops as it walked them
        ops_after = verifier.op_count if verify_each else _count_ops(module)
        times.append(PassTiming(name, seconds, ops, ops_after))
        ops = ops_after
        if callback is not None:
            callback(p, module, passes[i + 1] if i + 1 < len(passes) else None)
        if watch is not None:
            watch(name, print_with_locations(module))
    return tuple(times)


def print_after_change(out: TextIO | None = None) -> PipelineCallback:
    """A pipeline callback printing the IR after each pass that changed it (MLIR's
    ``--mlir-print-ir-after-change``), to ``out`` (``stderr`` by default):
    ``pipeline.configured(callback=print_after_change())``, or
    ``kaio.compile(..., print_after_change=True)``."""
    last = [""]

    def callback(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
        text = str(module)
        if previous is not None and text != last[0]:
            print(f"// -----// IR Dump After {previous.name} //----- //\n{text}", file=out or sys.stderr)
        last[0] = text

    return callback


def chained(*callbacks: PipelineCallback | None) -> PipelineCallback | None:
    """One pipeline callback calling each given one in turn (None: none given)."""
    given = [c for c in callbacks if c is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def callback(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
        for c in given:
            c(previous, module, following)

    return callback


def _count_ops(module: ModuleOp) -> int:
    return len(ops_within(module))


def _verify(module: ModuleOp, what: str, verifier: IncrementalVerifier) -> None:
    """Verify the module (only what changed since ``verifier`` last saw it); on failure verify
    it whole and find the first op that does not verify on its own, for a message that shows
    it rather than the whole module."""
    if verifier.verifies(module):
        return
    try:
        verify_module(module)
        return  # not reached while the incremental verifier agrees with it
    except Exception as whole:
        culprit = first_failing_op(module)
        if culprit is None:
            raise KaioCompileError(f"{what}: {_first_line(whole)}") from whole
        op, error = culprit
        raise KaioCompileError(
            f"{what}: `{op.name}` does not verify ({_first_line(error)}):\n    {op_text(op)}",
            **python_position(op),
        ) from whole


def python_position(op: Operation) -> dict[str, Any]:
    """KaioCompileError's position fields for the Python line ``op`` implements (none known: {})."""
    loc = op_source_location(op)
    if loc is None:
        return {}
    file, line, col = loc.filename.data, loc.line.data, loc.column.data
    text = linecache.getline(file, line).rstrip("\n")
    return {"filename": file, "line": line, "col": col - 1 if col else None, "source_line": text or None}


def _first_line(e: BaseException) -> str:
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(e).__name__


def _guarded(callback: PipelineCallback | None) -> PipelineCallback | None:
    """The pipeline callback, whose own failure names the pass it was shown."""
    if callback is None:
        return None

    def call(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
        try:
            callback(previous, module, following)
        except KaioError:
            raise
        except Exception as e:
            where = f"after pass '{previous.name}'" if previous is not None else "before the first pass"
            raise KaioCompileError(f"the pipeline callback raised {type(e).__name__}: {e} ({where})") from e

    return call
