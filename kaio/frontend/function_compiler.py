"""The compiler of one Python function (a kernel, or a device function being inlined).

Its parts are the loop, statement and expression visitors over ``CompilerBase``; what a call
means comes from the table in ``call_handlers``, which ``builtins`` fills for the prelude (a
device function or a kernel registers itself where it is defined).
"""

from __future__ import annotations

from kaio.frontend import builtins  # noqa: F401  (registers the prelude's builtins and the casts)
from kaio.frontend.loops import LoopsMixin


class FunctionCompiler(LoopsMixin):
    """Compiles one Python function (a kernel, or a device function being inlined)."""
