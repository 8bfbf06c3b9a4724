"""Fill the IR dumps of ``docs/dialect_stack.md`` from a real compile.

    python docs/regenerate_dumps.py          # rewrite the dumps in place
    python docs/regenerate_dumps.py --check  # exit 1 if the doc is out of date (a test runs this)

A dump is the text between ``<!-- dump: NAME -->`` and ``<!-- end dump -->``; NAME says which
compile and stage (see DUMPS). Absolute paths are written relative to the repository.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "dialect_stack.md"
MARKER = re.compile(r"(<!-- dump: (?P<name>[\w./-]+) -->\n)(?P<body>.*?)(<!-- end dump -->)", re.S)


@cache
def saxpy_stages() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "examples"))
    import acceptance_kernels

    import kaio

    return kaio.compile(acceptance_kernels.saxpy, "sm_80").stages


@cache
def matmul_stages() -> dict[str, str]:
    import kaio
    from kaio import dtypes
    from kaio.ops_library.matmul_kernel import MatmulKernel
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG

    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG)
    return kaio.compile(kernel, "sm_80").stages


def excerpt(text: str, start: str, lines: int) -> str:
    """``lines`` lines from the first one containing ``start``, with an elision mark."""
    all_lines = text.splitlines()
    first = next(i for i, line in enumerate(all_lines) if start in line)
    return "\n".join(["...", *all_lines[first : first + lines], "..."])


DUMPS: dict[str, Callable[[], str]] = {
    "saxpy/frontend": lambda: saxpy_stages()["frontend"],
    "saxpy/cse": lambda: saxpy_stages()["cse"],
    "saxpy/lower-to-ptx": lambda: saxpy_stages()["lower-to-ptx"],
    "saxpy/ptx": lambda: saxpy_stages()["ptx"],
    "matmul/frontend": lambda: excerpt(matmul_stages()["frontend"], "acc = kt.zeros", 34),
    "matmul/tile-layout": lambda: excerpt(matmul_stages()["tile-layout"], "= scf.for", 24),
    "matmul/promote-to-shared": lambda: excerpt(matmul_stages()["promote-to-shared"], "= scf.for", 14),
    "matmul/pipeline-cp-async": lambda: excerpt(matmul_stages()["pipeline-cp-async"], "= scf.for", 40),
    "matmul/lower-to-mma-sync": lambda: excerpt(matmul_stages()["lower-to-mma-sync"], "cpasync.wait 1", 24),
    "matmul/ptx": lambda: excerpt(matmul_stages()["ptx"], "cp.async.wait_group 1", 30),
}


def render(name: str) -> str:
    text = DUMPS[name]().rstrip()
    text = text.replace(str(ROOT) + "/", "")
    fence = "text" if name.endswith("/ptx") else "mlir"
    return f"```{fence}\n{text}\n```\n"


def regenerate(doc: str) -> str:
    return MARKER.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), doc)


def main() -> int:
    current = DOC.read_text()
    fresh = regenerate(current)
    if "--check" in sys.argv:
        if fresh != current:
            print("docs/dialect_stack.md is out of date: run python docs/regenerate_dumps.py")
            return 1
        return 0
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
