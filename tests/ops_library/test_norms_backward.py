"""rms_norm / layer_norm backward on the simulator against torch autograd of torch's own norms:
the backward kernels, the forwards' saved statistics, torch.autograd through the public
functions and torch.ops.kaio.*, and opcheck on every op registered for them."""

import numpy as np
import pytest

import kaio
from kaio import KaioTypeError
from kaio.ops_library import layer_norm, layer_norm_backward, norms_backward, rms_norm, rms_norm_backward
from kaio.ops_library.norms import run_layer_norm, run_rms_norm

from .conftest import rel

torch = pytest.importorskip("torch")
F = torch.nn.functional
import kaio.torch  # noqa: E402, F401  (registers torch.ops.kaio.*)

TORCH_TYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
GRAD_TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}  # norm-relative, vs an f32 (f64) reference


def inputs(rows, cols, dtype, *, weight=True, bias=True, residual=False, offset=1.0):
    """Fresh random x, dy (and weight, bias, residual, grad_h) as f32 tensors rounded to dtype."""
    t = TORCH_TYPES[dtype]

    def make(*shape, shift=0.0):
        return (torch.randn(*shape) + shift).to(t)

    x, dy = make(rows, cols, shift=offset), make(rows, cols)
    w = make(cols) if weight else None
    b = make(cols) if bias else None
    r, gh = (make(rows, cols), make(rows, cols)) if residual else (None, None)
    return x, dy, w, b, r, gh


def reference_grads(fn, dy, *params):
    """Gradients of fn(*params) . dy in f64 by torch autograd (None for None params)."""
    leaves = [None if p is None else p.double().requires_grad_() for p in params]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    dys = dy if isinstance(dy, tuple) else (dy,)
    torch.autograd.backward([o for o in outs], [d.double() for d in dys])
    return [None if p is None else p.grad for p in leaves]


def assert_close(got, want, dtype):
    if want is None:
        assert got is None
        return
    assert got is not None and got.dtype == TORCH_TYPES[dtype] and got.shape == want.shape
    assert rel(got, want.numpy()) <= GRAD_TOL[dtype], rel(got, want.numpy())


# --------------------------------------------------------------------------- the kernels


@pytest.mark.parametrize("dtype", list(TORCH_TYPES))
@pytest.mark.parametrize("rows, cols", [(3, 64), (2, 1000)])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm_backward_matches_torch(poison, dtype, rows, cols, affine):
    x, dy, w, b, _, _ = inputs(rows, cols, dtype, weight=affine, bias=affine, offset=4.0)
    _, mean, rstd = run_layer_norm(x, w, b, 1e-5, None, save=True)
    assert mean.dtype == rstd.dtype == torch.float32 and mean.shape == rstd.shape == (rows,)
    got = layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    want = reference_grads(lambda x_, w_, b_: F.layer_norm(x_, (cols,), w_, b_, 1e-5), dy, x, w, b)
    for g, r in zip(got, want):
        assert_close(g, r, dtype)


@pytest.mark.parametrize("dtype", list(TORCH_TYPES))
@pytest.mark.parametrize("rows, cols", [(3, 64), (2, 1000)])
@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no_weight"])
def test_rms_norm_backward_matches_torch(poison, dtype, rows, cols, weight):
    x, dy, w, _, _, _ = inputs(rows, cols, dtype, weight=weight, bias=False)
    _, rstd = run_rms_norm(x, w, 1e-6, None, None, save=True)
    got = rms_norm_backward(dy, x, w, rstd)
    want = reference_grads(lambda x_, w_: F.rms_norm(x_, (cols,), w_, 1e-6), dy, x, w)
    for g, r in zip(got, want):
        assert_close(g, r, dtype)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_residual_form_adds_the_gradient_of_h(poison, dtype):
    x, dy, w, _, r, gh = inputs(4, 96, dtype, bias=False, residual=True)
    _, h, rstd = run_rms_norm(x, w, 1e-6, r, None, save=True)
    dres, dw = rms_norm_backward(dy, h, w, rstd, grad_h=gh)

    def block(x_, r_, w_):
        hh = (x_ + r_).to(TORCH_TYPES[dtype]).double()  # h as stored, normalised as stored
        return F.rms_norm(hh, (96,), w_, 1e-6), hh

    want = reference_grads(block, (dy, gh), x, r, w)
    assert_close(dres, want[1], dtype)
    assert_close(dw, want[2], dtype)


