"""The "Data types" table of docs/ops.md stays true: it is parsed, and every row runs on the
simulator on the smallest legal shapes.

For each op (parametrized by op): every listed type of every argument is passed (the arguments
named together in one clause take the type together, the others their first listed type;
optional arguments are passed only while their own clause is tried; a clause that names
another argument's type is tried under each of that argument's types) and each result must
have the listed type; a result type chosen by a string argument (``per `out_dtype` ``) is tried
for every listed name, and its ``(default ...)`` without it. The row's arguments must be the
array arguments the call passes. Then each argument alone, given any kaio type its clause does
not list (f64, i16, bool, ...), beside each listed type of the other arguments, must raise a
``KaioTypeError`` naming it; so must two arguments of a "(one type)" clause given different
listed types; and an unlisted ``out_dtype``/``dtype`` name a ``KaioValueError``.

The table's notation: an arguments cell is ``; ``-separated clauses ``names: T, T or T`` (the
names in backticks), T a kaio type name (``e4m3``/``e5m2`` for the fp8 types) or ``x's type``
(the type the call's ``x`` has; ``the result's type``); a result cell is one result, or
``; ``-separated named ones ``name: T``; a result T is a type, ``x's type``, ``out's type if
given, else T`` or ``T, T or T per `param` (default T)``. Text in parentheses is a remark,
except ``one type`` and ``default T``. No row is skipped: the fp8 ops run on an sm_89 simulator
(below sm_89 they raise a ``KaioTargetError`` by design), everything else on the default sm_80.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kaio
from kaio import dtypes
from kaio.errors import KaioTypeError, KaioValueError
from kaio.ops_library import _OPS

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"
ALIASES = {"e4m3": "f8e4m3", "e5m2": "f8e5m2"}
# gguf_linear takes a GGUF reader, not arrays: its layer's call is gguf_matmul's row;
# create_block_mask makes a BlockMask of its mask function's arrays (any type): attention's row
LOADERS = {"gguf_linear", "create_block_mask"}
PUBLIC = sorted(n for n in _OPS if n.islower() and not n.endswith("_backward") and n not in LOADERS)


def np_type(name: str) -> np.dtype:
    t = dtypes.BY_NAME.get(ALIASES.get(name, name))
    assert t is not None, f"docs/ops.md data types: {name!r} is not a kaio type name"
    return t.np_dtype


# --------------------------------------------------------------------------- the table


@dataclass
class Clause:
    names: list[str]
    types: list[str]  # type names, or "ref:<arg>" (that argument's type; "ref:result")
    one_type: bool


@dataclass
class Result:
    name: str | None
    types: list[str]  # like Clause.types; several: chosen by `selector`
    selector: str | None = None
    default: str | None = None
    given: str | None = None  # "<arg>'s type if given, else <types[0]>"


@dataclass
class Row:
    op: str
    clauses: list[Clause]
    results: list[Result]

    @property
    def args(self) -> list[str]:
        return [n for c in self.clauses for n in c.names]


def _type_list(text: str) -> list[str]:
    out = []
    for token in re.split(r",|\bor\b", text):
        token = token.strip()
        if not token:
            continue
        ref = re.fullmatch(r"(?:the )?(\w+)'s? type", token)
        out.append(f"ref:{ref.group(1)}" if ref else token)
    return out


def _remarks(text: str) -> tuple[str, list[str]]:
    return re.sub(r"\([^)]*\)", "", text).strip(), re.findall(r"\(([^)]*)\)", text)


def _result(text: str) -> Result:
    named = re.match(r"`(\w+)`\s*(?:\([^)]*\))?\s*:\s*(.*)$", text)
    name, spec = (named.group(1), named.group(2)) if named else (None, text)
    body, remarks = _remarks(spec)
    default = next((m.group(1) for r in remarks if (m := re.search(r"default (\w+)", r))), None)
    per = re.fullmatch(r"(.*) per `(\w+)`", body)
    if per:
        return Result(name, _type_list(per.group(1)), per.group(2), default)
    given = re.fullmatch(r"(\w+)'s type if given, else (\w+)", body)
    if given:
        return Result(name, [given.group(2)], given=given.group(1))
    types = _type_list(body)
    assert len(types) == 1, f"docs/ops.md data types: result {text!r}: one type, or several `per` an argument"
    return Result(name, types)


def parse_table() -> dict[str, Row]:
    text = DOC.read_text()
    section = text.split("\n## Data types\n", 1)
    assert len(section) == 2, "docs/ops.md has no '## Data types' section"
    body = section[1].split("\n## ", 1)[0]
    lines = [ln for ln in body.splitlines() if ln.startswith("|")]
    assert len(lines) > 2, "the Data types section has no table"
    rows = {}
    for line in lines[2:]:  # header and separator
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"docs/ops.md data types: a row needs 4 cells: {line}"
        op = re.fullmatch(r"`(\w+)`", cells[0])
        assert op, f"docs/ops.md data types: the op cell is `name`: {cells[0]!r}"
        clauses = []
        for part in cells[1].split(";"):
            m = re.fullmatch(r"\s*((?:`\w+`,?\s*)+):\s*(.+)", part)
            assert m, f"docs/ops.md data types, {op.group(1)}: clause {part!r} is not '`name`: types'"
            types, remarks = _remarks(m.group(2))
            clauses.append(Clause(re.findall(r"`(\w+)`", m.group(1)), _type_list(types),
                                  any("one type" in r for r in remarks)))  # fmt: skip
        results = [_result(r.strip()) for r in cells[2].split(";")]
        rows[op.group(1)] = Row(op.group(1), clauses, results)
    return rows


TABLE = parse_table()


# --------------------------------------------------------------------------- the calls

SIM = kaio.Device("sim")  # sm_80
SIM_FP8 = kaio.Device("sim", arch="sm_89")  # fp8 tensor cores and conversions are sm_89+


def arr(shape: tuple[int, ...], t: np.dtype | None, fill: float = 1.0) -> Any:
    return None if t is None else np.full(shape, fill, dtype=np.float32).astype(t)


def q8_0_weight(t: np.dtype) -> np.ndarray:
    """One Q8_0 block (34 bytes: f16 scale 0.01, 32 int8 quants of 1) for one row of W."""
    block = np.concatenate([np.frombuffer(np.float16(0.01).tobytes(), np.uint8), np.ones(32, np.uint8)])
    return block.reshape(1, 34).astype(t)


@dataclass
class Op:
    """How to call one op: ``call(t, kw)`` with ``t`` each argument's numpy type (None: an
    optional argument left out) and ``kw`` a selector (``out_dtype=``...); returns the list of
    raw results (each an array or a tuple)."""

    call: Callable[[dict[str, Any], dict[str, Any]], list[Any]]
    optional: frozenset[str] = frozenset()


def _ops() -> dict[str, Op]:
    from kaio.ops_library import (
        attention,
        attention_varlen,
        cross_entropy,
        dropout,
        dropout_add,
        fp8_matmul,
        fused_moe,
        gelu_and_mul,
        gguf_grouped_matmul,
        gguf_matmul,
        grouped_matmul,
        int8_matmul,
        layer_norm,
        linear_cross_entropy,
        log_softmax,
        matmul,
        moe_align,
        moe_topk_softmax,
        paged_attention,
        quantize_fp8,
        quantize_int8,
        rms_norm,
        rope,
        sample,
        silu_and_mul,
        softmax,
        w4a16_grouped_matmul,
        w4a16_matmul,
    )

    def one_row(fn: Callable[..., Any], **kw: Any) -> Callable[[dict[str, Any], dict[str, Any]], list[Any]]:
        return lambda t, _: [fn(arr((1, 1), t["x"]), device=SIM, **kw)]

    def scaled(fn: Callable[..., Any], dev: kaio.Device) -> Callable[[dict[str, Any], dict[str, Any]], list[Any]]:
        return lambda t, kw: [fn(arr((1, 1), t["a"]), arr((1, 1), t["b"]), arr((1,), t["scale_a"]),
                                 arr((1,), t["scale_b"]), bias=arr((1,), t["bias"]), device=dev, **kw)]  # fmt: skip

    def head(t: Any) -> Any:
        return arr((1, 1, 1, 32), t)  # (B, H, S, D): the smallest head dim is 32

    return {
        "matmul": Op(lambda t, _: [matmul(arr((1, 1), t["a"]), arr((1, 1), t["b"]), arr((1, 1), t["out"]),
                                          bias=arr((1,), t["bias"]), device=SIM)], frozenset({"out", "bias"})),  # fmt: skip
        # M 1 takes the decoding path (int8 x, dp4a), M 9 the prefill one (kt.dot)
        "gguf_matmul": Op(lambda t, _: [gguf_matmul(arr((m, 32), t["x"]), q8_0_weight(t["weight"]), "Q8_0",
                                                    device=SIM) for m in (1, 9)]),  # fmt: skip
        "gguf_grouped_matmul": Op(lambda t, _: [gguf_grouped_matmul(
            arr((1, 32), t["x"]), q8_0_weight(t["weight"]).reshape(1, 1, 34), "Q8_0",
            np.array([0, 1]).astype(t["expert_offsets"]), device=SIM)]),  # fmt: skip
        "w4a16_matmul": Op(lambda t, _: [w4a16_matmul(
            arr((1, 8), t["x"]), arr((1, 8), t["qweight"]), arr((1, 8), t["scales"], 0.01),
            arr((1, 1), t["qzeros"]), group_size=-1, bias=arr((8,), t["bias"]), device=SIM)],
            frozenset({"qzeros", "bias"})),  # fmt: skip
        "w4a16_grouped_matmul": Op(lambda t, _: [w4a16_grouped_matmul(
            arr((1, 8), t["x"]), arr((1, 1, 8), t["qweight"]), arr((1, 1, 8), t["scales"], 0.01),
            np.array([0, 1]).astype(t["expert_offsets"]), arr((1, 1, 1), t["qzeros"]), group_size=-1, device=SIM)],
            frozenset({"qzeros"})),  # fmt: skip
        "int8_matmul": Op(scaled(int8_matmul, SIM), frozenset({"bias"})),
        "fp8_matmul": Op(scaled(fp8_matmul, SIM_FP8), frozenset({"bias"})),
        "quantize_int8": Op(lambda t, _: [quantize_int8(arr((1, 1), t["x"]), device=SIM)]),
        "quantize_fp8": Op(lambda t, kw: [quantize_fp8(arr((1, 1), t["x"]), device=SIM_FP8, **kw)]),
        "attention": Op(lambda t, _: [attention(head(t["q"]), head(t["k"]), head(t["v"]), out=head(t["out"]),
                                                kv_lens=arr((1,), t["kv_lens"]), return_lse=True, device=SIM)],
                        frozenset({"out", "kv_lens"})),  # fmt: skip
        # one page of 16 slots, one key; e4m3 caches convert on sm_89+
        "paged_attention": Op(lambda t, _: [paged_attention(
            arr((1, 1, 32), t["q"]), arr((1, 16, 1, 32), t["k_cache"]), arr((1, 16, 1, 32), t["v_cache"]),
            arr((1, 1), t["block_table"], 0), arr((1,), t["seq_lens"]), out=arr((1, 1, 32), t["out"]),
            sinks=arr((1,), t["sinks"]), return_lse=True, device=SIM_FP8)],
            frozenset({"out", "sinks"})),  # fmt: skip
        "attention_varlen": Op(lambda t, _: [attention_varlen(
            arr((1, 1, 32), t["q"]), arr((1, 1, 32), t["k"]), arr((1, 1, 32), t["v"]),
            np.array([0, 1]).astype(t["cu_seqlens_q"]), np.array([0, 1]).astype(t["cu_seqlens_k"]), 1, 1,
            out=arr((1, 1, 32), t["out"]), return_lse=True, device=SIM)], frozenset({"out"})),  # fmt: skip
        # e4m3 experts convert on sm_89+
        "grouped_matmul": Op(lambda t, kw: [grouped_matmul(
            arr((1, 1), t["x"]), arr((1, 1, 1), t["w"]), np.array([0, 1]).astype(t["expert_offsets"]),
            w_scale=arr((1,), t["w_scale"]), device=SIM_FP8, **kw)], frozenset({"w_scale"})),  # fmt: skip
        "fused_moe": Op(lambda t, _: [fused_moe(
            arr((1, 1), t["x"]), arr((1, 2, 1), t["w_gate_up"]), arr((1, 1, 1), t["w_down"]), arr((1, 1), t["weights"]),
            arr((1, 1), t["ids"], 0), w_gate_up_scale=arr((1,), t["w_gate_up_scale"]),
            w_down_scale=arr((1,), t["w_down_scale"]), device=SIM_FP8)],
            frozenset({"w_gate_up_scale", "w_down_scale"})),  # fmt: skip
        "moe_align": Op(lambda t, _: [moe_align(arr((1, 1), t["ids"], 0), 1, 1, device=SIM)]),
        "moe_topk_softmax": Op(lambda t, _: [moe_topk_softmax(arr((1, 1), t["logits"]), 1, device=SIM)]),
        "softmax": Op(one_row(softmax)),
        "log_softmax": Op(one_row(log_softmax)),
        "layer_norm": Op(lambda t, _: [layer_norm(arr((1, 1), t["x"]), arr((1,), t["weight"]), arr((1,), t["bias"]),
                                                  device=SIM)], frozenset({"weight", "bias"})),  # fmt: skip
        "rms_norm": Op(lambda t, _: [rms_norm(arr((1, 1), t["x"]), arr((1,), t["weight"]),
                                              residual=arr((1, 1), t["residual"]), device=SIM)],
                       frozenset({"weight", "residual"})),  # fmt: skip
        # S = H = 1: the layout must be named
        "rope": Op(lambda t, _: [rope(arr((1, 1, 1, 2), t["x"]), arr((1, 1), t["cos"]), arr((1, 1), t["sin"]),
                                      layout="bshd", device=SIM)]),  # fmt: skip
        "silu_and_mul": Op(lambda t, _: [silu_and_mul(arr((1, 2), t["x"]), device=SIM)]),
        "sample": Op(lambda t, _: [sample(arr((1, 3), t["logits"]), temperature=temp, device=SIM) for temp in (0.0, 1.0)]),
        "gelu_and_mul": Op(lambda t, _: [gelu_and_mul(arr((1, 2), t["x"]), device=SIM)]),
        "cross_entropy": Op(lambda t, _: [cross_entropy(arr((1, 1), t["logits"]), arr((1,), t["targets"], 0),
                                                        return_grad=grad, device=SIM)
                                          for grad in (False, True)]),  # fmt: skip
        # p > 0: with p == 0 dropout returns x itself, checking nothing
        "dropout": Op(lambda t, _: [dropout(arr((1,), t["x"]), 0.5, 0, device=SIM)]),
        "dropout_add": Op(lambda t, _: [dropout_add(arr((1,), t["x"]), arr((1,), t["residual"]), 0.5, 0,
                                                    device=SIM)]),  # fmt: skip
        "linear_cross_entropy": Op(lambda t, _: [linear_cross_entropy(
            arr((1, 1), t["x"]), arr((1, 1), t["weight"]), arr((1,), t["targets"], 0), bias=arr((1,), t["bias"]),
            return_lse=True, device=SIM)], frozenset({"bias"})),  # fmt: skip
    }


OPS = _ops()


# --------------------------------------------------------------------------- the checks


def resolve(types: list[str], chosen: dict[str, str | None], result: str | None = None) -> list[str]:
    """Type names with the references replaced by the call's types."""
    out = []
    for t in types:
        if t.startswith("ref:"):
            ref = t[4:]
            t = result if ref == "result" else chosen.get(ref)
            assert t is not None, f"a reference to {ref!r}, which this call does not have"
        out.append(t)
    return out


