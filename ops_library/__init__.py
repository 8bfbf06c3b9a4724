"""High-level ops, one module each, each owning its default pass pipeline."""
