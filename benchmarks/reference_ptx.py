"""Generate PTX with compilers nobody on kaio wrote (Triton and nvcc), as simulator fixtures.

The kernels below are our own sources. Their generated PTX is committed under
tests/targets/sim/ptx/ (``triton_*.ptx``, ``nvcc_*.ptx``) and run by
tests/targets/sim/test_reference_ptx.py against numpy, so the simulator is checked against
PTX whose fragment layouts, pipelining and calling conventions kaio had no hand in.

    python benchmarks/reference_ptx.py            # both generators, into tests/targets/sim/ptx
    python benchmarks/reference_ptx.py --only triton
    python benchmarks/reference_ptx.py --only triton-hopper   # the sm_90a (wgmma) fixture

Triton (``pip install triton``) compiles ahead of time without a GPU for GPUTarget("cuda", 80,
32); nvcc (CUDA 12 or 13) must be on PATH. Each fixture starts with a ``// launch:`` line giving
the kernel name, block size and dynamic shared memory the launch needs. nvcc 13 writes
``.version 9.0``; the generator lowers it to 8.0 (the kernels use nothing newer, and the ptxas of
the CUDA 12 wheel the tests use accepts at most 8.8).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "targets" / "sim" / "ptx"

# --- Triton -------------------------------------------------------------------------------------

TRITON_MATMUL = dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3)
TRITON_SOFTMAX = dict(block=256, num_warps=4)


def _triton_kernels():  # type: ignore[no-untyped-def]
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
        """C (f32, M x N) = A (f16, M x K) @ B (f16, K x N), row-major, tensor cores via tl.dot."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    @triton.jit
    def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
        """One program per row: y = exp(x - max(x)) / sum(exp(x - max(x)))."""
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        z = x - tl.max(x, axis=0)
        e = tl.exp(z)
        tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    return matmul_kernel, softmax_kernel


def triton_ptx() -> dict[str, str]:
    """name -> PTX text (with its ``// launch:`` line) of the Triton kernels, for sm_80."""
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # no debug sections naming files on this machine
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    matmul_kernel, softmax_kernel = _triton_kernels()
    target = GPUTarget("cuda", 80, 32)
    out = {}
    mm = TRITON_MATMUL
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                 "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}  # fmt: skip
    # Every pointer and integer divisible by 16: Triton then copies 16-byte chunks with cp.async.
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(9)}
    constexprs = {"BLOCK_M": mm["block_m"], "BLOCK_N": mm["block_n"], "BLOCK_K": mm["block_k"]}
    compiled = triton.compile(
        ASTSource(fn=matmul_kernel, signature=signature, constexprs=constexprs, attrs=attrs),
        target=target,
        options={"num_warps": mm["num_warps"], "num_stages": mm["num_stages"], "enable_fp_fusion": True},
    )
    out["triton_matmul"] = _with_launch(compiled.asm["ptx"], "matmul_kernel", 32 * mm["num_warps"], compiled.metadata.shared, f"triton {triton.__version__}")
    sm = TRITON_SOFTMAX
    compiled = triton.compile(
        ASTSource(fn=softmax_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n_cols": "i32", "stride": "i32", "BLOCK": "constexpr"},
                  constexprs={"BLOCK": sm["block"]}, attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}),
        target=target,
        options={"num_warps": sm["num_warps"], "enable_fp_fusion": True},
    )
    out["triton_softmax"] = _with_launch(compiled.asm["ptx"], "softmax_kernel", 32 * sm["num_warps"], compiled.metadata.shared, f"triton {triton.__version__}")
    return out


# --- Triton for Hopper ---------------------------------------------------------------------------

# Triton's own tutorial matmul (benchmarks/triton_tutorial.py) for sm_90a: Triton pipelines the
# loads with cp.async and multiplies with wgmma from shared-memory descriptors (128B swizzle,
# B N-major), waiting with wgmma.wait_group 1. Small tiles keep the simulator fast.
TRITON_MATMUL_SM90A = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, num_warps=4, num_stages=3)


