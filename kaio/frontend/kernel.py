"""``@kaio.gpu_kernel`` and ``@kaio.device``: the frontend's public objects.

Decorating a kernel reads its source, checks the syntax, resolves the parameter annotations and
builds the IR once (with the constexpr defaults, or unknown stand-ins where there is no
default), so every compile error surfaces at import time. ``build`` then produces a fresh module
per call for the compiler to lower.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute
from xdsl.utils.exceptions import VerifyException

from kaio.compiled import KernelParam
from kaio.dialects.kernel import ArrayType, KernelFuncOp, ReturnOp
from kaio.dtypes import ArrayType as KaioArrayType
from kaio.dtypes import ConstexprType, ScalarType, _Constexpr, bool_, i32
from kaio.errors import KaioCompileError, KaioTypeError
from kaio.launch_limits import MAX_THREADS
from kaio.frontend.analysis import check_syntax, global_reads
from kaio.frontend.call_handlers import calls
from kaio.frontend.context import MISSING, BuildState, Env, annotation_value
from kaio.frontend.diagnostics import FunctionSource, SemanticError
from kaio.frontend.emitter import Emitter
from kaio.frontend.function_compiler import FunctionCompiler
from kaio.frontend.inline import DeviceFunction
from kaio.frontend.scope import RET, Scope
from kaio.frontend.typerules import adapt
from kaio.frontend.values import ArrayRef, Const, Scalar, const_of
from kaio.locations import source_location

NO_DEFAULT: Any = inspect.Parameter.empty


class ParamKind(str, Enum):
    ARRAY = "array"
    SCALAR = "scalar"
    CONSTEXPR = "constexpr"


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a kernel as declared: ``type`` is ``Array[f32]``/``MutArray[f32]`` for
    arrays, the scalar type for scalars, and for constexprs the declared type or None."""

    name: str
    kind: ParamKind
    type: KaioArrayType | ScalarType | None
    default: Any = NO_DEFAULT

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    @property
    def is_constexpr(self) -> bool:
        # the runtime reads this (duck-typed) instead of importing ParamKind from the frontend
        return self.kind is ParamKind.CONSTEXPR


@dataclass
class KernelIR:
    """One build: a fresh module holding exactly one ``kernel.func``."""

    name: str
    module: ModuleOp
    func: KernelFuncOp
    params: tuple[KernelParam, ...]
    constexprs: dict[str, Any] = field(default_factory=dict)
    block_size: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0
    facts: tuple[tuple[str, int], ...] = ()
    """What the build was told about the arguments (tile kernels: see ``_bind_facts``)."""


