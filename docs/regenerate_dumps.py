"""Fill the IR dumps of ``docs/dialect_stack.md``, ``docs/tile_language.md``,
``docs/attention.md`` and ``docs/quantization.md`` from real compiles.

    python docs/regenerate_dumps.py          # rewrite the dumps in place
    python docs/regenerate_dumps.py --check  # exit 1 if a doc is out of date (a test runs this)

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
DOCS = (
    ROOT / "docs" / "dialect_stack.md",
    ROOT / "docs" / "tile_language.md",
    ROOT / "docs" / "attention.md",
    ROOT / "docs" / "quantization.md",
)
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


@cache
def hopper_matmul_stages() -> dict[str, str]:
    """The f16 matmul with the default sm_90a config (wgmma), as ``matmul`` picks it there."""
    import kaio
    from kaio import dtypes
    from kaio.ops_library.matmul_config import default_config
    from kaio.ops_library.matmul_kernel import MatmulKernel

    kernel = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), default_config(True, (8, 8, 8), 2, arch="sm_90a"))
    stages = dict(kaio.compile(kernel, "sm_90a").stages)
    # one pass a line, as the pipeline string writes each (unset options left out)
    stages["pipeline"] = ",\n".join(str(kaio.Pipeline([p])) for p in kernel.default_pipeline("sm_90a").passes)
    return stages


def short_registers(text: str) -> str:
    """wgmma's 64-register accumulator lists, first and last register only."""
    return re.sub(r"\{(%f\d+), [^}]*, (%f\d+)\}", r"{\1, ..., \2}", text)


DIVISIBLE = (("m", 16), ("n", 16), ("k", 16))  # what a launch with multiples of 16 specializes on


@cache
def tile_matmul_stages() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "examples"))
    import tile_matmul_bias_gelu

    import kaio

    return kaio.compile(tile_matmul_bias_gelu.matmul_bias_gelu, "sm_80", __divisible__=DIVISIBLE).stages


@cache
def attention_stages() -> dict[str, str]:
    """The bf16 causal kernel for head dim 64, as a launch with 1024 queries compiles it."""
    import kaio
    from kaio import dtypes
    from kaio.ops_library.attention import choose_config, configured_kernel

    config = choose_config(1024, 64)
    kernel = configured_kernel(dtypes.bf16, config)
    meta = {"BM": config.block_m, "BN": config.block_n, "BD": 64, "CAUSAL": True, "HAS_LENS": False}
    return kaio.compile(kernel, "sm_80", __divisible__=(("D", 16), ("DV", 16)), **meta).stages


@cache
def w4a16_stages() -> dict[str, str]:
    """The GPTQ int4 decode tile (16 rows of x, 64 columns of W, 128 rows of K per step) with
    zero points, as ``w4a16_matmul`` launches it for M = 1 on sm_80."""
    import kaio
    from kaio import dtypes
    from kaio.ops_library.w4a16_matmul import w4a16_tile_kernel

    kernel = w4a16_tile_kernel(dtypes.f16, dtypes.f16, dtypes.f16)
    meta = {"BM": 16, "BN": 64, "BK": 128, "HAS_ZEROS": True, "SCALES_IN_T": True}
    return kaio.compile(kernel, "sm_80", __divisible__=(*DIVISIBLE, ("group", 16)), **meta).stages


def pieces(text: str, *parts: tuple[str, int]) -> str:
    """Several excerpts of one stage in order, without source locations: for each
    ``(start, lines)``, ``lines`` lines from the first line after the previous excerpt that
    contains ``start``, each followed by an elision mark."""
    no_locs = re.sub(r' loc\((?:"[^"]*":\d+:\d+|unknown)\)', "", text)
    all_lines = [line for line in no_locs.splitlines() if "kernel.loc " not in line]
    out, at = ["..."], 0
    for start, lines in parts:
        first = next(i for i in range(at, len(all_lines)) if start in all_lines[i])
        out += [*all_lines[first : first + lines], "..."]
        at = first + lines
    return "\n".join(out)


def excerpt(text: str, start: str, lines: int) -> str:
    """``lines`` lines from the first one containing ``start``, with an elision mark."""
    all_lines = text.splitlines()
    first = next(i for i, line in enumerate(all_lines) if start in line)
    return "\n".join(["...", *all_lines[first : first + lines], "..."])


