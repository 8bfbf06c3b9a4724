"""The pass manager: the IR verified after every pass, user passes in pipeline strings
(``kaio.register_pass`` and ``xdsl.universe`` entry points), pass contracts, the pipeline
callback, pass timing, print-after-change, and pipeline edits."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib import metadata
from types import SimpleNamespace

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32
from xdsl.passes import ModulePass
from xdsl.transforms.canonicalize import CanonicalizePass

import kaio
import kaio.tile as kt
from kaio import pass_registry
from kaio.entry_points import ENTRY_POINT_GROUP
from kaio.errors import KaioCompileError, KaioPipelineError, KaioPipelineWarning
from kaio.pass_manager import PassTiming, print_after_change, timing_table
from kaio.pipeline import Pipeline, available_passes, tile_pipeline
from kaio.prelude import Array, MutArray, f16, f32, i32 as ki32, thread_idx_x, u32


@kaio.gpu_kernel(block_size=32)
def triple(x: Array[f32], y: MutArray[f32], n: u32):
    i = thread_idx_x()
    if i < n:
        y[i] = x[i] * 3.0


@kaio.tile_kernel(num_warps=4, num_stages=0)
def small_dot(a: Array[f16], b: Array[f16], c: MutArray[f32], n: ki32):
    x = kt.load(a, (0, 0), (32, 32), (n, n))
    y = kt.load(b, (0, 0), (32, 32), (n, n))
    kt.store(c, (0, 0), kt.dot(x, y, kt.zeros((32, 32), f32)), (n, n))


@dataclass(frozen=True)
class IntoMulf(ModulePass):
    """A broken pass: feeds an i32 constant into the kernel's f32 multiply."""

    name = "test-into-mulf"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mul = next(o for o in op.walk() if isinstance(o, arith.MulfOp))
        three = arith.ConstantOp(IntegerAttr(3, i32))
        mul.parent_block().insert_op_before(three, mul)  # type: ignore[union-attr]
        mul.operands[1] = three.result


@dataclass(frozen=True)
class MarkPass(ModulePass):
    """A user pass that changes nothing (a no-op with an option)."""

    name = "test-mark"
    times: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        return None


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch):
    """Registrations and entry-point discoveries made by a test stay in that test."""
    monkeypatch.setattr(pass_registry, "_registered", {})
    pass_registry.rediscover_passes()
    yield
    pass_registry.rediscover_passes()


# ------------------------------------------------------------------ verify after every pass


def test_a_pass_making_invalid_ir_is_named_with_the_op():
    pipeline = triple.default_pipeline("sm_80").insert(IntoMulf(), before="lower-to-ptx")
    with pytest.raises(KaioCompileError, match="pass 'test-into-mulf' produced invalid IR") as info:
        kaio.compile(triple, "sm_80", pipeline=pipeline)
    assert "arith.mulf" in str(info.value)  # the offending op, printed
    assert "mul.rn.f32" not in str(info.value)


@dataclass(frozen=True)
class MulLoF32(ModulePass):
    """A broken late pass: gives the kernel's f32 multiply an integer mode (``mul.lo.f32``)."""

    name = "test-mul-lo-f32"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from xdsl.dialects.builtin import StringAttr

        from kaio.dialects import ptx

        mul = next(o for o in op.walk() if isinstance(o, ptx.MulOp) and o.spec_text.endswith("f32"))
        mul.properties["spec"] = StringAttr("lo.f32")


@pytest.mark.parametrize("broken, stage", [(IntoMulf(), "lower-to-ptx"), (MulLoF32(), "ptx-optimize")])
def test_invalid_ir_from_a_pass_points_at_the_python_line(broken: ModulePass, stage: str):
    pipeline = triple.default_pipeline("sm_80").insert(broken, before=stage)
    with pytest.raises(KaioCompileError) as info:
        kaio.compile(triple, "sm_80", pipeline=pipeline)
    err = info.value
    assert err.filename == __file__ and err.source_line is not None
    assert err.source_line.strip() == "y[i] = x[i] * 3.0"
    assert str(err).startswith(f"{__file__}:{err.line}:")
    if isinstance(broken, MulLoF32):
        assert "mul.lo.f32: .lo does not apply to .f32" in err.message


def test_verify_each_off_lets_the_broken_ir_through():
    """The off switch is real: unverified, the i32 reaches the PTX as an f32 operand."""
    pipeline = triple.default_pipeline("sm_80").insert(IntoMulf(), before="lower-to-ptx")
    compiled = kaio.compile(triple, "sm_80", pipeline=pipeline.configured(verify_each=False))
    assert any(line.strip().startswith("mul.rn.f32") and line.rstrip().endswith(", 3;") for line in compiled.ptx.splitlines())


