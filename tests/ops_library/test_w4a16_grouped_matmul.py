"""w4a16_grouped_matmul on the simulator: each expert's rows against the float64 product with
its own GPTQ weight (the w4a16_matmul tests' reference dequantisation); empty experts, one
token, all on one expert, groups that end inside a tile, zero points or symmetric, scales in
f16 or x's type; outputs poisoned; bad input named."""

import ml_dtypes
import numpy as np
import pytest

import kaio
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import w4a16_grouped_matmul

from .test_w4a16_matmul import dequantize_gptq, random_gptq, rel

SIM = kaio.Device("sim")
TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def offsets_of(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def check(rng, sizes, k, n, group_size, zeros, dtype="f16", scales_in_x=False, device=SIM):
    off = offsets_of(sizes)
    t = TYPES[dtype]
    experts = [random_gptq(rng, k, n, group_size, zeros, t if scales_in_x else np.float16) for _ in sizes]
    qweight, scales = np.stack([e[0] for e in experts]), np.stack([e[1] for e in experts])
    qzeros = np.stack([e[2] for e in experts]) if zeros else None
    x = rng.standard_normal((int(off[-1]), k)).astype(t)
    y = w4a16_grouped_matmul(x, qweight, scales, off, qzeros, group_size=group_size, device=device)
    assert y.dtype == x.dtype and y.shape == (x.shape[0], n)
    for e, (qw, sc, qz) in enumerate(experts):
        rows = slice(off[e], off[e + 1])
        if off[e] == off[e + 1]:
            continue
        want = x[rows].astype(np.float64) @ dequantize_gptq(qw, sc, qz, group_size).astype(np.float64)
        assert rel(y[rows], want) <= (1e-2 if dtype == "f16" else 3e-2), f"expert {e}"
    assert np.isfinite(y.astype(np.float64)).all()


@pytest.mark.parametrize(("group_size", "zeros"), [(128, True), (32, False), (-1, True)], ids=["g128 zeros", "g32", "per column"])
def test_each_expert_matches_its_gptq_weight(rng, poison, group_size, zeros):
    check(rng, [20, 0, 45, 5], 256, 64, group_size, zeros)  # an empty expert, groups ending inside tiles


@pytest.mark.parametrize("sizes", [[0, 1, 0], [0, 0, 70]], ids=["one token", "all on one"])
def test_group_shapes(rng, poison, sizes):
    check(rng, sizes, 128, 40, 64, True)


def test_bf16_with_scales_in_x_type(rng, poison):
    check(rng, [9, 30], 128, 24, 64, False, "bf16", scales_in_x=True)


def test_bad_input_is_named(rng):
    qw, sc, qz = random_gptq(rng, 64, 16, 32, True)
    qweight, scales, qzeros = qw[None].repeat(2, 0), sc[None].repeat(2, 0), qz[None].repeat(2, 0)
    x, off = np.zeros((4, 64), np.float16), offsets_of([2, 2])
    with pytest.raises(KaioTypeError, match="`qweight` must be a 3-D int32"):
        w4a16_grouped_matmul(x, qw, scales, off, group_size=32, device=SIM)
    with pytest.raises(KaioTypeError, match=r"`scales` must be .* \(2, 2, 16\)"):
        w4a16_grouped_matmul(x, qweight, sc, off, group_size=32, device=SIM)
    with pytest.raises(KaioTypeError, match="`qzeros` must be int32"):
        w4a16_grouped_matmul(x, qweight, scales, off, qzeros[:, :1], group_size=32, device=SIM)
    with pytest.raises(KaioValueError, match="`group_size`"):
        w4a16_grouped_matmul(x, qweight, scales, off, group_size=48, device=SIM)
    with pytest.raises(KaioValueError, match="expert_offsets"):
        w4a16_grouped_matmul(x, qweight, scales, offsets_of([1, 2]), group_size=32, device=SIM)
    torch = pytest.importorskip("torch")
    with pytest.raises(KaioTypeError, match="frozen"):
        w4a16_grouped_matmul(torch.zeros(4, 64, dtype=torch.float16, requires_grad=True), torch.from_numpy(qweight),
                             torch.from_numpy(scales), torch.from_numpy(off), group_size=32)  # fmt: skip


def test_programs_past_the_groups_tiles_read_no_weight(rng):
    """As gguf_grouped_matmul's: of the grid's tokens / BM + E rows of programs, those past the
    groups' tiles run no K loop, so 14 more experts (idle programs) add only the walks over the
    offsets, less than one expert's packed words (each idle program read a whole one before)."""
    from .conftest import global_bytes

    k, n = 1024, 64  # an expert's words (32 KiB) outweigh a walk's offsets
    used = [random_gptq(rng, k, n, 128, False, np.float16) for _ in range(2)]
    x = rng.standard_normal((3, k)).astype(np.float16)

    def loaded(count):
        experts = [random_gptq(rng, k, n, 128, False, np.float16) for _ in range(count)]
        experts[count // 2 - 1], experts[-1] = used  # the tokens' experts
        sizes = [0] * count
        sizes[count // 2 - 1], sizes[-1] = 2, 1
        qweight, scales = np.stack([e[0] for e in experts]), np.stack([e[1] for e in experts])
        run = lambda: w4a16_grouped_matmul(x, qweight, scales, offsets_of(sizes), group_size=128, device=SIM)  # noqa: E731
        return global_bytes(SIM, run)[0]

    extra = loaded(16) - loaded(2)
    assert 0 < extra < used[0][0].nbytes, (extra, used[0][0].nbytes)
