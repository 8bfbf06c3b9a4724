"""Compile-time benchmark: Python source -> PTX text, in process, after imports.

Prints, per kernel: the time to read and check the source (decoration), a cold compile (IR
built from scratch, every pass, the printer; disk cache off), a disk-cache hit, and the total;
then `import kaio, kaio.ops_library` time and the time to a first PTX in a fresh process
(import, decorate, compile: a fresh interpreter each, minus the interpreter's own start). The matmul is
the ops_library tile kernel (128x128x32 tiles, 3 stages, f16 -> f32, sizes multiples of 16 as
a launch would specialize it). With triton installed, Triton's tutorial matmul is compiled to
PTX for the same sm_80 target in the same run. Every figure is a median.

    python benchmarks/compile_time.py [--repeat 7] [--paired]

``--paired``: only the matmuls beside Triton, kaio's (sm_80 and the sm_90a default) and
Triton's compiles alternating, so both see the same machine load; then the same in fresh
processes, launch to PTX, with a warm disk cache and with an empty one.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def import_time(repeat: int) -> tuple[float, float]:
    """(median `python -c "import kaio, kaio.ops_library"`, median `python -c pass`) wall times."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    kaio_times = [run("import kaio, kaio.ops_library") for _ in range(repeat)]
    bare_times = [run("pass") for _ in range(repeat)]
    return statistics.median(kaio_times), statistics.median(bare_times)


FIRST_PTX = {  # a fresh process: import kaio, write a kernel, compile it to PTX (no disk cache)
    "vector_add (SIMT)": """
import kaio
from kaio.prelude import Array, MutArray, f32, u32, thread_idx_x, block_idx_x, block_dim_x

@kaio.gpu_kernel(block_size=256)
def vector_add(a: Array[f32], b: Array[f32], c: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        c[i] = a[i] + b[i]

assert kaio.compile(vector_add, "sm_80").ptx
""",
    "matmul f16 128x128x32 (library)": """
import kaio
from kaio import dtypes
from kaio.ops_library.matmul_config import DEFAULT_CONFIG
from kaio.ops_library.matmul_kernel import MatmulKernel

assert kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG), "sm_80").ptx
""",
}


def first_ptx_times(repeat: int) -> dict[str, float]:
    """Median wall time of a fresh interpreter that imports kaio and compiles one kernel to PTX,
    the bare interpreter's start subtracted."""
    env = {**os.environ, "KAIO_CACHE": "0"}
    folder = Path(tempfile.mkdtemp(prefix="kaio-bench-first-ptx-"))

    def run(name: str, code: str) -> float:
        script = folder / f"{abs(hash(name))}.py"  # kernels are read from a file, not from -c
        script.write_text(code)
        start = time.perf_counter()
        subprocess.run([sys.executable, str(script)], check=True, env=env)
        return time.perf_counter() - start

    bare = statistics.median(run("bare", "pass") for _ in range(repeat))
    return {name: statistics.median(run(name, code) for _ in range(repeat)) - bare for name, code in FIRST_PTX.items()}


def kaio_rows(repeat: int) -> list[tuple[str, float, float, float]]:
    import acceptance_kernels

    import kaio
    from kaio import dtypes
    from kaio.ops_library.matmul_kernel import MatmulKernel
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG

    os.environ["KAIO_CACHE"] = "0"
    kaio.compile(acceptance_kernels.vector_add, "sm_80")  # load the passes once: "after imports"
    rows = []
    kernels: list[tuple[str, Callable[[], object], object]] = []
    for k in acceptance_kernels.ACCEPTANCE_KERNELS:
        kernels.append((k.name, lambda k=k: kaio.gpu_kernel(block_size=k.block_size)(k.fn), k))
    from kaio.ops_library.matmul_kernel import matmul_tile_kernel

    mm = MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG)
    tile_fn = matmul_tile_kernel(dtypes.f16, dtypes.f32, dtypes.f32).fn
    decorate_mm = lambda: kaio.tile_kernel(num_warps=4, num_stages=3)(tile_fn)  # noqa: E731
    kernels.append(("matmul f16 128x128x32 s3 (tile kernel)", decorate_mm, mm))
    cache_dir = tempfile.mkdtemp(prefix="kaio-bench-cache-")
    for name, decorate, kernel in kernels:
        decoration = median_seconds(decorate, repeat)
        os.environ["KAIO_CACHE"] = "0"
        cold = median_seconds(lambda kernel=kernel: kaio.compile(kernel, "sm_80"), repeat)
        os.environ["KAIO_CACHE"] = "1"
        os.environ["KAIO_CACHE_DIR"] = cache_dir
        kaio.compile(kernel, "sm_80")  # fill
        hit = median_seconds(lambda kernel=kernel: kaio.compile(kernel, "sm_80"), repeat)
        rows.append((name, decoration, cold, hit))
    return rows




