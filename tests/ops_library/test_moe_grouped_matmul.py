"""kaio.ops_library.grouped_matmul (ragged per-expert matmuls in one persistent launch) on the
simulator against float64 numpy."""

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import grouped_matmul
from kaio.ops_library.grouped_matmul import grouped_matmul_kernel

SIM = kaio.Device("sim")
IN = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"f32": 2e-3, "f16": 4e-3, "bf16": 2e-2}  # norm-relative, by output type (inputs rounded first)


def offsets_of(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def reference(x, w, offsets):
    y = np.zeros((x.shape[0], w.shape[2]))
    for e in range(w.shape[0]):
        lo, hi = offsets[e], offsets[e + 1]
        y[lo:hi] = x[lo:hi].astype(np.float64) @ w[e].astype(np.float64)
    return y


def check(rng, sizes, k, n, dtype="f16", out_dtype="f32", programs=None, device=SIM):
    offsets = offsets_of(sizes)
    x = rng.standard_normal((int(offsets[-1]), k)).astype(IN[dtype])
    w = rng.standard_normal((len(sizes), k, n)).astype(IN[dtype])
    y = grouped_matmul(x, w, offsets, out_dtype=out_dtype, programs=programs, device=device)
    want = reference(x, w, offsets)
    assert y.shape == want.shape and y.dtype == np.dtype(IN.get(out_dtype, np.float32))
    got = y.astype(np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN) rows"
    assert np.linalg.norm(got - want) <= TOL[out_dtype] * max(np.linalg.norm(want), 1e-30)
    return y


@pytest.mark.parametrize("dtype", list(IN))
@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16"])
def test_ragged_groups_with_empty_experts_match_float64(rng, poison, dtype, out_dtype):
    check(rng, [5, 0, 70, 1, 0], 40, 24, dtype, out_dtype)


@pytest.mark.parametrize("programs", [1, 3])
def test_few_programs_walk_every_tile_across_the_groups(rng, poison, programs):
    # 3 experts (not a power of two), groups spanning 1, 0, 3 M tiles, 2 N tiles: tiles of one
    # program fall in several groups and the cursor moves over an empty one
    check(rng, [17, 0, 130], 24, 72, programs=programs)


def test_one_token(rng, poison):
    check(rng, [0, 1, 0], 16, 8)


def test_all_tokens_on_one_expert(rng, poison):
    check(rng, [0, 0, 65, 0], 32, 16)  # empty experts before and after
    check(rng, [0, 0, 0, 9], 16, 16)  # the last one


def test_no_tokens(poison):
    y = grouped_matmul(np.zeros((0, 16), np.float16), np.zeros((2, 16, 8), np.float16), offsets_of([0, 0]),
                       device=SIM)  # fmt: skip
    assert y.shape == (0, 8) and y.dtype == np.float32


def test_torch_tensors_in_torch_tensors_out(rng, poison):
    torch = pytest.importorskip("torch")
    sizes = [3, 0, 6]
    x = torch.randn(9, 16, dtype=torch.bfloat16)
    w = torch.randn(3, 16, 8, dtype=torch.bfloat16)
    offsets = torch.from_numpy(offsets_of(sizes))
    y = grouped_matmul(x, w, offsets, out_dtype="bf16")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    want = reference(x.float().numpy(), w.float().numpy(), offsets.numpy())
    assert np.linalg.norm(y.double().numpy() - want) <= 2e-2 * np.linalg.norm(want)
    xg = x.clone().requires_grad_(True)  # autograd records it (torch.ops.kaio.grouped_matmul)
    assert grouped_matmul(xg, w, offsets).grad_fn is not None


@pytest.mark.parametrize("k", [32, 40])  # TMA loads of w (BK divides K), masked async copies
def test_wgmma_on_sm_90a(rng, poison, k):
    check(rng, [20, 0, 50], k, 64, "bf16", device=kaio.Device("sim", arch="sm_90a"))


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch fails the test: a refused call writes nothing."""

    def launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr(type(grouped_matmul_kernel(kaio.dtypes.f16, kaio.dtypes.f32)), "launch", launch)


X, W = np.zeros((6, 16), np.float16), np.zeros((3, 16, 8), np.float16)
GOOD = offsets_of([2, 0, 4])


@pytest.mark.parametrize("args, err, match", [
    (dict(expert_offsets=np.array([0, 4, 2, 6], np.int32)), KaioValueError, r"expert_offsets.*non-decreasing"),
    (dict(expert_offsets=np.array([0, 2, 2, 5], np.int32)), KaioValueError, r"expert_offsets.*token count 6"),
    (dict(expert_offsets=np.array([0, 2, 2, 7], np.int32)), KaioValueError, r"expert_offsets.*token count 6"),
    (dict(expert_offsets=np.array([1, 2, 2, 6], np.int32)), KaioValueError, r"expert_offsets`\[0\] must be 0"),
    (dict(expert_offsets=GOOD.astype(np.int64)), KaioTypeError, "expert_offsets"),
    (dict(expert_offsets=GOOD[:3]), KaioTypeError, "expert_offsets"),
    (dict(x=X.astype(np.float32)), KaioTypeError, "`x`"),
    (dict(w=W.astype(ml_dtypes.bfloat16)), KaioTypeError, "`w`"),
    (dict(w=np.zeros((3, 8, 8), np.float16)), KaioTypeError, "K sizes"),
    (dict(w=np.zeros((16, 8), np.float16)), KaioTypeError, "`w`"),
    (dict(x=np.zeros((6, 16, 1), np.float16)), KaioTypeError, "`x`"),
    (dict(out_dtype="f64"), KaioValueError, "out_dtype"),
    (dict(programs=0), KaioTypeError, "programs"),
])  # fmt: skip
def test_bad_input_names_the_argument_before_any_launch(no_launch, args, err, match):
    call = {"x": X, "w": W, "expert_offsets": GOOD, **args}
    with pytest.raises(err, match=match):
        grouped_matmul(call.pop("x"), call.pop("w"), call.pop("expert_offsets"), device=SIM, **call)


def test_offsets_on_the_device_are_read_back_and_checked(no_launch):
    with pytest.raises(KaioValueError, match="expert_offsets"):
        grouped_matmul(SIM.alloc_from(X), SIM.alloc_from(W), SIM.alloc_from(np.array([0, 3, 1, 6], np.int32)))
