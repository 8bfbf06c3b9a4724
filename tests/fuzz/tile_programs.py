"""Random tile programs for the tile-kernel differential fuzzer: each is the source of one
``@kaio.tile_kernel`` and, step for step, the numpy evaluation of the same program.

A program reads two flat inputs (``xf``: f32, ``xi``: i32, both seen as H x W row-major
matrices or as one long row), builds tiles with masked view loads (random offsets and bounds,
negative ones included, passed as runtime scalars), gathers (index tiles from ``kt.arange`` or
from loaded data, with masks), ranges, elementwise chains with broadcasts, casts and
``kt.where``, bool tiles (comparisons, also of broadcast rows against columns, combined with
``&`` and ``|``, expanded to rows or columns as masks of ``kt.where``, cast to i32),
outer combinations of two 1-D tiles (``kt.expand_dims(a, 1) op kt.expand_dims(b, 0)``: a 1-D
tile reused on either axis and by several users), reductions on each axis, transposes, small
dots (f32 or f16 operands), loops that carry a tile, and ``kt.atomic_add`` into a histogram
(collisions included), then stores one f32 and one i32 tile through masked views. Values stay small integers, so every f32 sum, product and dot is
exact in any order and the comparison is exact too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import tile_semantics as sem

H, W = 48, 80  # the inputs and outputs as matrices
SIZE = H * W
BINS = 64  # the histogram
EXACT = 1 << 22  # f32 magnitudes kept below this stay exact integers
Env = dict[str, object]


@dataclass(frozen=True)
class Tile:
    name: str
    dtype: str  # "f32", "i32" or "bool"
    shape: tuple[int, ...]
    bound: int  # no element's magnitude exceeds this


@dataclass
class TileProgram:
    num_warps: int
    lines: list[str] = field(default_factory=list)
    steps: list[Callable[[Env], None]] = field(default_factory=list)
    params: list[tuple[str, int]] = field(default_factory=list)

    def source(self) -> str:
        params = "".join(f", {name}: i32" for name, _ in self.params)
        head = (f"@kaio.tile_kernel(num_warps={self.num_warps})\n"
                f"def fuzz(xf: Array[f32], xi: Array[i32], of: MutArray[f32], oi: MutArray[i32], hist: MutArray[i32]{params}):\n")  # fmt: skip
        return head + "".join(f"    {line}\n" for line in self.lines)

    def evaluate(self, xf: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(of, oi, hist) after the program, from poisoned outputs (NaN, i32 max, zeros)."""
        env: Env = {"xf": xf, "xi": xi, "of": np.full(SIZE, np.nan, np.float32),
                    "oi": np.full(SIZE, np.iinfo(np.int32).max, np.int32), "hist": np.zeros(BINS, np.int32)}  # fmt: skip
        env.update(dict(self.params))
        with np.errstate(over="ignore"):
            for step in self.steps:
                step(env)
        return env["of"], env["oi"], env["hist"]  # type: ignore[return-value]


def _tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


_NP = {"f32": np.float32, "i32": np.int32, "bool": np.bool_}
_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}
_LOADED = {"f32": 4, "i32": BINS + 4}  # the magnitudes ``inputs`` draws


