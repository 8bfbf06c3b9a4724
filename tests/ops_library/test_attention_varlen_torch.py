"""attention_varlen as torch.ops.kaio.attention_varlen: gradients through
kaio.ops_library.attention_varlen with CPU tensors that require grad (the simulator) match torch's
own autograd of float64 attention run on each packed sequence alone; the mods reach the forward
and the backward through the schema; torch.library.opcheck on both ops; torch.compile
(fullgraph) forward and backward; bad input refused with the kaio error before any launch,
eager and traced. Fresh random inputs, tiny sizes (the simulator is slow)."""

import importlib
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kaio  # noqa: E402
import kaio.torch  # noqa: E402, F401  (registers torch.ops.kaio.*)
from kaio.errors import KaioTypeError  # noqa: E402
from kaio.ops_library import attention_varlen, attention_varlen_backward  # noqa: E402

# the module, which the package's op of the same name hides
varlen_module = importlib.import_module("kaio.ops_library.attention_varlen")

Q_LENS, K_LENS = [1, 6, 9], [3, 6, 12]  # ragged, one query alone; every query sees a key when causal
TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}  # of the largest float64 value (at least 1)


def cumulative(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)


def make(dtype=torch.float16, h=4, hkv=2, d=16, grad=True):
    cu_q, cu_k = cumulative(Q_LENS), cumulative(K_LENS)
    q = torch.randn(int(cu_q[-1]), h, d, dtype=dtype)
    k, v = (torch.randn(int(cu_k[-1]), hkv, d, dtype=dtype) for _ in range(2))
    return [x.requires_grad_(grad) for x in (q, k, v)], cu_q, cu_k


def longest():
    return max(Q_LENS), max(K_LENS)


def reference(q, k, v, cu_q, cu_k, causal=False, sinks=None):
    """(out (total_q, H, D), lse (H, total_q)) in float64, differentiable: each sequence alone,
    causal bottom-right aligned, GQA by repetition, a sink as one more logit per head."""
    group, d = q.shape[1] // k.shape[1], q.shape[2]
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        qs = q[rows].transpose(0, 1)  # (H, sq, D)
        ks, vs = (x[keys].repeat_interleave(group, 1).transpose(0, 1) for x in (k, v))
        s = qs @ ks.transpose(-1, -2) / math.sqrt(d)
        sq, sk = s.shape[-2:]
        if causal:
            keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
            s = s.masked_fill(~keep, float("-inf"))
        if sinks is not None:
            s = torch.cat([s, sinks[:, None, None].expand(-1, sq, 1)], -1)
        lse = torch.logsumexp(s, -1)
        outs.append((torch.exp(s - lse[..., None])[..., :sk] @ vs).transpose(0, 1))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, -1)


def as_float64(*xs):
    return [x.detach().double().requires_grad_() for x in xs]


def assert_close(got, want, tol, what):
    err = (got.double() - want).abs().max().item()
    assert err <= tol * max(want.abs().max().item(), 1.0), f"{what}: max error {err}"


CASES = [  # (causal, dtype, Hkv): GQA in most, multi-head in one, both dtypes
    (False, torch.float16, 2),
    (True, torch.float16, 2),
    (True, torch.bfloat16, 2),
    (False, torch.bfloat16, 4),
]


@pytest.mark.parametrize(("causal", "dtype", "hkv"), CASES, ids=[f"{'causal' if c else 'full'}-{str(t)[6:]}-hkv{n}" for c, t, n in CASES])
def test_gradients_match_float64_autograd_on_each_sequence(causal, dtype, hkv):
    torch.manual_seed(1)
    (q, k, v), cu_q, cu_k = make(dtype, hkv=hkv)
    out = attention_varlen(q, k, v, cu_q, cu_k, *longest(), causal=causal)
    assert out.requires_grad and out.dtype == dtype and out.shape == q.shape
    grad = torch.randn_like(out)
    out.backward(grad)
    ref = as_float64(q, k, v)
    want_out, _ = reference(*ref, cu_q, cu_k, causal)
    want_out.backward(grad.double())
    assert_close(out, want_out, TOL[dtype], "out")
    for name, x, w in zip("qkv", (q, k, v), ref):
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
        assert_close(x.grad, w.grad, TOL[dtype], f"d{name}")


