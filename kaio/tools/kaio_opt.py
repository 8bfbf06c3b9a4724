"""``kaio-opt``: xDSL's optimizer driver with kaio's dialects, passes and ``ptx`` target.

    kaio-opt kernel.mlir -p "canonicalize,cse,lower-to-ptx" -t ptx

An error in the input (a missing or binary file, a malformed or unknown pass, IR that does not
parse or verify, a float literal that overflows, a module not lowered to PTX given to ``-t
ptx``) is one line on stderr and exit status 1 (:mod:`kaio.tools.opt_errors`); ``--traceback``
prints the Python traceback instead, for a bug report.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.arg_spec import parse_spec
from xdsl.utils.exceptions import ArgSpecParseError, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from kaio.tools.opt_errors import (
    OptInputError,
    check_float_literals,
    one_line,
    pipeline_message,
)
from kaio.dialect_registry import registered_dialects
from kaio.positioned_parser import PositionedParser
from kaio.pass_registry import registered_passes
from kaio.universe import KAIO_UNIVERSE


class KaioOptMain(xDSLOptMain):
    where = "reading the input"  # what the tool is doing, for errors without a position

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        # kaio's, then those registered in this process (kaio.register_dialect)
        for name, factory in {**KAIO_UNIVERSE.all_dialects, **registered_dialects()}.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        # kaio's, then those registered in this process (kaio.register_pass)
        for name, factory in {**KAIO_UNIVERSE.all_passes, **registered_passes()}.items():
            if name not in self.available_passes:
                self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        for name, factory in KAIO_UNIVERSE.all_targets.items():
            self.available_targets.setdefault(name, factory)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--traceback",
            default=False,
            action="store_true",
            help="on an error, print the Python traceback (for a bug report) instead of one line",
        )

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["mlir"] = self._parse_mlir

    def _parse_mlir(self, io: IO[bytes]) -> ModuleOp:
        """xDSL's MLIR frontend, refusing what it would misread: bytes that are not UTF-8 (a
        UnicodeDecodeError deep in the parser) and float literals that overflow (read as inf)."""
        data, name = io.read(), self.get_input_name()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise OptInputError(
                f"{name}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
            ) from None
        parser = PositionedParser(self.ctx, text, name)
        try:
            module = parser.parse_module(not self.args.no_implicit_module)
        except VerifyException as e:  # an op built while parsing refused its operands
            raise ParseError(parser.op_start(), str(e)) from None
        check_float_literals(text, name)
        return module

    def setup_pipeline(self) -> None:
        spec = self.args.passes
        try:
            super().setup_pipeline()
        except (ArgSpecParseError, ValueError) as e:  # ArgSpecParseError is a BaseException
            raise OptInputError(pipeline_message(spec, e, self.available_passes)) from None
        verify = self.pipeline.callback

        def track(
            previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
        ) -> None:
            self.where = (
                f"verifying the IR after pass '{previous.name}'"
                if previous
                else "verifying the input"
            )
            if verify is not None:
                verify(previous, module, following)
            self.where = f"in pass '{following.name}'" if following else "after the passes"

        self.pipeline = PassPipeline(self.pipeline.passes, track)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        target = parse_spec(self.args.target).name
        self.where = f"target '{target}'"
        if target == "ptx":
            self._check_lowered(prog)
        return super().output_resulting_program(prog)

    def _check_lowered(self, prog: ModuleOp) -> None:
        """The ``ptx`` target prints only PTX ops: what is left unlowered would vanish from the
        output (a module never lowered printed a PTX file with no ``.entry``, exit status 0).
        Refused as ``kaio.compile`` refuses it."""
        from kaio.module_compiler import check_only_ptx
        from kaio.dialects import ptx

        check_only_ptx(prog, self.pipeline)
        if not any(isinstance(op, ptx.EntryOp) for op in prog.ops):
            raise OptInputError(
                "the module holds no ptx.entry: nothing to print as PTX "
                "(lower a kernel.func first: -p ...,lower-to-ptx)"
            )


def main(args: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if args is None else args)
    tool: KaioOptMain | None = None
    try:
        tool = KaioOptMain(description="kaio modular optimizer driver", args=argv)
        tool.run()
    except (Exception, ArgSpecParseError) as e:
        if "--traceback" in argv:
            raise
        where = tool.where if tool is not None else "reading the pass pipeline"
        sys.stderr.write(f"kaio-opt: error: {one_line(e, where)}\n")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
