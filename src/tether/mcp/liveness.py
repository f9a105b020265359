"""Which gateway processes on this store are alive, so a restarted gateway knows at once
which ``dispatched`` effects nobody can still be waiting on.

A gateway killed mid-call (SIGKILL, OOM, a power cut) leaves its call's effect
``dispatched``. Without a word from the dead process, the rule ``tether recover`` applies —
abandoned once the tool's timeout plus ``IN_FLIGHT_S`` have passed — keeps it ``dispatched``
for minutes. For a SQLite store (one machine, by SQLite's own rule) each gateway process
holds an exclusive ``flock`` on a file of its own in ``<db>.gateways/`` for its whole life,
the file naming when it started. The kernel releases the lock when the process dies, however
it dies, so at start a gateway knows which others are alive: an effect dispatched before
the earliest live gateway started (this one included) was dispatched by a process that is
gone, and is settled as unknown now. Nothing is written per call.

Other stores (PostgreSQL, shared between machines) have no such lock here: their gateways
keep the ``IN_FLIGHT_S`` rule, so a live gateway's call is never taken for abandoned.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from tether.store.base import Store

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: the IN_FLIGHT_S rule applies
    fcntl = None  # type: ignore[assignment]

__all__ = ["Liveness", "folder_for"]


def folder_for(store: Store) -> Path | None:
    """Where the gateways of ``store`` register, or None when liveness cannot be known."""
    path = getattr(store, "path", None)
    if fcntl is None or not isinstance(path, str) or path == ":memory:":
        return None
    return Path(os.path.realpath(path) + ".gateways")


class Liveness:
    """This process's registration: ``open`` takes the lock, ``close`` gives it back."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.started = time.time()
        self._file: IO[str] | None = None
        self._path: Path | None = None

    def open(self) -> float | None:
        """Register, and return the time before which every ``dispatched`` effect on this
        store is abandoned (None: not known, keep the ``IN_FLIGHT_S`` rule)."""
        if self.folder is None or fcntl is None:
            return None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            earliest = self.started
            for other in self.folder.glob("*.live"):
                alive = _started_if_alive(other)
                if alive is not None:
                    earliest = min(earliest, alive)
            name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            # Locked and written under another name first: a gateway starting meanwhile
            # must never find it unlocked and take it for a dead one's.
            writing = self.folder / f"{name}.new"
            file = writing.open("w", encoding="utf-8")
            self._file = file
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            file.write(repr(self.started))
            file.flush()
            self._path = self.folder / f"{name}.live"
            writing.rename(self._path)
        except OSError:
            self.close()
            return None  # a folder it cannot write: the slower rule, never a wrong one
        return earliest

    def close(self) -> None:
        file, self._file = self._file, None
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()
        if file is not None:
            file.close()


def _started_if_alive(path: Path) -> float | None:
    """When the gateway registered at ``path`` started, if it is alive; a dead one's file
    is removed."""
    assert fcntl is not None
    try:
        file = path.open("r+", encoding="utf-8")
    except OSError:
        return None  # removed meanwhile: it closed
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                return float(file.read().strip())
            except ValueError:
                return 0.0  # alive, and when it started is unknown: nothing is abandoned
        # Nobody holds it: its process is gone.
        with contextlib.suppress(OSError):
            path.unlink()
        return None
