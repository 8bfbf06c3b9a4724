"""The ``kernel`` dialect: a GPU kernel as the Python frontend sees it.

SIMT semantics, one thread's view: typed parameters (global arrays, scalars), thread/block
indices, loads and stores through arrays and shared memory, barriers, warp shuffles, warp and
block reductions, atomics. Arithmetic, math and control flow are xDSL's ``arith``, ``math`` and
``scf``; shared buffers are ``memref``s in address space 3.

Integers are signless here as in MLIR: signedness picks the op (``arith.divsi``/``divui``).
Global arrays are indexed with i64 (the frontend sign- or zero-extends), shared memrefs with i32:
addresses are 64-bit in global memory and 32-bit in shared memory, as in PTX.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import auto
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    I32,
    I64,
    FunctionType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    SymbolNameConstraint,
    i32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, parse_func_op_like, print_func_op_like
from xdsl.ir import (
    Attribute,
    Block,
    BlockArgument,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    Pure,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from kaio.dialects.isolated_from_above import IsolatedFromAbove
from kaio.dialects.stage_attrs import TENSOR_MAPS_ATTR
from kaio.errors import KaioCompileError

SHARED_SPACE = 3  # PTX/NVVM address space number of shared memory

# --------------------------------------------------------------------------- types


@irdl_attr_definition
class ArrayType(ParametrizedAttribute, TypeAttribute):
    """A global-memory buffer parameter: ``!kernel.array<f32, global, const>`` (read-only) or
    ``!kernel.array<f32, global, mut>`` (writable). Element count is a runtime property."""

    name = "kernel.array"

    element_type: Attribute
    space: StringAttr
    access: StringAttr

    def __init__(self, element_type: Attribute, mutable: bool, space: str = "global"):
        super().__init__(element_type, StringAttr(space), StringAttr("mut" if mutable else "const"))

    @property
    def mutable(self) -> bool:
        return self.access.data == "mut"

    def verify(self) -> None:
        if self.space.data != "global":
            raise VerifyException(f"kernel.array lives in global memory, not '{self.space.data}'")
        if self.access.data not in ("const", "mut"):
            raise VerifyException(f"kernel.array access is const or mut, not '{self.access.data}'")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element_type)
            printer.print_string(f", {self.space.data}, {self.access.data}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, StringAttr, StringAttr]:
        with parser.in_angle_brackets():
            elem = parser.parse_type()
            parser.parse_punctuation(",")
            space = parser.parse_identifier()
            parser.parse_punctuation(",")
            access = parser.parse_identifier()
        return (elem, StringAttr(space), StringAttr(access))


@irdl_attr_definition
class TensorMapType(ParametrizedAttribute, TypeAttribute):
    """``!kernel.tensor_map``: a 128-byte TMA tensor map passed by value as a kernel parameter
    (``.param .align 64 .b8 name[128]``, a ``__grid_constant__ CUtensorMap`` in CUDA C++).
    Passes add these parameters themselves (``pipeline-tma``); the kernel.func's
    ``kaio.tensor_maps`` attribute holds, per parameter, the recipe the runtime builds it from
    at launch (:class:`kaio.compiled.TensorMapParam`). Its SSA value is the map's generic
    address, the operand ``tma.load`` takes."""

    name = "kernel.tensor_map"


def add_tensor_map_param(func: KernelFuncOp, name: str, recipe: str) -> BlockArgument:
    """Append a tensor-map parameter called ``name`` (after every user parameter: the runtime
    appends the maps it builds to the user's arguments) with its JSON ``recipe``."""
    arg = func.body.block.insert_arg(TensorMapType(), len(func.body.block.args))
    func.function_type = FunctionType.from_lists([*func.function_type.inputs.data, TensorMapType()], [])
    func.param_names = ArrayAttr([*func.param_names.data, StringAttr(name)])
    recipes = dict(func.attributes[TENSOR_MAPS_ATTR].data) if TENSOR_MAPS_ATTR in func.attributes else {}
    recipes[name] = StringAttr(recipe)
    func.attributes[TENSOR_MAPS_ATTR] = DictionaryAttr(recipes)
    return arg


def is_shared_memref(t: Attribute) -> bool:
    return (
        isinstance(t, MemRefType)
        and isinstance(t.memory_space, IntegerAttr)
        and t.memory_space.value.data == SHARED_SPACE
    )


def shared_memref(element_type: Attribute, shape: Sequence[int]) -> MemRefType:
    return MemRefType(element_type, shape, memory_space=IntegerAttr(SHARED_SPACE, i32))


def element_type_of(ref_type: Attribute) -> Attribute:
    if isinstance(ref_type, ArrayType):
        return ref_type.element_type
    if isinstance(ref_type, MemRefType):
        return ref_type.element_type
    raise VerifyException(f"expected !kernel.array or a shared memref, got {ref_type}")


# --------------------------------------------------------------------------- enums


class Dim(StrEnum):
    X = auto()
    Y = auto()
    Z = auto()


@irdl_attr_definition
class DimAttr(EnumAttribute[Dim], SpacedOpaqueSyntaxAttribute):
    name = "kernel.dim"


class ShuffleMode(StrEnum):
    UP = auto()
    DOWN = auto()
    BFLY = auto()
    IDX = auto()


@irdl_attr_definition
class ShuffleModeAttr(EnumAttribute[ShuffleMode], SpacedOpaqueSyntaxAttribute):
    name = "kernel.shuffle_mode"


class Combine(StrEnum):
    """How two values combine, in reductions and atomics (MLIR's atomic_rmw spelling)."""

    ADDI = auto()
    ADDF = auto()
    MAXS = auto()
    MAXU = auto()
    MAXF = auto()
    MINS = auto()
    MINU = auto()
    MINF = auto()
    ANDI = auto()
    ORI = auto()
    XORI = auto()
    EXCH = auto()


@irdl_attr_definition
class CombineAttr(EnumAttribute[Combine], SpacedOpaqueSyntaxAttribute):
    name = "kernel.combine"


_FLOAT_COMBINES = {Combine.ADDF, Combine.MAXF, Combine.MINF}
_REDUCTIONS = {
    Combine.ADDI, Combine.ADDF, Combine.MAXS, Combine.MAXU, Combine.MAXF,
    Combine.MINS, Combine.MINU, Combine.MINF,
}  # fmt: skip


def _check_combine(combine: Combine, value_type: Attribute, allowed: set[Combine]) -> None:
    if combine not in allowed:
        raise VerifyException(f"'{combine.value}' is not allowed here")
    is_int = isinstance(value_type, IntegerType)
    if combine == Combine.EXCH:
        return
    if (combine in _FLOAT_COMBINES) == is_int:
        kind = "integer" if is_int else "float"
        raise VerifyException(f"'{combine.value}' does not apply to {kind} type {value_type}")


# --------------------------------------------------------------------------- kernel structure


@irdl_op_definition
class KernelFuncOp(IRDLOperation):
    """A kernel entry point. Block arguments are the parameters, in launch order.

    ``block_size`` is the (x, y, z) block shape the kernel is written for; it becomes the PTX
    launch bound (``.maxntid``) and the runtime refuses larger blocks.
    """

    name = "kernel.func"

    sym_name = prop_def(SymbolNameConstraint())
    function_type = prop_def(FunctionType)
    param_names = prop_def(ArrayAttr[StringAttr])
    block_size = prop_def(DenseArrayBase)
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface())

    def __init__(
        self,
        name: str,
        param_types: Sequence[Attribute],
        param_names: Sequence[str],
        block_size: Sequence[int],
        body: Region | None = None,
    ):
        function_type = FunctionType.from_lists(list(param_types), [])
        if body is None:
            body = Region(Block(arg_types=param_types))
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "function_type": function_type,
                "param_names": ArrayAttr([StringAttr(n) for n in param_names]),
                "block_size": DenseArrayBase.from_list(i32, list(block_size)),
            },
            regions=[body],
        )

    @property
    def block_shape(self) -> tuple[int, int, int]:
        x, y, z = self.block_size.get_values()
        return (int(x), int(y), int(z))

    def verify_(self) -> None:
        inputs = self.function_type.inputs.data
        if tuple(self.body.block.arg_types) != inputs:
            raise VerifyException("block arguments must match the kernel's parameter types")
        if len(self.param_names.data) != len(inputs):
            raise VerifyException("one parameter name per parameter")
        if self.function_type.outputs.data:
            raise VerifyException("a kernel returns nothing")
        shape = self.block_size.get_values()
        if len(shape) != 3 or any(int(d) < 1 for d in shape):
            raise VerifyException(f"block_size must be three positive ints, got {shape}")
        if int(shape[0]) * int(shape[1]) * int(shape[2]) > 1024:
            raise VerifyException(f"block_size {shape} exceeds 1024 threads")
        for t in inputs:
            if not isinstance(t, ArrayType | IntegerType | TensorMapType) and not _is_float(t):
                raise VerifyException(f"unsupported kernel parameter type {t}")

    @classmethod
    def parse(cls, parser: Parser) -> KernelFuncOp:
        name, input_types, _, region, extra_attrs, _, _ = parse_func_op_like(
            parser, reserved_attr_names=("sym_name", "function_type")
        )
        if extra_attrs is None:
            parser.raise_error("kernel.func needs attributes {param_names, block_size}")
        attrs = dict(extra_attrs.data)
        op = cls.create(
            properties={
                "sym_name": StringAttr(name),
                "function_type": FunctionType.from_lists(input_types, []),
                "param_names": attrs.pop("param_names"),
                "block_size": attrs.pop("block_size"),
            },
            attributes=attrs,
            regions=[region],
        )
        return op

    def print(self, printer: Printer) -> None:
        attrs = dict(self.attributes)
        attrs["param_names"] = self.param_names
        attrs["block_size"] = self.block_size
        print_func_op_like(
            printer,
            self.sym_name,
            self.function_type,
            self.body,
            attrs,
            reserved_attr_names=("sym_name", "function_type"),
        )


