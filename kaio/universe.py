"""kaio's dialects, passes and the ``ptx`` target for xDSL tools.

Registered as an ``xdsl.universe`` entry point, so stock ``xdsl-opt`` sees them once kaio is
installed; ``kaio-opt`` registers them explicitly as well.
"""

from __future__ import annotations

from xdsl.universe import Universe
from xdsl.utils.target import Target

from kaio.dialects import get_all_dialects
from kaio.passes import get_all_passes


def _ptx_target() -> type[Target]:
    from kaio.targets.ptx.target import PtxTarget

    return PtxTarget


KAIO_UNIVERSE = Universe(
    all_dialects=get_all_dialects(),
    all_passes=get_all_passes(),
    all_targets={"ptx": _ptx_target},
)
