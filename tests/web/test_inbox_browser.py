"""The inbox in a real browser: Debian's Chromium driven by Playwright against `tether serve`
started as a subprocess on 127.0.0.1, with approvals requested through the real gate into the
SQLite store it serves. Screenshots of the inbox and of one approval are saved in
``$TETHER_ARTIFACTS`` (default ``artifacts/web``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.web.inbox_app import approver, propose
from tether import ApprovalStatus, SQLiteStore

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("TETHER_ARTIFACTS", ROOT / "artifacts" / "web"))


@dataclass
class Server:
    url: str
    store: SQLiteStore
    alice: str  # alice's credential: an approver of tenant acme

    def status(self, approval_id: str) -> ApprovalStatus:
        with self.store.read() as tx:
            found = tx.get_approval(approval_id)
        assert found is not None
        return found.status


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("inbox")
    db = f"sqlite:///{folder}/t.db"
    store = SQLiteStore(db)
    alice = approver(store, "alice", "acme")
    port = free_port()
    log = (folder / "serve.log").open("w")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tether", "serve", "--db", db, "--port", str(port)),
            *("--app", "tests.web.inbox_app:app"),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "tether serve did not start: " + (folder / "serve.log").read_text()
                    ) from None
                time.sleep(0.1)
        yield Server(url, store, alice)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run these, not skip them
        pytest.skip(message)
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"  # the system's browser, never one fetched
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield b
        b.close()


@dataclass
class Tab:
    page: Page
    dialogs: list[str]


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    page = context.new_page()
    page.set_default_timeout(10_000)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield Tab(page, dialogs)
    context.close()


def sign_in(page: Page, server: Server, token: str | None = None) -> None:
    page.goto(server.url + "/")
    page.fill("#token", token or server.alice)
    page.click("form[action='/signin'] button")
    page.wait_for_selector("#inbox-rows")


def csrf_of(page: Page) -> str:
    value = page.locator("input[name=csrf]").first.get_attribute("value")
    assert value
    return value


def test_screenshots_of_the_inbox_and_an_approval(tab: Tab, server: Server) -> None:
    # First in the module, so the inbox shows only these three.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for n, (order, amount, case) in enumerate(
        [("O-4812", 180, "ZD-2291"), ("O-4820", 45, ""), ("O-4831", 420, "")]
    ):
        extra: dict[str, Any] = {"case_id": case} if case else {}
        last = propose(
            server.store,
            order_id=order,
            amount=amount + n,
            **extra,
            note="customer reports a double charge",
        )
    page = tab.page
    sign_in(page, server)
    page.wait_for_selector(f"tr[data-approval='{last}']")
    inbox = ARTIFACTS / "inbox.png"
    page.set_viewport_size({"width": 1100, "height": 330})
    page.screenshot(path=str(inbox), full_page=True)
    page.set_viewport_size({"width": 1200, "height": 860})
    page.goto(f"{server.url}/approvals/{last}")
    approval = ARTIFACTS / "approval.png"
    page.screenshot(path=str(approval), full_page=True)
    for shot in (inbox, approval):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_sign_in_and_see_a_new_approval_arrive_live(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    page = tab.page
    page.goto(server.url + "/")
    before = {c["name"]: c for c in page.context.cookies()}
    assert "tether_session" not in before  # a visitor holds no session, only a nonce
    page.fill("#token", "tth_cred-0123456789abcdef_" + "z" * 43)
    page.click("form[action='/signin'] button")
    expect(page.locator("#error")).to_contain_text("not accepted")
    sign_in(page, server)
    after = {c["name"]: c for c in page.context.cookies()}["tether_session"]
    assert after["value"] != before["tether_visitor"]["value"]  # a new session id at sign-in
    assert after["httpOnly"] and after["sameSite"] == "Strict"
    expect(page.locator("header .who")).to_have_text("alice")
    aid = propose(server.store, amount=77)  # while the page is open, without reloading it
    row = page.locator(f"tr[data-approval='{aid}']")
    expect(row).to_be_visible()
    expect(row).to_contain_text("order:O-1001")
    expect(row.locator(".countdown")).to_contain_text("in ")
    assert tab.dialogs == []


def test_approve(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    aid = propose(server.store)
    sign_in(tab.page, server)
    tab.page.goto(f"{server.url}/approvals/{aid}")
    expect(tab.page.locator("#status")).to_have_text("pending")
    tab.page.click("#approve")
    expect(tab.page.locator(".notice")).to_contain_text("Approved")
    expect(tab.page.locator("#status")).to_have_text("approved")
    assert server.status(aid) is ApprovalStatus.APPROVED
    granted = server.store.audit_tail(kind="approval_granted", limit=1)[0].record
    assert granted["actor"] == "alice" and granted["data"]["via"] == "web"
    assert granted["data"]["approval_id"] == aid


def test_deny_with_a_reason(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    aid = propose(server.store)
    sign_in(tab.page, server)
    tab.page.goto(f"{server.url}/approvals/{aid}")
    tab.page.fill("#reason", "that order was already refunded")
    tab.page.click("#deny")
    expect(tab.page.locator("#status")).to_have_text("denied")
    with server.store.read() as tx:
        denied = tx.get_approval(aid)
    assert denied is not None
    assert (denied.status, denied.reason) == (
        ApprovalStatus.DENIED,
        "that order was already refunded",
    )


def test_edit_through_the_schema_form(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    aid = propose(server.store, card_token="tok_live_9f8e7d6c5b4a")
    page = tab.page
    sign_in(page, server)
    page.goto(f"{server.url}/approvals/{aid}")
    assert "tok_live_9f8e7d6c5b4a" not in page.content()  # masked, in the form too
    page.click("details.edit summary")
    amount = page.locator("input[name='arg.amount']")
    assert (amount.get_attribute("type"), amount.get_attribute("max")) == ("number", "500")
    # EUR, USD, and "(leave out)": the argument is optional.
    assert page.locator("select[name='arg.currency'] option").count() == 3
    # Beyond the schema's maximum: the page itself refuses to send it.
    amount.fill("9999")
    page.click("#edit")
    assert page.url.endswith(f"/approvals/{aid}")
    assert page.eval_on_selector("#edit-form", "f => f.checkValidity()") is False
    assert server.status(aid) is ApprovalStatus.PENDING
    # Past the browser (it does not know the pattern): the server refuses, in the page.
    amount.fill("40")
    page.fill("input[name='arg.order_id']", "not-an-order")
    page.click("#edit")
    expect(page.locator("#error")).to_contain_text("does not match")
    assert server.status(aid) is ApprovalStatus.PENDING
    # A valid edit: a new approval, granted by alice, with the masked value kept.
    page.fill("input[name='arg.order_id']", "O-2002")
    page.select_option("select[name='arg.currency']", label="USD")
    page.click("#edit")
    expect(page.locator(".notice")).to_contain_text("edited arguments")
    expect(page.locator("#status")).to_have_text("approved")
    assert server.status(aid) is ApprovalStatus.EDITED
    with server.store.read() as tx:
        original = tx.get_approval(aid)
        assert original is not None and original.replaced_by is not None
        new = tx.get_approval(original.replaced_by)
    assert new is not None and new.approver == "alice"
    assert dict(new.arguments) == {
        "order_id": "O-2002",
        "amount": 40,
        "currency": "USD",
        "card_token": "tok_live_9f8e7d6c5b4a",
        "notify_customer": False,
    }


def test_an_expired_approval_cannot_be_approved(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    page = tab.page
    sign_in(page, server)
    aid = propose(server.store, ttl_s=3)
    page.goto(f"{server.url}/approvals/{aid}")
    expect(page.locator("#approve")).to_be_visible()
    # The countdown reaches zero: the page takes the buttons away by itself.
    expect(page.locator("#approve")).to_be_hidden(timeout=8_000)
    expect(page.locator("#status")).to_have_text("expired")
    # And the server refuses a decision sent anyway.
    response = page.request.post(
        f"{server.url}/approvals/{aid}/approve", form={"csrf": csrf_of(page)}
    )
    assert response.status == 409
    assert server.status(aid) is ApprovalStatus.EXPIRED
    page.reload()
    expect(page.locator("#status")).to_have_text("expired")
    assert page.locator("#approve").count() == 0


def test_attacker_controlled_arguments_render_as_text(tab: Tab, server: Server) -> None:
    from playwright.sync_api import expect

    script = "<script>alert('script')</script>"
    img = "<img src=x onerror=\"alert('img')\">"
    link = "<a href=\"javascript:alert('link')\">open</a>"
    aid = propose(server.store, case_id=img, note=script + link)
    page = tab.page
    sign_in(page, server)
    expect(page.locator(f"tr[data-approval='{aid}']")).to_contain_text(img)
    page.goto(f"{server.url}/approvals/{aid}")
    arguments = page.locator("#arguments").text_content() or ""
    assert script in arguments and link.replace('"', '\\"') in arguments
    expect(page.locator("dl.facts")).to_contain_text(img)
    page.wait_for_timeout(500)
    assert tab.dialogs == []
    # Only the page's own script; no element made from an argument.
    assert page.evaluate("document.scripts.length") == 1
    assert page.locator("main img, main a[href^='javascript'], main [onerror]").count() == 0
    page.goto(server.url + "/")
    page.wait_for_timeout(300)
    assert tab.dialogs == []


def test_a_form_post_without_the_csrf_token_is_refused(tab: Tab, server: Server) -> None:
    aid = propose(server.store)
    page = tab.page
    sign_in(page, server)
    url = f"{server.url}/approvals/{aid}/approve"
    assert page.request.post(url, form={}).status == 403
    assert page.request.post(url, form={"csrf": "forged"}).status == 403
    assert server.status(aid) is ApprovalStatus.PENDING
    assert page.request.post(url, form={"csrf": csrf_of(page)}).status == 200  # after 303
    assert server.status(aid) is ApprovalStatus.APPROVED


def test_another_tenants_approval_is_invisible(tab: Tab, server: Server) -> None:
    theirs = propose(server.store, tenant="globex", note="globex secret plan")
    page = tab.page
    sign_in(page, server)
    assert page.locator(f"tr[data-approval='{theirs}']").count() == 0
    response = page.goto(f"{server.url}/approvals/{theirs}")
    assert response is not None and response.status == 404
    assert "globex secret plan" not in page.content()
    assert (
        page.request.post(
            f"{server.url}/approvals/{theirs}/approve", form={"csrf": csrf_of(page)}
        ).status
        == 404
    )
    assert server.status(theirs) is ApprovalStatus.PENDING
