"""Benchmark: approved, durable write calls through the gate on PostgreSQL — latency beside the
floor measured in the same run, and throughput with 1, 2, 4 and 8 worker processes.

    .venv/bin/python bench/bench_pg.py [--calls 2000] [--per-worker 500] [--json]

Latency (one process): the median and p99 microseconds of ``Gate.call`` on a call whose
approval was requested and granted before timing started, beside the floor: the same rows
written by two raw commits on a plain psycopg connection, in tables created by
``PostgresStore`` on a schema of their own. First commit: INSERT the effect row, UPDATE the
approval's status and record, UPDATE the run's checkpoint and version, then lock the audit
head (SELECT ... FOR UPDATE), INSERT the audit row and UPSERT the head; second commit: UPDATE
the effect to committed and append one more audit row the same way. The floor's values are
as large as the gate's (measured on the gate's own rows after a warm-up). Beside it, a
pipelined floor: the same statements in psycopg's pipeline mode, waiting only for the audit
head and the commits (four round trips, where the plain floor takes fourteen and the gate,
pipelined too, five) — the fair floor for a gate that pipelines. Gate and floors run in
interleaved rounds, rotating which goes first, so machine noise hits all three.

Throughput: N worker processes (N = 1, 2, 4, 8; "spawn" context) each open their own
``PostgresStore`` after starting, start their own run, request and grant the approvals for
their calls, wait on a barrier, then make the same number of governed calls. Throughput is
total calls / (latest end - earliest start), on the system-wide monotonic clock.

Every measurement uses a fresh schema (``bench_<uuid>``), dropped at the end. PostgreSQL's
settings are left as they are; ``synchronous_commit`` is reported.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import traceback
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from tether import Gate, Policy, Principal, Registry, Risk, ToolCall
from tether.errors import ApprovalRequired
from tether.store.postgres import PostgresStore, split_url

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
WORKERS = (1, 2, 4, 8)


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


def new_schema() -> str:
    return f"bench_{uuid.uuid4().hex[:16]}"


def make_gate(store: PostgresStore, run_id: str) -> tuple[Gate, str]:
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="ticket:write")
    def close_ticket(ticket_id: str, operation_key: str) -> dict[str, str]:
        """Close a ticket."""
        return {"ticket_id": ticket_id, "status": "closed"}

    gate = Gate(registry, Policy(version="policy-3", approvers=frozenset({"reviewer-5"})), store)
    principal = Principal(subject="user-42", tenant="acme", scopes=frozenset({"ticket:write"}))
    return gate, gate.start_run(principal, run_id=run_id)


def calls(n: int, start: int = 0) -> list[ToolCall]:
    return [
        ToolCall(call_id=f"call-{i}", tool="close_ticket", arguments={"ticket_id": f"T-{i}"})
        for i in range(start, start + n)
    ]


def grant_all(gate: Gate, run_id: str, batch: list[ToolCall]) -> None:
    for call in batch:
        try:
            gate.call(run_id, call)
        except ApprovalRequired as signal:
            gate.approve(signal.approval_id, "reviewer-5")
        else:
            raise AssertionError(f"{call.call_id} did not ask for approval")


def time_gate(gate: Gate, run_id: str, batch: list[ToolCall]) -> list[float]:
    out = []
    for call in batch:
        t = time.perf_counter_ns()
        gate.call(run_id, call)
        out.append((time.perf_counter_ns() - t) / 1000)
    return out


def drop_schema(url: str, schema: str) -> None:
    conninfo, _ = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- the floor: the same rows, two raw commits ------------------------------------------------
class Floor:
    """A plain psycopg connection writing, per call, the rows the gate writes."""

    def __init__(self, url: str, schema: str, sizes: dict[str, int], n: int) -> None:
        PostgresStore(with_schema(url, schema)).close()  # creates the schema and its tables
        conninfo, _ = split_url(url)
        self.c = psycopg.connect(conninfo)
        self.c.execute(f'SET search_path TO "{schema}"')
        self.c.commit()
        self.sizes = sizes
        self.next = 0
        self.run = "run-floor"
        with self.c.transaction():
            self.c.execute(
                "INSERT INTO agent_runs (run_id, state_version, status, principal_id, tenant_id,"
                " policy_version, checkpoint_json, created_at, updated_at)"
                " VALUES (%s, 1, 'running', 'user-42', 'acme', 'policy-3', %s, 0, 0)",
                (self.run, "c" * sizes["checkpoint"]),
            )
            self.c.execute(
                "INSERT INTO audit_heads (chain, seq, hash) VALUES (%s, 1, %s)",
                (self.run, "0" * 64),
            )
            body = "a" * sizes["approval"]
            with self.c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO approvals (approval_id, run_id, call_id, status, created_at,"
                    " expires_at, record_json) VALUES (%s, %s, %s, 'approved', 0, 1e12, %s)",
                    [(f"apr-{i}", self.run, f"call-{i}", body) for i in range(n)],
                )

    def _append(self, kind: str, body: str) -> None:
        seq, _ = self.c.execute(
            "SELECT seq, hash FROM audit_heads WHERE chain = %s FOR UPDATE", (self.run,)
        ).fetchone() or (0, "")
        self.c.execute(
            "INSERT INTO audit_log (chain, seq, kind, run_id, prev_hash, hash, body)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (self.run, seq + 1, kind, self.run, "p" * 64, "h" * 64, body),
        )
        self.c.execute(
            "INSERT INTO audit_heads (chain, seq, hash) VALUES (%s, %s, %s) "
            "ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
            (self.run, seq + 1, "h" * 64),
        )

    def one(self) -> None:
        i = self.next
        self.next += 1
        key = f"{self.run}:call-{i}:close_ticket:1"
        now = time.time()
        with self.c.transaction():
            self.dispatch(i, key, now)
        with self.c.transaction():
            self.resolve(key, now)

    def dispatch(self, i: int, key: str, now: float) -> None:
        """The first commit's statements."""
        s = self.sizes
        self.c.execute(
            "INSERT INTO agent_effects (operation_key, run_id, call_id, tool_name,"
            " tool_version, argument_digest, status, result_digest, external_reference,"
            " result_json, error, attempts, created_at, updated_at) VALUES"
            " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                key,
                self.run,
                f"call-{i}",
                "close_ticket",
                "1",
                "sha256:" + "d" * 64,
                "dispatched",
                None,
                None,
                None,
                None,
                1,
                now,
                now,
            ),
        )
        self.c.execute(
            "UPDATE approvals SET status = %s, record_json = %s"
            " WHERE approval_id = %s AND status = %s",
            ("used", "u" * s["approval"], f"apr-{i}", "approved"),
        )
        self.c.execute(
            "UPDATE agent_runs SET state_version = state_version + 1, checkpoint_json = %s,"
            " updated_at = %s WHERE run_id = %s",
            ("k" * s["checkpoint"], now, self.run),
        )
        self._append("effect_dispatched", "b" * s["dispatched"])

    def resolve(self, key: str, now: float) -> None:
        """The second commit's statements."""
        s = self.sizes
        self.c.execute(
            "UPDATE agent_effects SET status = %s, result_digest = %s, result_json = %s,"
            " updated_at = %s WHERE operation_key = %s AND status = %s",
            ("committed", "sha256:" + "r" * 64, "j" * s["result"], now, key, "dispatched"),
        )
        self._append("tool_effect_resolved", "b" * s["resolved"])

    def time(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter_ns()
            self.one()
            out.append((time.perf_counter_ns() - t) / 1000)
        return out

    def close(self) -> None:
        self.c.close()


class PipelinedFloor(Floor):
    """The same statements in psycopg's pipeline mode, waiting only where an answer is
    needed (the audit head, to chain on) and at each commit: four round trips per call, the
    fewest these rows allow, where ``Floor`` waits for every statement (fourteen)."""

    def __init__(self, url: str, schema: str, sizes: dict[str, int], n: int) -> None:
        super().__init__(url, schema, sizes, n)
        self.c.autocommit = True

    def one(self) -> None:
        i = self.next
        self.next += 1
        key = f"{self.run}:call-{i}:close_ticket:1"
        now = time.time()
        with self.c.pipeline():
            self.c.execute("BEGIN")
            self.dispatch(i, key, now)
            self.c.execute("COMMIT")
        with self.c.pipeline():
            self.c.execute("BEGIN")
            self.resolve(key, now)
            self.c.execute("COMMIT")


def row_sizes(url: str, schema: str, run_id: str) -> dict[str, int]:
    """How large the gate's values are, so that the floor writes as many bytes."""
    conninfo, _ = split_url(url)
    with psycopg.connect(conninfo) as c:
        c.execute(f'SET search_path TO "{schema}"')

        def one(sql: str, *params: Any) -> int:
            row = c.execute(sql, params).fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return {
            "checkpoint": one(
                "SELECT length(checkpoint_json) FROM agent_runs WHERE run_id = %s", run_id
            ),
            "approval": one("SELECT max(length(record_json)) FROM approvals WHERE status = 'used'"),
            "result": one("SELECT max(length(result_json)) FROM agent_effects"),
            "dispatched": one(
                "SELECT max(length(body)) FROM audit_log WHERE kind = 'effect_dispatched'"
            ),
            "resolved": one(
                "SELECT max(length(body)) FROM audit_log WHERE kind = 'tool_effect_resolved'"
            ),
        }


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1]


