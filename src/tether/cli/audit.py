"""``tether audit``: verify the log (against a signed checkpoint too), sign checkpoints, print
heads and entries, and manage the audit key.

Every command here only reads the store (``rotate-key`` aside), so it opens it read-only: it
works on a read-only copy, never migrates, and never creates a store where a typo pointed.
Exit codes: 0 intact, 1 not intact, 2 could not check (no store, no key, unreadable file).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from tether.cli.common import (
    DB_OPTION,
    EXIT_NOT_INTACT,
    EXIT_OK,
    JSON_OPTION,
    StoreUnavailable,
    open_cli_store,
)
from tether.errors import TetherError
from tether.evidence.audit import AuditEntry, AuditReport
from tether.evidence.checkpoint import create_checkpoint, verify_checkpoint
from tether.evidence.keys import AuditKeys


@click.group()
def audit() -> None:
    """Inspect the hash-chained audit log."""


@audit.command("verify")
@DB_OPTION
@JSON_OPTION
@click.option(
    "--checkpoint",
    "checkpoint_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also prove the log extends this signed checkpoint (`tether audit checkpoint`).",
)
@click.option(
    "--public-key",
    "public_key",
    help="Check the checkpoint's signature with only this public key (base64, or a file "
    "holding it; `tether audit export-key --public`). Entry MACs are then not checked.",
)
def audit_verify(
    db: str, as_json: bool, checkpoint_file: Path | None, public_key: str | None
) -> None:
    """Verify the chains, their MACs and the state against the log; exit 1 and say what is
    wrong if anything does not verify, 2 if it could not be checked."""
    text = None if checkpoint_file is None else _read(checkpoint_file, "checkpoint")
    keys = None if public_key is None else _public_keys(public_key)
    if keys is not None and text is None:
        raise StoreUnavailable("--public-key checks a checkpoint's signature; give --checkpoint")
    with open_cli_store(db, create=False, read_only=True, keys=keys) as store:
        try:
            report = store.verify_audit() if text is None else verify_checkpoint(store, text)
        except TetherError as e:
            raise StoreUnavailable(str(e)) from e
    _print_report(report, as_json)
    sys.exit(EXIT_OK if report.intact else EXIT_NOT_INTACT)


@audit.command("checkpoint")
@DB_OPTION
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the checkpoint to this file instead of printing it.",
)
def audit_checkpoint(db: str, out: Path | None) -> None:
    """Print a signed checkpoint of the log (its size and heads). Keep it where the
    database's writers cannot reach; `tether audit verify --checkpoint FILE` then catches a
    truncated, rewritten or wiped log. Refuses (exit 1) to sign a log that does not verify."""
    with open_cli_store(db, create=False, read_only=True) as store:
        try:
            report, signed = create_checkpoint(store)
        except TetherError as e:
            raise StoreUnavailable(str(e)) from e
    if signed is None:
        click.echo(f"not signing a checkpoint: {report.summary()}", err=True)
        sys.exit(EXIT_NOT_INTACT)
    if out is None:
        click.echo(signed, nl=False)
        return
    try:
        out.write_text(signed)
    except OSError as e:
        raise StoreUnavailable(f"cannot write {out}: {e.strerror}") from e
    click.echo(f"checkpoint of {report.entries} entries written to {out}", err=True)


@audit.command("head")
@DB_OPTION
@JSON_OPTION
def audit_head(db: str, as_json: bool) -> None:
    """Print each chain's head (`tether audit checkpoint` prints the same, signed)."""
    with open_cli_store(db, create=False, read_only=True) as store:
        heads = store.audit_heads()
    if as_json:
        shown = {c: {"seq": h.seq, "hash": h.hash} for c, h in sorted(heads.items())}
        click.echo(json.dumps(shown, separators=(",", ":")))
        return
    if not heads:
        click.echo("the audit log is empty", err=True)
    for chain, head in sorted(heads.items()):
        click.echo(f"{chain}  seq {head.seq}  {head.hash}")


