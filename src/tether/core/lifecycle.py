"""A run's statuses: the vocabulary every layer shares.

It sits at the bottom of the import graph, beside the store's records, so the store, the
desk and the gate name statuses through ``RunStatus`` instead of spelling strings. Who may
drive a run (leases, ``claim``) lives in ``tether.runs.leases``.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run stands; finished runs (completed, failed, cancelled) never move again."""

    QUEUED = "queued"  # runnable, and nobody drives it yet: any worker may claim it
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    # An effect's outcome is unknown and nothing could settle it: a human must say
    # (`tether effects resolve`), then `tether recover` continues the run.
    AWAITING_RECONCILIATION = "awaiting_reconciliation"
    # The model could not be asked (a timeout, a rate limit, the provider down) and the
    # retries are spent: nothing is lost, and `tether runs resume`, `tether recover` or a
    # worker (after ``MODEL_RETRY_AFTER_S``) asks it again.
    AWAITING_MODEL = "awaiting_model"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Finished, and every effect that could be compensated was (`tether runs rollback`).
    ROLLED_BACK = "rolled_back"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


# The call id of a compensation: ``undo-`` and the call it undoes (``tether runs rollback``).
# The only new calls a finished run still takes, since undoing is what happens after the end.
UNDO_PREFIX = "undo-"

# How long a worker leaves a run waiting for its model before it asks again.
MODEL_RETRY_AFTER_S = 60.0

_FINISHED = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.ROLLED_BACK}
)
