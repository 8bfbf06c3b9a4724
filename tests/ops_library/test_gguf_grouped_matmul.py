"""gguf_grouped_matmul on the simulator: each expert's rows against gguf's own decoding of its
blocks (float64), within gguf_matmul's prefill bound; empty experts, one token, every token on
one expert, groups that end inside a tile; outputs poisoned before launch; bad input named."""

import ml_dtypes
import numpy as np
import pytest
from .test_gguf_matmul import bound, random_weight, reference

import kaio
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import gguf_grouped_matmul

SIM = kaio.Device("sim")
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def offsets_of(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def check(rng, qtype, sizes, k, n, dtype="f16", device=SIM):
    off = offsets_of(sizes)
    ws = [random_weight(rng, qtype, n, k) for _ in sizes]
    x = rng.standard_normal((int(off[-1]), k)).astype(DTYPES[dtype])
    y = gguf_grouped_matmul(x, np.stack(ws), qtype, off, device=device)
    assert y.dtype == x.dtype and y.shape == (x.shape[0], n)
    got = y.astype(np.float64)
    assert np.isfinite(got).all(), "rows left unwritten (poisoned)"
    for e, w in enumerate(ws):
        rows = slice(off[e], off[e + 1])
        xe, we = x[rows].astype(np.float64), reference(w, qtype)
        limit = bound(xe, we, dtype, "F16")  # the prefill kernel's arithmetic (as for a float format)
        assert (np.abs(got[rows] - xe @ we.T) <= limit).all(), f"expert {e}"


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K", "MXFP4", "Q5_1", "F16"])
def test_each_expert_matches_gguf(rng, poison, qtype):
    check(rng, qtype, [20, 0, 45, 5], 256, 40)  # an empty expert, groups ending inside 32-row tiles


@pytest.mark.parametrize("sizes", [[0, 1, 0], [0, 0, 70], [3, 3, 3, 3]], ids=["one token", "all on one", "even"])
def test_group_shapes(rng, poison, sizes):
    check(rng, "Q4_0", sizes, 64, 72)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_activation_types(rng, poison, dtype):
    check(rng, "Q8_0", [9, 30], 64, 24, dtype)


def test_float_experts_given_as_their_own_type(rng, poison):
    check(rng, "BF16", [5, 12], 40, 16)  # K of no whole 32-element block


def test_torch_tensors_in_torch_tensors_out(rng):
    torch = pytest.importorskip("torch")
    off = offsets_of([4, 6])
    w = np.stack([random_weight(rng, "Q8_0", 8, 32) for _ in range(2)])
    x = torch.randn(10, 32, dtype=torch.float16)
    y = gguf_grouped_matmul(x, torch.from_numpy(w), "Q8_0", torch.from_numpy(off))
    want = gguf_grouped_matmul(x.numpy(), w, "Q8_0", off, device=SIM)
    assert isinstance(y, torch.Tensor) and np.array_equal(y.numpy(), want)
    with pytest.raises(KaioTypeError, match="records no gradient.*frozen"):
        gguf_grouped_matmul(x.clone().requires_grad_(True), torch.from_numpy(w), "Q8_0", torch.from_numpy(off))


def test_bad_input_is_named(rng):
    off = offsets_of([2, 2])
    w = np.stack([random_weight(rng, "Q8_0", 8, 32) for _ in range(2)])
    x = np.zeros((4, 32), np.float16)
    with pytest.raises(KaioTypeError, match="`weight` must be the experts' uint8 block bytes"):
        gguf_grouped_matmul(x, w[0], "Q8_0", off, device=SIM)
    with pytest.raises(KaioValueError, match="not the Q8_0 blocks of K = 64"):
        gguf_grouped_matmul(np.zeros((4, 64), np.float16), w, "Q8_0", off, device=SIM)
    with pytest.raises(KaioValueError, match="expert_offsets"):
        gguf_grouped_matmul(x, w, "Q8_0", offsets_of([1, 2]), device=SIM)
    with pytest.raises(KaioTypeError, match="`x` must be a 2-D"):
        gguf_grouped_matmul(x.astype(np.int32), w, "Q8_0", off, device=SIM)
    with pytest.raises(KaioValueError, match="qtype"):
        gguf_grouped_matmul(x, w, "Q9_9", off, device=SIM)


def test_programs_past_the_groups_tiles_read_no_weight(rng):
    """Decoding with many experts: the grid has a row of programs for each tile the groups could
    need (tokens / BM + E), most of them past the groups' own tiles; those read no weight block
    (their K loop is empty). The same 3 tokens on 2 experts of 16 and of 2 read the same weights:
    the 14 more experts add only the walks over the offsets (15 idle programs), less than one
    expert's blocks (each idle program read a whole one before)."""
    from .conftest import global_bytes

    qtype, k, n = "Q8_0", 256, 64
    used = [random_weight(rng, qtype, n, k) for _ in range(2)]
    x = rng.standard_normal((3, k)).astype(np.float16)

    def loaded(experts):
        weights = np.stack([random_weight(rng, qtype, n, k) for _ in range(experts)])
        weights[experts // 2 - 1], weights[-1] = used  # the tokens' experts
        sizes = [0] * experts
        sizes[experts // 2 - 1], sizes[-1] = 2, 1
        return global_bytes(SIM, lambda: gguf_grouped_matmul(x, weights, qtype, offsets_of(sizes), device=SIM))[0]

    extra = loaded(16) - loaded(2)
    assert 0 < extra < used[0].nbytes, (extra, used[0].nbytes)
