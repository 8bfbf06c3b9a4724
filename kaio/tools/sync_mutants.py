"""Synchronisation mutants: does every barrier, wait, fence and mbarrier operation of a kernel
earn its place?

A *case* is a function ``run(device)`` that launches kernels on a simulated device and raises
``AssertionError`` when their result is wrong. :func:`campaign` runs it once as it is (it must
pass), records the PTX of every kernel it loads, then runs it again once per *mutant*: the PTX
of one kernel with one synchronisation instruction deleted (or, for a wait that answers,
weakened: ``mbarrier.try_wait`` that succeeds at once), under the simulator's race check,
synccheck and each adversarial schedule seed. A mutant is

* **rejected** when the simulator raises a kaio error (a race, an async-proxy rule, a deadlock,
  a fault): what a GPU would have done wrong, caught;
* **wrong** when the case's result check fails;
* a **survivor** otherwise: either the simulator is more lenient than the hardware (a rule to
  add) or the instruction is redundant (for the compiler to stop emitting).

    from kaio.tools.sync_mutants import campaign, table
    print(table(campaign({"my matmul": run_my_matmul}, kaio.Device("sim", arch="sm_90a"))))

``python -m kaio.tools.sync_mutants [--arch sm_80 --arch sm_90 --arch sm_90a] [--only NAME] [--seeds 0,1,2]``
runs the library's cases (:mod:`kaio.tools.sync_mutant_cases`) and prints the table, each
survivor with its reason from ``sync_mutant_cases.EXPLAINED[arch]``; it exits 1 when a case fails
unmutated or a survivor has no reason there.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kaio.errors import KaioError

# One PTX instruction per line in kaio's printed PTX; these are the ones that order threads,
# copies or proxies. (Predicated forms, "@%p1 bar.sync 0;", are found too.)
SYNC = re.compile(
    r"^\s*(@!?%\w+\s+)?("
    r"bar\.|barrier\.|"
    r"cp\.async\.(wait_group|wait_all|commit_group|mbarrier)|"
    r"cp\.async\.bulk\.(wait_group|commit_group)|"
    r"mbarrier\.|fence\.|membar\.|"
    r"wgmma\.(fence|commit_group|wait_group)"
    r")"
)
_TRY_WAIT = re.compile(r"^(\s*)(@!?%\w+\s+)?mbarrier\.(try_wait|test_wait)\S*\s+(%\w+)\s*,")

Case = Callable[[Any], None]


@dataclass(frozen=True)
class Site:
    """One synchronisation instruction of one kernel: its entry, PTX line (1-based), text, and
    which occurrence of that text in the entry it is (0 the first: a name that survives
    unrelated changes to the lines before it)."""

    entry: str
    line: int
    text: str
    nth: int = 0
    source: str = ""  # the kernel source line it came from (the nearest ``.loc`` comment above)
    variant: int = 0  # which distinct PTX of that entry name the case loaded (0: the first)
    ptx: str = field(default="", repr=False, compare=False)  # that PTX

    @property
    def kernel(self) -> str:
        """The entry, with ``#variant`` when the case loaded more than one PTX under its name
        (two specializations of one kernel)."""
        return f"{self.entry}#{self.variant}" if self.variant else self.entry

    @property
    def key(self) -> tuple[str, str, int]:
        return self.kernel, self.text, self.nth


@dataclass
class Outcome:
    case: str
    site: Site
    verdict: str  # "rejected", "wrong", "survived", "crashed" (kaio failed with a non-kaio exception)
    detail: str = ""
    seeds: tuple[int | None, ...] = ()


@dataclass
class CaseResult:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""  # the unmutated case failed: no mutants were run


def sites(entry: str, ptx: str, variant: int = 0) -> list[Site]:
    """The synchronisation instructions of ``ptx``'s kernel ``entry`` (``variant``: see Site)."""
    found: list[Site] = []
    seen: dict[str, int] = {}
    source = ""
    for i, line in enumerate(ptx.splitlines()):
        if line.lstrip().startswith(".loc") and "//" in line:
            source = line.split("//", 1)[1].strip()
        elif SYNC.match(line):
            text = line.strip()
            found.append(Site(entry, i + 1, text, seen.get(text, 0), source, variant, ptx))
            seen[text] = seen.get(text, 0) + 1
    return found


