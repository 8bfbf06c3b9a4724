"""State shared while building one kernel, and the per-function compiler's common core.

``BuildState`` lives for one build of one kernel (an emitter, shared-memory bookkeeping, the
chain of device functions being inlined). ``CompilerBase`` is one Python function being
compiled (the kernel, or an inlined device function): its source, its Python environment, its
variables. The expression, statement and loop visitors are mixins over this base, composed once
into ``FunctionCompiler``.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import scf
from xdsl.ir import Block, Region, SSAValue

from kaio.dialects.kernel import SourceLocOp
from kaio.dtypes import ScalarType
from kaio.frontend.diagnostics import FunctionSource, SemanticError
from kaio.frontend.emitter import Emitter
from kaio.frontend.scope import Merge, Scope, merge
from kaio.frontend.values import ArrayRef, Const, PyObject, Scalar, SharedRef, Value, const_of

MAX_SHARED_BYTES = 48 * 1024  # static shared memory per block without opt-in


@dataclass
class BuildState:
    emitter: Emitter
    shared_count: int = 0
    shared_bytes: int = 0
    inlining: list[Any] = field(default_factory=list)  # device functions being inlined
    # The statement being compiled, for internal errors.
    current: tuple[FunctionSource, ast.AST] | None = None


MISSING: Any = object()  # what `Env.lookup` returns for an unknown name


class Env:
    """A function's Python environment: closure cells, then globals, then builtins."""

    def __init__(self, fn: Callable[..., Any]):
        code = fn.__code__
        self.globals: dict[str, Any] = fn.__globals__
        self.closure: dict[str, Any] = {}
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:  # an empty cell: the name is assigned after the def
                pass

    def lookup(self, name: str) -> Any:
        if name in self.closure:
            return self.closure[name]
        if name in self.globals:
            return self.globals[name]
        return getattr(builtins, name, MISSING)

    @staticmethod
    def missing(obj: Any) -> bool:
        return obj is MISSING


def python_value(obj: Any) -> Value:
    """A Python object read from the environment, as a kernel value."""
    c = const_of(obj)
    return c if c is not None else PyObject(obj)


class CompilerBase:
    """One Python function being compiled into the current kernel."""

    def __init__(
        self,
        state: BuildState,
        src: FunctionSource,
        env: Env,
        scope: Scope,
        *,
        is_kernel: bool,
        return_type: ScalarType | tuple[ScalarType, ...] | None = None,
    ):
        self.state = state
        self.em = state.emitter
        self.src = src
        self.env = env
        self.scope = scope
        self.is_kernel = is_kernel
        self.return_type = return_type
        # How many values a device function returns: None for one scalar, n for a tuple (known
        # from the annotation, else from the first `return` compiled).
        self.return_arity = len(return_type) if isinstance(return_type, tuple) else None

    # -- what the parts ask of each other, provided by the mixins FunctionCompiler is composed
    #    of (function_compiler.py): none of them imports another

    # ExpressionsMixin
    def eval(self, node: ast.expr) -> Value:
        raise NotImplementedError

    def eval_bool(self, node: ast.expr, what: str) -> Scalar | Const:
        raise NotImplementedError

    def lookup(self, name: str) -> Value:
        raise NotImplementedError

    def conditional_value(
        self, cond: SSAValue, then_fn: Callable[[], Value], else_fn: Callable[[], Value], what: str
    ) -> Value:
        raise NotImplementedError

    def memory_ref(self, base: Value) -> ArrayRef | SharedRef:
        raise NotImplementedError

    def indices(self, ref: ArrayRef | SharedRef, index: Value, node: ast.AST) -> list[SSAValue]:
        raise NotImplementedError

    def check_writable(self, ref: ArrayRef | SharedRef) -> None:
        raise NotImplementedError

    def element_value(self, ref: ArrayRef | SharedRef, value: Value) -> SSAValue:
        raise NotImplementedError

    def store(self, base: Value, index_node: ast.expr, value: Value) -> None:
        raise NotImplementedError

    # StatementsMixin
    def visit_body(self, body: Sequence[ast.stmt]) -> None:
        raise NotImplementedError

    def live_flags(self) -> list[tuple[str, SSAValue]] | None:
        raise NotImplementedError

    def unless_exited(self, flags: list[tuple[str, SSAValue]], run: Callable[[], None]) -> None:
        raise NotImplementedError

    def value_returning(self) -> bool:
        raise NotImplementedError

    # -- structured control flow shared by statements, expressions and loops

    def branch(
        self,
        cond: SSAValue,
        then_fn: Callable[[], None],
        else_fn: Callable[[], None] | None,
        where: str,
    ) -> None:
        """``scf.if`` over two statement builders; variables they change become results."""
        pre = self.scope
        blocks: list[Block] = []
        paths: list[Scope] = []
        for fn in (then_fn, else_fn):
            self.scope = pre.copy()
            block = Block()
            with self.em.in_block(block):
                if fn is not None:
                    fn()
            blocks.append(block)
            paths.append(self.scope)
        self.scope = pre
        joined = merge(self.em, paths, where, cond)
        self._finish_if(cond, blocks, joined)

    def _finish_if(self, cond: SSAValue, blocks: list[Block], joined: Merge) -> None:
        if not joined.types and all(_only_markers(b) for b in blocks):
            self.scope = joined.scope  # nothing happens on either path
            return
        for block, values in zip(blocks, joined.incoming, strict=True):
            block.add_op(scf.YieldOp(*values))
        then_block, else_block = blocks
        types = [t.ir_type for t in joined.types]
        if not joined.types and len(else_block.ops) == 1:
            else_region = Region()  # no else: keep the IR as the user wrote it
        else:
            else_region = Region(else_block)
        op = scf.IfOp(cond, types, Region(then_block), else_region)
        self.em.add(op)
        joined.bind_results(op.results)
        self.scope = joined.scope

    def at(self, node: ast.AST, error: SemanticError) -> SemanticError:
        return error.locate(node, self.src)


def _only_markers(block: Block) -> bool:
    return all(isinstance(op, SourceLocOp) for op in block.ops)


def annotation_value(node: ast.expr, env: Env) -> Any:
    """Evaluate a parameter annotation (``Array[f32]``, ``kaio.constexpr``, ``"u32"``) in the
    function's environment, without running arbitrary code."""
    if isinstance(node, ast.Name):
        obj = env.lookup(node.id)
        if Env.missing(obj):
            raise SemanticError(f"name `{node.id}` is not defined", None, node)
        return obj
    if isinstance(node, ast.Attribute):
        base = annotation_value(node.value, env)
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise SemanticError(f"`{node.attr}` is not defined", None, node) from None
    if isinstance(node, ast.Subscript):
        base = annotation_value(node.value, env)
        try:
            return base[annotation_value(node.slice, env)]
        except (TypeError, KeyError) as exc:
            raise SemanticError(f"invalid type annotation: {exc}", None, node) from None
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            inner = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            raise SemanticError(f"cannot parse annotation {node.value!r}", None, node) from None
        ast.copy_location(inner, node)
        for child in ast.walk(inner):
            ast.copy_location(child, node)
        return annotation_value(inner, env)
    raise SemanticError("unsupported type annotation", "annotate with a kaio type", node)