def bench_latency(url: str, n: int, rounds: int, warmup: int) -> dict[str, Any]:
    gate_schema, floor_schema, piped_schema = new_schema(), new_schema(), new_schema()
    store = PostgresStore(with_schema(url, gate_schema))
    floor: Floor | None = None
    piped: Floor | None = None
    try:
        gate, run_id = make_gate(store, "run-bench")
        batch = calls(warmup + n)
        grant_all(gate, run_id, batch)
        time_gate(gate, run_id, batch[:warmup])  # warm-up: pool, prepared statements
        sizes = row_sizes(url, gate_schema, run_id)
        floor = Floor(url, floor_schema, sizes, warmup + n)
        floor.time(warmup)
        piped = PipelinedFloor(url, piped_schema, sizes, warmup + n)
        piped.time(warmup)
        gate_us: list[float] = []
        floor_us: list[float] = []
        piped_us: list[float] = []
        per = n // rounds
        timed = batch[warmup:]
        for r in range(rounds):
            part = timed[r * per : (r + 1) * per]
            order = [0, 1, 2][r % 3 :] + [0, 1, 2][: r % 3]  # each goes first in turn
            for who in order:
                if who == 0:
                    gate_us += time_gate(gate, run_id, part)
                elif who == 1:
                    floor_us += floor.time(len(part))
                else:
                    piped_us += piped.time(len(part))
        assert store.verify_audit().intact
        committed = [e for e in store.list_effects(run_id) if e.status.value == "committed"]
        assert len(committed) == warmup + per * rounds, len(committed)
    finally:
        store.close()
        for f in (floor, piped):
            if f is not None:
                f.close()
        for schema in (gate_schema, floor_schema, piped_schema):
            drop_schema(url, schema)
    gm, fm = statistics.median(gate_us), statistics.median(floor_us)
    pm = statistics.median(piped_us)
    return {
        "calls": len(gate_us),
        "rounds": rounds,
        "median_us": round(gm, 1),
        "p99_us": round(pct(gate_us, 99), 1),
        "floor_median_us": round(fm, 1),
        "floor_p99_us": round(pct(floor_us, 99), 1),
        "overhead_us": round(gm - fm, 1),
        "ratio": round(gm / fm, 2),
        # The same rows pipelined (four round trips): the floor for a pipelined gate.
        "pipelined_floor_median_us": round(pm, 1),
        "pipelined_floor_p99_us": round(pct(piped_us, 99), 1),
        "ratio_to_pipelined_floor": round(gm / pm, 2),
        "floor_value_sizes": sizes,
    }


