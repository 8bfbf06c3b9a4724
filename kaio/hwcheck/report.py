"""The hwcheck report: Markdown shaped as a dated section of docs/benchmarks.md (the machine,
a summary table, then each section's figures as its script printed them)."""

from __future__ import annotations

from typing import Any

from kaio.hwcheck.runner import SectionResult
from kaio.hwcheck.sections import Section

FAILURE_CHARS = 1500  # of each failure's message
CRASH_LINES = 60  # of the output of a section that failed or timed out


def render(started: str, sim: bool, facts: dict[str, Any], sections: list[Section],
           results: dict[str, SectionResult]) -> str:  # fmt: skip
    """The whole report; sections without a result yet are listed as not run."""
    device = facts.get("device", "?")
    lines = [
        f"## {started[:10]} — `python -m kaio.hwcheck{' --sim' if sim else ''}` on {device}",
        "",
    ]
    if sim:
        lines += [
            "**Simulator smoke run (`--sim`): no GPU was used; no figure below is a GPU measurement.**",
            "",
        ]
    lines += _machine(started, facts) + ["", "### Summary", ""] + _summary(sections, results)
    for section in sections:
        result = results.get(section.name)
        if result is not None:
            lines += ["", f"### {section.name} — {section.title}", ""] + _details(result)
    return "\n".join(lines) + "\n"


def _machine(started: str, facts: dict[str, Any]) -> list[str]:
    def have(key: str) -> str:
        return str(facts.get(key, "-"))

    torch = have("torch")
    if "torch_cuda" in facts:
        torch += f" (CUDA {facts['torch_cuda']}, cuDNN {have('cudnn')})"
    versions = (f"python {have('python')}, kaio {have('kaio')}, xdsl {have('xdsl')}, numpy {have('numpy')}, "
                f"cuda-python {have('cuda-python')}, torch {torch}, triton {have('triton')}, "
                f"CuPy {have('cupy-cuda12x')}")  # fmt: skip
    rows = [
        ("date", started),
        (
            "device",
            f"{have('device')}: {have('arch')}, {have('sm_count')} SMs, {have('memory_gib')} GiB",
        ),
        ("kaio compiles for", f"{have('compile_arch')} (it can run: {have('compile_targets')})"),
        ("driver", have("driver")),
        ("versions", versions),
        ("platform", have("platform")),
    ]
    return ["| | |", "| --- | --- |"] + [f"| {key} | {value} |" for key, value in rows]


def _summary(sections: list[Section], results: dict[str, SectionResult]) -> list[str]:
    lines = ["| section | result | seconds | command |", "| --- | --- | ---: | --- |"]
    for section in sections:
        result = results.get(section.name)
        if result is None:
            lines.append(f"| {section.name} | not run yet | | `{section.command}` |")
            continue
        lines.append(
            f"| {section.name} | {outcome(result)} | {result.seconds:.1f} | `{result.command}` |"
        )
    done = [r for r in results.values() if r.name in {s.name for s in sections}]
    passed = sum(r.ok for r in done)
    lines += ["", f"**{passed} of {len(sections)} sections passed.**"]
    return lines


def outcome(result: SectionResult) -> str:
    """One line: the status, test counts, and for a timeout where it stopped."""
    text = result.status
    if result.counts:  # passed and failed always, errors and skipped where there are some
        shown = [(w, n) for w, n in result.counts.items() if n or w in ("passed", "failed")]
        text += ": " + ", ".join(f"{n} {what}" for what, n in shown)
    if result.status == "timed out":
        text += f" ({result.timeout_reason}) while running `{result.culprit or 'before its first kernel or test'}`"
    elif result.status == "failed" and not result.counts:
        text += f" (exit status {result.exit_code})"
    return text


def _details(result: SectionResult) -> list[str]:
    lines = [f"`{result.command}`: {outcome(result)}, {result.seconds:.1f} s", ""]
    for test, message in result.failures:
        lines += [f"- FAILED `{test}`", "", "```text", message[:FAILURE_CHARS], "```", ""]
    if result.counts and (result.ok or result.failures):
        return lines[:-1]  # the counts and the failures say it all
    output = result.output.rstrip("\n").splitlines()
    if not result.ok:
        output = output[-CRASH_LINES:]
    return lines + ["```text", *output, "```"] if output else lines
