"""The approver's minute in a real browser: Debian's Chromium, driven by Playwright, against
the inbox served by uvicorn on 127.0.0.1 (session ids rotate every second here, so every
test also crosses rotations), with approvals requested through the real gate into SQLite.
Each test runs on a desktop and a 390 px phone viewport and saves a screenshot in
``$TETHER_ARTIFACTS/minute`` (default ``artifacts/web/minute``, ignored by git)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.web.inbox_app import APP, approver, propose, propose_call
from tether import ApprovalStatus, SQLiteStore

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("TETHER_ARTIFACTS", ROOT / "artifacts" / "web")) / "minute"
CHAT = "http://chat.example"  # another site: its page is served by the browser's router
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@dataclass
class Inbox:
    url: str
    store: SQLiteStore
    alice: str

    def status(self, approval_id: str) -> ApprovalStatus:
        with self.store.read() as tx:
            found = tx.get_approval(approval_id)
        assert found is not None
        return found.status


def serve(store: SQLiteStore, **options: Any) -> Iterator[str]:
    """The inbox on a free port of 127.0.0.1, served by uvicorn in a thread; its URL."""
    import uvicorn

    from tether.web.app import WebConfig, create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = WebConfig(store, app_ref=APP, **options)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inbox]:
    folder = tmp_path_factory.mktemp("minute")
    store = SQLiteStore(f"sqlite:///{folder}/t.db")
    alice = approver(store, "alice", "acme")
    try:
        for url in serve(store, session_rotate_s=1.0, session_grace_s=30.0):
            yield Inbox(url, store, alice)
    finally:
        store.close()


@pytest.fixture(scope="module")
def idle_inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inbox]:
    """Sessions end after 3 idle seconds here."""
    folder = tmp_path_factory.mktemp("idle")
    store = SQLiteStore(f"sqlite:///{folder}/t.db")
    alice = approver(store, "alice", "acme")
    try:
        for url in serve(store, session_idle_s=3.0, live_poll_s=0.5):
            yield Inbox(url, store, alice)
    finally:
        store.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run these, not skip them
        pytest.skip(message)
    os.environ["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield b
        b.close()


@pytest.fixture(params=sorted(VIEWPORTS))
def page(request: pytest.FixtureRequest, browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORTS[request.param])  # type: ignore[arg-type]
    p = context.new_page()
    p.set_default_timeout(10_000)
    p.viewport_name = request.param  # type: ignore[attr-defined]
    yield p
    context.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}-{page.viewport_name}.png"  # type: ignore[attr-defined]
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def sign_in(page: Page, inbox: Inbox) -> None:
    page.goto(inbox.url + "/")
    page.fill("#token", inbox.alice)
    page.click("form[action^='/signin'] button")
    page.wait_for_selector("#inbox-rows")


def no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, width  # type: ignore[index]


def above_the_fold(page: Page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    height = page.viewport_size["height"]  # type: ignore[index]
    assert box is not None and box["y"] + box["height"] <= height, box


def chat_link(page: Page, inbox: Inbox, approval_id: str, sealed: bool = False) -> str:
    """Click the approval's link in a message on another site (a cross-site navigation);
    the link, sealed as notifications seal it if ``sealed``."""
    from tether.gate.links import approval_link, link_seal

    seal = None
    if sealed:
        with inbox.store.read() as tx:
            approval = tx.get_approval(approval_id)
        assert approval is not None
        seal = link_seal(inbox.store.keys, approval_id, approval.expires_at)
    link = approval_link(inbox.url, approval_id, seal)
    assert link is not None

    def chat(route: Any) -> None:
        route.fulfill(
            status=200,
            content_type="text/html",
            body=f'<p>Approval needed: <a id="open" href="{link}">Review it</a></p>',
        )

    page.route(f"{CHAT}/**", chat)
    page.goto(f"{CHAT}/channel")
    page.click("#open")
    # The first answer (without the Strict cookie) refreshes itself from the inbox's own
    # origin at once; what the approver sees is the page after that.
    page.wait_for_url(link)
    page.wait_for_function("!document.querySelector('meta[http-equiv=refresh]')")
    page.wait_for_load_state()
    return link


def test_a_notification_link_leads_to_the_decision(page: Page, inbox: Inbox) -> None:
    from playwright.sync_api import expect

    # Signed in already: the link from chat lands on the approval, still signed in.
    aid = propose(inbox.store, amount=31)
    sign_in(page, inbox)
    chat_link(page, inbox, aid)
    expect(page.locator("#approve")).to_be_visible()
    expect(page.locator("header .who")).to_have_text("alice")
    shot(page, "link-signed-in")
    page.click("#approve")
    expect(page.locator("#status")).to_have_text("approved")
    assert inbox.status(aid) is ApprovalStatus.APPROVED
    # Not signed in: the sign-in form, then the approval itself (not the inbox's front).
    page.context.clear_cookies()
    aid = propose(inbox.store, amount=32)
    link = chat_link(page, inbox, aid, sealed=True)
    expect(page.locator("#sent")).to_contain_text("tether sent you this link")
    no_sideways_scroll(page)
    shot(page, "link-sign-in")
    page.fill("#token", inbox.alice)
    page.click("form[action^='/signin'] button")
    expect(page.locator("#approve")).to_be_visible()
    assert page.url == link
    above_the_fold(page, "#approve")
    shot(page, "link-after-sign-in")
    page.click("#approve")
    expect(page.locator("#status")).to_have_text("approved")


def test_requests_in_flight_survive_a_rotation(page: Page, inbox: Inbox) -> None:
    from playwright.sync_api import expect

    aid = propose(inbox.store, amount=33)
    sign_in(page, inbox)
    page.goto(f"{inbox.url}/approvals/{aid}")
    page.wait_for_timeout(1300)  # the session id is due for replacement
    statuses = page.evaluate(
        """async () => {
            const one = () => fetch('/fragments/inbox').then(async r => [r.status, await r.text()]);
            const all = await Promise.all([one(), one(), one(), one()]);
            return all.map(([s, t]) => s + (t.includes('Sign in') ? ' signed out' : ''));
        }"""
    )
    assert statuses == ["200"] * 4, statuses
    page.click("#approve")  # a form from the page loaded before the rotation
    expect(page.locator("#status")).to_have_text("approved")
    shot(page, "rotation")


def test_triage_columns_and_filters(page: Page, inbox: Inbox) -> None:
    from playwright.sync_api import expect

    refund = propose(inbox.store, amount=44, note="customer asked twice")
    wipe = propose_call(inbox.store, "delete_account", {"account_id": "A-77"})
    sign_in(page, inbox)
    row = page.locator(f"tr[data-approval='{wipe}']")
    expect(row.locator(".risk")).to_have_text("irreversible")
    expect(row.locator(".why")).to_contain_text("tier irreversible")
    expect(row.locator(".summary")).to_contain_text("account_id=A-77")
    expect(row.locator(".actor")).to_have_text("agent-7")
    expect(row.locator(".countdown")).to_contain_text("in ")
    no_sideways_scroll(page)
    shot(page, "triage")
    page.select_option("select[name=tier]", "irreversible")
    page.click("#filters button")
    expect(page.locator(f"tr[data-approval='{wipe}']")).to_be_visible()
    assert page.locator(f"tr[data-approval='{refund}']").count() == 0
    shot(page, "triage-filtered")


def test_keyboard_only_approval(page: Page, inbox: Inbox) -> None:
    from playwright.sync_api import expect

    sign_in(page, inbox)
    aid = propose(inbox.store, amount=55)
    page.reload()
    page.wait_for_selector(f"tr[data-approval='{aid}']")
    rows = page.locator("#inbox-rows tr[data-approval]")
    ids = [rows.nth(i).get_attribute("data-approval") for i in range(rows.count())]
    page.keyboard.press("j")
    for _ in range(ids.index(aid)):
        page.keyboard.press("j")
    expect(page.locator(f"tr[data-approval='{aid}']")).to_have_class("selected")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/approvals/{aid}")
    page.keyboard.press("a")
    expect(page.locator("#status")).to_have_text("approved")
    assert inbox.status(aid) is ApprovalStatus.APPROVED
    shot(page, "keyboard")


def test_an_irreversible_call_asks_for_its_name(page: Page, inbox: Inbox) -> None:
    from playwright.sync_api import expect

    aid = propose_call(
        inbox.store, "delete_account", {"account_id": "A-90"}, request="close account A-90"
    )
    sign_in(page, inbox)
    page.goto(f"{inbox.url}/approvals/{aid}")
    expect(page.locator("#irreversible")).to_contain_text("cannot be undone")
    expect(page.locator("#turns")).to_contain_text("close account A-90")
    page.click("#approve")  # nothing typed: the page does not send it
    assert page.eval_on_selector("#approve-form", "f => f.checkValidity()") is False
    assert inbox.status(aid) is ApprovalStatus.PENDING
    page.fill("#confirm", "delete_account")
    shot(page, "irreversible")
    page.click("#approve")
    expect(page.locator("#status")).to_have_text("approved")


def test_bidirectional_text_is_isolated(page: Page, inbox: Inbox) -> None:
    # The gate refuses reordering characters in arguments; a run id is the caller's choice.
    tricky = f"run-{time.monotonic_ns()}-\u202eevil\u202c-2"
    aid = propose_call(inbox.store, "refund", {"order_id": "O-1", "amount": 66}, run_id=tricky)
    sign_in(page, inbox)
    row = page.locator(f"tr[data-approval='{aid}'] .run")
    text = row.text_content() or ""
    assert "\u202e" not in text and "[U+202E]" in text
    assert row.locator("bdi").count() == 1
    page.goto(f"{inbox.url}/approvals/{aid}")
    body = page.locator("main").text_content() or ""
    assert "\u202e" not in body and "[U+202E]" in body
    shot(page, "bidi")


def test_long_arguments_do_not_widen_the_page(page: Page, inbox: Inbox) -> None:
    long_id = "X" * 3000
    aid = propose(inbox.store, amount=77, case_id=long_id, note="n" * 20_000)
    sign_in(page, inbox)
    page.wait_for_selector(f"tr[data-approval='{aid}']")
    no_sideways_scroll(page)
    shot(page, "long-inbox")
    page.goto(f"{inbox.url}/approvals/{aid}")
    no_sideways_scroll(page)
    above_the_fold(page, "#approve")  # however long the resource label and arguments
    shot(page, "long-approval")


def test_an_open_inbox_keeps_its_session_and_a_quiet_page_warns(
    page: Page, idle_inbox: Inbox
) -> None:
    from playwright.sync_api import expect

    aid = propose(idle_inbox.store, amount=88)
    sign_in(page, idle_inbox)
    page.wait_for_timeout(5_000)  # past the idle end: the live page's stream kept it
    page.reload()
    expect(page.locator(f"tr[data-approval='{aid}']")).to_be_visible()
    # A page that is not live says before its session ends.
    page.goto(f"{idle_inbox.url}/approvals/{aid}")
    expect(page.locator("#session-warning")).to_contain_text("Your session")
    shot(page, "session-warning")
    page.wait_for_timeout(4_000)
    page.reload()
    expect(page.locator("#token")).to_be_visible()  # it did end: idle, nothing kept it