class GpuKernel:
    compiler_class: type[FunctionCompiler] = FunctionCompiler  # what compiles the body
    kind = "gpu_kernel"
    stand_in_int = 1  # what an int constexpr without a default stands for while checking

    def __init__(self, fn: Callable[..., Any], block_size: int | tuple[int, ...]):
        self.fn = fn
        self.name: str = fn.__name__
        self._launcher: Any = None  # kaio.runtime.launch.Launcher, made on the first launch
        self._pipeline: Callable[[str], Any] | None = None  # with_pipeline's override
        self._src = FunctionSource.of(fn, "kernel")
        try:
            self.block_size = _block_shape(block_size, self._src)
            check_syntax(self._src)
            self.params: tuple[ParamSpec, ...] = _parameters(fn, self._src)
            functools.update_wrapper(self, fn)  # type: ignore[arg-type]
            self._check()
        except KaioCompileError:
            raise
        except Exception as exc:  # a frontend bug: still an error that points at the kernel
            raise self._src.error(self._src.tree, f"internal compiler error ({exc!r})") from exc

    @property
    def runtime_params(self) -> tuple[KernelParam, ...]:
        result: list[KernelParam] = []
        for p in self.params:
            if isinstance(p.type, KaioArrayType):
                result.append(
                    KernelParam(p.name, p.type.elem, is_array=True, mutable=p.type.mutable)
                )
            elif p.kind is ParamKind.SCALAR:
                assert isinstance(p.type, ScalarType)
                result.append(KernelParam(p.name, p.type, is_array=False))
        return tuple(result)

    @property
    def constexpr_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.kind is ParamKind.CONSTEXPR)

    def build(self, constexprs: Mapping[str, Any] | None = None) -> KernelIR:
        """A new module specialized for ``constexprs`` (defaults fill the missing ones)."""
        values = self._constexpr_values(dict(constexprs or {}))
        return self._build(values, unknown=())

    def source_key(self) -> str:
        """A digest of everything the IR depends on besides constexpr values: the kernel's
        source, the sources of the device functions it calls (transitively), the values of the
        global/closure constants they read, the block size."""
        h = hashlib.sha256()
        h.update(f"kernel {self.name} block {self.block_size} params {self.params!r}\n".encode())
        _hash_function(h, self._src, Env(self.fn), set())
        return h.hexdigest()

    def default_pipeline(self, arch: str = "sm_80") -> Any:
        """The pass pipeline ``kaio.compile`` uses for this kernel: print it, edit it (a
        :class:`kaio.Pipeline` is immutable: ``insert``/``replace``/``without`` return new ones),
        and pass it back as ``kaio.compile(kernel, pipeline=...)``."""
        if self._pipeline is not None:
            return self._pipeline(arch)
        from kaio.pipeline import kernel_pipeline

        return kernel_pipeline(arch)

    def with_pipeline(self, pipeline: Callable[[str], Any]) -> GpuKernel:
        """The same kernel, compiled (and launched) with ``pipeline(arch)`` instead of the
        default pipeline: ``clamp.with_pipeline(lambda arch: ...)[grid](...)``."""
        other = copy.copy(self)
        other._pipeline = pipeline
        other._launcher = None
        return other

    def __repr__(self) -> str:
        params = ", ".join(p.name for p in self.params)
        return f"<kaio.{self.kind} {self.name}({params}) block={self.block_size}>"

    # ------------------------------------------------------------------ launching (kaio.runtime)

    def __getitem__(self, key: Any) -> Any:
        """``kernel[grid](*args)`` or ``kernel[grid, block](*args)``; see kaio.runtime.launch."""
        launcher = self._launcher
        if launcher is None:
            from kaio.runtime.launch import launcher_of

            launcher = launcher_of(self)
        return launcher[key]

    def launch(
        self,
        device: Any,
        *args: Any,
        grid: Any,
        block: Any = None,
        shared_bytes: int = 0,
        stream: Any = None,
        **kwargs: Any,
    ) -> None:
        """Launch on ``device`` (None: the buffers' device, else ``kaio.Device()``) with an
        explicit grid, optional block, dynamic shared memory bytes and stream."""
        launcher = self._launcher
        if launcher is None:
            from kaio.runtime.launch import launcher_of

            launcher = launcher_of(self)
        launcher.launch_on(device, grid, block, args, kwargs, stream, shared_bytes)

    def specializations(self, device: Any = None) -> list[Any]:
        """The :class:`kaio.Specialization` s launches compiled so far (on ``device``, or on
        any), each with its ``compiled`` kernel: constexpr values and the facts a launch found
        about the arguments. Pass one back as ``kaio.compile(kernel, arch, specialization=s)``
        to compile exactly what that launch ran."""
        return [] if self._launcher is None else self._launcher.specializations(device)

    def last_compiled(self, device: Any = None) -> Any:
        """The :class:`~kaio.compiled.CompiledKernel` the latest launch ran (on ``device``, or
        on any): its ``ptx``, ``specialization`` and ``stages``. None before the first launch."""
        return None if self._launcher is None else self._launcher.last_compiled(device)

    def compile_for_launch(self, arch: str, constexprs: Mapping[str, Any]) -> Any:
        """What a launch runs: ``kaio.compile`` with the launch's constexprs (the argument facts
        among them under ``ARG_FACTS``)."""
        from kaio.compiler import compile

        return compile(self, arch, **constexprs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kaio.runtime.launch import not_callable

        raise not_callable(self)

    # ------------------------------------------------------------------ internals

    def _constexpr_values(self, given: dict[str, Any]) -> dict[str, Const]:
        known = {p.name for p in self.constexpr_params}
        for name in given:
            if name not in known:
                raise KaioTypeError(f"kernel `{self.name}` has no constexpr parameter `{name}`")
        values: dict[str, Const] = {}
        for p in self.constexpr_params:
            if p.name in given:
                obj = given[p.name]
            elif p.has_default:
                obj = p.default
            else:
                raise KaioTypeError(f"kernel `{self.name}`: no value for constexpr `{p.name}`")
            values[p.name] = _constexpr_const(self.name, p, obj)
        return values

    def _check(self) -> None:
        """The decoration-time build: constexprs without a default are unknown values."""
        known: dict[str, Const] = {}
        unknown: list[ParamSpec] = []
        for p in self.constexpr_params:
            if p.has_default:
                try:
                    known[p.name] = _constexpr_const(self.name, p, p.default)
                except KaioTypeError as exc:
                    raise self._src.error(_param_node(self._src, p.name), str(exc)) from None
            else:
                unknown.append(p)
        self._build(known, tuple(unknown))

    def _bind_facts(self, scope: Scope, state: BuildState, facts: Any) -> None:
        """Bind what a launch proved about the arguments (tile kernels: divisibility)."""

    def _build(
        self, constexprs: dict[str, Const], unknown: tuple[ParamSpec, ...], facts: Any = None
    ) -> KernelIR:
        runtime = self.runtime_params
        types: list[Attribute] = [
            ArrayType(p.dtype.ir_type, p.mutable) if p.is_array else p.dtype.ir_type
            for p in runtime
        ]
        stand_in_types = [p.type if isinstance(p.type, ScalarType) else i32 for p in unknown]
        names = [p.name for p in runtime] + [p.name for p in unknown]
        func = KernelFuncOp(
            self.name, types + [t.ir_type for t in stand_in_types], names, self.block_size
        )
        block = func.body.block
        func.location = source_location(self._src.filename, self._src.tree.lineno, self._src.tree.col_offset + 1)
        for arg in block.args:
            arg.location = func.location  # the parameters are declared on the `def` line
        scope = Scope()
        for rp, arg in zip(runtime, block.args, strict=False):
            if rp.is_array:
                scope.bind(rp.name, ArrayRef(arg, KaioArrayType(rp.dtype, rp.mutable), rp.name))
            else:
                scope.bind(rp.name, Scalar(arg, rp.dtype))
        for spec, t, arg in zip(unknown, stand_in_types, block.args[len(runtime) :], strict=True):
            scope.bind(spec.name, Scalar(arg, t, _stand_in(t, self.stand_in_int)))
        for name, c in constexprs.items():
            scope.bind(name, c)
        scope.bind(RET, Const(False, bool_))
        state = BuildState(Emitter(block))
        self._bind_facts(scope, state, facts)
        compiler = self.compiler_class(state, self._src, Env(self.fn), scope, is_kernel=True)
        try:
            compiler.visit_body(self._src.tree.body)
            block.add_op(ReturnOp())
            module = ModuleOp([func])
            module.verify()
        except SemanticError as e:
            raise e.to_compile_error() from None
        except KaioCompileError:
            raise
        except (VerifyException, Exception) as exc:
            raise _internal_error(state, exc) from exc
        return KernelIR(
            name=self.name,
            module=module,
            func=func,
            params=runtime,
            constexprs={k: v.value for k, v in constexprs.items()},
            block_size=self.block_size,
            shared_bytes=state.shared_bytes,
            facts=tuple((name, int(n)) for name, n in facts or ()),
        )


@calls(GpuKernel)
def _kernel_call(caller: Any, kernel: GpuKernel) -> None:
    raise SemanticError(
        f"a kernel cannot call the kernel `{kernel.name}`",
        "move the shared code into a @kaio.device function",
    )


def _stand_in(t: ScalarType, integer: int) -> int | float | bool:
    """The compile-time number an unknown constexpr stands for while checking a kernel."""
    if t.is_bool:
        return True
    return 1.0 if t.is_float else integer


def _internal_error(state: BuildState, exc: BaseException) -> KaioCompileError:
    message = f"internal compiler error ({type(exc).__name__}: {exc})"
    hint = "this is a kaio bug; please report it with this kernel"
    if state.current is None:
        return KaioCompileError(message, hint=hint)
    src, node = state.current
    return src.error(node, message, hint)


def _block_shape(block_size: int | tuple[int, ...], src: FunctionSource) -> tuple[int, int, int]:
    if isinstance(block_size, int):
        dims: tuple[Any, ...] = (block_size,)
    elif isinstance(block_size, (tuple, list)):
        dims = tuple(block_size)
    else:  # None, a float, a string: no shape at all
        dims = ()
    ok = 1 <= len(dims) <= 3 and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims
    )
    shape = (*dims, 1, 1)[:3] if ok else (0, 0, 0)
    if not ok or shape[0] * shape[1] * shape[2] > MAX_THREADS:
        raise src.error(
            src.tree,
            f"invalid block_size {block_size!r}",
            f"give 1 to 3 positive ints with at most {MAX_THREADS} threads in all, e.g. 256 or (16, 16)",
        )
    return (int(shape[0]), int(shape[1]), int(shape[2]))


