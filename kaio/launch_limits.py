"""The bounds of a kernel's launch options, once for every layer that checks them: the
decorators (``block_size``, ``num_warps``, ``num_stages``), the library ops' configs, and the
ring passes' options (``pipeline-cp-async{stages}``, ``pipeline-tma{stages}``)."""

MAX_THREADS = 1024
"""Threads of one block (CTA) on every arch kaio targets."""

MAX_WARPS = MAX_THREADS // 32
"""Warps of one block: a tile kernel's ``num_warps`` is a power of two up to this."""

MAX_STAGES = 8
"""The deepest copy ring (a tile kernel's ``num_stages``, a config's ``stages``): deeper rings
only grow the PTX."""
