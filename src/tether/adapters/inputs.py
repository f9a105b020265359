"""The user's messages of an adapter's run, recorded as the run's trusted input once each.

A framework adapter sees the user's messages again and again: every model turn of a
conversation carries its history, a resumed run carries what the first process saw, two
processes may resume the same pause. ``UserInputs.note`` records (``Gate.record_input``) only
the texts the run does not hold yet, so the run's inputs list each message once however
often it is seen. Only the adapters decide what counts as the user's: the user role of the
framework's own input, never a tool's output or a system prompt.

The check and the write are two transactions (the write is the gate's, which also feeds its
in-memory provenance index), so two processes recording the same new text at the same
instant may both write it; a duplicate changes no verdict (trust is a set of values).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from tether.core.digest import sha256_hex
from tether.errors import StoreError
from tether.gate.pipeline import Gate

__all__ = ["UserInputs"]

MAX_RUNS = 256  # runs whose recorded texts a process remembers, to skip the store's read
_ATTEMPTS = 3


class UserInputs:
    """Records the user's messages of runs through ``gate``, each text once per run."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        # Per run, the digests of texts known to be recorded: a turn that brings nothing new
        # costs no read of the store. Bounded; a forgotten run is read from the store again.
        self._known: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()  # the SDKs call from worker threads too

    def note(self, run_id: str, texts: Iterable[str]) -> list[str]:
        """Record each text of ``texts`` the run's inputs do not hold yet; returns those."""
        with self._lock:
            return self._note(run_id, list(texts))

    def _note(self, run_id: str, texts: list[str]) -> list[str]:
        known = self._known.setdefault(run_id, set())
        self._known.move_to_end(run_id)
        while len(self._known) > MAX_RUNS:
            self._known.popitem(last=False)
        last: StoreError | None = None
        fresh = {sha256_hex(t): t for t in texts if isinstance(t, str) and t}
        fresh = {d: t for d, t in fresh.items() if d not in known}
        if not fresh:
            return []
        added: list[str] = []
        seen = -1  # how many inputs the run had when last read
        for _ in range(_ATTEMPTS):
            with self.gate.store.read() as tx:
                rows = tx.inputs(run_id)
            if last is not None and len(rows) == seen:
                raise last  # nobody appended meanwhile: the failure was not a race
            seen = len(rows)
            held = {sha256_hex(body) for _, body in rows}
            try:
                for digest, text in fresh.items():
                    if digest not in held:
                        self.gate.record_input(run_id, text)
                        added.append(text)
                    held.add(digest)
                    known.add(digest)
                return added
            except StoreError as e:
                # Another process may have appended an input of the run meanwhile (two
                # resumers of one conversation): read its inputs again, record what is missing.
                last = e
                fresh = {d: t for d, t in fresh.items() if d not in known}
        assert last is not None
        raise last