def test_long_rows_in_column_blocks_and_programs_with_several_row_blocks(poison, monkeypatch):
    from kaio.ops_library import rows as rowops

    x, dy, w, b, r, gh = inputs(3, 300, "f32", residual=True)
    _, mean, rstd = run_layer_norm(x, w, b, 1e-5, None, save=True)
    _, h, rrstd = run_rms_norm(x, w, 1e-6, r, None, save=True)
    wanted = layer_norm_backward(dy, x, w, mean, rstd, bias=b), rms_norm_backward(dy, h, w, rrstd, grad_h=gh)
    # rows of 300 in five column blocks of 64 (the last partial); two programs, the first with
    # two rows, whose column sums add up in its row of partial sums
    monkeypatch.setattr(rowops, "MAX_BLOCK", 64)
    monkeypatch.setattr(norms_backward, "ONE_PASS_RMS", 64)
    monkeypatch.setattr(norms_backward, "ONE_PASS_LAYER_NORM", 64)
    monkeypatch.setattr(norms_backward, "PROGRAMS_PER_SM", 2.5 / kaio.Device("sim").sm_count)
    got = layer_norm_backward(dy, x, w, mean, rstd, bias=b), rms_norm_backward(dy, h, w, rrstd, grad_h=gh)
    for g, want in zip((*got[0], *got[1]), (*wanted[0], *wanted[1])):
        assert rel(g, want.double().numpy()) <= 1e-5
    again = layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    assert all(torch.equal(a, b) for a, b in zip(again, got[0]))  # the same sums every run
    # 37 rows of 8: 4 rows a tile, 4 programs of 3 row blocks, the last one short
    monkeypatch.setattr(rowops, "TILE_ELEMENTS", 32)
    monkeypatch.setattr(norms_backward, "PROGRAMS_PER_SM", 4.5 / kaio.Device("sim").sm_count)
    x, dy, w, b, _, _ = inputs(37, 8, "f32")
    _, mean, rstd = run_layer_norm(x, w, b, 1e-5, None, save=True)
    got = layer_norm_backward(dy, x, w, mean, rstd, bias=b)
    want = reference_grads(lambda x_, w_, b_: F.layer_norm(x_, (8,), w_, b_, 1e-5), dy, x, w, b)
    for g, r in zip(got, want):
        assert_close(g, r, "f32")


def test_numpy_and_buffers_in_and_out():
    rng = np.random.default_rng()
    x, dy = rng.standard_normal((2, 2, 2, 40)).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32)
    _, rstd = run_rms_norm(x, w, 1e-6, None, None, save=True)
    assert isinstance(rstd, np.ndarray) and rstd.shape == (2, 2)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    want = reference_grads(lambda x_, w_: F.rms_norm(x_, (40,), w_, 1e-6), torch.from_numpy(dy),
                           torch.from_numpy(x), torch.from_numpy(w))  # fmt: skip
    assert isinstance(dx, np.ndarray) and rel(dx, want[0].numpy()) <= 1e-5 and rel(dw, want[1].numpy()) <= 1e-5
    dev = kaio.Device("sim")
    bx, bdy, brstd = dev.alloc_from(x), dev.alloc_from(dy), dev.alloc_from(rstd)
    dx, dw = rms_norm_backward(bdy, bx, None, brstd)
    assert isinstance(dx, kaio.Buffer) and dw is None


@pytest.mark.parametrize("shape", [(0, 8), (3, 0)])
def test_empty_arrays(shape):
    x, s, w = np.ones(shape, np.float32), np.ones(shape[:-1], np.float32), np.ones(shape[-1], np.float32)
    dx, dw, db = layer_norm_backward(x, x, w, s, s, bias=w)
    assert dx.shape == shape and dw.shape == db.shape == (shape[-1],) and not dw.any() and not db.any()
    dx, dw = rms_norm_backward(x, x, w, s)
    assert dx.shape == shape and dw.shape == (shape[-1],)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, s: rms_norm_backward(x[:, :4], x, None, s), r"`grad_y` must have shape \(3, 8\)"),
        (lambda x, s: rms_norm_backward(x.astype(np.float16), x, None, s), "`grad_y` is f16 but `x` is f32"),
        (lambda x, s: rms_norm_backward(x, x, np.ones(7, np.float32), s), r"`weight` must have shape \(8,\)"),
        (lambda x, s: rms_norm_backward(x, x, None, s.astype(np.float16)), "`rstd` must be f32"),
        (lambda x, s: rms_norm_backward(x, x, None, s[:2]), r"`rstd` must have shape \(3,\)"),
        (lambda x, s: rms_norm_backward(x, x, None, s, grad_h=x[:2]), r"`grad_h` must have shape \(3, 8\)"),
        (lambda x, s: layer_norm_backward(x, x, None, s[:1], s), r"`mean` must have shape \(3,\)"),
        (lambda x, s: layer_norm_backward(x, x, None, s, s, bias=np.ones(8, np.float16)), "`bias` is f16"),
        (lambda x, s: layer_norm_backward(x, x.astype(np.int32), None, s, s), "`x` must be f16, bf16 or f32"),
    ],
)
def test_bad_inputs_are_named_before_launch(call, message):
    with pytest.raises(KaioTypeError, match=message):
        call(np.ones((3, 8), np.float32), np.ones(3, np.float32))


