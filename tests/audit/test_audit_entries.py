"""Audit entries as ``make_entry`` writes them and ``LogReplay`` reads them back.

The body is written key by key (``entry_body``) and verifying reads the columns' values off
the text when the MAC verified (``_fast_fields``): both rely on the body being exactly the
canonical JSON of the record, which these tests check against ``canonical_json`` itself."""

from __future__ import annotations

import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.digest import canonical_json
from tether.evidence.audit import MAIN, AuditHead, LogReplay, _fast_fields, entry_row, make_entry
from tether.evidence.keys import AuditKeys
from tether.store import open_store

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | text
    | st.floats(allow_nan=False, allow_infinity=False)
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3)
)
specs = st.fixed_dictionaries(
    {
        "chain": st.sampled_from([MAIN, "run-1", "_chains", 'odd "chain" \\ ,"kind":']),
        "at": st.floats(0, 4e9) | st.integers(0, 4_000_000_000),
        "kind": text,
        "run_id": st.none() | text,
        "actor": st.none() | text,
        "data": st.dictionaries(text, values, max_size=4),
        "redactions": st.lists(text, max_size=3),
        "rows": st.none() | st.dictionaries(text.map(lambda t: "effect:" + t), text, max_size=3),
        "seq": st.integers(0, 10**9),
    }
)
KEYS = AuditKeys.ephemeral()


@settings(max_examples=300, deadline=None)
@given(spec=specs)
def test_the_body_is_the_canonical_json_of_the_record(spec: dict[str, Any]) -> None:
    head = None if spec["seq"] == 0 else AuditHead(spec["seq"], "f" * 64)
    entry = make_entry(
        head,
        chain=spec["chain"],
        at=spec["at"],
        kind=spec["kind"],
        run_id=spec["run_id"],
        actor=spec["actor"],
        data=spec["data"],
        redactions=spec["redactions"],
        rows=spec["rows"],
        keys=KEYS,
    )
    record: dict[str, Any] = {} if spec["chain"] == MAIN else {"chain": spec["chain"]}
    if spec["rows"]:
        record["rows"] = spec["rows"]
    record |= {
        "seq": entry.seq,
        "at": round(spec["at"], 6),
        "kind": spec["kind"],
        "run_id": spec["run_id"],
        "actor": spec["actor"],
        "data": spec["data"],
        "redactions": sorted(set(spec["redactions"])),
    }
    assert entry.body == canonical_json(record)
    # The text check agrees with the parsed body, and finds the same rows.
    found = _fast_fields(entry.body, entry.chain, entry.seq, entry.kind, entry.run_id)
    assert found is not False
    assert (found is None) == (not spec["rows"])
    replay = LogReplay(KEYS)
    replay.feed([entry_row(entry)] if head is None else [])
    if head is None:
        assert replay.report({entry.chain: AuditHead(1, entry.hash)}).intact or entry.chain != MAIN
    # Any other column value is refused by the text check or the parser.
    assert _fast_fields(entry.body, entry.chain, entry.seq + 1, entry.kind, entry.run_id) is False
    assert _fast_fields(entry.body, entry.chain, entry.seq, entry.kind + "x", entry.run_id) is False
    other = "x" if entry.run_id is None else None
    assert _fast_fields(entry.body, entry.chain, entry.seq, entry.kind, other) is False
    other_chain = "other" if entry.chain == MAIN else MAIN
    assert _fast_fields(entry.body, other_chain, entry.seq, entry.kind, entry.run_id) is False


def _store_with(path: Path, entries: int) -> str:
    url = f"sqlite:///{path}"
    with open_store(url) as store, store.transaction() as tx:
        for i in range(entries):
            tx.append_audit("note", at=1000.0 + i, run_id="run-1", data={"i": i, "pad": "p" * 200})
    return url


def test_an_edited_kind_or_run_column_is_caught_on_the_fast_path(tmp_path: Path) -> None:
    url = _store_with(tmp_path / "t.db", 5)
    with open_store(url) as store:
        assert store.verify_audit().intact
    for column, value in (("kind", "forged"), ("run_id", "run-2"), ("run_id", None), ("kind", 7)):
        conn = sqlite3.connect(tmp_path / "t.db")
        with conn:
            (old,) = conn.execute(f"SELECT {column} FROM audit_log WHERE seq = 3").fetchone()
            conn.execute(f"UPDATE audit_log SET {column} = ? WHERE seq = 3", (value,))
        with open_store(url, read_only=True) as store:
            report = store.verify_audit()
        assert not report.intact and report.first_bad == 3
        assert "indexed columns (kind, run_id) differ" in (report.problem or ""), report.problem
        with conn:
            conn.execute(f"UPDATE audit_log SET {column} = ? WHERE seq = 3", (old,))
        conn.close()


def test_verifying_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """The same state, ten times the entries: the peak stays put (it held every entry)."""
    peaks = []
    for n in (2_000, 20_000):
        url = _store_with(tmp_path / f"{n}.db", n)
        with open_store(url, read_only=True) as store:
            tracemalloc.start()
            report = store.verify_audit()
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        assert report.intact and report.entries == n
    assert peaks[1] < peaks[0] * 2, peaks  # ten times the entries; before, ~10x the memory