def mutate(ptx: str, site: Site) -> str:
    """``ptx`` with ``site`` deleted; a try_wait/test_wait becomes "done at once" instead (its
    result register is read by the loop around it)."""
    lines = ptx.splitlines()
    text = lines[site.line - 1]
    wait = _TRY_WAIT.match(text)
    if wait is not None:
        lines[site.line - 1] = f"{wait.group(1)}{wait.group(2) or ''}mov.pred {wait.group(4)}, 1;"
    else:
        del lines[site.line - 1]
    return "\n".join(lines) + "\n"


@contextmanager
def loading(device: Any, edit: Callable[[str, str], str]) -> Iterator[list[tuple[str, str]]]:
    """Inside: every module ``device`` loads goes through ``edit(ptx, entry)``; yields the
    (entry, PTX as loaded) list. Specializations loaded before are forgotten on entry and on
    exit, so each side sees its own modules."""
    from kaio.runtime.launch import forget_loaded
    from kaio.runtime.modules import ModuleCache

    seen: list[tuple[str, str]] = []
    original = ModuleCache.function

    def function(self: ModuleCache, ptx: str, name: str) -> Any:
        if self is device._modules:
            ptx = edit(ptx, name)
            seen.append((name, ptx))
        return original(self, ptx, name)

    forget_loaded(device)
    ModuleCache.function = function  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        ModuleCache.function = original  # type: ignore[method-assign]
        forget_loaded(device)


@contextmanager
def strict(device: Any, seed: int | None) -> Iterator[None]:
    """The simulator's race check and synccheck on, and the adversarial schedule of ``seed``
    (None: lockstep)."""
    sim = device.simulator
    previous = sim.race_check, sim.synccheck
    previous_seed = os.environ.get("KAIO_SIM_SCHEDULE_SEED")
    sim.race_check = sim.synccheck = True
    os.environ["KAIO_SIM_SCHEDULE_SEED"] = "" if seed is None else str(seed)
    try:
        yield
    finally:
        sim.race_check, sim.synccheck = previous
        if previous_seed is None:
            os.environ.pop("KAIO_SIM_SCHEDULE_SEED", None)
        else:
            os.environ["KAIO_SIM_SCHEDULE_SEED"] = previous_seed


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


def run_mutant(case: Case, device: Any, site: Site, seeds: Sequence[int | None]) -> tuple[str, str]:
    """(verdict, detail) of ``case`` with ``site`` mutated, over the seeds (the first that
    catches it decides)."""
    target = site.ptx
    for seed in seeds:
        with strict(device, seed), loading(device, lambda ptx, name: mutate(ptx, site) if name == site.entry and ptx == target else ptx):
            try:
                case(device)
            except AssertionError as exc:
                return "wrong", f"seed {seed}: {_first_line(exc)}"
            except KaioError as exc:
                return "rejected", f"seed {seed}: {_first_line(exc)}"
            except Exception as exc:  # noqa: BLE001 - kaio itself failed on the mutant: a defect to report
                return "crashed", f"seed {seed}: {_first_line(exc)}"
    return "survived", f"seeds {', '.join(map(str, seeds))}"


def campaign(cases: dict[str, Case], device: Any, seeds: Sequence[int | None] = (0, 1, 2),
             keep: Callable[[Site], bool] = lambda site: True) -> list[CaseResult]:  # fmt: skip
    """Every case, then every mutant of every kernel it loads (those ``keep`` selects)."""
    results = []
    for name, case in cases.items():
        start = time.perf_counter()
        result = CaseResult(name)
        try:
            with strict(device, seeds[0] if seeds else None), loading(device, lambda ptx, _: ptx) as loaded:
                case(device)
        except (AssertionError, KaioError) as exc:
            result.error = _first_line(exc)
            results.append(result)
            continue
        variants: dict[str, list[str]] = {}  # entry -> each distinct PTX loaded under it, in order
        for entry, ptx in loaded:
            if ptx not in variants.setdefault(entry, []):
                variants[entry].append(ptx)
        for entry, texts in variants.items():
            for site in (s for variant, ptx in enumerate(texts) for s in sites(entry, ptx, variant)):
                if keep(site):
                    verdict, detail = run_mutant(case, device, site, seeds)
                    result.outcomes.append(Outcome(name, site, verdict, detail, tuple(seeds)))
        result.seconds = time.perf_counter() - start
        results.append(result)
    return results


def survivors(results: Sequence[CaseResult]) -> list[Outcome]:
    return [o for r in results for o in r.outcomes if o.verdict == "survived"]


def crashes(results: Sequence[CaseResult]) -> list[Outcome]:
    return [o for r in results for o in r.outcomes if o.verdict == "crashed"]