@audit.command("log")
@DB_OPTION
@JSON_OPTION
@click.option("--run", "run_id", help="Only this run's entries.")
@click.option("--kind", "kind", help="Only entries of this kind (effect_dispatched, …).")
@click.option(
    "--limit",
    "limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Show at most this many, the newest.",
)
def audit_log(db: str, as_json: bool, run_id: str | None, kind: str | None, limit: int) -> None:
    """Print the newest audit entries, oldest first: sequence number, time, run, kind, actor
    and a short summary; with --json one JSON list of whole entries. This reads the log as it
    is; `tether audit verify` says whether it can be trusted."""
    with open_cli_store(db, create=False, read_only=True) as store:
        entries = store.audit_tail(run_id=run_id, kind=kind, limit=limit)
    shown = [_shown(e) for e in entries]
    if as_json:
        click.echo(json.dumps(shown, separators=(",", ":"), ensure_ascii=False))
        return
    if not shown:
        click.echo("no audit entries" + (" match" if run_id or kind else ""), err=True)
        return
    rows = [
        (
            e["where"],
            _when(e["at"]),
            e["run_id"] or "-",
            e["kind"],
            e["actor"] or "-",
            _summary(e["data"]),
        )
        for e in shown
    ]
    header = ("SEQ", "TIME (UTC)", "RUN", "KIND", "ACTOR", "SUMMARY")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    for row in [header, *rows]:
        cells = [str(c).ljust(w) for c, w in zip(row[:5], widths, strict=True)]
        click.echo("  ".join([*cells, str(row[5])]).rstrip())


def _shown(entry: AuditEntry) -> dict[str, Any]:
    """An entry as `audit log --json` prints it. A body that is not a JSON object (an edited
    entry) is shown as its text, so that the log can still be read."""
    try:
        record = entry.record
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    return {
        "seq": entry.seq,
        "chain": entry.chain,
        "where": entry.where,
        "at": record.get("at"),
        "run_id": entry.run_id,
        "kind": entry.kind,
        "actor": record.get("actor"),
        "data": record.get("data", {"unreadable_body": entry.body}),
    }


def _when(at: Any) -> str:
    if not isinstance(at, int | float):
        return "?"
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


SUMMARY_KEYS = ("tool", "call_id", "effect_status", "decision", "status", "approval_id", "why")
SUMMARY_WIDTH = 60


def _summary(data: Any) -> str:
    """The few fields that say what happened, else the first few; cut to one short line."""
    if not isinstance(data, dict) or not data:
        return ""
    keys = [k for k in SUMMARY_KEYS if data.get(k) not in (None, "", [], {})]
    keys = keys or sorted(data)[:3]
    text = " ".join(f"{k}={_short(data[k])}" for k in keys)
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return " ".join(text.split())  # no newline may break the table


@audit.command("rotate-key")
@DB_OPTION
def audit_rotate_key(db: str) -> None:
    """Make a new current audit key; older keys stay in the keyring to verify older entries.
    A keyring from $TETHER_AUDIT_KEY cannot be rewritten: the new one is printed instead, to
    set on every worker."""
    with open_cli_store(db, create=False) as store:
        old = store.keys.key_id
        try:
            new = store.rotate_audit_key()
        except TetherError as e:
            raise StoreUnavailable(str(e)) from e
        saved_in = store.key_file
    if saved_in is None:
        click.echo(new.export())
        click.echo(
            f"audit key rotated: {old} -> {new.key_id}; set TETHER_AUDIT_KEY to the line "
            "above on every worker (it is secret)",
            err=True,
        )
        return
    click.echo(f"audit key rotated: {old} -> {new.key_id} in {saved_in} ({old} kept to verify)")


@audit.command("export-key")
@DB_OPTION
@click.option("--public", "public", is_flag=True, help="Only the public key, for --public-key.")
def audit_export_key(db: str, public: bool) -> None:
    """Print the store's keyring as one secret line for TETHER_AUDIT_KEY (workers on other
    machines need it), or with --public only the key that checks checkpoint signatures."""
    with open_cli_store(db, create=False, read_only=True) as store:
        keys = store.keys
    if public:
        click.echo(base64.b64encode(keys.public_key).decode())
        return
    try:
        click.echo(keys.export())
    except TetherError as e:
        raise StoreUnavailable(str(e)) from e


def _print_report(report: AuditReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(report), separators=(",", ":")))
    elif report.intact:
        click.echo(report.summary())
    else:
        click.echo(report.summary(), err=True)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise StoreUnavailable(f"cannot read the {what} {path}: {e.strerror}") from e
    except UnicodeDecodeError:
        raise StoreUnavailable(f"the {what} {path} is not text") from None


def _public_keys(value: str) -> AuditKeys:
    path = Path(value)
    text = _read(path, "public key") if path.is_file() else value
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        return AuditKeys.public_only(raw, source="--public-key")
    except (binascii.Error, TetherError) as e:
        raise StoreUnavailable(f"--public-key is not a base64 Ed25519 public key: {e}") from e
