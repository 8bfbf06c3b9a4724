"""Specializations made visible: ``kaio.compile(..., specialization=)`` compiles what a launch
ran, ``kernel.specializations()`` / ``kernel.last_compiled()`` show it, and dumps go to one
folder per specialization."""

from __future__ import annotations

import numpy as np
import pytest

import kaio
import kaio.tile as kt
from kaio import Array, MutArray, Specialization
from kaio.dtypes import f32, i32
from kaio.errors import KaioTypeError
from kaio.prelude import block_dim_x, block_idx_x, thread_idx_x, u32


@kaio.tile_kernel(num_warps=1)
def tripled(x: Array[f32], out: MutArray[f32], n: i32, B: kaio.constexpr = 64):
    off = i32(kt.program_id(0)) * B
    kt.store(out, (off,), kt.load(x, (off,), (B,), (n,)) * 3.0, (n,))


@kaio.gpu_kernel(block_size=64)
def doubled(x: Array[f32], out: MutArray[f32], n: u32):
    i = thread_idx_x() + block_idx_x() * block_dim_x()
    if i < n:
        out[i] = x[i] * 2.0


@pytest.fixture
def dev() -> kaio.Device:
    return kaio.Device("sim")


def run_tripled(kernel, dev, rng, n: int, **constexprs) -> None:
    """Launch over n elements and check the result against numpy."""
    x = rng.standard_normal(n).astype(np.float32)
    out = dev.alloc_from(np.full(n, np.nan, np.float32))
    block = constexprs.get("B", 64)
    kernel[(n + block - 1) // block](dev.alloc_from(x), out, n, **constexprs)
    np.testing.assert_allclose(out.to_host(), x * 3.0, rtol=1e-6)


def test_a_specialized_compile_is_what_the_launch_ran(dev, rng):
    kernel = tripled.with_options()  # a fresh launcher: nothing compiled yet
    assert kernel.specializations() == [] and kernel.last_compiled() is None
    run_tripled(kernel, dev, rng, 100)  # 100 = 4 * 25: n is a multiple of 4
    ran = kernel.last_compiled(dev)
    assert ran.specialization == Specialization({"B": 64}, (("n", 4),))
    again = kaio.compile(kernel, dev.compile_arch, specialization=ran.specialization)
    assert again.ptx == ran.ptx
    assert again.specialization == ran.specialization
    # the facts alone (the tuple a launch computes) and the repr give the same compile
    assert kaio.compile(kernel, dev.compile_arch, specialization=(("n", 4),)).ptx == ran.ptx
    assert eval(repr(ran.specialization), {"Specialization": Specialization}) == ran.specialization
    # a compile without the facts is another kernel: n is not known to be a multiple of 4
    assert kaio.compile(kernel, dev.compile_arch).ptx != ran.ptx


def test_specializations_lists_each_launch_and_last_compiled_follows_the_latest(dev, rng):
    kernel = tripled.with_options()
    run_tripled(kernel, dev, rng, 96)  # a multiple of 32
    run_tripled(kernel, dev, rng, 30)  # of 2
    run_tripled(kernel, dev, rng, 96)  # the first again: no new specialization
    specs = kernel.specializations(dev)
    assert [s.facts for s in specs] == [(("n", 32),), (("n", 2),)]
    assert all(s.constexprs == {"B": 64} and s.compiled is not None for s in specs)
    assert kernel.last_compiled(dev) is specs[0].compiled
    run_tripled(kernel, dev, rng, 50, B=32)
    assert kernel.last_compiled().specialization == Specialization({"B": 32}, (("n", 2),))
    assert len(kernel.specializations()) == 3
    for s in kernel.specializations(dev):
        assert kaio.compile(kernel, dev.compile_arch, specialization=s).ptx == s.compiled.ptx


def test_the_old_divisible_spelling_still_works():
    facts = (("n", 8),)
    assert kaio.compile(tripled, "sm_80", __divisible__=facts).ptx == kaio.compile(
        tripled, "sm_80", specialization=facts
    ).ptx


def test_facts_are_compiled_in_parameter_order_however_listed():
    one = kaio.compile(tripled, "sm_80", specialization={"n": 16, "x": 4})
    other = kaio.compile(tripled, "sm_80", specialization=(("x", 4), ("n", 16)))
    assert one.ptx == other.ptx and one.specialization.facts == (("x", 4), ("n", 16))


def test_a_simt_launch_has_one_specialization(dev, rng):
    kernel = doubled.with_pipeline(lambda arch: doubled.default_pipeline(arch))  # fresh launcher
    x = rng.standard_normal(70).astype(np.float32)
    out = dev.alloc_from(np.full(70, np.nan, np.float32))
    kernel[2](dev.alloc_from(x), out, 70)
    np.testing.assert_allclose(out.to_host(), x * 2.0, rtol=1e-6)
    (spec,) = kernel.specializations(dev)
    assert spec.empty and spec.compiled is kernel.last_compiled(dev)
    assert kaio.compile(kernel, dev.compile_arch, specialization=spec).ptx == spec.compiled.ptx


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: kaio.compile(tripled, "sm_80", specialization=(("m", 4),)), "`m`"),
        (lambda: kaio.compile(tripled, "sm_80", specialization=(("n", 3),)), "power of two"),
        (lambda: kaio.compile(tripled, "sm_80", specialization=("n", 4)), "fact"),
        (lambda: kaio.compile(tripled, "sm_80", specialization=Specialization({"B": 64}), B=32), "B=32"),
        (lambda: kaio.compile(tripled, "sm_80", specialization=(("n", 4),), __divisible__=(("n", 8),)), "once"),
        (lambda: kaio.compile(doubled, "sm_80", specialization=(("n", 4),)), "does not specialize"),
        (lambda: Specialization(constexprs=[1]), "mapping"),
    ],
    ids=["unknown-arg", "not-power-of-two", "not-pairs", "contradicts", "twice", "simt", "constexprs"],
)
def test_bad_specializations_are_kaio_type_errors(call, words):
    with pytest.raises(KaioTypeError, match=words.replace("(", r"\(")):
        call()


