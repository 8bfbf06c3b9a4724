import ml_dtypes
import numpy as np
import pytest

from kaio import dtypes
from kaio.dtypes import Array, MutArray, bf16, f16, f32, i32, u32


def test_numpy_round_trip_for_every_type():
    for t in dtypes.ALL_TYPES:
        assert dtypes.from_numpy(t.np_dtype) is t


def test_bf16_is_ml_dtypes():
    assert bf16.np_dtype == np.dtype(ml_dtypes.bfloat16)


def test_host_conversion():
    assert f16(1.5).dtype == np.float16
    assert u32(7) == 7 and u32(7).dtype == np.uint32


def test_ptx_spelling():
    assert [t.ptx for t in (f32, i32, u32, f16, dtypes.bool_)] == ["f32", "s32", "u32", "f16", "pred"]


def test_array_annotations():
    assert Array[f32].mutable is False and MutArray[f32].mutable is True
    assert repr(MutArray[f16]) == "MutArray[f16]"
    with pytest.raises(TypeError):
        Array[dtypes.bool_]
