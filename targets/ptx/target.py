"""The ``ptx`` output target of ``kaio-opt`` / ``xdsl-opt``: ``-t ptx{arch=sm_90 comments=false}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from kaio.targets.ptx.printer import print_ptx


@dataclass(frozen=True)
class PtxTarget(Target):
    name = "ptx"

    arch: str | None = None  # None: the module's kaio.target (else sm_80)
    comments: bool = True  # the "// file.py:line" lines mapping PTX back to Python

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(print_ptx(module, self.arch, self.comments))
