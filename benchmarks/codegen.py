"""Generated code on a CPU: SASS per loop trip of kaio's library kernels beside Triton's.

Each kernel is compiled to PTX, assembled by the ptxas wheel (``-v``) and disassembled by
cuobjdump (``kaio.targets.ptx.sass``); the table gives registers, spills, shared memory (static
plus dynamic, bytes) and the static instruction counts of the main loop (the innermost loop
with the most MMAs; a kernel without loops: its whole body), per warp, by class:

    mma  tensor-core MMA (HMMA / HGMMA...)     ldsm  ldmatrix       cp/tma  LDGSTS or UTMALDG/STG
    gmem LDG/STG   smem LDS/STS   int  integer ALU (vector and uniform)   flt  float ALU
    cvt  conversions   mufu  special functions   shfl  shuffles   mov  moves, S2R, constants
    ctrl branches, BSSY/BSYNC, ELECT   bar  barriers, mbarrier (SYNCS), DEPBAR, MEMBAR
    tot  every instruction (R2UR and the rest included)

and one figure per kind of kernel:

- matmul: instructions per MMA of a K step (``tot / mma``);
- attention: instructions per score element: (a key block's instructions per warp x warps) /
  (BLOCK_M x BLOCK_N);
- row kernels (one row of 4096 per program, no loop): instructions per element: (instructions
  a thread executes, the whole straight-line body) x threads / elements of the row;
- cross-entropy with its gradient (rows of 32768 swept in column blocks, Liger-Kernel's kernel
  beside kaio's when ``liger-kernel`` is installed): instructions per logit: (one trip of each
  sweep, the loops computing exp, summed) x threads / columns per trip (each side's own).

The Triton side (benchmarks/triton_kernels.py, triton_tutorial.py) compiles the same tiles,
warps and stages for the same target when triton is installed, and goes through the same
ptxas. Counts are static: an instruction under a predicate counts once.

    python benchmarks/codegen.py                 # every case
    python benchmarks/codegen.py --only attention --only sm_90a   # cases whose name has both
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

COLUMNS = (("mma", ("mma",)), ("ldsm", ("ldsm",)), ("cp/tma", ("ldgsts", "tma")), ("gmem", ("global",)),
           ("smem", ("shared",)), ("int", ("integer",)), ("flt", ("float",)), ("cvt", ("convert",)),
           ("mufu", ("mufu",)), ("shfl", ("shuffle",)), ("mov", ("move",)), ("ctrl", ("control",)),
           ("bar", ("barrier",)), ("tot", ("total",)))  # fmt: skip


@dataclass(frozen=True)
class Built:
    """A compiled kernel: its PTX, entry name, warps per program and shared bytes at launch."""

    ptx: str
    name: str
    warps: int
    shared_bytes: int
    columns: int = 0  # a row kernel's columns per loop trip, where its own tiling picks them (0: the case's)


@dataclass(frozen=True)
class Case:
    name: str
    arch: str
    kaio: Callable[[], Built]
    triton: Callable[[], Built] | None
    unit: str  # "mma" | "score" | "element"
    tile: tuple[int, int] = (0, 0)  # (BLOCK_M, BLOCK_N) of a score tile; (elements, 0) of a row


# --- kaio's kernels ------------------------------------------------------------------------------


def _kaio_matmul(config: Any) -> Callable[[], Built]:
    def build() -> Built:
        from kaio.ops_library.matmul_kernel import MatmulKernel

        import kaio
        from kaio import dtypes

        kernel = MatmulKernel(dtypes.f16, dtypes.f16, (16, 16, 16), config, alpha_beta=(False, False),
                              divisible=launch_facts(m=4096, n=4096, k=4096))  # fmt: skip
        c = kaio.compile(kernel, config_arch(config))
        warps = config.warps[0] * config.warps[1] + (4 if config.warp_specialize else 0)
        return Built(c.ptx, c.name, warps, c.shared_bytes + c.dynamic_shared_bytes)

    return build


def launch_facts(**sizes: int) -> tuple[tuple[str, int], ...]:
    """The facts a launch with these integer arguments specializes on (``kaio.tile_kernel``:
    the largest power of two up to its cap dividing each), so a row is the kernel such a
    launch runs."""
    from kaio.frontend.tile_kernel import MAX_DIVISOR

    return tuple((name, min(v & -v, MAX_DIVISOR)) for name, v in sizes.items())


def config_arch(config: Any) -> str:
    return "sm_90a" if config.layout == "wgmma" else "sm_80"


def _document_mask(b, h, q_idx, kv_idx, docs):  # type: ignore[no-untyped-def]
    return docs[q_idx] == docs[kv_idx]


def _causal_mask(b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
    return kv_idx <= q_idx


def _kaio_attention(arch: str, d: int, config: Any, dropout: bool = False, mod: str | None = None) -> Callable[[], Built]:
    """The forward kernel; ``mod``: "causal", "window", "softcap", "document" (a mask_mod), or
    "block causal" / "block document" (those mask_mods through a block mask of the tiles)."""

    def build() -> Built:
        from kaio.ops_library.attention import configured_kernel
        from kaio.ops_library.attention_mods import mods_of

        import kaio
        from kaio import dtypes

        mask = {"document": _document_mask, "block document": _document_mask, "block causal": _causal_mask}.get(mod or "")
        mods = mods_of("attention", None, mask, (dtypes.i32,) if mask is _document_mask else ()) if mask else None
        kernel = configured_kernel(dtypes.f16, config, mods=mods)
        flags = {"causal": {"CAUSAL": True}, "window": {"WINDOW": True}, "softcap": {"SOFTCAP": True}}.get(mod or "", {})
        if mod and mod.startswith("block"):
            flags = {"BLOCK_MASK": True, "BQ_MASK": config.block_m, "BKV_MASK": config.block_n}
        c = kaio.compile(kernel, arch, BM=config.block_m, BN=config.block_n, BD=d, BDV=d, HAS_LENS=False,
                         DROPOUT=dropout, __divisible__=launch_facts(D=d, DV=d), **({"CAUSAL": False} | flags))  # fmt: skip
        return Built(c.ptx, c.name, config.warps, c.shared_bytes + c.dynamic_shared_bytes)

    return build


def _kaio_row(op: str, arch: str, cols: int) -> Callable[[], Built]:
    def build() -> Built:
        from kaio.ops_library import rows
        from kaio.ops_library.norms import layer_norm_kernel, rms_norm_kernel
        from kaio.ops_library.softmax import softmax_kernel

        import kaio
        from kaio import dtypes

        kernel, extra = {
            "rms_norm": (rms_norm_kernel(dtypes.f16), {"HAS_W": True}),
            "layer_norm": (layer_norm_kernel(dtypes.f16), {"HAS_W": True, "HAS_B": True}),
            "softmax": (softmax_kernel(dtypes.f16), {"LOG": False}),
        }[op]
        b = rows.blocks(8192, cols)
        c = kaio.compile(rows.with_warps(kernel, b.warps), arch, __divisible__=(("cols", 16), ("rows", 16)),
                         R=b.rows, C=b.cols, SINGLE=b.single, **extra)  # fmt: skip
        return Built(c.ptx, c.name, b.warps, c.shared_bytes + c.dynamic_shared_bytes)

    return build


def _kaio_dropout(arch: str) -> Callable[[], Built]:
    def build() -> Built:
        from kaio.ops_library.dropout import BLOCK, dropout_kernel

        import kaio
        from kaio import dtypes

        c = kaio.compile(dropout_kernel(dtypes.f32), arch, DROP=True, HAS_RES=False, BLOCK=BLOCK,
                         __divisible__=(("n", 16),))  # fmt: skip
        return Built(c.ptx, c.name, 4, c.shared_bytes + c.dynamic_shared_bytes)

    return build


def _kaio_cross_entropy(arch: str, cols: int) -> Callable[[], Built]:
    def build() -> Built:
        from kaio.ops_library import rows
        from kaio.ops_library.cross_entropy import COLUMNS, cross_entropy_kernel

        import kaio
        from kaio import dtypes

        b = rows.blocks(8192, cols, max_block=COLUMNS)  # the op's tiling
        c = kaio.compile(rows.with_warps(cross_entropy_kernel(dtypes.f16, dtypes.i32), b.warps), arch,
                         __divisible__=(("rows", 16), ("cols", 16)), R=b.rows, C=b.cols, SINGLE=b.single,
                         GRAD=True, SCALED=False)  # fmt: skip
        return Built(c.ptx, c.name, b.warps, c.shared_bytes + c.dynamic_shared_bytes, b.rows * b.cols)

    return build


# --- Triton's ------------------------------------------------------------------------------------


def _triton(build: Callable[[Any], Any]) -> Callable[[], Built]:
    def run() -> Built:
        import triton_kernels as tk

        t = build(tk)
        return Built(t.ptx, t.name, t.warps, t.shared_bytes)

    return run


def cases() -> list[Case]:
    from kaio.ops_library.attention import AttentionConfig, choose_config
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG, WGMMA_CONFIGS

    wg256, wg128 = WGMMA_CONFIGS[0], WGMMA_CONFIGS[1]
    out = [
        Case("matmul sm_80 128x128x32 s3", "sm_80", _kaio_matmul(DEFAULT_CONFIG),
             _triton(lambda tk: tk.matmul(80, (128, 128, 32), 4, 3, tma=False)), "mma"),
        Case("matmul sm_90a 128x256x64 s3 tma", "sm_90a", _kaio_matmul(wg256),
             _triton(lambda tk: tk.matmul(90, (128, 256, 64), 8, 3, tma=True)), "mma"),
        Case("matmul sm_90a 128x128x64 s4 tma", "sm_90a", _kaio_matmul(wg128),
             _triton(lambda tk: tk.matmul(90, (128, 128, 64), 8, 4, tma=True)), "mma"),
        Case("matmul sm_90a 128x256x64 s3 cp.async", "sm_90a", _kaio_matmul(replace(wg256, tma=False)),
             _triton(lambda tk: tk.matmul(90, (128, 256, 64), 8, 3, tma=False)), "mma"),
        Case("matmul sm_90a 128x256x64 s3 warp-specialized", "sm_90a", _kaio_matmul(WGMMA_CONFIGS[5]), None, "mma"),
        Case("matmul sm_90a 128x128x64 s4 persistent", "sm_90a", _kaio_matmul(WGMMA_CONFIGS[7]), None, "mma"),
    ]  # fmt: skip
    for arch, cc in (("sm_80", 80), ("sm_90a", 90)):
        tma = cc == 90
        for d in (64, 128):
            configs = [AttentionConfig(64, 32, 4, 1, 2)]
            default = choose_config(1024, d, arch)
            if default not in configs:
                configs.append(default)
            for cfg in configs:
                out.append(Case(
                    f"attention {arch} D={d} {cfg.label()}", arch, _kaio_attention(arch, d, cfg),
                    _triton(lambda tk, cc=cc, d=d, cfg=cfg, tma=tma: tk.attention(
                        cc, d, cfg.block_m, cfg.block_n, cfg.warps, max(cfg.stages, 1), tma)),
                    "score", (cfg.block_m, cfg.block_n)))  # fmt: skip
    out.append(Case("attention sm_90a D=128 Triton's best 128x128-w8", "sm_90a", lambda: None,  # type: ignore[arg-type,return-value]
                    _triton(lambda tk: tk.attention(90, 128, 128, 128, 8, 2, True)), "score", (128, 128)))  # fmt: skip
    for arch, cc in (("sm_80", 80), ("sm_90a", 90)):
        cfg = AttentionConfig(64, 32, 4, 1, 2)
        out.append(Case(f"attention {arch} D=64 {cfg.label()} dropout", arch, _kaio_attention(arch, 64, cfg, True),
                        _triton(lambda tk, cc=cc: tk.attention(cc, 64, 64, 32, 4, 2, cc == 90, dropout=True)),
                        "score", (64, 32)))  # fmt: skip
        for mod in ("softcap", "window", "block causal"):  # the loop of whole blocks, beside the plain kernel's
            out.append(Case(f"attention {arch} D=64 {cfg.label()} {mod}", arch, _kaio_attention(arch, 64, cfg, mod=mod),
                            None, "score", (64, 32)))  # fmt: skip
        for mod in ("causal", "window", "document", "block causal", "block document"):  # the masked loop: each visible score through the mask
            out.append(Case(f"attention {arch} D=64 {cfg.label()} {mod}, masked loop", arch,
                            _kaio_attention(arch, 64, cfg, mod=mod), None, "masked score", (64, 32)))  # fmt: skip
        out.append(Case(f"dropout f32, 1024 per program {arch}", arch, _kaio_dropout(arch),
                        _triton(lambda tk, cc=cc: tk.dropout(cc, 1024, 4)), "element", (1024, 0)))  # fmt: skip
    for arch, cc in (("sm_80", 80), ("sm_90a", 90)):
        for op in ("rms_norm", "layer_norm", "softmax"):
            out.append(Case(f"{op} f16 rows of 4096 {arch}", arch, _kaio_row(op, arch, 4096),
                            _triton(lambda tk, op=op, cc=cc: tk.row_kernel(op, cc, 4096, 8)), "element", (4096, 0)))  # fmt: skip
    for arch, cc in (("sm_80", 80), ("sm_90a", 90)):
        # the loss and the gradient of f16 logits, rows of 32768 in two sweeps of column blocks
        # (kaio's: 8192, 8 warps); Liger at 4096 columns and 8 warps, and at its own (32768, 32)
        out.append(Case(f"cross_entropy + grad f16 V=32768 {arch}", arch, _kaio_cross_entropy(arch, 32768),
                        _triton(lambda tk, cc=cc: tk.liger_cross_entropy(cc, 4096, 8)), "logit", (4096, 0)))  # fmt: skip
        out.append(Case(f"cross_entropy + grad f16 V=32768 {arch} Liger's 32768-w32", arch, lambda: None,  # type: ignore[arg-type,return-value]
                        _triton(lambda tk, cc=cc: tk.liger_cross_entropy(cc, 32768, 32)), "logit", (32768, 0)))  # fmt: skip
    return out


# --- measuring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    side: str
    registers: int
    spill_bytes: int
    shared_bytes: int
    counts: dict[str, int]
    loop: bool  # counts are of a loop trip (else of the whole body)
    figure: float


def key_loop(report: Any, masked: bool = False) -> Any:
    """Attention's key loop: the first innermost loop with the most MMAs. Kernels with two key
    loops (FlashAttention's: the blocks every row sees whole, without masks, then the diagonal
    and ragged blocks) spend nearly every trip in the first; the last blocks' masked loop is
    the one ``main_loop`` would pick (it has more instructions)."""
    loops = [lp for lp in report.loops if not any(lp.contains(o) for o in report.loops)]
    if not loops:
        return None
    most = max(lp.counts["mma"] for lp in loops)
    pick = max if masked else min  # the masked loop is the second
    return pick((lp for lp in loops if lp.counts["mma"] == most), key=lambda lp: lp.head)


def measure(case: Case, side: str, build: Callable[[], Built]) -> Row | None:
    from kaio.targets.ptx import sass

    built = build()
    if built is None:
        return None
    report = sass.analyze(built.ptx, case.arch)[built.name]
    if case.unit == "logit":  # the sweeps over a row's blocks: the loops that compute exp
        sweeps = [lp for lp in report.loops if lp.counts["mufu"] and not any(lp.contains(o) for o in report.loops)]
        counts = {k: sum(lp.counts[k] for lp in sweeps) for k in report.counts}
        figure = counts["total"] * built.warps * 32 / (built.columns or case.tile[0])
        return Row(side, report.registers, report.spill_bytes, built.shared_bytes, counts, bool(sweeps), figure)
    if case.unit in ("score", "masked score"):
        loop = key_loop(report, case.unit == "masked score")
    else:
        loop = report.main_loop() if case.unit != "element" else None
    counts = loop.counts if loop is not None else report.counts
    if case.unit == "mma":
        figure = counts["total"] / max(counts["mma"], 1)
    elif case.unit in ("score", "masked score"):
        bm, bn = case.tile
        figure = counts["total"] * built.warps / (bm * bn)
    else:  # straight-line row kernels: the body a thread runs once
        if report.loops:
            print(f"  note: {side} {case.name} has {len(report.loops)} loop(s); counted statically once")
        figure = counts["total"] * built.warps * 32 / case.tile[0]
    return Row(side, report.registers, report.spill_bytes, built.shared_bytes, counts, loop is not None, figure)


UNIT_LABEL = {"mma": "instr/MMA", "score": "instr/score", "masked score": "instr/score", "element": "instr/elem", "logit": "instr/logit"}


def print_table(results: list[tuple[Case, list[Row]]], markdown: bool) -> None:
    head = ["kernel", "side", "regs", "spill", "smem"] + [c for c, _ in COLUMNS] + ["figure"]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
    else:
        print(f"{'kernel':48} {'side':6} {'regs':>4} {'spill':>5} {'smem':>7} " + " ".join(f"{c:>6}" for c, _ in COLUMNS) + "  figure")
    for case, rows in results:
        for row in rows:
            vals = [str(sum(row.counts[k] for k in keys)) for _, keys in COLUMNS]
            fig = f"{row.figure:.3f} {UNIT_LABEL[case.unit]}" + ("" if row.loop or case.unit == "element" else " (no loop)")
            if markdown:
                print("| " + " | ".join([case.name, row.side, str(row.registers), str(row.spill_bytes), str(row.shared_bytes), *vals, fig]) + " |")
            else:
                print(f"{case.name:48} {row.side:6} {row.registers:4} {row.spill_bytes:5} {row.shared_bytes:7} " + " ".join(f"{v:>6}" for v in vals) + f"  {fig}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run cases whose name contains every one of these")
    parser.add_argument("--no-triton", action="store_true", help="kaio's kernels only")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (docs/benchmarks.md)")
    args = parser.parse_args()
    from kaio.targets.ptx import sass

    if not sass.tools_available():
        raise SystemExit("needs the ptxas, cuobjdump and nvdisasm wheels: pip install -e '.[test]'")
    have_triton = not args.no_triton
    if have_triton:
        try:
            import triton  # noqa: F401
        except ImportError:
            print("triton not installed: kaio's side only (pip install triton)")
            have_triton = False
    start = time.perf_counter()
    results = []
    for case in cases():
        if not all(word in case.name for word in args.only):
            continue
        sides = [("kaio", case.kaio)] + ([("triton", case.triton)] if have_triton and case.triton is not None else [])
        rows = []
        for side, build in sides:
            try:
                row = measure(case, side, build)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - one kernel that fails to build must not end the table
                print(f"  {case.name} ({side}): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            if row is not None:
                rows.append(row)
        results.append((case, rows))
    print_table(results, args.markdown)
    print(f"\n({time.perf_counter() - start:.0f} s; counts per warp: a loop trip of the main loop, or the whole body)")


if __name__ == "__main__":
    main()
