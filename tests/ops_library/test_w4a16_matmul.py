"""kaio.ops_library.w4a16_matmul against numpy dequantisation of random GPTQ int4 tensors: on the
simulator for sm_80 (mma.sync) and sm_90a (wgmma), f16 and bf16, with and without qzeros and
bias, decode and prefill row counts, ragged N; the kernels assemble without spills; every bad
input is named. Fresh random inputs, outputs poisoned before launch."""

import re

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library import w4a16_matmul
from kaio.ops_library.w4a16_matmul import choose_config, w4a16_tile_kernel
from kaio.targets.ptx import toolchain

import kaio
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError

HALF = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f16": 5e-3, "bf16": 1e-2}  # norm-relative: W is rounded exactly as the kernel rounds it


def nibbles(words: np.ndarray, axis: int) -> np.ndarray:
    """The 4-bit fields of int32 ``words``, low nibble first, spread along ``axis``: GPTQ's
    packing (qweight along K, qzeros along N)."""
    u = words.view(np.uint32)
    fields = np.stack([(u >> (4 * j)) & 0xF for j in range(8)], axis=axis + 1)  # (.., words, 8, ..)
    shape = list(u.shape)
    shape[axis] *= 8
    return fields.reshape(shape).astype(np.int64)


def dequantize_gptq(qweight: np.ndarray, scales: np.ndarray, qzeros: np.ndarray | None, group_size: int) -> np.ndarray:
    """The reference: ``W[k, n] = (q[k, n] - z[g, n]) * scales[g, n]`` with ``g = k // group_size``,
    ``q`` the nibbles of qweight along K, ``z`` those of qzeros along N plus one (GPTQ stores
    zero points minus one), or 8 without qzeros. f32 (exact: a 5-bit integer times an f16)."""
    q = nibbles(qweight, 0)
    k = q.shape[0]
    group = k if group_size == -1 else group_size
    z = nibbles(qzeros, 1) + 1 if qzeros is not None else np.full(scales.shape, 8)
    rows = np.arange(k) // group
    return ((q - z[rows]) * scales.astype(np.float32)[rows]).astype(np.float32)


