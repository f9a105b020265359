"""``tether serve`` (the approval inbox: pages, JSON API, notification sender) and
``tether notify`` (the sender alone). Loaded only when used: they import the web stack."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tether.cli.common import DB_OPTION, JSON_OPTION, open_cli_store

if TYPE_CHECKING:
    from tether.gate.notify import Webhook

F = TypeVar("F", bound=Callable[..., Any])
SECRET_ENV = "TETHER_WEBHOOK_SECRET"
SLACK_SECRET_ENV = "TETHER_SLACK_SIGNING_SECRET"


def parse_slack_users(values: tuple[str, ...]) -> dict[str, str]:
    links = {}
    for value in values:
        slack_id, sep, name = value.partition("=")
        if not sep or not slack_id.strip() or not name.strip():
            raise click.UsageError(f"--slack-user {value!r} must read SLACK_ID=APPROVER_NAME")
        links[slack_id.strip()] = name.strip()
    return links


def webhook_options(f: F) -> F:
    options = [
        click.option(
            "--webhook",
            "webhooks",
            multiple=True,
            envvar="TETHER_WEBHOOKS",
            help=f"POST each notification here as JSON signed with ${SECRET_ENV} (repeatable).",
        ),
        click.option(
            "--slack-webhook",
            "slack_webhooks",
            multiple=True,
            envvar="TETHER_SLACK_WEBHOOKS",
            help="A Slack incoming-webhook URL to post each notification to (repeatable).",
        ),
        click.option(
            "--base-url",
            envvar="TETHER_INBOX_URL",
            default=None,
            help="The inbox's public address, for the link in each notification.",
        ),
        click.option(
            "--retry-base",
            type=click.FloatRange(min=0.01),
            default=2.0,
            show_default=True,
            help="Seconds before the first retry; it doubles each time, up to 10 minutes.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def make_webhooks(webhooks: tuple[str, ...], slack: tuple[str, ...]) -> list[Webhook]:
    from tether.gate.notify import Webhook

    secret = os.environ.get(SECRET_ENV, "").encode() or None
    return [Webhook(u, "json", secret) for u in webhooks] + [Webhook(u, "slack") for u in slack]


@click.command("serve")
@DB_OPTION
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8700, show_default=True)
@click.option(
    "--app",
    "app_ref",
    envvar="TETHER_APP",
    default=None,
    help="The agent app (module:attribute), for edit forms when a run does not name one.",
)
@click.option(
    "--resume-runs",
    is_flag=True,
    help="Drive decided runs here (a worker in this process; needs --app).",
)
@click.option(
    "--proxy-header",
    default=None,
    help="Trust this request header as the signed-in approver's name (e.g. X-Forwarded-User)...",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    help=(
        "...but only from this proxy address or network (repeatable); from these, and only "
        "these, X-Forwarded-For names the client (for the sign-in limiter)."
    ),
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help=(
        "Another Host name the inbox answers to (repeatable; '*' for any). By default only "
        "localhost, the --host address and the --base-url host: a request naming any other "
        "(DNS rebinding) is refused."
    ),
)
@click.option(
    "--secure-cookies", is_flag=True, help="Mark the session cookie Secure (behind https)."
)
@click.option(
    "--slack-user",
    "slack_users",
    multiple=True,
    help=(
        "Link a Slack user to a registered approver, SLACK_ID=NAME (repeatable): only linked "
        "users decide from Slack's buttons, as that approver. Needs $TETHER_SLACK_SIGNING_SECRET."
    ),
)
@webhook_options
def serve(
    db: str,
    host: str,
    port: int,
    app_ref: str | None,
    resume_runs: bool,
    proxy_header: str | None,
    trusted_proxies: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    secure_cookies: bool,
    slack_users: tuple[str, ...],
    webhooks: tuple[str, ...],
    slack_webhooks: tuple[str, ...],
    base_url: str | None,
    retry_base: float,
) -> None:
    """Serve the approval inbox: pages for approvers, a JSON API (/api/openapi.json), and
    the notification sender. Approvers sign in with their credential."""
    try:
        import uvicorn

        from tether.web.app import WebConfig, create_app
        from tether.web.auth import ProxyAuth
    except ImportError as e:
        raise click.ClickException(
            f"tether serve needs the web extra ({e.name} is missing): pip install -e '.[web]'"
        ) from None
    from tether.gate.notify import Sender, check_base_url
    from tether.web.hosts import allowed_hosts as default_hosts

    if resume_runs and not app_ref:
        raise click.UsageError("--resume-runs needs --app module:attribute to drive the runs")
    if proxy_header and not trusted_proxies:
        raise click.UsageError("--proxy-header needs --trusted-proxy: whose header to believe")
    proxy = ProxyAuth.parse(proxy_header, trusted_proxies) if trusted_proxies else None
    slack_secret = os.environ.get(SLACK_SECRET_ENV, "").encode() or None
    links = parse_slack_users(slack_users)
    if links and not slack_secret:
        raise click.UsageError(
            f"--slack-user needs ${SLACK_SECRET_ENV} (the Slack app's signing secret), or no "
            "Slack request could be checked"
        )
    hooks = make_webhooks(webhooks, slack_webhooks)
    if base_url:
        check_base_url(base_url)
    shown_host = f"[{host}]" if ":" in host else host
    base = base_url or f"http://{shown_host}:{port}"
    hosts = default_hosts(host, base_url, allowed_hosts)
    store = open_cli_store(db, create=False)
    background: list[tuple[threading.Thread, Callable[[], None]]] = []
    sender = Sender(store, hooks, base_url=base, retry_base_s=retry_base)
    if hooks:
        thread = threading.Thread(target=sender.run, name="tether-notify", daemon=True)
        background.append((thread, sender.stop))
    if resume_runs:
        from tether.runs.app import load_app
        from tether.runs.worker import Worker

        assert app_ref is not None
        worker = Worker(load_app(app_ref), store, app_ref=app_ref)
        background.append((threading.Thread(target=worker.run, name="tether-worker"), worker.stop))
    config = WebConfig(
        store,
        app_ref=app_ref,
        proxy=proxy,
        allowed_hosts=hosts,
        base_url=base_url,
        secure_cookies=secure_cookies,
        resumes_runs=resume_runs,
        slack_signing_secret=slack_secret,
        slack_users=links,
    )
    app = create_app(config)
    for thread, _ in background:
        thread.start()
    click.echo(
        f"tether inbox on http://{shown_host}:{port}/ (API: /api/openapi.json); "
        f"{len(hooks)} webhook(s){'; resuming runs' if resume_runs else ''}",
        err=True,
    )
    # Bound to every address, it is reached by names it does not know yet: say which it takes.
    click.echo(f"answering to Host: {', '.join(hosts)} (more: --allowed-host NAME)", err=True)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            # uvicorn would believe X-Forwarded-For from any local peer and rewrite the
            # client address the proxy header and the sign-in limiter are keyed on;
            # ProxyAuth believes it only from --trusted-proxy addresses.
            proxy_headers=False,
            timeout_graceful_shutdown=2,  # live pages hold a stream open; do not wait on them
        )
    finally:
        for _, stop in background:
            stop()
        for thread, _ in background:
            thread.join(timeout=10)
        store.close()


@click.command("notify")
@DB_OPTION
@JSON_OPTION
@webhook_options
@click.option("--once", is_flag=True, help="One pass over what is due, then exit.")
def notify(
    db: str,
    as_json: bool,
    webhooks: tuple[str, ...],
    slack_webhooks: tuple[str, ...],
    base_url: str | None,
    retry_base: float,
    once: bool,
) -> None:
    """Deliver approval notifications from the store's outbox to webhooks, retrying with
    backoff until each one answers (what `tether serve` also does)."""
    import signal

    from tether.cli.output import echo_json
    from tether.gate.notify import Sender, check_base_url, outbox_summary

    hooks = make_webhooks(webhooks, slack_webhooks)
    if base_url:
        check_base_url(base_url)
    else:
        click.echo(
            "warning: no --base-url (or $TETHER_INBOX_URL): notifications will carry no link "
            "to the approval; give the inbox's public address",
            err=True,
        )
    if not hooks:
        raise click.UsageError(
            "say where to deliver: --webhook URL (with $TETHER_WEBHOOK_SECRET) or "
            "--slack-webhook URL"
        )
    with open_cli_store(db, create=False) as store:
        sender = Sender(store, hooks, base_url=base_url, retry_base_s=retry_base)
        if once:
            sender.send_due(limit=1000)
        else:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: sender.stop())
            sender.run()
        summary = {**outbox_summary(store), "failed_attempts": sender.stats.failed_attempts}
    if as_json:
        echo_json(summary)
    else:
        click.echo(
            f"{summary['delivered']} of {summary['notifications']} notifications delivered; "
            f"{summary['waiting']} waiting"
        )
