"""docs/reference.md lists every command, and every option of every command, that the
``tether`` command has: a command added without its reference row fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from tether.cli import main

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
# Options every command (or every approver's command) shares, documented once above the table.
SHARED = {"--db", "--json", "--help", "--token-file", "--approver"}


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        path = f"{prefix} {name}".strip()
        if isinstance(command, click.Group):
            yield from commands(command, path)
        elif not command.hidden:
            yield path, command


COMMANDS = sorted(commands(main), key=lambda pair: pair[0])


def rows() -> dict[str, str]:
    """The Commands table: each row's first cell (the command as written) -> the row."""
    text = REFERENCE.read_text().split("## Commands", 1)[1].split("\n### ", 1)[0]
    found: dict[str, str] = {}
    for line in text.splitlines():
        cell = re.match(r"\| `tether ([^`]+)`", line)
        if cell:
            found[cell.group(1)] = line
    return found


def row_for(path: str, table: dict[str, str]) -> str | None:
    """The row documenting ``path``: one whose command starts with it, or a row like
    ``approvers list` / `revoke`` that names it after a slash."""
    group, _, leaf = path.rpartition(" ")
    for written, line in table.items():
        if written == path or written.startswith(path + " "):
            return line
        if group and written.startswith(group + " ") and f"/ `{leaf}" in line:
            return line
    return None


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[p for p, _ in COMMANDS])
def test_every_command_and_option_has_its_reference_row(path: str, command: click.Command) -> None:
    line = row_for(path, rows())
    assert line is not None, f"docs/reference.md has no row for `tether {path}`"
    missing = [
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts[:1]
        if name.startswith("--") and name not in SHARED and name not in line
    ]
    assert not missing, f"`tether {path}`'s row does not mention {missing}"