def killed_elsewhere(results: Sequence[CaseResult]) -> dict[tuple[str, int], str]:
    """Per mutant (its kernel's PTX and line) that some case killed, the first such case: a
    survivor in another case is the same instruction in a shape that does not exercise it."""
    killers: dict[tuple[str, int], str] = {}
    for o in (o for r in results for o in r.outcomes):
        if o.verdict in ("rejected", "wrong"):
            killers.setdefault((o.site.ptx, o.site.line), o.case)
    return killers


def _reason(o: Outcome, explained: Mapping[tuple[str, str, str, int], str], killers: Mapping[tuple[str, int], str]) -> str | None:
    killer = killers.get((o.site.ptx, o.site.line))
    if killer is not None:
        return f"needed: the same mutant of the same kernel is killed in '{killer}'"
    return explained.get((o.case, *o.site.key), explained.get(("*", "*", o.site.text, -1)))


def unexplained(results: Sequence[CaseResult], explained: Mapping[tuple[str, str, str, int], str]) -> list[Outcome]:
    """The survivors ``explained`` has no reason for and no other case kills. ``explained`` is
    keyed by case name and :attr:`Site.key`, or by ``("*", "*", text, -1)``: every site of that
    instruction text."""
    killers = killed_elsewhere(results)
    return [o for o in survivors(results) if _reason(o, explained, killers) is None]


def table(results: Sequence[CaseResult], explained: Mapping[tuple[str, str, str, int], str] | None = None) -> str:
    """The campaign as Markdown: per case the mutants, how they were killed, the survivors
    (each with its reason from ``explained``, keyed by case name and :attr:`Site.key`)."""
    lines = ["| case | mutants | rejected | wrong result | survived | seconds |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | - | - | - | - | unmutated case failed: {r.error} |")
            continue
        count = {v: sum(o.verdict == v for o in r.outcomes) for v in ("rejected", "wrong")}
        count["survived"] = len(r.outcomes) - count["rejected"] - count["wrong"]  # (crashes included)
        lines.append(f"| {r.name} | {len(r.outcomes)} | {count['rejected']} | {count['wrong']} | {count['survived']} | {r.seconds:.1f} |")
    total = [o for r in results for o in r.outcomes]
    killed = sum(o.verdict in ("rejected", "wrong") for o in total)
    lines.append(f"| **all** | {len(total)} | {sum(o.verdict == 'rejected' for o in total)} | "
                 f"{sum(o.verdict == 'wrong' for o in total)} | {len(total) - killed} | |")  # fmt: skip
    distinct = {(o.site.ptx, o.site.line): o for o in total}
    killers = killed_elsewhere(results)
    lines += ["", f"Distinct mutants (one kernel's PTX, one instruction): {len(distinct)}, killed in some case: "
                  f"{sum(key in killers for key in distinct)}."]  # fmt: skip
    left = survivors(results)
    if left:
        lines += ["", "Survivors:", ""]
        for o in left:
            why = _reason(o, explained or {}, killers) or "**unexplained**"
            where = f" (from `{o.site.source}`)" if o.site.source else ""
            lines.append(f"- {o.case}: `{o.site.kernel}` line {o.site.line} (#{o.site.nth}): `{o.site.text}`{where}: {why}")
    broke = crashes(results)
    if broke:
        lines += ["", "Mutants kaio crashed on (a defect):", ""]
        lines += [f"- {o.case}: `{o.site.kernel}` line {o.site.line}: `{o.site.text}`: {o.detail}" for o in broke]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    import kaio
    from kaio.tools import sync_mutant_cases

    parser = argparse.ArgumentParser(prog="python -m kaio.tools.sync_mutants", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", action="append", help="simulated targets (default: sm_80, sm_90 and sm_90a)")
    parser.add_argument("--only", action="append", metavar="TEXT", help="cases whose name contains TEXT")
    parser.add_argument("--seeds", default="0,1,2", help="adversarial schedule seeds, comma-separated")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] or [None]
    status = 0
    for arch in args.arch or ["sm_80", "sm_90", "sm_90a"]:
        cases = {n: c for n, c in sync_mutant_cases.cases(arch).items() if not args.only or any(t in n for t in args.only)}
        if not cases:
            continue
        results = campaign(cases, kaio.Device("sim", arch=arch), seeds)
        print(f"\n### {arch}\n")
        explained = sync_mutant_cases.EXPLAINED.get(arch, {})
        print(table(results, explained))
        status |= bool(unexplained(results, explained) or crashes(results)) or any(r.error for r in results)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
