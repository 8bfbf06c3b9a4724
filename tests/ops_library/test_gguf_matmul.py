"""kaio.ops_library.gguf_matmul against llama.cpp's own Python package: weights quantised by
``gguf.quants.quantize`` (Q8_0, Q4_0) or random valid blocks (the K-quants, which it cannot
quantise), decoded by ``gguf.quants.dequantize``; every format, decode (M <= 8, 8-bit
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
SUPER_SCALES = {"Q8_0": [0], "Q4_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}  # f16 fields (bytes)


def random_weight(rng: np.random.Generator, qtype: str, n: int, k: int) -> np.ndarray:
    """(N, K_bytes) uint8 blocks: gguf's quantisation of random weights where it has one, else
    random bytes with small positive f16 super-scales (every quant, scale and min random)."""
    if qtype in ("Q8_0", "Q4_0"):
        return quantize(rng.standard_normal((n, k)).astype(np.float32), GGML[qtype])
    fmt = FORMATS[qtype]
    raw = rng.integers(0, 256, (n, k // fmt.elements, fmt.nbytes), dtype=np.uint8)
    for at in SUPER_SCALES[qtype]:
        scale = (rng.random((n, k // fmt.elements, 1)) * 0.01 + 0.001).astype(np.float16)
        raw[:, :, at : at + 2] = scale.view(np.uint8)
    return raw.reshape(n, -1)


def bound(x: np.ndarray, w: np.ndarray, dtype: str) -> np.ndarray:
    """What each output may differ from ``x @ w.T`` (float64) by. Decode: x is rounded to
    ``dx * q`` with ``dx = max|x block| / 127`` (at most dx / 2 per element; the integer sums
    and two scale products are exact or f32); prefill: W (and f32 x, as tf32) rounded to x's
    type, f32 accumulation. Both: the result rounded to x's type."""
    m, k = x.shape
    absx, absw = np.abs(x), np.abs(w)
    eps = UNIT_ROUNDOFF[dtype]
    if m <= DECODE_ROWS:
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
    wd = dequantize(w, GGML[qtype]).astype(np.float64)
    xd = x.astype(np.float64)
    err, limit = np.abs(got - xd @ wd.T), bound(xd, wd, dtype)
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
    ("unknown name", {"qtype": "Q3_K"}, KaioValueError, "`qtype` 'Q3_K' is not one of the supported formats Q8_0"),
    ("unsupported gguf type", {"qtype": GGML.Q2_K}, KaioValueError, "`qtype` .*Q2_K.* is not one of the supported"),
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
    formats = {"F": f.code, "QK": f.elements, "NB": f.nbytes, "D_AT": f.d_at, "DMIN_AT": f.dmin_at}
    if m > DECODE_ROWS:
        return [kaio.compile(gguf_tile_kernel(dtypes.f16), arch, BM=64, BN=64, **formats)]
    decode = gguf_decode_kernel(dtypes.f16)
    return [kaio.compile(decode, arch, BM=decode_rows(m), BN=DECODE_COLS, STEP=f.decode_step, **formats),
            kaio.compile(quantize_tile_kernel(dtypes.f16), arch, R=32)]  # fmt: skip


@needs_ptxas
@pytest.mark.parametrize("qtype,arch,m", [("Q6_K", "sm_80", 1), ("Q6_K", "sm_90a", 8), ("Q5_K", "sm_80", 64),
                                          pytest.param("Q5_K", "sm_90a", 64, marks=slow),
                                          pytest.param("Q4_K", "sm_80", 8, marks=slow)])  # fmt: skip
def test_assembles_without_spills(qtype, arch, m):
    """The heaviest decoders (Q6_K: the most code per step, Q5_K: the most bytes per element)
    assemble without spills on both paths; the decode products are dp4a, the prefill dot is on
    tensor cores."""
    for compiled in builds(qtype, arch, m):
        report = toolchain.assemble(compiled.ptx, arch)
        print(f"{arch} {qtype} {compiled.name}: {report.registers[compiled.name]} registers")
        assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
        if compiled.name == "gguf_decode":
            assert "dp4a.s32.s32" in compiled.ptx
    if m > DECODE_ROWS and arch == "sm_80" and toolchain.find_cuobjdump() is not None and toolchain.find_nvdisasm() is not None:
        sass = toolchain.disassemble(toolchain.assemble(compiled.ptx, arch).cubin)
        assert re.search(r"\bHMMA\.16816\.F32", sass), "the prefill dot is not on tensor cores"
