"""Running one hwcheck section: a child process with its output in a log file, killed (with
everything it started) when it passes the section's time limit or goes too long without a new
progress marker; the result names the last marker, so a hang names its kernel or test."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from kaio.hwcheck.markers import MARKERS_ENV, last_marker
from kaio.hwcheck.sections import Section

POLL_S = 0.2
OUTPUT_LIMIT = 20_000  # characters of a section's output kept for the report


@dataclass
class SectionResult:
    """What one section did. ``status``: passed, failed (non-zero exit: a test failed or the
    script crashed), timed out. ``culprit``: the last marker of a section that timed out."""

    name: str
    command: str
    status: str
    seconds: float
    exit_code: int | None = None
    culprit: str | None = None
    timeout_reason: str = ""
    output: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # tests: passed/failed/errors/skipped
    failures: list[tuple[str, str]] = field(default_factory=list)  # (test, message)

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SectionResult:
        data = dict(data)
        data["failures"] = [tuple(f) for f in data.get("failures", [])]
        return cls(**data)

    def check(self) -> SectionResult:
        """This result, or a ValueError saying which field does not hold what hwcheck writes
        (a state file edited or damaged by hand must not crash the report)."""
        text_fields = ("name", "command", "status", "timeout_reason", "output")
        if not all(isinstance(getattr(self, f), str) for f in text_fields):
            raise ValueError(f"one of {', '.join(text_fields)} is not text")
        if self.status not in ("passed", "failed", "timed out"):
            raise ValueError(f"status {self.status!r}")
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int | float):
            raise ValueError(f"seconds {self.seconds!r}")
        if not (self.exit_code is None or type(self.exit_code) is int) or not (self.culprit is None or isinstance(self.culprit, str)):
            raise ValueError("exit_code or culprit of the wrong type")
        if not isinstance(self.counts, dict) or not all(isinstance(k, str) and type(v) is int for k, v in self.counts.items()):
            raise ValueError("counts are not names and integers")
        if not all(len(f) == 2 and all(isinstance(x, str) for x in f) for f in self.failures):
            raise ValueError("failures are not (test, message) pairs")
        return self


def run_section(
    section: Section, cwd: Path, logs: Path, extra_env: dict[str, str]
) -> SectionResult:
    """Run ``section`` in ``cwd``; its output goes to ``logs/<name>.log``."""
    logs.mkdir(parents=True, exist_ok=True)
    log, markers, junit = (logs / f"{section.name}.{ext}" for ext in ("log", "markers", "xml"))
    for stale in (markers, junit):
        stale.unlink(missing_ok=True)
    argv = list(section.argv) + ([f"--junitxml={junit}"] if section.is_pytest else [])
    env = {
        **os.environ,
        **extra_env,
        **section.env,
        MARKERS_ENV: str(markers),
        "PYTHONUNBUFFERED": "1",
    }
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            reason = _watch(child, section, markers, start)
        except BaseException:  # Ctrl-C: leave nothing running on the GPU
            _kill(child)
            raise
    seconds = round(time.monotonic() - start, 1)
    result = SectionResult(section.name, section.command, "passed", seconds, child.returncode)
    result.output = _tail(log.read_text(encoding="utf-8", errors="replace"))
    if reason:
        result.status, result.timeout_reason = "timed out", reason
        result.culprit = last_marker(markers)
    elif child.returncode != 0:
        result.status = "failed"
    if section.is_pytest and junit.is_file():
        result.counts, result.failures = _junit(junit)
    return result


def _watch(child: subprocess.Popen[bytes], section: Section, markers: Path, start: float) -> str:
    """Wait for ``child``; kill its process group and say why when it runs out of time."""
    seen, progress = None, start
    while True:
        try:
            child.wait(timeout=POLL_S)
            return ""
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        marker = _stamp(markers)
        if marker != seen:
            seen, progress = marker, now
        if now - start > section.timeout_s:
            reason = f"the section ran past its limit of {section.timeout_s:g} s"
        elif now - progress > section.marker_timeout_s:
            reason = f"no progress for {section.marker_timeout_s:g} s"
        else:
            continue
        _kill(child)
        return reason


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_size, stat.st_mtime_ns)


def _kill(child: subprocess.Popen[bytes]) -> None:
    """The child and whatever it started (its own session): a hung GPU process may have helpers."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _tail(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return f"[... {len(text) - OUTPUT_LIMIT} characters left out ...]\n" + text[-OUTPUT_LIMIT:]


def _junit(path: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Test counts and (test, message) failures from pytest's JUnit XML."""
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return {}, []
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next(
            (child for child in case if child.tag in ("failure", "error", "skipped")), None
        )
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            failures.append((test, (outcome.get("message") or outcome.text or "").strip()))
    return counts, failures