# -- throughput -------------------------------------------------------------------------------
def _clock() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # system-wide: comparable across processes


def worker(url: str, index: int, n: int, barrier: Any, results: Any) -> None:
    try:
        store = PostgresStore(url)
        try:
            gate, run_id = make_gate(store, f"run-w{index}")
            batch = calls(n)
            grant_all(gate, run_id, batch)
            barrier.wait()
            start = _clock()
            for call in batch:
                gate.call(run_id, call)
            end = _clock()
        finally:
            store.close()
    except BaseException:
        barrier.abort()
        results.put((index, traceback.format_exc()))
        raise
    results.put((index, start, end, n))


def bench_throughput(url: str, workers: int, per_worker: int) -> dict[str, Any]:
    schema = new_schema()
    schema_url = with_schema(url, schema)
    # Migrate here, once, and start the ``_chains`` chain with a setup run: PostgresStore
    # starts that chain with a plain INSERT when it has no head row yet, so two workers
    # starting the schema's first runs at once both write (_chains, 1) and one fails.
    with PostgresStore(schema_url) as setup:
        make_gate(setup, "run-setup")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(schema_url, i, per_worker, barrier, results))
        for i in range(workers)
    ]
    try:
        for p in procs:
            p.start()
        got = [results.get(timeout=900) for _ in procs]
        failed = [g[1] for g in got if len(g) == 2]
        if failed:
            raise RuntimeError(f"a worker failed:\n{failed[0]}")
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"worker exited with {p.exitcode}")
        store = PostgresStore(schema_url)
        try:
            assert store.verify_audit().intact
            done = sum(1 for e in store.list_effects() if e.status.value == "committed")
        finally:
            store.close()
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        drop_schema(url, schema)
    total = sum(g[3] for g in got)
    assert done == total, (done, total)
    wall = (max(g[2] for g in got) - min(g[1] for g in got)) / 1e9
    return {"workers": workers, "calls": total, "seconds": round(wall, 3), "rate": total / wall}