def _is_float(t: Attribute) -> bool:
    from xdsl.dialects.builtin import AnyFloat

    return isinstance(t, AnyFloat)


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """Ends the kernel body (the frontend turns early Python returns into structured flags)."""

    name = "kernel.return"
    traits = traits_def(IsTerminator(), HasParent(KernelFuncOp))
    assembly_format = "attr-dict"


@irdl_op_definition
class SourceLocOp(IRDLOperation):
    """Marks where a Python statement begins; the PTX printer turns it into a comment."""

    name = "kernel.loc"
    file = prop_def(StringAttr)
    line = prop_def(IntegerAttr[I64])
    text = prop_def(StringAttr)
    assembly_format = "$file `line` $line $text attr-dict"

    def __init__(self, file: str, line: int, text: str):
        super().__init__(
            properties={
                "file": StringAttr(file),
                "line": IntegerAttr(line, i64),
                "text": StringAttr(text),
            }
        )


# --------------------------------------------------------------------------- SIMT indices


class _DimIndexOp(IRDLOperation):
    dim = prop_def(DimAttr)
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$dim attr-dict `:` type($result)"

    def __init__(self, dim: Dim | str):
        super().__init__(properties={"dim": DimAttr(Dim(dim))}, result_types=[i32])


@irdl_op_definition
class ThreadIdOp(_DimIndexOp):
    name = "kernel.thread_id"


