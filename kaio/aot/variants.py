"""What an export holds: one compiled *variant* per (arch, specialization), checked and ordered
the way the generated dispatcher tries them.

A variant is a :class:`~kaio.compiled.CompiledKernel` plus the facts it may assume of its
arguments (the launch conditions the C code checks before choosing it) and, where a ptxas is
installed, its cubin. Kernels of one export share one signature: the C function has one
parameter list, so a specialization that changed it (a constexpr that removes a parameter
cannot, but a library op's variant could) is refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kaio.compiled import CompiledKernel, Fact, KernelParam, Specialization
from kaio.errors import KaioError, KaioTargetError, KaioTypeError
from kaio.targets.ptx.arch import Arch, get_arch

UNALIGNED_ARRAY = 16
"""The base alignment (bytes) a compile assumes of an array argument it has no fact about
(``kaio.tile_kernel``: an array without a fact is 16-byte aligned)."""


@dataclass(frozen=True)
class Variant:
    arch: Arch
    compiled: CompiledKernel
    facts: tuple[Fact, ...]
    aligned_arrays: bool
    """Whether the compile assumed an array it has no fact about to be 16-byte aligned (tile
    kernels, which specialize on their arguments; a SIMT kernel assumes only what its own
    vector accesses need, ``KernelParam.align``)."""
    cubin: bytes | None = None

    @property
    def array_alignment(self) -> dict[str, int]:
        """Bytes each array argument's base address must be a multiple of for this variant."""
        facts = dict(self.facts)
        assumed = UNALIGNED_ARRAY if self.aligned_arrays else 1
        return {p.name: max(p.align, facts.get(p.name, assumed)) for p in self.compiled.params if p.is_array}

    @property
    def integer_facts(self) -> list[Fact]:
        arrays = {p.name for p in self.compiled.params if p.is_array}
        return [(name, n) for name, n in self.facts if name not in arrays]

    @property
    def weight(self) -> int:
        """How much the variant assumes: the dispatcher tries the most specific first."""
        return sum(int(math.log2(n)) for name, n in self.integer_facts) + sum(
            int(math.log2(n)) for n in self.array_alignment.values())


def _specializes(kernel: Any) -> bool:
    """Tile kernels and the library ops built on them specialize on their arguments."""
    return callable(getattr(kernel, "arg_specialization", None)) or hasattr(kernel, "tile_kernel")


def kernel_for(kernel: Any, arch: str) -> Any:
    """The compilable object of ``arch``: a mapping arch -> kernel, a library op that knows its
    kernel per arch (``aot_kernel(arch)``: the tile kernel and the default config it runs
    there), or the kernel itself."""
    if isinstance(kernel, Mapping):
        for key, value in kernel.items():
            if get_arch(key).name == arch:
                return value
        raise KaioTypeError(f"kaio.aot.export: the kernels given per arch have none for {arch}")
    chooser = getattr(kernel, "aot_kernel", None)
    if callable(chooser) and not callable(getattr(kernel, "build", None)):
        return chooser(arch)
    return kernel


def specializations(specialization: Any, constexprs: Mapping[str, Any] | None) -> list[Specialization]:
    """``specialization=`` of :func:`kaio.aot.export` as a list: None (one, on ``constexprs``),
    one :class:`Specialization` or facts, or a list of them; ``constexprs`` go under each."""
    if constexprs is not None and not isinstance(constexprs, Mapping):
        raise KaioTypeError(f"kaio.aot.export: `constexprs` must be a mapping name -> value, got {type(constexprs).__name__}")
    given: Iterable[Any]
    if specialization is None:
        given = [Specialization()]
    elif isinstance(specialization, (Specialization, Mapping)) or _is_facts(specialization):
        given = [specialization]
    elif isinstance(specialization, Sequence) and not isinstance(specialization, str):
        given = specialization
    else:
        raise KaioTypeError(f"kaio.aot.export: `specialization` must be a kaio.Specialization, facts or a list of them, got {specialization!r}")
    result = []
    for item in given:
        spec = item if isinstance(item, Specialization) else Specialization(facts=item or ())
        merged = dict(constexprs or {})
        for name, value in spec.constexprs.items():
            if name in merged and Specialization({name: merged[name]}) != Specialization({name: value}):
                raise KaioTypeError(f"kaio.aot.export: constexpr `{name}={merged[name]!r}` contradicts a specialization's {name}={value!r}")
            merged[name] = value
        result.append(Specialization(merged, spec.facts))
    if not result:
        raise KaioTypeError("kaio.aot.export: `specialization` is an empty list: nothing to export")
    if len(set(result)) != len(result):
        raise KaioTypeError("kaio.aot.export: `specialization` lists the same specialization twice")
    return result


