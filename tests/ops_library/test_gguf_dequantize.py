"""The GGUF decoders bit for bit: ``kaio.ops_library.gguf_matmul.dequantize`` (the prefill
kernel's own decoding, storing W instead of multiplying) against ``gguf.quants.dequantize``,
llama.cpp's Python decoder, compared as f32 bits (the sign of a zero included), on random
blocks (every byte random, the f16 super-scales any finite value: subnormals, both signs, both
zeros) and on edge blocks (zero, negative-zero and extreme scales, all quants at their maximum,
MXFP4's extreme exponents). Fresh random inputs, outputs poisoned before launch. The matmul
itself is held to its arithmetic's bound in test_gguf_matmul.py."""

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library.gguf_blocks import FORMATS
from kaio.ops_library.gguf_matmul import dequantize

import kaio
from kaio.errors import KaioTypeError, KaioValueError

gguf = pytest.importorskip("gguf")  # the oracle: llama.cpp's own decoder (a test extra)
GGML = gguf.GGMLQuantizationType

QUANTISED = [name for name, f in FORMATS.items() if not f.passthrough]
FLOAT_BITS = {"F32": (np.uint32, np.float32, 8, 23), "F16": (np.uint16, np.float16, 5, 10), "BF16": (np.uint16, None, 8, 7)}
EDGE_HALVES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]  # 0, -0, subnormals, extremes, +-1
EDGE_EXPONENTS = [0, 1, 2, 3, 100, 127, 128, 200, 253, 254, 255]  # MXFP4: subnormal scales .. 2**127


def super_scale_bytes(name: str) -> list[int]:
    """Where a format's f16 super-scales sit (bytes): ``d`` and ``dmin`` / ``m``; MXFP4: none."""
    f = FORMATS[name]
    return [] if name == "MXFP4" else [2 * at for at in (f.d_at, f.dmin_at) if at >= 0]