@irdl_op_definition
class BlockIdOp(_DimIndexOp):
    name = "kernel.block_id"


@irdl_op_definition
class BlockDimOp(_DimIndexOp):
    name = "kernel.block_dim"


@irdl_op_definition
class GridDimOp(_DimIndexOp):
    name = "kernel.grid_dim"


class _WarpIndexOp(IRDLOperation):
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self):
        super().__init__(result_types=[i32])


@irdl_op_definition
class LaneIdOp(_WarpIndexOp):
    """Lane of this thread in its warp (0..31)."""

    name = "kernel.lane_id"


@irdl_op_definition
class WarpIdOp(_WarpIndexOp):
    """Index of this thread's warp in its block (linear thread index / 32)."""

    name = "kernel.warp_id"


# --------------------------------------------------------------------------- memory


def _verify_access(ref: SSAValue, indices: Sequence[SSAValue], value_type: Attribute) -> None:
    ref_type = ref.type
    elem = element_type_of(ref_type)
    if value_type != elem:
        raise VerifyException(f"value type {value_type} does not match element type {elem}")
    if isinstance(ref_type, ArrayType):
        if len(indices) != 1 or indices[0].type != i64:
            raise VerifyException("a global array takes exactly one i64 index")
        return
    assert isinstance(ref_type, MemRefType)
    if not is_shared_memref(ref_type):
        raise VerifyException("memrefs accessed by kernel ops must be shared (address space 3)")
    if len(indices) != ref_type.get_num_dims():
        raise VerifyException(
            f"{ref_type.get_num_dims()}-D shared buffer takes {ref_type.get_num_dims()} "
            f"indices, got {len(indices)}"
        )
    if any(i.type != i32 for i in indices):
        raise VerifyException("shared memory indices are i32")


