"""Dialects of the kaio stack, one file each: kernel, tile, smem, cpasync, mma, ptx."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """kaio's dialects by name, loaded lazily (the xDSL registry convention)."""

    def kernel() -> Dialect:
        from kaio.dialects.kernel import Kernel

        return Kernel

    def ptx() -> Dialect:
        from kaio.dialects.ptx import Ptx

        return Ptx

    return {"kernel": kernel, "ptx": ptx}
