#!/usr/bin/env python3
"""The project's two commands, needing nothing but Python 3.11+:

    python3 tasks.py demo    run the seed scenarios (tether demo) on ./tether.db
    python3 tasks.py test    lint, type-check and run the whole test suite (with coverage)
    python3 tasks.py quick   the fast subset a developer runs while working (under a minute)

and, for the figures in BENCHMARKS.md:

    python3 tasks.py bench   every benchmark in bench/ (installs the bench extra: LangGraph)

Each creates ./.venv on first use and reinstalls when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".tether-installed"


def sh(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    code = subprocess.call([str(a) for a in args], cwd=ROOT)
    if code != 0:
        sys.exit(code)


def ensure_venv(extras: str = "dev") -> None:
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + extras
    stamp = STAMP.with_name(f"{STAMP.name}-{extras}")
    if stamp.exists() and stamp.read_text() == want:
        return
    if not (BIN / "python").exists():
        print(f"creating {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    sh(BIN / "python", "-m", "pip", "install", "-q", "-e", f".[{extras}]" if extras else ".")
    stamp.write_text(want)


def demo(args: list[str]) -> None:
    # The demo needs tether's core alone (six packages, seconds to install), not the
    # frameworks, browsers and servers the tests use.
    ensure_venv("")
    sh(BIN / "tether", "demo", *args)


def test(args: list[str]) -> None:
    ensure_venv()
    sh(BIN / "ruff", "format", "--check", ".")
    sh(BIN / "ruff", "check", ".")
    sh(BIN / "mypy")
    # The coverage figure prints at the end of the run (CI's log shows it).
    sh(BIN / "python", "-m", "pytest", "--cov", "--cov-report=term", *args)


def quick(args: list[str]) -> None:
    """The fast subset (under a minute): the pure rules, the gate, the stores, the audit and
    the runs, on memory and SQLite; no PostgreSQL, no command-line subprocesses, no crash
    trials. ``test`` runs everything."""
    ensure_venv()
    dirs = [
        "tests/unit",
        "tests/gate",
        "tests/store",
        "tests/audit",
        "tests/runs",
        "tests/dataflow",
    ]
    # Spread over the machine's cores (pytest-xdist): these suites share no server or port.
    sh(
        BIN / "python",
        "-m",
        "pytest",
        "-q",
        "-n",
        "auto",
        "-m",
        "not slow and not postgres",
        *dirs,
        *args,
    )


def bench(args: list[str]) -> None:
    ensure_venv("dev,bench")
    scripts = (
        "bench_gate.py",
        "bench_memory.py",
        "bench_results.py",
        "bench_runs.py",
        "bench_recovery.py",
        "bench_pg.py",
        "bench_call_view.py",
        "bench_verify.py",
        "bench_adapters.py",
        "bench_dataflow.py",
        "bench_mcp.py",
        "bench_event_loop.py",
        "bench_temporal.py",
    )
    for script in scripts:
        if (ROOT / "bench" / script).exists():
            sh(BIN / "python", ROOT / "bench" / script, *args)


def main() -> None:
    commands = {"demo": demo, "test": test, "quick": quick, "bench": bench}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python3 tasks.py {{{'|'.join(commands)}}} [args...]")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
