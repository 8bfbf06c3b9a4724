"""How fast kaio's CPU simulator executes PTX, and how much memory a big launch holds.

Prints a table (medians of a few repeats):
  * straight-line integer code and straight-line f32 code, 16K and 64K threads:
    thread-instructions per second (target: >= 50 M/s at >= 16K threads);
  * a divergent kernel (per-thread loop trip counts and an if/else in the loop);
  * a 128 x 128 x 128 f16 tensor-core matmul (mma.sync, ldmatrix, 3-stage cp.async): kaio's own
    ops_library kernel (1 CTA of 128 threads) and the Triton fixture (4 CTAs): wall time per
    launch (target: < 2 s), checked against numpy;
  * a 1M-thread launch: wall time and peak traced memory (numpy allocations, via tracemalloc).

Run: python benchmarks/sim_speed.py [--repeats N]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from kaio.targets.sim import Simulator

TRITON_MATMUL = Path(__file__).resolve().parent.parent / "tests" / "targets" / "sim" / "ptx" / "triton_matmul.ptx"

HEADER = """.version 8.0
.target sm_80
.address_size 64
"""


def straight_line_int(length: int) -> str:
    body = []
    for i in range(length):
        op = ("xor.b32 %r2, %r2, %r3;", "add.s32 %r3, %r3, %r2;", "shl.b32 %r4, %r2, 3;", "mad.lo.s32 %r2, %r4, 7, %r3;")[i % 4]
        body.append("  " + op)
    return HEADER + f""".visible .entry int_chain(.param .u64 out)
{{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r5, %ntid.x;
  mov.u32 %r6, %tid.x;
  mad.lo.s32 %r1, %r1, %r5, %r6;
  mov.u32 %r2, %r1;
  add.s32 %r3, %r1, 12345;
{chr(10).join(body)}
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}}
"""


def straight_line_float(length: int) -> str:
    body = []
    for i in range(length):
        op = ("fma.rn.f32 %f2, %f2, %f3, %f1;", "mul.f32 %f3, %f3, 0f3F000000;", "add.f32 %f1, %f1, %f2;", "max.f32 %f2, %f2, %f1;")[i % 4]
        body.append("  " + op)
    return HEADER + f""".visible .entry float_chain(.param .u64 out)
{{
  .reg .b32 %r<8>;
  .reg .f32 %f<8>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r5, %ntid.x;
  mov.u32 %r6, %tid.x;
  mad.lo.s32 %r1, %r1, %r5, %r6;
  cvt.rn.f32.u32 %f1, %r1;
  mul.f32 %f2, %f1, 0f3A800000;
  add.f32 %f3, %f2, 0f3F800000;
{chr(10).join(body)}
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.f32 [%rd3], %f1;
  ret;
}}
"""


DIVERGENT = HEADER + """.visible .entry divergent(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<4>;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r5, %ntid.x;
  mov.u32 %r6, %tid.x;
  mad.lo.s32 %r1, %r1, %r5, %r6;
  and.b32 %r2, %r1, 31;          // per-thread trip count 0..31
  mov.u32 %r3, 0;                // i
  mov.u32 %r4, 0;                // acc
LOOP:
  setp.ge.u32 %p1, %r3, %r2;
  @%p1 bra DONE;
  and.b32 %r7, %r3, 1;
  setp.eq.u32 %p2, %r7, 0;
  @%p2 bra EVEN;
  mad.lo.s32 %r4, %r4, 3, %r3;
  bra.uni NEXT;
EVEN:
  xor.b32 %r4, %r4, %r3;
  add.s32 %r4, %r4, 7;
NEXT:
  add.s32 %r3, %r3, 1;
  bra.uni LOOP;
DONE:
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
  ret;
}
"""

# the same small kernel the simulator tests launch with a million threads
SMALL = (Path(__file__).resolve().parent.parent / "tests" / "targets" / "sim" / "ptx" / "scale.ptx").read_text()


def int_chain_reference(threads: int, length: int) -> np.ndarray:
    i = np.arange(threads, dtype=np.uint32)
    r2, r3, r4 = i.copy(), i + np.uint32(12345), np.zeros_like(i)
    for k in range(length):
        step = k % 4
        if step == 0:
            r2 = r2 ^ r3
        elif step == 1:
            r3 = r3 + r2
        elif step == 2:
            r4 = r2 << np.uint32(3)
        else:
            r2 = r4 * np.uint32(7) + r3
    return r2


def divergent_reference(threads: int) -> np.ndarray:
    i = np.arange(threads, dtype=np.uint32)
    trips = i & np.uint32(31)
    acc = np.zeros_like(i)
    for k in range(32):
        live = k < trips
        k32 = np.uint32(k)
        acc = np.where(live, (acc ^ k32) + np.uint32(7) if k % 2 == 0 else acc * np.uint32(3) + k32, acc)
    return acc


def measure(
    sim: Simulator, ptx: str, kernel: str, threads: int, block: int, repeats: int, reference: np.ndarray | None
) -> tuple[float, float, int]:
    module = sim.load(ptx)
    out = sim.memory.alloc(threads * 4)
    rates, times = [], []
    count = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = module.launch(kernel, (threads // block, 1, 1), (block, 1, 1), [struct.pack("<Q", out)])
        elapsed = time.perf_counter() - t0
        count = report.thread_instructions
        rates.append(count / elapsed)
        times.append(elapsed)
    if reference is not None:  # a fast wrong answer would be worthless: check it
        assert np.array_equal(sim.memory.read(out, threads * 4).view(np.uint32), reference), kernel
    sim.memory.free(out)
    return statistics.median(rates), statistics.median(times), count


def _matmul_inputs(sim: Simulator, size: int) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(np.float16)
    b = rng.standard_normal((size, size)).astype(np.float16)
    addrs = [sim.memory.alloc(x.nbytes) for x in (a, b)] + [sim.memory.alloc(size * size * 4)]
    sim.memory.write(addrs[0], a)
    sim.memory.write(addrs[1], b)
    return a, b, *addrs


def kaio_matmul(sim: Simulator, size: int) -> tuple[str, Callable[[], object], Callable[[], float]]:
    """kaio's ops_library f16 -> f32 matmul, compiled for sm_80."""
    from kaio.ops_library.matmul_config import DEFAULT_CONFIG
    from kaio.ops_library.matmul_kernel import MatmulKernel

    import kaio
    from kaio import dtypes

    compiled = kaio.compile(MatmulKernel(dtypes.f16, dtypes.f32, (16, 16, 16), DEFAULT_CONFIG), "sm_80")
    module = sim.load(compiled.ptx)
    a, b, pa, pb, pc = _matmul_inputs(sim, size)
    values = [pa, pb, pc, pc, size, size, size, 1.0, 0.0]  # bias: unused (no bias)
    params = [p.pack(v) for p, v in zip(compiled.params, values)]
    grid = (math.ceil(size / 128) ** 2, 1, 1)

    def launch() -> object:
        return module.launch(compiled.name, grid, compiled.block_size, params)

    return "kaio ops_library matmul", launch, lambda: _matmul_error(sim, pc, a, b)


