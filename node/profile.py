"""Where a node's round goes: wall and CPU seconds per phase, read from the node's clock
(real, or the sim's virtual one), so every benchmark can say what a round spent on what.

Phases nest: time inside an inner phase (validation inside aggregation, the teacher inside
training, waiting and decoding inside an exchange) counts for the inner one only, and what
no phase claims is "other", so a round's phases add up to its wall time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from node.clock import SYSTEM, Clock

# In the order a round meets them. "record" is writing the node's record (and sketching
# its model): the write after a round's record is made counts in the next round.
PHASES = ("train", "teacher", "encode", "wait", "decode", "distance", "validation",
          "held_influence", "prototype_validation", "influence", "unjudged", "witnesses",
          "aggregation", "evaluation_local", "evaluation_global", "record", "other")
# How the reports group the phases (the rest is "other").
PHASE_GROUPS = {"training": ("train", "teacher"),
                "evaluation": ("evaluation_local", "evaluation_global"),
                "screens": ("distance", "validation", "held_influence", "prototype_validation",
                            "influence", "unjudged", "witnesses"),
                "aggregation": ("aggregation",),
                "messages": ("encode", "decode", "wait")}


def group_shares(phases: Mapping[str, float]) -> dict[str, float]:
    """Each PHASE_GROUPS group's share of the seconds in `phases` (by phase), and "other"
    for the rest; empty where nothing was spent."""
    total = sum(phases.values())
    if total <= 0:
        return {}
    shares = {group: sum(phases.get(p, 0.0) for p in names) / total
              for group, names in PHASE_GROUPS.items()}
    return shares | {"other": 1.0 - sum(shares.values())}


class Profile:
    """Seconds and CPU seconds per phase since the last `take`."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.totals: dict[str, list[float]] = {}
        self.stack = ["other"]
        self.mark = (clock.monotonic(), clock.cpu())

    def _charge(self) -> None:
        """The time since the last mark, to the phase running now."""
        now = (self.clock.monotonic(), self.clock.cpu())
        if now != self.mark:
            spent = self.totals.setdefault(self.stack[-1], [0.0, 0.0])
            spent[0] += now[0] - self.mark[0]
            spent[1] += now[1] - self.mark[1]
            self.mark = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time spent inside counts for `name` (less what inner phases claim)."""
        self._charge()
        self.stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self.stack.pop()

    def take(self) -> dict[str, list[float]]:
        """{phase: [seconds, CPU seconds]} since the last take (rounded to microseconds),
        in PHASES order; the counts start again."""
        self._charge()
        taken, self.totals = self.totals, {}
        return {name: [round(taken[name][0], 6), round(taken[name][1], 6)]
                for name in PHASES if name in taken}


def summed(profiles: list[Mapping[str, list[float]] | None]) -> dict[str, list[float]]:
    """The phases of many rounds (or nodes) added up, in PHASES order."""
    total: dict[str, list[float]] = {}
    for profile in profiles:
        for name, (seconds, cpu) in (profile or {}).items():
            spent = total.setdefault(name, [0.0, 0.0])
            spent[0] += seconds
            spent[1] += cpu
    return {name: [round(total[name][0], 6), round(total[name][1], 6)]
            for name in PHASES if name in total}


def shares(profile: Mapping[str, list[float]], column: int = 1) -> dict[str, float]:
    """Each phase's share of the total (`column` 0: seconds, 1: CPU seconds)."""
    whole = sum(spent[column] for spent in profile.values())
    return {name: spent[column] / whole for name, spent in profile.items()} if whole > 0 \
        else {}
