"""kaio.ops_library.gguf_matmul against llama.cpp's own Python package: weights quantised by
``gguf.quants.quantize`` (Q8_0, Q4_0) or random valid blocks (the other formats: every quant,
scale and min random), decoded by ``gguf.quants.dequantize``; every format (the float ones
given as their own type), decode (M <= 8, 8-bit
activations) and prefill (tensor cores) row counts, ragged N, f16/bf16/f32 activations, sm_80
and sm_90a on the simulator. Each output is held to a bound derived from the path's arithmetic
(the 8-bit rounding of x, or the rounding of W to x's type), tight enough to catch one misread
field. Fresh random inputs, outputs poisoned before launch; every bad input is named; the
kernels assemble without spills."""

import re

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library import gguf_matmul
from kaio.ops_library.gguf_blocks import FORMATS
from kaio.ops_library.gguf_matmul import (
    DECODE_COLS,
    DECODE_ROWS,
    decode_rows,
    format_args,
    gguf_decode_kernel,
    gguf_tile_kernel,
    quantize_tile_kernel,
)
from kaio.targets.ptx import toolchain

import kaio
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError

gguf = pytest.importorskip("gguf")  # the oracle: llama.cpp's own decoder (a test extra)
GGML = gguf.GGMLQuantizationType
dequantize, quantize = gguf.quants.dequantize, gguf.quants.quantize

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
UNIT_ROUNDOFF = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-11}  # f32 dots may run as tf32
FLOATS = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}  # weights as they are


def super_scales(qtype: str) -> list[int]:
    """The bytes of a format's f16 super-scales (``d``, and ``dmin`` or Q4_1's/Q5_1's ``m``)."""
    fmt = FORMATS[qtype]
    return [2 * at for at in (fmt.d_at, fmt.dmin_at) if at >= 0 and qtype != "MXFP4"]


