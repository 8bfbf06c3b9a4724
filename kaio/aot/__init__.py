"""``kaio.aot``: kernels shipped without Python, as PTX/cubin files plus a C launcher.

    from kaio.aot import export
    export(saxpy, "out", arch=("sm_80", "sm_90a"))          # a @kaio.gpu_kernel or @kaio.tile_kernel
    export(matmul, "out", arch=("sm_80", "sm_90a"))         # a library op: its tile kernel and config

writes into ``out`` (``NAME`` is the kernel's name unless ``name=``):

- ``NAME_<arch>_<i>.ptx`` per variant (and ``.cubin`` where a ptxas is installed);
- ``NAME.h`` / ``NAME.c``: ``CUresult NAME_launch(CUstream, const unsigned grid[3], args...)``
  and ``NAME_unload()`` in C99 over the driver API (see :mod:`kaio.aot.c_source`);
- ``NAME.json``: the manifest (parameters, block, shared memory, tensor maps, facts, cache keys);
- ``NAME.rs`` with ``rust=True``.

A *variant* is one compile: an arch times a specialization (``specialization=``: one
:class:`kaio.Specialization` or facts, or a list of them: e.g. a ``("n", 16)`` fast path and a
general one). The C dispatcher picks the newest arch the device runs and, within it, the most
specific variant whose facts the arguments hold.

``grid``: a rule for ``grid=NULL`` in C, as expression strings of the integer arguments and the
constexprs (``("cdiv(n, BLOCK)",)``); a library op brings its own (``grid_rule``).

Everything is compiled and generated before the first file is written; the files are written
to a temporary folder beside ``out_dir`` and moved in, so a failure leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["export"]


def __getattr__(name: str) -> Any:
    """``export`` is imported on first use: a library op reading its grid rule through
    :mod:`kaio.aot.c_expressions` does not load the code generators."""
    if name == "export":
        from kaio.aot.exporter import export

        return export
    raise AttributeError(f"module 'kaio.aot' has no attribute {name!r}")
