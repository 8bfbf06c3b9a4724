"""Reference CUDA kernels from their public sources, fetched at benchmark time, never vendored.

The sources come from source distributions on PyPI, pinned by version and sha256 (the
``llama-cpp-python`` sdist ships llama.cpp's ``ggml-cuda``; vLLM's ships Marlin), are unpacked
once into a cache directory (``$KAIO_REFERENCE_CACHE``, else ``~/.cache/kaio/references``), and
are compiled to PTX by an installed ``nvcc``; kaio's ptxas wheel then assembles that PTX for the
counts (``kaio.targets.ptx.sass``), exactly as it does kaio's and Triton's. Without network
access or without nvcc a benchmark row is skipped with a note (:class:`Unavailable`), never an
error of the benchmark.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

INDEX = "https://pypi.org/simple"  # PEP 503 pages: they link each file with its sha256


class Unavailable(Exception):
    """A reference cannot be built here (no network, no nvcc): the row is skipped with this note."""


@dataclass(frozen=True)
class Sdist:
    package: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}.tar.gz"


LLAMA_CPP = Sdist("llama-cpp-python", "0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
VLLM = Sdist("vllm", "0.34.0", "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113")


def cache_dir() -> Path:
    return Path(os.environ.get("KAIO_REFERENCE_CACHE", Path.home() / ".cache" / "kaio" / "references"))


def _download(sdist: Sdist, to: Path) -> None:
    try:
        page = urllib.request.urlopen(f"{INDEX}/{sdist.package}/", timeout=60).read().decode()
    except OSError as exc:
        raise Unavailable(f"cannot reach {INDEX} for {sdist.package} ({exc})") from exc
    url = next((u for u in re.findall(r'href="([^"#]+)#sha256=([0-9a-f]+)"', page)
                if u[0].endswith("/" + sdist.filename)), None)  # fmt: skip
    if url is None or url[1] != sdist.sha256:
        raise Unavailable(f"{sdist.filename} with sha256 {sdist.sha256[:12]}... is not on {INDEX}")
    with urllib.request.urlopen(url[0], timeout=300) as response, open(to, "wb") as out:
        shutil.copyfileobj(response, out)
    digest = hashlib.sha256(to.read_bytes()).hexdigest()
    if digest != sdist.sha256:
        to.unlink()
        raise Unavailable(f"{sdist.filename}: sha256 {digest} is not the pinned {sdist.sha256}")


def source_tree(sdist: Sdist, member: str) -> Path:
    """The unpacked ``member`` directory (a path inside the sdist's top folder), downloaded and
    extracted on first use."""
    root = cache_dir() / f"{sdist.package}-{sdist.version}"
    target = root / member
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    archive = root / sdist.filename
    if not archive.exists():
        _download(sdist, archive)
    prefix = f"{sdist.package.replace('-', '_')}-{sdist.version}/"
    with tarfile.open(archive) as tar:
        chosen = [m for m in tar.getmembers() if m.name.startswith(prefix + member + "/")]
        for m in chosen:
            m.name = m.name[len(prefix):]
        tar.extractall(root, members=chosen, filter="data")
    if not target.is_dir():
        raise Unavailable(f"{sdist.filename} has no {member}/")
    return target


def find_nvcc() -> str:
    for candidate in (shutil.which("nvcc"), os.environ.get("CUDA_HOME") and Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc",
                      Path("/usr/local/cuda/bin/nvcc")):  # fmt: skip
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise Unavailable("no nvcc (CUDA toolkit) installed: the reference's CUDA source cannot be compiled")


def nvcc_ptx(source: str, arch: str, includes: list[Path], defines: tuple[str, ...] = (), std: str = "c++17") -> str:
    """PTX of one CUDA translation unit (``-O3``), its ``.version`` lowered to what kaio's ptxas
    wheel reads (nvcc 13 writes ISA 9.x for features the 12.9 assembler has under 8.8)."""
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "reference.cu", Path(tmp) / "reference.ptx"
        src.write_text(source)
        cmd = [nvcc, f"-arch={arch}", "-O3", f"-std={std}", "-ptx", "--expt-relaxed-constexpr",
               *(f"-I{p}" for p in includes), *(f"-D{d}" for d in defines), str(src), "-o", str(out)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"nvcc failed on the reference ({arch}):\n{done.stderr[-4000:]}")
        text = out.read_text()
    return re.sub(r"^\.version 9\.\d+$", ".version 8.8", text, flags=re.M)
