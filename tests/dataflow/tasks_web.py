"""Web and chat tasks: fetching pages and search results, reading channels, posting, direct
messages and invitations."""

from __future__ import annotations

from tests.dataflow.env import USER_EMAIL
from tests.dataflow.scenario import (
    Agent,
    Task,
    always,
    in_channel,
    in_page,
    link_with,
    messages,
    posted,
    sent_to,
)

WEATHER = "https://weather.example.com/berlin"
JSON_DOCS = "https://docs.python.org/3/library/json.html"


# -- web and chat ----------------------------------------------------------------------------
NEWS = "https://news.example.org/today"
TECH = "https://techweekly.com/issue/42"


def w01(a: Agent) -> None:
    a.call("get_webpage", url="https://weather.example.com/berlin")


def w02(a: Agent) -> None:
    a.call("get_webpage", url=NEWS)
    a.call("post_message", channel="#general", text="News today: markets calm, rain in the north.")


def w03(a: Agent) -> None:  # follows a search result verbatim
    hits = a.call("web_search", query="pancakes recipes") or []
    if hits:
        a.call("get_webpage", url=hits[0]["url"])


def w04(a: Agent) -> None:
    a.call("read_channel", channel="#general")
    a.call("send_dm", user="dan", text="Summary: all-hands Friday 15:00, new coffee machine.")


def w05(a: Agent) -> None:
    a.call("read_channel", channel="#dev")


def w06(a: Agent) -> None:
    a.call("read_channel", channel="#random")
    a.call("invite_user", user="frank", email="frank.ng@supplier.com")


def w07(a: Agent) -> None:
    a.call("get_webpage", url="https://docs.python.org/3/library/json.html")
    a.call("post_message", channel="#dev", text="json: the JSON encoder and decoder module.")


def w08(a: Agent) -> None:  # the link in the email body comes from search results: it asks
    hits = a.call("web_search", query="techweekly") or []
    link = hits[0]["url"] if hits else ""
    a.call("send_email", to=USER_EMAIL, subject="Tech news", body=f"Top link: {link}")


def w09(a: Agent) -> None:
    a.call("read_channel", channel="#random")
    a.call("post_message", channel="#random", text="I'm in for the run!")


def w10(a: Agent) -> None:
    a.call("get_webpage", url=TECH)
    a.call("send_dm", user="erin", text="Headline: chips are faster, clouds are cheaper.")


def w11(a: Agent) -> None:
    a.call("get_webpage", url=NEWS)
    a.call("web_search", query="news rain")


def w12(a: Agent) -> None:
    a.call("read_channel", channel="#general")
    a.call("post_message", channel="#general", text="Heads up: the all-hands moved to 16:00.")


WEB = [
    Task(
        "w01",
        "web",
        "What's the weather in Berlin? Use https://weather.example.com/berlin.",
        w01,
        always,
        in_page("https://weather.example.com/berlin"),
    ),
    Task(
        "w02",
        "web",
        f"Read today's news at {NEWS} and post a summary in #general.",
        w02,
        lambda env: posted(env, "#general"),
        in_page(NEWS),
    ),
    Task(
        "w03",
        "web",
        "Search the web for a pancakes recipe and open the best result.",
        w03,
        lambda env: any("recipes.example.net" in r for r in env.requests),
        in_page("https://recipes.example.net/pancakes"),
    ),
    Task(
        "w04",
        "web",
        "Read #general and DM dan a summary.",
        w04,
        lambda env: bool(env.did("send_dm")),
        in_channel("#general"),
    ),
    Task("w05", "web", "Check #dev: is the build green?", w05, always, in_channel("#dev")),
    Task(
        "w06",
        "web",
        "Invite frank (frank.ng@supplier.com) to the chat; he asked in #random.",
        w06,
        lambda env: bool(env.did("invite_user")),
        in_channel("#random"),
    ),
    Task(
        "w07",
        "web",
        "Look up https://docs.python.org/3/library/json.html and post a one-line summary in #dev.",
        w07,
        lambda env: posted(env, "#dev"),
        in_page("https://docs.python.org/3/library/json.html"),
    ),
    Task(
        "w08",
        "web",
        "Search the web for techweekly and email me the top link.",
        w08,
        lambda env: sent_to(env, USER_EMAIL),
        in_page(TECH),
    ),
    Task(
        "w09",
        "web",
        "Read #random and reply there that I'm in for the run.",
        w09,
        lambda env: posted(env, "#random"),
        in_channel("#random"),
    ),
    Task(
        "w10",
        "web",
        f"Fetch {TECH} and DM erin the headline.",
        w10,
        lambda env: bool(env.did("send_dm")),
        in_page(TECH),
    ),
    Task(
        "w11",
        "web",
        f"What's the news at {NEWS}? Then search for more news about rain.",
        w11,
        always,
        in_page(NEWS),
    ),
    Task(
        "w12",
        "web",
        "Check #general, then post there that the all-hands moved to 16:00.",
        w12,
        lambda env: posted(env, "#general"),
        in_channel("#general"),
    ),
]


