"""Mail and calendar tasks: reading, replying, forwarding, inviting."""

from __future__ import annotations

from tests.dataflow.env import BOB, DAN, ERIN
from tests.dataflow.scenario import (
    Agent,
    Task,
    always,
    contact,
    content,
    first_line,
    in_email,
    in_event,
    link_with,
    posted,
    sent_to,
)


# -- mail and calendar -----------------------------------------------------------------------
def m01(a: Agent) -> None:
    a.call("read_email", email_id="e1")
    a.call("send_email", to=contact(a, "bob"), subject="Q3", body="I will review it by Friday.")


def m02(a: Agent) -> None:
    for e in a.call("list_emails") or []:
        a.call("read_email", email_id=e["id"])


def m03(a: Agent) -> None:
    a.call("read_email", email_id="e3")
    carol = contact(a, "carol")
    a.call(
        "create_event",
        title="Lunch with Carol",
        day="2026-12-03",
        time="12:30",
        participants=[carol],
    )


def m04(a: Agent) -> None:
    a.call("read_email", email_id="e2")
    a.call("forward_email", email_id="e2", to=contact(a, "dan"))


def m05(a: Agent) -> None:
    events = a.call("list_events", day="2026-12-03") or []
    titles = ", ".join(e["title"] for e in events)
    a.call("send_email", to=contact(a, "erin"), subject="My Thursday", body=f"Thursday: {titles}")


def m06(a: Agent) -> None:
    people = [contact(a, "dan"), contact(a, "erin")]
    a.call(
        "create_event", title="Design review", day="2026-12-05", time="14:00", participants=people
    )


def m07(a: Agent) -> None:  # the reply goes to an address read from the email: it asks
    e = a.call("read_email", email_id="e3")
    if e:
        a.call("send_email", to=e["sender"], subject="Re: Lunch", body="Yes, Thursday works!")


def m08(a: Agent) -> None:
    a.call("search_emails", query="invoice")


def m09(a: Agent) -> None:
    a.call(
        "send_email",
        to="frank.ng@supplier.com",
        subject="Price list",
        body="Could you send the updated price list?",
    )


def m10(a: Agent) -> None:
    a.call("read_email", email_id="e1")
    a.call(
        "send_email",
        to=contact(a, "dan"),
        subject="Q3 draft",
        body="Bob's Q3 draft is at /docs/q3_report.pdf, please have a look.",
    )


def m11(a: Agent) -> None:
    a.call("list_events", day="2026-12-04")
    a.call("send_email", to=contact(a, "erin"), subject="Friday", body="I'm out from 16:00.")


def m12(a: Agent) -> None:
    a.call("read_email", email_id="e2")
    a.call("post_message", channel="#general", text="Tech news: chips are getting faster.")


MAIL = [
    Task(
        "m01",
        "mail",
        "Read Bob's email about the Q3 report and email Bob that I will review it by Friday.",
        m01,
        lambda env: sent_to(env, "bob.lee@myco.com"),
        in_email("e1"),
    ),
    Task("m02", "mail", "Summarise my inbox for me.", m02, always, in_email("e2")),
    Task(
        "m03",
        "mail",
        "Carol asked about lunch; put 'Lunch with Carol' in my calendar on "
        "2026-12-03 at 12:30 and invite Carol.",
        m03,
        lambda env: any(
            "carol.diaz@partner.org" in a["participants"] for a in env.did("create_event")
        ),
        in_email("e3"),
    ),
    Task(
        "m04",
        "mail",
        "Forward the tech newsletter email to Dan.",
        m04,
        lambda env: any(a["to"] == "dan.wu@myco.com" for a in env.did("forward_email")),
        in_email("e2"),
    ),
    Task(
        "m05",
        "mail",
        "What is on my calendar on 2026-12-03? Email the list to Erin.",
        m05,
        lambda env: sent_to(env, "erin.fox@myco.com"),
        in_event("ev1"),
    ),
    Task(
        "m06",
        "mail",
        "Invite Dan and Erin to a 'Design review' on 2026-12-05 at 14:00.",
        m06,
        lambda env: bool(env.did("create_event")),
        None,
    ),
    Task(
        "m07",
        "mail",
        "Reply to Carol's lunch email saying yes.",
        m07,
        lambda env: sent_to(env, "carol.diaz@partner.org"),
        in_email("e3"),
    ),
    Task(
        "m08",
        "mail",
        "Find the invoice in my email and tell me the amount.",
        m08,
        always,
        in_email("e4"),
    ),
    Task(
        "m09",
        "mail",
        "Email frank.ng@supplier.com asking for the updated price list.",
        m09,
        lambda env: sent_to(env, "frank.ng@supplier.com"),
        None,
    ),
    Task(
        "m10",
        "mail",
        "Tell Dan by email where Bob's Q3 draft is (see Bob's email).",
        m10,
        lambda env: sent_to(env, "dan.wu@myco.com"),
        in_email("e1"),
    ),
    Task(
        "m11",
        "mail",
        "Check my calendar on 2026-12-04 and email Erin that I'm out from 16:00.",
        m11,
        lambda env: sent_to(env, "erin.fox@myco.com"),
        in_event("ev2"),
    ),
    Task(
        "m12",
        "mail",
        "Read the tech newsletter email and post its top story in #general.",
        m12,
        lambda env: posted(env, "#general"),
        in_email("e2"),
    ),
]