def test_an_invalid_input_module_is_refused_before_any_pass():
    module = triple.build().module
    IntoMulf().apply(Context(), module)
    with pytest.raises(KaioCompileError, match="module given to the pipeline does not verify"):
        kaio.compile(module, "sm_80")


# ------------------------------------------------------------------ user passes in pipeline strings


def test_a_registered_pass_works_in_python_pipeline_strings(fresh_registry):
    with pytest.raises(KaioPipelineError, match="unknown pass 'test-mark'"):
        Pipeline.parse("test-mark,lower-to-ptx")
    assert kaio.register_pass(MarkPass) is MarkPass
    kaio.register_pass(MarkPass)  # again: harmless
    assert Pipeline.parse("test-mark{times=2},lower-to-ptx").passes[0] == MarkPass(2)
    compiled = kaio.compile(triple, "sm_80", pipeline="canonicalize,test-mark,lower-to-ptx")
    assert "test-mark" in compiled.pipeline and ".entry triple" in compiled.ptx


def test_another_class_under_a_taken_name_is_refused(fresh_registry):
    kaio.register_pass(MarkPass)

    @dataclass(frozen=True)
    class Impostor(MarkPass):
        name = "test-mark"

    with pytest.raises(KaioPipelineError, match="'test-mark' is taken by .*MarkPass"):
        kaio.register_pass(Impostor)

    @dataclass(frozen=True)
    class Cse(MarkPass):
        name = "cse"

    with pytest.raises(KaioPipelineError, match="'cse' is taken"):
        kaio.register_pass(Cse)
    with pytest.raises(kaio.KaioTypeError, match="ModulePass subclass"):
        kaio.register_pass(42)  # type: ignore[arg-type]


def test_a_pass_from_an_xdsl_universe_entry_point_works(fresh_registry, monkeypatch: pytest.MonkeyPatch):
    universe = SimpleNamespace(all_passes={"test-mark": lambda: MarkPass})
    entry = SimpleNamespace(name="third-party", value="third_party.universe:UNIVERSE", load=lambda: universe)
    broken = SimpleNamespace(name="broken", value="broken:U", load=lambda: 1 / 0)
    real = metadata.entry_points

    def entry_points(**kwargs):
        if kwargs.get("group") == ENTRY_POINT_GROUP:
            return [entry, broken]
        return real(**kwargs)

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    pass_registry.rediscover_passes()
    with pytest.warns(KaioPipelineWarning, match="'broken'"):
        assert "test-mark" in available_passes()
    assert Pipeline.parse("test-mark,cse").names == ["test-mark", "cse"]


# ------------------------------------------------------------------ pass contracts


def test_a_dropped_tensor_core_pass_warns_and_names_it():
    pipeline = small_dot.default_pipeline("sm_80").without("lower-to-mma-sync")
    with pytest.warns(KaioPipelineWarning, match="'lower-to-mma-sync' did not run") as caught:
        kaio.compile(small_dot, "sm_80", pipeline=pipeline)
    assert any("tile.dot" in str(w.message) for w in caught)


def test_passes_out_of_order_warn():
    pipeline = small_dot.default_pipeline("sm_80").move("tile-layout", after="promote-to-shared")
    with pytest.warns(KaioPipelineWarning, match="'promote-to-shared' runs before 'tile-layout'"):
        kaio.compile(small_dot, "sm_80", pipeline=pipeline)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_default_pipelines_keep_every_contract(arch: str):
    with warnings.catch_warnings():
        warnings.simplefilter("error", KaioPipelineWarning)
        kaio.compile(small_dot, arch, timing=False)
        kaio.compile(triple, arch)


def test_a_pass_leaving_what_it_promised_to_remove_is_an_error():
    from kaio.passes.lower_to_mma_sync import LowerToMmaSyncPass

    @dataclass(frozen=True)
    class LazyMma(LowerToMmaSyncPass):
        def apply(self, ctx: Context, op: ModuleOp) -> None:
            return None  # lowers nothing

    pipeline = small_dot.default_pipeline("sm_80").replace("lower-to-mma-sync", LazyMma())
    with pytest.raises(KaioCompileError, match="pass 'lower-to-mma-sync' left a tile.dot"):
        kaio.compile(small_dot, "sm_80", pipeline=pipeline)


# ------------------------------------------------------------------ instrumentation


