"""int8_matmul (W8A8) and quantize_int8 on the simulator: bit-exact int32 products (unit scales,
f32 output, sums that f32 holds exactly), the scaled epilogue in every output type against numpy
doing the same f32 operations, ragged M/N/K on sm_80 and sm_90a, the per-row quantiser against
numpy's rint, Buffers and torch tensors in and out, each bad input named, ptxas without spills.
Fresh random inputs, outputs poisoned before launch (the ``poison`` fixture)."""

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library import int8_matmul, quantize_int8
from kaio.ops_library.scaled_matmul import block_m, scaled_matmul_kernel
from kaio.targets.ptx import toolchain

import kaio
from kaio import dtypes
from kaio.errors import KaioTargetError, KaioTypeError, KaioValueError

OUT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def exact(a, b):
    return a.astype(np.int64) @ b.astype(np.int64)


@pytest.mark.parametrize("arch,m,n,k", [("sm_80", 1, 8, 32), ("sm_80", 70, 17, 160), ("sm_90a", 33, 130, 100)])
def test_int32_products_are_bit_exact(rng, poison, arch, m, n, k):
    a, b = int8(rng, (m, k)), int8(rng, (k, n))
    dev = kaio.Device("sim", arch=arch)
    got = int8_matmul(a, b, np.ones(m, np.float32), np.ones(n, np.float32), out_dtype="f32", device=dev)
    want = exact(a, b)
    assert np.abs(want).max() < 2**24  # f32 holds every sum exactly: the comparison sees the int32
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_column_major_b(rng, poison, arch):
    """b = w.T of an (N, K) weight (torch._scaled_mm's B): read K-major (ldmatrix; wgmma on sm_90a)."""
    m, n, k = 70, 80, 128
    a, w = int8(rng, (m, k)), int8(rng, (n, k))
    got = int8_matmul(a, w.T, np.ones(m, np.float32), np.ones(n, np.float32), out_dtype="f32", device=kaio.Device("sim", arch=arch))
    np.testing.assert_array_equal(got, exact(a, w.T).astype(np.float32))


@pytest.mark.parametrize("out,bias", [("f16", None), ("bf16", "f32"), ("f32", "out")])
def test_scales_and_bias_in_the_epilogue(rng, poison, out, bias):
    m, n, k = 40, 24, 96
    a, b = int8(rng, (m, k)), int8(rng, (k, n))
    sa = (rng.random(m) * 1e-3).astype(np.float32)
    sb = (rng.random(n) * 1e-2).astype(np.float32)
    bias_arr = None if bias is None else rng.standard_normal(n).astype(np.float32 if bias == "f32" else OUT[out])
    got = int8_matmul(a, b, sa, sb, bias=bias_arr, out_dtype=out, device="sim")
    want = exact(a, b).astype(np.float32) * sa[:, None] * sb[None, :]  # the kernel's f32 operations, in order
    if bias_arr is not None:
        want = want + bias_arr.astype(np.float32)
    assert got.dtype == OUT[out] and got.shape == (m, n)
    np.testing.assert_array_equal(got, want.astype(OUT[out]))


def test_quantize_int8_matches_numpy(rng, poison):
    m, k = 37, 300
    x = (rng.standard_normal((m, k)) * rng.random((m, 1)) * 10).astype(np.float32)
    x[5] = 0.0  # a zero row: scale 0, q 0
    x[6, :4] = [2.5, -2.5, 1.5, 0.5]  # ties after scaling by 127 / 127 (row amax 127)
    x[6, 4] = 127.0
    q, scale = quantize_int8(x, device="sim")
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    want = np.clip(np.rint(x * inv[:, None]), -127, 127).astype(np.int8)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (m,)
    np.testing.assert_array_equal(scale, amax / np.float32(127))
    np.testing.assert_array_equal(q, want)
    assert list(q[6, :4]) == [2, -2, 2, 0]  # half to even
    assert not q[5].any() and scale[5] == 0


def test_quantize_then_matmul_approximates_the_float_product(rng):
    x = rng.standard_normal((20, 128)).astype(np.float16)
    w = rng.standard_normal((128, 48)).astype(np.float32)
    qw, sw = quantize_int8(np.ascontiguousarray(w.T), device="sim")  # per output column of w
    qx, sx = quantize_int8(x, device="sim")
    y = int8_matmul(qx, np.ascontiguousarray(qw.T), sx, sw, out_dtype="f32", device="sim")
    want = x.astype(np.float64) @ w
    assert np.linalg.norm(y - want) / np.linalg.norm(want) < 2e-2