def triton_to_ptx() -> Callable[[], float] | None:
    """A function timing one triton.compile up to its PTX stage (ptxas excluded), fresh cache
    each run, for the tutorial matmul specialized as Triton's JIT would (16-divisible pointers
    and sizes); None without triton."""
    try:
        import triton
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import triton_tutorial as tm

    signature = {name: "i32" for name in tm.matmul_kernel.arg_names}
    signature.update({"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"})
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                  "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # fmt: skip
    for name in constexprs:
        signature[name] = "constexpr"
    divisible = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]
    attrs = {(tm.matmul_kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    marks: dict[str, float] = {}

    def hook(*args):  # noqa: ANN002 - triton's hook: no args asks for a cache key
        if not args:
            return "kaio-compile-benchmark", "1"
        stages = args[1]
        make_ptx = stages["ptx"]

        def ptx_then_stop(src, metadata):  # noqa: ANN001
            result = make_ptx(src, metadata)
            marks["ptx"] = time.perf_counter()
            return result

        stages["ptx"] = ptx_then_stop

    def once() -> float:
        knobs.runtime.add_stages_inspection_hook = hook
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kaio-bench-triton-cache-")
        source = ASTSource(fn=tm.matmul_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
        start = time.perf_counter()
        compiled = triton.compile(source, target=GPUTarget("cuda", 80, 32), options={"num_warps": 4, "num_stages": 3})
        knobs.runtime.add_stages_inspection_hook = None
        marks["asm"] = compiled.asm["ptx"]  # type: ignore[assignment]
        return marks["ptx"] - start

    once.marks = marks  # type: ignore[attr-defined]
    return once


def triton_to_ptx_seconds(repeat: int) -> float | None:
    """Median of :func:`triton_to_ptx` runs (None without triton)."""
    once = triton_to_ptx()
    if once is None:
        return None
    seconds = statistics.median(once() for _ in range(repeat))
    ptx = once.marks["asm"]  # type: ignore[attr-defined]
    print(f"(Triton's PTX: {ptx.count('mma.sync')} mma.sync, {ptx.count('ldmatrix')} ldmatrix, "
          f"{ptx.count('cp.async.cg')} cp.async.cg)")  # fmt: skip
    return seconds


FRESH_KAIO = """
import os, time
import kaio
from kaio import dtypes
from kaio.ops_library.matmul_config import DEFAULT_CONFIG
from kaio.ops_library.matmul_kernel import MatmulKernel
compiled = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG), "sm_80")
assert "mma.sync" in compiled.ptx
print(time.time() - float(os.environ["BENCH_START"]))
"""

FRESH_TRITON = """
import os, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton_tutorial as tm
signature = {name: "i32" for name in tm.matmul_kernel.arg_names}
signature.update({"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"})
constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
              "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
for name in constexprs:
    signature[name] = "constexpr"
divisible = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]
attrs = {(tm.matmul_kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in divisible}
ptx_ready = []

def hook(*args):  # a compile (not a cache hit) notes when its PTX is ready
    if not args:
        return "kaio-compile-benchmark", "1"
    make_ptx = args[1]["ptx"]

    def ptx_then_note(src, metadata):
        result = make_ptx(src, metadata)
        ptx_ready.append(time.time())
        return result

    args[1]["ptx"] = ptx_then_note

knobs.runtime.add_stages_inspection_hook = hook
compiled = triton.compile(ASTSource(fn=tm.matmul_kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                          target=GPUTarget("cuda", 80, 32), options={"num_warps": 4, "num_stages": 3})
assert "mma.sync" in compiled.asm["ptx"]
print((ptx_ready[0] if ptx_ready else time.time()) - float(os.environ["BENCH_START"]))
"""


def fresh_process_seconds(code: str, env: dict[str, str]) -> float:
    """Seconds from a fresh interpreter's launch to its PTX (printed by ``code``)."""
    env = {**os.environ, **env, "BENCH_START": repr(time.time()), "BENCH_DIR": str(Path(__file__).resolve().parent),
           "TRITON_DEFAULT_FP_FUSION": "1"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def fresh_paired(repeat: int) -> None:
    """A fresh process, launch to PTX, kaio's sm_80 matmul and Triton's alternating: with a warm
    disk cache (kaio's and Triton's own), and with an empty one (import and first compile;
    Triton's time stops when its PTX is made, before ptxas)."""
    warm_kaio, warm_triton = tempfile.mkdtemp(prefix="kaio-bench-"), tempfile.mkdtemp(prefix="kaio-bench-triton-")
    fresh_process_seconds(FRESH_KAIO, {"KAIO_CACHE": "1", "KAIO_CACHE_DIR": warm_kaio})
    fresh_process_seconds(FRESH_TRITON, {"TRITON_CACHE_DIR": warm_triton})
    rows: dict[str, list[float]] = {k: [] for k in ("bare", "kaio hit", "Triton hit", "kaio first", "Triton first")}
    for _ in range(repeat):
        rows["bare"].append(fresh_process_seconds("import os, time; print(time.time() - float(os.environ['BENCH_START']))", {}))
        rows["kaio hit"].append(fresh_process_seconds(FRESH_KAIO, {"KAIO_CACHE": "1", "KAIO_CACHE_DIR": warm_kaio}))
        rows["Triton hit"].append(fresh_process_seconds(FRESH_TRITON, {"TRITON_CACHE_DIR": warm_triton}))
        empty = {"KAIO_CACHE": "1", "KAIO_CACHE_DIR": tempfile.mkdtemp(prefix="kaio-bench-")}
        rows["kaio first"].append(fresh_process_seconds(FRESH_KAIO, empty))
        rows["Triton first"].append(fresh_process_seconds(FRESH_TRITON, {"TRITON_CACHE_DIR": tempfile.mkdtemp(prefix="kaio-bench-triton-")}))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nfresh process, launch to PTX, sm_80 matmul, alternating, median of {repeat} rounds (ms)")
    print(f"  bare interpreter                 {med['bare'] * 1e3:8.0f}")
    for what in ("hit", "first"):
        label = "disk-cache hit" if what == "hit" else "import + first compile"
        ratio = med[f"kaio {what}"] / med[f"Triton {what}"]
        print(f"  {label:24} kaio {med[f'kaio {what}'] * 1e3:8.0f}   Triton {med[f'Triton {what}'] * 1e3:8.0f}   kaio / Triton = {ratio:.2f}")


def paired(repeat: int) -> None:
    """kaio's and Triton's matmul compiles alternating, ``repeat`` rounds: on a shared machine
    whose load changes by the minute, the ratio of two separate medians says little."""
    once = triton_to_ptx()
    if once is None:
        print("triton not installed: nothing to pair with")
        return
    import kaio
    from kaio import dtypes
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG, default_config
    from kaio.ops_library.matmul_kernel import MatmulKernel

    os.environ["KAIO_CACHE"] = "0"
    kernels = {
        "sm_80": MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG),
        "sm_90a": MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), default_config(True, (16, 16, 16), 2, arch="sm_90a")),
    }
    times: dict[str, list[float]] = {"triton": [], **{arch: [] for arch in kernels}}
    for arch, kernel in kernels.items():
        kaio.compile(kernel, arch)  # passes loaded, as in the table
    once()
    for _ in range(repeat):
        times["triton"].append(once())
        for arch, kernel in kernels.items():
            start = time.perf_counter()
            kaio.compile(kernel, arch)
            times[arch].append(time.perf_counter() - start)
    triton_s = statistics.median(times["triton"])
    print(f"\nPython -> PTX, f16 -> f32 matmul, alternating, median of {repeat} rounds (ms)")
    print(f"  Triton sm_80 128x128x32 s3      {triton_s * 1e3:8.1f}")
    for arch, kernel in kernels.items():
        block = "x".join(map(str, kernel.config.block))
        kaio_s = statistics.median(times[arch])
        print(f"  kaio   {arch:6} {block:11} s{kernel.config.stages}  {kaio_s * 1e3:8.1f}   kaio / Triton = {kaio_s / triton_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--paired", action="store_true", help="only the matmul beside Triton, compiles alternating")
    args = parser.parse_args()
    if args.paired:
        paired(args.repeat)
        if importlib.util.find_spec("triton") is not None:
            fresh_paired(args.repeat)
        return

    rows = kaio_rows(args.repeat)
    print(f"\ncompile times, sm_80, median of {args.repeat} (ms)")
    print(f"{'kernel':44} {'decorate':>9} {'cold':>9} {'cache hit':>10}")
    for name, decoration, cold, hit in rows:
        print(f"{name:44} {decoration * 1e3:9.1f} {cold * 1e3:9.1f} {hit * 1e3:10.2f}")
    kaio_mm = rows[-1][2]

    with_kaio, bare = import_time(args.repeat)
    print(f"\nimport kaio, kaio.ops_library: {with_kaio * 1e3:.0f} ms wall ({(with_kaio - bare) * 1e3:.0f} ms over a bare interpreter's {bare * 1e3:.0f} ms)")
    print(f"\ntime to first PTX in a fresh process (import, decorate, compile; no disk cache), median of {max(3, args.repeat // 2)}, over a bare interpreter")
    for name, seconds in first_ptx_times(max(3, args.repeat // 2)).items():
        print(f"  {name:40} {seconds * 1e3:8.0f} ms")

    triton_s = triton_to_ptx_seconds(max(3, args.repeat // 2))
    if triton_s is None:
        print("\ntriton not installed: no side-by-side (pip install triton)")
    else:
        print("\nmatmul 128x128x32, 3 stages, f16 -> f32, sm_80, Python -> PTX (ms)")
        print(f"  kaio   {kaio_mm * 1e3:8.1f}")
        print(f"  Triton {triton_s * 1e3:8.1f}")
        print(f"  kaio / Triton = {kaio_mm / triton_s:.2f}")


if __name__ == "__main__":
    main()
