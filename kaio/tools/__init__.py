"""Command-line tools (kaio-opt)."""
