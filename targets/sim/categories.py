"""The class a profile counts an instruction under (``int``, ``fp32``, ``sfu``, ``tensor core``...).

Decided once per instruction at decode time from its mnemonic and, for arithmetic that exists
in several types, its first type modifier. The classes follow the hardware units the instruction
keeps busy rather than PTX's grouping: approximate transcendentals go to the special function
unit, packed and scalar f16/bf16 arithmetic to ``half``, ldmatrix and cp.async to ``memory``.
"""

from __future__ import annotations

from .ptx_types import PTX_TYPES

# Mnemonics whose class does not depend on the type.
FIXED: dict[str, str] = {
    **dict.fromkeys(("ld", "ldu", "st", "ldmatrix", "prefetch", "prefetchu", "isspacep", "createpolicy"), "memory"),
    **dict.fromkeys(("atom", "red"), "atomic"),
    **dict.fromkeys(("mma", "wgmma", "wmma"), "tensor core"),
    **dict.fromkeys(("mbarrier", "setmaxnreg"), "sync"),
    **dict.fromkeys(("bra", "ret", "exit", "trap"), "control"),
    **dict.fromkeys(("bar", "barrier", "membar", "fence", "nanosleep"), "sync"),
    **dict.fromkeys(("shfl", "vote", "redux", "activemask", "elect"), "warp"),
    **dict.fromkeys(("mov", "cvta"), "move"),
    **dict.fromkeys(("cvt",), "convert"),
    **dict.fromkeys(("ex2", "lg2", "sin", "cos", "tanh"), "sfu"),
    **dict.fromkeys(
        ("and", "or", "xor", "not", "cnot", "shl", "shr", "shf", "lop3", "prmt", "bfe", "bfi", "bfind",
         "popc", "clz", "brev", "dp4a", "dp2a", "mul24", "mad24", "addc", "subc", "madc"),
        "int",
    ),
}  # fmt: skip
# Approximate forms of these run on the special function unit; exact ones are FMA sequences.
SFU_WHEN_APPROX = frozenset({"rcp", "sqrt", "rsqrt"})
# cp.async issues a copy (memory); its group bookkeeping waits like a barrier (sync).
CP_ASYNC_SYNC = frozenset({"commit_group", "wait_group", "wait_all"})


def _by_type(modifiers: list[str]) -> str:
    for m in modifiers:
        t = PTX_TYPES.get(m)
        if t is None:
            continue
        if not t.is_float:
            return "int"
        return {"f32": "fp32", "f64": "fp64"}.get(t.name, "half")
    return "int"


def instruction_category(opcode: str) -> str:
    mnemonic, *modifiers = opcode.split(".")
    if mnemonic == "cp":
        return "sync" if CP_ASYNC_SYNC.intersection(modifiers) else "memory"
    if mnemonic in FIXED:
        return FIXED[mnemonic]
    if mnemonic in SFU_WHEN_APPROX and "approx" in modifiers:
        return "sfu"
    return _by_type(modifiers)
