"""Where a node reads the time: the system's clocks, or a simulation's virtual ones.

The round loop, the peers' deadlines and the records read time only through a Clock, so
the same code runs between real processes and in virtual time (node.sim).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds for deadlines and durations, Unix time for records, CPU seconds used."""

    def monotonic(self) -> float: ...
    def time(self) -> float: ...
    def cpu(self) -> float: ...


class SystemClock:
    """The process's own clocks: a node that is a process of its own."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def cpu(self) -> float:
        return time.process_time()


SYSTEM = SystemClock()
