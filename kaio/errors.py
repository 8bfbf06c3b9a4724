"""The errors kaio raises. Every one says what went wrong in the user's terms.

A user never sees a traceback from deep inside xDSL or the CUDA driver: each layer catches what
it understands and raises one of these, carrying the facts needed to fix the problem (a source
location, a parameter name, the JIT log, the faulting thread).
"""

from __future__ import annotations


class KaioError(Exception):
    """Base class of every error kaio raises on purpose."""


class KaioCompileError(KaioError):
    """Unsupported Python or a type error inside a kernel.

    Points into the user's source: ``file:line:col``, the source line, a caret under the
    offending expression, and a hint when one helps.
    """

    def __init__(
        self,
        message: str,
        *,
        filename: str | None = None,
        line: int | None = None,
        col: int | None = None,
        end_col: int | None = None,
        source_line: str | None = None,
        hint: str | None = None,
    ):
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col
        self.end_col = end_col
        self.source_line = source_line
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.filename is not None and self.line is not None:
            column = f"{self.col + 1}:" if self.col is not None else ""
            where = f"{self.filename}:{self.line}:{column} "
        text = f"{where}error: {self.message}"
        if self.source_line is not None:
            stripped = self.source_line.rstrip()
            text += f"\n    {stripped}"
            if self.col is not None:
                width = 1
                if self.end_col is not None and self.end_col > self.col:
                    width = min(self.end_col, len(stripped)) - self.col
                text += "\n    " + " " * self.col + "^" * max(width, 1)
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text


class KaioPipelineError(KaioCompileError, ValueError):
    """A pass pipeline kaio cannot run: a malformed pipeline string (the message names the
    column), an unknown pass, a bad or out-of-range pass option, an edit naming a pass the
    pipeline lacks or an item that is no pass. A ``ValueError`` too, as xDSL's parser raises."""


class KaioPipelineWarning(UserWarning):
    """A pipeline that runs but probably not as meant: a pass out of the order its contract
    asks for, or a pass whose work is missing (a ``tile.dot`` left to the FMA fallback)."""


class KaioTypeError(KaioError, TypeError):
    """Wrong launch arguments: count, dtype, read-only buffer as output, scalar out of range.

    Raised before anything reaches the device; the message names the parameter.
    """


class KaioValueError(KaioError, ValueError):
    """An argument of the right type whose value kaio cannot use: a zero or non-power-of-two
    tile in a config, a combination of options that cannot run together, a ragged nested list
    for an array, an allocation larger than the device. The message names the argument and the
    rule; a ``ValueError`` too, as Python raises for such values."""


class KaioTargetError(KaioError):
    """A feature the chosen GPU architecture does not have (names the feature and the minimum
    sm), or an architecture kaio does not know."""

    def __init__(self, feature: str, min_sm: int, arch: str, message: str | None = None):
        self.feature = feature
        self.min_sm = min_sm
        self.arch = arch
        super().__init__(message or f"{feature} needs sm_{min_sm} or newer; the target is {arch}")

    @classmethod
    def unknown(cls, arch: str, known: str) -> KaioTargetError:
        return cls("target", 0, arch, f"unknown GPU architecture '{arch}'; kaio knows {known}")


class KaioLaunchError(KaioError):
    """The driver (or the simulator's loader) rejected a module or a launch.

    ``log`` holds the JIT error log; ``ptx_path`` says where the offending PTX was written.
    """

    def __init__(self, message: str, *, log: str = "", ptx_path: str | None = None):
        self.message = message  # without the log and the path: lets a caller re-raise with a path
        self.log = log
        self.ptx_path = ptx_path
        text = message
        if log:
            text += "\n--- JIT log ---\n" + log.rstrip()
        if ptx_path:
            text += f"\nPTX written to: {ptx_path}"
        super().__init__(text)


class KaioDriverError(KaioError):
    """A CUDA driver call failed; carries the call, the driver's error name (e.g.
    CUDA_ERROR_OUT_OF_MEMORY) and its description."""

    def __init__(self, call: str, error_name: str, error_string: str = ""):
        self.call = call
        self.error_name = error_name
        self.error_string = error_string
        detail = f": {error_string}" if error_string else ""
        super().__init__(f"{call} failed with {error_name}{detail}")


def source_note(file: str | None, line: int | None, text: str | None) -> str:
    """The line a simulator error adds for the kernel's Python source: ``from k.py:12: y[i] = x[i]``
    ("" when the PTX carried no line info)."""
    if file is None or line is None:
        return ""
    return f"\n  from {file}:{line}" + (f": {text}" if text else "")


class KaioMemoryError(KaioError):
    """Out-of-bounds or misaligned access caught by the simulator (compute-sanitizer on the CPU).

    Names the kernel, the PTX line (and its text), the thread, the block and the address; when
    the PTX has line info (kaio's always does), also the Python ``source_file``:``source_line``
    and its ``source_text``.
    """

    def __init__(
        self,
        message: str,
        *,
        kernel: str,
        ptx_line: int,
        thread: tuple[int, int, int],
        block: tuple[int, int, int],
        address: int,
        ptx_text: str | None = None,
        source_file: str | None = None,
        source_line: int | None = None,
        source_text: str | None = None,
    ):
        self.kernel = kernel
        self.ptx_line = ptx_line
        self.thread = thread
        self.block = block
        self.address = address
        self.ptx_text = ptx_text
        self.source_file = source_file
        self.source_line = source_line
        self.source_text = source_text
        instruction = f" ({ptx_text})" if ptx_text else ""
        super().__init__(
            f"{message} in kernel '{kernel}' at PTX line {ptx_line}{instruction}: "
            f"thread {thread}, block {block}, address {address:#x}"
            + source_note(source_file, source_line, source_text)
        )


class KaioSimError(KaioError):
    """The simulator found a bug that is not a memory access: deadlock, a barrier reached by part
    of a block, a warp-synchronous instruction on diverged lanes, an unknown instruction.

    ``kernel``, ``ptx_line``, ``thread``, ``block`` and the Python ``source_file``,
    ``source_line`` and ``source_text`` locate it when known (the message already names them;
    the attributes are for programs).
    """

    def __init__(
        self,
        message: str,
        *,
        kernel: str | None = None,
        ptx_line: int | None = None,
        thread: tuple[int, int, int] | None = None,
        block: tuple[int, int, int] | None = None,
        source_file: str | None = None,
        source_line: int | None = None,
        source_text: str | None = None,
    ):
        self.kernel = kernel
        self.ptx_line = ptx_line
        self.thread = thread
        self.block = block
        self.source_file = source_file
        self.source_line = source_line
        self.source_text = source_text
        super().__init__(message)
