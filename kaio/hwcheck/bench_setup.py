"""What the row-op benchmark scripts (``benchmarks/memory_bound.py``, ``training.py``) share at
start: their options, the device, torch, and saying so when there is nothing to time."""

from __future__ import annotations


def benchmark_setup(description: str, needs: str) -> tuple[object, object, object] | int:
    """The start every row-op benchmark shares: ``--rows``/``--cols``/``--sim-smoke`` parsed, the
    device (the simulator for ``--sim-smoke``, else the default one), and torch. Returns
    ``(args, device, torch)``, or the exit status when there is nothing to time (no GPU outside
    ``--sim-smoke``: 0, saying ``needs``; no torch: 0 on the simulator, 1 on a GPU)."""
    import argparse

    import kaio

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--sim-smoke", action="store_true", help="tiny run on the simulator (checks the script)")
    args = parser.parse_args()
    dev = kaio.Device("sim") if args.sim_smoke else kaio.Device()
    if dev.is_simulator and not args.sim_smoke:
        print(f"no GPU: this benchmark measures {needs}; nothing was timed "
              "(use --sim-smoke to check the script on the simulator)")  # fmt: skip
        return 0
    try:
        import torch
    except ImportError:
        print("this benchmark compares with torch: install torch")
        return 0 if dev.is_simulator else 1
    return args, dev, torch
