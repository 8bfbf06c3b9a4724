"""Loaded modules per device, keyed by a hash of their PTX.

Loading is where the driver JIT-compiles PTX to machine code (or the simulator parses it), so it
happens once per PTX text per device. A rejected module raises ``KaioLaunchError`` carrying the
JIT log and the path of a file holding the PTX (see ``kaio.cache.write_failed_ptx``), so the
user can open the exact text the driver saw.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from kaio import cache
from kaio.errors import KaioLaunchError
from kaio.runtime.backend import Backend


class ModuleCache:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def function(self, ptx: str, name: str) -> Any:
        """The backend's handle for kernel ``name`` of ``ptx``, loading the module if needed."""
        digest = hashlib.sha256(ptx.encode()).hexdigest()
        with self._lock:
            found = self._functions.get((digest, name))
            if found is not None:
                return found
            module = self._modules.get(digest)
            if module is None:
                module = self._load(ptx, name)
                self._modules[digest] = module
            function = self._backend.get_function(module, name)
            self._functions[(digest, name)] = function
            return function

    def _load(self, ptx: str, name: str) -> Any:
        try:
            return self._backend.load_module(ptx)
        except KaioLaunchError as exc:
            path = exc.ptx_path or cache.write_failed_ptx(ptx, name)
            raise KaioLaunchError(
                f"cannot load kernel `{name}`: {exc.message}", log=exc.log, ptx_path=path
            ) from None

    def __len__(self) -> int:
        return len(self._modules)

    def clear(self) -> None:
        """Unload every module (functions obtained from them become invalid)."""
        with self._lock:
            modules = list(self._modules.values())
            self._modules.clear()
            self._functions.clear()
        for module in modules:
            self._backend.unload_module(module)
