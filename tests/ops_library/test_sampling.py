"""sample: greedy ids are numpy's argmax; tempered ids are the Gumbel-max of kaio.random's
stream, and their frequencies follow softmax(logits / temperature)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kaio
import kaio.random as kr
from kaio.ops_library import sample

TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def logits(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return (rng.standard_normal(shape) * 3).astype(TYPES[dtype])


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("shape", [(1, 7), (6, 1000), (2, 3, 50), (3, 5000)], ids=str)
def test_greedy_is_numpys_argmax(dtype, shape):
    rng = np.random.default_rng()
    x = logits(rng, shape, dtype)
    ids = sample(x)
    assert ids.dtype == np.int32 and ids.shape == shape[:-1]
    np.testing.assert_array_equal(ids, np.argmax(x.astype(np.float32), -1))


def test_equal_maxima_give_the_first_within_a_block_and_across_blocks():
    x = np.full((3, 9000), -1.0, np.float32)
    x[0, [5, 17]] = 2.0  # one block
    x[1, [4100, 8200]] = 2.0  # two blocks after the first (4096 columns each)
    x[2, [3, 4099]] = 2.0  # the first block and the next
    np.testing.assert_array_equal(sample(x), [5, 4100, 3])


def test_a_row_of_minus_infinity_gives_zero():
    x = np.full((2, 40), -np.inf, np.float16)
    x[1, 33] = 0
    np.testing.assert_array_equal(sample(x), [0, 33])
    np.testing.assert_array_equal(sample(x, temperature=1.0, seed=1), [0, 33])


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("shape", [(4, 300), (2, 6000)], ids=str)
def test_tempered_ids_are_the_gumbel_max_of_kaios_random_stream(dtype, shape):
    rng = np.random.default_rng()
    x = logits(rng, shape, dtype)
    temperature, seed, offset = 0.7, int(rng.integers(2**40)), int(rng.integers(1000))
    ids = sample(x, temperature=temperature, seed=seed, offset=offset)
    counter = np.arange(x.size).reshape(x.shape) + offset
    g = x.astype(np.float64) / temperature - np.log(-np.log(kr.rand(seed, counter).astype(np.float64)))
    picked = np.take_along_axis(g, ids[:, None].astype(np.int64), -1)[:, 0]
    # the kernel's f32 log may break a near-tie the other way: the pick is a maximum to f32 rounding
    np.testing.assert_allclose(picked, g.max(-1), rtol=1e-5, atol=1e-5)
    top2 = np.sort(g, -1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4  # rows whose maximum f32 rounding cannot move
    np.testing.assert_array_equal(ids[clear], np.argmax(g, -1)[clear])


def test_tempered_frequencies_follow_the_softmax():
    rng = np.random.default_rng()
    row = rng.standard_normal(8).astype(np.float32)
    rows = 4000
    x = np.tile(row, (rows, 1))
    for temperature in (0.5, 2.0):
        ids = sample(x, temperature=temperature, seed=int(rng.integers(2**40)))
        p = np.exp(row / temperature - np.max(row / temperature))
        p /= p.sum()
        freq = np.bincount(ids, minlength=8) / rows
        # five standard errors of a binomial frequency: a wrong sign of the noise, a missing
        # temperature or a biased uniform all miss by far more
        np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / rows) + 1e-3)


def test_each_offset_draws_anew_and_the_same_offset_replays():
    x = np.zeros((64, 16), np.float32)  # uniform rows: the ids are the noise alone
    a = sample(x, temperature=1.0, seed=5, offset=0)
    np.testing.assert_array_equal(a, sample(x, temperature=1.0, seed=5, offset=0))
    assert not np.array_equal(a, sample(x, temperature=1.0, seed=5, offset=x.size))
    assert a.min() >= 0 and a.max() < 16


def test_torch_tensors_in_give_torch_ids_out():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 100, dtype=torch.bfloat16, requires_grad=True)
    ids = sample(x)
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int32
    torch.testing.assert_close(ids, torch.argmax(x.detach().float(), -1).to(torch.int32))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"temperature": -1.0}, kaio.KaioValueError, "temperature"),
        ({"temperature": float("nan")}, kaio.KaioValueError, "temperature"),
        ({"temperature": True}, kaio.KaioValueError, "temperature"),
        ({"offset": -1}, kaio.KaioValueError, "offset"),
        ({"offset": 2**31, "temperature": 1.0}, kaio.KaioValueError, "offset"),
        ({"seed": 1.5}, kaio.KaioTypeError, "seed"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        sample(np.zeros((2, 4), np.float32), **kwargs)


def test_bad_logits_are_named():
    with pytest.raises(kaio.KaioTypeError, match="logits.*f16, bf16 or f32"):
        sample(np.zeros((2, 4), np.int32))
    with pytest.raises(kaio.KaioTypeError, match="logits"):
        sample(np.zeros((), np.float32))
    with pytest.raises(kaio.KaioValueError, match="no columns"):
        sample(np.zeros((2, 0), np.float32))
    assert sample(np.zeros((0, 4), np.float32)).shape == (0,)
