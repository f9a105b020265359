"""How commands print: one JSON document for scripts (``--json``), tables and sentences for
people. The two never mix: human output holds no JSON line, and ``--json`` prints exactly
one line on stdout (notes and warnings go to stderr).

``rich`` draws the tables; it is imported only when a table is printed, so that commands
which print none (and ``tether --help``) do not pay for it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click


def echo_json(data: Any) -> None:
    """``data`` as one line of JSON on stdout: the whole of a ``--json`` command's output."""
    click.echo(json.dumps(data, ensure_ascii=False, default=str))


def note(text: str) -> None:
    """A line for the person at the terminal that is not the command's answer (stderr)."""
    click.echo(text, err=True)


@dataclass(frozen=True)
class Col:
    """A table column. ``whole``: never wrapped or cut (ids people copy into the next
    command); other columns wrap when the terminal is narrow."""

    header: str
    whole: bool = False


def table(columns: Sequence[Col], rows: Iterable[Sequence[str]], *, empty: str) -> None:
    """Print ``rows`` under a header line, or ``empty`` when there are none."""
    cells = [list(r) for r in rows]
    if not cells:
        click.echo(empty)
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i, col in enumerate(columns):
        widest = max((len(r[i]) for r in cells), default=0)
        if col.whole:
            grid.add_column(col.header, no_wrap=True, min_width=max(widest, len(col.header)))
        else:
            grid.add_column(col.header, overflow="fold")
    for r in cells:
        grid.add_row(*r)
    out = sys.stdout
    # Piped into grep or a file, a line per row beats fitting an imaginary 80 columns.
    width = None if out.isatty() else 100_000
    console = Console(file=out, width=width, highlight=False, soft_wrap=False)
    with console.capture() as captured:
        console.print(grid)
    for line in captured.get().splitlines():
        click.echo(line.rstrip())  # rich pads every cell, the last one too


def when(at: float | None) -> str:
    """A moment in local time, to the second."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def span(seconds: float) -> str:
    """A duration the way people say it: 42s, 3m, 5h, 2d."""
    s = int(abs(seconds))
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "m")):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def age(at: float | None, now: float | None = None) -> str:
    """How long ago ``at`` was ("3m ago"), or how far ahead it is ("in 2h")."""
    if at is None:
        return "-"
    delta = (time.time() if now is None else now) - at
    if abs(delta) < 1:
        return "just now"
    return f"{span(delta)} ago" if delta > 0 else f"in {span(delta)}"


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """Call arguments as ``key=value`` pairs (strings unquoted), for one table cell."""
    return ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        for k, v in arguments.items()
    )