def triton_hopper_ptx() -> dict[str, str]:
    """name -> PTX of the tutorial matmul compiled for GPUTarget("cuda", 90, 32) (sm_90a)."""
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("triton_tutorial", Path(__file__).resolve().parent / "triton_tutorial.py")
    assert spec is not None and spec.loader is not None
    tutorial = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)
    cfg = dict(TRITON_MATMUL_SM90A)
    options = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages"), "enable_fp_fusion": True}
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
                 "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
                 "stride_cm": "i32", "stride_cn": "constexpr", **dict.fromkeys(cfg, "constexpr")}  # fmt: skip
    # unit inner strides (row-major operands) and 16-divisible pointers and sizes: 16-byte copies
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 5, 6, 8, 10)}
    constexprs = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, **cfg}
    compiled = triton.compile(
        ASTSource(fn=tutorial.matmul_kernel, signature=signature, constexprs=constexprs, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options=options,
    )
    # Triton writes the newest PTX ISA it knows; the kernel needs nothing past 8.0 (wgmma), and
    # the ptxas wheel the tests use accepts at most 8.8
    text = re.sub(r"^\.version \d+\.\d+$", ".version 8.0", compiled.asm["ptx"], flags=re.M)
    launch = _with_launch(text, "matmul_kernel", 32 * options["num_warps"], compiled.metadata.shared, f"triton {triton.__version__}")
    return {"triton_matmul_sm90a": launch}


# --- nvcc ---------------------------------------------------------------------------------------

NVCC_MATMUL = dict(block=128, tile_m=64, tile_n=64, tile_k=32)
NVCC_SOFTMAX = dict(block=128)

CUDA_MATMUL = r"""
#include <cuda_fp16.h>

// --- tensor-core matmul: C (f32, M x N) = A (f16, M x K) @ B (f16, K x N), all row-major. -----
// M, N, K multiples of 8 (16-byte rows). 128 threads = 4 warps in 2 x 2, each warp 32 x 32 of a
// 64 x 64 CTA tile; K steps of 32 through a two-stage cp.async ring; padded shared rows keep
// ldmatrix conflict-free. Out-of-range chunks are copied with src-size 0 (zero fill, no read).
#define TM 64
#define TN 64
#define TK 32
#define A_STRIDE (TK + 8)   // halves per shared row of A: 80 bytes
#define B_STRIDE (TN + 8)   // halves per shared row of B: 144 bytes

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy16(void* dst, const void* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(inside ? 16 : 0));
}

__device__ __forceinline__ void load_tiles(half (*As)[A_STRIDE], half (*Bs)[B_STRIDE],
        const half* A, const half* B, int M, int N, int K, int m0, int n0, int k0) {
    int t = threadIdx.x;
    for (int c = t; c < TM * TK / 8; c += blockDim.x) {          // A: 64 rows x 4 chunks
        int r = c / (TK / 8), col = (c % (TK / 8)) * 8;
        bool inside = m0 + r < M && k0 + col < K;
        copy16(&As[r][col], A + (size_t)(m0 + r) * K + k0 + col, inside);
    }
    for (int c = t; c < TK * TN / 8; c += blockDim.x) {          // B: 32 rows x 8 chunks
        int r = c / (TN / 8), col = (c % (TN / 8)) * 8;
        bool inside = k0 + r < K && n0 + col < N;
        copy16(&Bs[r][col], B + (size_t)(k0 + r) * N + n0 + col, inside);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

extern "C" __global__ void __launch_bounds__(128)
mma_matmul(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C,
           int M, int N, int K) {
    __shared__ __align__(16) half As[2][TM][A_STRIDE];
    __shared__ __align__(16) half Bs[2][TK][B_STRIDE];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    float acc[2][4][4] = {};
    int steps = (K + TK - 1) / TK;

    load_tiles(As[0], Bs[0], A, B, M, N, K, m0, n0, 0);
    for (int s = 0; s < steps; ++s) {
        int cur = s & 1;
        if (s + 1 < steps) {
            load_tiles(As[cur ^ 1], Bs[cur ^ 1], A, B, M, N, K, m0, n0, (s + 1) * TK);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        for (int kk = 0; kk < TK; kk += 16) {
            unsigned a[2][4], b[4][2];
            for (int i = 0; i < 2; ++i) {   // A 16 x 16: lanes 0-15 rows, 16-31 the right half
                const half* p = &As[cur][wm + i * 16 + (lane % 16)][kk + (lane / 16) * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                             : "r"(smem_u32(p)));
            }
            for (int j = 0; j < 4; ++j) {   // B 16 x 8, stored k-major: transpose on load
                const half* p = &Bs[cur][kk + (lane % 16)][wn + j * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]) : "r"(smem_u32(p)));
            }
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j)
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                        : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                        : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        }
        __syncthreads();
    }
    int g = lane / 4, t4 = lane % 4;
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            for (int e = 0; e < 4; ++e) {
                int r = m0 + wm + i * 16 + g + (e / 2) * 8, c = n0 + wn + j * 8 + t4 * 2 + (e % 2);
                if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j][e];
            }
}
"""

CUDA_SOFTMAX = r"""
// --- row softmax: one 128-thread block per row, any row length. ---------------------------------
__device__ float block_reduce(float v, bool is_max, float* scratch) {
    for (int o = 16; o > 0; o /= 2) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < blockDim.x / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
    __syncthreads();
    return v;
}

extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float scratch[32];
    const float* row = x + (size_t)blockIdx.x * n;
    float* out = y + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
    m = block_reduce(m, true, scratch);
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(row[i] - m);
    s = block_reduce(s, false, scratch);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = expf(row[i] - m) / s;
}
"""

CUDA_CALLS = r"""
// --- device functions nvcc keeps as calls: .param passing, a .local stack frame. -----------------
__device__ __noinline__ float poly(float x, int n) {
    float acc = 0.f;
    for (int i = 0; i < n; ++i) { if (acc > 100.f) return acc; acc = acc * x + 1.f; }
    return acc;
}

__device__ __noinline__ int pick(int v) {
    int buf[4];
    for (int i = 0; i < 4; ++i) buf[i] = v * i;
    return buf[v & 3] + v;
}

extern "C" __global__ void calls(const float* x, float* out, int* iout, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = poly(x[i], i % 7) + poly(x[i] * 0.5f, 3);
        if (i & 1) iout[i] = pick(i);
    }
}
"""

NVCC_KERNELS = {  # fixture name -> (CUDA source, kernel, block size, dynamic shared bytes)
    "nvcc_matmul": (CUDA_MATMUL, "mma_matmul", NVCC_MATMUL["block"], 0),
    "nvcc_softmax": (CUDA_SOFTMAX, "softmax_rows", NVCC_SOFTMAX["block"], 0),
    "nvcc_calls": (CUDA_CALLS, "calls", 128, 0),
}


def nvcc_ptx(nvcc: str = "nvcc") -> dict[str, str]:
    """name -> PTX of each CUDA kernel above (nvcc -O3 -arch=sm_80), one module per kernel."""
    about = subprocess.run([nvcc, "--version"], check=True, capture_output=True, text=True).stdout
    version = next((line.strip() for line in about.splitlines() if "release" in line), "nvcc")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (source, kernel, block, shared) in NVCC_KERNELS.items():
            src, ptx_path = Path(tmp) / f"{name}.cu", Path(tmp) / f"{name}.ptx"
            src.write_text(source)
            subprocess.run([nvcc, "-arch=sm_80", "-O3", "-ptx", str(src), "-o", str(ptx_path)], check=True)
            text = re.sub(r"^\.version 9\.\d+$", ".version 8.0", ptx_path.read_text(), flags=re.M)
            out[name] = _with_launch(text, kernel, block, shared, version)
    return out


# --- output -------------------------------------------------------------------------------------


def _with_launch(ptx: str, kernel: str, block: int, shared: int, generator: str) -> str:
    for line in ptx.splitlines():  # fixtures are committed: they must not name this machine's files
        if line.lstrip().startswith(".file") or "/" in line.split("//")[0]:
            raise RuntimeError(f"generated PTX names a file: {line.strip()}")
    head = f"// launch: kernel={kernel} block={block} shared_bytes={shared}\n// generated by benchmarks/reference_ptx.py with {generator}\n"
    return head + ptx


def launch_info(ptx: str) -> tuple[str, int, int]:
    """(kernel, block size, dynamic shared bytes) from a fixture's ``// launch:`` line."""
    m = re.search(r"^// launch: kernel=(\S+) block=(\d+) shared_bytes=(\d+)$", ptx, flags=re.M)
    if m is None:
        raise ValueError("no '// launch:' line: not a reference_ptx.py fixture")
    return m.group(1), int(m.group(2)), int(m.group(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("triton", "triton-hopper", "nvcc"))
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args()
    generated: dict[str, str] = {}
    if args.only in (None, "triton"):
        generated.update(triton_ptx())
    if args.only in (None, "triton-hopper"):
        generated.update(triton_hopper_ptx())
    if args.only in (None, "nvcc"):
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            raise SystemExit("nvcc is not on PATH")
        generated.update(nvcc_ptx(nvcc))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generated.items():
        (args.out / f"{name}.ptx").write_text(text)
        print(f"wrote {args.out / name}.ptx ({len(text.splitlines())} lines)")


if __name__ == "__main__":
    main()
