"""GPU architectures kaio targets, and the PTX ISA version each one needs at least."""

from __future__ import annotations

from dataclasses import dataclass

from kaio.errors import KaioTargetError


@dataclass(frozen=True)
class Arch:
    name: str  # "sm_80"
    sm: int  # 80
    min_ptx: tuple[int, int]  # lowest PTX ISA version that knows this target
    # "a" targets (sm_90a) add features of that one GPU generation (wgmma, setmaxnreg) that
    # later GPUs need not have: code for them runs only on that sm, never JIT-forwarded.
    arch_specific: bool = False


ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm_70", 70, (6, 0)),
        Arch("sm_72", 72, (6, 1)),
        Arch("sm_75", 75, (6, 3)),
        Arch("sm_80", 80, (7, 0)),
        Arch("sm_86", 86, (7, 1)),
        Arch("sm_87", 87, (7, 4)),
        Arch("sm_89", 89, (7, 8)),
        Arch("sm_90", 90, (7, 8)),
        Arch("sm_90a", 90, (8, 0), arch_specific=True),
    )
}

# The newest PTX ISA kaio emits: drivers from CUDA 12.7 on accept it, and the ptxas wheel used to
# check kaio's output (CUDA 12.9) understands it.
MAX_PTX: tuple[int, int] = (8, 7)

DEFAULT_ARCH = "sm_80"


def get_arch(name: str | int) -> Arch:
    """``"sm_80"``, ``"80"``, ``80`` or ``"sm80"`` -> the Arch; anything else -> KaioTargetError."""
    text = str(name).lower().replace("sm_", "").replace("sm", "")  # "90a" stays "90a"
    key = f"sm_{text}"
    if key not in ARCHES:
        known = ", ".join(ARCHES)
        raise KaioTargetError.unknown(str(name), known)
    return ARCHES[key]


def ptx_version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"
