"""Bad input gives one line saying what is wrong and what to do, never a traceback: a store
file that is not what it should be (garbage, a truncated copy), from every command that reads
it; command-line arguments that are not UTF-8 text, from every command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_run_cli import Cli, assert_one_line_error
from tether import Gate, Policy, Principal, Registry, SQLiteStore

COMMANDS = [("runs", "list"), ("approvals", "list"), ("audit", "verify"), ("effects", "list")]


def truncated(path: Path) -> None:
    """A real store with a few hundred runs, cut to half its size (a copy that stopped)."""
    store = SQLiteStore(f"sqlite:///{path}")
    gate = Gate(Registry(), Policy(version="p1"), store)
    for i in range(300):
        gate.start_run(Principal(subject="u", tenant="t"), run_id=f"run-{i:04d}-" + "x" * 200)
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.truncate(path, path.stat().st_size // 2)


def garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(200))


@pytest.mark.parametrize("damage", [truncated, garbage], ids=["truncated", "garbage"])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_damaged_store_gives_one_line_naming_the_file(
    tmp_path: Path, damage: object, command: tuple[str, str]
) -> None:
    db = tmp_path / "t.db"
    assert callable(damage)
    damage(db)
    out = Cli(tmp_path)(*command)
    assert_one_line_error(out, str(db), "restore it from a backup")


NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # what Python makes of bytes that are not UTF-8


@pytest.mark.parametrize(
    "command",
    [
        ("approvals", "show", NOT_UTF8),
        ("runs", "show", NOT_UTF8),
        ("approvals", "list", "--run", NOT_UTF8),
        ("audit", "log", "--run", NOT_UTF8),
        ("runs", "cancel", NOT_UTF8),
    ],
    ids=["approvals show", "runs show", "approvals list", "audit log", "runs cancel"],
)
def test_arguments_that_are_not_utf8_are_refused_in_one_line(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    cli = Cli(tmp_path)
    cli("migrate")
    assert_one_line_error(cli(*command), "is not UTF-8 text")