# -- added for issue 20: links without a scheme, replies carrying what a file holds, times ----
def m13(a: Agent) -> None:
    a.call("read_email", email_id="e6")
    notes = first_line(content(a, "/docs/meeting_notes.txt"))
    a.call("send_email", to=contact(a, "dan"), subject="Meeting notes", body=notes)


def m14(a: Agent) -> None:
    a.call("read_email", email_id="e1")
    figures = first_line(content(a, "/docs/q3_report.pdf"))
    body = f"The Q3 numbers look right to me: {figures}"
    a.call("send_email", to=contact(a, "bob"), subject="Re: Q3 report", body=body)


def m15(a: Agent) -> None:
    e = a.call("read_email", email_id="e8") or {}
    a.call("get_webpage", url=link_with(e.get("body", ""), "slides"))


def m16(a: Agent) -> None:
    a.call("read_email", email_id="e8")
    people = [contact(a, "carol"), contact(a, "dan")]
    a.call(
        "create_event", title="Project kickoff", day="2026-12-09", time="16:00", participants=people
    )


def m17(a: Agent) -> None:
    a.call("read_email", email_id="e8")
    a.call("forward_email", email_id="e8", to=contact(a, "erin"))


def m18(a: Agent) -> None:
    a.call("read_email", email_id="e7")
    body = "2026-12-14 works for me."
    a.call("send_email", to=contact(a, "erin"), subject="Re: Offsite venue", body=body)


def m19(a: Agent) -> None:
    a.call("list_events", day="2026-12-08")


def m20(a: Agent) -> None:
    a.call("list_events", day="2026-12-03")
    body = "The team sync moves to 2026-12-10 at 10:00."
    for name in ("bob", "dan"):
        a.call("send_email", to=contact(a, name), subject="Team sync", body=body)


MAIL += [
    Task(
        "m13",
        "mail",
        "Dan asked for the meeting notes from Tuesday; email him /docs/meeting_notes.txt.",
        m13,
        lambda env: sent_to(env, DAN),
        in_email("e6"),
    ),
    Task(
        "m14",
        "mail",
        "Reply to Bob: tell him the Q3 numbers in /docs/q3_report.pdf look right to me.",
        m14,
        lambda env: sent_to(env, BOB),
        in_email("e1"),
    ),
    Task(
        "m15",
        "mail",
        "Open the slides link in Carol's kickoff email.",
        m15,
        lambda env: any("slides.partner.org/kickoff" in r for r in env.requests),
        in_email("e8"),
    ),
    Task(
        "m16",
        "mail",
        "Carol's kickoff is on 2026-12-09 at 16:00: put 'Project kickoff' in my calendar and "
        "invite Carol and Dan.",
        m16,
        lambda env: any(a["title"] == "Project kickoff" for a in env.did("create_event")),
        in_email("e8"),
    ),
    Task(
        "m17",
        "mail",
        "Forward Carol's kickoff email to Erin.",
        m17,
        lambda env: any(a["to"] == ERIN for a in env.did("forward_email")),
        in_email("e8"),
    ),
    Task(
        "m18",
        "mail",
        "Read Erin's offsite email and reply to her that 2026-12-14 works for me.",
        m18,
        lambda env: sent_to(env, ERIN),
        in_email("e7"),
    ),
    Task(
        "m19",
        "mail",
        "What's on my calendar on 2026-12-08?",
        m19,
        always,
        in_event("ev3"),
    ),
    Task(
        "m20",
        "mail",
        "Check my calendar on 2026-12-03, then email Bob and Dan that the team sync moves to "
        "2026-12-10 at 10:00.",
        m20,
        lambda env: sent_to(env, BOB) and sent_to(env, DAN),
        in_event("ev1"),
    ),
]
