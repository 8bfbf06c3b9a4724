"""kaio.ops_library.GGUFLinear (gguf_linear): a GGUF file's tensors, written by
``gguf.GGUFWriter`` and read back by ``gguf.GGUFReader``, as linear layers taken as they are
(quantised blocks, F16 and F32 as their own types, BF16 as bytes): each runs gguf_matmul on the
stored bytes (the same result bit for bit), decodes to gguf's own dequantisation bit for bit,
and is close to x @ W.T; numpy, kaio Buffers and torch tensors in, the same kind out. A tensor
of an unsupported type, one that is not 2-D, or one whose bytes do not match its type and
shape is refused naming the argument, before any launch. Fresh random inputs, outputs
poisoned."""

import ml_dtypes
import numpy as np
import pytest
from kaio.ops_library import GGUFLinear, gguf_matmul
from kaio.ops_library.gguf_blocks import FORMATS
from kaio.ops_library.gguf_linear import gguf_linear

import kaio
from kaio.errors import KaioTypeError, KaioValueError

gguf = pytest.importorskip("gguf")
GGML = gguf.GGMLQuantizationType
SIM = "sim"


def blocks(rng: np.random.Generator, name: str, n: int, k: int) -> np.ndarray:
    """Random valid blocks: random bytes, small f16 super-scales (MXFP4: a small exponent)."""
    f = FORMATS[name]
    raw = rng.integers(0, 256, (n, k // f.elements, f.nbytes), dtype=np.uint8)
    if name == "MXFP4":
        raw[:, :, 0] = rng.integers(118, 126, raw.shape[:2])
    else:
        for at in (f.d_at, f.dmin_at):
            if at >= 0:
                raw[:, :, 2 * at : 2 * at + 2] = (rng.random(raw.shape[:2] + (1,)) * 0.01 + 0.001).astype(np.float16).view(np.uint8)
    return raw.reshape(n, -1)


@pytest.fixture
def model(tmp_path):
    """A small GGUF file: (name, qtype, K, N) each, and the arrays written."""
    rng = np.random.default_rng()
    layers = {
        "blk.0.attn_q.weight": ("Q4_K", 256, 40),
        "blk.0.ffn_up.weight": ("MXFP4", 64, 24),
        "blk.0.attn_k.weight": ("Q3_K", 256, 8),
        "output.weight": ("F16", 48, 20),
        "blk.0.ffn_down.weight": ("F32", 33, 12),
        "token_embd.weight": ("BF16", 40, 16),
    }
    written = {}
    writer = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    for name, (qtype, k, n) in layers.items():
        if qtype == "F16":
            arr = rng.standard_normal((n, k)).astype(np.float16)
            writer.add_tensor(name, arr)
        elif qtype == "F32":
            arr = rng.standard_normal((n, k)).astype(np.float32)
            writer.add_tensor(name, arr)
        elif qtype == "BF16":
            arr = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16).view(np.uint8)
            writer.add_tensor(name, arr, raw_dtype=GGML.BF16)
        else:
            arr = blocks(rng, qtype, n, k)
            writer.add_tensor(name, arr, raw_dtype=GGML[qtype])
        written[name] = arr
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(48, np.float32))  # 1-D: no linear layer
    writer.add_tensor("blk.0.ffn_gate_exps.weight", blocks(rng, "Q8_0", 2 * 4, 32).reshape(2, 4, -1), raw_dtype=GGML.Q8_0)
    writer.add_tensor("blk.0.ffn_odd.weight", np.zeros((4, 66), np.uint8), raw_dtype=GGML.TQ2_0)  # a type kaio lacks
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gguf.GGUFReader(str(tmp_path / "tiny.gguf")), layers, written


def test_each_tensor_as_stored(model, poison):
    reader, layers, written = model
    rng = np.random.default_rng()
    for name, (qtype, k, n) in layers.items():
        layer = gguf_linear(reader, name)
        assert isinstance(layer, GGUFLinear) and (layer.qtype, layer.in_features, layer.out_features) == (qtype, k, n)
        tensor = next(t for t in reader.tensors if t.name == name)
        deq = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(n, k)
        got_w = layer.dequantize(device=SIM)
        assert np.array_equal(got_w.view(np.uint32), deq.astype(np.float32).view(np.uint32)), name
        for m in (1, 12):  # the decoding and the prefill path
            x = rng.standard_normal((m, k)).astype(np.float16)
            y = layer(x, device=SIM)
            assert y.shape == (m, n) and y.dtype == np.float16
            assert np.array_equal(y, gguf_matmul(x, written[name], qtype, device=SIM)), name
            ref = x.astype(np.float64) @ deq.astype(np.float64).T
            scale = np.abs(x).astype(np.float64) @ np.abs(deq).astype(np.float64).T
            assert (np.abs(y - ref) <= 0.03 * scale + 1e-3).all(), name


def test_buffers_and_torch(model):
    reader, _, _ = model
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 256)).astype(np.float16)
    layer = GGUFLinear(reader, "blk.0.attn_q.weight")
    want = layer(x, device=SIM)
    dev = kaio.Device("sim")
    assert np.array_equal(layer.to(dev)(dev.alloc_from(x)).to_host(), want)
    torch = pytest.importorskip("torch")
    got = GGUFLinear(reader, "blk.0.attn_q.weight")(torch.from_numpy(x))
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), want)
    single = GGUFLinear(next(t for t in reader.tensors if t.name == "output.weight"))  # one tensor, no name
    assert single.qtype == "F16" and "output.weight" in repr(single)


def test_bad_tensors_are_named(model):
    reader, _, _ = model
    with pytest.raises(KaioValueError, match="`name` 'blk.0.attn_o.weight' is not a tensor of `reader`"):
        gguf_linear(reader, "blk.0.attn_o.weight")
    with pytest.raises(KaioValueError, match="tensor 'blk.0.ffn_odd.weight' of `reader` has GGUF type 'TQ2_0'"):
        gguf_linear(reader, "blk.0.ffn_odd.weight")
    with pytest.raises(KaioValueError, match="GGUF shape \\(48,\\); a linear layer's weight is 2-D"):
        gguf_linear(reader, "blk.0.attn_norm.weight")
    with pytest.raises(KaioValueError, match="GGUF shape \\(32, 4, 2\\)"):
        gguf_linear(reader, "blk.0.ffn_gate_exps.weight")
    with pytest.raises(KaioTypeError, match="`reader` must be a gguf.GGUFReader"):
        gguf_linear("model.gguf", "output.weight")
    with pytest.raises(KaioTypeError, match="`name` must be a tensor's name"):
        gguf_linear(reader, 3)
    # a tensor whose bytes do not match its type and shape: one block short, or one byte over
    t = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    with pytest.raises(KaioValueError, match="holds 5616 bytes, but Q4_K of GGUF shape \\(256, 40\\) takes 5760"):
        GGUFLinear(t._replace(data=t.data[:39]))
    with pytest.raises(KaioValueError, match="takes 5760 \\(40 rows of 144\\)"):
        GGUFLinear(t._replace(data=np.zeros(5761, np.uint8)))
    with pytest.raises(KaioValueError, match="100 input features are not whole Q4_K blocks of 256"):
        GGUFLinear(t._replace(shape=np.array([100, 40], np.uint64)))
