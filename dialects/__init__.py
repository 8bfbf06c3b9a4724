"""Dialects of the kaio stack, one file each: kernel, tile, smem, cpasync, mma, wgmma, tma,
mbarrier, ptx."""

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

    def tile() -> Dialect:
        from kaio.dialects.tile import Tile

        return Tile

    def smem() -> Dialect:
        from kaio.dialects.smem import Smem

        return Smem

    def cpasync() -> Dialect:
        from kaio.dialects.cpasync import Cpasync

        return Cpasync

    def mma() -> Dialect:
        from kaio.dialects.mma import Mma

        return Mma

    def wgmma() -> Dialect:
        from kaio.dialects.wgmma import Wgmma

        return Wgmma

    def tma() -> Dialect:
        from kaio.dialects.tma import Tma

        return Tma

    def mbarrier() -> Dialect:
        from kaio.dialects.mbarrier import Mbarrier

        return Mbarrier

    return {"kernel": kernel, "tile": tile, "smem": smem, "cpasync": cpasync, "mma": mma, "wgmma": wgmma, "tma": tma, "mbarrier": mbarrier, "ptx": ptx}