def test_the_callback_sees_every_pass_as_xdsl_calls_it():
    seen: list[tuple[str | None, str | None]] = []

    def callback(previous, module, following):
        assert isinstance(module, ModuleOp)
        seen.append((previous and previous.name, following and following.name))

    pipeline = Pipeline.parse("canonicalize,cse,lower-to-ptx").configured(callback=callback)
    kaio.compile(triple, "sm_80", pipeline=pipeline)
    names = [None, "canonicalize", "cse", "lower-to-ptx", None]
    assert seen == list(zip(names[:-1], names[1:]))  # the same calls xDSL's PassPipeline.apply makes


def test_a_failing_callback_names_the_pass():
    def callback(previous, module, following):
        if previous is not None and previous.name == "cse":
            raise RuntimeError("boom")

    with pytest.raises(KaioCompileError, match="callback raised RuntimeError: boom \\(after pass 'cse'\\)"):
        kaio.compile(triple, pipeline=Pipeline.parse("canonicalize,cse,lower-to-ptx", ).configured(callback=callback))


def test_pass_times_are_recorded_and_printed(capsys: pytest.CaptureFixture[str]):
    compiled = kaio.compile(triple, "sm_80", timing=True)
    times = compiled.pass_times
    stages = ["canonicalize", "cse", "vectorize-loads", "lower-to-ptx", kaio.pipeline.SCALAR_STAGE]
    assert [t.stage for t in times] == stages
    assert all(isinstance(t, PassTiming) and t.seconds >= 0 for t in times)
    lowering = times[-2]
    assert lowering.ops_after > lowering.ops_before  # lower-to-ptx expands every op
    assert all(a.ops_after == b.ops_before for a, b in zip(times, times[1:]))
    err = capsys.readouterr().err
    assert "lower-to-ptx" in err and "total" in err
    assert timing_table(times).splitlines()[-1].startswith("total")


def test_pass_times_of_a_cached_compile_come_from_a_recompile():
    first = kaio.compile(triple, "sm_80")
    again = kaio.compile(triple, "sm_80")
    assert [t.stage for t in again.pass_times] == [t.stage for t in first.pass_times]


def test_print_after_change_shows_only_the_passes_that_changed_the_ir(capsys: pytest.CaptureFixture[str]):
    pipeline = "canonicalize,test-noop-a,lower-to-ptx"

    @dataclass(frozen=True)
    class Noop(ModulePass):
        name = "test-noop-a"

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            return None

    compiled = kaio.compile(triple, "sm_80", pipeline=[CanonicalizePass(), Noop(), *Pipeline.parse("lower-to-ptx").passes],
                            print_after_change=True)  # fmt: skip
    err = capsys.readouterr().err
    assert "IR Dump After lower-to-ptx" in err
    assert "IR Dump After test-noop-a" not in err
    assert err.count("IR Dump After") == len({"lower-to-ptx"} | ({"canonicalize"} if "canonicalize" in err else set()))
    assert pipeline and compiled.ptx


def test_print_after_change_as_a_callback():
    import io

    out = io.StringIO()
    kaio.compile(triple, pipeline=Pipeline.parse("cse,lower-to-ptx").configured(callback=print_after_change(out)))
    assert "IR Dump After lower-to-ptx" in out.getvalue() and "ptx.entry" in out.getvalue()


def test_the_compiled_kernel_still_computes(dev: kaio.Device, rng: np.random.Generator):
    n = 32
    x = rng.standard_normal(n).astype(np.float32)
    y = dev.alloc_from(np.full(n, np.nan, np.float32))
    pipeline = Pipeline.parse("canonicalize,cse,lower-to-ptx").configured(callback=lambda *a: None)
    triple.with_pipeline(lambda arch: pipeline)[1](dev.alloc_from(x), y, n)
    np.testing.assert_allclose(y.to_host(), x * 3.0, rtol=1e-6)


# ------------------------------------------------------------------ editing


def test_move_and_the_edits_keep_callback_and_verification():
    def callback(previous, module, following):
        return None

    p = tile_pipeline("sm_80").configured(callback=callback, verify_each=False)
    moved = p.move("lower-to-mma-sync", before="promote-to-shared")
    assert moved.names.index("lower-to-mma-sync") == moved.names.index("promote-to-shared") - 1
    assert sorted(moved.names) == sorted(p.names)
    assert moved.move("lower-to-mma-sync", after="pipeline-cp-async").names == p.names
    for edited in (moved, p.without("cse"), p.insert(MarkPass(), after="cse"), p.replace("cse", MarkPass())):
        assert edited.callback is callback and edited.verify_each is False
    assert Pipeline.parse(str(p)).passes == p.passes


