"""Triton's kernels for the same work as kaio's library kernels, the comparison side of
``benchmarks/codegen.py``. Imported only when triton is installed; never a dependency of kaio.

Written after Triton's tutorials (triton-lang.org): the matmul with TMA tensor descriptors
("Persistent Matmul", one tile per program), the fused-attention forward ("Fused Attention",
non-causal stage, scale folded into exp2), and one-row kernels for rms_norm, layer_norm and
softmax (a whole row per program, as Triton's tutorials do when a row fits one block). The
pointer matmul is ``triton_tutorial.matmul_kernel``.
"""

import os
import re
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    """C (f16, M x N) = A (M x K) @ B (K x N), row-major, every load and the store by TMA."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, N_CTX, seed, drop_p, drop_scale, HEAD_DIM: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr, DROPOUT: tl.constexpr):  # fmt: skip
    """O = softmax(Q K^T * scale) V for one (batch * head, query block), Q K V O as
    (batch * heads, N_CTX, HEAD_DIM) f16; ``qk_scale`` = scale * log2(e). Non-causal, N_CTX a
    multiple of BLOCK_N (the tutorial's full-block stage: no masks). ``DROPOUT``: each
    probability kept iff ``tl.rand(seed, row * N_CTX + key) > drop_p`` (kaio's offsets), scaled."""
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    base = off_hz.to(tl.int64) * N_CTX * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    if TMA:
        rows = N_CTX * tl.num_programs(1)
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
        row0 = off_hz * N_CTX
        for start_n in range(0, N_CTX, BLOCK_N):
            k = k_desc.load([row0 + start_n, 0]).T
            qk = tl.dot(q, k)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            if DROPOUT:
                offs = (off_hz * N_CTX + offs_m).to(tl.int64)[:, None] * N_CTX + (start_n + offs_n)[None, :]
                p = tl.where(tl.rand(seed, offs) > drop_p, p * drop_scale, 0.0)
            acc = acc * alpha[:, None]
            v = v_desc.load([row0 + start_n, 0])
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
    else:
        k_ptrs = k_ptr + base + offs_n[None, :] * HEAD_DIM + offs_d[:, None]  # K^T: HEAD_DIM x BLOCK_N
        v_ptrs = v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        for start_n in range(0, N_CTX, BLOCK_N):
            k = tl.load(k_ptrs)
            qk = tl.dot(q, k)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            if DROPOUT:
                offs = (off_hz * N_CTX + offs_m).to(tl.int64)[:, None] * N_CTX + (start_n + offs_n)[None, :]
                p = tl.where(tl.rand(seed, offs) > drop_p, p * drop_scale, 0.0)
            acc = acc * alpha[:, None]
            v = tl.load(v_ptrs)
            acc = tl.dot(p.to(tl.float16), v, acc)
            m_i = m_ij
            k_ptrs += BLOCK_N * HEAD_DIM
            v_ptrs += BLOCK_N * HEAD_DIM
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(tl.float16))


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, stride, N, eps, BLOCK: tl.constexpr):
    """y = x / sqrt(mean(x^2) + eps) * w for one row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(tl.float16), mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride, N, eps, BLOCK: tl.constexpr):
    """y = (x - mean) / sqrt(var + eps) * w + b for one row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = tl.math.rsqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (d * rstd * w + b).to(tl.float16), mask=mask)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, stride, N, BLOCK: tl.constexpr):
    """y = exp(x - max(x)) / sum(exp(x - max(x))) for one row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)


@triton.jit
def dropout_kernel(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    """The "low-memory dropout" tutorial's seeded dropout, f32."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    output = tl.where(tl.rand(seed, offsets) > p, x / (1 - p), 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


# --- compiling to PTX --------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonPtx:
    ptx: str
    name: str
    warps: int
    shared_bytes: int  # what the launch asks for (Triton's shared memory is dynamic)


def _compile(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], divisible: tuple[str, ...],
             cc: int, warps: int, stages: int = 3) -> TritonPtx:  # fmt: skip
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    names = fn.arg_names
    signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    compiled = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
        target=GPUTarget("cuda", cc, 32),
        options={"num_warps": warps, "num_stages": stages, "enable_fp_fusion": True},
    )
    # Triton writes the newest PTX ISA it knows; the kernels need nothing past 8.0 (8.3 for
    # device-side tensor maps), and the ptxas wheel the comparison uses accepts at most 8.8
    ptx = re.sub(r"^\.version \d+\.\d+$", ".version 8.7", compiled.asm["ptx"], flags=re.MULTILINE)
    return TritonPtx(ptx, compiled.metadata.name, warps, compiled.metadata.shared)


