"""The runtime side of TMA: recipes evaluated on launch values, maps encoded by the backend (kaio's
format on the simulator), remembered across launches, and arguments a map cannot describe
refused by name before anything runs."""

import numpy as np
import pytest

from kaio import dtypes
from kaio.compiled import KernelParam, TensorMapParam
from kaio.errors import KaioLaunchError
from kaio.runtime.tensor_maps import TensorMapBuilder, builders, compile_expression, zero_block
from kaio.targets.sim.tensor_map import TensorMap

PARAMS = (KernelParam("a", dtypes.f16, True), KernelParam("m", dtypes.i32, False), KernelParam("k", dtypes.i32, False))
A_MAP = TensorMapParam("a_tmap", "a", ("k", "m"), ("(k + 8)",), (64, 128), 128)


def test_expressions_take_parameters_integers_and_plus_minus_times_floor_divide():
    f = compile_expression("((k + 7) * 2 - -m)", ["a", "m", "k"])
    assert f([0, 3, 5]) == (5 + 7) * 2 + 3
    assert compile_expression("(k // 64)", ["a", "m", "k"])([0, 3, 320]) == 5  # a paneled map's panels
    for bad in ("k / 2", "k % 2", "x + 1", "abs(k)", "1.5", "k if m else 1"):
        with pytest.raises(ValueError, match="not a tensor-map expression"):
            compile_expression(bad, ["a", "m", "k"])


def test_the_simulator_map_describes_the_tensor(dev):
    base = dev.zeros(4096, np.uint8).ptr
    blob = TensorMapBuilder("mm", A_MAP, PARAMS, dev)([base, 100, 56])
    assert len(blob) == 128
    assert TensorMap.decode(blob) == TensorMap(base, 2, (56, 100), ((56 + 8) * 2,), (64, 128), 3)


def test_a_paneled_map_splits_the_columns_in_panels(dev):
    """(64 elements, rows, panels 128 bytes apart): the recipe pipeline-tma makes for a tile of
    whole 128-byte panels, evaluated on the launch's values."""
    paneled = TensorMapParam("b_tmap", "a", ("64", "m", "(k // 64)"), ("k", "64"), (64, 64, 4), 128)
    base = dev.zeros(4096, np.uint8).ptr
    blob = TensorMapBuilder("mm", paneled, PARAMS, dev)([base, 100, 320])
    assert TensorMap.decode(blob) == TensorMap(base, 2, (64, 100, 5), (640, 128), (64, 64, 4), 3)


def test_maps_are_remembered_per_argument_values(dev, monkeypatch):
    calls = []
    real = dev._backend.encode_tensor_map

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(dev._backend, "encode_tensor_map", counting)
    with_maps = builders("mm", [A_MAP], PARAMS, dev)
    base = dev.zeros(4096, np.uint8).ptr
    first = with_maps((base, 100, 56))
    assert first[:3] == (base, 100, 56) and len(first) == 4
    assert with_maps((base, 100, 56)) == first and len(calls) == 1
    with_maps((base, 99, 56))
    assert len(calls) == 2
    assert builders("mm", [], PARAMS, dev)((base, 1, 2)) == (base, 1, 2)


def test_an_empty_tensor_gets_a_map_of_zeros(dev):
    blob = TensorMapBuilder("mm", A_MAP, PARAMS, dev)([0, 0, 56])
    tmap = TensorMap.decode(blob)
    assert tmap.dims == (1, 1) and tmap.box == (64, 128) and tmap.base == zero_block(dev)
    assert not dev._tensor_map_zeros.to_host().any()


@pytest.mark.parametrize(
    "values, message",
    [((8, 100, 56), "not 16-byte aligned"), ((0x1000, 100, 57), "not positive multiples of 16"), ((0x1000, 2**33, 56), "exceed 2")],
)
def test_arguments_a_map_cannot_describe_are_refused(dev, values, message):
    with pytest.raises(KaioLaunchError, match=f"argument `a` cannot be read through a tensor map: .*{message}"):
        TensorMapBuilder("mm", A_MAP, PARAMS, dev)(list(values))


def test_recipes_round_trip_through_json():
    assert TensorMapParam.from_recipe("a_tmap", A_MAP.recipe()) == A_MAP
    assert "TensorMap[a, box=64x128]" in repr(A_MAP)
