"""`tether serve` as a user runs it: the demo's run waits for approval, the API decides it,
and `--resume-runs` drives the run to the end in the server's own process (one witness-
recorded close_ticket). And the command tree stays cheap: `tether --help` loads no web stack."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.web.test_notifications import SECRET, Receiver

APP = "tether.demo:support"
SERVE = (sys.executable, "-m", "tether", "serve")


def tether(*args: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_serve_resumes_a_run_decided_through_the_api(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    env = {**os.environ, "TETHER_DB": db, "TETHER_DEMO_WORLD": str(tmp_path / "world.db")}
    env.pop("TETHER_APPROVER_TOKEN", None)
    run = json.loads(
        tether("run", "--app", APP, "--json", "close ticket T-7", env=env, cwd=tmp_path)
        .strip()
        .splitlines()[-1]
    )
    admin = tether("admins", "add", "root", env=env, cwd=tmp_path).strip().splitlines()[-1]
    env_admin = {**env, "TETHER_ADMIN_TOKEN": admin}
    token = tether(
        "approvers", "add", "reviewer-5", "--tenant", "acme", env=env_admin, cwd=tmp_path
    )
    token = token.strip().splitlines()[-1].strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    receiver = Receiver()
    env["TETHER_WEBHOOK_SECRET"] = SECRET.decode()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [
            *(*SERVE, "--db", db, "--port", str(port), "--resume-runs", "--app", APP),
            *("--webhook", receiver.url, "--base-url", "https://inbox.example"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=1).close()
                break
            except OSError:
                alive = server.poll() is None and time.monotonic() < deadline
                assert alive, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        auth = {"Authorization": f"Bearer {token}"}
        listing = urllib.request.Request(base + "/api/approvals?status=pending", headers=auth)
        with urllib.request.urlopen(listing) as listed:
            (pending,) = json.load(listed)["approvals"]
        assert pending["run_id"] == run["run_id"] and pending["tool"] == "close_ticket"
        approve = urllib.request.Request(
            f"{base}/api/approvals/{pending['approval_id']}/approve", headers=auth, method="POST"
        )
        with urllib.request.urlopen(approve) as approved:
            assert json.load(approved)["status"] == "approved"
        # The server's sender announced the request (made before it started) to the webhook.
        nid = f"ntf-{pending['approval_id']}"
        while nid not in receiver.delivered():
            assert time.monotonic() < deadline, receiver.requests
            time.sleep(0.1)
        link = str(receiver.delivered()[nid]["link"])
        # The approval's page, sealed (tether.gate.links) with the store's key.
        assert link.startswith(f"https://inbox.example/approvals/{pending['approval_id']}?link=")
        deadline = time.monotonic() + 30
        while True:
            shown = json.loads(
                tether("runs", "show", run["run_id"], "--json", env=env, cwd=tmp_path)
            )
            if shown["status"] == "completed":
                break
            assert time.monotonic() < deadline, shown["status"]
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
        receiver.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "world.db") as world:
        (n,) = world.execute("select count(*) from calls where tool = 'close_ticket'").fetchone()
    assert n == 1


def test_the_command_tree_does_not_load_the_web_stack() -> None:
    code = (
        "import sys\n"
        "from tether.cli import main\n"
        "main.get_command(None, 'serve'); main.get_command(None, 'notify')\n"
        "heavy = [m for m in ('fastapi', 'starlette', 'uvicorn', 'jinja2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_resume_runs_needs_an_app(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SERVE, "--db", f"sqlite:///{tmp_path}/x.db", "--resume-runs"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--app" in done.stderr


def test_serve_believes_forwarded_headers_only_from_its_trusted_proxy(tmp_path: Path) -> None:
    """uvicorn's own forwarded-header handling is off: from 127.0.0.1 an
    ``X-Forwarded-For: <the proxy>`` must not make the request the proxy's, nor its
    ``X-Forwarded-User`` sign anyone in; and only the allowed Host names are answered."""
    import http.client

    from tests.web.inbox_app import approver
    from tether import SQLiteStore

    db = f"sqlite:///{tmp_path}/t.db"
    store = SQLiteStore(db)
    try:
        approver(store, "alice", "acme")
    finally:
        store.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [
            *(*SERVE, "--db", db, "--port", str(port)),
            *("--proxy-header", "X-Forwarded-User", "--trusted-proxy", "10.0.0.5"),
            *("--allowed-host", "inbox.test"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def get(headers: dict[str, str]) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/", headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get({})
                break
            except OSError:
                alive = server.poll() is None and time.monotonic() < deadline
                assert alive, (tmp_path / "serve.log").read_text()
                time.sleep(0.1)
        forged = {"X-Forwarded-For": "10.0.0.5", "X-Forwarded-User": "alice"}
        code, body = get(forged)
        assert code == 200 and "Sign in to approve" in body and "Waiting for you" not in body
        assert get({"Host": "evil.example"})[0] == 400
        assert get({"Host": f"evil.example:{port}"})[0] == 400
        assert get({"Host": "inbox.test"})[0] == 200
        assert get({"Host": f"localhost:{port}"})[0] == 200
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
    said = (tmp_path / "serve.log").read_text()
    assert "answering to Host: localhost, 127.0.0.1, ::1, inbox.test" in said


def test_a_proxy_header_needs_a_trusted_proxy(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SERVE, "--db", f"sqlite:///{tmp_path}/x.db", "--proxy-header", "X-Forwarded-User"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--trusted-proxy" in done.stderr
