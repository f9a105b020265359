"""Checking a store's state against its audit log (I10: ``verify`` cross-checks state).

A hash chain proves the log was not edited; it says nothing about the tables beside it. So
every write of an effect, an approval or a run remembers the digest of the row it wrote, and
the next audit entry of the same transaction carries those digests (``rows``). Verifying then
replays the log and asks of the tables: does every effect and approval row still have the
digest the log last recorded for it, does every row the log recorded still exist, and is every
row in the log at all? A row edited, deleted or inserted with plain SQL fails one of these; so
does an empty log beside existing state. Credential rows are checked the same way. Runs change
without audit entries (leases, message counters), so a run is checked to exist, both ways, and
its row is checked on its own: its seals (``tether.core.runseal``), its cancellation, and its
effect count against the ledger's rows.

A digest is SHA-256 over the JSON of the row's cells in column order: cheap (one encode and
one hash per write, on the gate's hot path twice per call) and the same whether computed from
the record being written or from the row read back. Timestamps are made floats before they
are digested, because a REAL column hands back ``2.0`` for the ``2`` it was given; every other
cell reads back as it was written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tether.core.approvals import Approval
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import Effect
from tether.core.records import shape
from tether.core.runseal import checkpoint_problem
from tether.evidence.audit import (
    MAIN,
    AuditHead,
    AuditReport,
    AuditRow,
    LogReplay,
)
from tether.evidence.keys import AuditKeys

EFFECT = "effect:"
APPROVAL = "approval:"
RUN = "run:"
CREDENTIAL = "credential:"

# The columns a digest covers, in the order the SQL backends select them: an effect's are its
# fields (``Effect`` declares them in column order); an approval's row is a few indexed
# fields beside the whole record as JSON.
EFFECT_COLUMNS = Effect.columns()
APPROVAL_INDEX = ("approval_id", "run_id", "call_id", "status", "created_at", "expires_at")
APPROVAL_COLUMNS = ", ".join((*APPROVAL_INDEX, "record_json"))


def run_value(
    keys: AuditKeys | None,
    run_id: str,
    columns: tuple[str, str, str],
    checkpoint_json: str,
    effect_rows: int,
) -> str:
    """What the state says of a run for the cross-check: "" if its row is sound, else "!"
    and what is wrong (``tether.core.runseal.checkpoint_problem``; seals are checked with
    ``keys`` unless None). ``columns`` are the row's status, principal_id and tenant_id."""
    problem = checkpoint_problem(
        keys if keys is not None else _NO_SEALS, run_id, columns, checkpoint_json, effect_rows
    )
    return "" if problem is None else "!" + problem


class _AnySeal:
    """Stands in for keys a verifier does not hold (a public key only): every seal passes,
    and the report says MACs were not checked."""

    def seal(self, purpose: str, value: Any) -> str:
        raise AssertionError("a verifier makes no seals")

    def verify_seal(self, purpose: str, value: Any, seal: str | None) -> bool:
        return True


_NO_SEALS = _AnySeal()


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
    committing between reading the log and reading the tables would look like tampering).

    ``log`` and ``state`` are streams: a store hands them out inside one read snapshot
    (``Store.evidence()`` is a context manager), and they are read once, the log first."""

    log: Iterable[AuditRow]
    heads: dict[str, AuditHead]
    state: Callable[[], Iterable[tuple[str, str]]]  # (row key, digest), read after the log


def replay_evidence(
    evidence: Evidence, keys: AuditKeys, *, watch: Mapping[str, int] | None = None
) -> tuple[AuditReport, LogReplay]:
    """Verify the chains and their MACs in one pass over the log, then check the state
    against it; also the replay, for what a checkpoint asks of it (``watch``)."""
    public_only = not keys.key_ids and bool(keys.public_key)
    replay = LogReplay(None if public_only else keys, watch=watch)
    stream = iter(evidence.log)
    first = next(stream, None)
    if first is not None:
        if not keys.key_ids and not public_only:
            raise keys.missing("key to check the entries' MACs with")
        replay.feed(itertools.chain((first,), stream))
    report = replace(replay.report(evidence.heads), macs_checked=not public_only)
    if not report.intact:
        return report, replay
    return check_state(report, replay, evidence.state()), replay


def verify_evidence(evidence: Evidence, keys: AuditKeys) -> AuditReport:
    """Verify the chains and their MACs, then check the state against the log."""
    return replay_evidence(evidence, keys)[0]


def check_state(
    report: AuditReport, replay: LogReplay, state: Iterable[tuple[str, str]]
) -> AuditReport:
    """``report`` (of an intact chain) extended by comparing the ``state`` rows, as they
    stream past, with what the log last recorded for each. Only the first problem in key
    order is kept, and a count of the others: a badly damaged store costs no more memory."""
    recorded = replay.recorded
    counts = dict.fromkeys(("run", "effect", "approval", "credential"), 0)
    first: tuple[str, str] | None = None
    problems = 0
    rows = 0

    def problem(key: str, why: str) -> None:
        nonlocal first, problems
        problems += 1
        if first is None or key < first[0]:
            first = (key, why)

    for key, value in state:
        rows += 1
        kind = key.partition(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
        last = recorded.pop(key, None)
        if last is None:
            problem(
                key,
                f"{describe(key)} is in the store but no audit entry records it "
                "(inserted outside tether, or the entries recording it were deleted)",
            )
        elif key.startswith(RUN):
            if value:
                problem(key, f"{value[1:]} (changed outside tether)")
        elif value != last[0]:
            problem(
                key,
                f"{describe(key)} differs from what entry {_where(last)} recorded "
                "(changed outside tether)",
            )
    if not replay.entries and rows:
        census = ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in counts.items())
        why = f"the audit log is empty, but the store holds {census}: the log was wiped"
        return replace(report, intact=False, problem=why, rows=rows)
    for key, last in recorded.items():
        problem(
            key,
            f"{describe(key)}, recorded by entry {_where(last)}, is gone from the store "
            "(deleted outside tether)",
        )
    if first is not None:
        more = f" (and {problems - 1} more rows disagree)" if problems > 1 else ""
        return replace(report, intact=False, problem=first[1] + more, rows=rows)
    return replace(report, rows=rows)


def _where(last: tuple[str, str, int]) -> str:
    _, chain, seq = last
    return str(seq) if chain == MAIN else f"{chain}#{seq}"


def describe(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"{kind} {name}"
