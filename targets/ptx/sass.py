"""SASS instruction counts per loop trip: the CPU's proxy for the speed of a kernel.

PTX is assembled by the ``ptxas`` wheel (``-v``: registers, spills, shared memory) and
disassembled by ``cuobjdump -sass``; the SASS of each function is split at its backward
branches into loops, and the instructions of each loop are counted by class (tensor-core MMA,
``ldmatrix``, async copies, TMA, global and shared accesses, integer, float, control,
barriers, ``MUFU``, ``R2UR``...). The same analysis applies to any PTX (kaio's or Triton's),
so loop trips can be compared side by side (``benchmarks/codegen.py``).

    from kaio.targets.ptx import sass
    report = sass.analyze(compiled.ptx, "sm_90a")[compiled.name]
    report.registers, report.spill_bytes, report.shared_bytes
    report.main_loop().counts["mma"], report.main_loop().counts["total"]

A loop is the straight run of instructions from a branch target to the last branch that jumps
back to it (ptxas lays loops out contiguously); its counts are static: an instruction under a
predicate or a forward branch inside the body still counts once, the way it occupies an issue
slot when the warp does not branch around it. Functions parse from the ``cuobjdump`` text
alone (:func:`parse_sass`), so the counting is testable on saved SASS without the tools.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from kaio.targets.ptx import toolchain

# --- instruction classes -----------------------------------------------------------------------

# The first dotted component of an opcode (``IMAD`` of ``IMAD.WIDE.U32``) -> its class. Uniform-
# datapath spellings (``UIADD3``, ``USHF``) count with their vector twins: they take issue slots
# the same way. Anything not listed is "other" (and still in the total).
_INTEGER = ("IMAD", "IADD3", "IADD", "IADD32I", "LEA", "SHF", "SHL", "SHR", "LOP3", "LOP", "LOP32I",
            "ISETP", "ISCADD", "SEL", "IMNMX", "IABS", "IMUL", "POPC", "FLO", "BREV", "BMSK",
            "SGXT", "IDP", "IDE", "VIADD", "VIMNMX", "PLOP3", "P2R", "R2P", "ICMP")  # fmt: skip
_FLOAT = ("FFMA", "FFMA32I", "FADD", "FADD32I", "FMUL", "FMUL32I", "FMNMX", "FSETP", "FSEL", "FSET",
          "FCHK", "FSWZADD", "FRND", "HADD2", "HMUL2", "HFMA2", "HSETP2", "HSET2", "HMNMX2", "DADD",
          "DMUL", "DFMA", "DSETP", "DMNMX")  # fmt: skip
_CONVERT = ("F2F", "F2I", "I2F", "I2FP", "F2FP", "I2I", "I2IP", "F2IP")
# PRMT (a byte permute) moves data between registers: no address or index arithmetic
_MOVE = ("MOV", "MOV32I", "UMOV", "CS2R", "S2R", "S2UR", "LDC", "ULDC", "VOTE", "VOTEU", "PRMT", "UPRMT")
_CONTROL = ("BRA", "UBRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "ELECT",
            "UELECT", "BREAK", "BPT", "KILL", "YIELD", "NANOSLEEP")  # fmt: skip
_BARRIER = ("BAR", "SYNCS", "MEMBAR", "WARPSYNC", "DEPBAR", "LDGDEPBAR", "ERRBAR", "CCTL", "FENCE",
            "WARPGROUP", "ARRIVES", "UCGABAR")  # fmt: skip

OPCODE_CLASSES: dict[str, str] = {
    **dict.fromkeys(("HMMA", "IMMA", "QMMA", "HGMMA", "IGMMA", "QGMMA", "BMMA", "DMMA", "BGMMA"), "mma"),
    **dict.fromkeys(("LDSM", "STSM"), "ldsm"),
    "LDGSTS": "ldgsts",
    **dict.fromkeys(("UTMALDG", "UTMASTG", "UTMAPF", "UTMACCTL", "UBLKCP", "UTMAREDG"), "tma"),
    **dict.fromkeys(("LDG", "STG", "LD", "ST", "RED", "ATOM", "ATOMG"), "global"),
    **dict.fromkeys(("LDS", "STS", "ATOMS"), "shared"),
    **dict.fromkeys(_INTEGER, "integer"),
    **dict.fromkeys(("U" + op for op in _INTEGER), "integer"),
    **dict.fromkeys(_FLOAT, "float"),
    **dict.fromkeys(_CONVERT, "convert"),
    **dict.fromkeys(_MOVE, "move"),
    **dict.fromkeys(_CONTROL, "control"),
    **dict.fromkeys(_BARRIER, "barrier"),
    "MUFU": "mufu",
    "R2UR": "r2ur",
    "SHFL": "shuffle",
    "NOP": "nop",
}
CLASSES = ("mma", "ldsm", "ldgsts", "tma", "global", "shared", "integer", "float", "convert", "mufu",
           "shuffle", "move", "r2ur", "control", "barrier", "nop", "other")  # fmt: skip


def opcode_class(opcode: str) -> str:
    """The class of a SASS opcode (``"IMAD.WIDE.U32"`` -> ``"integer"``)."""
    return OPCODE_CLASSES.get(opcode.split(".", 1)[0], "other")


# --- parsing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str  # "" or e.g. "@!P1"
    opcode: str  # with its modifiers: "HMMA.16816.F32"
    operands: str

    @property
    def kind(self) -> str:
        return opcode_class(self.opcode)

    def branch_target(self) -> int | None:
        """The address a branch jumps to (``BRA``, ``BRA.U``, ``JMP``), else None."""
        if self.opcode.split(".", 1)[0] not in ("BRA", "UBRA", "JMP"):
            return None
        targets = re.findall(r"0x([0-9a-f]+)", self.operands)
        return int(targets[-1], 16) if targets else None


_FUNCTION_RE = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION_RE = re.compile(
    r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);"
)


def parse_sass(text: str) -> dict[str, list[Instruction]]:
    """Function name -> its instructions, from ``cuobjdump -sass`` output."""
    functions: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for line in text.splitlines():
        if m := _FUNCTION_RE.match(line):
            current = functions.setdefault(m.group(1), [])
        elif current is not None and (m := _INSTRUCTION_RE.match(line)):
            address, predicate, opcode, operands = m.groups()
            current.append(
                Instruction(int(address, 16), (predicate or "").strip(), opcode, operands.strip())
            )
    return functions


def count(instructions: list[Instruction]) -> dict[str, int]:
    """Instructions per class, every class present (zero if none), plus ``"total"``."""
    counts = Counter(i.kind for i in instructions)
    out = {k: counts.get(k, 0) for k in CLASSES}
    out["total"] = len(instructions)
    return out


# --- loops --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """Instructions from a branch target (``head``) to the last branch back to it (``tail``)."""

    head: int
    tail: int
    instructions: list[Instruction] = field(repr=False)
    depth: int  # 0: outermost; an inner loop's instructions are also in its outer loops

    @property
    def counts(self) -> dict[str, int]:
        return count(self.instructions)

    def contains(self, other: Loop) -> bool:
        return self.head <= other.head and other.tail <= self.tail and self != other


def find_loops(instructions: list[Instruction]) -> list[Loop]:
    """The loops of one function, in address order: one per branch target that a later branch
    jumps back to (the trailing ``BRA`` to itself that ends every function is no loop)."""
    tails: dict[int, int] = {}
    for ins in instructions:
        target = ins.branch_target()
        if target is not None and target < ins.address:
            tails[target] = max(tails.get(target, target), ins.address)
    spans = sorted(tails.items())
    loops = []
    for head, tail in spans:
        depth = sum(1 for h, t in spans if h <= head and tail <= t and (h, t) != (head, tail))
        body = [i for i in instructions if head <= i.address <= tail]
        loops.append(Loop(head, tail, body, depth))
    return loops


# --- a whole kernel -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionReport:
    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int  # static .shared (ptxas); dynamic shared memory is the launch's
    instructions: list[Instruction] = field(repr=False)
    loops: list[Loop] = field(repr=False)

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def counts(self) -> dict[str, int]:
        """Static counts of the whole function, the padding after its last ``EXIT`` excluded."""
        return count(self.body())

    def body(self) -> list[Instruction]:
        last_exit = max(
            (n for n, i in enumerate(self.instructions) if i.opcode == "EXIT"), default=-1
        )
        return self.instructions[: last_exit + 1] if last_exit >= 0 else list(self.instructions)

    def outside_loops(self) -> list[Instruction]:
        return [
            i for i in self.body() if not any(lp.head <= i.address <= lp.tail for lp in self.loops)
        ]

    def main_loop(self) -> Loop | None:
        """The loop that does the work: the innermost with the most MMAs; without MMAs the
        innermost with the most memory accesses; None for a kernel without loops."""
        if not self.loops:
            return None
        innermost = [lp for lp in self.loops if not any(lp.contains(o) for o in self.loops)]

        def weight(lp: Loop) -> tuple[int, int, int]:
            c = lp.counts
            memory = c["ldsm"] + c["ldgsts"] + c["tma"] + c["global"] + c["shared"]
            return c["mma"], memory, c["total"]

        return max(innermost, key=weight)


_SMEM_RE = re.compile(r"(\d+) bytes smem")


def _shared_bytes(log: str) -> dict[str, int]:
    out: dict[str, int] = {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = m.group(1)
        elif current is not None and "Used" in line and (m := _SMEM_RE.search(line)):
            out[current] = int(m.group(1))
    return out


def analyze_sass(
    sass_text: str, report: toolchain.PtxasReport | None = None
) -> dict[str, FunctionReport]:
    """Function name -> counts and loops of already disassembled SASS (``report``: the ptxas
    ``-v`` figures; without it registers, spills and shared memory read 0)."""
    shared = _shared_bytes(report.log) if report is not None else {}
    out = {}
    for name, instructions in parse_sass(sass_text).items():
        out[name] = FunctionReport(
            name,
            report.registers.get(name, 0) if report else 0,
            report.spill_stores.get(name, 0) if report else 0,
            report.spill_loads.get(name, 0) if report else 0,
            shared.get(name, 0),
            instructions,
            find_loops(instructions),
        )
    return out


def analyze(ptx: str, arch: str) -> dict[str, FunctionReport]:
    """Assemble ``ptx`` for ``arch`` with the wheel's ptxas, disassemble it, and count."""
    report = toolchain.assemble(ptx, arch)
    return analyze_sass(toolchain.disassemble(report.cubin), report)


@cache
def tools_available() -> bool:
    """ptxas, cuobjdump and nvdisasm wheels are all installed."""
    return None not in (
        toolchain.find_ptxas(),
        toolchain.find_cuobjdump(),
        toolchain.find_nvdisasm(),
    )
