"""The CUDA driver (``cuda.bindings.driver``), imported on first use, and the one place where a
``CUresult`` is checked.

``import kaio`` never imports cuda-python: a machine without a GPU pays nothing for it, and a
machine without the driver library learns so only when it asks for a CUDA device. Every driver
call goes through :func:`check`, which turns a failure into ``KaioDriverError(call, name,
string)`` with the driver's own words, so no raw ``CUresult`` ever reaches the user.

Tests replace the module with a fake one (:func:`use_driver`) to exercise the CUDA code path on a
machine without a GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kaio.errors import KaioDriverError

_lock = threading.Lock()
_driver: Any = None  # the initialized driver module, once loaded
_failure: DriverUnavailable | None = None  # why loading failed (not retried: it is expensive)


class DriverUnavailable(Exception):
    """No usable CUDA driver on this machine (no library, no device, cuInit failed). Internal:
    ``Device()`` turns it into the simulator fallback, ``Device(0)`` into a KaioDriverError.
    ``str()`` is a short summary (the fallback announcement); ``detail`` says more."""

    def __init__(self, summary: str, detail: str = "") -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail or summary


def binding() -> Any:
    """cuda-python's driver module, imported but not initialized (no libcuda needed):
    ``cuda.bindings.driver`` (cuda-python >= 12.6.1), ``cuda.cuda`` before that. Same functions,
    same argument types; ImportError when neither imports."""
    try:
        from cuda.bindings import driver as module
    except ImportError:
        try:
            from cuda import cuda as module  # type: ignore[attr-defined,no-redef]
        except ImportError:
            raise ImportError(
                "neither cuda.bindings.driver nor cuda.cuda imports: pip install cuda-python"
            ) from None
    return module


def load() -> Any:
    """The ``cuda.bindings.driver`` module with ``cuInit`` done; DriverUnavailable otherwise."""
    global _driver, _failure
    if _driver is not None:
        return _driver
    with _lock:
        if _driver is not None:
            return _driver
        if _failure is not None:
            raise DriverUnavailable(_failure.summary, _failure.detail)
        try:
            module = binding()
        except ImportError as exc:  # cuda-python missing or broken
            _failure = DriverUnavailable("cuda-python is not importable", str(exc))
            raise _failure from None
        try:
            # The first call loads libcuda; without it cuda-python raises DynamicLibNotFoundError,
            # a RuntimeError subclass.
            (err,) = module.cuInit(0)
        except (RuntimeError, OSError) as exc:
            _failure = DriverUnavailable("no CUDA driver found", f"{type(exc).__name__}: {exc}")
            raise _failure from None
        if err != module.CUresult.CUDA_SUCCESS:
            name = _error_name(module, err)
            summary = (
                "no CUDA device found"
                if name == "CUDA_ERROR_NO_DEVICE"
                else f"cuInit failed ({name})"
            )
            _failure = DriverUnavailable(summary, f"cuInit failed with {name}")
            raise DriverUnavailable(_failure.summary, _failure.detail)
        _driver = module
        return module


def available() -> bool:
    """Whether a CUDA driver loads and initializes on this machine."""
    try:
        load()
    except DriverUnavailable:
        return False
    return True


@contextmanager
def use_driver(module: Any) -> Iterator[None]:
    """Run with ``module`` standing in for the CUDA driver (tests: a fake driver on a CPU box)."""
    global _driver, _failure
    saved = (_driver, _failure)
    _driver, _failure = module, None
    try:
        yield
    finally:
        _driver, _failure = saved


def check(call: str, result: Any) -> Any:
    """Unpack a cuda-python result ``(err, *values)``: the value (or tuple of values) when ``err``
    is CUDA_SUCCESS, else raise ``KaioDriverError`` naming ``call`` and the driver's error."""
    err = result[0]
    if err != _driver.CUresult.CUDA_SUCCESS:
        raise error(call, err)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else tuple(result[1:])


# Errors a faulting kernel leaves behind; they surface at the next synchronizing call.
_KERNEL_FAULTS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_INVALID_PC",
    }
)


def error(call: str, err: Any, detail: str = "") -> KaioDriverError:
    """The KaioDriverError for a failed ``call``; ``detail`` adds context (sizes, names)."""
    name = _error_name(_driver, err)
    text = _error_string(_driver, err)
    if detail:
        text = f"{text} ({detail})" if text else detail
    if name in _KERNEL_FAULTS:
        text += (
            "; a kernel faulted (possibly an earlier launch: launches are asynchronous). Run it on "
            "kaio.Device('sim') to see the faulting thread, block and PTX line"
        )
    return KaioDriverError(call, name, text)


def is_error(err: Any, name: str) -> bool:
    """Whether ``err`` is the CUresult called ``name`` (e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``)."""
    return bool(err == getattr(_driver.CUresult, name, None))


def _error_name(module: Any, err: Any) -> str:
    try:
        status, name = module.cuGetErrorName(err)
        if status == module.CUresult.CUDA_SUCCESS and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # the driver cannot even name the error: fall back to the enum
        pass
    return getattr(err, "name", None) or f"CUresult {int(err)}"


def _error_string(module: Any, err: Any) -> str:
    try:
        status, text = module.cuGetErrorString(err)
        if status == module.CUresult.CUDA_SUCCESS and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:
        pass
    return ""