@irdl_op_definition
class LoadOp(IRDLOperation):
    """``%v = kernel.load %ref[%i] : !kernel.array<f32, global, const> -> f32``"""

    name = "kernel.load"
    ref = operand_def()
    indices = var_operand_def()
    result = result_def()
    traits = traits_def(MemoryReadEffect())
    assembly_format = (
        "$ref `[` $indices `]` attr-dict `:` type($ref) `,` type($indices) `->` type($result)"
    )

    def __init__(self, ref: SSAValue, indices: Sequence[SSAValue]):
        super().__init__(operands=[ref, indices], result_types=[element_type_of(ref.type)])

    def verify_(self) -> None:
        _verify_access(self.ref, self.indices, self.result.type)


@irdl_op_definition
class LoadVectorOp(IRDLOperation):
    """``%a, %b, %c, %d = kernel.load_vector %ref[%i]``: ``ref[i] .. ref[i + n - 1]`` in one
    access (``ld.global.v4``). The address must be aligned to the whole vector, so whoever
    creates it records the alignment the array parameter needs (``kaio.align`` on the func)."""

    name = "kernel.load_vector"
    ref = operand_def(ArrayType)
    index = operand_def(i64)
    values = var_result_def()
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$ref `[` $index `]` attr-dict `:` type($ref) `->` type($values)"

    def __init__(self, ref: SSAValue, index: SSAValue, count: int):
        elem = element_type_of(ref.type)
        super().__init__(operands=[ref, index], result_types=[[elem] * count])

    def verify_(self) -> None:
        elem = element_type_of(self.ref.type)
        count = len(self.values)
        if count not in (2, 4) or any(v.type != elem for v in self.values):
            raise VerifyException(f"load_vector yields 2 or 4 values of {elem}")
        if count * max(getattr(elem, "bitwidth", 8) // 8, 1) > 16:
            raise VerifyException("a vector access moves at most 16 bytes")


@irdl_op_definition
class StoreOp(IRDLOperation):
    """``kernel.store %v, %ref[%i]``; storing through a const array is a verifier error."""

    name = "kernel.store"
    value = operand_def()
    ref = operand_def()
    indices = var_operand_def()
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $ref `[` $indices `]` attr-dict `:` type($value) `,` type($ref) `,` type($indices)"

    def __init__(self, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]):
        super().__init__(operands=[value, ref, indices])

    def verify_(self) -> None:
        if isinstance(self.ref.type, ArrayType) and not self.ref.type.mutable:
            raise VerifyException("cannot store to a const (read-only) array")
        _verify_access(self.ref, self.indices, self.value.type)


@irdl_op_definition
class SharedAllocOp(IRDLOperation):
    """A statically sized shared-memory buffer of the block: ``memref<16x16xf32, 3 : i32>``."""

    name = "kernel.shared_alloc"
    sym_name = prop_def(StringAttr)
    result = result_def(MemRefType)
    assembly_format = "$sym_name attr-dict `:` type($result)"

    def __init__(self, name: str, element_type: Attribute, shape: Sequence[int]):
        super().__init__(
            properties={"sym_name": StringAttr(name)},
            result_types=[shared_memref(element_type, shape)],
        )

    def verify_(self) -> None:
        t = self.result.type
        if not is_shared_memref(t):
            raise VerifyException("shared_alloc yields a memref in address space 3")
        assert isinstance(t, MemRefType)
        if not t.get_shape() or any(d <= 0 for d in t.get_shape()):
            raise VerifyException(f"shared buffer shape must be positive, got {t.get_shape()}")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Block-wide barrier (``bar.sync 0``); orders shared memory between the block's threads."""

    name = "kernel.barrier"
    assembly_format = "attr-dict"


@irdl_op_definition
class BarrierThreadsOp(IRDLOperation):
    """``kernel.barrier_threads 256``: from here on, block barriers synchronize only the first N
    threads (``bar.sync 1, N``): the others (a producer warpgroup) have left for good."""

    name = "kernel.barrier_threads"
    threads = prop_def(IntegerAttr[I64])
    assembly_format = "$threads attr-dict"

    def __init__(self, threads: int):
        super().__init__(properties={"threads": IntegerAttr(threads, i64)})

    def verify_(self) -> None:
        n = self.threads.value.data
        if n < 32 or n % 32:
            raise VerifyException(f"kernel.barrier_threads takes whole warps, not {n} threads")


