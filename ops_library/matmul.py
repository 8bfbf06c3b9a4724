"""``kaio.ops_library.matmul``: ``C = alpha * A @ B + beta * C`` on tensor cores.

    from kaio.ops_library import matmul
    c = matmul(a, b)                        # A (MxK) @ B (KxN), f16/bf16 in, f32 out
    matmul(a, b, out=c16)                   # output in the input type (f16 or bf16)
    matmul(a, b, out=c, alpha=2.0, beta=1.0)
    matmul(a, b, bias=bias, activation="gelu")   # fused epilogue: act(A @ B + bias)
    print(matmul.pipeline())                # the pass pipeline of the default config

The kernel is a tile kernel (``kaio.ops_library.matmul_kernel``): one screen of ``kaio.tile``
code that the tile stack stages through shared memory, pipelines with cp.async and lowers to
``ldmatrix``/``mma.sync``, or on an sm_90a device (a config of ``WGMMA_CONFIGS``) to Hopper's
warpgroup ``wgmma``. ``bias`` (N,) is added to every row; ``activation`` is ``"relu"``,
``"gelu"`` (tanh form) or ``"silu"``, applied after ``alpha``, ``beta`` and the bias.

A and B are row-major device arrays (kaio buffers, ``__cuda_array_interface__`` or DLPack
objects) or numpy arrays (bf16 as ``ml_dtypes.bfloat16``: copied to the device, the result comes
back as numpy). f16 and bf16 inputs run on tensor cores with f32 accumulation; f32 inputs run
the SIMT variant (same tiling and shared-memory passes, FMAs instead of mma.sync). Any M, N, K
work: edge tiles are masked and zero-filled. When C has too few tiles to fill the GPU and K is
deep (skinny or small problems), K is split across programs whose f32 partial sums a second
kernel adds in a fixed order (split-K: deterministic, no atomics). Rows whose length (K for A, N for B and C) or base
address is not a multiple of 16 bytes get narrower copies (and a config suited to them).

``config``: None (the default for the dtypes and alignment), ``"auto"`` (on a GPU: time the
candidates once per GPU, dtypes and shape bucket, and remember the winner on disk; on the
simulator: a static cost model, nothing is timed), or a :class:`MatmulConfig`.
"""

from __future__ import annotations

import math
import sys
from functools import lru_cache
from typing import Any

import numpy as np

from kaio import dtypes
from kaio.aot.c_expressions import evaluate
from kaio.errors import KaioTypeError
from kaio.ops_library.autograd import device_label, kaio_ops, needs_grad, refuse_grad, route
from kaio.ops_library.matmul_config import (
    GpuModel,
    MatmulConfig,
    choose_config,
    default_config,
    split_k_for,
)
from kaio.ops_library.matmul_kernel import (
    ACTIVATIONS,
    INPUT_TYPES,
    MatmulKernel,
    base_alignment,
    row_alignment,
)
from kaio.ops_library.operands import Operand as _Operand
from kaio.ops_library.operands import Operands
from kaio.pipeline import Pipeline

_TILES = "cdiv(m, BM) * cdiv(n, BN)"  # C tiles: MatmulKernel.grid_rule of a plain kernel


