"""What every backend shares about a started federation: watching it, how it ended, its
run.json and its nodes' logs."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Protocol

from deploy.backends.plan import Plan
from deploy.run_folder import RecordReader

STOP_EXITS = frozenset({128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT,
                        -signal.SIGTERM})


class Run(Protocol):
    """A started federation, whatever runs its nodes."""

    plan: Plan
    exit_codes: dict[int, int]

    def poll_exits(self) -> dict[int, int]: ...
    def wait(self, timeout: float) -> None: ...
    def stop(self, grace: float = 5.0) -> None: ...
    def save_logs(self) -> None: ...
    def remove(self) -> None: ...


# At most this share of a core goes to reading the records: a record grows with every round
# (7.7 MB at round 1,000 of a 5-node run), and reading five of them twice a second would
# take half a core from the nodes.
WATCH_SHARE = 0.1


def next_pause(interval: float, cpu_seconds: float) -> float:
    """Seconds until the records are read again, the last read having taken `cpu_seconds`:
    `interval`, or longer where reading takes more than WATCH_SHARE of a core."""
    return max(interval, cpu_seconds / WATCH_SHARE)


def watch(run: Run, on_progress: Callable[[list[dict]], None], interval: float = 0.5,
          deadline: float | None = None) -> bool:
    """Wait until every node has exited, reporting progress from their result files at
    most every `interval` seconds (`next_pause`), and once more when the last node has
    exited.

    False if `deadline` (seconds from now) passed first; the nodes are left running.
    """
    nodes = len(run.plan.nodes)
    ends = None if deadline is None else time.monotonic() + deadline
    reported, pause = -interval, interval  # when progress was last read; until the next
    records = RecordReader(run.plan.results_dir, nodes)
    while True:
        exits = run.poll_exits()
        now = time.monotonic()
        # Nodes exit one after another at the end: reading every result file at each exit
        # would delay the end by as many reads as there are nodes.
        if len(exits) == nodes or now - reported >= pause:
            spent = time.thread_time()
            on_progress(records.read())
            reported, pause = now, next_pause(interval, time.thread_time() - spent)
        if len(exits) == nodes:
            return True
        if ends is not None and time.monotonic() >= ends:
            return False
        run.wait(max(0.0, reported + pause - time.monotonic()))  # early when one exits


def run_status(exit_codes: dict[int, int], nodes: int, stopping: bool) -> str:
    """"finished" when every node exited 0; "stopped" when the launcher stopped them or
    they were asked to stop (`protofed down`, a signal); "failed" otherwise."""
    unfinished = [code for code in exit_codes.values() if code != 0]
    if not unfinished and len(exit_codes) == nodes:
        return "finished"
    if stopping or (unfinished and all(code in STOP_EXITS for code in unfinished)):
        return "stopped"
    return "failed"