def result_type(row: Row, kw: dict[str, Any]) -> str | None:
    """The type the call's result has when one is chosen by a string argument (else None)."""
    sel = [r for r in row.results if r.selector]
    if not sel:
        return None
    return kw.get(sel[0].selector, sel[0].default)


def assign(row: Row, present: set[str], override: dict[str, str], kw: dict[str, Any]) -> dict[str, str | None]:
    """Every argument's type name: ``override``, else its clause's first type (references
    resolved in clause order); optional arguments not in ``present`` are None."""
    chosen: dict[str, str | None] = {}
    for c in row.clauses:
        for n in c.names:
            if n in OPS[row.op].optional and n not in present:
                chosen[n] = None
            elif n in override:
                chosen[n] = override[n]
            else:
                chosen[n] = resolve(c.types[:1], chosen, result_type(row, kw))[0]
    return chosen


def expected(row: Row, res: Result, chosen: dict[str, str | None], kw: dict[str, Any]) -> str:
    if res.selector:
        return kw.get(res.selector, res.default)  # type: ignore[return-value]
    if res.given and chosen.get(res.given) is not None:
        return chosen[res.given]  # type: ignore[return-value]
    return resolve(res.types, chosen)[0]


class Types(dict):  # type: ignore[type-arg]
    """The call's argument types, recording which the call reads."""

    read: set[str]

    def __getitem__(self, name: str) -> Any:
        assert name in self, f"the call passes `{name}`, which the table's row does not list"
        self.read.add(name)
        return super().__getitem__(name)