# --------------------------------------------------------------------------- torch autograd


def leaves(*ts):
    return [None if t is None else t.detach().clone().requires_grad_() for t in ts]


@pytest.mark.parametrize("direct", [False, True], ids=["public", "torch_ops"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_autograd_sets_every_grad(dtype, direct):
    x, dy, w, b, r, _ = inputs(2, 3 * 16, dtype, residual=True)
    x = x.view(2, 3, 16)  # a leading batch of rows
    dy, r = dy.view(2, 3, 16), r.view(2, 3, 16)
    ops = torch.ops.kaio
    # layer_norm with weight and bias
    lx, lw, lb = leaves(x, w[:16], b[:16])
    y = ops.layer_norm(lx, lw, lb, 1e-5) if direct else layer_norm(lx, lw, lb)
    assert y.requires_grad
    y.backward(dy)
    want = reference_grads(lambda x_, w_, b_: F.layer_norm(x_, (16,), w_, b_, 1e-5), dy, x, w[:16], b[:16])
    for leaf, rw in zip((lx, lw, lb), want):
        assert_close(leaf.grad, rw, dtype)
    # rms_norm, weight only requires grad; then the residual form, h used downstream too
    xd, (rw_,) = x, leaves(w[:16])
    y = ops.rms_norm(xd, rw_, 1e-6) if direct else rms_norm(xd, rw_)
    y.backward(dy)
    assert_close(rw_.grad, reference_grads(lambda w_: F.rms_norm(x.double(), (16,), w_, 1e-6), dy, w[:16])[0], dtype)
    ax, ar, aw = leaves(x, r, w[:16])
    y, h = ops.add_rms_norm(ax, ar, aw, 1e-6) if direct else rms_norm(ax, aw, residual=ar)
    (y.float() * dy.float()).sum().add((h.float() ** 2).sum()).backward()

    def block(x_, r_, w_):
        hh = (x_ + r_).to(TORCH_TYPES[dtype]).double()
        return F.rms_norm(hh, (16,), w_, 1e-6), hh

    want = reference_grads(block, (dy, 2 * (x + r)), x, r, w[:16])
    for leaf, rw in zip((ax, ar, aw), want):
        assert_close(leaf.grad, rw, dtype)


def test_the_public_functions_save_the_statistics_and_the_ops_recompute_them():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    x, w = torch.randn(2, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    for run, forward in [(lambda: rms_norm(x, w), "kaio.rms_norm_fwd"), (lambda: torch.ops.kaio.rms_norm(x, w, 1e-6), "kaio.rms_norm")]:
        with Calls() as calls:
            run().sum().backward()
        kaio_calls = [n for n in calls.names if n.startswith("kaio.")]
        # the op's schema saves no rstd: its backward runs the forward with statistics again
        want = [forward, "kaio.rms_norm_backward"] if forward.endswith("_fwd") else [forward, "kaio.rms_norm_fwd", "kaio.rms_norm_backward"]
        assert kaio_calls == want, kaio_calls


def test_without_grad_the_plain_forward_runs():
    x, w = torch.randn(2, 8, requires_grad=True), torch.randn(8)
    with torch.no_grad():
        y = rms_norm(x, w)
    assert not y.requires_grad
    torch.testing.assert_close(y, F.rms_norm(x.detach(), (8,), w, 1e-6))


def test_second_derivatives_are_refused_not_dropped():
    x = torch.randn(2, 8, requires_grad=True)
    (g,) = torch.autograd.grad(rms_norm(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="rms_norm_backward"):
        g.sum().backward()


@pytest.mark.slow
def test_compiled_forward_and_backward_match_eager_on_two_shapes():
    """fullgraph=True, dynamic=True over the norms and rope: the backward's graph holds the
    kaio backward ops (traced by their fakes), and a second row count reuses the graph."""
    from kaio.ops_library import rope

    def block(x, r, w, b, cos, sin):
        y, h = rms_norm(x, w, residual=r)
        z = layer_norm(y, w, b)
        q = rope(z.view(1, -1, 2, 16), cos, sin, layout="bshd")
        return (q * q).sum() + h.sum() + rms_norm(x).sum()

    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (4, 6):
        x, r, w, b = leaves(torch.randn(n, 16), torch.randn(n, 16), torch.randn(16), torch.randn(16))
        cos, sin = torch.randn(n // 2, 8), torch.randn(n // 2, 8)
        compiled(x, r, w, b, cos, sin).backward()
        got = [t.grad for t in (x, r, w, b)]
        ex, er, ew, eb = leaves(x, r, w, b)
        block(ex, er, ew, eb, cos, sin).backward()
        for g, e in zip(got, (ex, er, ew, eb)):
            torch.testing.assert_close(g, e.grad)


OPCHECK_CASES = [
    ("rms_norm_fwd", lambda x, w, b: (x, w, 1e-6)),
    ("add_rms_norm_fwd", lambda x, w, b: (x, x * 0.5, w, 1e-6)),
    ("layer_norm_fwd", lambda x, w, b: (x, w, b, 1e-5)),
    ("rms_norm", lambda x, w, b: (x, w, 1e-6)),
    ("add_rms_norm", lambda x, w, b: (x, x * 0.5, None, 1e-6)),
    ("layer_norm", lambda x, w, b: (x, None, b, 1e-5)),
    ("rms_norm_backward", lambda x, w, b: (x * 2, x, w, torch.rand(3) + 0.5, x)),
    ("layer_norm_backward", lambda x, w, b: (x * 2, x, w, b, x.mean(-1), torch.rand(3) + 0.5)),
]


@pytest.mark.parametrize("name, args", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_opcheck(name, args):
    x, w, b = torch.randn(3, 8), torch.randn(8), torch.randn(8)
    params = args(x, w, b)
    if not name.endswith("_backward"):  # the forwards' autograd is checked with grads required
        params = tuple(p.detach().requires_grad_() if isinstance(p, torch.Tensor) else p for p in params)
    torch.library.opcheck(getattr(torch.ops.kaio, name).default, params)


@pytest.mark.parametrize("dtype", ["bf16", pytest.param("f32", marks=pytest.mark.slow)])
def test_the_backward_assembles_without_spills_up_to_its_one_pass_limits(dtype):
    """Rows kept whole up to each norm's limit, and the looped form past it: no spills on sm_90
    (the wheel's ptxas), 16-byte accesses, and the column-sum pass."""
    from kaio import dtypes
    from kaio.ops_library import rows as rowops
    from kaio.targets.ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 not installed")
    t = {"bf16": dtypes.bf16, "f32": dtypes.f32}[dtype]
    cases = [(norms_backward.ONE_PASS_RMS, False, True), (norms_backward.ONE_PASS_LAYER_NORM, True, True),
             (norms_backward.ONE_PASS_RMS * 2, False, False), (norms_backward.ONE_PASS_LAYER_NORM * 2, True, False)]
    for cols, centered, single in cases:
        b = rowops.blocks(8192, cols, one_pass=cols if single else cols // 2)
        assert b.single == single
        kernel = rowops.with_warps(norms_backward.norm_backward_kernel(t), b.warps)
        c = kaio.compile(kernel, "sm_90", __divisible__=(("cols", 16), ("rows", 16)), R=b.rows, C=b.cols,
                         SINGLE=b.single, CENTERED=centered, HAS_W=True, HAS_B=centered, HAS_DH=not centered)
        report = toolchain.assemble(c.ptx, "sm_90")
        assert report.spill_stores[c.name] == 0 and report.spill_loads[c.name] == 0, (cols, centered)
        assert "ld.global.v4." in c.ptx and "st.global.v4." in c.ptx, (cols, centered)
    c = kaio.compile(norms_backward.column_sum_kernel(t), "sm_90", P=16, C=256)
    report = toolchain.assemble(c.ptx, "sm_90")
    assert report.spill_stores[c.name] == 0


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_layer_norm_backward_without_the_mean_is_refused_not_rms_norms(kind):
    """mean=None once returned rms_norm's gradient (dx 0.996 off torch's), silently."""
    from kaio.ops_library import layer_norm_backward

    x, dy = np.ones((3, 8), np.float32), np.ones((3, 8), np.float32)
    rstd = np.ones(3, np.float32)
    if kind == "torch":
        x, dy, rstd = (torch.from_numpy(a) for a in (x, dy, rstd))
    with pytest.raises(kaio.KaioTypeError, match=r"`mean` is None; layer_norm's gradient needs the forward's per-row mean"):
        layer_norm_backward(dy, x, None, None, rstd)