@irdl_op_definition
class ExitOp(IRDLOperation):
    """``kernel.exit``: the threads that execute it end here, anywhere in the body (a producer
    warpgroup once its loads are issued); the others go on. Not a terminator."""

    name = "kernel.exit"
    assembly_format = "attr-dict"


@irdl_op_definition
class SetMaxRegistersOp(IRDLOperation):
    """``kernel.setmaxnreg inc 232`` / ``dec 40``: the executing warpgroup raises or lowers its
    registers per thread (Hopper's ``setmaxnreg``, sm_90a): a producer hands registers to the
    consumers. Every thread of the warpgroup executes it."""

    name = "kernel.setmaxnreg"
    mode = prop_def(StringAttr)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$mode $count attr-dict"

    def __init__(self, mode: str, count: int):
        super().__init__(properties={"mode": StringAttr(mode), "count": IntegerAttr(count, i64)})

    def verify_(self) -> None:
        count = self.count.value.data
        if self.mode.data not in ("inc", "dec") or not 24 <= count <= 256 or count % 8:
            raise VerifyException(f"kernel.setmaxnreg: inc or dec to 24..256 registers in steps of 8, not {self.mode.data} {count}")


# --------------------------------------------------------------------------- warp and block


def _verify_b32_or_b64(t: Attribute, what: str) -> None:
    width = getattr(t, "bitwidth", None)
    if width not in (16, 32, 64):
        raise VerifyException(f"{what} needs a 16-, 32- or 64-bit scalar, got {t}")


@irdl_op_definition
class ShuffleOp(IRDLOperation):
    """``shfl.sync``: read ``value`` from another lane of the warp.

    ``offset`` is the lane delta (up/down), the XOR mask (bfly) or the source lane (idx);
    ``width`` (power of two <= 32) splits the warp into independent segments; ``mask`` names the
    participating lanes.
    """

    name = "kernel.shuffle"
    T: ClassVar = VarConstraint("T", AnyAttr())
    mode = prop_def(ShuffleModeAttr)
    width = prop_def(IntegerAttr[I32])
    value = operand_def(T)
    offset = operand_def(i32)
    mask = operand_def(i32)
    result = result_def(T)
    assembly_format = "$mode $value `,` $offset `,` $mask `width` $width attr-dict `:` type($value)"

    def __init__(
        self,
        mode: ShuffleMode | str,
        value: SSAValue,
        offset: SSAValue,
        mask: SSAValue,
        width: int = 32,
    ):
        super().__init__(
            operands=[value, offset, mask],
            result_types=[value.type],
            properties={
                "mode": ShuffleModeAttr(ShuffleMode(mode)),
                "width": IntegerAttr(width, i32),
            },
        )

    def verify_(self) -> None:
        w = self.width.value.data
        if w < 1 or w > 32 or w & (w - 1):
            raise VerifyException(f"shuffle width must be a power of two <= 32, got {w}")
        if self.result.type != self.value.type:
            raise VerifyException("shuffle result type must match the value type")
        _verify_b32_or_b64(self.value.type, "shuffle")


class _ReduceOp(IRDLOperation):
    T: ClassVar = VarConstraint("T", AnyAttr())
    combine = prop_def(CombineAttr)
    value = operand_def(T)
    result = result_def(T)
    assembly_format = "$combine $value attr-dict `:` type($value)"

    def __init__(self, combine: Combine | str, value: SSAValue):
        super().__init__(
            operands=[value],
            result_types=[value.type],
            properties={"combine": CombineAttr(Combine(combine))},
        )

    def verify_(self) -> None:
        _check_combine(self.combine.data, self.value.type, _REDUCTIONS)
        if self.result.type != self.value.type:
            raise VerifyException("reduction result type must match the value type")
        _verify_b32_or_b64(self.value.type, "reduction")


@irdl_op_definition
class WarpReduceOp(_ReduceOp):
    """Combine ``value`` over the 32 lanes of the warp; every lane gets the result."""

    name = "kernel.warp_reduce"


@irdl_op_definition
class BlockReduceOp(_ReduceOp):
    """Combine ``value`` over the whole block; every thread gets the result. Contains barriers:
    every thread of the block must reach it."""

    name = "kernel.block_reduce"


