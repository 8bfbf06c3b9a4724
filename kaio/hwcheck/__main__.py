"""The command line of ``python -m kaio.hwcheck`` (see the package doc)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kaio.hwcheck.report import outcome, render
from kaio.hwcheck.runner import SectionResult, run_section
from kaio.hwcheck.sections import CheckoutMissing, find_checkout, plan

PROBE_TIMEOUT_S = 60
# A --sim run never touches a GPU, even on a machine that has one.
SIM_ENV = {"KAIO_DEVICE": "sim", "CUDA_VISIBLE_DEVICES": ""}


def main(argv: list[str] | None = None) -> int:
    """The command; Ctrl-C anywhere ends it with the resume message and exit status 130 (the
    sections finished so far are in the state file)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("hwcheck: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kaio.hwcheck", description=__doc__)
    parser.add_argument("--sim", action="store_true", help="smoke run on the simulator (no GPU)")
    parser.add_argument("--out", type=Path, default=Path("hwcheck-report.md"), help="the report")
    parser.add_argument("--fresh", action="store_true", help="ignore the sections already done")
    parser.add_argument("--only", action="append", metavar="SECTION", help="run (again) just these")
    parser.add_argument("--repo", type=Path, help="the kaio checkout (default: found)")
    args = parser.parse_args(argv)
    try:
        root = find_checkout(args.repo)
    except CheckoutMissing as exc:
        print(f"hwcheck: {exc}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    state_path, logs = out.with_suffix(".state.json"), out.with_suffix(".logs")
    unwritable = _unwritable(out, state_path, logs)
    if unwritable:
        print(f"hwcheck: {unwritable}; choose another --out", file=sys.stderr)
        return 2
    mode = "sim" if args.sim else "gpu"
    state = {} if args.fresh else _load(state_path, mode)
    extra_env = SIM_ENV if args.sim else {}
    if "facts" not in state:
        state = {
            "mode": mode,
            "started": _now(),
            "facts": _probe(root, args.sim, extra_env),
            "results": {},
        }
    facts = state["facts"]
    if not args.sim and "arch" not in facts:  # a "GPU" run on the simulator would prove nothing
        print(
            f"hwcheck: no GPU: {facts.get('device')}; --sim runs the simulator smoke check",
            file=sys.stderr,
        )
        return 2
    sections = plan(root, sim=args.sim, hopper="sm_90a" in facts.get("compile_targets", ""))
    names = [s.name for s in sections]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        print(
            f"hwcheck: no section {', '.join(unknown)}; the sections are {', '.join(names)}",
            file=sys.stderr,
        )
        return 2
    results = {name: SectionResult.from_json(r) for name, r in state["results"].items()}
    for section in sections:
        if args.only and section.name not in args.only:
            continue
        if section.name in results and not args.only:
            print(
                f"hwcheck: {section.name}: done in an earlier run, kept (--fresh to redo)",
                file=sys.stderr,
            )
            continue
        print(f"hwcheck: {section.name}: {section.command}", file=sys.stderr, flush=True)
        try:
            results[section.name] = result = run_section(section, root, logs, extra_env)
        except KeyboardInterrupt:
            print(f"hwcheck: interrupted in {section.name}; run the same command again to resume", file=sys.stderr)
            return 130
        print(
            f"hwcheck: {section.name}: {outcome(result)} ({result.seconds:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        state["results"] = {name: r.to_json() for name, r in results.items()}
        _save(state_path, state)
        out.write_text(
            render(state["started"], args.sim, facts, sections, results), encoding="utf-8"
        )
    report = render(state["started"], args.sim, facts, sections, results)
    out.write_text(report, encoding="utf-8")
    print(report)
    print(f"hwcheck: report in {out}, logs in {logs}", file=sys.stderr)
    return 0 if all(r.ok for r in results.values()) else 1


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _unwritable(out: Path, state: Path, logs: Path) -> str:
    """Why the report, its state file or its logs folder cannot be written (checked before any
    section runs, so a long run never ends unable to save itself); "" when they can."""
    for path, what in ((out, "the report"), (state, "the state file")):
        if path.exists() and not path.is_file():
            return f"{what} {path} exists and is not a regular file"
    if logs.exists() and not logs.is_dir():
        return f"the logs folder {logs} exists and is not a folder"
    if not out.parent.is_dir():
        return f"the folder of the report, {out.parent}, does not exist"
    if not os.access(out.parent, os.W_OK):
        return f"the folder of the report, {out.parent}, is not writable"
    return ""


def _load(path: Path, mode: str) -> dict[str, Any]:
    """The state of an earlier run of the same mode, or nothing. A state file that cannot be
    read, or does not hold what hwcheck writes, is set aside (renamed ``*.damaged``) with a
    warning, and the run starts over."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        problem = _state_problem(state)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = f"unreadable ({type(exc).__name__})"
    if problem:
        aside = path.with_name(path.name + ".damaged")
        try:
            path.replace(aside)
            where = f"set aside as {aside.name}"
        except OSError:
            where = "left as it is"
        print(f"hwcheck: {path.name} is damaged ({problem}), {where}: starting over", file=sys.stderr)
        return {}
    if state.get("mode") != mode:
        print(
            f"hwcheck: {path.name} is from a {state.get('mode')} run: starting over",
            file=sys.stderr,
        )
        return {}
    return dict(state)


def _state_problem(state: Any) -> str:
    """What is wrong with a parsed state file, or "" (the shape :func:`_save` writes)."""
    if not isinstance(state, dict):
        return f"not an object but {type(state).__name__}"
    for key, kind in (("mode", str), ("started", str), ("facts", dict), ("results", dict)):
        if not isinstance(state.get(key), kind):
            return f"`{key}` is not a {kind.__name__}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in state["facts"].items()):
        return "`facts` holds a value that is not text"
    for name, result in state["results"].items():
        try:
            SectionResult.from_json(result).check()
        except (TypeError, ValueError, AttributeError) as exc:
            return f"the result of {name!r} does not read back ({exc})"
    return ""


def _save(path: Path, state: dict[str, Any]) -> None:
    """Atomically, so an interrupted run never leaves half a state file."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state, indent=1), encoding="utf-8")
    partial.replace(path)


def _probe(root: Path, sim: bool, extra_env: dict[str, str]) -> dict[str, Any]:
    """The machine's description, from a child process (this one never loads the driver)."""
    command = [sys.executable, "-m", "kaio.hwcheck.environment"] + (["--sim"] if sim else [])
    try:
        done = subprocess.run(command, cwd=root, env={**os.environ, **extra_env}, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, check=True)  # fmt: skip
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        return {
            "device": f"unavailable ({str(detail).strip().splitlines()[-1] if detail else exc})"
        }


if __name__ == "__main__":
    sys.exit(main())
