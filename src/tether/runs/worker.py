"""Workers: processes that claim runnable runs from the store and drive them.

A worker runs ``concurrency`` threads. Each claims one run at a time — queued (new, or all its
approvals decided) or running under an expired lease (its worker died) — with a row lock that
skips what another worker holds (PostgreSQL ``FOR UPDATE SKIP LOCKED``), takes its lease in
the same transaction, and drives it until it finishes or waits for a human. Any worker can
pick up a run another one suspended.

SIGTERM (or ``stop()``) stops claiming; threads finish the run they are driving (each drive
ends at the next suspension or completion), then the process exits. A worker killed outright
leaves leases that expire, or that another worker on the same host sees are dead at once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.core.lifecycle import RunStatus
from tether.errors import RunConflict, RunStateError, StoreError
from tether.runs import log as run_log
from tether.runs.app import App
from tether.runs.leases import claim, lease_held, owner_alive, worker_name
from tether.store.base import Store, Tx
from tether.store.rows import RunRecord


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "finished": self.finished,
            "conflicts": self.conflicts,
            "errors": self.errors[-10:],
        }


class Worker:
    """Claims runnable runs from a store and drives them, ``concurrency`` at a time."""

    def __init__(
        self,
        app: App,
        store: Store,
        *,
        app_ref: str | None = None,
        concurrency: int = 1,
        lease_s: float = 30.0,
        poll_s: float = 0.2,
        clock: Callable[[], float] = time.time,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.app, self.store = app, store
        # Told one line per run claimed and per run stopped (``tether worker`` prints them).
        self.on_progress = on_progress
        self.metadata = {"app": app_ref} if app_ref else {}
        self.concurrency = concurrency
        self.lease_s, self.poll_s, self.clock = lease_s, poll_s, clock
        self.name = worker_name()
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._idle_since: list[float | None] = [None] * concurrency

    def stop(self) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self, *, exit_when_idle_s: float | None = None) -> WorkerStats:
        """Work until stopped (or until every thread found nothing for ``exit_when_idle_s``)."""
        threads = [
            threading.Thread(target=self._loop, args=(i, exit_when_idle_s), name=f"tether-w{i}")
            for i in range(self.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        return self.stats

    def _loop(self, index: int, exit_when_idle_s: float | None) -> None:
        worker = f"{self.name}-t{index}"
        while not self._stop.is_set():
            run_id = self._claim_one(worker)
            if run_id is None:
                now = time.monotonic()
                idle = self._idle_since[index] = self._idle_since[index] or now
                if exit_when_idle_s is not None and now - idle >= exit_when_idle_s:
                    return
                self._stop.wait(self.poll_s)
                continue
            self._idle_since[index] = None
            self._drive(worker, run_id)

    def _claim_one(self, worker: str) -> str | None:
        now = self.clock()
        try:
            with self.store.transaction() as tx:
                for record in tx.claimable(now, 1):
                    return self._take(tx, record, worker, now)
            # Nothing free: a run whose holder died on this host need not wait out its lease.
            for record in self.store.list_runs(RunStatus.RUNNING.value):
                if record.lease_owner is None or owner_alive(record.lease_owner):
                    continue
                with self.store.transaction() as tx:
                    current = tx.lock_run(record.run_id)
                    if (
                        current is not None
                        and current.status == RunStatus.RUNNING.value
                        and (not lease_held(current, worker, now))
                    ):
                        return self._take(tx, current, worker, now)
        except (RunConflict, RunStateError):  # taken or finished between the read and the lock
            with self._lock:
                self.stats.conflicts += 1
        except StoreError as e:
            self._note_error(f"claim: {e}")
        return None

    def _take(self, tx: Tx, record: RunRecord, worker: str, now: float) -> str:
        claimed = claim(tx, record, worker, now, self.lease_s, by="worker")
        if claimed.taken_from is not None:
            run_log.append(
                tx,
                claimed.record,
                now=now,
                steps=[("recovered", f"{worker} took over from {claimed.taken_from}")],
            )
        return record.run_id

    def _drive(self, worker: str, run_id: str) -> None:
        with self._lock:
            self.stats.claimed += 1
        self._progress(f"{worker}: claimed run {run_id}")
        runner = self.app.runner(
            self.store, worker=worker, lease_s=self.lease_s, metadata=self.metadata
        )
        try:
            result = runner.resume(run_id)
        except (RunConflict, RunStateError):
            with self._lock:
                self.stats.conflicts += 1
            self._progress(f"{worker}: run {run_id} was taken or finished elsewhere")
            return
        except Exception as e:  # a run's failure must not take the worker down
            self._note_error(f"{run_id}: {e!r}")
            self._progress(f"{worker}: run {run_id} raised {e!r}")
            return
        with self._lock:
            self.stats.finished[result.status] = self.stats.finished.get(result.status, 0) + 1
        self._progress(f"{worker}: run {run_id} {result.status}")

    def _progress(self, line: str) -> None:
        if self.on_progress is not None:
            self.on_progress(line)

    def _note_error(self, text: str) -> None:
        with self._lock:
            self.stats.errors.append(text)
