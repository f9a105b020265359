"""The run vocabulary every layer shares: a run's statuses and who may drive it (leases).

It sits low in the import graph, beside the store's records, so the store, decisions and the
gate name statuses through ``RunStatus`` instead of spelling strings.
"""

from __future__ import annotations

import os
import socket
import uuid
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.store.base import RunRecord


class RunStatus(StrEnum):
    """Where a run stands; finished runs (completed, failed, cancelled) never move again."""

    QUEUED = "queued"  # runnable, and nobody drives it yet: any worker may claim it
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    # An effect's outcome is unknown and nothing could settle it: a human must say
    # (`tether effects resolve`), then `tether recover` continues the run.
    AWAITING_RECONCILIATION = "awaiting_reconciliation"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


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
