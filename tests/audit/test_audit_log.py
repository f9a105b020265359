"""`tether audit log`: the real CLI, in a subprocess, on a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.audit.test_evidence import populate
from tether.store import open_store


def _tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_DB"}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/t.db"
    with open_store(url) as store:
        populate(store)
    return url


def _kinds(url: str) -> list[tuple[int, str, str | None]]:
    with open_store(url, create=False, read_only=True) as store:
        return [(e.seq, e.kind, e.run_id) for e in store.audit_entries()]


def test_json_is_one_document_of_whole_entries_newest_last(db: str, tmp_path: Path) -> None:
    out = _tether("audit", "log", "--db", db, "--json", "--limit", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1  # one line
    entries = json.loads(out.stdout)
    expected = _kinds(db)[-3:]
    assert [(e["seq"], e["kind"], e["run_id"]) for e in entries] == expected
    for e in entries:
        assert {"seq", "chain", "at", "run_id", "kind", "actor", "data"} <= set(e)
        assert e["chain"] == "main" and isinstance(e["at"], float) and isinstance(e["data"], dict)


def test_filters_by_run_and_kind(db: str, tmp_path: Path) -> None:
    all_entries = _kinds(db)
    run = next(r for _, k, r in all_entries if k == "tool_effect_resolved")
    out = _tether("audit", "log", "--db", db, "--json", "--run", str(run), cwd=tmp_path)
    listed = json.loads(out.stdout)
    assert listed and {e["run_id"] for e in listed} == {run}
    assert len(listed) == sum(1 for _, _, r in all_entries if r == run)
    kind = _tether(
        "audit", "log", "--db", db, "--json", "--kind", "approval_requested", cwd=tmp_path
    )
    assert [e["kind"] for e in json.loads(kind.stdout)] == ["approval_requested"] * 2
    none = _tether("audit", "log", "--db", db, "--kind", "no_such_kind", cwd=tmp_path)
    assert none.returncode == 0 and none.stdout == "" and "no audit entries match" in none.stderr
    empty_json = _tether("audit", "log", "--db", db, "--json", "--kind", "nope", cwd=tmp_path)
    assert json.loads(empty_json.stdout) == []


def test_the_table_shows_one_line_per_entry_with_a_summary(db: str, tmp_path: Path) -> None:
    out = _tether("audit", "log", "--db", db, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    header, *lines = out.stdout.splitlines()
    assert header.split() == ["SEQ", "TIME", "(UTC)", "RUN", "KIND", "ACTOR", "SUMMARY"]
    assert [int(line.split()[0]) for line in lines] == [s for s, _, _ in _kinds(db)]
    granted = next(line for line in lines if " approval_granted " in line)
    assert "reviewer-5" in granted and "decision=approve" in granted
    assert "1970-01-12 13:46:45" in granted  # the gate's clock, in UTC


def test_limit_must_be_positive_and_a_missing_store_is_an_error(db: str, tmp_path: Path) -> None:
    bad = _tether("audit", "log", "--db", db, "--limit", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "--limit" in bad.stderr
    missing = _tether("audit", "log", "--db", f"sqlite:///{tmp_path}/nope.db", cwd=tmp_path)
    assert missing.returncode != 0 and "no tether store" in missing.stderr
    assert not (tmp_path / "nope.db").exists()


def test_it_reads_a_read_only_store_in_a_read_only_folder(db: str, tmp_path: Path) -> None:
    path = Path(db[len("sqlite:///") :])
    for p in path.parent.glob(path.name + "*"):
        p.chmod(0o400 if p.name.endswith(".key") else 0o444)  # a key stays private
    path.parent.chmod(0o555)
    try:
        out = _tether("audit", "log", "--db", db, "--json", cwd=tmp_path.parent)
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)) == len(_kinds(db))
    finally:
        path.parent.chmod(0o755)


def test_audit_head_is_for_humans_unless_json_is_asked(db: str, tmp_path: Path) -> None:
    with open_store(db, create=False, read_only=True) as store:
        heads = store.audit_heads()
    human = _tether("audit", "head", "--db", db, cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    assert not any(line.lstrip().startswith("{") for line in human.stdout.splitlines())
    for chain, head in heads.items():
        assert f"{chain}  seq {head.seq}  {head.hash}" in human.stdout
    machine = _tether("audit", "head", "--db", db, "--json", cwd=tmp_path)
    assert machine.stdout.count("\n") == 1
    assert json.loads(machine.stdout) == {
        c: {"seq": h.seq, "hash": h.hash} for c, h in heads.items()
    }