_ATOMIC_COMBINES = {
    Combine.ADDI, Combine.ADDF, Combine.MAXS, Combine.MAXU, Combine.MINS, Combine.MINU,
    Combine.MAXF, Combine.MINF, Combine.ANDI, Combine.ORI, Combine.XORI, Combine.EXCH,
}  # fmt: skip


@irdl_op_definition
class AtomicRMWOp(IRDLOperation):
    """Atomic read-modify-write on global or shared memory; yields the old value."""

    name = "kernel.atomic_rmw"
    T: ClassVar = VarConstraint("T", AnyAttr())
    combine = prop_def(CombineAttr)
    value = operand_def(T)
    ref = operand_def()
    indices = var_operand_def()
    result = result_def(T)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$combine $value `,` $ref `[` $indices `]` attr-dict `:` type($value) `,` type($ref) `,` type($indices)"

    def __init__(
        self, combine: Combine | str, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]
    ):
        super().__init__(
            operands=[value, ref, indices],
            result_types=[value.type],
            properties={"combine": CombineAttr(Combine(combine))},
        )

    def verify_(self) -> None:
        if isinstance(self.ref.type, ArrayType) and not self.ref.type.mutable:
            raise VerifyException("cannot update a const (read-only) array atomically")
        _verify_access(self.ref, self.indices, self.value.type)
        _check_combine(self.combine.data, self.value.type, _ATOMIC_COMBINES)


@irdl_op_definition
class AtomicCasOp(IRDLOperation):
    """Atomic compare-and-swap: if ``ref[i] == compare`` store ``value``; yields the old value."""

    name = "kernel.atomic_cas"
    T: ClassVar = VarConstraint("T", AnyAttr())
    compare = operand_def(T)
    value = operand_def(T)
    ref = operand_def()
    indices = var_operand_def()
    result = result_def(T)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$compare `,` $value `,` $ref `[` $indices `]` attr-dict `:` type($value) `,` type($ref) `,` type($indices)"

    def __init__(
        self, compare: SSAValue, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]
    ):
        super().__init__(operands=[compare, value, ref, indices], result_types=[value.type])

    def verify_(self) -> None:
        if isinstance(self.ref.type, ArrayType) and not self.ref.type.mutable:
            raise VerifyException("cannot update a const (read-only) array atomically")
        _verify_access(self.ref, self.indices, self.value.type)
        if self.compare.type != self.value.type or not isinstance(self.value.type, IntegerType):
            raise VerifyException("atomic_cas compares and stores integers of one type")


from kaio.dialects.kernel_bits import BIT_OPS  # noqa: E402  (ops of this dialect in their own file)
from kaio.dialects.kernel_random import RANDOM_OPS  # noqa: E402

Kernel = Dialect(
    "kernel",
    [
        # structure
        KernelFuncOp,
        ReturnOp,
        SourceLocOp,
        # SIMT indices
        ThreadIdOp,
        BlockIdOp,
        BlockDimOp,
        GridDimOp,
        LaneIdOp,
        WarpIdOp,
        # memory
        LoadOp,
        LoadVectorOp,
        StoreOp,
        SharedAllocOp,
        BarrierOp,
        BarrierThreadsOp,
        ExitOp,
        SetMaxRegistersOp,
        AtomicRMWOp,
        AtomicCasOp,
        # warp and block collectives
        ShuffleOp,
        WarpReduceOp,
        BlockReduceOp,
        # bits of words (dp4a, dp2a, prmt, lop3): kernel_bits.py
        *BIT_OPS,
        # counter-based random bits (philox): kernel_random.py
        *RANDOM_OPS,
    ],
    [ArrayType, TensorMapType, DimAttr, ShuffleModeAttr, CombineAttr],
)


def kernel_funcs(module: Operation) -> list[KernelFuncOp]:
    return [op for op in module.walk() if isinstance(op, KernelFuncOp)]


def enclosing_kernel(op: Operation) -> KernelFuncOp:
    """The ``kernel.func`` ``op`` sits in (a pass's error where there is none)."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, KernelFuncOp):
        parent = parent.parent_op()
    if parent is None:
        raise KaioCompileError(f"{op.name} outside a kernel.func")
    return parent


__all__ = ["Kernel", "KernelFuncOp", "ArrayType", "kernel_funcs", "enclosing_kernel"]