def finite_halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random f16 bit patterns, every exponent but the one of inf and NaN."""
    bits = rng.integers(0, 1 << 16, shape, dtype=np.uint32).astype(np.uint16)
    return np.where(bits & 0x7C00 == 0x7C00, bits & 0xBFFF, bits).astype(np.uint16)


def random_blocks(rng: np.random.Generator, name: str, n: int, blocks: int) -> np.ndarray:
    """(N, blocks * NB): every byte random, the super-scales finite."""
    f = FORMATS[name]
    raw = rng.integers(0, 256, (n, blocks, f.nbytes), dtype=np.uint8)
    for at in super_scale_bytes(name):
        raw[:, :, at : at + 2] = finite_halves(rng, (n, blocks, 1)).view(np.uint8)
    return raw.reshape(n, -1)


def edge_blocks(rng: np.random.Generator, name: str) -> np.ndarray:
    """One row per case, one block each: all bytes 0 and all 0xFF (the largest quants, scales
    and mins) under each edge super-scale (or MXFP4 exponent), and random quants under each."""
    f = FORMATS[name]
    rows = []
    scales = EDGE_EXPONENTS if name == "MXFP4" else EDGE_HALVES
    for fill in (0x00, 0xFF, None):
        for i, scale in enumerate(scales):
            block = np.full(f.nbytes, fill, np.uint8) if fill is not None else rng.integers(0, 256, f.nbytes, dtype=np.uint8)
            if name == "MXFP4":
                block[0] = scale
            for r, at in enumerate(super_scale_bytes(name)):  # dmin takes another edge value than d
                block[at : at + 2] = np.array([scales[(i + 3 * r) % len(scales)]], np.uint16).view(np.uint8)
            rows.append(block)
    return np.stack(rows)


def float_weights(rng: np.random.Generator, name: str, n: int, k: int) -> np.ndarray:
    """Random finite bit patterns of a float format (subnormals and both zeros included)."""
    ubits, _, exp_bits, man_bits = FLOAT_BITS[name]
    width = 8 * np.dtype(ubits).itemsize
    bits = rng.integers(0, 1 << width, (n, k), dtype=np.uint64).astype(ubits)
    top = ubits(((1 << exp_bits) - 1) << man_bits)
    bits = np.where(bits & top == top, bits & ~ubits(1 << (width - 2)), bits).astype(ubits)  # inf/NaN -> finite
    bits[0, :4] = [0, 1 << (width - 1), 1, top - 1]  # +0, -0, the smallest subnormal, the largest finite
    return bits.view(np.uint8).reshape(n, -1)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    diff = got.view(np.uint32) != want.astype(np.float32).view(np.uint32)
    if diff.any():
        i = tuple(np.argwhere(diff)[0])
        raise AssertionError(f"{diff.sum()} of {diff.size} elements differ; first at {i}: {got[i]!r}, gguf {want[i]!r}")


def sim():
    return kaio.Device("sim", arch="sm_80")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("name", QUANTISED)
def test_random_blocks_bit_exact(name, poison):
    """Two blocks a row (K-quants: K 512, the 32-blocks 64), 37 rows (a partial program)."""
    rng = np.random.default_rng()
    w = random_blocks(rng, name, 37, 2)
    same_bits(dequantize(w, name, device=sim()), gguf.quants.dequantize(w, GGML[name]))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("name", QUANTISED)
def test_edge_blocks_bit_exact(name, poison):
    rng = np.random.default_rng()
    w = edge_blocks(rng, name)
    want = gguf.quants.dequantize(w, GGML[name])
    assert not np.isnan(want).any()  # the edge cases are NaN-free (MXFP4's 2**127 gives inf: compared too)
    same_bits(dequantize(w, name, device=sim()), want)


@pytest.mark.parametrize("name", list(FLOAT_BITS))
def test_float_formats_pass_through(name, poison):
    """F32/F16/BF16 as their bytes, odd K: the weights themselves, widened to f32 exactly."""
    rng = np.random.default_rng()
    w = float_weights(rng, name, 5, 37)
    same_bits(dequantize(w, name, device=sim()), gguf.quants.dequantize(w, GGML[name]).reshape(5, 37))
    if name != "BF16":  # given as its own type (GGUFReader's tensor.data of an F16/F32 tensor)
        typed = w.view(FLOAT_BITS[name][1])
        same_bits(dequantize(typed, name, device=sim()), typed.astype(np.float32))
    else:
        typed = w.view(ml_dtypes.bfloat16)
        same_bits(dequantize(typed, name, device=sim()), typed.astype(np.float32))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # gguf's own 2**127 * 12
def test_edge_cases_reach_the_edges():
    """The edge blocks hold what they claim: gguf decodes them to zeros of both signs (the
    signed scales of Q3_K and IQ4_XS under a zero scale), extremes, and MXFP4's f32 subnormals
    and infinities."""
    rng = np.random.default_rng()
    for name in ("Q3_K", "IQ4_XS"):
        want = gguf.quants.dequantize(edge_blocks(rng, name), GGML[name])
        zeros = np.signbit(want[want == 0])
        assert zeros.any() and not zeros.all() and np.abs(want).max() > 1e6
    mx = gguf.quants.dequantize(edge_blocks(rng, "MXFP4"), GGML.MXFP4)
    assert ((mx != 0) & (np.abs(mx) < np.finfo(np.float32).tiny)).any() and np.isinf(mx).any()


@pytest.mark.parametrize(
    "weight,qtype,error,message",
    [
        (np.zeros((3, 143), np.uint8), "Q4_K", KaioValueError, "`weight` rows of 143 bytes are not whole Q4_K blocks"),
        (np.zeros((3, 34), np.int8), "Q8_0", KaioTypeError, "`weight` must be the 2-D uint8 block bytes"),
        (np.zeros((3, 34), np.uint8), "IQ1_S", KaioValueError, "`qtype` 'IQ1_S' is not one of the supported formats"),
        (np.zeros((3, 34), np.uint8), GGML.TQ1_0, KaioValueError, "`qtype` .*TQ1_0.* is not one of the supported"),
    ],
    ids=["byte count", "dtype", "unknown name", "unknown gguf type"],
)
def test_bad_input_is_named(weight, qtype, error, message):
    with pytest.raises(error, match=message):
        dequantize(weight, qtype, device="sim")