def server_info(url: str) -> dict[str, str]:
    conninfo, _ = split_url(url)
    with psycopg.connect(conninfo) as c:

        def one(sql: str) -> str:
            row = c.execute(sql).fetchone()
            return str(row[0]) if row else ""

        return {
            "postgresql": one("SELECT version()"),
            "synchronous_commit": one("SHOW synchronous_commit"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="libpq URL of the server")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls for latency")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved gate/floor rounds")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--per-worker", type=int, default=500, help="calls per worker process")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per N (median)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()

    results: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "cpu_count": os.cpu_count(),
        },
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        **server_info(args.url),
    }
    results["latency"] = bench_latency(args.url, args.calls, args.rounds, args.warmup)
    runs: dict[int, list[float]] = {n: [] for n in WORKERS}
    for _ in range(args.repeats):  # N interleaved across repeats, so noise spreads over all
        for n in WORKERS:
            runs[n].append(bench_throughput(args.url, n, args.per_worker)["rate"])
    one = statistics.median(runs[1])
    results["throughput"] = [
        {
            "workers": n,
            "calls_per_worker": args.per_worker,
            "calls_per_s": round(statistics.median(runs[n]), 1),
            "runs_calls_per_s": [round(r, 1) for r in runs[n]],
            "vs_one": round(statistics.median(runs[n]) / one, 2),
        }
        for n in WORKERS
    ]
    lat = results["latency"]
    four = next(t for t in results["throughput"] if t["workers"] == 4)
    results["targets"] = {
        "latency_ratio_le_2": lat["ratio"] <= 2.0,
        "four_workers_ge_2_5x": four["vs_one"] >= 2.5,
    }
    if args.json:
        print(json.dumps(results))
        return
    m = results["machine"]
    print(f"{m['platform']}, {m['cpu_count']} CPUs, Python {results['python']}")
    print(f"{results['postgresql']}")
    print(f"synchronous_commit={results['synchronous_commit']}, psycopg {results['psycopg']}")
    print()
    print(f"Latency, one process, {lat['calls']} approved durable write calls ({lat['rounds']}")
    print("interleaved rounds)     median µs     p99 µs")
    print(f"  Gate.call            {lat['median_us']:>10.1f} {lat['p99_us']:>10.1f}")
    print(f"  floor (2 raw commits){lat['floor_median_us']:>10.1f} {lat['floor_p99_us']:>10.1f}")
    print(f"  tether's own work    {lat['overhead_us']:>10.1f}")
    ok = "met" if results["targets"]["latency_ratio_le_2"] else "MISSED"
    print(f"  ratio median/floor   {lat['ratio']:>10.2f}x   (target <= 2.0: {ok})")
    print(
        f"  pipelined floor      {lat['pipelined_floor_median_us']:>10.1f} µs median "
        f"(the same rows in four round trips): ratio {lat['ratio_to_pipelined_floor']:.2f}x"
    )
    print()
    print(f"Throughput, {args.per_worker} calls per worker, median of {args.repeats} runs")
    print("  workers    calls/s   vs 1 worker   runs")
    for t in results["throughput"]:
        each = ", ".join(f"{r:.0f}" for r in t["runs_calls_per_s"])
        print(f"  {t['workers']:>7} {t['calls_per_s']:>10.1f} {t['vs_one']:>12.2f}x   {each}")
    ok = "met" if results["targets"]["four_workers_ge_2_5x"] else "MISSED"
    print(f"  (target: 4 workers >= 2.5x one: {ok})")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