def triton_matmul(sim: Simulator, size: int) -> tuple[str, Callable[[], object], Callable[[], float]]:
    """The Triton tl.dot fixture (64 x 64 x 32 tiles, 4 warps, 3 stages)."""
    text = TRITON_MATMUL.read_text()
    m = re.search(r"^// launch: kernel=(\S+) block=(\d+) shared_bytes=(\d+)$", text, flags=re.M)
    assert m is not None
    kernel, block, shared = m.group(1), int(m.group(2)), int(m.group(3))
    module = sim.load(text)
    a, b, pa, pb, pc = _matmul_inputs(sim, size)
    params = [struct.pack("<Q", x) for x in (pa, pb, pc)] + [struct.pack("<i", size)] * 6
    params += [b"\0" * nbytes for _, _, nbytes in module.entries[kernel].params[len(params) :]]
    grid = (math.ceil(size / 64), math.ceil(size / 64), 1)

    def launch() -> object:
        return module.launch(kernel, grid, (block, 1, 1), params, shared_bytes=shared)

    return "Triton fixture matmul", launch, lambda: _matmul_error(sim, pc, a, b)


def _matmul_error(sim: Simulator, pc: int, a: np.ndarray, b: np.ndarray) -> float:
    n = a.shape[0]
    c = sim.memory.read(pc, n * n * 4).view(np.float32).reshape(n, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(c - want) / np.linalg.norm(want))


def matmul_rows(repeats: int, size: int = 128) -> list[tuple[str, float, int, float]]:
    rows = []
    for make in (kaio_matmul, triton_matmul):
        sim = Simulator()
        name, launch, error = make(sim, size)
        times, count = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            report = launch()
            times.append(time.perf_counter() - t0)
            count = report.thread_instructions  # type: ignore[attr-defined]
        err = error()
        assert err < 1e-2, f"{name} computed a wrong result (relative error {err})"
        rows.append((name, statistics.median(times), count, err))
    return rows


def million_threads(repeats: int) -> tuple[float, float, float]:
    sim = Simulator()
    module = sim.load(SMALL)
    n = 1 << 20
    x = sim.memory.alloc(n * 4)
    data = np.arange(n, dtype=np.float32)
    times, peaks = [], []
    for _ in range(repeats):
        sim.memory.write(x, data)
        tracemalloc.start()
        t0 = time.perf_counter()
        report = module.launch("scale", (n // 256, 1, 1), (256, 1, 1), [struct.pack("<Q", x), struct.pack("<I", n)])
        times.append(time.perf_counter() - t0)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    result = sim.memory.read(x, n * 4).view(np.float32)
    assert np.array_equal(result, data * 2 + 1), "1M-thread launch computed a wrong result"
    return statistics.median(times), statistics.median(peaks) / 2**20, report.ctas_per_batch * 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sim = Simulator()
    rows = []
    for threads in (16384, 65536):
        for name, ptx, kernel, reference in (
            ("straight-line int (200 instr)", straight_line_int(200), "int_chain", int_chain_reference(threads, 200)),
            ("straight-line f32 (200 instr)", straight_line_float(200), "float_chain", None),
            ("divergent loop + if/else", DIVERGENT, "divergent", divergent_reference(threads)),
        ):
            rate, seconds, count = measure(sim, ptx, kernel, threads, 256, args.repeats, reference)
            rows.append((name, threads, count, seconds, rate))
    print(f"{'workload':<32} {'threads':>8} {'thread-instr':>13} {'time (s)':>9} {'M thread-instr/s':>17}")
    for name, threads, count, seconds, rate in rows:
        print(f"{name:<32} {threads:>8} {count:>13} {seconds:>9.3f} {rate / 1e6:>17.1f}")
    print()
    print(f"{'128^3 f16 tensor-core matmul':<32} {'':>8} {'thread-instr':>13} {'time (s)':>9} {'rel. error':>17}")
    for name, seconds, count, err in matmul_rows(args.repeats):
        print(f"{name:<32} {'':>8} {count:>13} {seconds:>9.3f} {err:>17.1e}")
    seconds, peak_mib, batch_threads = million_threads(args.repeats)
    print()
    print(f"1M-thread launch (1,048,576 threads, 4 MiB buffer): {seconds:.2f} s, "
          f"peak traced memory {peak_mib:.1f} MiB, {batch_threads} threads per batch")


if __name__ == "__main__":
    main()