def _check(a: _Operand, b: _Operand, out: _Operand | None, acc: Any) -> tuple[int, int, int]:
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise KaioTypeError(f"matmul takes 2-D A and B, got shapes {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise KaioTypeError(f"matmul: A is {m}x{k} but B is {k2}x{n}: the inner sizes differ")
    if a.dtype not in INPUT_TYPES or a.dtype != b.dtype:
        raise KaioTypeError(
            f"matmul takes A and B of one type among f16, bf16, f32; got {a.dtype.name} and {b.dtype.name}"
        )
    if acc not in (None, dtypes.f32, np.float32, "f32"):
        raise KaioTypeError(f"matmul accumulates in f32; acc={acc!r} is not supported")
    if out is not None:
        if out.shape != (m, n):
            raise KaioTypeError(f"matmul: out must have shape ({m}, {n}), got {out.shape}")
        if out.dtype not in (dtypes.f32, a.dtype):
            raise KaioTypeError(f"matmul: out must be f32 or {a.dtype.name} (the input type), got {out.dtype.name}")
    if any(size >= 2**31 for size in (m, n, k)):  # no max(): compiled, it would guard on their order
        raise KaioTypeError("matmul: sizes must be below 2**31")
    for name, source in (("a", a), ("b", b)):
        if out is not None and _overlaps(out, source):
            raise KaioTypeError(
                f"matmul: `out` overlaps `{name}`: the kernel would read what it already wrote; "
                "pass a separate output array"
            )
    return m, n, k


def _check_epilogue(a: _Operand, bias: _Operand | None, n: int, activation: Any) -> None:
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(k) for k in ACTIVATIONS)
        raise KaioTypeError(f"matmul: activation must be one of {names}, got {activation!r}")
    if bias is not None:
        if bias.shape != (n,):
            raise KaioTypeError(f"matmul: bias must have shape ({n},), got {bias.shape}")
        if bias.dtype not in (dtypes.f32, a.dtype):
            raise KaioTypeError(f"matmul: bias must be f32 or {a.dtype.name} (the input type), got {bias.dtype.name}")


def _overlaps(x: _Operand, y: _Operand) -> bool:
    """Whether two operands share memory: host arrays by numpy, device arrays by address range."""
    if x.host is not None or y.host is not None:
        return x.host is not None and y.host is not None and bool(np.may_share_memory(x.host, y.host))
    x_end = x.ptr + math.prod(x.shape) * x.dtype.nbytes
    y_end = y.ptr + math.prod(y.shape) * y.dtype.nbytes
    return x.ptr < y_end and y.ptr < x_end


def launch(kernel: MatmulKernel, a: Any, b: Any, c: Any, bias: Any, m: int, n: int, k: int,
           alpha: float, beta: float, dev: Any) -> None:  # fmt: skip
    """One launch of a specialization (a program per C tile: the rule of the plain kernel,
    which split-K and persistent kernels share)."""
    bm, bn, _ = kernel.config.block
    tiles = evaluate(_TILES, {"m": m, "n": n, "BM": bm, "BN": bn})
    kernel.launch(tiles, (a, b, c, c if bias is None else bias, m, n, k, alpha, beta), dev)


