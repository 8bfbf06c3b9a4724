"""kaio.ops_library.moe_align against vLLM's golden moe_align_block_size (a stable sort by
expert, each expert's run padded to whole blocks with the value T * k)."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError, KaioValueError
from kaio.ops_library import moe_align
from kaio.ops_library.moe_align import moe_prefix

SIM = kaio.Device("sim")


def golden(ids, experts, block):
    flat = np.asarray(ids).reshape(-1)
    n = flat.size
    length = n + experts * (block - 1)
    sorted_ids = np.full(length, n, np.int32)
    expert_ids = np.zeros(-(-length // block), np.int32)
    order = np.argsort(flat, kind="stable")
    pos = blk = 0
    for e in range(experts):
        mine = order[flat[order] == e]
        if len(mine):
            sorted_ids[pos : pos + len(mine)] = mine
            blocks = -(-len(mine) // block)
            expert_ids[blk : blk + blocks] = e
            pos, blk = pos + blocks * block, blk + blocks
    return sorted_ids, expert_ids, np.array([pos], np.int32)


def check(ids, experts, block):
    got = moe_align(ids, experts, block, device=SIM)
    for name, g, w in zip(("sorted_ids", "expert_ids", "num_post"), got, golden(ids, experts, block), strict=True):
        assert g.dtype == np.int32, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def routed(rng, t, k, experts):
    """Each token's k distinct experts, as a router gives them."""
    return np.stack([rng.permutation(experts)[:k] for _ in range(t)]).astype(np.int32)


def test_vllm_docstring_example(poison):
    ids = np.array([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], np.int32) - 1  # vLLM's, ids from 0
    sorted_ids, expert_ids, num_post = moe_align(ids, 4, 4, device=SIM)
    np.testing.assert_array_equal(sorted_ids[:16], [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12])
    np.testing.assert_array_equal(expert_ids[:4], [0, 1, 2, 3])
    assert num_post.tolist() == [16]
    check(ids, 4, 4)


@pytest.mark.parametrize("t, k, experts, block", [(37, 3, 11, 8), (20, 2, 8, 16), (9, 5, 5, 1), (70, 1, 3, 4)])
def test_random_routings_match_the_golden_reference(rng, poison, t, k, experts, block):
    check(routed(rng, t, k, experts), experts, block)


def test_empty_experts_take_no_block(poison):
    ids = np.array([[5, 1], [5, 1], [1, 5]], np.int32)
    sorted_ids, expert_ids, num_post = moe_align(ids, 7, 4, device=SIM)
    assert num_post.tolist() == [8]
    np.testing.assert_array_equal(expert_ids[:2], [1, 5])
    check(ids, 7, 4)


def test_one_token_and_all_tokens_on_one_expert(rng, poison):
    check(np.array([[3]], np.int32), 4, 16)
    check(np.full((50, 1), 2, np.int32), 3, 16)


def test_no_tokens(poison):
    check(np.zeros((0, 2), np.int32), 3, 4)  # all padding: T * k = 0 everywhere, no block


def test_many_chunks_and_experts(rng, poison):
    check(rng.integers(0, 300, (200, 2)).astype(np.int32), 300, 32)  # EP 512: 16 entries per chunk


def test_int64_flat_and_torch_ids(rng, poison):
    check(routed(rng, 6, 2, 5).astype(np.int64), 5, 4)
    check(routed(rng, 6, 2, 5).reshape(-1), 5, 4)
    torch = pytest.importorskip("torch")
    ids = torch.from_numpy(routed(rng, 6, 2, 5))
    got = moe_align(ids, 5, 4)
    assert all(isinstance(g, torch.Tensor) for g in got)
    for g, w in zip(got, golden(ids.numpy(), 5, 4), strict=True):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch fails the test: a refused call writes nothing."""

    def launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr(type(moe_prefix), "launch", launch)


@pytest.mark.parametrize("ids, experts, block, err, match", [
    (np.array([[0, 4]], np.int32), 4, 8, KaioValueError, r"`ids`\[0, 1\] = 4"),
    (np.array([[0, -1]], np.int32), 4, 8, KaioValueError, "ids"),
    (np.array([[0, 1]], np.float32), 4, 8, KaioTypeError, "ids"),
    (np.array([[0, 1]], np.int16), 4, 8, KaioTypeError, "ids"),
    (np.zeros((1, 1, 2), np.int32), 4, 8, KaioTypeError, "ids"),
    (np.array([[0, 1]], np.int32), 0, 8, KaioValueError, "num_experts"),
    (np.array([[0, 1]], np.int32), 4.0, 8, KaioTypeError, "num_experts"),
    (np.array([[0, 1]], np.int32), 4, 0, KaioValueError, "block"),
    (np.array([[0, 1]], np.int32), 2000, 8, KaioValueError, "num_experts"),
])  # fmt: skip
def test_bad_input_names_the_argument_before_any_launch(no_launch, ids, experts, block, err, match):
    with pytest.raises(err, match=match):
        moe_align(ids, experts, block, device=SIM)


def test_out_of_range_ids_on_the_device_are_read_back_and_refused(no_launch):
    buf = SIM.alloc_from(np.array([[1, 9]], np.int32))
    with pytest.raises(KaioValueError, match="ids"):
        moe_align(buf, 4, 8)
