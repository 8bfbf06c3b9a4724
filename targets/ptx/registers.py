"""The register file as the hardware hands it out: what a kernel holds at entry, per thread.

An SM has 64K 32-bit registers. A CTA is launched with the same count for every thread, which
ptxas decides (``ptxas -v``'s "Used N registers", allocated in units of 8 per thread) under the
kernel's bounds: ``.maxnreg`` and the block size of ``.maxntid``/``.reqntid`` (one CTA of that size
must fit the register file). ``setmaxnreg`` later moves registers between the CTA's warpgroups
*within that pool*: a ``.dec`` returns registers to it, an ``.inc`` waits until it holds enough.

Both the compiler (choosing ``setmaxnreg`` counts) and the simulator (modelling the pool) need the
count at entry; this module is the one place that computes it.

ptxas honours ``setmaxnreg`` only when it knows the count at entry: under ``.maxnreg``, or a block
bound (``.maxntid``/``.reqntid``) together with ``.minnctapersm``. Otherwise it prints C7508
"'setmaxnreg' ignored; unable to determine register count at entry" and drops the instruction
(:func:`setmaxnreg_honoured`).
"""

from __future__ import annotations

REGISTER_FILE = 64 * 1024  # 32-bit registers per SM (sm_70 .. sm_90)
MAX_PER_THREAD = 255  # what ptxas gives one thread at most (setmaxnreg may raise it to 256)
GRANULE = 8  # registers are allocated to a thread in units of 8


def round_to_warps(threads: int) -> int:
    """Threads the register file is allocated for: whole warps."""
    return -(-threads // 32) * 32


def register_bound(threads: int, maxnreg: int | None = None) -> int:
    """The most registers per thread a CTA of ``threads`` threads can be launched with: the
    register file split over its warps, by 8, capped by ``.maxnreg`` and by 255."""
    fit = REGISTER_FILE // round_to_warps(max(threads, 1)) // GRANULE * GRANULE
    bound = min(MAX_PER_THREAD, fit)
    if maxnreg:
        bound = min(bound, maxnreg)
    return bound


def entry_registers(ptx: str, entry: str, arch: str, threads: int, maxnreg: int | None = None) -> int:
    """Registers per thread the CTA of ``entry`` holds at launch: ptxas's count where the
    wheel's ptxas is installed, else the bound (:func:`register_bound`), which is what ptxas
    allocates to a kernel that spends its registers (a warp-specialised one always does)."""
    from kaio.targets.ptx.toolchain import PtxasError, find_ptxas

    bound = register_bound(threads, maxnreg)
    if find_ptxas() is None:
        return bound
    try:
        used = _assembled_registers(ptx, arch).get(entry)
    except PtxasError:
        return bound
    if used is None:
        return bound
    return min(bound, -(-used // GRANULE) * GRANULE)


IGNORED_WARNING = "C7508"  # ptxas: "'setmaxnreg' ignored; unable to determine register count at entry"


def setmaxnreg_honoured(ptx: str, arch: str, directives: set[str]) -> bool:
    """Whether ptxas keeps an entry's ``setmaxnreg`` (``directives``: the entry's performance
    directives, without the dot). The rule ptxas follows, and its C7508 warning where the wheel's
    ptxas is installed (a module-wide message, so it only ever turns the answer to False)."""
    from kaio.targets.ptx.toolchain import PtxasError, find_ptxas

    bounded = "maxnreg" in directives or ({"maxntid", "reqntid"} & directives and "minnctapersm" in directives)
    if not bounded or find_ptxas() is None:
        return bool(bounded)
    try:
        _assembled_registers(ptx, arch)
    except PtxasError:
        return True
    return IGNORED_WARNING not in _logs.get((hash(ptx), arch), "")


_cache: dict[tuple[int, str], dict[str, int]] = {}
_logs: dict[tuple[int, str], str] = {}


def _assembled_registers(ptx: str, arch: str) -> dict[str, int]:
    """``ptxas -v`` register counts per entry, remembered per PTX text (assembling takes 0.1-1 s)."""
    from kaio.targets.ptx.toolchain import assemble

    key = (hash(ptx), arch)
    if key not in _cache:
        if len(_cache) > 64:
            _cache.clear()
            _logs.clear()
        report = assemble(ptx, arch)
        _cache[key] = dict(report.registers)
        _logs[key] = report.log
    return _cache[key]
