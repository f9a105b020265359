"""The OpenAI and Anthropic adapters, driven through the real SDK clients against a local fake
server that speaks each provider's wire format. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import importlib
import json
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

from tether import Gate, Message, ModelToolCall, Policy, Principal, Registry, Risk, Verdict
from tether.compat import run_with_approval
from tether.errors import ModelError
from tether.models.anthropic import AnthropicModel
from tether.models.openai import OpenAIChatModel
from tether.store import MemoryStore

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


# -- the fake provider -------------------------------------------------------------------------
@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str


class FakeProvider:
    """Answers each POST with the next scripted reply and records what it received."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._replies: deque[Reply] = deque()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                provider.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                reply = (
                    provider._replies.popleft()
                    if provider._replies
                    else Reply(500, b'{"error": "no reply scripted"}', "application/json")
                )
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def reply(
        self, body: Any, *, status: int = 200, content_type: str = "application/json"
    ) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._replies.append(Reply(status, raw, content_type))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    fake = FakeProvider()
    yield fake
    fake.stop()


@pytest.fixture
def openai_client(server: FakeProvider) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def anthropic_client(server: FakeProvider) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
    yield client
    client.close()


def registry() -> Registry:
    reg = Registry()

    @reg.tool(risk="readonly")
    def search(q: str) -> str:
        """Search the local corpus."""
        return f"3 passages match '{q}'"

    @reg.tool(risk="readonly")
    def lookup(ticket_id: str) -> str:
        """Look up a ticket."""
        return f"ticket {ticket_id} is open"

    return reg


# What each provider must receive for registry()'s tools, spelt out: the adapters format
# the registry's ToolSpecs themselves, so these are what their formatting is checked against.
_SCHEMA = {
    "search": {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    },
    "lookup": {
        "type": "object",
        "properties": {"ticket_id": {"type": "string"}},
        "required": ["ticket_id"],
        "additionalProperties": False,
    },
}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a ticket.",
            "parameters": _SCHEMA["lookup"],
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the local corpus.",
            "parameters": _SCHEMA["search"],
        },
    },
]
ANTHROPIC_TOOLS = [
    {"name": "lookup", "description": "Look up a ticket.", "input_schema": _SCHEMA["lookup"]},
    {
        "name": "search",
        "description": "Search the local corpus.",
        "input_schema": _SCHEMA["search"],
    },
]


def test_tool_specs_are_the_manifests_in_name_order() -> None:
    specs = registry().tool_specs()
    assert [s.name for s in specs] == ["lookup", "search"]
    assert specs[1].description == "Search the local corpus."
    assert specs[1].parameters == _SCHEMA["search"]


CONVERSATION = [
    Message(role="system", content="You are a research assistant."),
    Message(role="user", content="Find run_42 and ticket T-1."),
]

AFTER_TOOLS = [
    *CONVERSATION,
    Message(
        role="assistant",
        content="Looking.",
        tool_calls=(
            ModelToolCall(id="c1", name="search", arguments={"q": "run_42"}),
            ModelToolCall(id="c2", name="lookup", arguments={"ticket_id": "T-1"}),
        ),
    ),
    Message(role="tool", content="3 passages match 'run_42'", tool_call_id="c1"),
    Message(role="tool", content="ticket T-1 is open", tool_call_id="c2"),
]


