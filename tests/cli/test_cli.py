"""The command line, run as a user runs it: a real subprocess on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SEED004_STEPS = ["tool_call", "approval_required", "approval_granted", "tool_call", "final"]


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    d = tmp_path_factory.mktemp("demo")
    out = tether("demo", "--json", "--db", f"sqlite:///{d}/demo.db", cwd=d)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.splitlines()  # with --json, the one JSON line and nothing else
    assert "3. An agent under the gate." in out.stderr  # the story goes to the terminal still
    return d / "demo.db", json.loads(line)


def test_demo_prints_the_seeds_numbers(demo_db: tuple[Path, dict[str, object]]) -> None:
    _, summary = demo_db
    assert summary["seed000"] == {
        **summary["seed000"],  # type: ignore[dict-item]
        "external_calls": 1,
        "status": "committed",
        "replay_identical": True,
    }
    seed003 = summary["seed003"]
    assert isinstance(seed003, dict)
    assert (seed003["spent"], seed003["remaining"]) == (12, 38)
    assert seed003["budget5_error"].endswith("need 3, remaining 2")
    seed004 = summary["seed004"]
    assert isinstance(seed004, dict)
    assert seed004["steps"] == SEED004_STEPS
    assert seed004["model_calls"] == 3
    assert seed004["denied_feedback"] == {"error": "approval_denied", "tool": "delete_run"}
    audit = summary["audit"]
    assert isinstance(audit, dict) and audit["intact"] is True and audit["entries"] > 20


def test_demo_defaults_to_a_file_in_the_working_directory(tmp_path: Path) -> None:
    out = tether("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tether.db").exists()
    again = tether("demo", "--json", cwd=tmp_path)  # a second demo on the same file works too
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["audit"]["intact"] is True
    assert "audit intact" in out.stdout  # without --json: the story, for people
    # ...in whole sentences that say what each scenario shows, not the seeds' file names.
    assert "seed0" not in out.stdout.lower()
    assert "1. Exactly once." in out.stdout and "3. An agent under the gate." in out.stdout
    listed = tether("runs", "list", "--json", cwd=tmp_path)
    statuses = {r["status"] for r in json.loads(listed.stdout.splitlines()[-1])}
    assert statuses == {"completed"}  # nothing left reading "running" for ever


def test_the_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    import tether

    assert tether.__version__ == version("tether-gate") != ""


def test_audit_verify_passes_untouched(demo_db: tuple[Path, dict[str, object]]) -> None:
    db, summary = demo_db
    out = tether("audit", "verify", "--db", f"sqlite:///{db}", cwd=db.parent)
    assert out.returncode == 0
    assert f"{summary['audit']['entries']} entries verified" in out.stdout  # type: ignore[index]


def _tampered(db: Path, tmp_path: Path, sql: str, *params: object) -> Path:
    copy = tmp_path / "tampered.db"
    copy.write_bytes(db.read_bytes())
    # The audit key lives beside the database, not in it: a copy to verify needs it too.
    key = copy.with_name(copy.name + ".key")
    key.write_bytes(Path(f"{db}.key").read_bytes())
    key.chmod(0o600)
    c = sqlite3.connect(copy)
    c.execute(sql, params)
    c.commit()
    c.close()
    return copy


def test_audit_verify_names_an_edited_entry(
    demo_db: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    db, _ = demo_db
    c = sqlite3.connect(db)
    body = c.execute("SELECT body FROM audit_log WHERE seq = 7").fetchone()[0]
    c.close()
    i = len(body) // 2
    edited = body[:i] + ("X" if body[i] != "X" else "Y") + body[i + 1 :]
    copy = _tampered(db, tmp_path, "UPDATE audit_log SET body = ? WHERE seq = 7", edited)
    out = tether("audit", "verify", "--db", f"sqlite:///{copy}", cwd=tmp_path)
    assert out.returncode == 1
    assert "entry 7" in out.stderr


def test_audit_verify_detects_a_deleted_last_row(
    demo_db: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    db, summary = demo_db
    n = summary["audit"]["entries"]  # type: ignore[index]
    copy = _tampered(
        db, tmp_path, "DELETE FROM audit_log WHERE seq = (SELECT max(seq) FROM audit_log)"
    )
    out = tether("audit", "verify", "--db", f"sqlite:///{copy}", cwd=tmp_path)
    assert out.returncode == 1
    assert f"entry {n}" in out.stderr


def test_audit_verify_json(demo_db: tuple[Path, dict[str, object]]) -> None:
    db, _ = demo_db
    out = tether("audit", "verify", "--json", "--db", f"sqlite:///{db}", cwd=db.parent)
    assert json.loads(out.stdout)["intact"] is True


def test_effects_list(demo_db: tuple[Path, dict[str, object]]) -> None:
    db, summary = demo_db
    out = tether("effects", "list", "--json", "--db", f"sqlite:///{db}", cwd=db.parent)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    keys = {r["operation_key"]: r for r in rows}
    seed000_key = summary["seed000"]["operation_key"]  # type: ignore[index]
    assert keys[seed000_key]["status"] == "committed"
    assert keys[seed000_key]["tool_name"] == "close_ticket"
    text = tether("effects", "list", "--db", f"sqlite:///{db}", cwd=db.parent)
    assert seed000_key in text.stdout


def test_bad_url_is_one_clear_sentence(tmp_path: Path) -> None:
    out = tether("audit", "verify", "--db", "mysql://x", cwd=tmp_path)
    assert out.returncode == 2  # could not do what was asked
    assert "no store for URL" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_bad_url_exits_2_from_every_command(tmp_path: Path) -> None:
    for command in (("runs", "list"), ("approvers", "add", "x", "--tenant", "t"), ("migrate",)):
        out = tether(*command, "--db", "mysql://x", cwd=tmp_path)
        assert out.returncode == 2, (command, out.stderr)
        assert "no store for URL" in out.stderr and "Traceback" not in out.stderr


def test_migrate_reports_the_schema_version(tmp_path: Path) -> None:
    out = tether("migrate", "--db", f"sqlite:///{tmp_path}/m.db", cwd=tmp_path)
    from tether.store.sqlite import MIGRATIONS

    assert out.returncode == 0
    assert f"schema version {len(MIGRATIONS)}" in out.stdout