def stage_folders(root) -> dict[str, list[str]]:
    return {d.name: sorted(f.name for f in d.iterdir()) for d in root.iterdir()}


def test_each_specialization_dumps_into_its_own_folder(dev, rng, tmp_path, monkeypatch):
    monkeypatch.setenv("KAIO_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("KAIO_CACHE", "0")
    kernel = tripled.with_options()
    run_tripled(kernel, dev, rng, 96)
    run_tripled(kernel, dev, rng, 30)
    folders = stage_folders(tmp_path)
    specs = kernel.specializations(dev)
    arch = dev.compile_arch
    assert sorted(folders) == sorted(f"tripled.{arch}-{s.key}" for s in specs)
    for s in specs:
        folder = tmp_path / f"tripled.{arch}-{s.key}"
        info = (folder / "specialization.txt").read_text()
        assert repr(s) in info and f"arch: {arch}" in info and "param: n: i32" in info
        assert (folder / next(f for f in folders[folder.name] if f.endswith(".ptx"))).read_text() == s.compiled.ptx
    assert "argument n: a multiple of 2" in (tmp_path / f"tripled.{arch}-{specs[1].key}" / "specialization.txt").read_text()


def test_a_kernel_without_anything_to_specialize_keeps_the_plain_folder(tmp_path):
    kaio.compile(doubled, "sm_80", dump_ir=tmp_path)
    assert list(stage_folders(tmp_path)) == ["doubled.sm_80"]
    kaio.compile(tripled, "sm_80", dump_ir=tmp_path)
    key = Specialization({"B": 64}).key
    assert sorted(stage_folders(tmp_path)) == ["doubled.sm_80", f"tripled.sm_80-{key}"]


def test_specialization_is_a_type_exact_value():
    assert Specialization({"B": 2}) != Specialization({"B": 2.0}) != Specialization({"B": True})
    assert Specialization({"T": (1, 2)}) == Specialization({"T": [1, 2]})  # a JSON round trip
    assert len({Specialization({"B": 2}, {"n": 4}), Specialization({"B": 2}, (("n", 4),))}) == 1
    assert Specialization().empty and not Specialization({"B": 2}).empty
