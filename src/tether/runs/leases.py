"""Who may drive a run: leases, and the one way a driver takes a run (``claim``), used by
the runner and by workers alike."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tether.core.lifecycle import RunStatus
from tether.errors import RunConflict, RunStateError, StaleState

if TYPE_CHECKING:
    from tether.store.base import Store, Tx
    from tether.store.rows import RunRecord


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def owner_alive(owner: str) -> bool:
    """Whether a lease holder may still be running. A holder on this host whose process is
    gone is certainly dead, so its lease need not be waited out; elsewhere, trust the
    lease's expiry."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_held(record: RunRecord, worker: str, now: float) -> bool:
    """Whether someone other than ``worker`` holds the run's lease right now."""
    if record.lease_owner in (None, worker) or record.lease_expires_at is None:
        return False
    return record.lease_expires_at > now and owner_alive(record.lease_owner)


@dataclass(frozen=True)
class Claim:
    """A run taken by a driver: the row as written (leased to it) and what it was before."""

    record: RunRecord
    previous_status: RunStatus
    # Whose lease was taken over (a worker that died or let its lease expire), if anyone's.
    taken_from: str | None = None


def claim(tx: Tx, record: RunRecord, worker: str, now: float, lease_s: float, *, by: str) -> Claim:
    """Lease ``record`` (read in ``tx``, locked where the backend locks rows) to ``worker``
    for ``lease_s``: it becomes ``running``, and the claim is audited. A finished run or one
    another live holder leases is refused; a lost compare-and-swap is a ``RunConflict``."""
    status = RunStatus(record.status)
    if status.finished:
        raise RunStateError(f"run {record.run_id} is already {status.value}; nothing to resume")
    if lease_held(record, worker, now):
        raise RunConflict(
            f"run {record.run_id} is being driven by {record.lease_owner} (lease until "
            f"{record.lease_expires_at:.0f}); wait for it, or for its lease to expire"
        )
    taken_from = (
        record.lease_owner
        if status is RunStatus.RUNNING and record.lease_owner not in (None, worker)
        else None
    )
    try:
        written = tx.update_run(
            replace(
                record,
                status=RunStatus.RUNNING.value,
                lease_owner=worker,
                lease_expires_at=now + lease_s,
                updated_at=now,
            )
        )
    except StaleState as e:  # another driver claimed it between our read and our write
        raise RunConflict(f"run {record.run_id} was claimed by another worker") from e
    tx.append_audit(
        "run_claimed",
        at=now,
        run_id=record.run_id,
        actor=worker,
        data={"previous_status": status.value, "by": by, "taken_from": taken_from},
    )
    return Claim(written, status, taken_from)


class Heartbeat:
    """Renews a lease while its holder works, so a slow tool call does not let the lease
    lapse and a second worker start the same run (and re-dispatch an in-flight call)."""

    def __init__(
        self, store: Store, run_id: str, owner: str, lease_s: float, clock: Callable[[], float]
    ) -> None:
        self.store, self.run_id, self.owner = store, run_id, owner
        self.lease_s, self.clock = lease_s, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="tether-lease")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with self.store.transaction() as tx:
                    if not tx.renew_lease(self.run_id, self.owner, self.clock() + self.lease_s):
                        return  # lost it: the holder's next write will find out
            except Exception:
                continue
