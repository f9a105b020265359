"""`tether mcp pin` and `tether mcp inspect` as an operator runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.mcp.helpers import upstream_config, write_config


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_")},
        check=False,
    )


def test_pin_refuses_a_poisoned_tool_and_inspect_reviews_every_tool(tmp_path: Path) -> None:
    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state))
    c = str(config.path)
    pinned = tether("mcp", "pin", "--config", c, cwd=tmp_path)
    assert pinned.returncode == 1, pinned.stderr
    assert "test/add: not pinned, it looks poisoned" in pinned.stderr
    assert "pinned test/save (sha256:" in pinned.stdout
    assert config.lock_path.exists()

    inspected = tether("mcp", "inspect", "--config", c, "--json", cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr
    [line] = inspected.stdout.splitlines()  # one JSON document on one line
    rows = {row["tool"]: row for row in json.loads(line)["tools"]}
    assert rows["test/save"]["pin"] == "pinned"
    assert rows["test/save"]["policy"].startswith("ask (tier write); approvers: alice")
    assert rows["test/lookup"]["policy"] == "allow (tier read)"
    assert rows["test/drop"]["risk"] == "irreversible"  # its annotations raised it
    assert rows["test/drop"]["configured_risk"] == "read"
    assert rows["test/add"]["pin"] == "not pinned" and rows["test/add"]["findings"]
    assert rows["test/unlisted"]["pin"] == "not offered (not in the config)"

    (state / "variant").write_text("v2")
    drifted = tether("mcp", "inspect", "--config", c, cwd=tmp_path)
    assert "pin      drifted: inputSchema.properties.mode added" in drifted.stdout
    assert "POISONED" in drifted.stdout

    accepted = tether("mcp", "pin", "--config", c, "--accept", "test/add", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    lock = json.loads(config.lock_path.read_text())
    assert lock["tools"]["test/add"]["accepted_findings"]
    assert "mode" in lock["tools"]["test/save"]["snapshot"]["inputSchema"]["properties"]


def test_a_bad_config_is_one_sentence_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[servers.s]\ncommand = "x"\n')
    done = tether("mcp", "serve", "--config", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: gateway config") and "has no policy" in done.stderr
    assert not list(tmp_path.glob("*.db"))  # nothing created for a config that is refused
