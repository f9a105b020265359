"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert blocks, "the README should show Python usage"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert (tmp_path / "tether.db").exists()


def test_readme_policy_file_loads() -> None:
    from tether import Policy

    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.DOTALL)
    [toml] = [b for b in blocks if "policy-4" in b]
    policy = Policy.from_toml(toml)
    assert policy.version == "policy-4"
    assert policy.approvers_for("refund") == frozenset({"finance-1"})


def test_readme_flow_policy_loads() -> None:
    from tether import Policy, Risk, Verdict

    [toml] = [
        b for b in re.findall(r"```toml\n(.*?)```", README.read_text(), re.DOTALL) if "[flow" in b
    ]
    policy = Policy.from_toml(toml)
    assert policy.flow is not None
    assert policy.flow.tiers[Risk.WRITE].trusted is Verdict.ALLOW
    assert policy.flow.tools["get_webpage"].egress == ("url",)
    assert policy.flow.tools["get_webpage"].follow_links == {"example.com", "partner.org"}
    assert policy.flow.tools["send_email"].audience == ("to",)
    assert policy.flow.tools["book_hotel"].together == (("check_in", "check_out"),)
    assert policy.flow.intent is not None and policy.flow.owner == {"me@example.com"}
    assert [s.after for s in policy.flow.session] == ["flagged_output"]


def test_readme_gateway_config_loads(tmp_path: Path) -> None:
    from tether.mcp.config import load_config
    from tether.tools.registry import Risk

    [toml] = [
        b
        for b in re.findall(r"```toml\n(.*?)```", README.read_text(), re.DOTALL)
        if "[servers.fs]" in b
    ]
    path = tmp_path / "gateway.toml"
    path.write_text(toml)
    config = load_config(path)
    assert [t.key for t in config.tools()] == ["fs/read_text_file", "fs/write_file"]
    assert config.tools()[1].risk is Risk.WRITE
    [rule] = config.policy.tools["write_file"].constraints
    assert rule.violation({"path": "/home/me/notes/../.ssh/id_rsa"}) is not None
    assert rule.violation({"path": "/home/me/notes/todo.md"}) is None