# -- OpenAI wire format ------------------------------------------------------------------------
def chat_completion(content: str | None = None, tool_calls: list[Any] | None = None) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def function_call(call_id: str, name: str, arguments: str) -> Any:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_openai_text_answer_and_request_format(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    server.reply(chat_completion("run_42 is a summary run."))
    model = OpenAIChatModel("gpt-test", client=openai_client, temperature=0)
    reply = model.complete(CONVERSATION, registry().tool_specs())

    assert reply == Message(role="assistant", content="run_42 is a summary run.")
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test"
    assert request.body["model"] == "gpt-test"
    assert request.body["temperature"] == 0
    assert request.body["messages"] == [
        {"role": "system", "content": "You are a research assistant."},
        {"role": "user", "content": "Find run_42 and ticket T-1."},
    ]
    assert request.body["tools"] == OPENAI_TOOLS
    assert "stream" not in request.body or request.body["stream"] is False


def test_openai_without_tools_sends_no_tools_key(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    server.reply(chat_completion("hi"))
    OpenAIChatModel("gpt-test", client=openai_client).complete(CONVERSATION, [])
    assert "tools" not in server.received[0].body


def test_openai_parallel_tool_calls(server: FakeProvider, openai_client: openai.OpenAI) -> None:
    server.reply(
        chat_completion(
            None,
            [
                function_call("call_1", "search", '{"q": "run_42"}'),
                function_call("call_2", "lookup", '{"ticket_id": "T-1"}'),
            ],
        )
    )
    reply = OpenAIChatModel("gpt-test", client=openai_client).complete(
        CONVERSATION, registry().tool_specs()
    )
    assert reply.role == "assistant"
    assert reply.content == ""
    assert reply.tool_calls == (
        ModelToolCall(id="call_1", name="search", arguments={"q": "run_42"}),
        ModelToolCall(id="call_2", name="lookup", arguments={"ticket_id": "T-1"}),
    )


def test_openai_sends_tool_calls_and_results_back(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    server.reply(chat_completion("Done."))
    reply = OpenAIChatModel("gpt-test", client=openai_client).complete(
        AFTER_TOOLS, registry().tool_specs()
    )
    assert reply.content == "Done."
    messages = server.received[0].body["messages"]
    assert messages[2:] == [
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "run_42"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"ticket_id": "T-1"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3 passages match 'run_42'"},
        {"role": "tool", "tool_call_id": "c2", "content": "ticket T-1 is open"},
    ]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"q": "run_42"', "not valid JSON"),
        ("q=run_42", "not valid JSON"),
        ('["run_42"]', "must be a JSON object, got list"),
        ('"run_42"', "must be a JSON object, got str"),
    ],
)
def test_openai_bad_arguments_become_parse_errors(
    server: FakeProvider, openai_client: openai.OpenAI, arguments: str, problem: str
) -> None:
    server.reply(
        chat_completion(
            None,
            [
                function_call("call_1", "search", arguments),
                function_call("call_2", "lookup", '{"ticket_id": "T-1"}'),
            ],
        )
    )
    reply = OpenAIChatModel("gpt-test", client=openai_client).complete(CONVERSATION, [])
    bad, good = reply.tool_calls
    assert (bad.id, bad.name, dict(bad.arguments)) == ("call_1", "search", {})
    assert bad.parse_error is not None
    assert problem in bad.parse_error
    assert "'search'" in bad.parse_error
    assert good.parse_error is None
    assert good.arguments == {"ticket_id": "T-1"}


def test_openai_empty_arguments_mean_no_arguments(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    server.reply(chat_completion(None, [function_call("call_1", "ping", "")]))
    [call] = OpenAIChatModel("gpt-test", client=openai_client).complete(CONVERSATION, []).tool_calls
    assert call == ModelToolCall(id="call_1", name="ping", arguments={})


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (500, {"message": "The server had an error", "type": "server_error"}, "try again later"),
        (401, {"message": "Incorrect API key provided", "type": "invalid_request_error"}, "key"),
        (429, {"message": "Rate limit reached", "type": "requests"}, "rate limit"),
    ],
)
def test_openai_http_errors_are_model_errors_without_retries(
    server: FakeProvider, openai_client: openai.OpenAI, status: int, error: Any, expected: str
) -> None:
    server.reply({"error": error}, status=status)
    model = OpenAIChatModel("gpt-test", client=openai_client)
    with pytest.raises(ModelError) as info:
        model.complete(CONVERSATION, [])
    message = str(info.value)
    assert f"HTTP {status}" in message
    assert expected in message
    assert error["message"] in message
    assert isinstance(info.value.__cause__, openai.APIStatusError)
    assert len(server.received) == 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html>502 Bad Gateway</html>", "text/html"),
        (b"this is { not json", "application/json"),
        (b'{"unexpected": true}', "application/json"),
        (b'{"choices": []}', "application/json"),
    ],
)
def test_openai_garbage_answers_are_model_errors(
    server: FakeProvider, openai_client: openai.OpenAI, body: bytes, content_type: str
) -> None:
    server.reply(body, content_type=content_type)
    with pytest.raises(ModelError, match="Chat Completions API"):
        OpenAIChatModel("gpt-test", client=openai_client).complete(CONVERSATION, [])
    assert len(server.received) == 1


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_openai_unreachable_server_is_a_model_error() -> None:
    port = closed_port()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test", max_retries=0)
    try:
        with pytest.raises(ModelError, match="could not reach OpenAI"):
            OpenAIChatModel("gpt-test", client=client).complete(CONVERSATION, [])
    finally:
        client.close()


