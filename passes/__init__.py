"""Passes, one file per pass (or per small family); each a frozen-dataclass ModulePass."""
