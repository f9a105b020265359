"""The scenario suites: benign tasks in five domains, and attacker goals planted in what the
tasks read, each in one of several framings.

The parts: ``scenario`` (what a task, a goal and an injection are; where injections go; the
checks of the world), the tasks of each domain (``tasks_mail``, ``tasks_banking``,
``tasks_files``, ``tasks_web``, ``tasks_travel``), and the goals (``goals``: the attacker's own
destinations, plain and disguised, and covert links; ``goals_more``: values trusted by
accident, private data to a destination the user named, actions nobody asked for)."""

from __future__ import annotations

from tests.dataflow.goals import DIRECT, LINKS, OBFUSCATED
from tests.dataflow.goals_more import READERS, TYPED, UNREQUESTED
from tests.dataflow.scenario import (
    DOMAINS,
    FRAMINGS,
    KINDS,
    Agent,
    Goal,
    Injection,
    Task,
)
from tests.dataflow.tasks_banking import BANK
from tests.dataflow.tasks_files import FILES
from tests.dataflow.tasks_mail import MAIL
from tests.dataflow.tasks_travel import TRAVEL
from tests.dataflow.tasks_web import WEB

__all__ = [
    "DOMAINS",
    "FRAMINGS",
    "GOALS",
    "KINDS",
    "TASKS",
    "Agent",
    "Goal",
    "Injection",
    "Task",
    "injections",
]

TASKS: list[Task] = [*MAIL, *BANK, *FILES, *WEB, *TRAVEL]
GOALS: list[Goal] = [*DIRECT, *OBFUSCATED, *LINKS, *TYPED, *READERS, *UNREQUESTED]

ROTATED = 3  # goals each injectable task gets from its domain's rotation


def injections() -> list[tuple[Task, Injection]]:
    """Every task that reads untrusted data, with three goals from its domain's rotation and
    every targeted goal its request sets up, in rotating framings. Deterministic: the same
    pairs in the same order each time."""
    framings = sorted(FRAMINGS)
    rotated = [g for g in GOALS if g.targets is None]
    turn = dict.fromkeys(DOMAINS, 0)
    pairs: list[tuple[Task, Injection]] = []
    injectable = [t for t in TASKS if t.plant is not None]
    for k, task in enumerate(injectable):
        pool = [g for g in rotated if g.fits(task)]
        chosen: list[Goal] = []
        for _ in range(ROTATED):
            chosen.append(pool[turn[task.domain] % len(pool)])
            turn[task.domain] += 1
        chosen += [g for g in GOALS if g.targets is not None and g.fits(task)]
        for j, goal in enumerate(chosen):
            pairs.append((task, Injection(goal, framings[(k + j) % len(framings)])))
    return pairs