DUMPS: dict[str, Callable[[], str]] = {
    "saxpy/frontend": lambda: saxpy_stages()["frontend"],
    "saxpy/cse": lambda: saxpy_stages()["cse"],
    "saxpy/lower-to-ptx": lambda: saxpy_stages()["lower-to-ptx"],
    "saxpy/ptx-optimize": lambda: saxpy_stages()["ptx-optimize"],
    "saxpy/ptx": lambda: saxpy_stages()["ptx"],
    "matmul/frontend": lambda: excerpt(matmul_stages()["frontend"], "acc = kt.zeros", 34),
    "matmul/tile-layout": lambda: excerpt(matmul_stages()["tile-layout"], "= scf.for", 24),
    "matmul/promote-to-shared": lambda: excerpt(matmul_stages()["promote-to-shared"], "= scf.for", 14),
    "matmul/pipeline-cp-async": lambda: excerpt(matmul_stages()["pipeline-cp-async"], "= scf.for", 40),
    "matmul/lower-to-mma-sync": lambda: excerpt(matmul_stages()["lower-to-mma-sync"], "cpasync.wait 1", 24),
    "matmul/ptx": lambda: excerpt(matmul_stages()["ptx"], "cp.async.wait_group 1", 30),
    "tile-matmul/frontend": lambda: excerpt(tile_matmul_stages()["frontend"], "= tile.multiple_of", 50),
    "tile-matmul/fuse-tile-maps": lambda: excerpt(tile_matmul_stages()["fuse-tile-maps"], "line 43", 30),
    "tile-matmul/tile-layout": lambda: excerpt(tile_matmul_stages()["tile-layout"], "= tile.splat", 30),
    "tile-matmul/promote-to-shared": lambda: excerpt(tile_matmul_stages()["promote-to-shared"], "= scf.for", 13),
    "tile-matmul/pipeline-cp-async": lambda: excerpt(tile_matmul_stages()["pipeline-cp-async"], "= scf.for", 36),
    "tile-matmul/lower-to-mma-sync": lambda: excerpt(tile_matmul_stages()["lower-to-mma-sync"], "= kernel.warp_id", 46),
    "tile-matmul/ptx": lambda: excerpt(tile_matmul_stages()["ptx"], "cp.async.wait_group 0", 68),
    "attention/frontend": lambda: excerpt(attention_stages()["frontend"], "\"for j in range(start, stop, step):\"", 60),
    "attention/tile-layout": lambda: excerpt(attention_stages()["tile-layout"], "= scf.for", 40),
    "attention/promote-to-shared": lambda: excerpt(attention_stages()["promote-to-shared"], "= scf.for", 30),
    "hopper-matmul/pipeline": lambda: hopper_matmul_stages()["pipeline"],
    "hopper-matmul/lower-to-wgmma": lambda: excerpt(hopper_matmul_stages()["lower-to-wgmma"], "= wgmma.warpgroup_id", 25),
    "hopper-matmul/after-loop": lambda: excerpt(hopper_matmul_stages()["lower-to-wgmma"], "scf.yield", 5),
    "hopper-matmul/ptx": lambda: short_registers(excerpt(hopper_matmul_stages()["ptx"], "wgmma.fence.sync.aligned", 15)),
    "hopper-matmul/pipeline-tma": lambda: excerpt(hopper_matmul_stages()["pipeline-tma"], "= scf.for", 48),
    "hopper-matmul/tma/ptx": lambda: excerpt(hopper_matmul_stages()["ptx"], "mbarrier.arrive.expect_tx", 6),
    "hopper-matmul/store-tma": lambda: excerpt(hopper_matmul_stages()["store-tma"], '"tma_store"', 18),
    "attention/lower-to-mma-sync": lambda: excerpt(attention_stages()["lower-to-mma-sync"], "mma.split", 14),
    "attention/pack-a": lambda: excerpt(attention_stages()["lower-to-mma-sync"], "= mma.pack_a", 8),
    "w4a16/fuse-tile-maps": lambda: pieces(
        w4a16_stages()["fuse-tile-maps"],
        ("tile.view %1[", 2),
        ("tile.gather %2[", 1),
        ("tile.gather %3[", 1),
        ("tensor<16x64xi32>, tensor<16x64xi32>, tensor<16x64xf16> -> tensor<16x64xf16> {", 9),
        ("tile.gather %0[", 2),
    ),
    "w4a16/promote-to-shared": lambda: pieces(
        w4a16_stages()["promote-to-shared"],
        ("smem.alloc", 2),
        ("smem.store", 4),
    ),
    "w4a16/lower-to-mma-sync": lambda: pieces(
        w4a16_stages()["lower-to-mma-sync"],
        ("mma.load_a", 1),
        ("mma.load_b", 3),
    ),
    "w4a16/ptx": lambda: pieces(
        w4a16_stages()["ptx"],
        ("ld.global.v4.u32", 5),
        ("// scale = kt.load(scales", 5),
        ("ld.global.b16", 2),
        (", 15;", 11),
        ("ldmatrix.sync", 1),
        ("ldmatrix.sync.aligned.m8n8.x4.trans", 3),
    ),
}


def render(name: str) -> str:
    text = DUMPS[name]().rstrip()
    text = text.replace(str(ROOT) + "/", "")
    fence = "text" if name.endswith(("/ptx", "/pipeline")) else "mlir"
    return f"```{fence}\n{text}\n```\n"


def regenerate(doc: str) -> str:
    return MARKER.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), doc)


def main() -> int:
    stale = []
    for doc in DOCS:
        current = doc.read_text()
        fresh = regenerate(current)
        if fresh == current:
            continue
        stale.append(doc.relative_to(ROOT).as_posix())
        if "--check" not in sys.argv:
            doc.write_text(fresh)
    if stale and "--check" in sys.argv:
        print(f"{', '.join(stale)} out of date: run python docs/regenerate_dumps.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