def test_the_logsumexp_and_the_sinks_get_gradients():
    """A loss of the output and the (H, total_q) logsumexp: grad_lse reaches the backward, and
    the sinks (f32, one per head) get theirs."""
    torch.manual_seed(2)
    (q, k, v), cu_q, cu_k = make()
    sinks = torch.randn(4).requires_grad_()
    out, lse = attention_varlen(q, k, v, cu_q, cu_k, *longest(), causal=True, return_lse=True, sinks=sinks)
    assert lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32 and lse.requires_grad
    grad_out, grad_lse = torch.randn_like(out), torch.randn_like(lse)
    ((out.float() * grad_out.float()).sum() + (lse * grad_lse).sum()).backward()
    ref = as_float64(q, k, v, sinks)
    want_out, want_lse = reference(*ref[:3], cu_q, cu_k, True, sinks=ref[3])
    ((want_out * grad_out.double()).sum() + (want_lse * grad_lse.double()).sum()).backward()
    assert_close(lse, want_lse, 1e-3, "lse")
    for name, x, w in zip(("q", "k", "v", "sinks"), (q, k, v, sinks), ref):
        assert_close(x.grad, w.grad, 1e-2, f"d{name}")


def test_the_mods_reach_the_forward_and_the_backward_through_the_schema():
    """window, softcap and ALiBi through the custom ops give what the kernels give run directly
    (``device=`` without grad: no custom op), forward and backward."""
    torch.manual_seed(3)
    (q, k, v), cu_q, cu_k = make()
    mods = {"window": (3, 1), "softcap": 4.0, "alibi_slopes": torch.rand(4), "causal": True}
    out, lse = attention_varlen(q, k, v, cu_q, cu_k, *longest(), return_lse=True, **mods)
    grad = torch.randn_like(out)
    out.backward(grad)
    plain = [x.detach() for x in (q, k, v)]
    sim = kaio.Device("sim")
    direct_out, direct_lse = attention_varlen(*plain, cu_q, cu_k, *longest(), return_lse=True, device=sim, **mods)
    torch.testing.assert_close(out.detach(), direct_out, rtol=0, atol=0)
    torch.testing.assert_close(lse.detach(), direct_lse, rtol=0, atol=0)
    direct = attention_varlen_backward(*plain, direct_out, direct_lse, grad, cu_q, cu_k, *longest(),
                                       grad_lse=torch.zeros_like(direct_lse), device=sim, **mods)  # fmt: skip
    for name, x, w in zip("qkv", (q, k, v), direct):
        torch.testing.assert_close(x.grad, w, rtol=1e-3, atol=1e-3, msg=lambda m, n=name: f"d{n}: {m}")


def test_opcheck_forward_and_backward():
    torch.manual_seed(4)
    (q, k, v), cu_q, cu_k = make()
    torch.library.opcheck(torch.ops.kaio.attention_varlen.default, (q, k, v, cu_q, cu_k, *longest(), True))
    plain = [x.detach() for x in (q, k, v)]
    out, lse = torch.ops.kaio.attention_varlen(*plain, cu_q, cu_k, *longest(), True)
    args = (*plain, out, lse, torch.randn_like(out), cu_q, cu_k, *longest(), True, None, None, True)
    torch.library.opcheck(torch.ops.kaio.attention_varlen_backward.default, args)


