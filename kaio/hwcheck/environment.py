"""The machine a hwcheck report describes: device, driver and package versions.

``python -m kaio.hwcheck.environment [--sim]`` prints it as JSON; hwcheck runs it in a child
process so that its own process never loads the CUDA driver (a GPU left in a bad state by one
section cannot take the report down with it)."""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from typing import Any

PACKAGES = ("kaio", "xdsl", "numpy", "ml_dtypes", "cuda-python", "torch", "triton", "cupy-cuda12x")


def describe(sim: bool) -> dict[str, Any]:
    """Device, driver and versions; each value a string, "-" where it does not apply."""
    import kaio
    from kaio.runtime import driver

    facts: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for package in PACKAGES:
        try:
            facts[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            facts[package] = "not installed"
    facts["driver"] = "-"
    if not sim:
        try:
            version = int(driver.check("cuDriverGetVersion", driver.load().cuDriverGetVersion()))
            facts["driver"] = f"CUDA {version // 1000}.{version % 1000 // 10} ({version})"
        except (driver.DriverUnavailable, kaio.KaioError) as exc:
            facts["driver"] = f"unavailable: {exc}"
    try:
        dev = kaio.Device("sim") if sim else kaio.Device(0)
    except kaio.KaioError as exc:
        facts["device"] = f"unavailable: {exc}"
        return facts
    facts |= {
        "device": dev.name,
        "arch": dev.arch,
        "sm_count": str(dev.sm_count),
        "memory_gib": f"{dev.total_memory / 2**30:.0f}",
        "compile_arch": dev.compile_arch,
        "compile_targets": ", ".join(dev.compile_targets),
    }
    torch = None if facts["torch"] == "not installed" else _import("torch")
    if torch is not None:
        facts["torch_cuda"] = str(torch.version.cuda or "-")
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cudnn"] = str(cudnn or "-")
    return facts


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


if __name__ == "__main__":
    print(json.dumps(describe("--sim" in sys.argv[1:])))
