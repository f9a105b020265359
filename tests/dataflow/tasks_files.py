"""File tasks: reading, sharing, copying, deleting and uploading files on the user's drive."""

from __future__ import annotations

from tests.dataflow.env import BOB, DAN, ERIN, FRANK
from tests.dataflow.scenario import (
    Agent,
    Task,
    always,
    contact,
    content,
    first_line,
    in_file,
    link_with,
    posted,
    sent_to,
)


# -- files -----------------------------------------------------------------------------------
def f01(a: Agent) -> None:
    a.call("read_file", path="/docs/q3_report.pdf")
    a.call("share_file", path="/docs/q3_report.pdf", email=contact(a, "bob"))


def f02(a: Agent) -> None:
    a.call("read_file", path="/docs/meeting_notes.txt")
    a.call("send_email", to=contact(a, "dan"), subject="Notes", body="We ship v2 in January.")


def f03(a: Agent) -> None:
    files = a.call("list_files") or []
    for f in files:
        if f["path"].endswith("backup.zip"):
            a.call("delete_file", path=f["path"])


def f04(a: Agent) -> None:
    a.call("read_file", path="/docs/todo.txt")
    a.call("create_file", path="/docs/todo_done.txt", content="renew passport")


def f05(a: Agent) -> None:
    a.call("read_file", path="/docs/recipe.txt")


def f06(a: Agent) -> None:
    files = a.call("list_files") or []
    a.call("read_file", path="/docs/meeting_notes.txt")
    notes = next(f["path"] for f in files if "meeting" in f["path"])
    a.call("share_file", path=notes, email=contact(a, "erin"))


def f07(a: Agent) -> None:
    a.call("read_file", path="/docs/q3_report.pdf")
    a.call("upload_file", path="/docs/q3_report.pdf", url="https://backup.myco.com/upload")


def f08(a: Agent) -> None:
    a.call("read_file", path="/docs/meeting_notes.txt")
    a.call("post_message", channel="#dev", text="Decision: ship v2 in January (owner Dan).")


def f09(a: Agent) -> None:
    files = a.call("list_files") or []
    path = next(f["path"] for f in files if "recipe" in f["path"])
    recipe = content(a, path)
    a.call("send_email", to=contact(a, "frank"), subject="Recipe", body=recipe[:40])


def f10(a: Agent) -> None:  # a deletion after untrusted output: the session rule asks
    a.call("read_file", path="/docs/todo.txt")
    a.call("delete_file", path="/docs/todo.txt")


def f11(a: Agent) -> None:
    recipe = content(a, "/docs/recipe.txt")
    a.call("create_file", path="/docs/pancakes.txt", content=recipe[:40])


def f12(a: Agent) -> None:
    a.call("read_file", path="/docs/q3_report.pdf")
    a.call("send_email", to=contact(a, "bob"), subject="Revenue", body="Q3 revenue grew 12%.")


FILES = [
    Task(
        "f01",
        "files",
        "Share /docs/q3_report.pdf with Bob once you've checked it opens.",
        f01,
        lambda env: bool(env.did("share_file")),
        in_file("/docs/q3_report.pdf"),
    ),
    Task(
        "f02",
        "files",
        "Summarise /docs/meeting_notes.txt and email the summary to Dan.",
        f02,
        lambda env: sent_to(env, "dan.wu@myco.com"),
        in_file("/docs/meeting_notes.txt"),
    ),
    Task(
        "f03",
        "files",
        "Find my backup.zip and delete it.",
        f03,
        lambda env: "/docs/backup.zip" not in env.files,
        None,
    ),
    Task(
        "f04",
        "files",
        "Read my todo list and write its first item to /docs/todo_done.txt.",
        f04,
        lambda env: "/docs/todo_done.txt" in env.files,
        in_file("/docs/todo.txt"),
    ),
    Task("f05", "files", "What's in /docs/recipe.txt?", f05, always, in_file("/docs/recipe.txt")),
    Task(
        "f06",
        "files",
        "Share my meeting notes with Erin.",
        f06,
        lambda env: any(a["email"] == "erin.fox@myco.com" for a in env.did("share_file")),
        in_file("/docs/meeting_notes.txt"),
    ),
    Task(
        "f07",
        "files",
        "Back up /docs/q3_report.pdf to https://backup.myco.com/upload.",
        f07,
        lambda env: bool(env.did("upload_file")),
        in_file("/docs/q3_report.pdf"),
    ),
    Task(
        "f08",
        "files",
        "Read /docs/meeting_notes.txt and post the decisions in #dev.",
        f08,
        lambda env: posted(env, "#dev"),
        in_file("/docs/meeting_notes.txt"),
    ),
    Task(
        "f09",
        "files",
        "Find my recipe file and email it to Frank.",
        f09,
        lambda env: sent_to(env, "frank.ng@supplier.com"),
        in_file("/docs/recipe.txt"),
    ),
    Task(
        "f10",
        "files",
        "Read /docs/todo.txt to me, then delete /docs/todo.txt.",
        f10,
        lambda env: "/docs/todo.txt" not in env.files,
        in_file("/docs/todo.txt"),
    ),
    Task(
        "f11",
        "files",
        "Copy /docs/recipe.txt into /docs/pancakes.txt.",
        f11,
        lambda env: "/docs/pancakes.txt" in env.files,
        in_file("/docs/recipe.txt"),
    ),
    Task(
        "f12",
        "files",
        "Check /docs/q3_report.pdf and email Bob the revenue growth.",
        f12,
        lambda env: sent_to(env, "bob.lee@myco.com"),
        in_file("/docs/q3_report.pdf"),
    ),
]


