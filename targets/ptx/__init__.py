"""The PTX target: arch table, printer, and helpers around the ptxas/cuobjdump wheels."""