def _is_facts(value: Any) -> bool:
    """``[("n", 16), ("x", 8)]`` (one specialization's facts) rather than a list of them."""
    return (isinstance(value, (list, tuple)) and bool(value)
            and all(isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[0], str) for v in value))  # fmt: skip


def check_arches(arch: Any) -> list[Arch]:
    names = [arch] if isinstance(arch, str) else arch
    if not isinstance(names, Sequence) or not names:
        raise KaioTypeError(f"kaio.aot.export: `arch` must be an arch name or a non-empty list of them, got {arch!r}")
    try:
        arches = [get_arch(a) for a in names]
    except KaioTargetError as e:
        raise KaioTargetError(e.feature, e.min_sm, e.arch, f"kaio.aot.export: `arch`: {e}") from None
    if len({a.name for a in arches}) != len(arches):
        raise KaioTypeError(f"kaio.aot.export: `arch` names an arch twice: {list(names)}")
    return arches


def compile_variants(kernel: Any, arches: Sequence[Arch], specs: Sequence[Specialization]) -> list[Variant]:
    """Every (arch, specialization) compiled, in the dispatcher's order: the newest arch first
    (an ``a`` target before the portable one of its sm), then the most specific specialization
    first (ties: as given)."""
    from kaio.compiler import compile as kaio_compile

    variants = []
    for arch in arches:
        target = kernel_for(kernel, arch.name)
        compiled_here = []
        for spec in specs:
            compiled = kaio_compile(target, arch.name, specialization=spec)
            facts = spec.facts or tuple(getattr(target, "divisible", ()))  # a library op's assumption
            compiled_here.append(Variant(arch, compiled, tuple(facts), _specializes(target)))
        variants += sorted(compiled_here, key=lambda v: -v.weight)
    variants.sort(key=lambda v: (-v.arch.sm, not v.arch.arch_specific))  # stable: weights stay ordered
    _check_one_signature(variants)
    return variants


def _check_one_signature(variants: Sequence[Variant]) -> None:
    first = variants[0].compiled

    def shape(params: Sequence[KernelParam]) -> list[tuple[str, str, bool]]:
        return [(p.name, p.dtype.name, p.is_array) for p in params]

    for v in variants[1:]:
        if shape(v.compiled.params) != shape(first.params):
            raise KaioTypeError(
                f"kaio.aot.export: the variants have different parameters ({v.arch.name}: "
                f"{list(v.compiled.params)}; {variants[0].arch.name}: {list(first.params)}): one "
                "C function cannot launch both; export them separately"
            )


def assemble_cubins(variants: Sequence[Variant], cubin: bool | None) -> list[Variant]:
    """Each variant with its cubin: ``cubin=None`` where a ptxas is installed, True: required
    (a KaioError without one), False: PTX only."""
    from kaio.targets.ptx.toolchain import PtxasError, assemble, find_ptxas

    if cubin is False or (cubin is None and find_ptxas() is None):
        return list(variants)
    if find_ptxas() is None:
        raise KaioError("kaio.aot.export: cubin=True needs ptxas: pip install nvidia-cuda-nvcc-cu12")
    result = []
    for v in variants:
        try:
            report = assemble(v.compiled.ptx, v.arch.name)
        except PtxasError as exc:
            raise KaioError(f"kaio.aot.export: ptxas could not assemble {v.compiled.name} for {v.arch.name}: {exc}") from None
        result.append(replace(v, cubin=report.cubin))
    return result