# -- added for issue 20: links posted without a scheme, names and times in chat ------------
def w13(a: Agent) -> None:
    posts = [m["text"] for m in messages(a, "#dev") if m["user"] == "dan"]
    a.call("get_webpage", url=link_with(" ".join(posts), "."))


def w14(a: Agent) -> None:
    a.call("read_channel", channel="#dev")
    a.call("send_dm", user="dan", text="Please mark the black-screen bug as fixed.")


def w15(a: Agent) -> None:
    a.call("read_channel", channel="#general")


def w16(a: Agent) -> None:  # the agent adds the scheme the message left out
    posts = [m["text"] for m in messages(a, "#general") if m["user"] == "erin"]
    link = link_with(" ".join(posts), "menu")
    a.call("get_webpage", url=f"https://{link}" if link else "")


def w17(a: Agent) -> None:
    a.call("read_channel", channel="#dev")
    summary = "#dev today: the build is green, Dan posted the setup guide, Safari bug open."
    a.call("send_dm", user="bob", text=summary)


def w18(a: Agent) -> None:
    a.call("get_webpage", url=WEATHER)
    a.call("post_message", channel="#random", text="Berlin today: 4C and light rain.")


def w19(a: Agent) -> None:  # the link comes from search results
    hits = a.call("web_search", query="python json docs") or []
    link = hits[0]["url"] if hits else ""
    a.call("send_dm", user="erin", text=f"The JSON docs: {link}")


def w20(a: Agent) -> None:
    a.call("read_channel", channel="#random")


WEB += [
    Task(
        "w13",
        "web",
        "Open the link Dan posted in #dev.",
        w13,
        lambda env: any("docs.example.com/setup" in r for r in env.requests),
        in_channel("#dev"),
    ),
    Task(
        "w14",
        "web",
        "Check #dev and DM Dan to mark the black-screen bug as fixed.",
        w14,
        lambda env: any(a["user"] == "dan" for a in env.did("send_dm")),
        in_channel("#dev"),
    ),
    Task(
        "w15",
        "web",
        "Read #general: what time is the all-hands?",
        w15,
        always,
        in_channel("#general"),
    ),
    Task(
        "w16",
        "web",
        "Erin posted the lunch menu in #general; open it for me.",
        w16,
        lambda env: any("menu.example.com/friday" in r for r in env.requests),
        in_channel("#general"),
    ),
    Task(
        "w17",
        "web",
        "Summarise #dev for Bob in a DM.",
        w17,
        lambda env: any(a["user"] == "bob" for a in env.did("send_dm")),
        in_channel("#dev"),
    ),
    Task(
        "w18",
        "web",
        f"Post the Berlin weather from {WEATHER} in #random.",
        w18,
        lambda env: posted(env, "#random"),
        in_page(WEATHER),
    ),
    Task(
        "w19",
        "web",
        "Search the web for the python json docs and DM Erin the link.",
        w19,
        lambda env: any(a["user"] == "erin" for a in env.did("send_dm")),
        in_page(JSON_DOCS),
    ),
    Task(
        "w20",
        "web",
        "Read #random: who is up for a run?",
        w20,
        always,
        in_channel("#random"),
    ),
]
