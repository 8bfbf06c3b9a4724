"""A paneled tensor map in the simulator's format: a row-major (rows, cols) f16 array described as
(64 elements, rows, cols / 64 panels 128 bytes apart). One box (64, R, P) must gather exactly what
P boxes (64, R) of the 2-D map give, panel after panel: rows past the tensor read zero, and so
do panels past its last; a wrong panel stride must not."""

import numpy as np
import pytest

from kaio.targets.sim.tensor_map import TensorMap

ROWS, COLS, PITCH = 37, 192, 200  # 3 panels of 64 columns, rows padded to 400 bytes
BASE = 0x1000


def gather(tmap: TensorMap, coords: tuple[int, ...], flat: np.ndarray) -> np.ndarray:
    """The box at ``coords`` as the copy lands it (innermost first), zeros outside the tensor."""
    address, inside = tmap.box_addresses(coords)
    out = np.zeros(address.size, dtype=flat.dtype)
    out[inside] = flat[(address[inside] - BASE) // 2]
    return out


def model(array: np.ndarray, row: int, panel: int, rows: int, panels: int) -> np.ndarray:
    """numpy: the tile's panels one after another, each ``rows`` x 64, zeros past the edges."""
    padded = np.zeros((ROWS + rows, COLS + 64 * panels), dtype=array.dtype)
    padded[:ROWS, :COLS] = array[:, :COLS]
    tile = padded[row : row + rows, 64 * panel : 64 * (panel + panels)]
    return np.concatenate([tile[:, 64 * p : 64 * (p + 1)].reshape(-1) for p in range(panels)])


@pytest.mark.parametrize("row, panel, panels", [(0, 0, 3), (30, 1, 2), (5, 2, 4)])  # ragged rows; panels past the last
def test_one_paneled_box_is_the_2d_maps_boxes(rng, row, panel, panels):
    array = rng.standard_normal((ROWS, PITCH)).astype(np.float16)
    flat = array.reshape(-1)
    paneled = TensorMap(BASE, 2, (64, ROWS, COLS // 64), (PITCH * 2, 128), (64, 16, panels), 3)
    plain = TensorMap(BASE, 2, (COLS, ROWS), (PITCH * 2,), (64, 16), 3)
    got = gather(paneled, (0, row, panel), flat)
    boxes = np.concatenate([gather(plain, (64 * (panel + p), row), flat) for p in range(panels)])
    np.testing.assert_array_equal(got, model(array, row, panel, 16, panels))
    np.testing.assert_array_equal(got, boxes)
    assert TensorMap.decode(paneled.encode()) == paneled and paneled.box_bytes == 16 * 128 * panels


def test_a_wrong_panel_stride_reads_other_columns(rng):
    """The planted bug: panels 112 bytes apart read columns 56.. instead of 64.."""
    array = rng.standard_normal((ROWS, PITCH)).astype(np.float16)
    wrong = TensorMap(BASE, 2, (64, ROWS, COLS // 64), (PITCH * 2, 112), (64, 16, 3), 3)
    got = gather(wrong, (0, 0, 0), array.reshape(-1))
    want = model(array, 0, 0, 16, 3)
    np.testing.assert_array_equal(got[: 16 * 64], want[: 16 * 64])  # the first panel does not use the stride
    assert not np.array_equal(got, want)