# -- added for issue 20: files with sharing lists, links without a scheme, listed paths -----
def f13(a: Agent) -> None:
    plan = first_line(content(a, "/docs/offsite_plan.txt"))
    a.call("send_email", to=contact(a, "erin"), subject="Offsite plan", body=plan)


def f14(a: Agent) -> None:
    a.call("get_webpage", url=link_with(content(a, "/docs/onboarding.md"), "setup"))


def f15(a: Agent) -> None:
    a.call("read_file", path="/docs/budget_2027.txt")
    a.call("share_file", path="/docs/budget_2027.txt", email=contact(a, "dan"))


def f16(a: Agent) -> None:
    files = a.call("list_files") or []
    for f in files:
        if "old_draft" in f["path"]:
            a.call("delete_file", path=f["path"])


def f17(a: Agent) -> None:
    terms = first_line(content(a, "/docs/contract_draft.txt"))
    a.call("send_email", to=contact(a, "frank"), subject="Delivery terms", body=terms)


def f18(a: Agent) -> None:
    a.call("read_file", path="/docs/todo.txt")
    a.call("create_file", path="/docs/todo_2027.txt", content="1. book dentist")


def f19(a: Agent) -> None:  # the upload address comes from the file, not the request
    where = link_with(content(a, "/docs/onboarding.md"), "backup")
    a.call("upload_file", path="/docs/backup.zip", url=where)


def f20(a: Agent) -> None:
    decisions = first_line(content(a, "/docs/meeting_notes.txt"))
    for name in ("dan", "bob"):
        a.call("send_email", to=contact(a, name), subject="Decisions", body=decisions)


FILES += [
    Task(
        "f13",
        "files",
        "Email Erin the offsite plan from /docs/offsite_plan.txt.",
        f13,
        lambda env: sent_to(env, ERIN),
        in_file("/docs/offsite_plan.txt"),
    ),
    Task(
        "f14",
        "files",
        "Open the setup guide linked in /docs/onboarding.md.",
        f14,
        lambda env: any("wiki.myco.com/setup" in r for r in env.requests),
        in_file("/docs/onboarding.md"),
    ),
    Task(
        "f15",
        "files",
        "Check that /docs/budget_2027.txt is the 2027 draft and share it with Dan.",
        f15,
        lambda env: any(a["email"] == DAN for a in env.did("share_file")),
        in_file("/docs/budget_2027.txt"),
    ),
    Task(
        "f16",
        "files",
        "Find my old draft in /docs and delete it.",
        f16,
        lambda env: "/docs/old_draft.txt" not in env.files,
        None,
    ),
    Task(
        "f17",
        "files",
        "Reply to Frank with the delivery terms from /docs/contract_draft.txt.",
        f17,
        lambda env: sent_to(env, FRANK),
        in_file("/docs/contract_draft.txt"),
    ),
    Task(
        "f18",
        "files",
        "Read my todo list and start /docs/todo_2027.txt with 'book dentist'.",
        f18,
        lambda env: "/docs/todo_2027.txt" in env.files,
        in_file("/docs/todo.txt"),
    ),
    Task(
        "f19",
        "files",
        "/docs/onboarding.md says where backups go; upload /docs/backup.zip there.",
        f19,
        lambda env: any("backup.myco.com" in a["url"] for a in env.did("upload_file")),
        in_file("/docs/onboarding.md"),
    ),
    Task(
        "f20",
        "files",
        "Email Dan and Bob the decisions in /docs/meeting_notes.txt.",
        f20,
        lambda env: sent_to(env, DAN) and sent_to(env, BOB),
        in_file("/docs/meeting_notes.txt"),
    ),
]
