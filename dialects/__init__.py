"""Dialects of the kaio stack, one file each: kernel, tile, smem, cpasync, mma, ptx."""