def _param_node(src: FunctionSource, name: str) -> ast.arg:
    a = src.tree.args
    return next(p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg == name)


def _parameters(fn: Callable[..., Any], src: FunctionSource) -> tuple[ParamSpec, ...]:
    env = Env(fn)
    signature = inspect.signature(fn)
    specs: list[ParamSpec] = []
    a = src.tree.args
    for node in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        default = signature.parameters[node.arg].default
        if node.annotation is None:
            raise src.error(
                node,
                f"kernel parameter `{node.arg}` needs a type annotation",
                "e.g. `x: Array[f32]`, `y: MutArray[f32]`, `n: u32`, `BLOCK: kaio.constexpr`",
            )
        evaluated = getattr(fn, "__annotations__", {}).get(node.arg)
        try:
            # Annotations Python already evaluated (no `from __future__ import annotations`)
            # may name a factory's locals, which the kernel's environment cannot see.
            t = evaluated if evaluated is not None and not isinstance(evaluated, str) else annotation_value(node.annotation, env)
        except SemanticError as e:
            raise e.locate(node.annotation, src).to_compile_error() from None
        if isinstance(t, KaioArrayType):
            specs.append(ParamSpec(node.arg, ParamKind.ARRAY, t, default))
        elif isinstance(t, ScalarType):
            if t.is_bool:
                raise src.error(
                    node.annotation,
                    f"bool kernel parameters are not supported (`{node.arg}`)",
                    "pass an integer flag (`flag: i32`) or make it a kaio.constexpr",
                )
            specs.append(ParamSpec(node.arg, ParamKind.SCALAR, t, default))
        elif isinstance(t, _Constexpr):
            specs.append(ParamSpec(node.arg, ParamKind.CONSTEXPR, None, default))
        elif isinstance(t, ConstexprType):
            specs.append(ParamSpec(node.arg, ParamKind.CONSTEXPR, t.elem, default))
        else:
            raise src.error(
                node.annotation,
                f"unsupported kernel parameter type {t!r} for `{node.arg}`",
                "use Array[T], MutArray[T], a kaio scalar type, or kaio.constexpr",
            )
    return tuple(specs)


