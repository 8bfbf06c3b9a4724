"""``kaio.ops_library.fused_moe``: a mixture-of-experts MLP from the router's choices.

    from kaio.ops_library import fused_moe, moe_topk_softmax
    weights, ids = moe_topk_softmax(router_logits, k)
    y = fused_moe(x, w_gate_up, w_down, weights, ids)      # x (T, D) f16/bf16 -> y (T, D)

``y[t] = sum_j weights[t, j] * w_down[e] @ (act(w_gate_up[e, :F] @ x[t]) * w_gate_up[e, F:] @ x[t])``
with ``e = ids[t, j]``: ``w_gate_up`` (E, 2F, D), the gate rows first, then the up rows, and
``w_down`` (E, D, F), both in ``nn.Linear``'s (out, in) layout as vLLM keeps them;
``activation`` "silu" (the default) or "gelu" (erf).

Composed from the MoE ops, eight launches, each on the device: :func:`moe_align` with block 1 (three:
the ``T * k`` (token, choice) pairs sorted by expert and the expert offsets), a gather of x's
rows into that order (it also writes the inverse permutation), :func:`grouped_matmul` with the
gate/up weights (out x's type), the gated activation of ``silu_and_mul``, :func:`grouped_matmul`
with the down weights (f32), and a combine that sums each token's k rows scaled by their
weights in a fixed order (no atomics: deterministic) and rounds once to x's type. The
intermediates are (T * k, 2F) and (T * k, F) in x's type and (T * k, D) f32.
"""

# No `from __future__ import annotations`: the kernel's annotations name the factory's types.
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import kaio
import kaio.tile as kt
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import activations
from kaio.ops_library import rows as rowops
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.gguf_blocks import BlockFormat, block_format
from kaio.ops_library.gguf_grouped_matmul import expert_bytes
from kaio.ops_library.gguf_grouped_matmul import grouped_launch as gguf_grouped_launch
from kaio.ops_library.grouped_matmul import E4M3, INPUT_TYPES, check_scale, is_fp8, require_fp8_arch
from kaio.ops_library.grouped_matmul import launch as grouped_launch
from kaio.ops_library.moe_align import MAX_EXPERTS
from kaio.ops_library.moe_align import launch as align_launch
from kaio.ops_library.moe_checks import check_ids, take_index
from kaio.ops_library.operands import Operand, Operands
from kaio.ops_library.w4a16_grouped_matmul import GPTQExperts, check_experts
from kaio.ops_library.w4a16_grouped_matmul import launch as w4a16_grouped_launch
from kaio.prelude import Array, MutArray, f32, i32

OP = "fused_moe"
ACTIVATIONS = {"silu": activations.SILU, "gelu": activations.GELU_ERF}
ROWS, COLS = 16, 128  # the gather's and the combine's (rows, columns) tile


