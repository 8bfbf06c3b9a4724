"""llama.cpp's CUDA mat-vec kernel for GGUF decode, compiled from llama.cpp's public source.

    python benchmarks/llama_cpp_mmvq.py    # registers, spills, SASS of mmvq's k-loop, per 256 weights

What is compiled: ``mul_mat_vec_q`` of ``ggml/src/ggml-cuda/mmvq.cu`` in the llama-cpp-python 0.3.36
sdist (``cuda_sources.LLAMA_CPP``, fetched and unpacked at benchmark time), cut from that file at
the end of the kernel (the host dispatch after it would instantiate every type and ncols_dst) and
instantiated as ``mul_mat_vec_q_switch_ncols_dst`` launches it for decode: ``<type, ncols_dst = 1,
has_fusion = false, small_k, halve_iters = false>``. ``small_k`` is its host rule
(``should_use_small_k``) at K = 4096, false for Q8_0 and Q4_K; ``halve_iters`` is only for DGX
Spark; ``has_fusion`` only with a fused gate or bias. The kernel's own constants (qk, qi, vdr,
nwarps, rows per block: ``ggml_cuda_type_traits``, ``get_vdr_mmvq``, ``calc_nwarps``,
``calc_rows_per_block``) are evaluated by nvcc for the target and read back from the PTX. For
Hopper the PTX is compute_90, what llama.cpp's default CUDA architectures ship (``90-virtual``);
sm_90a gives this kernel the same SASS.

The figure: SASS instructions of the main loop per warp (``kaio.targets.ptx.sass``, the ptxas
wheel), times the warps of a CTA, times 256, over the weights that loop's pass consumes per CTA.
ptxas unrolls the source's k-loop (Q8_0 four times, Q4_K twice), so a pass is several trips of
``for (kbx = ...; kbx < blocks_per_row_x; kbx += blocks_per_iter)``; the number is read from the
step of the loop's induction variable (:func:`trips_per_pass`). At K = 4096 a thread makes exactly
one pass (Q8_0: 128 blocks / 32 per trip = 4 trips; Q4_K: 16 / 8 = 2), so the one-trip remainder
loop ptxas adds for Q8_0 does not run.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cuda_sources, beside this file
from cuda_sources import LLAMA_CPP, Unavailable, nvcc_ptx, source_tree

if TYPE_CHECKING:
    from kaio.targets.ptx.sass import Loop

K = 4096  # the decode shape of benchmarks/quantized.py (M = 1, K = N = 4096)
QTYPES = ("Q8_0", "Q4_K")
ARCHS = ("sm_80", "sm_90a")
NVCC_ARCH = {"sm_90a": "sm_90"}  # llama.cpp ships compute_90 PTX for Hopper, not 90a

# vendors/cuda.h includes cublas_v2.h; nothing of cuBLAS reaches the kernel, and nothing is linked
CUBLAS_STUB = """#pragma once
#include <cuda_runtime.h>
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef struct cublasContext * cublasHandle_t;
#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 0
const char * cublasGetStatusString(cublasStatus_t);
cublasStatus_t cublasCreate(cublasHandle_t *);
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t);
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t);
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t);
"""

# Appended after the kernel. The host side of mul_mat_vec_q_switch_ncols_dst, case 1, on an NVIDIA
# Ampere or Hopper GPU (get_device_table_id(cc): MMVQ_PARAMETERS_GENERIC): small_k when one trip
# of the whole CTA covers K (its type exceptions are IQ types only), never halve_iters (GB10 only).
INSTANTIATE = """
constexpr ggml_type ref_t = GGML_TYPE_{qtype};
constexpr int ref_k = {k};
#ifdef __CUDA_ARCH__
static_assert(get_device_table_id() == MMVQ_PARAMETERS_GENERIC, "the host rule below is the generic table's");
#endif
constexpr int ref_nwarps_host = calc_nwarps(ref_t, 1, MMVQ_PARAMETERS_GENERIC);
constexpr bool ref_small_k_host = ref_nwarps_host > 1 && ref_k / ggml_cuda_type_traits<ref_t>::qk <
    ref_nwarps_host * (get_vdr_mmvq(ref_t) * 32 / ggml_cuda_type_traits<ref_t>::qi);
void * ref_kernel() {{ return (void *) mul_mat_vec_q<ref_t, 1, false, ref_small_k_host, false>; }}