def matmul(cc: int, block: tuple[int, int, int], warps: int, stages: int, tma: bool) -> TritonPtx:
    """The TMA matmul (``tma``) or the tutorial's pointer matmul, f16 x f16 -> f16 tiles."""
    bm, bn, bk = block
    if tma:
        sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
        cx = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
        return _compile(matmul_tma_kernel, sig, cx, ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K"), cc, warps, stages)
    import triton_tutorial as tm

    fn = tm.matmul_kernel
    sig = {name: "i32" for name in fn.arg_names} | {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
    cx = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8,
          "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}  # fmt: skip
    for name in cx:
        sig.pop(name)
    div = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")
    return _compile(fn, sig, cx, div, cc, warps, stages)


def attention(cc: int, d: int, block_m: int, block_n: int, warps: int, stages: int, tma: bool,
              dropout: bool = False) -> TritonPtx:  # fmt: skip
    sig = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "qk_scale": "fp32", "N_CTX": "i32",
           "seed": "u64", "drop_p": "fp32", "drop_scale": "fp32"}  # fmt: skip
    cx = {"HEAD_DIM": d, "BLOCK_M": block_m, "BLOCK_N": block_n, "TMA": tma, "DROPOUT": dropout}
    return _compile(attention_kernel, sig, cx, ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "N_CTX"), cc, warps, stages)


def row_kernel(op: str, cc: int, block: int, warps: int) -> TritonPtx:
    """``op`` in rms_norm, layer_norm, softmax: f16 rows of ``block`` elements, one per program."""
    fn, arrays, floats = {
        "rms_norm": (rms_norm_kernel, ("x_ptr", "w_ptr", "y_ptr"), ("eps",)),
        "layer_norm": (layer_norm_kernel, ("x_ptr", "w_ptr", "b_ptr", "y_ptr"), ("eps",)),
        "softmax": (softmax_kernel, ("x_ptr", "y_ptr"), ()),
    }[op]
    sig = {**dict.fromkeys(arrays, "*fp16"), "stride": "i32", "N": "i32", **dict.fromkeys(floats, "fp32")}
    return _compile(fn, sig, {"BLOCK": block}, (*arrays, "stride", "N"), cc, warps)


def dropout(cc: int, block: int, warps: int) -> TritonPtx:
    sig = {"x_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32", "p": "fp32", "seed": "u64"}
    return _compile(dropout_kernel, sig, {"BLOCK_SIZE": block}, ("x_ptr", "output_ptr", "n_elements"), cc, warps)


def liger_cross_entropy(cc: int, block: int, warps: int) -> TritonPtx:
    """Liger-Kernel's cross-entropy with the gradient written in place (its
    ``liger_cross_entropy_kernel``, from the installed ``liger-kernel`` package: f16 logits, i64
    targets, no weights, smoothing, z-loss or softcap, ``reduction="none"`` so the gradient is
    ``softmax - onehot`` as kaio's), ``block`` columns per trip of its two sweeps."""
    from liger_kernel.ops.cross_entropy import liger_cross_entropy_kernel as fn

    sig = {"X_ptr": "*fp16", "X_stride": "i32", "Y_ptr": "*i64", "Y_stride": "i32", "weight_ptr": "*fp32",
           "loss_ptr": "*fp32", "z_loss_ptr": "*fp32", "loss_stride": "i32", "token_accuracy_ptr": "*fp32",
           "token_accuracy_stride": "i32", "predicted_tokens_ptr": "*i64", "predicted_tokens_stride": "i32",
           "n_cols": "i32", "n_non_ignore": "fp32", "sum_non_ignore_weight": "fp32", "weight_sum": "fp32",
           "ignore_index": "i32"}  # fmt: skip
    cx = {"lse_square_scale": 0.0, "label_smoothing": 0.0, "reduction": "none", "softcap": None,
          "RETURN_Z_LOSS": False, "RETURN_TOKEN_ACCURACY": False, "RETURN_PREDICTED_TOKENS": False,
          "BLOCK_SIZE": block, "HAS_WEIGHT": False, "HAS_SOFTCAPPING": False, "HAS_GRADIENTS": True}  # fmt: skip
    return _compile(fn, sig, cx, ("X_ptr", "Y_ptr", "loss_ptr", "X_stride", "n_cols"), cc, warps)
