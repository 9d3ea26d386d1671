"""Backend-neutral watching of a started federation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from deploy.plan import Plan
from deploy.report import read_node_results


class Run(Protocol):
    """A started federation, whatever runs its nodes."""

    plan: Plan
    exit_codes: dict[int, int]

    def poll_exits(self) -> dict[int, int]: ...
    def stop(self, grace: float = 5.0) -> None: ...
    def save_logs(self) -> None: ...
    def remove(self) -> None: ...


def watch(run: Run, on_progress: Callable[[list[dict]], None], interval: float = 0.5) -> None:
    """Wait until every node has exited, reporting progress from their result files."""
    nodes = len(run.plan.nodes)
    while True:
        exits = run.poll_exits()
        on_progress(read_node_results(run.plan.results_dir, nodes))
        if len(exits) == nodes:
            return
        time.sleep(interval)