def test_openai_missing_key_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-test")


# -- Anthropic wire format ---------------------------------------------------------------------
def anthropic_message(*blocks: Any) -> Any:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def text_block(text: str) -> Any:
    return {"type": "text", "text": text}


def tool_use(call_id: str, name: str, arguments: Any) -> Any:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def test_anthropic_text_answer_and_request_format(
    server: FakeProvider, anthropic_client: anthropic.Anthropic
) -> None:
    server.reply(anthropic_message(text_block("run_42 is "), text_block("a summary run.")))
    model = AnthropicModel("claude-test", client=anthropic_client, stop_sequences=["END"])
    reg = registry()

    reply = model.complete(CONVERSATION, reg.tool_specs())

    assert reply == Message(role="assistant", content="run_42 is a summary run.")
    [request] = server.received
    assert request.path == "/v1/messages"
    # Older SDKs send the key as x-api-key, newer ones as a bearer token.
    key = request.headers.get("x-api-key") or request.headers.get("authorization")
    assert key in ("test", "Bearer test")
    assert "anthropic-version" in request.headers
    assert request.body["model"] == "claude-test"
    assert request.body["max_tokens"] == 1024
    assert request.body["stop_sequences"] == ["END"]
    assert request.body["system"] == "You are a research assistant."
    assert request.body["messages"] == [{"role": "user", "content": "Find run_42 and ticket T-1."}]
    assert request.body["tools"] == ANTHROPIC_TOOLS


def test_anthropic_without_system_or_tools_sends_neither(
    server: FakeProvider, anthropic_client: anthropic.Anthropic
) -> None:
    server.reply(anthropic_message(text_block("hi")))
    AnthropicModel("claude-test", client=anthropic_client, max_tokens=64).complete(
        [Message(role="user", content="hello")], []
    )
    body = server.received[0].body
    assert "system" not in body
    assert "tools" not in body
    assert body["max_tokens"] == 64


def test_anthropic_parallel_tool_calls(
    server: FakeProvider, anthropic_client: anthropic.Anthropic
) -> None:
    server.reply(
        anthropic_message(
            text_block("Let me look."),
            tool_use("toolu_1", "search", {"q": "run_42"}),
            tool_use("toolu_2", "lookup", {"ticket_id": "T-1"}),
        )
    )
    reply = AnthropicModel("claude-test", client=anthropic_client).complete(
        CONVERSATION, registry().tool_specs()
    )
    assert reply.content == "Let me look."
    assert reply.tool_calls == (
        ModelToolCall(id="toolu_1", name="search", arguments={"q": "run_42"}),
        ModelToolCall(id="toolu_2", name="lookup", arguments={"ticket_id": "T-1"}),
    )


def test_anthropic_sends_tool_use_and_one_user_message_of_results(
    server: FakeProvider, anthropic_client: anthropic.Anthropic
) -> None:
    server.reply(anthropic_message(text_block("Done.")))
    reply = AnthropicModel("claude-test", client=anthropic_client).complete(
        AFTER_TOOLS, registry().tool_specs()
    )
    assert reply.content == "Done."
    body = server.received[0].body
    assert body["system"] == "You are a research assistant."
    assert body["messages"] == [
        {"role": "user", "content": "Find run_42 and ticket T-1."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "run_42"}},
                {"type": "tool_use", "id": "c2", "name": "lookup", "input": {"ticket_id": "T-1"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": "3 passages match 'run_42'",
                },
                {"type": "tool_result", "tool_use_id": "c2", "content": "ticket T-1 is open"},
            ],
        },
    ]