// the kernel's constexprs as nvcc evaluates them for this target, read back from the PTX
__device__ int ref_type = ref_t;
__device__ int ref_small_k = ref_small_k_host;
__device__ int ref_qk = ggml_cuda_type_traits<ref_t>::qk;
__device__ int ref_qi = ggml_cuda_type_traits<ref_t>::qi;
__device__ int ref_vdr = get_vdr_mmvq(ref_t);
__device__ int ref_warp_size = ggml_cuda_get_physical_warp_size();
__device__ int ref_nwarps = calc_nwarps(ref_t, 1, get_device_table_id(), ref_small_k_host, false);
__device__ int ref_rows = calc_rows_per_block(1, get_device_table_id(), ref_small_k_host,
                                              calc_nwarps(ref_t, 1, get_device_table_id(), ref_small_k_host, false));
"""
# CMake's definitions for a CUDA build (ggml/src and ggml-cuda/CMakeLists.txt); llama.cpp also
# passes -use_fast_math, which nvcc_ptx does not: it only adds .FTZ to this kernel's float ops.
DEFINES = ("GGML_USE_CUDA", "GGML_CUDA_USE_GRAPHS", "GGML_SCHED_MAX_COPIES=4", "GGML_BACKEND_BUILD",
           "GGML_BACKEND_SHARED")  # fmt: skip
# the kernel's k-loop and its step, as the derivation below reads them
BLOCKS_PER_ITER = "constexpr int blocks_per_iter = vdr * nwarps*warp_size / qi;"
K_LOOP = "for (int kbx = tid / (qi/vdr); kbx < blocks_per_row_x; kbx += blocks_per_iter)"


@dataclass(frozen=True)
class Reference:
    ptx: str
    entry: str
    constants: dict[str, int]  # ref_* of INSTANTIATE, without the prefix
    compile_s: float

    @property
    def threads(self) -> int:
        return self.constants["nwarps"] * self.constants["warp_size"]

    @property
    def blocks_per_iter(self) -> int:
        """Blocks of one row a trip of the k-loop covers: qi/vdr threads share a block (each
        takes vdr of its qi 32-bit words of quants), so the CTA's threads cover vdr*threads/qi."""
        c = self.constants
        return c["vdr"] * c["nwarps"] * c["warp_size"] // c["qi"]

    @property
    def weights_per_trip(self) -> int:
        """Per CTA: blocks_per_iter blocks of qk weights in each of its rows_per_cuda_block rows."""
        return self.blocks_per_iter * self.constants["qk"] * self.constants["rows"]


def version() -> str:
    cmake = (source_tree(LLAMA_CPP, "vendor/llama.cpp/ggml") / "CMakeLists.txt").read_text()
    parts = [re.search(rf"set\(GGML_VERSION_{p} (\d+)\)", cmake) for p in ("MAJOR", "MINOR", "PATCH")]
    ggml = ".".join(m.group(1) for m in parts if m) or "?"
    return f"llama-cpp-python {LLAMA_CPP.version} sdist, ggml {ggml}"


@cache
def compile_reference(qtype: str, arch: str, k: int = K) -> Reference:
    ggml = source_tree(LLAMA_CPP, "vendor/llama.cpp/ggml")
    text = (ggml / "src" / "ggml-cuda" / "mmvq.cu").read_text()
    for line in (BLOCKS_PER_ITER, K_LOOP):
        if line not in text:
            raise RuntimeError(f"mmvq.cu no longer has `{line}`: the weights-per-trip derivation needs a look")
    # everything up to the closing brace of the kernel's body
    start = text.index("{", text.index(")", text.index("static __global__ void mul_mat_vec_q(")))
    depth, end = 0, start
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            break
    source = text[: end + 1] + INSTANTIATE.format(qtype=qtype, k=k)
    with tempfile.TemporaryDirectory() as stub:
        (Path(stub) / "cublas_v2.h").write_text(CUBLAS_STUB)
        includes = [Path(stub), ggml / "include", ggml / "src", ggml / "src" / "ggml-cuda"]
        began = time.perf_counter()
        ptx = nvcc_ptx(source, NVCC_ARCH.get(arch, arch), includes, DEFINES)
        seconds = time.perf_counter() - began
    globals_ = re.finditer(r"^\.(?:visible \.)?global \.align 4 \.u32 ref_(\w+)(?: = (\d+))?;", ptx, re.M)
    constants = {m.group(1): int(m.group(2) or 0) for m in globals_}
    # the entry by its template arguments: <ggml_type, ncols_dst, has_fusion, small_k, halve_iters>
    wanted = (constants["type"], 1, 0, constants["small_k"], 0)
    mangled = r"_ZL?\d+mul_mat_vec_qIL9ggml_type(\d+)ELi(\d+)ELb([01])ELb([01])ELb([01])EE\w*"
    entries = [m.group(1) for m in re.finditer(rf"^(?:\.visible )?\.entry ({mangled})\(", ptx, re.M)
               if tuple(int(g) for g in m.groups()[1:]) == wanted]  # fmt: skip
    if len(entries) != 1:
        raise RuntimeError(f"{len(entries)} entries of mul_mat_vec_q<{wanted}> in the PTX")
    return Reference(ptx, entries[0], constants, seconds)


