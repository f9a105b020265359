"""``Gate.acall`` killed with SIGKILL at the crash points around its tool (a real process, an
``async def`` tool on its event loop), then recovered: the tool's side effect happens exactly
once, witnessed by the service's own table."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.core.ledger import EffectStatus
from tether.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def child(d: Path, step: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TETHER_CRASH_AT", None)
    if crash is not None:
        env["TETHER_CRASH_AT"] = crash
    return subprocess.run(
        [sys.executable, "-m", "tests.crash.acall_child", str(d), step],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def executions(d: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(d / "service.db")
    try:
        return conn.execute("SELECT operation_key, ticket FROM calls").fetchall()
    except sqlite3.OperationalError:  # the tool never ran, so never made its table
        return []
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("point", "ran_before_crash", "settled_as"),
    [
        ("gate.after_dispatch_commit", 0, "absent"),
        ("gate.after_tool_return", 1, "committed"),
    ],
)
def test_acall_killed_at_a_crash_point_recovers_exactly_once(
    tmp_path: Path, point: str, ran_before_crash: int, settled_as: str
) -> None:
    answer(child(tmp_path, "start"))
    died = child(tmp_path, "call", crash=point)
    assert died.returncode == -9, (died.returncode, died.stderr)
    assert len(executions(tmp_path)) == ran_before_crash
    store = SQLiteStore(f"sqlite:///{tmp_path}/tether.db")
    try:
        [effect] = store.list_effects()
        assert effect.status is EffectStatus.DISPATCHED  # durable before the tool was called
    finally:
        store.close()

    recovered = answer(child(tmp_path, "recover"))
    assert recovered["reconciled"] == [settled_as]
    assert recovered["status"] in ("committed", "reconciled_committed")
    assert recovered["result"] == {"closed": "T-1"}
    # Sent again only when it was known not to have run; replayed when it had.
    assert recovered["replayed"] is (settled_as == "committed")
    again = answer(child(tmp_path, "call"))
    assert again["replayed"] is True and again["result"] == {"closed": "T-1"}
    [(key, ticket)] = executions(tmp_path)  # exactly once
    assert ticket == "T-1" and key == effect.operation_key
