"""kaio.ops_library.rope on the simulator against float64 numpy: both layouts, both pair forms."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import rope

from .conftest import DTYPES, TOL, f64, rel

torch = pytest.importorskip("torch")


def reference(x, cos, sin, interleaved, layout):
    x, cos, sin = f64(x), f64(cos), f64(sin)
    at = (None, slice(None), None) if layout == "bshd" else (None, None)
    c, s = cos[at], sin[at]
    h = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :h], x[..., h:])
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
    else:
        out[..., :h], out[..., h:] = a * c - b * s, b * c + a * s
    return out


def tables(rng, s, half, dtype):
    angle = rng.uniform(0, 2 * np.pi, (s, half))
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


# (B, S, H, D): head dims 2 (one pair), 14 (ragged), 128 (vectorised halves), S != H throughout
SHAPES = [(1, 3, 2, 2), (2, 5, 3, 14), (1, 3, 2, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rope_matches_float64(rng, poison, dtype, interleaved, layout, shape):
    t = DTYPES[dtype]
    b, s, h, d = shape
    x = rng.standard_normal(shape if layout == "bshd" else (b, h, s, d)).astype(t)
    cos, sin = tables(rng, s, d // 2, t)
    got = rope(x, cos, sin, interleaved)  # the layout told from the shapes
    assert got.dtype == x.dtype and got.shape == x.shape
    assert rel(got, reference(x, cos, sin, interleaved, layout)) <= TOL[dtype]


def test_f32_tables_with_half_x_and_an_explicit_layout_when_s_equals_h(rng, poison):
    x = rng.standard_normal((2, 4, 4, 32)).astype(np.float16)
    cos, sin = tables(rng, 4, 16, np.float32)
    with pytest.raises(KaioTypeError, match="S = H = 4: pass layout="):
        rope(x, cos, sin)
    for layout in ("bshd", "bhsd"):
        assert rel(rope(x, cos, sin, layout=layout), reference(x, cos, sin, False, layout)) <= TOL["f16"]


@pytest.mark.parametrize("interleaved", [False, True])
def test_misaligned_torch_views(poison, interleaved):
    def offset(*shape):
        return torch.randn(int(np.prod(shape)) + 1).to(torch.bfloat16)[1:].view(*shape)

    x, cos, sin = offset(1, 3, 2, 16), offset(3, 8), offset(3, 8)
    assert x.data_ptr() % 16 and cos.data_ptr() % 16
    got = rope(x, cos, sin, interleaved)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    want = reference(x.float().numpy(), cos.float().numpy(), sin.float().numpy(), interleaved, "bshd")
    assert rel(got, want) <= TOL["bf16"]


def test_buffers_in_buffers_out(rng):
    dev = kaio.Device("sim")
    x = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    cos, sin = tables(rng, 3, 4, np.float32)
    got = rope(dev.alloc_from(x), dev.alloc_from(cos), dev.alloc_from(sin))
    assert isinstance(got, kaio.Buffer) and rel(got.to_host(), reference(x, cos, sin, False, "bhsd")) <= 1e-5


@pytest.mark.parametrize(
    "x_shape, cos_shape, sin_dtype, kw, message",
    [
        ((2, 3, 8), (3, 4), np.float32, {}, "`x` must be 4-D"),
        ((1, 3, 2, 7), (3, 3), np.float32, {}, "head dim of `x` must be even"),
        ((1, 3, 2, 8), (3, 3), np.float32, {}, r"`cos` must have shape \(S, 4\)"),
        ((1, 3, 2, 8), (5, 4), np.float32, {}, "neither axis 1 nor axis 2"),
        ((1, 3, 2, 8), (3, 4), np.float16, {}, "`cos` is f32 but `sin` is f16"),
        ((1, 3, 2, 8), (3, 4), np.float32, {"layout": "bhsd"}, r"has 3 rows but x .* has 2 positions"),
        ((1, 3, 2, 8), (3, 4), np.float32, {"layout": "sbhd"}, "`layout` is 'bshd', 'bhsd'"),
        ((1, 3, 2, 8), (3, 4), np.float32, {"interleaved": 1}, "`interleaved` must be a bool"),
    ],
)
def test_bad_inputs_are_named_before_launch(x_shape, cos_shape, sin_dtype, kw, message):
    with pytest.raises(KaioTypeError, match=message):
        rope(np.zeros(x_shape, np.float32), np.zeros(cos_shape, np.float32), np.zeros(cos_shape, sin_dtype), **kw)


def test_tables_of_another_half_type_are_refused():
    with pytest.raises(KaioTypeError, match=r"`cos` must be f32 or f16 \(x's type\), got bf16"):
        import ml_dtypes

        t = np.zeros((3, 4), ml_dtypes.bfloat16)
        rope(np.zeros((1, 3, 2, 8), np.float16), t, t)