@cache
def gather_kernel(T: dtypes.ScalarType, W: dtypes.ScalarType = dtypes.f32) -> Any:  # noqa: N803
    """``xs[r] = x[p // k]`` for the pair ``p = sorted_ids[r]`` of each sorted row; ``INVERSE``:
    also ``inverse[p] = r``; ``SCALED``: times ``weights[p]`` (the backward's weighted dy rows)."""

    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def moe_gather(x: Array[T], sorted_ids: Array[i32], weights: Array[W], xs: MutArray[T], inverse: MutArray[i32],
                   n: i32, k: i32, d: i32, R: kaio.constexpr = ROWS, C: kaio.constexpr = COLS,
                   INVERSE: kaio.constexpr = True, SCALED: kaio.constexpr = False):  # fmt: skip
        rows = i32(kt.program_id(0)) * R + kt.arange(R)
        live = rows < n
        pair = kt.load(sorted_ids, rows, mask=live)
        if INVERSE:
            kt.store(inverse, pair, rows, mask=live)
        src, dst = kt.expand_dims(pair // k, 1) * d, kt.expand_dims(rows, 1) * d
        for c0 in range(0, d, C):
            cols = kt.expand_dims(c0 + kt.arange(C), 0)
            mask = kt.expand_dims(live, 1) & (cols < d)
            if SCALED:
                scale = kt.expand_dims(f32(kt.load(weights, pair, mask=live)), 1)
                kt.store(xs, dst + cols, T(scale * f32(kt.load(x, src + cols, mask=mask))), mask=mask)
            else:
                kt.store(xs, dst + cols, kt.load(x, src + cols, mask=mask), mask=mask)

    return moe_gather


@cache
def combine_kernel(T: dtypes.ScalarType, W: dtypes.ScalarType, O: dtypes.ScalarType = dtypes.f32) -> Any:  # noqa: N803
    @kaio.tile_kernel(num_warps=4, num_stages=0)
    def moe_combine(o: Array[O], inverse: Array[i32], weights: Array[W], y: MutArray[T], tokens: i32, k: i32,
                    d: i32, R: kaio.constexpr = ROWS, C: kaio.constexpr = COLS,
                    WEIGHTED: kaio.constexpr = True):  # fmt: skip
        rows = i32(kt.program_id(0)) * R + kt.arange(R)
        live = rows < tokens
        c0 = i32(kt.program_id(1)) * C
        cols = kt.expand_dims(c0 + kt.arange(C), 0)
        mask = kt.expand_dims(live, 1) & (cols < d)
        acc = kt.zeros((R, C), f32)
        for j in range(k):  # in order: the same sum every run
            at = rows * k + j
            p = kt.load(inverse, at, mask=live)
            row = f32(kt.load(o, kt.expand_dims(p, 1) * d + cols, mask=mask))
            if WEIGHTED:
                acc = acc + kt.expand_dims(f32(kt.load(weights, at, mask=live)), 1) * row
            else:
                acc = acc + row
        kt.store(y, kt.expand_dims(rows, 1) * d + cols, T(acc), mask=mask)

    return moe_combine


@dataclass
class Moe:
    """A checked fused_moe call: its operands and sizes (``n``: the T * k (token, choice) pairs)."""

    x: Operand
    w_gate_up: Operand
    w_down: Operand
    weights: Operand
    ids: Operand
    tokens: int
    d: int
    experts: int
    f: int
    k: int
    act: int
    formats: tuple[BlockFormat, BlockFormat] | None = None  # the GGUF formats of (w_gate_up, w_down)
    scales: tuple[Operand | None, Operand | None] = (None, None)  # e4m3 experts' f32 scales
    gptq: tuple[Any, Any] | None = None  # GPTQ experts (w4a16_grouped_matmul.Checked) of (w_gate_up, w_down)

    @property
    def n(self) -> int:
        return self.tokens * self.k


def check(op: str, ops: Any, x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, activation: Any,
          read_values: bool = True, qtype: Any = None, w_gate_up_scale: Any = None,
          w_down_scale: Any = None) -> Moe:  # fmt: skip
    """The call's operands and sizes, or a kaio error naming the argument (``ops``: an
    ``Operands``, or ``torch_checks.TensorMetadata`` for a fake; ``read_values``: also read the
    ids back, which a fake cannot; ``qtype``: the experts' GGUF formats, see :func:`formats_of`)."""
    if isinstance(w_gate_up, GPTQExperts) or isinstance(w_down, GPTQExperts):
        return check_gptq(op, ops, x, w_gate_up, w_down, weights, ids, activation, read_values)
    ox, og, od = ops.take("x", x), ops.take("w_gate_up", w_gate_up), ops.take("w_down", w_down)
    ow, oi = ops.take("weights", weights), ops.take("ids", ids)
    if ox.dtype not in INPUT_TYPES:
        raise KaioTypeError(f"{op}: `x` must be f16 or bf16, got {ox.dtype.name}")
    formats = formats_of(op, qtype)
    for name, o in (("w_gate_up", og), ("w_down", od)):
        if formats and o.dtype != dtypes.u8:
            raise KaioTypeError(f"{op}: `{name}` must be the uint8 blocks of `qtype`'s format, got {o.dtype.name}")
        if not formats and o.dtype not in (ox.dtype, E4M3):
            raise KaioTypeError(f"{op}: `{name}` is {o.dtype.name} but `x` is {ox.dtype.name}: pass one type (or e4m3 experts)")
    if og.dtype != od.dtype:
        raise KaioTypeError(f"{op}: `w_gate_up` is {og.dtype.name} but `w_down` {od.dtype.name}: pass one type")
    take_index(op, "ids", oi)
    if len(ox.shape) != 2:
        raise KaioTypeError(f"{op}: `x` must be (tokens, D), got shape {tuple(ox.shape)}")
    tokens, d = ox.shape
    gate_row = row_size(op, "w_gate_up", d, "D", formats and formats[0])
    if len(og.shape) != 3 or og.shape[1] % 2 or og.shape[2] != gate_row:
        raise KaioTypeError(f"{op}: `w_gate_up` must be (experts, 2F, {gate_row}), got shape {tuple(og.shape)}")
    experts, f = og.shape[0], og.shape[1] // 2
    if experts == 0 or f == 0:
        raise KaioTypeError(f"{op}: `w_gate_up` has no experts or no rows (shape {tuple(og.shape)})")
    down_row = row_size(op, "w_down", f, "F", formats and formats[1])
    if tuple(od.shape) != (experts, d, down_row):
        raise KaioTypeError(f"{op}: `w_down` must have shape {(experts, d, down_row)} (experts, D, F), got {tuple(od.shape)}")
    k = check_routing(op, ox, ow, oi, ids, activation, experts, f, read_values)
    scales = tuple(ops.take(name, v) if v is not None else None for name, v in (("w_gate_up_scale", w_gate_up_scale),
                                                                                  ("w_down_scale", w_down_scale)))
    if formats and any(sc is not None for sc in scales):
        raise KaioTypeError(f"{op}: GGUF experts carry their scales in their blocks: no `w_gate_up_scale` / `w_down_scale`")
    check_scale(op, "w_gate_up_scale", scales[0], experts, 2 * f)
    check_scale(op, "w_down_scale", scales[1], experts, d)
    return Moe(ox, og, od, ow, oi, tokens, d, experts, f, k, ACTIVATIONS[activation], formats, scales)


def check_routing(op: str, x: Operand, weights: Operand, oi: Operand, ids: Any, activation: Any, experts: int, f: int,
                  read_values: bool) -> int:  # fmt: skip
    """The routing arguments' checks (every kind of experts'); k."""
    tokens, d = x.shape
    if len(oi.shape) != 2 or oi.shape[0] != tokens:
        raise KaioTypeError(f"{op}: `ids` must be ({tokens}, k), got shape {tuple(oi.shape)}")
    k = oi.shape[1]
    if tuple(weights.shape) != tuple(oi.shape):
        raise KaioTypeError(f"{op}: `weights` must have the shape of `ids` {tuple(oi.shape)}, got {tuple(weights.shape)}")
    if weights.dtype not in (dtypes.f32, x.dtype):
        raise KaioTypeError(f"{op}: `weights` must be f32 or {x.dtype.name} (x's type), got {weights.dtype.name}")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise KaioValueError(f"{op}: `activation` must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    if experts > MAX_EXPERTS:
        raise KaioValueError(f"{op}: at most {MAX_EXPERTS} experts, got {experts}")
    n = tokens * k
    if any(s >= 2**31 for s in (n * 2 * f, n * d, experts * 2 * f * d)):
        raise KaioTypeError(f"{op}: arrays of 2**31 elements or more are too large")
    if read_values:
        check_ids(op, "ids", ids, experts)
    return k


def check_gptq(op: str, ops: Any, x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, activation: Any,
               read_values: bool) -> Moe:  # fmt: skip
    """:func:`check` for GPTQ experts (both stacks :class:`GPTQExperts`)."""
    for name, w in (("w_gate_up", w_gate_up), ("w_down", w_down)):
        if not isinstance(w, GPTQExperts):
            raise KaioTypeError(f"{op}: `w_gate_up` and `w_down` are both GPTQExperts or neither; `{name}` is "
                                f"{type(w).__name__}")  # fmt: skip
    ox, ow, oi = ops.take("x", x), ops.take("weights", weights), ops.take("ids", ids)
    if ox.dtype not in INPUT_TYPES or len(ox.shape) != 2:
        raise KaioTypeError(f"{op}: `x` must be f16 or bf16 (tokens, D), got {ox.dtype.name} {tuple(ox.shape)}")
    take_index(op, "ids", oi)
    tokens, d = ox.shape
    gate_up = check_experts(op, ops, "w_gate_up.", w_gate_up, d, ox.dtype)
    if gate_up.n % 2 == 1 or gate_up.n == 0:
        raise KaioTypeError(f"{op}: `w_gate_up.qweight` must have 2F columns (gate, then up), got {gate_up.n}")
    f = gate_up.n // 2
    down = check_experts(op, ops, "w_down.", w_down, f, ox.dtype)
    if down.experts != gate_up.experts or down.n != d:
        raise KaioTypeError(f"{op}: `w_down.qweight` must be ({gate_up.experts}, {f // 8}, {d}) (E, F/8, D), got "
                            f"{tuple(down.qweight.shape)}")  # fmt: skip
    k = check_routing(op, ox, ow, oi, ids, activation, gate_up.experts, f, read_values)
    return Moe(ox, gate_up.qweight, down.qweight, ow, oi, tokens, d, gate_up.experts, f, k, ACTIVATIONS[activation],
               gptq=(gate_up, down))  # fmt: skip


def row_size(op: str, name: str, cols: int, what: str, fmt: BlockFormat | None) -> int:
    """A weight row's last dim: ``cols`` elements, or their bytes in ``fmt``'s blocks."""
    if fmt is None:
        return cols
    if cols % fmt.elements:
        raise KaioValueError(f"{op}: `{name}`'s rows of {what} = {cols} elements are not whole {fmt.name} blocks of {fmt.elements}")
    return cols // fmt.elements * fmt.nbytes


def formats_of(op: str, qtype: Any) -> tuple[BlockFormat, BlockFormat] | None:
    """None (16-bit experts), or the GGUF formats of (w_gate_up, w_down) from one format's name
    (or ``GGMLQuantizationType``) for both, or a pair of them."""
    if qtype is None:
        return None
    if isinstance(qtype, (tuple, list)):
        if len(qtype) != 2:
            raise KaioValueError(f"{op}: `qtype` must be one GGUF format or a pair (w_gate_up's, w_down's), got {qtype!r}")
        return block_format(op, qtype[0]), block_format(op, qtype[1])
    fmt = block_format(op, qtype)
    return fmt, fmt


@dataclass
class Routed:
    """The pairs sorted by expert and their MLP up to the activation, in workspaces."""

    sorted_ids: Operand  # (n,): the pair (t * k + j) at each sorted row
    offsets: Operand  # (E + 1,): where each expert's rows begin
    inverse: Operand  # (n,): the sorted row of each pair
    xs: Operand  # (n, D): x's rows in that order
    h: Operand  # (n, 2F): the gate/up product
    a: Operand  # (n, F): the gated activation


def expert_product(ops: Operands, m: Moe, x: Operand, w: Operand, which: int, offsets: Operand, y: Operand) -> None:
    """``y[rows of e] = x[rows] @ w[e].T`` for the gate/up (``which`` 0) or down (1) weights:
    ``grouped_matmul`` on 16-bit experts, ``gguf_grouped_matmul`` on GGUF blocks."""
    n, k = y.shape[1], x.shape[1]
    if m.gptq is not None:
        w4a16_grouped_launch(ops, x, m.gptq[which], offsets, y)
    elif m.formats is None:
        grouped_launch(ops.device, x, w, offsets, y, m.experts, n, k, w_nk=True, w_scale=m.scales[which])
    else:
        gguf_grouped_launch(ops, x, w, m.formats[which], offsets, y, m.experts, n, w.shape[2])


@contextmanager
def routed(ops: Operands, m: Moe) -> Iterator[Routed]:
    """The first five launches (alignment, gather, gate/up product, activation), shared by the
    forward and the backward (which recomputes them rather than keeping them from the forward)."""
    dev, t, n, f, d = ops.device, m.x.dtype, m.n, m.f, m.d
    with (ops.workspace((n,), dtypes.i32) as sorted_ids, ops.workspace((n,), dtypes.i32) as block_experts,
          ops.workspace((1,), dtypes.i32) as total, ops.workspace((m.experts + 1,), dtypes.i32) as offsets,
          ops.workspace((n,), dtypes.i32) as inverse, ops.workspace((n, d), t) as xs,
          ops.workspace((n, 2 * f), t) as h, ops.workspace((n, f), t) as a):  # fmt: skip
        align_launch(ops, m.ids, n, m.experts, 1, sorted_ids, block_experts, total, offsets)
        # no weights are read unscaled: any array fills their slot
        gather_kernel(t, m.weights.dtype).launch(dev, m.x.value, sorted_ids.value, m.weights.value, xs.value,
                                                 inverse.value, n, m.k, d, grid=(math.ceil(n / ROWS),))  # fmt: skip
        expert_product(ops, m, xs, m.w_gate_up, 0, offsets, h)
        b = rowops.blocks(n, f)
        rowops.launch(activations.gated_kernel(t), b, (b.grid(n), math.ceil(f / b.cols)), (h.value, a.value, n, f),
                      dev, ACT=m.act, BASE_X=rowops.base_alignment(h.ptr),
                      BASE_Y=rowops.base_alignment(a.ptr))  # fmt: skip
        yield Routed(sorted_ids, offsets, inverse, xs, h, a)


def fused_moe(x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, *, activation: str = "silu",
              qtype: Any = None, w_gate_up_scale: Any = None, w_down_scale: Any = None, device: Any = None) -> Any:  # fmt: skip
    """The MoE MLP of each token over its k experts (see the module doc); y (T, D) in x's type.
    ``qtype``: the experts are GGUF blocks of this format (or of a pair of formats: w_gate_up's,
    w_down's); GPTQ experts come as two :class:`GPTQExperts`. e4m3 experts (W8A16) take f32 scales ``w_gate_up_scale`` (E,) or (E, 2F) and
    ``w_down_scale`` (E,) or (E, D) (None: 1). Torch tensors of 16-bit experts go through
    ``torch.ops.kaio.fused_moe`` (autograd records it: ``fused_moe_backward``)."""
    scaled = w_gate_up_scale is not None or w_down_scale is not None or is_fp8(w_gate_up) or is_fp8(w_down)
    gptq = isinstance(w_gate_up, GPTQExperts) or isinstance(w_down, GPTQExperts)
    if qtype is not None or scaled or gptq:  # frozen quantised experts: run directly, no gradient
        refuse_grad(OP, x, weights, ids, w_gate_up_scale, w_down_scale, *expert_arrays(w_gate_up, w_down),
                    why="quantised (GGUF, fp8 or GPTQ) experts are frozen")  # fmt: skip
        if qtype is not None:
            fg, fd = formats_of(OP, qtype)
            w_gate_up, w_down = expert_bytes(w_gate_up, fg), expert_bytes(w_down, fd)
        return run(x, w_gate_up, w_down, weights, ids, activation, device, qtype, w_gate_up_scale, w_down_scale)
    if (tops := rowops.torch_op(x, w_gate_up, w_down, weights, ids, device=device)) is not None:
        return tops.fused_moe(x, w_gate_up, w_down, weights, ids, activation)
    return run(x, w_gate_up, w_down, weights, ids, activation, device)


def expert_arrays(w_gate_up: Any, w_down: Any) -> list[Any]:
    """The experts' arrays: each weight itself, or a GPTQExperts' qweight, scales and qzeros."""
    return [a for w in (w_gate_up, w_down) for a in (w[:3] if isinstance(w, GPTQExperts) else (w,))]


def run(x: Any, w_gate_up: Any, w_down: Any, weights: Any, ids: Any, activation: str, device: Any,
        qtype: Any = None, w_gate_up_scale: Any = None, w_down_scale: Any = None) -> Any:  # fmt: skip
    """The op itself, without the torch custom-op routing."""
    ops = Operands(OP, x, *expert_arrays(w_gate_up, w_down), weights, ids, w_gate_up_scale, w_down_scale,
                   device=device)  # fmt: skip
    m = check(OP, ops, x, w_gate_up, w_down, weights, ids, activation, qtype=qtype, w_gate_up_scale=w_gate_up_scale,
              w_down_scale=w_down_scale)  # fmt: skip
    if E4M3 in (m.w_gate_up.dtype, m.w_down.dtype):
        require_fp8_arch(OP, ops.device)
    oy = ops.output((m.tokens, m.d), m.x.dtype)
    if m.n == 0 or m.d == 0:
        return ops.result(oy)
    # the down product: f32 from grouped_matmul, x's type from the GGUF and GPTQ kernels
    plain = m.formats is None and m.gptq is None  # 16-bit or fp8 experts: grouped_matmul's f32 down product
    with routed(ops, m) as r, ops.workspace((m.n, m.d), dtypes.f32 if plain else m.x.dtype) as o:
        expert_product(ops, m, r.a, m.w_down, 1, r.offsets, o)
        combine_launch(ops.device, o, r.inverse, m.weights, oy, m.tokens, m.k, m.d)
    return ops.result(oy)


def combine_launch(device: Any, o: Operand, inverse: Operand, weights: Operand | None, y: Operand, tokens: int,
                   k: int, d: int) -> None:  # fmt: skip
    """``y[t] = sum_j weights[t, j] * o[inverse[t * k + j]]`` (``weights`` None: unweighted)."""
    w = weights or inverse  # an unweighted sum reads no weight: any array fills the slot
    combine_kernel(y.dtype, w.dtype, o.dtype).launch(device, o.value, inverse.value, w.value, y.value, tokens, k, d,
                                                     grid=(math.ceil(tokens / ROWS), math.ceil(d / COLS)),
                                                     WEIGHTED=weights is not None)  # fmt: skip