@pytest.mark.parametrize(("arguments", "kind"), [("q=run_42", "str"), (["run_42"], "list")])
def test_anthropic_non_object_input_becomes_a_parse_error(
    server: FakeProvider, anthropic_client: anthropic.Anthropic, arguments: Any, kind: str
) -> None:
    server.reply(anthropic_message(tool_use("toolu_1", "search", arguments)))
    [call] = (
        AnthropicModel("claude-test", client=anthropic_client).complete(CONVERSATION, []).tool_calls
    )
    assert (call.id, call.name, dict(call.arguments)) == ("toolu_1", "search", {})
    assert call.parse_error == f"arguments for 'search' must be a JSON object, got {kind}"


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (500, {"type": "api_error", "message": "Internal server error"}, "try again later"),
        (401, {"type": "authentication_error", "message": "invalid x-api-key"}, "key"),
        (429, {"type": "rate_limit_error", "message": "Number of requests exceeded"}, "rate"),
    ],
)
def test_anthropic_http_errors_are_model_errors_without_retries(
    server: FakeProvider,
    anthropic_client: anthropic.Anthropic,
    status: int,
    error: Any,
    expected: str,
) -> None:
    server.reply({"type": "error", "error": error}, status=status)
    with pytest.raises(ModelError) as info:
        AnthropicModel("claude-test", client=anthropic_client).complete(CONVERSATION, [])
    message = str(info.value)
    assert f"HTTP {status}" in message
    assert expected in message
    assert error["message"] in message
    assert isinstance(info.value.__cause__, anthropic.APIStatusError)
    assert len(server.received) == 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html>502 Bad Gateway</html>", "text/html"),
        (b"this is { not json", "application/json"),
        (b'{"unexpected": true}', "application/json"),
    ],
)
def test_anthropic_garbage_answers_are_model_errors(
    server: FakeProvider, anthropic_client: anthropic.Anthropic, body: bytes, content_type: str
) -> None:
    server.reply(body, content_type=content_type)
    with pytest.raises(ModelError, match="Messages API"):
        AnthropicModel("claude-test", client=anthropic_client).complete(CONVERSATION, [])
    assert len(server.received) == 1


def test_anthropic_unreachable_server_is_a_model_error() -> None:
    port = closed_port()
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="test", max_retries=0)
    try:
        with pytest.raises(ModelError, match="could not reach Anthropic"):
            AnthropicModel("claude-test", client=client).complete(CONVERSATION, [])
    finally:
        client.close()


# -- both --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("tether.models.openai", "openai", "openai"),
        ("tether.models.anthropic", "anthropic", "anthropic"),
    ],
)
def test_missing_sdk_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ImportError, match=rf"pip install -e '\.\[{extra}\]'"):
        importlib.import_module(module)


def test_run_with_approval_end_to_end_over_openai(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    ran: list[str] = []
    reg = Registry()

    @reg.tool(risk="dangerous")
    def delete_run(run_id: str) -> str:
        """Permanently delete a run and what it produced."""
        ran.append(run_id)
        return f"deleted {run_id}"

    gate = Gate(reg, Policy(version="policy-4", approvers=frozenset({"reviewer-5"})), MemoryStore())
    run_id = gate.start_run(Principal(subject="user-42", tenant="ws_acme"))
    server.reply(
        chat_completion(None, [function_call("call_1", "delete_run", '{"run_id": "r42"}')])
    )
    server.reply(chat_completion("Deleted run r42."))

    result = run_with_approval(
        OpenAIChatModel("gpt-test", client=openai_client),
        gate,
        run_id,
        "Clean up run r42",
        approver=lambda approval: True,
        approver_id="reviewer-5",
    )

    assert result.status == "completed"
    assert result.final == "Deleted run r42."
    assert ran == ["r42"]
    assert [s.kind for s in result.steps] == [
        "approval_required",
        "approval_granted",
        "tool_call",
        "final",
    ]
    first, second = (r.body for r in server.received)
    assert first["tools"] == [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in reg.tool_specs()
    ]
    assert first["messages"] == [{"role": "user", "content": "Clean up run r42"}]
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "delete_run", "arguments": '{"run_id": "r42"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": result.messages[2].content},
    ]
    assert "deleted r42" in result.messages[2].content


