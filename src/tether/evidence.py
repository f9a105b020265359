"""Checking a store's state against its audit log (I10: ``verify`` cross-checks state).

A hash chain proves the log was not edited; it says nothing about the tables beside it. So
every write of an effect, an approval or a run remembers the digest of the row it wrote, and
the next audit entry of the same transaction carries those digests (``rows``). Verifying then
replays the log and asks of the tables: does every effect and approval row still have the
digest the log last recorded for it, does every row the log recorded still exist, and is every
row in the log at all? A row edited, deleted or inserted with plain SQL fails one of these; so
does an empty log beside existing state. Runs change without audit entries (leases, message
counters), so a run is only checked to exist, both ways.

A digest is SHA-256 over the JSON of the row's cells in column order: cheap (one encode and
one hash per write, on the gate's hot path twice per call) and the same whether computed from
the record being written or from the row read back. Timestamps are made floats before they
are digested, because a REAL column hands back ``2.0`` for the ``2`` it was given; every other
cell reads back as it was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tether.approvals import Approval
from tether.audit import AuditEntry, AuditHead, AuditReport, verify_chains
from tether.digest import canonical_json, sha256_hex
from tether.keys import AuditKeys
from tether.ledger import Effect
from tether.records import shape

EFFECT = "effect:"
APPROVAL = "approval:"
RUN = "run:"

# The columns a digest covers, in the order the SQL backends select them: an effect's are its
# fields (``Effect`` declares them in column order); an approval's row is a few indexed
# fields beside the whole record as JSON.
EFFECT_COLUMNS = Effect.columns()
APPROVAL_INDEX = ("approval_id", "run_id", "call_id", "status", "created_at", "expires_at")
APPROVAL_COLUMNS = ", ".join((*APPROVAL_INDEX, "record_json"))


def row_digest(cells: Sequence[Any]) -> str:
    """The digest of a row as read back (``EFFECT_COLUMNS`` or ``APPROVAL_COLUMNS``)."""
    return sha256_hex(canonical_json(cells))


def effect_cells(e: Effect) -> tuple[Any, ...]:
    """An effect as its row (``EFFECT_COLUMNS``), as it is written and read back (the
    timestamps as floats, whatever number they were given as)."""
    return e.row()


def effect_digest(e: Effect) -> str:
    """The digest of ``e``'s row, as ``row_digest`` gives it for the row read back."""
    return row_digest(e.row())


def approval_cells(a: Approval) -> tuple[Any, ...]:
    """An approval as its row (``APPROVAL_COLUMNS``), as it is written and read back."""
    return (*shape(Approval).cells(a, APPROVAL_INDEX), canonical_json(a.to_dict()))


def approval_digest(a: Approval) -> str:
    """The digest of ``a``'s row: its indexed columns and its record."""
    return row_digest(approval_cells(a))


# -- the cross-check --------------------------------------------------------------------------
@dataclass(frozen=True)
class Evidence:
    """The log, its heads and the state's row digests, read at one moment (a writer
    committing between reading the log and reading the tables would look like tampering)."""

    entries: list[AuditEntry]
    heads: dict[str, AuditHead]
    state: dict[str, str]


def verify_evidence(evidence: Evidence, keys: AuditKeys) -> AuditReport:
    """Verify the chains and their MACs, then check the state against the log."""
    public_only = not keys.key_ids and bool(keys.public_key)
    if evidence.entries and not keys.key_ids and not public_only:
        raise keys.missing("key to check the entries' MACs with")
    report = verify_chains(evidence.entries, evidence.heads, None if public_only else keys)
    report = replace(report, macs_checked=not public_only)
    if not report.intact:
        return report
    return check_state(report, evidence.entries, evidence.state)


def recorded_rows(entries: Iterable[AuditEntry]) -> dict[str, tuple[str, str]]:
    """Each row the log recorded: the digest it last recorded and the entry that did."""
    last: dict[str, tuple[str, str]] = {}
    for entry in entries:
        if '"rows":' not in entry.body:  # most entries record no row; skip the parse
            continue
        rows = entry.record.get("rows")
        if isinstance(rows, dict):
            for key, value in rows.items():
                last[str(key)] = (str(value), entry.where)
    return last


def check_state(
    report: AuditReport, entries: Sequence[AuditEntry], state: Mapping[str, str]
) -> AuditReport:
    """``report`` (of an intact chain) extended by comparing ``state`` with the log."""
    problems = state_problems(entries, state)
    if problems:
        more = f" (and {len(problems) - 1} more rows disagree)" if len(problems) > 1 else ""
        return replace(report, intact=False, problem=problems[0] + more, rows=len(state))
    return replace(report, rows=len(state))


def state_problems(entries: Sequence[AuditEntry], state: Mapping[str, str]) -> list[str]:
    if not entries and state:
        return [f"the audit log is empty, but the store holds {_census(state)}: the log was wiped"]
    recorded = recorded_rows(entries)
    problems = []
    for key in sorted(state.keys() | recorded.keys()):
        if key not in recorded:
            problems.append(
                f"{describe(key)} is in the store but no audit entry records it "
                "(inserted outside tether, or the entries recording it were deleted)"
            )
        elif key not in state:
            problems.append(
                f"{describe(key)}, recorded by entry {recorded[key][1]}, is gone from the store "
                "(deleted outside tether)"
            )
        elif not key.startswith(RUN) and state[key] != recorded[key][0]:
            problems.append(
                f"{describe(key)} differs from what entry {recorded[key][1]} recorded "
                "(changed outside tether)"
            )
    return problems


def describe(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"{kind} {name}"


def _census(state: Mapping[str, str]) -> str:
    counts = dict.fromkeys(("run", "effect", "approval"), 0)
    for key in state:
        kind = key.partition(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in counts.items())
