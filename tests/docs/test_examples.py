"""Every script in examples/ runs as a newcomer would run it: a real subprocess, started from
an unrelated working directory, that must exit 0, print what it promises, and leave no file
behind. The real-model quickstart runs against a local server speaking the OpenAI and
Anthropic wire formats, through the real SDKs; nothing leaves 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT_S = 120
REAL_MODEL = "real_model_quickstart.py"

# What each offline example must print: the lines that show it did what it says.
EXPECTED: dict[str, tuple[str, ...]] = {
    "langgraph_governed_tools.py": (
        "paused: delete_file({'path': 'old.log'}) needs apr-",
        "resumed: Done. (1 deletion)",
        "resumed again: tool results replayed=[True, True]",
        "audit intact:",
        '{"executions": 1, "expected": 1,',
    ),
    "mcp_gateway.py": (
        "pinned notes/read_note (sha256:",
        "offered: ['read_note', 'write_note']",
        "read: ship the release notes",
        "write: tether: 'write_note' needs a human's approval before it runs (approval apr-",
        "after approval: saved todo",
        "a second write asks again: True",
        '{"executions": 1, "expected": 1, "framework": "mcp"}',
    ),
    "openai_agents_approval.py": (
        "interrupted: save_note, tether approval apr-",
        "resumed: Saved the plan. (approved by editor-1, cred-",
        "resumed again: Saved the plan.; save_note ran 1 time",
        "audit intact:",
        '{"executions": 1, "expected": 1, ',
    ),
    "otel_trace.py": (
        '{"name": "execute_tool refund"',
        '"tether.verdict": "ask"',
        '{"name": "tether.approval refund"',
        '"tether.approval.approver": "finance-1"',
        '"tether.verdict": "allow_after_approval"',
        '"events": ["granted", "dispatched", "settled"]',
    ),
    "own_tools.py": (
        ": completed -> 'Saved.'",
        ":call-2:save_note:1  committed",
        "budget spent: 5 of 20",
        "replayed: True",
        "save_note ran 1x in the outside system: 1 effect",
    ),
    "policy_file.py": (
        "a read             read_order -> allow (tier read: allow)",
        "a small refund     refund     -> ask   (tool rule 'refund': ask)",
        "-> deny  (argument 'amount'=5000 breaks '<= 1000')",
        "-> deny  (argument 'currency'='GBP' breaks 'in ['EUR', 'USD']')",
        "-> deny  (argument tenant 'globex' is not the principal's tenant 'acme')",
        "-> deny  (missing scope payments:write)",
        "refunds are approved by finance-1, finance-2",
        "refused: policy broken-1 asks for approval",
    ),
    "pydantic_ai_deferred.py": (
        "deferred: refund waits for apr-",
        ": approved by finance-1",
        "resumed: Refund: {'order_id': 'A-7', 'refunded': 30}",
        "resumed again: Refund: {'order_id': 'A-7', 'refunded': 30}",
        "audit intact:",
        '{"executions": 1, "expected": 1, "framework": "pydantic-ai"}',
    ),
    "temporal_governed.py": (
        "governed: the worker died of SIGKILL after paying",
        "governed: paid ada 30",
        "plain: paid ada 30",
        '{"executions": 1, "expected": 1, "plain_temporal": 2}',
    ),
    "waiting_for_approval.py": (
        ": awaiting_approval, waiting for apr-",
        "refused: finance-9's credential is not valid for tenant acme",
        ": approved by finance-1 (cred-",
        "approval_granted  refund by finance-1",
        ": completed; refund ran 1 time: 1 effect",
        "audit intact:",
    ),
    "worker_queue.py": (
        "queued 3 runs",
        "worker finished 3 run(s): completed=3",
        "each ticket closed once: 3 effects for 3 runs",
        "audit intact:",
    ),
}

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


def run_example(name: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run examples/NAME from ``cwd`` with its own TMPDIR; return its stdout."""
    scratch = cwd / "tmp"
    scratch.mkdir()
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in PROXY_VARIABLES and not k.startswith(("OPENAI_", "ANTHROPIC_", "TETHER_"))
    }
    environment.update(TMPDIR=str(scratch), NO_PROXY="127.0.0.1,localhost", **(env or {}))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    # Examples keep their stores and keys in a temporary directory and remove it.
    assert sorted(p.name for p in cwd.iterdir()) == ["tmp"], f"{name} wrote into the cwd"
    assert list(scratch.iterdir()) == [], f"{name} left files in its temporary directory"
    return done.stdout


def test_every_example_is_checked() -> None:
    found = {p.name for p in EXAMPLES.glob("*.py")}
    assert found == set(EXPECTED) | {REAL_MODEL}, "add the new example's lines to EXPECTED"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name: str, tmp_path: Path) -> None:
    out = run_example(name, tmp_path)
    missing = [line for line in EXPECTED[name] if line not in out]
    assert not missing, f"{name} did not print {missing}; it printed:\n{out}"


def test_examples_fit_a_newcomers_screen() -> None:
    for path in EXAMPLES.glob("*.py"):
        lines = path.read_text().splitlines()
        assert len(lines) <= 100, f"{path.name} has {len(lines)} lines; keep examples short"
        assert lines[0].startswith('"""'), f"{path.name} should open with what it shows"


