"""``kaio-aot``: :func:`kaio.aot.export` from the command line.

    kaio-aot MODULE:KERNEL --arch sm_80 --arch sm_90a --constexpr BLOCK=128 --out DIR
    kaio-aot kaio.ops_library:matmul --arch sm_80 --arch sm_90a --out DIR --rust
    kaio-aot examples/saxpy.py:saxpy --grid "cdiv(n, 256)" --out DIR

``MODULE`` is an importable module or a ``.py`` file; ``KERNEL`` a ``@kaio.gpu_kernel``, a
``@kaio.tile_kernel`` or a library op in it. ``--constexpr NAME=VALUE`` values are Python
literals (``128``, ``True``, ``"relu"``); ``--fact NAME=N`` adds a divisibility/alignment fact
of one specialization. Prints the files written; an error is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kaio.errors import KaioTypeError


def _pair(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise KaioTypeError(f"{what} must be NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string (an activation name, a dtype)


def load_kernel(spec: str) -> Any:
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise KaioTypeError(f"expected MODULE:KERNEL, got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise KaioTypeError(f"MODULE: no file {module_name!r}")
        loader_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert loader_spec is not None and loader_spec.loader is not None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[path.stem] = module
        loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise KaioTypeError(f"MODULE: cannot import {module_name!r}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise KaioTypeError(f"KERNEL: {module_name} has no {attr!r}") from None


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="kaio-aot", description="export a kaio kernel as PTX/cubin and a C launcher")
    parser.add_argument("kernel", help="MODULE:KERNEL (an importable module or a .py file)")
    parser.add_argument("--arch", action="append", help="an arch to compile for (repeat; default sm_80)")
    parser.add_argument("--constexpr", action="append", default=[], help="NAME=VALUE (repeat)")
    parser.add_argument("--fact", action="append", default=[], help="NAME=N: N divides the argument (repeat)")
    parser.add_argument("--grid", action="append", help="a grid dimension's expression (repeat for y, z)")
    parser.add_argument("--name", help="the export's C name (default: the kernel's)")
    parser.add_argument("--out", required=True, help="the folder to write")
    parser.add_argument("--no-cubin", action="store_true", help="PTX only, even where a ptxas is installed")
    parser.add_argument("--rust", action="store_true", help="also write NAME.rs")
    parser.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")
    options = parser.parse_args(args)
    try:
        from kaio.aot import export

        constexprs = {name: _literal(value) for name, value in (_pair(c, "--constexpr") for c in options.constexpr)}
        facts = []
        for text in options.fact:
            name, value = _pair(text, "--fact")
            if not value.isdigit():
                raise KaioTypeError(f"--fact {text!r}: N must be a positive integer")
            facts.append((name, int(value)))
        files = export(load_kernel(options.kernel), options.out, arch=tuple(options.arch or ("sm_80",)),
                       constexprs=constexprs or None, specialization=facts or None, name=options.name,
                       grid=options.grid, cubin=False if options.no_cubin else None, rust=options.rust)  # fmt: skip
    except Exception as e:
        if options.traceback:
            raise
        message = " ".join(str(e).split())
        sys.stderr.write(f"kaio-aot: error: {type(e).__name__}: {message}\n")
        raise SystemExit(1) from None
    for path in files:
        print(path)


if __name__ == "__main__":
    main()