def random_weight(rng: np.random.Generator, qtype: str, n: int, k: int) -> np.ndarray:
    """(N, K_bytes) uint8 blocks: gguf's quantisation of random weights where it has one, else
    random bytes with small positive f16 super-scales (MXFP4: exponents 2**-10 .. 2**-3); the
    float formats: random weights of their type, (N, K)."""
    if qtype in FLOATS:
        return rng.standard_normal((n, k)).astype(FLOATS[qtype])
    if qtype in ("Q8_0", "Q4_0"):
        return quantize(rng.standard_normal((n, k)).astype(np.float32), GGML[qtype])
    fmt = FORMATS[qtype]
    raw = rng.integers(0, 256, (n, k // fmt.elements, fmt.nbytes), dtype=np.uint8)
    for at in super_scales(qtype):
        scale = (rng.random((n, k // fmt.elements, 1)) * 0.01 + 0.001).astype(np.float16)
        raw[:, :, at : at + 2] = scale.view(np.uint8)
    if qtype == "MXFP4":
        raw[:, :, 0] = rng.integers(118, 126, (n, k // fmt.elements))
    return raw.reshape(n, -1)


def reference(w: np.ndarray, qtype: str) -> np.ndarray:
    """gguf's decoding of the weight as the test passes it, float64."""
    if qtype in FLOATS:
        return w.astype(np.float64)
    return dequantize(w, GGML[qtype]).astype(np.float64)


def bound(x: np.ndarray, w: np.ndarray, dtype: str, qtype: str = "Q8_0") -> np.ndarray:
    """What each output may differ from ``x @ w.T`` (float64) by. Decode: x is rounded to
    ``dx * q`` with ``dx = max|x block| / 127`` (at most dx / 2 per element; the integer sums
    and two scale products are exact or f32); prefill (and the float formats at every M): W
    (and f32 x, as tf32) rounded to x's type, f32 accumulation. Both: the result rounded to
    x's type."""
    m, k = x.shape
    absx, absw = np.abs(x), np.abs(w)
    eps = UNIT_ROUNDOFF[dtype]
    if m <= DECODE_ROWS and qtype not in FLOATS:
        dx = np.abs(x.reshape(m, -1, 32)).max(-1) / 127
        err = np.einsum("mb,nbj->mn", 0.5001 * dx, absw.reshape(w.shape[0], -1, 32)) + 1e-5 * absx @ absw.T
    else:
        err = absx @ absw.T * (3 * eps + k * 2.0**-24)
    return err + eps * np.abs(x @ w.T) + 1e-30


# Every format at M 1 and 3 (decode: one program for every row of x, BM 1 and 4 with a masked
# row) and 16 and 100 (prefill), ragged N (37: one partial program; 136 = 128 + 8: a decode
# program past the first), K of one or two blocks. One case per format runs by default, the
# dtypes and archs rotating; the rest are slow (the simulator runs every thread of every program).
slow = pytest.mark.slow
CASES = [  # qtype, m, k, n, x dtype, arch
    ("Q8_0", 1, 64, 37, "f16", "sm_80"),
    pytest.param("Q8_0", 3, 128, 136, "bf16", "sm_90a", marks=slow),
    pytest.param("Q8_0", 16, 64, 37, "f32", "sm_80", marks=slow),
    pytest.param("Q8_0", 100, 64, 37, "f16", "sm_90a", marks=slow),
    pytest.param("Q4_0", 1, 64, 136, "bf16", "sm_80", marks=slow),
    ("Q4_0", 3, 64, 37, "f32", "sm_90a"),
    pytest.param("Q4_0", 16, 64, 37, "f16", "sm_90a", marks=slow),
    pytest.param("Q4_0", 100, 64, 37, "bf16", "sm_80", marks=slow),
    pytest.param("Q4_K", 1, 512, 37, "f32", "sm_90a", marks=slow),
    pytest.param("Q4_K", 3, 256, 37, "f16", "sm_80", marks=slow),
    ("Q4_K", 16, 256, 37, "bf16", "sm_80"),
    pytest.param("Q4_K", 100, 256, 37, "f16", "sm_80", marks=slow),
    pytest.param("Q5_K", 1, 256, 37, "f16", "sm_80", marks=slow),
    ("Q5_K", 3, 256, 37, "bf16", "sm_80"),
    pytest.param("Q5_K", 16, 256, 37, "f32", "sm_80", marks=slow),
    pytest.param("Q5_K", 100, 256, 37, "bf16", "sm_90a", marks=slow),
    ("Q6_K", 1, 256, 37, "f16", "sm_80"),
    pytest.param("Q6_K", 3, 512, 136, "f32", "sm_80", marks=slow),
    pytest.param("Q6_K", 16, 256, 37, "f16", "sm_90a", marks=slow),
    pytest.param("Q6_K", 100, 256, 37, "f16", "sm_80", marks=slow),
    # the newer formats: each decoder by default (its own dp4a code), prefill (the decoding
    # dequantize checks bit for bit) once for a 32-block and once for a K-quant
    ("Q4_1", 1, 64, 136, "f16", "sm_80"),
    pytest.param("Q4_1", 40, 64, 37, "bf16", "sm_90a", marks=slow),
    ("Q5_0", 3, 64, 37, "bf16", "sm_80"),
    ("Q5_0", 16, 64, 37, "f16", "sm_80"),
    ("Q5_1", 1, 64, 37, "f32", "sm_90a"),
    pytest.param("Q5_1", 16, 64, 37, "f16", "sm_80", marks=slow),
    ("Q2_K", 1, 256, 37, "f16", "sm_80"),
    pytest.param("Q2_K", 3, 512, 136, "bf16", "sm_90a", marks=slow),
    pytest.param("Q2_K", 16, 256, 37, "f16", "sm_80", marks=slow),
    ("Q3_K", 3, 256, 37, "f16", "sm_80"),
    pytest.param("Q3_K", 1, 512, 37, "f32", "sm_80", marks=slow),
    ("Q3_K", 16, 256, 37, "bf16", "sm_80"),
    ("IQ4_NL", 1, 64, 37, "bf16", "sm_80"),
    pytest.param("IQ4_NL", 16, 64, 37, "f16", "sm_90a", marks=slow),
    ("IQ4_XS", 2, 256, 37, "f16", "sm_90a"),
    pytest.param("IQ4_XS", 1, 512, 136, "f16", "sm_80", marks=slow),
    pytest.param("IQ4_XS", 16, 256, 37, "f32", "sm_80", marks=slow),
    ("MXFP4", 1, 96, 37, "f16", "sm_80"),  # 3 blocks of 17 bytes: rows of odd length
    pytest.param("MXFP4", 16, 96, 37, "bf16", "sm_80", marks=slow),
    ("F16", 1, 45, 37, "f16", "sm_80"),  # the float formats: any K
    pytest.param("F16", 20, 64, 37, "bf16", "sm_80", marks=slow),
    ("BF16", 3, 37, 37, "bf16", "sm_80"),
    ("F32", 16, 33, 37, "f32", "sm_80"),
    pytest.param("F32", 1, 64, 37, "f16", "sm_90a", marks=slow),
]


@pytest.mark.parametrize("qtype,m,k,n,dtype,arch", CASES, ids=lambda v: str(v))
def test_matches_gguf_dequantize(qtype, m, k, n, dtype, arch, poison):
    rng = np.random.default_rng()
    w = random_weight(rng, qtype, n, k)
    x = rng.standard_normal((m, k)).astype(DTYPES[dtype])
    got = gguf_matmul(x, w, qtype, device=kaio.Device("sim", arch=arch))
    assert isinstance(got, np.ndarray) and got.shape == (m, n) and got.dtype == x.dtype
    got = got.astype(np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) or non-finite elements"
    wd, xd = reference(w, qtype), x.astype(np.float64)
    err, limit = np.abs(got - xd @ wd.T), bound(xd, wd, dtype, qtype)
    assert (err <= limit).all(), f"worst error {np.max(err / limit):.3g}x the bound"


@pytest.mark.parametrize("m", [2, 40], ids=["decode", "prefill"])
def test_bound_catches_a_misread_field(m):
    """The bound above is tight enough to see one layout slip: Q4_0's nibble halves swapped
    (elements 0..15 read from the high nibbles) breaks it, on both paths."""
    rng = np.random.default_rng()
    w = random_weight(rng, "Q4_0", 16, 64)
    x = rng.standard_normal((m, 64)).astype(np.float16).astype(np.float64)
    got = gguf_matmul(x.astype(np.float16), w, "Q4_0", device=kaio.Device("sim", arch="sm_80")).astype(np.float64)
    blocks = w.reshape(16, -1, 18).copy()
    blocks[:, :, 2:] = (blocks[:, :, 2:] >> 4) | (blocks[:, :, 2:] << 4)  # the nibble halves swapped
    swapped = dequantize(blocks.reshape(16, -1), GGML.Q4_0).astype(np.float64)
    assert (np.abs(got - x @ dequantize(w, GGML.Q4_0).astype(np.float64).T) <= bound(x, swapped, "f16")).all()
    assert not (np.abs(got - x @ swapped.T) <= bound(x, swapped, "f16")).all()


def test_qtype_as_gguf_enum_buffers_and_empty(poison):
    """A GGMLQuantizationType names the format as its name does; kaio Buffers give a Buffer;
    K = 0 (no blocks) and N = 0 give zeros and an empty result."""
    rng = np.random.default_rng()
    dev = kaio.Device("sim", arch="sm_80")
    w = random_weight(rng, "Q8_0", 24, 64)
    x = rng.standard_normal((2, 64)).astype(np.float16)
    got = gguf_matmul(dev.alloc_from(x), dev.alloc_from(w), GGML.Q8_0)
    assert isinstance(got, kaio.Buffer)
    assert np.array_equal(got.to_host(), gguf_matmul(x, w, "q8_0", device=dev))
    empty_k = gguf_matmul(np.zeros((3, 0), np.float16), np.zeros((5, 0), np.uint8), "Q6_K", device=dev)
    assert np.array_equal(empty_k, np.zeros((3, 5), np.float16))
    assert gguf_matmul(x, np.zeros((0, 68), np.uint8), "Q8_0", device=dev).shape == (2, 0)


def test_torch_tensors_in_tensor_out():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    w = random_weight(rng, "Q4_K", 40, 256)
    x = rng.standard_normal((20, 256)).astype(np.float16)
    got = gguf_matmul(torch.from_numpy(x), torch.from_numpy(w), GGML.Q4_K)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float16 and tuple(got.shape) == (20, 40)
    xd, wd = x.astype(np.float64), dequantize(w, GGML.Q4_K).astype(np.float64)
    assert (np.abs(got.numpy() - xd @ wd.T) <= bound(xd, wd, "f16")).all()
    with pytest.raises(KaioTypeError, match="no backward"):
        gguf_matmul(torch.from_numpy(x).requires_grad_(True), torch.from_numpy(w), "Q4_K")
    wf = rng.standard_normal((40, 256)).astype(np.float16)  # an F16 tensor as its own type
    got = gguf_matmul(torch.from_numpy(x), torch.from_numpy(wf), GGML.F16)
    assert isinstance(got, torch.Tensor) and tuple(got.shape) == (20, 40)
    assert np.array_equal(got.numpy(), gguf_matmul(x, wf.view(np.uint8), "F16"))


class NotGguf:
    """An enum-like qtype that is no format: refused, not guessed at."""


BAD = [  # (what is wrong, changes to a good call, error, what the message names)
    ("f64 x", {"x": np.ones((2, 64))}, KaioTypeError, "`x` must be a 2-D f16, bf16 or f32"),
    ("1-D x", {"x": np.ones(64, np.float16)}, KaioTypeError, "`x` must be a 2-D"),
    ("int8 weight", {"weight": np.zeros((4, 68), np.int8)}, KaioTypeError, "`weight` must be the 2-D uint8"),
    ("1-D weight", {"weight": np.zeros(68, np.uint8)}, KaioTypeError, "`weight` must be the 2-D uint8"),
    ("partial block", {"weight": np.zeros((4, 67), np.uint8)}, KaioValueError,
     "`weight` rows of 67 bytes are not whole Q8_0 blocks \\(34 bytes per 32"),
    ("K of x", {"x": np.ones((2, 96), np.float16)}, KaioValueError, "`x` has K = 96 .* 2 Q8_0 blocks .*K = 64"),
    ("other format's K", {"qtype": "Q4_K"}, KaioValueError, "not whole Q4_K blocks"),
    ("unknown name", {"qtype": "IQ2_XXS"}, KaioValueError, "`qtype` 'IQ2_XXS' is not one of the supported formats Q8_0"),
    ("unsupported gguf type", {"qtype": GGML.IQ2_XXS}, KaioValueError, "`qtype` .*IQ2_XXS.* is not one of the supported"),
    ("MXFP4 byte count", {"qtype": "MXFP4", "weight": np.zeros((4, 36), np.uint8)}, KaioValueError,
     "`weight` rows of 36 bytes are not whole MXFP4 blocks \\(17 bytes per 32"),
    ("float weight of another type", {"qtype": "F16", "weight": np.zeros((4, 64), np.float32)}, KaioTypeError,
     "`weight` must be 2-D uint8 bytes \\(N, K_bytes\\) or F16 \\(N, K\\)"),
    ("float weight's K", {"qtype": "F32", "weight": np.zeros((4, 32), np.float32)}, KaioValueError,
     "`x` has K = 64 .*K = 32"),
    ("qtype number", {"qtype": 8}, KaioTypeError, "`qtype` must be a format name or a gguf.GGMLQuantizationType"),
    ("qtype object", {"qtype": NotGguf()}, KaioTypeError, "`qtype` must be a format name"),
]  # fmt: skip


@pytest.mark.parametrize("what,changes,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(what, changes, error, message):
    kw = {"x": np.ones((2, 64), np.float16), "weight": np.zeros((4, 68), np.uint8), "qtype": "Q8_0", **changes}
    with pytest.raises(error, match=message):
        gguf_matmul(kw["x"], kw["weight"], kw["qtype"], device="sim")


needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


def builds(qtype, arch, m):
    """The kernels a call with M rows of x launches (the activation quantiser with decode)."""
    f = FORMATS[qtype]
    formats, h = format_args(f), dtypes.u8 if qtype == "MXFP4" else dtypes.f16
    if m > DECODE_ROWS:
        return [kaio.compile(gguf_tile_kernel(dtypes.f16, h), arch, BM=64, BN=64, NS=f.scale_bytes, **formats)]
    decode = gguf_decode_kernel(dtypes.f16, h)
    return [kaio.compile(decode, arch, BM=decode_rows(m), BN=DECODE_COLS, STEP=f.decode_step, **formats),
            kaio.compile(quantize_tile_kernel(dtypes.f16), arch, R=32)]  # fmt: skip


@needs_ptxas
@pytest.mark.parametrize("qtype,arch,m", [("Q6_K", "sm_80", 1), ("Q6_K", "sm_90a", 8), ("Q5_K", "sm_80", 64),
                                          ("Q3_K", "sm_80", 8), ("MXFP4", "sm_80", 8),
                                          pytest.param("Q3_K", "sm_90a", 64, marks=slow),
                                          pytest.param("IQ4_XS", "sm_80", 8, marks=slow),
                                          pytest.param("Q5_K", "sm_90a", 64, marks=slow),
                                          pytest.param("Q4_K", "sm_80", 8, marks=slow)])  # fmt: skip
def test_assembles_without_spills(qtype, arch, m):
    """The heaviest decoders (Q6_K and Q3_K: the most code per step, Q5_K: the most bytes per
    element, MXFP4: bytes and table lookups) assemble without spills on both paths; the decode
    products are dp4a, the prefill dot is on tensor cores."""
    for compiled in builds(qtype, arch, m):
        report = toolchain.assemble(compiled.ptx, arch)
        print(f"{arch} {qtype} {compiled.name}: {report.registers[compiled.name]} registers")
        assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
        if compiled.name == "gguf_decode":
            assert "dp4a.s32.s32" in compiled.ptx
    if m > DECODE_ROWS and arch == "sm_80" and toolchain.find_cuobjdump() is not None and toolchain.find_nvdisasm() is not None:
        sass = toolchain.disassemble(toolchain.assemble(compiled.ptx, arch).cubin)
        assert re.search(r"\bHMMA\.16816\.F32", sass), "the prefill dot is not on tensor cores"