# -- a run survives its model (issue 22) ---------------------------------------------------
def refund_registry(refunds: list[str]) -> Registry:
    reg = Registry()

    @reg.tool(risk="write")
    def refund(order_id: str) -> str:
        """Refund an order."""
        refunds.append(order_id)
        return f"refunded {order_id}"

    return reg


WRITES_ALLOWED = Policy(version="p-1", tiers={Risk.WRITE: Verdict.ALLOW})
UNAVAILABLE = {"error": {"message": "upstream overloaded", "type": "server_error"}}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_model_that_fails_after_a_write_leaves_the_run_resumable_with_one_effect(
    server: FakeProvider,
    openai_client: openai.OpenAI,
    anthropic_client: anthropic.Anthropic,
    provider: str,
) -> None:
    """The model proposes a refund, the refund commits, then the provider answers 503 on
    every attempt: the run waits (``awaiting_model``), not ``failed``; resumed once the
    provider is back, it finishes without refunding again."""
    from tether.runs.asking import Asking
    from tether.runs.runner import Runner

    refunds: list[str] = []
    gate = Gate(refund_registry(refunds), WRITES_ALLOWED, MemoryStore())
    if provider == "openai":
        model: Any = OpenAIChatModel("gpt-test", client=openai_client)
        server.reply(
            chat_completion(None, [function_call("call_1", "refund", '{"order_id": "o-7"}')])
        )
        final = chat_completion("Refunded o-7.")
    else:
        model = AnthropicModel("claude-test", client=anthropic_client)
        server.reply(anthropic_message(tool_use("call_1", "refund", {"order_id": "o-7"})))
        final = anthropic_message(text_block("Refunded o-7."))
    for _ in range(3):  # every attempt: the first and two retries
        server.reply(UNAVAILABLE, status=503)
    slept: list[float] = []
    runner = Runner(gate, model, asking=Asking(retries=2, backoff_s=0.5, sleep=slept.append))
    waiting = runner.start("refund order o-7", Principal(subject="user-42", tenant="acme"))
    assert waiting.status == "awaiting_model"
    assert slept == [0.5, 1.0]  # backoff between the attempts
    assert refunds == ["o-7"]
    assert waiting.steps[-1].kind == "model_unavailable" and "503" in waiting.steps[-1].detail
    server.reply(final)
    done = runner.resume(waiting.run_id)
    assert (done.status, done.final) == ("completed", "Refunded o-7.")
    assert refunds == ["o-7"]  # one intended refund, one refund
    assert len(gate.store.list_effects(waiting.run_id)) == 1


def test_a_model_that_refuses_fails_the_run_and_says_what_it_did(
    server: FakeProvider, openai_client: openai.OpenAI
) -> None:
    from tether.runs.runner import Runner

    refunds: list[str] = []
    gate = Gate(refund_registry(refunds), WRITES_ALLOWED, MemoryStore())
    server.reply(chat_completion(None, [function_call("call_1", "refund", '{"order_id": "o-7"}')]))
    server.reply({"error": {"message": "invalid api key"}}, status=401)
    runner = Runner(gate, OpenAIChatModel("gpt-test", client=openai_client))
    result = runner.start("refund order o-7", Principal(subject="user-42", tenant="acme"))
    assert result.status == "failed"  # asking again gets the same answer
    assert len(server.received) == 2  # not retried


def test_a_model_of_ones_own_that_times_out_is_retried_then_waits() -> None:
    from tether.runs.asking import Asking
    from tether.runs.runner import Runner

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def complete(self, messages: Any, tools: Any) -> Message:
            self.calls += 1
            if self.calls <= 4:
                raise TimeoutError("the endpoint did not answer")
            return Message(role="assistant", content="done")

    flaky = Flaky()
    gate = Gate(refund_registry([]), WRITES_ALLOWED, MemoryStore())
    runner = Runner(gate, flaky, asking=Asking(retries=1, backoff_s=0, sleep=lambda s: None))
    first = runner.start("hello", Principal(subject="user-42", tenant="acme"))
    assert (first.status, flaky.calls) == ("awaiting_model", 2)
    assert runner.resume(first.run_id).status == "awaiting_model"
    assert runner.resume(first.run_id).status == "completed"
    assert flaky.calls == 5
