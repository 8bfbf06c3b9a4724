"""Targets: ptx/ (printer, arch table, ptxas helpers) and sim/ (CPU PTX simulator)."""