class Matmul:
    """The matmul op: call it, or ask for its pipeline and kernels."""

    def __call__(
        self, a: Any, b: Any, out: Any = None, *, acc: Any = None, alpha: float = 1.0,
        beta: float = 0.0, bias: Any = None, activation: str | None = None,
        config: MatmulConfig | str | None = None, device: Any = None,
    ) -> Any:  # fmt: skip
        if acc is None and not isinstance(config, MatmulConfig) and _torch_op(a, b, out, bias):
            # torch tensors go through the registered custom ops, so torch.compile sees one op
            # (torch.ops.kaio.matmul or matmul_out) instead of tracing into kaio.
            kw = dict(alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)
            if out is None:
                return matmul_op(a, b, **kw)
            return matmul_out_op(a, b, out, **kw)
        refuse_grad("matmul", a, b, out, bias, why="a MatmulConfig object or acc= runs the kernel directly, "
                    "outside the torch custom op; leave config=None")  # fmt: skip
        return self.run(a, b, out, acc=acc, alpha=alpha, beta=beta, bias=bias, activation=activation,
                        config=config, device=device)  # fmt: skip

    def run(
        self, a: Any, b: Any, out: Any = None, *, acc: Any = None, alpha: float = 1.0,
        beta: float = 0.0, bias: Any = None, activation: str | None = None,
        config: MatmulConfig | str | None = None, device: Any = None,
    ) -> Any:  # fmt: skip
        """The op itself, without the torch custom-op routing of ``__call__``."""
        ops = Operands("matmul", a, b, out, bias, device=device)
        dev = ops.device
        oa, ob = ops.take("a", a), ops.take("b", b)
        oc = ops.take("out", out) if out is not None else None
        obias = ops.take("bias", bias) if bias is not None else None
        m, n, k = _check(oa, ob, oc, acc)
        _check_epilogue(oa, obias, n, activation)
        if oc is None:
            oc = ops.output((m, n), dtypes.f32)
        if m == 0 or n == 0:
            return ops.result(oc, out)
        kernel = self.kernel(oa, ob, oc, m, n, k, config, dev, obias, activation, (alpha != 1.0, beta != 0.0))
        launch(kernel, oa.value, ob.value, oc.value, obias.value if obias else None, m, n, k, alpha, beta, dev)
        return ops.result(oc, out)

    def kernel(self, a: _Operand, b: _Operand, c: _Operand, m: int, n: int, k: int,
               config: MatmulConfig | str | None, dev: Any, bias: _Operand | None = None,
               activation: str | None = None, alpha_beta: tuple[bool, bool] = (True, True)) -> MatmulKernel:  # fmt: skip
        """The specialization a call runs: dtypes, base alignments, chosen config, epilogue (and
        its terms: ``alpha_beta``, whether the call scales and reads C)."""
        eb = a.dtype.nbytes
        align = (
            row_alignment(k, a.ptr, eb),
            row_alignment(n, b.ptr, eb),
            min(row_alignment(n, c.ptr, c.dtype.nbytes), 2),
        )
        bases = (base_alignment(a.ptr), base_alignment(b.ptr), base_alignment(c.ptr))
        bias_type = bias.dtype if bias else None
        if config == "auto":
            chosen = self._auto(a, b, c, m, n, k, align, a.dtype != dtypes.f32, dev)
            return MatmulKernel(a.dtype, c.dtype, bases, chosen, bias_type, activation, alpha_beta=alpha_beta)
        if not (config is None or isinstance(config, MatmulConfig)):
            raise KaioTypeError(f"matmul: config is None, 'auto' or a MatmulConfig, not {config!r}")
        return _specialization(dev, a.dtype, c.dtype, bias_type, activation, align, bases, m, n, k, config, alpha_beta)

    def _auto(self, a: _Operand, b: _Operand, c: _Operand, m: int, n: int, k: int,
              align: tuple[int, int, int], tensor_cores: bool, dev: Any) -> MatmulConfig:  # fmt: skip
        eb = a.dtype.nbytes
        if dev.is_simulator:
            model = GpuModel(sms=dev.sm_count)
            return choose_config(m, n, k, eb, tensor_cores, align, model, arch=dev.compile_arch,
                                 shared_limit=dev.shared_memory_per_block_optin)  # fmt: skip
        from kaio.ops_library.matmul_autotune import autotune

        return autotune(launch, a, b, m, n, k, c.dtype, align, tensor_cores, dev)

    def aot_kernel(self, arch: str, dtype: Any = "f16", out_dtype: Any = "f32", config: MatmulConfig | None = None,
                   bias: Any = None, activation: str | None = None) -> MatmulKernel:  # fmt: skip
        """The kernel :func:`kaio.aot.export` ships for ``arch``: 16-byte aligned operands, rows
        a multiple of 16 elements (m, n, k % 16 == 0: the C dispatcher checks), ``config`` or
        the default tensor-core config of ``arch``, no split-K (a C launch is one kernel)."""
        def scalar(value: Any, what: str) -> dtypes.ScalarType:
            t = value if isinstance(value, dtypes.ScalarType) else dtypes.BY_NAME.get(str(value))
            if t is None:
                raise KaioTypeError(f"matmul.aot_kernel: `{what}` must be a kaio type name, got {value!r}")
            return t

        in_type, out_type = scalar(dtype, "dtype"), scalar(out_dtype, "out_dtype")
        bias_type = None if bias is None else scalar(bias, "bias")
        if in_type not in INPUT_TYPES or out_type not in (dtypes.f32, in_type):
            raise KaioTypeError(f"matmul.aot_kernel: inputs f16, bf16 or f32 and out f32 or the input type; got "
                                f"{in_type.name} -> {out_type.name}")  # fmt: skip
        if activation not in ACTIVATIONS:
            raise KaioTypeError(f"matmul.aot_kernel: activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
        if config is None:
            config = default_config(in_type != dtypes.f32, (8, 8, 2) if in_type.nbytes == 2 else (4, 4, 4),
                                    in_type.nbytes, arch=arch)  # fmt: skip
        return MatmulKernel(in_type, out_type, (16, 16, 16), config, bias_type, activation)

    def pipeline(self, config: MatmulConfig | None = None, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline of ``config`` (default: the f16/bf16 tensor-core default of ``arch``)."""
        return (config or default_config(True, (8, 8, 2), 2, arch=arch)).pipeline(arch)

    def __repr__(self) -> str:
        return "<kaio.ops_library.matmul>"


@lru_cache(maxsize=4096)
def _specialization(dev: Any, in_type: dtypes.ScalarType, out_type: dtypes.ScalarType, bias_type: Any,
                    activation: str | None, align: tuple[int, int, int], bases: tuple[int, int, int],
                    m: int, n: int, k: int, config: MatmulConfig | None,
                    alpha_beta: tuple[bool, bool]) -> MatmulKernel:  # fmt: skip
    """The kernel of a call with these facts and the caller's config (None: the default for
    them). A pure function of its arguments, remembered: choosing a config builds and checks
    candidate configs, tens of microseconds that every call of a shape would pay again."""
    if config is None:
        eb, tensor_cores = in_type.nbytes, in_type != dtypes.f32
        config = default_config(tensor_cores, align, eb, arch=dev.compile_arch, shared_limit=dev.shared_memory_per_block_optin)
        config = config.with_split_k(split_k_for(config, m, n, k, dev.sm_count))
    return MatmulKernel(in_type, out_type, bases, config, bias_type, activation, alpha_beta=alpha_beta)


def _torch_op(a: Any, b: Any, out: Any, bias: Any = None) -> bool:
    """Whether a call goes through the torch custom ops: A, B (``out``, ``bias``) are torch
    tensors. torch is never imported here: whoever holds a tensor imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor = torch.Tensor
    optional = all(v is None or isinstance(v, tensor) for v in (out, bias))
    return isinstance(a, tensor) and isinstance(b, tensor) and optional


def matmul_op(
    a: Any, b: Any, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
    activation: str | None = None, config: Any = None, device: Any = None,
) -> Any:  # fmt: skip
    """``matmul(a, b)`` for torch tensors: ``torch.ops.kaio.matmul`` (f32 result allocated by
    torch on the inputs' device). ``device=`` with tensors that require grad, or traced by
    ``torch.compile``: the custom op on that device, its backward too
    (``kaio.ops_library.autograd``); eager without grad, the op directly."""
    ops = route((a, b, bias), device)
    if ops is None:  # device= in eager mode without grad: run the op directly
        return matmul.run(a, b, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)
    return ops.matmul(a, b, float(alpha), float(beta), config, bias, activation)


def matmul_out_op(
    a: Any, b: Any, out: Any, *, alpha: float = 1.0, beta: float = 0.0,
    bias: Any = None, activation: str | None = None, config: Any = None, device: Any = None,
) -> Any:  # fmt: skip
    """``matmul(a, b, out=c)`` for torch tensors: ``torch.ops.kaio.matmul_out`` (writes
    ``out``, returns it; ``device=`` carried as the matmul op's). Tensors that require grad are
    refused: an op writing ``out`` records no gradient (torch refuses ``out=`` with autograd
    too)."""
    if needs_grad(a, b, out, bias):
        raise KaioTypeError(
            "matmul: `out=` records no gradient and an input requires grad; call matmul(a, b) "
            "without out= (or under torch.no_grad())"
        )
    if device is not None and not sys.modules["torch"].compiler.is_compiling():  # eager: the op directly
        return matmul.run(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation, config=config, device=device)
    kaio_ops().matmul_out(a, b, out, float(alpha), float(beta), config, bias, activation, device=device_label(device))
    return out


# help(matmul) shows the class's doc, so the class carries the user-facing one (the module's)
Matmul.__doc__ = f"""{__doc__}
``acc``: the accumulation type; f32 (also the default, None) is the only one supported.
``matmul.run(...)`` is the op without the torch custom-op routing; ``matmul.pipeline(config,
arch)`` the pass pipeline of a config.
"""

matmul = Matmul()