def run(row: Row, chosen: dict[str, str | None], kw: dict[str, Any], read: set[str] | None = None) -> list[Any]:
    t = Types({n: None if v is None else np_type(v) for n, v in chosen.items()})
    t.read = read if read is not None else set()
    return OPS[row.op].call(t, kw)


def clause_of(row: Row, name: str) -> Clause:
    return next(c for c in row.clauses if name in c.names)


def contexts(row: Row, c: Clause) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The settings a clause's references are tried under: every listed type of the argument
    it refers to (with that argument's clause), every result type for "the result's type"
    (its selector set); none: the defaults alone."""
    out: list[tuple[dict[str, str], dict[str, Any]]] = [({}, {})]
    for ref in {t[4:] for t in c.types if t.startswith("ref:")}:
        if ref == "result":
            sel = next(r for r in row.results if r.selector)
            out = [(o, {**kw, sel.selector: t}) for o, kw in out for t in sel.types]
        else:
            other = clause_of(row, ref)
            types = resolve(other.types, assign(row, set(other.names), {}, {}), result_type(row, {}))
            out = [({**o, **dict.fromkeys(other.names, t)}, kw) for o, kw in out for t in types]
    return out


def calls(row: Row) -> list[tuple[dict[str, str | None], dict[str, Any]]]:
    """(argument types, keyword arguments) of every call the row asks for."""
    out, seen = [], set()

    def add(chosen: dict[str, str | None], kw: dict[str, Any]) -> None:
        key = (tuple(sorted(chosen.items(), key=lambda i: i[0])), tuple(sorted(kw.items())))
        if key not in seen:
            seen.add(key)
            out.append((chosen, kw))

    add(assign(row, set(), {}, {}), {})
    for c in row.clauses:
        for override, kw in contexts(row, c):
            base = assign(row, set(c.names), override, kw)
            for t in resolve(c.types, base, result_type(row, kw)):
                add(assign(row, set(c.names), {**override, **dict.fromkeys(c.names, t)}, kw), kw)
    for r in row.results:
        if r.selector:
            assert r.default in r.types, f"{row.op}: `{r.selector}`'s default {r.default!r} is not listed"
            for t in r.types:
                add(assign(row, set(), {}, {r.selector: t}), {r.selector: t})
    return out


def test_the_table_has_every_public_op_once() -> None:
    assert sorted(TABLE) == PUBLIC
    assert sorted(OPS) == PUBLIC  # this file calls each one


@pytest.mark.parametrize("op", PUBLIC)
def test_every_listed_type_runs_and_gives_the_listed_result(op: str) -> None:
    row = TABLE[op]
    assert len(row.args) == len(set(row.args)), f"{op}: an argument listed twice"
    assert len(row.results) == 1 or all(r.name for r in row.results), f"{op}: several results must each be named"
    seen: set[str | None] = set()
    read: set[str] = set()
    for chosen, kw in calls(row):
        for raw in run(row, chosen, kw, read):
            values = raw if isinstance(raw, tuple) else (raw,)
            assert len(values) <= len(row.results), f"{op} returned {len(values)} results, the table has {len(row.results)}"
            for res, value in zip(row.results, values, strict=False):
                want = np_type(expected(row, res, chosen, kw))
                assert isinstance(value, np.ndarray), f"{op}: numpy in, numpy out; got {type(value).__name__}"
                assert value.dtype == want, (
                    f"{op}{chosen} {kw}: result {res.name or ''} is {value.dtype}, the table says {want}"
                )
                seen.add(res.name)
    assert seen == {r.name for r in row.results}, f"{op}: the table lists results no call returned"
    assert read == set(row.args), f"{op}: the table lists the arguments {row.args}, the call passes {sorted(read)}"
    assert OPS[op].optional <= read


def kaio_name(name: str) -> str:
    return ALIASES.get(name, name)


ALL_TYPES = [t.name for t in dtypes.ALL_TYPES]


def settings(row: Row, c: Clause) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The clause's references' settings (:func:`contexts`), and every listed type of each
    other argument (with its clause), and every result type chosen by name: what an unlisted
    type is refused under."""
    out = contexts(row, c)
    for other in row.clauses:
        if other is not c:
            types = resolve(other.types, assign(row, set(other.names), {}, {}), result_type(row, {}))
            out += [(dict.fromkeys(other.names, t), {}) for t in types]
    for r in row.results:
        if r.selector:
            out += [({}, {r.selector: t}) for t in r.types]
    unique = {(tuple(sorted(o.items())), tuple(sorted(kw.items()))): (o, kw) for o, kw in out}
    return list(unique.values())


@pytest.mark.parametrize("op", PUBLIC)
def test_every_unlisted_type_raises_kaio_type_error(op: str) -> None:
    """Each argument alone, given any kaio type its clause does not list (beside each listed
    type of the other arguments), is refused with a KaioTypeError naming it: the row lists
    all that the op takes."""
    row = TABLE[op]
    for c in row.clauses:
        for override, kw in settings(row, c):
            base = assign(row, set(c.names), override, kw)
            allowed = resolve(c.types, base, result_type(row, kw))
            for n in c.names:
                for bad in ALL_TYPES:
                    if bad in {kaio_name(a) for a in allowed}:
                        continue
                    with pytest.raises(KaioTypeError, match=rf"(?i)\b{n}\b"):  # naming it
                        run(row, {**base, n: bad}, kw)
            if c.one_type and len(c.names) > 1 and len(set(allowed)) > 1:
                first, other = allowed[0], next(t for t in allowed if t != allowed[0])
                mixed = {**base, **dict.fromkeys(c.names[1:], other), c.names[0]: first}
                with pytest.raises(KaioTypeError):
                    run(row, mixed, kw)


@pytest.mark.parametrize("op", [op for op in PUBLIC if any(r.selector for r in TABLE[op].results)])
def test_an_unlisted_result_type_name_raises_kaio_value_error(op: str) -> None:
    row = TABLE[op]
    for r in row.results:
        if r.selector:
            for bad in ("f64", "i8", "float16"):
                if bad not in r.types:
                    with pytest.raises(KaioValueError, match=r.selector):
                        run(row, assign(row, set(), {}, {}), {r.selector: bad})