def _constexpr_const(kernel: str, p: ParamSpec, obj: Any) -> Const:
    c = const_of(obj)
    if c is None:
        raise KaioTypeError(
            f"kernel `{kernel}`: constexpr `{p.name}` must be an int, float or bool, "
            f"got {type(obj).__name__}"
        )
    if isinstance(p.type, ScalarType):
        try:
            return adapt(c, p.type)
        except SemanticError as e:
            raise KaioTypeError(f"kernel `{kernel}`: constexpr `{p.name}`: {e.message}") from None
    return c


def _hash_function(h: Any, src: FunctionSource, env: Env, seen: set[int]) -> None:
    # where it sits too: the PTX's .file/.loc line info names the file and every line number
    h.update(f"def {src.fn.__module__}.{src.fn.__qualname__} at {src.filename}:{src.first_line}\n".encode())
    h.update(src.text.encode())
    for chain in global_reads(src):
        obj = env.lookup(chain[0])
        for attr in chain[1:]:
            if obj is MISSING:
                break
            obj = getattr(obj, attr, MISSING)
        if obj is MISSING:
            continue
        if isinstance(obj, DeviceFunction):
            if id(obj) not in seen:
                seen.add(id(obj))
                _hash_function(h, obj.source, Env(obj.fn), seen)
            continue
        c = const_of(obj)
        if c is not None:
            type_name = c.type.name if c.type is not None else type(c.value).__name__
            h.update(f"{'.'.join(chain)} = {type_name} {c.value!r}\n".encode())


def gpu_kernel(
    fn: Callable[..., Any] | None = None, *, block_size: int | tuple[int, ...] = 256
) -> Any:
    """Compile a Python function into a GPU kernel: ``@kaio.gpu_kernel(block_size=256)``."""
    if fn is not None:
        return GpuKernel(fn, block_size)
    return lambda f: GpuKernel(f, block_size)


def device(fn: Callable[..., Any]) -> DeviceFunction:
    """Mark a helper that kernels can call; it is inlined at each call."""
    return DeviceFunction(fn)
