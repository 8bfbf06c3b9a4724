"""``kaio.ops_library.linear_cross_entropy``: ``cross_entropy(x @ weight.T + bias, targets)``
without the ``(tokens, vocab)`` logits.

    from kaio.ops_library import linear_cross_entropy, linear_cross_entropy_backward
    loss = linear_cross_entropy(x, weight, targets)            # x (..., H), weight (V, H), targets (...)
    loss = linear_cross_entropy(x, weight, targets, bias=b, ignore_index=-100, chunk=1024)
    loss, lse = linear_cross_entropy(x, weight, targets, return_lse=True)
    dx, dweight, dbias = linear_cross_entropy_backward(x, weight, targets, lse, grad_loss, bias=b)

The fused language-model head (Liger-Kernel's FusedLinearCrossEntropy): ``weight`` is
``(vocab, hidden)`` as in ``nn.Linear``; the loss is f32, one per token (0 where the target is
``ignore_index``), like ``cross_entropy``'s. With torch tensors the op is
``torch.ops.kaio.linear_cross_entropy`` and records its backward for autograd.

The tokens are processed ``chunk`` at a time; only one chunk's logits are ever alive (f32,
``(vocab, chunk)``: transposed, see ``linear_cross_entropy_kernel``), so a 128k vocabulary fits
where the full logits would not. The default chunk makes a chunk's logits about as large as
``x`` (Liger's rule: ``next_pow2(tokens / ceil(vocab / hidden))``, at least 16).

Forward, per chunk: ``x_chunk^T`` (a copy kernel) -> ``logits^T = weight @ x_chunk^T`` (kaio's
matmul) -> a sweep with an online max and sum writes each token's loss and log-sum-exp. The
forward saves only the log-sum-exps (f32, one per token).

Backward, per chunk: the logits again (the matmul), then one elementwise sweep writes
``dlogits = grad_loss[r] * (softmax - onehot)`` from the saved log-sum-exp (0 for ignored
tokens) in the input type and adds its column sums to the bias gradient; ``dx_chunk = dlogits @
weight`` and ``dweight += dlogits^T @ x_chunk`` (f32, ``beta=1``) are matmuls. Recomputing the
logits costs a fourth matmul where Liger computes the gradients in the forward with a unit
``grad_loss`` and scales them afterwards; that is exact only when every token has the same
``grad_loss`` (``loss.mean()``), and here each token's own ``grad_loss`` scales its gradient
before the weight product, so any weighting of the per-token losses is differentiated exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from kaio.ops_library import rows as rowops
from kaio.ops_library.autograd import refuse_grad
from kaio.ops_library.cross_entropy import GATHER_LIMIT, check_targets
from kaio.ops_library.linear_cross_entropy_kernel import copy_kernel, grad_kernel, loss_kernel
from kaio.ops_library.matmul import matmul
from kaio.ops_library.operands import Operand, Operands

from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError

OP = "linear_cross_entropy"
TARGET_TYPES = (dtypes.i32, dtypes.i64)
MIN_CHUNK = 16
COPY_TILE = (32, 64)  # rows x columns per program of the copy kernel
SWEEP_TILE = (64, 32)  # vocabulary entries x tokens per tile of the sweeps


@dataclass(frozen=True)
class Problem:
    """The sizes of one call: ``x`` is ``leading + (hidden,)``, ``weight`` ``(vocab, hidden)``."""

    leading: tuple[int, ...]
    tokens: int
    hidden: int
    vocab: int
    chunk: int  # tokens per chunk (at most ``tokens``)


@dataclass(frozen=True)
class Inputs:
    """The checked operands of a call (``bias`` None when absent)."""

    x: Operand
    weight: Operand
    targets: Operand
    bias: Operand | None
    problem: Problem


def default_chunk(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: a chunk's logits about as many elements as ``x``."""
    per_token = math.ceil(vocab / max(hidden, 1))
    return max(MIN_CHUNK, rowops.next_pow2(math.ceil(tokens / per_token)))


