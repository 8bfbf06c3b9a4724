"""The matmul kernel builder: one ``kernel.matmul`` op in a ``kernel.func``, compiled with the
pipeline of a config (tile-matmul -> promote-to-shared -> pipeline-cp-async ->
lower-to-mma-sync -> lower-to-ptx; f32 inputs skip lower-to-mma-sync and get SIMT FMAs).

A ``MatmulKernel`` is one specialization (dtypes, row alignments, config). It speaks the same
protocol as a ``@kaio.gpu_kernel`` (``build``, ``source_key``, ``default_pipeline``, ``params``),
so ``kaio.compile`` and the runtime's launcher take it as they take a Python kernel.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects.builtin import ModuleOp

from kaio import __version__, dtypes
from kaio.compiled import BuiltKernel, KernelParam
from kaio.dialects import kernel
from kaio.frontend.kernel import ParamKind, ParamSpec
from kaio.ops_library.matmul_config import MatmulConfig
from kaio.pipeline import Pipeline

INPUT_TYPES = (dtypes.f16, dtypes.bf16, dtypes.f32)
OUTPUT_TYPES = (dtypes.f32, dtypes.f16, dtypes.bf16)


def row_alignment(leading_dim: int, address: int, elem_bytes: int) -> int:
    """Largest power of two (elements, at most 16 bytes) every row start is a multiple of."""
    align = 16 // elem_bytes
    while align > 1 and (leading_dim % align or address % (align * elem_bytes)):
        align //= 2
    return align


@dataclass(frozen=True)
class MatmulKernel:
    """One specialization of the matmul kernel: dtypes, row alignments and config."""

    in_dtype: dtypes.ScalarType
    out_dtype: dtypes.ScalarType
    align: tuple[int, int, int]
    config: MatmulConfig

    @property
    def name(self) -> str:
        return f"matmul_{self.in_dtype.name}_{self.out_dtype.name}"

    @property
    def runtime_params(self) -> tuple[KernelParam, ...]:
        t, o = self.in_dtype, self.out_dtype
        return (
            KernelParam("a", t, True, False),
            KernelParam("b", t, True, False),
            KernelParam("c", o, True, True),
            KernelParam("m", dtypes.i32, False),
            KernelParam("n", dtypes.i32, False),
            KernelParam("k", dtypes.i32, False),
            KernelParam("alpha", dtypes.f32, False),
            KernelParam("beta", dtypes.f32, False),
        )

    def build(self, constexprs: dict[str, Any]) -> BuiltKernel:
        t, o = self.in_dtype.ir_type, self.out_dtype.ir_type
        i32, f32 = dtypes.i32.ir_type, dtypes.f32.ir_type
        types = [kernel.ArrayType(t, False), kernel.ArrayType(t, False), kernel.ArrayType(o, True), i32, i32, i32, f32, f32]
        names = [p.name for p in self.runtime_params]
        func = kernel.KernelFuncOp(self.name, types, names, (self.config.threads, 1, 1))
        b = Builder(InsertPoint.at_end(func.body.block))
        b.insert(kernel.MatmulOp(*func.body.block.args, align=self.align))
        b.insert(kernel.ReturnOp())
        return BuiltKernel(ModuleOp([func]), self.runtime_params, {})

    @property
    def params(self) -> tuple[ParamSpec, ...]:
        """The launch signature (all runtime parameters; no constexprs)."""
        return tuple(
            ParamSpec(p.name, ParamKind.ARRAY if p.is_array else ParamKind.SCALAR, p.dtype)
            for p in self.runtime_params
        )

    def default_pipeline(self, arch: str) -> Pipeline:
        return self.config.pipeline(arch)

    def source_key(self) -> str:
        text = f"{__version__}|{self.name}|{self.align}|{self.config.key()}"
        return hashlib.sha256(text.encode()).hexdigest()

