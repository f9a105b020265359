"""Waking the workflows whose approvals were decided: a signal, sent from tether's side.

A decision is made wherever approvers work (``tether approvals approve`` with a credential,
the web inbox, ``Gate.approve``), in the store. ``ApprovalWaker`` watches the store for
approvals that are decided (approved, denied, edited) and sends each one's workflow (the
tether run id is the workflow id) the ``tether.approval_decided`` signal naming it. The
signal carries no decision and grants nothing: the workflow runs the governed activity
again and the gate reads the decision from the store, so a signal sent by anyone else is
only an early wake-up. Delivery is at least once (a waker restarted signals again what is
decided and not yet used); the workflow treats a second signal like the first.

Run it beside the workers (``asyncio.create_task(waker.run())``) or alone::

    python -m tether.adapters.temporal.waker --db URL --temporal HOST:PORT [--namespace NS]

It reads the store every ``poll_s`` seconds (only tether's side polls; the workflow waits on
its signal and a timer, holding no worker).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable

from tether.adapters.temporal.shapes import APPROVAL_SIGNAL
from tether.core.approvals import Approval, ApprovalStatus
from tether.extras import missing
from tether.store.base import Store

try:
    from temporalio.client import Client
    from temporalio.service import RPCError
except ModuleNotFoundError as e:  # pragma: no cover - exercised without the extra
    raise missing("temporal", "tether.adapters.temporal", e) from e

__all__ = ["DECIDED", "ApprovalWaker"]

DECIDED = (ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EDITED)


class ApprovalWaker:
    """Signals the workflow of each decided approval in ``store``, once per process."""

    def __init__(
        self,
        store: Store,
        client: Client,
        *,
        poll_s: float = 0.5,
        runs: Callable[[str], bool] | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.poll_s = poll_s
        self.runs = runs  # which tether runs are workflows (default: try every one)
        self.sent: set[str] = set()
        self._stopping = asyncio.Event()

    def decided(self) -> list[Approval]:
        """Decided approvals this waker has not signalled yet."""
        found: list[Approval] = []
        decided: set[str] = set()
        for status in DECIDED:
            for approval in self.store.list_approvals(status=status):
                decided.add(approval.approval_id)
                if approval.approval_id in self.sent:
                    continue
                if self.runs is not None and not self.runs(approval.run_id):
                    continue
                found.append(approval)
        # An approval that left the decided states (used) does not come back to them.
        self.sent &= decided
        return found

    async def wake_once(self) -> int:
        """Signal every newly decided approval's workflow; how many were signalled."""
        woken = 0
        for approval in await asyncio.to_thread(self.decided):
            handle = self.client.get_workflow_handle(approval.run_id)
            try:
                await handle.signal(APPROVAL_SIGNAL, approval.approval_id)
                woken += 1
            except RPCError:
                pass  # no such workflow, or it has ended: nobody waits on it
            self.sent.add(approval.approval_id)
        return woken

    async def run(self) -> None:
        """Wake workflows until ``stop``."""
        while not self._stopping.is_set():
            await self.wake_once()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.poll_s)

    def stop(self) -> None:
        self._stopping.set()


async def _main(db: str, address: str, namespace: str, poll_s: float) -> None:
    from tether.store import open_store

    store = open_store(db)
    client = await Client.connect(address, namespace=namespace)
    await ApprovalWaker(store, client, poll_s=poll_s).run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the tether store's URL")
    parser.add_argument("--temporal", required=True, help="the Temporal frontend, HOST:PORT")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between reads")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.db, args.temporal, args.namespace, args.poll))