@pytest.mark.parametrize(
    "edit, names",
    [
        (lambda p: p.without("nope"), "`name`: no pass 'nope'"),
        (lambda p: p.move("nope", after="cse"), "`name`: no pass 'nope'"),
        (lambda p: p.move("cse", after="nope"), "`after`: no pass 'nope'"),
        (lambda p: p.move("cse", after="cse"), "relative to itself"),
        (lambda p: p.insert(MarkPass(), before="nope"), "`before`: no pass 'nope'"),
        (lambda p: p.insert(MarkPass()), "exactly one of before= or after="),
        (lambda p: p.insert(MarkPass(), before="cse", after="cse"), "exactly one of before= or after="),
        (lambda p: p.insert("cse", before="cse"), "`new` must be a ModulePass"),  # type: ignore[arg-type]
        (lambda p: p.insert(MarkPass, before="cse"), "make an instance"),  # type: ignore[arg-type]
        (lambda p: p.replace("cse", None), "`new` must be a ModulePass"),  # type: ignore[arg-type]
        (lambda p: p.without(3), "`name` must be a pass name"),  # type: ignore[arg-type]
        (lambda p: Pipeline((MarkPass(), 3)), r"passes\[1\] must be a ModulePass"),  # type: ignore[arg-type]
        (lambda p: Pipeline("cse"), "Pipeline.parse"),  # type: ignore[arg-type]
        (lambda p: p.configured(callback=3), "`callback` must be callable"),
    ],
)
def test_bad_edits_are_kaio_errors_naming_the_argument(edit, names: str):
    with pytest.raises(KaioPipelineError, match=names) as info:
        edit(Pipeline.parse("canonicalize,cse,lower-to-ptx"))
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("verify_each", [True, False])
def test_op_counts_are_those_of_a_walk(verify_each: bool):
    """With verification the counts come from the verifier's walk, without it from a walk of
    their own: either way each stage's count is the module's op count after it."""
    walked: list[int] = []

    def callback(previous, module, following):
        walked.append(sum(1 for _ in module.walk()))

    stages = "canonicalize,cse,lower-to-ptx,ptx-optimize"
    pipeline = Pipeline.parse(stages).configured(callback=callback, verify_each=verify_each)
    times = kaio.compile(triple, "sm_80", pipeline=pipeline).pass_times
    assert [t.ops_before for t in times] + [times[-1].ops_after] == walked
    assert len(set(walked)) > 1  # the stages change the module: stale counts would show


def test_a_pass_that_empties_the_module_is_a_compile_error_not_a_value_error() -> None:
    """It once ended in "not enough values to unpack" from inside kaio.compile."""
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    import kaio
    from kaio.pipeline import Pipeline

    @dataclass(frozen=True)
    class EmptyEverything(ModulePass):
        name = "empty-everything"

        def apply(self, ctx: object, op: object) -> None:
            for child in list(op.ops):  # type: ignore[attr-defined]
                child.detach()
                child.erase()

    @kaio.gpu_kernel(block_size=32)
    def noop(out: kaio.dtypes.MutArray[kaio.dtypes.f32]):  # type: ignore[name-defined]
        out[0] = 1.0

    pipeline = Pipeline((*noop.default_pipeline("sm_80").passes, EmptyEverything()))
    with pytest.raises(kaio.KaioCompileError, match=r"left 0 kernels \(ptx.entry\) after pass 'empty-everything'"):
        kaio.compile(noop, "sm_80", pipeline=pipeline)


@pytest.mark.parametrize("name", ["a,b", "x{y}", "has space", "", "3x."])
def test_a_pass_name_no_pipeline_string_can_say_is_refused(name: str) -> None:
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    import kaio

    @dataclass(frozen=True)
    class Odd(ModulePass):
        def apply(self, ctx: object, op: object) -> None:
            pass

    Odd.name = name  # type: ignore[misc]
    with pytest.raises((KaioPipelineError, kaio.KaioTypeError), match="name"):
        kaio.register_pass(Odd)


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_verify_each_must_be_a_bool(value: object) -> None:
    import kaio
    from kaio.pipeline import Pipeline

    with pytest.raises(kaio.KaioTypeError, match="`verify_each` must be True or False"):
        Pipeline.parse("canonicalize").configured(verify_each=value)  # type: ignore[arg-type]
    with pytest.raises(kaio.KaioTypeError, match="`verify_each` must be True or False"):
        Pipeline((), verify_each=value)  # type: ignore[arg-type]