def test_buffers_in_buffer_out_and_empty_k(poison):
    dev = kaio.Device("sim", arch="sm_80")
    a, b = dev.alloc_from(np.zeros((3, 0), np.int8)), dev.alloc_from(np.zeros((0, 8), np.int8))
    bias = np.arange(8, dtype=np.float32)
    got = int8_matmul(a, b, dev.alloc_from(np.ones(3, np.float32)), dev.alloc_from(np.ones(8, np.float32)),
                      bias=dev.alloc_from(bias), out_dtype="f32")  # fmt: skip
    assert isinstance(got, kaio.Buffer)
    np.testing.assert_array_equal(got.to_host(), np.broadcast_to(bias, (3, 8)))


def test_torch_tensors_in_tensor_out(rng):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rng.standard_normal((4, 64)).astype(np.float32))
    q, s = quantize_int8(x)
    assert isinstance(q, torch.Tensor) and q.dtype == torch.int8 and s.dtype == torch.float32
    b = torch.from_numpy(int8(rng, (16, 64))).t()  # column-major, as torch._int_mm / _scaled_mm take B
    y = int8_matmul(q, b, s, torch.ones(16), out_dtype="bf16")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and tuple(y.shape) == (4, 16)
    want = (exact(q.numpy(), b.numpy()).astype(np.float32) * s.numpy()[:, None]).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.float().numpy(), want.astype(np.float32))
    assert torch.ops.kaio.int8_matmul.default is not None and torch.ops.kaio.quantize_int8.default is not None


def _good():
    return {"a": np.ones((4, 64), np.int8), "b": np.ones((64, 16), np.int8),
            "scale_a": np.ones(4, np.float32), "scale_b": np.ones(16, np.float32)}  # fmt: skip


BAD = [  # (what is wrong, changes to a good call, error, what the message names)
    ("f16 a", {"a": np.ones((4, 64), np.float16)}, KaioTypeError, "`a` must be a 2-D i8 array"),
    ("u8 b", {"b": np.ones((64, 16), np.uint8)}, KaioTypeError, "`b` must be a 2-D i8 array"),
    ("1-D a", {"a": np.ones(64, np.int8)}, KaioTypeError, "`a` must be a 2-D"),
    ("K mismatch", {"b": np.ones((32, 16), np.int8)}, KaioValueError, "K differs"),
    ("scale_a shape", {"scale_a": np.ones(5, np.float32)}, KaioTypeError, r"`scale_a` must be f32 of shape \(4,\)"),
    ("per-tensor scale_b", {"scale_b": np.ones(1, np.float32)}, KaioTypeError, r"`scale_b` must be f32 of shape \(16,\)"),
    ("f16 scale_b", {"scale_b": np.ones(16, np.float16)}, KaioTypeError, "`scale_b` must be f32"),
    ("bias shape", {"bias": np.ones(15, np.float32)}, KaioTypeError, r"`bias` must be f32 or f16 of shape \(16,\)"),
    ("out_dtype", {"out_dtype": "i32"}, KaioValueError, "`out_dtype` must be one of"),
]  # fmt: skip


@pytest.mark.parametrize("what,changes,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(what, changes, error, message):
    kw = {**_good(), **changes}
    with pytest.raises(error, match=message):
        int8_matmul(kw.pop("a"), kw.pop("b"), kw.pop("scale_a"), kw.pop("scale_b"), device="sim", **kw)


def test_bad_quantize_input_is_named():
    with pytest.raises(KaioTypeError, match="quantize_int8: `x` must be a 2-D f16, bf16 or f32"):
        quantize_int8(np.ones((4, 4), np.int8), device="sim")
    with pytest.raises(KaioTypeError, match="`x` must be a 2-D"):
        quantize_int8(np.ones(4, np.float32), device="sim")


def test_an_arch_without_int8_tensor_cores_is_refused():
    with pytest.raises(KaioTargetError, match=r"int8_matmul: int8 tensor cores .* needs sm_80"):
        int8_matmul(*_good().values(), device=kaio.Device("sim", arch="sm_75"))


needs_ptxas = pytest.mark.skipif(toolchain.find_ptxas() is None, reason="nvidia-cuda-nvcc-cu12 not installed")


@needs_ptxas
@pytest.mark.parametrize("arch,m,k_major", [("sm_80", 1, False), ("sm_80", 64, True), ("sm_90a", 64, False), ("sm_90a", 64, True)])
def test_assembles_without_spills(arch, m, k_major):
    kernel = scaled_matmul_kernel(dtypes.i8, dtypes.i8, dtypes.i32, dtypes.bf16, dtypes.f32)
    compiled = kaio.compile(kernel, arch, BM=block_m(m), BN=128, BK=64, HAS_BIAS=True, B_K_MAJOR=k_major,
                            specialization={"a": 16, "b": 16, "y": 16, "m": 16, "n": 16, "k": 64})  # fmt: skip
    wgmma = arch == "sm_90a" and k_major
    assert ("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8" if wgmma else "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") in compiled.ptx
    report = toolchain.assemble(compiled.ptx, arch)
    print(f"{arch} m={m}: {report.registers[compiled.name]} registers")
    assert report.spill_stores[compiled.name] == 0 and report.spill_loads[compiled.name] == 0