# -- the real-model quickstart, against a local provider ------------------------------------------
NOTE = "ship the release notes on Friday"  # what examples/real_model_quickstart.py's note says


@dataclass
class Provider:
    """Answers like OpenAI's /v1/chat/completions and Anthropic's /v1/messages: first a call
    of read_note, then, once the request carries the tool's result, a final answer quoting it."""

    received: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)

    def answer(self, path: str, body: Any) -> dict[str, Any]:
        if path == "/v1/chat/completions":
            results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
            if not results:
                call = {"name": "read_note", "arguments": json.dumps({"title": "todo"})}
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
                }
            else:
                message = {"role": "assistant", "content": final(results[-1])}
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        if path == "/v1/messages":
            results = [
                block["content"]
                for m in body["messages"]
                if isinstance(m["content"], list)
                for block in m["content"]
                if block["type"] == "tool_result"
            ]
            content: list[dict[str, Any]] = (
                [{"type": "text", "text": final(results[-1])}]
                if results
                else [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read_note",
                        "input": {"title": "todo"},
                    }
                ]
            )
            return {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "end_turn" if results else "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        raise LookupError(path)


def final(tool_result: str) -> str:
    return f"Your note says: {json.loads(tool_result)['body']}"


@pytest.fixture
def provider() -> Iterator[tuple[Provider, str]]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            state.received.append(
                (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            try:
                status, reply = 200, state.answer(self.path, body)
            except (LookupError, KeyError, TypeError, ValueError) as e:
                status, reply = 400, {"error": {"message": f"unexpected request: {e!r}"}}
            raw = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_real_model_quickstart_drives_both_adapters(
    provider: tuple[Provider, str], tmp_path: Path
) -> None:
    state, url = provider
    env = {
        "OPENAI_API_KEY": "sk-test-openai",
        "OPENAI_BASE_URL": f"{url}/v1",
        "ANTHROPIC_API_KEY": "sk-test-anthropic",
        "ANTHROPIC_BASE_URL": url,
    }
    out = run_example(REAL_MODEL, tmp_path, env)
    for name in ("openai", "anthropic"):
        assert re.search(rf"^{name}: run run-[0-9a-f]+ completed$", out, re.MULTILINE), out
        assert f"{name}: 1 tool call(s) through the gate, final: 'Your note says: {NOTE}'" in out
    # Two requests per provider: the proposal, then the answer carrying the tool's result.
    paths = [path for path, _, _ in state.received]
    assert paths == ["/v1/chat/completions"] * 2 + ["/v1/messages"] * 2, paths
    (_, openai_headers, openai_first), _, (_, anthropic_headers, anthropic_first), _ = (
        state.received
    )
    assert openai_headers["authorization"] == "Bearer sk-test-openai"
    # SDK releases differ in the header that carries the key; either way it is the one set.
    presented = {anthropic_headers.get("x-api-key"), anthropic_headers.get("authorization")}
    assert presented & {"sk-test-anthropic", "Bearer sk-test-anthropic"}, sorted(anthropic_headers)
    assert [t["function"]["name"] for t in openai_first["tools"]] == ["read_note"]
    assert [t["name"] for t in anthropic_first["tools"]] == ["read_note"]


def test_real_model_quickstart_without_keys_says_what_to_set(tmp_path: Path) -> None:
    out = run_example(REAL_MODEL, tmp_path)
    assert "set OPENAI_API_KEY and/or ANTHROPIC_API_KEY" in out


# -- the README's app file, run from the shell as the README says ---------------------------------
README = EXAMPLES.parent / "README.md"


def tether(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    environment.update(TETHER_DB=f"sqlite:///{cwd / 'tether.db'}", **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"tether {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_readme_app_runs_and_waits_for_an_approver(tmp_path: Path) -> None:
    [app_file] = [
        block
        for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
        if block.startswith("# myagent.py")
    ]
    (tmp_path / "myagent.py").write_text(app_file)
    started = tether(tmp_path, "run", "--app", "myagent:app", "cancel order O-1")
    assert 'approval_required cancel_order({"order_id":"O-1"})' in started, started
    run_id = re.search(r"run (run-[0-9a-f]+): awaiting_approval", started)
    approval_id = re.search(r"(apr-[0-9a-f]+)", started)
    assert run_id and approval_id, started
    admin = tether(tmp_path, "admins", "add", "root").strip().splitlines()[-1]
    token = tether(
        tmp_path,
        "approvers",
        "add",
        "ops-lead",
        "--tenant",
        "acme",
        env={"TETHER_ADMIN_TOKEN": admin},
    ).strip()
    decided = tether(
        tmp_path, "approvals", "approve", approval_id[1], env={"TETHER_APPROVER_TOKEN": token}
    )
    assert "approved by ops-lead" in decided, decided
    resumed = tether(tmp_path, "runs", "resume", run_id[1])
    assert "final             Cancelled O-1." in resumed, resumed
    assert f"run {run_id[1]}: completed" in resumed, resumed