def check_scalars(ignore_index: Any, chunk: Any, op: str = OP) -> None:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer) or not -(2**31) <= ignore_index < 2**31:
        raise KaioTypeError(f"{op}: `ignore_index` must be a 32-bit integer, got {ignore_index!r}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int | np.integer) or chunk < 1):
        raise KaioTypeError(f"{op}: `chunk` must be a positive number of tokens or None, got {chunk!r}")


def check(ops: Any, x: Any, weight: Any, targets: Any, bias: Any, ignore_index: Any, chunk: Any,
          op: str = OP) -> Inputs:  # fmt: skip
    """Types and shapes (``ops``: an ``Operands``, or ``torch_checks.TensorMetadata`` for a fake
    call); the targets' values are checked by :func:`check_targets`."""
    check_scalars(ignore_index, chunk, op)
    ox = rowops.take_float(ops, op, "x", x)
    ow = rowops.take_float(ops, op, "weight", weight, min_rank=2)
    rowops.same_dtype(op, "weight", ow, ox)
    hidden = ox.shape[-1]
    if len(ow.shape) != 2 or ow.shape[1] != hidden:
        raise KaioTypeError(f"{op}: `weight` must have shape (vocab, {hidden}) (x's last dim), got {tuple(ow.shape)}")
    vocab = ow.shape[0]
    if vocab == 0 or hidden == 0:
        raise KaioValueError(f"{op}: `weight` {tuple(ow.shape)} is empty: vocab and hidden must be at least 1")
    ot = ops.take("targets", targets)
    if ot.dtype not in TARGET_TYPES:
        raise KaioTypeError(f"{op}: `targets` must be i32 or i64, got {ot.dtype.name}")
    leading = tuple(ox.shape[:-1])
    rowops.same_shape(op, "targets", ot, leading)
    ob = None
    if bias is not None:
        ob = rowops.take_float(ops, op, "bias", bias)
        rowops.same_dtype(op, "bias", ob, ox)
        rowops.same_shape(op, "bias", ob, (vocab,))
    tokens, _ = rowops.rows_cols(tuple(ox.shape), op)
    rowops.rows_cols((vocab, hidden), op)
    if chunk is None and not isinstance(tokens, int):
        # a fake call with symbolic sizes: the default chunk is chosen when the op runs (computing
        # it here would guard on the sizes, and torch.compile would recompile for each)
        size = 1
    else:
        size = min(int(chunk) if chunk is not None else default_chunk(tokens, hidden, vocab), max(tokens, 1))
    rowops.rows_cols((vocab, size), op)
    return Inputs(ox, ow, ot, ob, Problem(leading, tokens, hidden, vocab, size))


def check_saved(ops: Any, inputs: Inputs, lse: Any, grad_loss: Any, grad_lse: Any = None,
                op: str = OP) -> tuple[Operand, Operand, Operand | None]:  # fmt: skip
    """The backward's extra operands: f32 per-token log-sum-exps, loss gradients and (None:
    absent) log-sum-exp gradients."""

    def per_token(name: str, value: Any) -> Operand:
        o = ops.take(name, value)
        if o.dtype != dtypes.f32:
            raise KaioTypeError(f"{op}: `{name}` must be f32 (one per token, as the loss), got {o.dtype.name}")
        rowops.same_shape(op, name, o, inputs.problem.leading)
        return o

    optional = per_token("grad_lse", grad_lse) if grad_lse is not None else None
    return per_token("lse", lse), per_token("grad_loss", grad_loss), optional


# --------------------------------------------------------------------------- the public op


def linear_cross_entropy(x: Any, weight: Any, targets: Any, *, bias: Any = None, ignore_index: int = -100,
                         chunk: int | None = None, return_lse: bool = False, device: Any = None) -> Any:  # fmt: skip
    """Per-token ``cross_entropy(x @ weight.T + bias, targets)`` in f32 (0 where the target is
    ``ignore_index``), computed ``chunk`` tokens at a time. ``return_lse``: also the per-token
    log-sum-exps the backward takes."""
    if not isinstance(return_lse, bool):
        raise KaioTypeError(f"{OP}: `return_lse` must be a bool, got {return_lse!r}")
    check_scalars(ignore_index, chunk)
    if (ops := rowops.torch_op(x, weight, targets, bias, device=device)) is not None:
        loss, lse = ops.linear_cross_entropy(x, weight, targets, bias, int(ignore_index), _chunk_arg(chunk))
        return (loss, lse) if return_lse else loss
    loss, lse = forward(x, weight, targets, bias, int(ignore_index), chunk, device)
    return (loss, lse) if return_lse else loss


def linear_cross_entropy_backward(x: Any, weight: Any, targets: Any, lse: Any, grad_loss: Any, *, bias: Any = None,
                                  ignore_index: int = -100, chunk: int | None = None, grad_lse: Any = None,
                                  device: Any = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(dx, dweight, dbias)`` of ``sum(grad_loss * loss + grad_lse * lse)`` (``dbias`` None
    without a bias; ``grad_lse`` None: 0); ``lse`` as ``return_lse=True`` gave it, ``grad_loss``
    and ``grad_lse`` f32, one per token."""
    check_scalars(ignore_index, chunk)
    refuse_grad(f"{OP}_backward", x, weight, lse, grad_loss, grad_lse, bias)  # no second derivative
    return backward(x, weight, targets, lse, grad_loss, grad_lse, bias, int(ignore_index), chunk, device)


def _chunk_arg(chunk: int | None) -> int:
    """The custom ops' schema has no optional int: 0 is the default chunk."""
    return 0 if chunk is None else int(chunk)


# --------------------------------------------------------------------------- the chunk loop


class Chunks:
    """One call's chunk buffers and the work every chunk starts with (its logits)."""

    def __init__(self, ops: Operands, inputs: Inputs) -> None:
        self.ops, self.inputs, self.p = ops, inputs, inputs.problem
        self._scratch: list[Operand] = []
        x, (c, h, v) = inputs.x, (self.p.chunk, self.p.hidden, self.p.vocab)
        self.x_chunk = self.scratch((c, h), x.dtype)
        self.x_chunk_t = self.scratch((h, c), x.dtype)
        self.logits_t = self.scratch((v, c), dtypes.f32)

    def scratch(self, shape: tuple[int, ...], ktype: dtypes.ScalarType, zero: bool = False) -> Operand:
        """An internal array of the call's kind (a torch tensor or a Buffer), freed by
        :meth:`release` when it is a Buffer."""
        if self.ops.torch:
            from kaio.runtime import tensors

            like = self.inputs.x.value
            make = like.new_zeros if zero else like.new_empty
            t = make(shape, dtype=tensors.torch_dtype(ktype))
            return Operand(t, shape, ktype, t.data_ptr())
        dev = self.ops.device
        buf = dev.zeros(shape, ktype.np_dtype) if zero else dev.empty(shape, ktype.np_dtype)
        self._scratch.append(Operand(buf, shape, ktype, buf.ptr))
        return self._scratch[-1]

    def starts(self) -> Iterator[tuple[int, int]]:
        """Each chunk's first token and the token after its last."""
        for r0 in range(0, self.p.tokens, self.p.chunk):
            yield r0, min(r0 + self.p.chunk, self.p.tokens)

    def logits(self, r0: int) -> None:
        """``logits_t = weight @ x[r0 : r0 + chunk]^T`` (tokens past the input: zero rows)."""
        p, x = self.p, self.inputs.x
        for target, transpose in ((self.x_chunk, False), (self.x_chunk_t, True)):
            copy(self.ops, x.value, target.value, x.dtype, target.dtype, (r0, p.tokens), (0, p.chunk),
                 p.chunk, p.hidden, transpose)  # fmt: skip
        matmul.run(self.inputs.weight.value, self.x_chunk_t.value, out=self.logits_t.value, device=self.ops.device)

    def keep(self, o: Operand) -> Operand:
        """A scratch array that becomes a result: not freed by :meth:`release`."""
        self._scratch = [s for s in self._scratch if s is not o]
        return o

    def release(self) -> None:
        for o in self._scratch:
            o.value.free()


def copy(ops: Operands, src: Any, dst: Any, src_type: dtypes.ScalarType, dst_type: dtypes.ScalarType,
         src_window: tuple[int, int], dst_window: tuple[int, int], rows: int, cols: int,
         transpose: bool = False) -> None:  # fmt: skip
    """``rows`` rows of ``src`` from ``src_window[0]`` (rows up to ``src_window[1]`` exist) to
    ``dst`` from ``dst_window[0]`` (rows up to ``dst_window[1]`` written), cast; ``transpose``:
    ``dst`` is ``(cols, dst_window[1])`` and gets the rows as columns."""
    br, bc = COPY_TILE
    grid = (math.ceil(rows / br), math.ceil(cols / bc))
    (s0, s_end), (d0, d_end) = src_window, dst_window
    copy_kernel(src_type, dst_type).launch(ops.device, src, dst, s0, s_end, d0, d_end, cols, d_end, grid=grid,
                                           BR=br, BC=bc, TRANSPOSE=transpose)  # fmt: skip


def forward(x: Any, weight: Any, targets: Any, bias: Any, ignore_index: int, chunk: int | None,
            device: Any) -> tuple[Any, Any]:  # fmt: skip
    """The op itself, without the torch custom-op routing: (losses, log-sum-exps)."""
    ops = Operands(OP, x, weight, targets, bias, device=device)
    inputs = check(ops, x, weight, targets, bias, ignore_index, chunk)
    p = inputs.problem
    check_targets(targets, p.vocab, ignore_index, OP)
    loss, lse = ops.output(p.leading, dtypes.f32), ops.output(p.leading, dtypes.f32)
    if p.tokens:
        chunks = Chunks(ops, inputs)
        bias_arg, bias_type = _bias_arg(inputs)
        kernel = loss_kernel(bias_type, inputs.targets.dtype)
        bv, br = SWEEP_TILE
        for r0, end in chunks.starts():
            chunks.logits(r0)
            kernel.launch(ops.device, chunks.logits_t.value, bias_arg, inputs.targets.value, loss.value, lse.value,
                          r0, end, p.chunk, p.vocab, ignore_index, grid=(math.ceil(p.chunk / br),),
                          BV=bv, BR=br, HAS_BIAS=inputs.bias is not None,
                          GATHER=p.vocab * p.chunk < GATHER_LIMIT)  # fmt: skip
        chunks.release()
    return ops.result(loss), ops.result(lse)


def backward(x: Any, weight: Any, targets: Any, lse: Any, grad_loss: Any, grad_lse: Any, bias: Any,
             ignore_index: int, chunk: int | None, device: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """The backward itself, without the torch custom-op routing: (dx, dweight, dbias or None)."""
    ops = Operands(OP, x, weight, targets, lse, grad_loss, grad_lse, bias, device=device)
    inputs = check(ops, x, weight, targets, bias, ignore_index, chunk)
    olse, ograd, ograd_lse = check_saved(ops, inputs, lse, grad_loss, grad_lse)
    p, ox, ow, ob = inputs.problem, inputs.x, inputs.weight, inputs.bias
    check_targets(targets, p.vocab, ignore_index, OP)
    dx = ops.output(tuple(ox.shape), ox.dtype)
    chunks = Chunks(ops, inputs)
    # f32 accumulators across the chunks (the gradients themselves when they are f32)
    dw_acc = chunks.scratch((p.vocab, p.hidden), dtypes.f32, zero=True)
    db_acc = chunks.scratch((p.vocab,), dtypes.f32, zero=True) if ob is not None else dw_acc
    if p.tokens:
        dlogits = chunks.scratch((p.chunk, p.vocab), ox.dtype)
        dlogits_t = chunks.scratch((p.vocab, p.chunk), ox.dtype)
        dx_chunk = chunks.scratch((p.chunk, p.hidden), ox.dtype)
        bias_arg, bias_type = _bias_arg(inputs)
        kernel = grad_kernel(bias_type, inputs.targets.dtype, ox.dtype)
        bv, br = SWEEP_TILE
        dev = ops.device
        for r0, end in chunks.starts():
            chunks.logits(r0)
            kernel.launch(dev, chunks.logits_t.value, bias_arg, inputs.targets.value, olse.value, ograd.value,
                          (ograd_lse if ograd_lse is not None else ograd).value, dlogits.value, dlogits_t.value, db_acc.value, r0, end,
                          p.chunk, p.vocab, ignore_index, grid=(math.ceil(p.vocab / bv),), BV=bv, BR=br,
                          HAS_BIAS=ob is not None, HAS_GRAD_LSE=ograd_lse is not None)  # fmt: skip
            matmul.run(dlogits.value, ow.value, out=dx_chunk.value, device=dev)
            copy(ops, dx_chunk.value, dx.value, ox.dtype, ox.dtype, (0, p.chunk), (r0, end), p.chunk, p.hidden)
            matmul.run(dlogits_t.value, chunks.x_chunk.value, out=dw_acc.value, beta=1.0, device=dev)
    dw = _cast(ops, chunks, dw_acc, ow.dtype, (p.vocab, p.hidden))
    db = _cast(ops, chunks, db_acc, ob.dtype, (1, p.vocab)) if ob is not None else None
    chunks.release()
    return ops.result(dx), ops.result(dw), (ops.result(db) if db is not None else None)


def _bias_arg(inputs: Inputs) -> tuple[Any, dtypes.ScalarType]:
    """The sweeps' bias argument: the bias, or (unread: HAS_BIAS is off) the weight."""
    b = inputs.bias if inputs.bias is not None else inputs.weight
    return b.value, b.dtype


def _cast(ops: Operands, chunks: Chunks, acc: Operand, ktype: dtypes.ScalarType, rows_cols: tuple[int, int]) -> Operand:
    """An f32 accumulator as a result of ``ktype``: itself when f32 (kept: not released), else a
    new array written by the copy kernel (``acc`` seen as ``rows_cols``)."""
    if ktype == dtypes.f32:
        return chunks.keep(acc)
    out = ops.output(acc.shape, ktype)
    rows, cols = rows_cols
    copy(ops, acc.value, out.value, dtypes.f32, ktype, (0, rows), (0, rows), rows, cols)
    return out
