"""Without an extra, using what it installs names the extra in one line (issue 22).

The dev environment installs every extra, so each case runs in a fresh interpreter that has
the extra's modules blocked (``sys.modules[name] = None`` makes importing them fail exactly as
an absent package does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BLOCK = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
{code}
"""


def without(blocked: list[str], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = BLOCK.format(blocked=blocked, code=code)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("blocked", "statement", "extra"),
    [
        (["langchain", "langchain_core"], "import tether.adapters.langgraph", "langgraph"),
        (["mcp", "anyio"], "import tether.mcp.client", "mcp"),
        (["fastapi", "starlette"], "from tether.web import create_app", "web"),
        (["psycopg", "psycopg_pool"], "import tether.store.postgres", "postgres"),
    ],
)  # fmt: skip
def test_importing_an_adapter_without_its_extra_names_the_extra(
    tmp_path: Path, blocked: list[str], statement: str, extra: str
) -> None:
    code = f"""
try:
    {statement}
except ImportError as e:
    from tether.errors import MissingExtra
    assert isinstance(e, MissingExtra), type(e)
    print(e)
else:
    raise SystemExit("imported without the extra")
"""
    out = without(blocked, code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"[{extra}] extra" in out.stdout and f"pip install -e '.[{extra}]'" in out.stdout


@pytest.mark.parametrize(
    ("blocked", "argv", "extra"),
    [
        (["psycopg"], ["runs", "list", "--db", "postgresql://127.0.0.1/test"], "postgres"),
        (["mcp", "anyio"], ["mcp", "pin", "--config", "gateway.toml"], "mcp"),
        (["fastapi", "starlette", "uvicorn"], ["serve"], "web"),
    ],
)  # fmt: skip
def test_a_command_without_its_extra_says_which_in_one_line(
    tmp_path: Path, blocked: list[str], argv: list[str], extra: str
) -> None:
    (tmp_path / "gateway.toml").write_text('[servers.fs]\ncommand = "true"\n')
    code = f"import sys; sys.argv = ['tether', *{argv!r}]; from tether.cli import run; run()"
    out = without(blocked, code, tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"pip install -e '.[{extra}]'" in lines[0], out.stderr
