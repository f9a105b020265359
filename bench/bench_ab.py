"""Benchmark: two versions of tether in lockstep, each call timed beside the other's.

    .venv/bin/python bench/bench_ab.py --before /tmp/tether-before/src [--after SRC]
                       [--store memory|FULL|NORMAL] [--calls 2000] [--block 20] [--json]

On a shared machine whose speed changes by half from one second to the next, two runs made
one after the other do not compare: each saw a different machine. Here every participant is
a child process with its own gate (and, on SQLite, its own database file), importing tether
from its own source tree (``PYTHONPATH``; ``--after`` defaults to the installed one). The
parent asks each in turn, in a rotating order, for a block of ``--block`` timed calls and
waits for its answer, so only one participant runs at any moment and the blocks of a round
are made within a few milliseconds of each other. (A block of one would time every call just
after its process woke, with cold caches: a block of 20 keeps that to its first call.)

The timed call is ``bench_memory.py``'s / ``bench_gate.py``'s: ``Gate.call`` on an approved
``close_ticket`` write whose approval was requested and granted before timing. On SQLite the
floor (``bench_gate.py``'s two raw commits, one call at a time) is a third participant, so
tether's own work (median minus floor) of both versions comes from the same moments.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


# -- a participant (child process) ------------------------------------------------------------
def child(kind: str, store: str, calls: int, workdir: Path) -> None:
    sys.path.insert(0, str(BENCH))
    import bench_gate
    import bench_memory
    import tether

    if kind == "floor":
        steps = bench_gate.floor_steps(workdir / "floor.db", store, calls)

        def one() -> float:
            return next(steps)
    else:
        if store == "memory":
            gate, run_id = bench_memory.make_gate()
        else:
            gate, run_id = bench_gate.make_gate(workdir / f"gate-{kind}.db", store)
        batch = bench_memory.calls(calls)
        bench_memory.grant_all(gate, run_id, batch)
        pending = iter(batch)

        def one() -> float:
            call = next(pending)
            t = time.perf_counter_ns()
            gate.call(run_id, call)
            return (time.perf_counter_ns() - t) / 1000

    print(json.dumps({"ready": kind, "tether": tether.__file__}), flush=True)
    for line in sys.stdin:
        if line.strip() == "q":
            break
        print(json.dumps([one() for _ in range(int(line))]), flush=True)
    if kind != "floor":
        assert gate.store.verify_audit().intact


# -- the parent -------------------------------------------------------------------------------
def spawn(
    kind: str, src: str | None, store: str, calls: int, workdir: Path
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src:
        env["PYTHONPATH"] = src
    args = [sys.executable, __file__, "--child", kind, "--store", store, "--calls", str(calls)]
    return subprocess.Popen(
        [*args, "--workdir", str(workdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        bufsize=1,
    )


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="source tree (…/src) of the version before")
    parser.add_argument("--after", default=None, help="source tree after (default: installed)")
    parser.add_argument("--store", default="memory", choices=("memory", "FULL", "NORMAL"))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--block", type=int, default=20, help="calls per participant per turn")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.block < 1:
        parser.error("--block must be at least 1")
    if args.child:
        child(args.child, args.store, args.calls, Path(args.workdir))
        return
    if not args.before:
        parser.error("--before is required")
    with tempfile.TemporaryDirectory() as d:
        kinds = {"before": args.before, "after": args.after}
        if args.store != "memory":
            kinds["floor"] = args.after
        procs: dict[str, subprocess.Popen[str]] = {}
        origin: dict[str, str] = {}
        try:
            for kind, src in kinds.items():
                workdir = Path(d) / kind
                workdir.mkdir()
                # Set up one at a time (nothing is timed yet): each waits to be ready.
                proc = procs[kind] = spawn(kind, src, args.store, args.calls, workdir)
                assert proc.stdout is not None
                origin[kind] = json.loads(proc.stdout.readline())["tether"]
            times: dict[str, list[float]] = {k: [] for k in procs}
            order = list(procs)
            for i, start in enumerate(range(0, args.calls, args.block)):
                size = min(args.block, args.calls - start)
                first = i % len(order)
                for kind in order[first:] + order[:first]:
                    p = procs[kind]
                    assert p.stdin is not None and p.stdout is not None
                    p.stdin.write(f"{size}\n")
                    p.stdin.flush()
                    times[kind] += json.loads(p.stdout.readline())
            for p in procs.values():
                assert p.stdin is not None
                p.stdin.write("q\n")
                p.stdin.flush()
                p.stdin.close()
            for kind, p in procs.items():
                if p.wait(timeout=600) != 0:
                    raise RuntimeError(f"participant {kind} exited with {p.returncode}")
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {
        "store": args.store,
        "calls": args.calls,
        "block": args.block,
        "tether": origin,
        "median_us": {k: round(v, 1) for k, v in med.items()},
        "p99_us": {k: round(p99(v), 1) for k, v in times.items()},
        "after_vs_before": round(med["after"] / med["before"], 3),
        # the i-th calls of the two versions (made in the same round) compared, then the
        # median of those ratios
        "paired_ratio_median": round(
            statistics.median(a / b for a, b in zip(times["after"], times["before"], strict=True)),
            3,
        ),
    }
    if "floor" in med:
        own = {k: med[k] - med["floor"] for k in ("before", "after")}
        out["own_work_us"] = {k: round(v, 1) for k, v in own.items()}
        out["ratio_to_floor"] = {k: round(med[k] / med["floor"], 2) for k in ("before", "after")}
        out["own_work_after_vs_before"] = round(own["after"] / own["before"], 3)
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"store {args.store}, {args.calls} calls each, {args.block} per turn; "
        + "; ".join(f"{k}: {v}" for k, v in origin.items())
    )
    for k in procs:
        line = f"  {k:<7} median {out['median_us'][k]:>8.1f} µs   p99 {out['p99_us'][k]:>8.1f} µs"
        if k in out.get("own_work_us", {}):
            line += (
                f"   own work {out['own_work_us'][k]:>7.1f} µs   ratio to floor "
                f"{out['ratio_to_floor'][k]}x"
            )
        print(line)
    print(
        f"  after/before: medians {out['after_vs_before']}x, per-round pairs "
        f"{out['paired_ratio_median']}x"
        + (
            f", tether's own work {out['own_work_after_vs_before']}x"
            if "own_work_after_vs_before" in out
            else ""
        )
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