def random_gptq(rng: np.random.Generator, k: int, n: int, group_size: int, zeros: bool, scale_type=np.float16):
    """Random words (every nibble random), positive scales, random packed zeros."""
    groups = k // (k if group_size == -1 else group_size)
    qweight = rng.integers(0, 2**32, (k // 8, n), dtype=np.uint64).astype(np.uint32).view(np.int32)
    scales = (rng.random((groups, n)) * 0.02 + 0.002).astype(scale_type)
    qzeros = rng.integers(0, 2**32, (groups, n // 8), dtype=np.uint64).astype(np.uint32).view(np.int32) if zeros else None
    return qweight, scales, qzeros


def test_reference_reads_gptq_packing():
    """The reference itself: word 0x76543210 holds rows 0..7 in order (low nibble first); a
    packed zero 7 (a symmetric checkpoint's) is the zero point 8, as qzeros=None."""
    qweight = np.array([[0x76543210, 0x00000000], [0x0FEDCBA9, 0x11111111]], dtype=np.int64)
    qweight = qweight.astype(np.uint32).view(np.int32)
    scales = np.array([[1.0, 0.5]], dtype=np.float16)
    sevens = np.array([[0x77777777]], dtype=np.uint32).view(np.int32)
    w = dequantize_gptq(qweight, scales, None, -1)
    assert w[:8, 0].tolist() == [v - 8 for v in range(8)]
    assert w[8:, 0].tolist() == [v - 8 for v in (9, 10, 11, 12, 13, 14, 15, 0)]
    assert w[:8, 1].tolist() == [-4.0] * 8 and w[8:, 1].tolist() == [-3.5] * 8
    wide = np.repeat(qweight, 4, 1)[:, :8]  # 8 columns for one packed zero word
    assert np.array_equal(dequantize_gptq(wide, np.ones((1, 8), np.float16), sevens, -1),
                          dequantize_gptq(wide, np.ones((1, 8), np.float16), None, -1))  # fmt: skip


def rel(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) or non-finite elements"
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


CASES = [  # m, k, n, group_size, zeros, bias dtype, dtype, arch, scales (f16 or "x": x's type)
    (1, 256, 72, 32, True, None, "f16", "sm_80", "f16"),
    (5, 128, 40, 64, False, "f32", "bf16", "sm_80", "f16"),
    (16, 96, 24, -1, True, "x", "f16", "sm_90a", "f16"),
    (64, 256, 70, 128, False, None, "bf16", "sm_90a", "f16"),
    (5, 32, 16, 16, True, "x", "bf16", "sm_90a", "x"),
    (64, 64, 136, 64, True, "f32", "f16", "sm_80", "f16"),
    (3, 64, 40, 32, True, None, "bf16", "sm_80", "x"),
]


@pytest.mark.parametrize("m,k,n,group_size,zeros,bias,dtype,arch,scale_type", CASES,
                         ids=lambda v: str(v))  # fmt: skip
def test_matches_numpy_dequantisation(m, k, n, group_size, zeros, bias, dtype, arch, scale_type, poison):
    rng = np.random.default_rng()
    t = HALF[dtype]
    qweight, scales, qzeros = random_gptq(rng, k, n, group_size, zeros, t if scale_type == "x" else np.float16)
    x = rng.standard_normal((m, k)).astype(t)
    b = None if bias is None else rng.standard_normal(n).astype(np.float32 if bias == "f32" else t)
    dev = kaio.Device("sim", arch=arch)
    got = w4a16_matmul(x, qweight, scales, qzeros, group_size=group_size, bias=b, device=dev)
    assert isinstance(got, np.ndarray) and got.shape == (m, n) and got.dtype == np.dtype(t)
    w = dequantize_gptq(qweight, scales, qzeros, group_size).astype(t).astype(np.float64)
    want = x.astype(np.float64) @ w + (0.0 if b is None else b.astype(np.float64))
    assert rel(got, want) <= TOL[dtype]


def test_buffers_in_buffer_out_and_empty_k(poison):
    """kaio Buffers give a Buffer; K = 0 has no K step: the result is the bias."""
    dev = kaio.Device("sim", arch="sm_80")
    x = dev.alloc_from(np.zeros((3, 0), np.float16))
    q, s = dev.alloc_from(np.zeros((0, 8), np.int32)), dev.alloc_from(np.zeros((0, 8), np.float16))
    bias = np.arange(8, dtype=np.float16)
    got = w4a16_matmul(x, q, s, group_size=-1, bias=dev.alloc_from(bias))
    assert isinstance(got, kaio.Buffer)
    assert np.array_equal(got.to_host(), np.broadcast_to(bias, (3, 8)))


def test_torch_tensors_in_tensor_out():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    qweight, scales, qzeros = random_gptq(rng, 64, 16, 32, True)
    x = rng.standard_normal((2, 64)).astype(np.float16)
    got = w4a16_matmul(*(torch.from_numpy(a) for a in (x, qweight, scales, qzeros)), group_size=32)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float16 and tuple(got.shape) == (2, 16)
    want = x.astype(np.float64) @ dequantize_gptq(qweight, scales, qzeros, 32).astype(np.float16)
    assert rel(got.numpy(), want) <= TOL["f16"]
    with pytest.raises(KaioTypeError, match="no backward"):
        w4a16_matmul(torch.from_numpy(x).requires_grad_(True), torch.from_numpy(qweight), torch.from_numpy(scales),
                     group_size=32)  # fmt: skip


def _good():  # m=2, k=64, n=16, group 32, with qzeros
    rng = np.random.default_rng()
    qweight, scales, qzeros = random_gptq(rng, 64, 16, 32, True)
    return {"x": np.ones((2, 64), np.float16), "qweight": qweight, "scales": scales, "qzeros": qzeros,
            "group_size": 32}  # fmt: skip


BAD = [  # (what is wrong, changes to a good call, error, what the message names)
    ("f32 x", {"x": np.ones((2, 64), np.float32)}, KaioTypeError, "`x` must be a 2-D f16 or bf16"),
    ("1-D x", {"x": np.ones(64, np.float16)}, KaioTypeError, "`x` must be a 2-D"),
    ("int64 qweight", {"qweight": np.zeros((8, 16), np.int64)}, KaioTypeError, "`qweight` must be a 2-D int32"),
    ("qweight rows", {"qweight": np.zeros((4, 16), np.int32)}, KaioValueError, "K/8 rows"),
    ("K not a multiple of 8", {"x": np.ones((2, 60), np.float16)}, KaioValueError, "multiple of 8"),
    ("K not a multiple of the group", {"x": np.ones((2, 48), np.float16), "qweight": np.zeros((6, 16), np.int32)},
     KaioValueError, "not a multiple of `group_size` = 32"),
    ("group_size 100", {"group_size": 100}, KaioValueError, "`group_size` must be -1 or a power of two"),
    ("group_size 8", {"group_size": 8}, KaioValueError, "`group_size` must be -1 or a power of two"),
    ("group_size True", {"group_size": True}, KaioValueError, "`group_size`"),
    ("scales shape", {"scales": np.ones((1, 16), np.float16)}, KaioTypeError, "`scales` must be f16 .* \\(2, 16\\)"),
    ("f32 scales", {"scales": np.ones((2, 16), np.float32)}, KaioTypeError, "`scales` must be f16"),
    ("qzeros with N % 8", {"qweight": np.zeros((8, 12), np.int32), "scales": np.ones((2, 12), np.float16),
                           "qzeros": np.zeros((2, 1), np.int32)}, KaioValueError, "N = 12 must be a multiple of 8"),
    ("qzeros shape", {"qzeros": np.zeros((2, 16), np.int32)}, KaioTypeError, "`qzeros` must be int32 of shape .* \\(2, 2\\)"),
    ("f16 qzeros", {"qzeros": np.zeros((2, 2), np.float16)}, KaioTypeError, "`qzeros` must be int32"),
    ("bias shape", {"bias": np.zeros(15, np.float16)}, KaioTypeError, "`bias` must be f32 or f16 of shape \\(16,\\)"),
    ("bf16 bias for f16 x", {"bias": np.zeros(16, ml_dtypes.bfloat16)}, KaioTypeError, "`bias`"),
    ("act-order g_idx", {"g_idx": np.zeros(64, np.int32)}, KaioValueError, "act-order .*`g_idx`"),
]  # fmt: skip


@pytest.mark.parametrize("what,changes,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(what, changes, error, message):
    kw = {**_good(), **changes}
    with pytest.raises(error, match=message):
        w4a16_matmul(kw.pop("x"), kw.pop("qweight"), kw.pop("scales"), kw.pop("qzeros"), device="sim", **kw)


needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


SLOW = pytest.mark.slow


@needs_ptxas
@pytest.mark.parametrize("arch,m,x,group", [
    ("sm_80", 1, "f16", 128), ("sm_80", 64, "bf16", 64), ("sm_90a", 64, "f16", 128),
    pytest.param("sm_80", 64, "f16", 128, marks=SLOW), pytest.param("sm_80", 64, "bf16", 128, marks=SLOW),
    pytest.param("sm_80", 64, "f16", 32, marks=SLOW), pytest.param("sm_90a", 1, "bf16", 32, marks=SLOW),
])  # fmt: skip
def test_assembles_without_spills(arch, m, x, group):
    """Every tile config the op launches, with zeros and bias, f16 scales (bf16 x: the
    dequantisation goes through f32), one group per K step or one per word row."""
    t = dtypes.f16 if x == "f16" else dtypes.bf16
    config = choose_config(m, 4096, group, scales_in_t=x == "f16")
    kernel = w4a16_tile_kernel(t, dtypes.f16, dtypes.f32)
    compiled = kaio.compile(kernel, arch, BM=config.block_m, BN=config.block_n, BK=config.block_k, HAS_ZEROS=True,
                            HAS_BIAS=True, SCALES_IN_T=x == "f16", ROW_GROUPS=config.row_groups,
                            __divisible__=(("m", 16), ("n", 16), ("k", 16), ("group", 16)))  # fmt: skip
    report = toolchain.assemble(compiled.ptx, arch)
    print(f"{arch} {config}: {report.registers[compiled.name]} registers")
    assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
    if arch == "sm_80" and toolchain.find_cuobjdump() is not None and toolchain.find_nvdisasm() is not None:
        sass = toolchain.disassemble(report.cubin)
        assert re.search(r"\bHMMA\.16816\.F32", sass), "the dot is not on tensor cores"