def mmvq_reference(qtype: str, arch: str) -> tuple[str, str, int, int]:
    """(PTX, entry, threads per CTA, weights per CTA of one trip of the source's k-loop)."""
    ref = compile_reference(qtype, arch)
    return ref.ptx, ref.entry, ref.threads, ref.weights_per_trip


def trips_per_pass(loop: Loop, blocks_per_iter: int) -> int:
    """Trips of the source's k-loop in one pass of the SASS loop: the back branch's compare reads
    kbx, whose increment in the loop is blocks_per_iter times the unrolling."""
    operands = lambda i: [o.strip().removesuffix(".reuse") for o in i.operands.split(",")]  # noqa: E731
    branch = loop.instructions[-1]
    predicate = branch.predicate.lstrip("@!")
    compare = next(i for i in reversed(loop.instructions[:-1])
                   if i.opcode.startswith("ISETP") and operands(i)[0] == predicate)  # fmt: skip
    kbx = operands(compare)[2]
    step = next(int(operands(i)[2], 16) for i in loop.instructions
                if i.opcode.split(".")[0] in ("IADD3", "VIADD", "IADD") and operands(i)[:2] == [kbx, kbx])  # fmt: skip
    if step % blocks_per_iter:
        raise RuntimeError(f"kbx steps by {step}, not a multiple of blocks_per_iter = {blocks_per_iter}")
    return step // blocks_per_iter


COLUMNS = ("global", "integer", "float", "convert", "total")


def main() -> int:
    from kaio.targets.ptx import sass

    if not sass.tools_available():
        print("needs the ptxas, cuobjdump and nvdisasm wheels: pip install -e '.[test]'")
        return 0
    try:
        print(f"llama.cpp mul_mat_vec_q, ncols_dst = 1, K = {K} ({version()}, nvcc -O3 to PTX, ptxas wheel)")
        refs = {(q, a): compile_reference(q, a) for q in QTYPES for a in ARCHS}
    except Unavailable as exc:
        print("note:", exc)
        return 0
    print(f"{'qtype':<6}{'arch':<8}{'regs':>5}{'spill':>6}{'gmem':>6}{'int':>6}{'flt':>6}{'cvt':>6}{'tot':>6}"
          f"{'trips':>6}{'w/pass':>8}{'instr/256w':>12}")  # fmt: skip
    notes = []
    for (qtype, arch), ref in refs.items():
        report = sass.analyze(ref.ptx, arch)[ref.entry]
        loop = report.main_loop()
        assert loop is not None
        c, warps = ref.constants, ref.threads // ref.constants["warp_size"]
        trips = trips_per_pass(loop, ref.blocks_per_iter)
        weights = trips * ref.weights_per_trip
        per_256 = loop.counts["total"] * warps * 256 / weights
        cells = "".join(f"{loop.counts[k]:>6}" for k in COLUMNS)
        print(f"{qtype:<6}{arch:<8}{report.registers:>5}{report.spill_bytes:>6}{cells}"
              f"{trips:>6}{weights:>8}{per_256:>12.2f}")  # fmt: skip
        others = [f"{lp.counts['global']} gmem / {lp.counts['total']} instr" for lp in report.loops if lp is not loop]
        notes.append(f"{qtype} {arch}: mul_mat_vec_q<{c['type']}, 1, false, {str(bool(c['small_k'])).lower()}, false> "
                     f"({ref.entry[:48]}...), {warps} warps x {c['rows']} row; a trip: vdr {c['vdr']} x {ref.threads} "
                     f"threads / qi {c['qi']} = {ref.blocks_per_iter} blocks x qk {c['qk']} = {ref.weights_per_trip} "
                     f"weights, {loop.counts['global'] // trips} global loads; "
                     f"other loops: {', '.join(others) or 'none'}; "
                     f"nvcc {ref.compile_s:.1f} s")  # fmt: skip
    print("(per warp, one pass of the main loop; trips: of the source's k-loop in a pass, as ptxas unrolled it;"
          " w/pass: weights per CTA in a pass; instr/256w = tot x warps x 256 / w/pass)")
    for note in notes:
        print("note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
