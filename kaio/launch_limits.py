"""The bounds and defaults of a kernel's launch options, once for every layer that checks them:
the decorators (``block_size``, ``num_warps``, ``num_stages``, ``maxnreg``), the library ops'
configs, the module's ``kaio.launch`` attribute (``kaio.dialects.stage_attrs``), the options of
the passes that read it (``pipeline-cp-async{stages}``, ``pipeline-tma{stages}``,
``lower-to-ptx{maxnreg}``) and the ``.maxnreg`` directive of ``ptx.entry``."""

MAX_THREADS = 1024
"""Threads of one block (CTA) on every arch kaio targets."""

MAX_WARPS = MAX_THREADS // 32
"""Warps of one block: a tile kernel's ``num_warps`` is a power of two up to this."""

MAX_STAGES = 8
"""The deepest copy ring (a tile kernel's ``num_stages``, a config's ``stages``): deeper rings
only grow the PTX."""

MIN_RING_STAGES = 2
"""The shallowest ring (double buffering): ``num_stages`` 0 or 1 means no ring, plain copies."""

STAGES_RULE = f"0 or 1 (no ring) up to {MAX_STAGES}"
"""What a ``num_stages`` (a config's ``stages``) may be, as every check's message says it."""

DEFAULT_STAGES = 3
"""A tile kernel's ``num_stages`` when none is given, and the ring depth of a module that
carries no ``kaio.launch`` (a hand-written or older dump)."""

MIN_MAXNREG, MAX_MAXNREG = 24, 255
"""What ptxas accepts for ``.maxnreg`` (registers per thread at most): a tile kernel's
``maxnreg``, a config's, ``lower-to-ptx{maxnreg}``."""

MAXNREG_RULE = f"{MIN_MAXNREG}..{MAX_MAXNREG}"
"""A register cap's range, as every check's message says it."""