class Builder:
    """Draws one program statement by statement, keeping the tiles made so far."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.p = TileProgram(num_warps=int(rng.choice([1, 2, 4])))
        self.tiles: list[Tile] = []
        self.count = 0

    # ------------------------------------------------------------------ helpers

    def pick(self, options: list) -> object:
        return options[int(self.rng.integers(len(options)))]

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def param(self, value: int) -> str:
        name = f"p{len(self.p.params)}"
        self.p.params.append((name, int(value)))
        return name

    def scalar(self, value: int, literal_ok: bool = True) -> str:
        """A runtime scalar, or (non-negative values, sometimes) a literal."""
        return str(value) if literal_ok and value >= 0 and self.rng.random() < 0.3 else self.param(value)

    def emit(self, line: str, step: Callable[[Env], None]) -> None:
        self.p.lines.append(line)
        self.p.steps.append(step)

    def define(self, t: Tile, expr: str, fn: Callable[[Env], np.ndarray]) -> Tile:
        def step(env: Env, name: str = t.name) -> None:
            env[name] = fn(env)

        self.emit(f"{t.name} = {expr}", step)
        self.tiles.append(t)
        return t

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = rank or int(self.pick([1, 2]))
        if rank == 1:
            dims = [n for t in self.tiles if len(t.shape) == 2 for n in t.shape]
            if dims and self.rng.random() < 0.5:  # a row or column of a 2-D tile made before
                return (int(self.pick(dims)),)
            return (int(self.pick([1, 2, 8, 16, 32, 64, 128])),)
        return (int(self.pick([1, 2, 4, 8, 16])), int(self.pick([1, 4, 8, 16, 32])))

    def tile_of(self, dtype: str, shape: tuple[int, ...] | None = None) -> Tile:
        found = [t for t in self.tiles if t.dtype == dtype and (shape is None or t.shape == shape)]
        if found and self.rng.random() < 0.8:
            return self.pick(found)  # type: ignore[return-value]
        if dtype == "bool":
            return self.predicate(shape)
        shape, roll = shape or self.shape(), self.rng.random()
        if dtype == "i32" and len(shape) == 1 and roll < 0.2:
            return self.ranged(shape)
        return self.shifted(dtype, shape) if roll > 0.7 else self.load(dtype, shape)

    # ------------------------------------------------------------------ making tiles

    def load(self, dtype: str, shape: tuple[int, ...]) -> Tile:
        if len(shape) == 1 and self.rng.random() < 0.3:
            return self.gather(dtype, shape)
        array = "xf" if dtype == "f32" else "xi"
        if len(shape) == 1:
            extents, strides = (SIZE,), (1,)
        else:
            extents = (H, W)
        offsets = [int(self.rng.integers(-n - 3, e + 3)) for n, e in zip(shape, extents, strict=True)]
        bounds = [int(self.pick([-3, -1, 0, e, e, int(self.rng.integers(0, e + 1))])) for e in extents]
        offs = [self.scalar(o) for o in offsets]
        bnds = [self.scalar(b) for b in bounds]
        strides_text = ""
        if len(shape) == 2:
            if self.rng.random() < 0.5:
                strides, strides_text = (W, 1), f", ({W}, 1)"
            else:
                strides = (bounds[1], 1)  # the default: rows of bounds[1] columns
        other = int(self.rng.integers(-3, 4))
        expr = f"kt.load({array}, {_tuple_text(offs)}, {shape}, {_tuple_text(bnds)}{strides_text}, other={other})"
        fn = lambda env: sem.view_load(env[array], offsets, shape, bounds, strides, other)
        return self.define(Tile(self.fresh(), dtype, shape, max(_LOADED[dtype], abs(other))), expr, fn)

    def load_once(self, dtype: str, shape: tuple[int, ...] | None = None) -> Tile:
        """A load no later statement picks: its one user, a map, is then the only way to it
        (``target = i32(kt.load(...))``), which tile-layout can remake in another layout."""
        t = self.load(dtype, shape or self.shape())
        self.tiles.remove(t)
        return t

    def shifted(self, dtype: str, shape: tuple[int, ...]) -> Tile:
        """A map of a load only it reads (``kt.load(...) + 1``), for later statements to share."""
        base = self.load_once(dtype, shape)
        v = int(self.rng.integers(-3, 4))
        text = f"{float(v)}" if dtype == "f32" else self.scalar(v)
        fn = lambda env: (env[base.name] + _NP[dtype](v)).astype(_NP[dtype])
        return self.define(Tile(self.fresh(), dtype, shape, base.bound + abs(v)), f"{base.name} + {text}", fn)

    def gather(self, dtype: str, shape: tuple[int, ...]) -> Tile:
        array = "xf" if dtype == "f32" else "xi"
        (n,) = shape
        data = [t for t in self.tiles if t.dtype == "i32" and t.shape == shape and t.bound <= _LOADED["i32"]]
        if data and self.rng.random() < 0.5:  # data-dependent indices (from xi: 0..63, or `other`)
            index = self.pick(data)
            idx_name, idx_fn = index.name, (lambda env, i=index.name: env[i])  # type: ignore[attr-defined]
        else:
            step, base = int(self.pick([1, 2, 3])), int(self.rng.integers(-20, 200))
            index = self.define(Tile(self.fresh("i"), "i32", shape, abs(base) + step * n),
                                f"kt.arange({n}) * {step} + {self.param(base)}",
                                lambda env, s=step, b=base: (np.arange(n, dtype=np.int32) * s + b).astype(np.int32))
            idx_name, idx_fn = index.name, (lambda env, i=index.name: env[i])
        limit = int(self.rng.integers(0, SIZE + 1))
        lim = self.param(limit)
        other = int(self.rng.integers(-3, 4))
        expr = f"kt.load({array}, {idx_name}, mask=({idx_name} >= 0) & ({idx_name} < {lim}), other={other})"

        def fn(env: Env) -> np.ndarray:
            idx = np.asarray(idx_fn(env)).astype(np.int64)
            return sem.gather(env[array], idx, (idx >= 0) & (idx < limit), other)  # type: ignore[arg-type]

        return self.define(Tile(self.fresh(), dtype, shape, max(_LOADED[dtype], abs(other))), expr, fn)

    # ------------------------------------------------------------------ computing

    def operand_like(self, a: Tile, dtype: str | None = None) -> tuple[str, Callable[[Env], np.ndarray], int]:
        """Something to combine with ``a`` (of ``dtype``, a's own by default): a tile of its
        shape, a broadcast row or column, or (not for bool) a literal or an i32 scalar."""
        dtype = dtype or a.dtype
        roll = self.rng.random()
        if roll < 0.25 and dtype != "bool":
            v = int(self.rng.integers(-3, 4))
            text = f"{float(v)}" if dtype == "f32" else self.scalar(v)
            return text, (lambda env, v=v: _NP[dtype](v)), abs(v)
        if len(a.shape) == 2 and roll < 0.6:
            axis = int(self.rng.integers(2))
            row = self.tile_of(dtype, (a.shape[1 - axis],))
            return (f"kt.expand_dims({row.name}, {axis})", (lambda env, r=row.name, ax=axis: np.expand_dims(env[r], ax)), row.bound)
        b = self.tile_of(dtype, a.shape)
        return b.name, (lambda env, n=b.name: env[n]), b.bound

    def elementwise(self) -> Tile:
        dtype = str(self.pick(["f32", "f32", "i32"]))
        a = self.load_once(dtype) if self.rng.random() < 0.3 else self.tile_of(dtype)
        text, b_fn, b_bound = self.operand_like(a)
        ops = ["+", "-", "*", "max", "min"] + (["&", "|", "^"] if dtype == "i32" else [])
        op = str(self.pick(ops))
        if op == "*" and a.bound * max(b_bound, 1) > EXACT:
            op = "+"
        bound = {"*": a.bound * max(b_bound, 1)}.get(op, a.bound + b_bound)
        if op in ("&", "|", "^"):
            bound = 2 << max(a.bound, b_bound, 1).bit_length()
        if op in ("max", "min"):
            expr = f"kt.{'maximum' if op == 'max' else 'minimum'}({a.name}, {text})"
            f = np.maximum if op == "max" else np.minimum
            fn = lambda env: f(env[a.name], b_fn(env)).astype(_NP[dtype])
        else:
            expr = f"{a.name} {op} {text}"
            f = {"+": np.add, "-": np.subtract, "*": np.multiply, "&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op]
            fn = lambda env: f(env[a.name], b_fn(env)).astype(_NP[dtype])
        shape = a.shape
        return self.define(Tile(self.fresh(), dtype, shape, bound), expr, fn)

    def select(self) -> Tile:
        dtype = str(self.pick(["f32", "i32"]))
        a = self.tile_of(dtype)
        b = self.tile_of(dtype, a.shape)
        c_text, c_fn, _ = self.operand_like(a)
        cmp = str(self.pick(list(_COMPARE)))
        f = _COMPARE[cmp]
        expr = f"kt.where({a.name} {cmp} {c_text}, {a.name}, {b.name})"
        fn = lambda env: np.where(f(env[a.name], c_fn(env)), env[a.name], env[b.name]).astype(_NP[dtype])
        return self.define(Tile(self.fresh(), dtype, a.shape, max(a.bound, b.bound)), expr, fn)

    def cast(self) -> Tile:
        masks = [t for t in self.tiles if t.dtype == "bool"]
        if masks and self.rng.random() < 0.3:
            m = self.pick(masks)
            return self.define(Tile(self.fresh(), "i32", m.shape, 1), f"i32({m.name})",  # type: ignore[attr-defined]
                               lambda env: env[m.name].astype(np.int32))  # type: ignore[attr-defined]
        src = str(self.pick(["f32", "i32"]))
        a = self.load_once(src) if self.rng.random() < 0.3 else self.tile_of(src)
        if src == "i32" and a.bound > EXACT:
            return self.elementwise()
        dst = "i32" if src == "f32" else "f32"
        fn = lambda env: env[a.name].astype(_NP[dst])
        return self.define(Tile(self.fresh(), dst, a.shape, a.bound), f"{dst}({a.name})", fn)

    # ------------------------------------------------------------------ ranges and masks

    def ranged(self, shape: tuple[int, ...] | None = None) -> Tile:
        """``kt.arange(n)``, shifted by a scalar (``inside = kt.arange(n) + start < end``)."""
        (n,) = shape or self.shape(1)
        start = int(self.rng.integers(-40, 40))
        expr = f"kt.arange({n})" + (f" + {self.scalar(start)}" if start else "")
        fn = lambda env: (np.arange(n) + start).astype(np.int32)
        return self.define(Tile(self.fresh("r"), "i32", (n,), n + abs(start)), expr, fn)

    def predicate(self, shape: tuple[int, ...] | None = None) -> Tile:
        """A bool tile: a comparison of a tile with a tile, a broadcast row or column, or a
        scalar; often a fresh range (``kt.arange(n) + start < end``) or load, made for it alone."""
        return self.compared(self.tile_of(str(self.pick(["f32", "i32", "i32"])), shape))

    def compared(self, a: Tile) -> Tile:
        dtype = a.dtype
        if self.rng.random() < 0.4:
            b = self.ranged(a.shape) if dtype == "i32" and len(a.shape) == 1 and self.rng.random() < 0.5 else self.load_once(dtype, a.shape)
            text, b_fn = b.name, (lambda env, n=b.name: env[n])
        else:
            text, b_fn, _ = self.operand_like(a)
        cmp = str(self.pick(list(_COMPARE)))
        fn = lambda env: _COMPARE[cmp](env[a.name], b_fn(env))
        return self.define(Tile(self.fresh("m"), "bool", a.shape, 1), f"{a.name} {cmp} {text}", fn)

    def logic(self) -> Tile:
        """Masks combined with ``&`` or ``|``: a mask of the same shape or a broadcast row or
        column. (Not ``~``: the frontend refuses it on bool tiles, though the language guide
        lists it.)"""
        a = self.tile_of("bool")
        text, b_fn, _ = self.operand_like(a, "bool")
        op = str(self.pick(["&", "&", "|"]))
        f = np.logical_and if op == "&" else np.logical_or
        return self.define(Tile(self.fresh("m"), "bool", a.shape, 1), f"{a.name} {op} {text}", lambda env: f(env[a.name], b_fn(env)))

    def masked(self) -> Tile:
        """``kt.where(mask, a, b)``: the mask of a's shape or a row or column expanded to it."""
        dtype = str(self.pick(["f32", "i32"]))
        a = self.tile_of(dtype)
        m_text, m_fn, _ = self.operand_like(a, "bool")
        b_text, b_fn, b_bound = self.operand_like(a)
        fn = lambda env: np.where(m_fn(env), env[a.name], b_fn(env)).astype(_NP[dtype])
        return self.define(Tile(self.fresh(), dtype, a.shape, max(a.bound, b_bound)), f"kt.where({m_text}, {a.name}, {b_text})", fn)

    def fanout(self) -> Tile:
        """A 1-D tile with several users on one axis of a 2-D tile: a mask made from it (against
        a range, a load or a scalar) selects, and the tile itself is added, both through
        ``kt.expand_dims`` (a cross-entropy backward's per-token target)."""
        rows, cols = int(self.pick([4, 8, 16])), int(self.pick([8, 16, 32]))  # no size-1 dim: layouts differ
        axis = int(self.rng.integers(2))
        dtype = str(self.pick(["f32", "i32", "i32"]))
        x = self.tile_of(dtype, ((cols, rows)[axis],))
        mask = self.compared(x)
        grid = self.tile_of(dtype, (rows, cols))
        other, other_fn, other_bound = self.operand_like(grid)
        expr = f"kt.where(kt.expand_dims({mask.name}, {axis}), {grid.name} + kt.expand_dims({x.name}, {axis}), {other})"

        def fn(env: Env) -> np.ndarray:
            kept = env[grid.name] + np.expand_dims(env[x.name], axis)
            return np.where(np.expand_dims(env[mask.name], axis), kept, other_fn(env)).astype(_NP[dtype])

        return self.define(Tile(self.fresh(), dtype, (rows, cols), max(grid.bound + x.bound, other_bound)), expr, fn)

    def outer(self) -> Tile:
        """Two 1-D tiles expanded on different axes and combined (``entry == kt.expand_dims(target,
        0)``): a comparison (a bool tile) or arithmetic."""
        rows, cols = self.shape(2)
        dtype = str(self.pick(["f32", "i32", "i32"]))
        a, b = self.tile_of(dtype, (rows,)), self.tile_of(dtype, (cols,))
        op = str(self.pick([*_COMPARE, "+", "-", "*"]))
        if op == "*" and a.bound * b.bound > EXACT:
            op = "-"
        expr = f"kt.expand_dims({a.name}, 1) {op} kt.expand_dims({b.name}, 0)"
        if op in _COMPARE:
            fn = lambda env: _COMPARE[op](env[a.name][:, None], env[b.name][None, :])
            return self.define(Tile(self.fresh("m"), "bool", (rows, cols), 1), expr, fn)
        f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        bound = a.bound * b.bound if op == "*" else a.bound + b.bound
        fn = lambda env: f(env[a.name][:, None], env[b.name][None, :]).astype(_NP[dtype])
        return self.define(Tile(self.fresh(), dtype, (rows, cols), bound), expr, fn)

    # ------------------------------------------------------------------ shapes

    def reduce(self) -> Tile:
        dtype = str(self.pick(["f32", "i32"]))
        a = self.tile_of(dtype, self.shape(2))
        kind, axis = str(self.pick(["sum", "max", "min"])), int(self.rng.integers(2))
        if kind == "sum" and a.bound * a.shape[axis] > EXACT:
            kind = "max"
        bound = a.bound * a.shape[axis] if kind == "sum" else a.bound
        f = {"sum": np.sum, "max": np.max, "min": np.min}[kind]
        fn = lambda env: f(env[a.name], axis=axis).astype(_NP[dtype])
        return self.define(Tile(self.fresh(), dtype, (a.shape[1 - axis],), bound), f"kt.{kind}({a.name}, {axis})", fn)

    def reshape(self) -> Tile:
        dtype = str(self.pick(["f32", "i32"]))
        if self.rng.random() < 0.5:
            a = self.tile_of(dtype, self.shape(2))
            fn = lambda env: np.ascontiguousarray(env[a.name].T)
            return self.define(Tile(self.fresh(), dtype, a.shape[::-1], a.bound), f"kt.trans({a.name})", fn)
        a = self.tile_of(dtype, self.shape(1))
        rows = int(self.pick([1, 2, 4, 8]))
        expr = f"kt.broadcast_to(kt.expand_dims({a.name}, 0), ({rows}, {a.shape[0]}))"
        fn = lambda env: np.broadcast_to(env[a.name][None, :], (rows, a.shape[0])).copy()
        return self.define(Tile(self.fresh(), dtype, (rows, a.shape[0]), a.bound), expr, fn)

    def dot(self) -> Tile:
        m, n, k = (int(self.pick([16, 32])) for _ in range(3))
        a, b = self.load("f32", (m, k)), self.load("f32", (k, n))
        half = self.rng.random() < 0.5
        names = [f"f16({x.name})" if half else x.name for x in (a, b)]
        acc = self.tile_of("f32", (m, n)) if self.rng.random() < 0.5 else None
        acc_text = acc.name if acc is not None and acc.bound <= EXACT // 2 else f"kt.zeros(({m}, {n}), f32)"
        acc_fn = (lambda env: env[acc.name]) if acc_text != f"kt.zeros(({m}, {n}), f32)" else (lambda env: np.zeros((m, n), np.float32))  # type: ignore[union-attr]
        bound = a.bound * b.bound * k + (acc.bound if acc is not None else 0)

        def fn(env: Env) -> np.ndarray:
            prod = env[a.name].astype(np.float64) @ env[b.name].astype(np.float64)  # type: ignore[union-attr]
            return (prod + acc_fn(env)).astype(np.float32)

        return self.define(Tile(self.fresh(), "f32", (m, n), bound), f"kt.dot({names[0]}, {names[1]}, {acc_text})", fn)

    def loop(self) -> Tile:
        t = self.tile_of("f32")
        trips = int(self.rng.integers(1, 5))
        acc = Tile(self.fresh("acc"), "f32", t.shape, t.bound * (trips * trips + 1))
        self.define(acc, f"kt.zeros({t.shape}, f32) + {t.name}", lambda env: env[t.name].copy())
        maximum = self.rng.random() < 0.3
        body = f"kt.maximum({acc.name}, {t.name} + f32(j))" if maximum else f"{acc.name} + {t.name} * f32(j)"

        def step(env: Env) -> None:
            for j in range(trips):
                v = env[t.name] + np.float32(j) if maximum else env[t.name] * np.float32(j)
                env[acc.name] = (np.maximum(env[acc.name], v) if maximum else env[acc.name] + v).astype(np.float32)

        self.emit(f"for j in range({trips}):\n        {acc.name} = {body}", step)
        return acc

    def atomics(self) -> None:
        (n,) = self.shape(1)
        idx = self.tile_of("i32", (n,))
        vals = self.tile_of("i32", (n,))
        expr = f"kt.atomic_add(hist, {idx.name}, {vals.name}, mask=({idx.name} >= 0) & ({idx.name} < {BINS}))"

        def step(env: Env) -> None:
            i = env[idx.name].astype(np.int64)  # type: ignore[union-attr]
            sem.atomic_add(env["hist"], i, env[vals.name], (i >= 0) & (i < BINS))  # type: ignore[arg-type]

        self.emit(expr, step)

    def store(self, array: str, dtype: str) -> None:
        made = [t for t in self.tiles if t.dtype == dtype]
        # mostly the last tile made: what the program computed reaches memory, not only its loads
        t = made[-1] if made and self.rng.random() < 0.6 else self.tile_of(dtype)
        if len(t.shape) == 1:
            extents, strides, strides_text = (SIZE,), (1,), ""
        else:
            extents, strides, strides_text = (H, W), (W, 1), f", ({W}, 1)"
        offsets = [int(self.rng.integers(-n - 3, e + 3)) for n, e in zip(t.shape, extents, strict=True)]
        bounds = [int(self.pick([-2, 0, e, e, e, int(self.rng.integers(0, e + 1))])) for e in extents]
        expr = f"kt.store({array}, {_tuple_text([self.scalar(o) for o in offsets])}, {t.name}, {_tuple_text([self.scalar(b) for b in bounds])}{strides_text})"
        self.emit(expr, lambda env: sem.view_store(env[array], offsets, env[t.name], bounds, strides))  # type: ignore[arg-type]


def random_program(rng: np.random.Generator) -> TileProgram:
    b = Builder(rng)
    makers = [b.elementwise, b.elementwise, b.select, b.cast, b.reduce, b.reshape, b.dot, b.loop,
              b.masked, b.fanout, b.outer, b.logic]
    for _ in range(int(rng.integers(2, 7))):
        makers[int(rng.integers(len(makers)))]()
    if rng.random() < 0.4:
        b.atomics()
    b.store("of", "f32")
    b.store("oi", "i32")
    return b.p


def inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(xf, xi): small integers, and indices into the histogram (with some out of its range)."""
    return rng.integers(-4, 5, SIZE).astype(np.float32), rng.integers(-4, BINS + 4, SIZE).astype(np.int32)
