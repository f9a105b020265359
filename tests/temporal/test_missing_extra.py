"""Without the [temporal] extra, tether.adapters.temporal says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.temporal.conftest import ROOT

HIDE_TEMPORALIO = "import sys; sys.modules['temporalio'] = None\n"  # as if not installed


@pytest.mark.parametrize(
    "statement",
    [
        "from tether.adapters.temporal import Governor",
        "import tether.adapters.temporal.workflow",
        "import tether.adapters.temporal.waker",
    ],
)
def test_a_missing_temporalio_names_the_extra(statement: str) -> None:
    code = HIDE_TEMPORALIO + (
        "from tether.errors import MissingExtra\n"
        "try:\n"
        f"    {statement}\n"
        "except MissingExtra as e:\n"
        "    print(e.extra, '|', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    extra, message = done.stdout.split("|", 1)
    assert extra.strip() == "temporal"
    assert "pip install -e '.[temporal]'" in message


def test_the_shapes_need_no_temporalio() -> None:
    code = HIDE_TEMPORALIO + "from tether.adapters.temporal import CallRequest; print('ok')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "ok", done.stderr
