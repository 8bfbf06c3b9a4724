"""The compiler of one Python function (a kernel, or a device function being inlined), composed
once from its parts.

The parts are mixins over ``CompilerBase`` (context.py), each importing only the modules below
it, never another part: what one asks of another is declared on the base. What a call means
comes from the table in ``call_handlers``, which ``builtins`` fills for the prelude (a device
function or a kernel registers itself where it is defined).
"""

from __future__ import annotations

from kaio.frontend import builtins  # noqa: F401  (registers the prelude's builtins and the casts)
from kaio.frontend.context import CompilerBase
from kaio.frontend.expressions import ExpressionsMixin
from kaio.frontend.loops import LoopsMixin
from kaio.frontend.statements import StatementsMixin


class FunctionCompiler(LoopsMixin, StatementsMixin, ExpressionsMixin, CompilerBase):
    """Compiles one Python function (a kernel, or a device function being inlined)."""
