"""Random numbers as Triton has them: ``rand randn randint randint4x`` in SIMT and tile kernels
and ``kaio.random`` on the host give Triton's bits (its interpreter where triton is installed,
and pinned values); seeds past 2**32, 64-bit offsets, every seed type; constant folding; the
``kernel.philox`` op's verifier and text form; errors for what is not an integer."""

from __future__ import annotations

import os

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import kaio
import kaio.random as kr
import kaio.tile as kt
from kaio.prelude import MutArray, block_dim_x, block_idx_x, f32, i32, i64, rand, randint, randint4x, randn, thread_idx_x, u32, u64

N = 4096
SEEDS = [0, 1, 12345, 2**32 + 7, 2**63 - 5, 2**64 - 3]

# Triton 3.9's own values (its interpreter, TRITON_INTERPRET=1), offsets 0, 1, 2
PINNED = {
    0: ([1713891541, -119223132, 83534633], [0.7980929017066956, 0.055517591536045074, 0.03889884054660797]),
    2**32 + 7: ([1505935688, 232970672, -84903966], [0.7012559175491333, 0.10848541557788849, 0.0395364873111248]),
}


@kaio.gpu_kernel(block_size=128)
def simt_numbers(words: MutArray[i32], uniform: MutArray[f32], normal: MutArray[f32], seed: u64, n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        offset = i32(i)
        a, b, c, d = randint4x(seed, offset)
        words[i * 5 + 0] = randint(seed, offset)
        words[i * 5 + 1] = a
        words[i * 5 + 2] = b
        words[i * 5 + 3] = c
        words[i * 5 + 4] = d
        uniform[i] = rand(seed, offset)
        normal[i] = randn(seed, offset)


@kaio.tile_kernel(num_warps=4)
def tile_numbers(words: MutArray[i32], uniform: MutArray[f32], normal: MutArray[f32], seed: u64, base: i64, n: i32,
                 BLOCK: kaio.constexpr = 512):  # fmt: skip
    idx = i32(kt.program_id(0)) * BLOCK + kt.arange(BLOCK)
    offs = base + i64(idx)  # 64-bit counters: the high word goes into Philox's second counter word
    m = idx < n
    a, b, c, d = kt.randint4x(seed, offs)
    kt.store(words, idx * 4 + 0, a, mask=m)
    kt.store(words, idx * 4 + 1, b, mask=m)
    kt.store(words, idx * 4 + 2, c, mask=m)
    kt.store(words, idx * 4 + 3, d, mask=m)
    kt.store(uniform, idx, kt.rand(seed, offs), mask=m)
    kt.store(normal, idx, kt.randn(seed, offs), mask=m)


@kaio.gpu_kernel(block_size=32)
def seed_types(out: MutArray[i32], s32: i32, s64: i64, r: u32):
    i = thread_idx_x()
    if i == 0:
        out[0] = randint(s32, 7)  # an i32 seed is sign-extended to 64 bits, as Triton's
        out[1] = randint(s64, i32(r))
        out[2] = randint(2**40 + 9, i32(r))  # a literal seed past 2**32
        out[3] = randint(99, 5)  # both constant: folded
        out[4] = randint(u32(5), 3, n_rounds=7)  # another round count


def _close_normal(got: np.ndarray, want: np.ndarray) -> None:
    """Box-Muller through the GPU's log, sqrt and cos: within a few units in the last place."""
    np.testing.assert_allclose(got, want, rtol=4 * 2.0**-23, atol=4 * 2.0**-23)


def test_the_host_reference_has_trittons_pinned_values() -> None:
    for seed, (words, uniforms) in PINNED.items():
        offs = np.arange(3, dtype=np.int32)
        assert kr.randint(seed, offs).tolist() == words
        assert kr.rand(seed, offs).tolist() == [np.float32(u) for u in uniforms]


TRITON_NUMBERS = """
import sys
import numpy as np, torch, triton, triton.language as tl

@triton.jit
def numbers(words, uniform, normal, seed, base, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    offs = base + i.to(tl.int64)
    a, b, c, d = tl.randint4x(seed, offs)
    tl.store(words + i * 4, a)
    tl.store(words + i * 4 + 1, b)
    tl.store(words + i * 4 + 2, c)
    tl.store(words + i * 4 + 3, d)
    tl.store(uniform + i, tl.rand(seed, offs))
    tl.store(normal + i, tl.randn(seed, offs))

out, n = sys.argv[1], int(sys.argv[2])
results = {}
for seed in map(int, sys.argv[3].split(",")):
    for base in (0, 3 * 2**32 + 5):
        words, uniform, normal = torch.zeros(4 * n, dtype=torch.int32), torch.zeros(n), torch.zeros(n)
        numbers[(1,)](words, uniform, normal, seed, base, BLOCK=n)
        for name, t in (("words", words), ("uniform", uniform), ("normal", normal)):
            results[f"{name}_{seed}_{base}"] = t.numpy()
np.savez(out, **results)
"""


def test_the_host_reference_matches_tritons_interpreter(tmp_path) -> None:
    """Triton's interpreter (TRITON_INTERPRET=1, read when triton is imported: its own process)
    runs tl.randint4x / tl.rand / tl.randn; kaio.random must give the same bits."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    out = tmp_path / "triton.npz"
    seeds = SEEDS[:-1]  # past 2**63 - 1 Triton takes the int as uint64: the same key, shown below
    subprocess.run([sys.executable, "-c", TRITON_NUMBERS, str(out), str(N), ",".join(map(str, seeds))],
                   env={**os.environ, "TRITON_INTERPRET": "1"}, check=True, timeout=300)  # fmt: skip
    triton = np.load(out)
    dev = kaio.Device("sim")
    for seed in seeds:
        for base in (0, 3 * 2**32 + 5):
            offs = base + np.arange(N, dtype=np.int64)
            words, uniform, normal = (triton[f"{name}_{seed}_{base}"] for name in ("words", "uniform", "normal"))
            np.testing.assert_array_equal(words.reshape(N, 4), np.stack(kr.randint4x(seed, offs), 1))
            np.testing.assert_array_equal(uniform.view(np.uint32), kr.rand(seed, offs).view(np.uint32))
            np.testing.assert_array_equal(normal, kr.randn(seed, offs))
            # and kt.randint4x / kt.rand themselves, on the simulator, against Triton's own numbers
            got_words = dev.alloc_from(np.full(4 * N, -1, np.int32))
            got_uniform, got_normal = (dev.alloc_from(np.full(N, np.nan, np.float32)) for _ in range(2))
            tile_numbers[N // 512](got_words, got_uniform, got_normal, seed, base, N)
            np.testing.assert_array_equal(got_words.to_host(), words)
            np.testing.assert_array_equal(got_uniform.to_host().view(np.uint32), uniform.view(np.uint32))
            _close_normal(got_normal.to_host(), normal)
    assert kr.seed_words(2**64 - 3) == kr.seed_words(-3)  # a seed is taken modulo 2**64


@pytest.mark.parametrize("seed", SEEDS)
def test_simt_kernels_give_the_references_bits(seed: int) -> None:
    dev = kaio.Device("sim")
    words = dev.alloc_from(np.full(5 * N, -1, np.int32))
    uniform, normal = (dev.alloc_from(np.full(N, np.nan, np.float32)) for _ in range(2))
    simt_numbers[N // 128](words, uniform, normal, seed, N)
    offs = np.arange(N, dtype=np.int32)
    got = words.to_host().reshape(N, 5)
    np.testing.assert_array_equal(got[:, 0], kr.randint(seed, offs))
    np.testing.assert_array_equal(got[:, 1:], np.stack(kr.randint4x(seed, offs), 1))
    np.testing.assert_array_equal(uniform.to_host().view(np.uint32), kr.rand(seed, offs).view(np.uint32))
    _close_normal(normal.to_host(), kr.randn(seed, offs))


@pytest.mark.parametrize("seed, base", [(0, 0), (2**32 + 7, 3 * 2**32 + 5), (2**64 - 3, -(2**40))])
def test_tile_kernels_give_the_references_bits(seed: int, base: int) -> None:
    dev = kaio.Device("sim")
    n = N - 100  # a partial last program
    words = dev.alloc_from(np.full(4 * n, -1, np.int32))
    uniform, normal = (dev.alloc_from(np.full(n, np.nan, np.float32)) for _ in range(2))
    tile_numbers[kaio.cdiv(n, 512)](words, uniform, normal, seed, base, n)
    offs = base + np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(words.to_host().reshape(n, 4), np.stack(kr.randint4x(seed, offs), 1))
    np.testing.assert_array_equal(uniform.to_host().view(np.uint32), kr.rand(seed, offs).view(np.uint32))
    _close_normal(normal.to_host(), kr.randn(seed, offs))
    assert ((0 <= uniform.to_host()) & (uniform.to_host() < 1)).all()


def test_seed_types_literals_folding_and_round_counts() -> None:
    dev = kaio.Device("sim")
    out = dev.alloc_from(np.full(5, -1, np.int32))
    seed_types[1](out, -3, -(2**40), 11)
    got = out.to_host()
    assert got[0] == kr.randint(-3, np.int32(7))
    assert got[1] == kr.randint(-(2**40), np.int32(11))
    assert got[2] == kr.randint(2**40 + 9, np.int32(11))
    assert got[3] == kr.randint(99, np.int32(5))
    assert got[4] == kr.randint(5, np.int32(3), rounds=7)
    ptx = kaio.compile(seed_types, arch="sm_80").ptx
    assert "mul.hi.u32" in ptx and "mul.lo.u32" in ptx


def test_uniforms_are_in_range_at_the_extreme_words() -> None:
    words = np.array([0, 1, -1, 2**31 - 1, -(2**31)], np.int32)
    u = kr.uniform(words)
    assert ((0 <= u) & (u < 1)).all() and u[3] == u[4] and u.max() < 1


def test_philox_op_verifies_and_round_trips() -> None:
    from xdsl.context import Context
    from xdsl.dialects import arith, builtin
    from xdsl.parser import Parser

    from kaio.dialects.kernel import Kernel
    from kaio.dialects.kernel_random import PhiloxOp

    zero = arith.ConstantOp.from_int_and_width(0, 32)
    op = PhiloxOp((zero.result,) * 4, (zero.result,) * 2, rounds=10)
    op.verify()
    module = builtin.ModuleOp([zero, op])
    ctx = Context()
    for dialect in (builtin.Builtin, arith.Arith, Kernel):
        ctx.load_dialect(dialect)
    text = str(module)
    assert "kernel.philox" in text and "rounds 10" in text
    assert str(Parser(ctx, text).parse_module()) == text
    with pytest.raises(VerifyException, match="rounds must be 1 .. 64"):
        PhiloxOp((zero.result,) * 4, (zero.result,) * 2, rounds=0).verify()


@pytest.mark.parametrize(
    "body, message",
    [
        ("out[0] = f32(rand(1.5, 3))", "`rand`'s seed must be an integer, got float"),
        ("out[0] = rand(7, f32(x))", "`rand`'s offset must be an integer, got f32"),
        ("out[0] = rand(7, 3, n_rounds=i32(x))", "n_rounds must be a compile-time integer in 1 .. 64"),
        ("out[0] = randn(7, 3, n_rounds=0)", "n_rounds must be a compile-time integer in 1 .. 64"),
    ],
)
def test_what_is_not_an_integer_is_a_compile_error(compile_error, body: str, message: str) -> None:
    err = compile_error(f"""
@kaio.gpu_kernel(block_size=32)
def bad(out: MutArray[f32], x: f32):
    {body}
""")
    assert message in str(err) and err.line == 4


def test_a_host_seed_that_is_not_an_integer_is_refused() -> None:
    with pytest.raises(kaio.KaioTypeError, match="a random seed must be an integer, got float"):
        kr.rand(1.5, np.arange(4))
    with pytest.raises(kaio.KaioTypeError, match="random offsets must be integers"):
        kr.rand(1, np.arange(4.0))
