"""The layouts a tile staged in shared memory can take (the kinds of ``smem.layout``), in a
module of their own so that configs can check a ``layout`` field without loading the dialect."""

LAYOUT_KINDS = ("none", "pad", "swizzle", "wgmma")