def test_compile_fullgraph_forward_and_backward():
    torch.manual_seed(5)
    (q, k, v), cu_q, cu_k = make()
    eager = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def f(q, k, v, cu_q, cu_k):
        return attention_varlen(q, k, v, cu_q, cu_k, *longest(), causal=True) * 2

    torch._dynamo.reset()
    got, want = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, cu_q, cu_k), f(*eager, cu_q, cu_k)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    grad = torch.randn_like(got)
    got.backward(grad)
    want.backward(grad)
    for x, w in zip((q, k, v), eager):
        torch.testing.assert_close(x.grad, w.grad, rtol=1e-3, atol=1e-3)


def test_a_second_derivative_is_refused_at_the_call():
    torch.manual_seed(6)
    (q, k, v), cu_q, cu_k = make()
    out, lse = attention_varlen(*(x.detach() for x in (q, k, v)), cu_q, cu_k, *longest(), return_lse=True)
    with pytest.raises(KaioTypeError, match="attention_varlen_backward: has no backward yet"):
        attention_varlen_backward(q, k, v, out, lse, torch.randn_like(out), cu_q, cu_k, *longest())


def test_mod_args_that_require_grad_are_refused():
    (q, k, v), cu_q, cu_k = make()
    bias = torch.randn(4, requires_grad=True)

    def score_mod(score, b, h, q_idx, kv_idx, bias):
        return score + bias[h]

    with pytest.raises(KaioTypeError, match="attention_varlen: `mod_args` get no gradient"):
        attention_varlen(q, k, v, cu_q, cu_k, *longest(), score_mod=score_mod, mod_args=(bias,))


@pytest.fixture
def no_launch(monkeypatch):
    """The forward kernel's launch fails the test: what must be refused is refused before it."""

    def launched(*args, **kwargs):
        raise AssertionError("the kernel was launched")

    monkeypatch.setattr(varlen_module, "_forward", launched)


BAD = [  # (what is wrong, the change to a valid call's arguments, the words of the error)
    ("cu_seqlens_q int64", {"cu_seqlens_q": cumulative(Q_LENS).long()}, "`cu_seqlens_q` must be int32 of shape (B+1,)"),
    ("cu_seqlens_k 2-D", {"cu_seqlens_k": cumulative(K_LENS)[None]}, "`cu_seqlens_k` must be int32 of shape (B+1,)"),
    ("q 4-D", {"q": torch.zeros(1, 16, 4, 16, dtype=torch.float16)}, "`q` must be 3-D"),
    ("f32 k", {"k": torch.zeros(21, 2, 16)}, "q, k and v must all be f16 or all bf16"),
]


def _args(**changes):
    """A valid call's array arguments with ``changes``."""
    (q, k, v), cu_q, cu_k = make()
    return ({"q": q, "k": k, "v": v, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k} | changes).values()


def _call(*arrays):
    return attention_varlen(*arrays, 9, 12)  # longest() as constants: Dynamo traces no list


@pytest.mark.parametrize(("what", "change", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_before_any_launch_eager_and_traced(no_launch, what, change, words):
    with pytest.raises(KaioTypeError, match="^attention_varlen: .*" + re.escape(words)):
        _call(*_args(**change))
    torch._dynamo.reset()
    with pytest.raises(Exception) as caught:  # noqa: PT011  (torch.compile wraps what the fake raised)
        torch.compile(_call, fullgraph=True, backend="eager")(*_args(**change))
    exc = caught.value
    while exc is not None and not isinstance(exc, KaioTypeError):
        exc = exc.__cause__ or exc.__context__
    assert exc is not None and words in str(exc), caught.value


def test_cu_seqlens_values_are_checked_on_the_host_before_any_launch(no_launch):
    with pytest.raises(KaioTypeError, match="`cu_seqlens_k` must be non-decreasing"):
        _call(*_args(cu_seqlens_k=torch.tensor([0, 7, 6, 21], dtype=torch.int32)))
    with pytest.raises(KaioTypeError, match="`max_seqlen_q` 5 is below sequence 2's length 9"):
        (q, k, v), cu_q, cu_k = make()
        attention_varlen(q, k, v, cu_q, cu_k, 5, max(K_LENS))
