"""Progress of a running federation: a live table per node on a terminal, plain lines (one
per round the whole federation completes) in a pipe or a file, an HTML table redrawn in
place in a Jupyter notebook."""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from node.record import ENDED_STATUSES, NodeRecord, final_evaluation, measured
from node.wording import counted

ENDED = ENDED_STATUSES


def clock_text(seconds: float) -> str:
    """A duration as m:ss, or h:mm:ss from an hour."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def seconds_left(training_seconds: float, rounds_done: float, rounds: int) -> float | None:
    """The time the remaining rounds should take at the pace of those done so far (start-up
    left out: `training_seconds` counts from when every node had started); None before the
    first round ends."""
    if rounds_done <= 0:
        return None
    return training_seconds / rounds_done * max(rounds - rounds_done, 0)


class Timing:
    """Elapsed time since the launch (preparing the run included) and, once every node
    started, the time left."""

    def __init__(self, rounds: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rounds = rounds
        self.clock = clock
        self.launched = clock()
        self.training_since: float | None = None  # when every node had recorded round 0

    def text(self, rounds_done: float) -> str:
        now = self.clock()
        if self.training_since is None:
            return f"{clock_text(now - self.launched)} elapsed"
        left = seconds_left(now - self.training_since, rounds_done, self.rounds)
        estimate = "" if left is None or rounds_done >= self.rounds else \
            f", about {clock_text(left)} left"
        return f"{clock_text(now - self.launched)} elapsed{estimate}"

    def look(self, results: list[NodeRecord]) -> None:
        """Note when the training started: the first look at which every node has started."""
        if self.training_since is None and results and all(r.rounds for r in results):
            self.training_since = self.clock()


def mean_rounds_done(results: list[NodeRecord]) -> float:
    """Rounds done, averaged over the nodes (0 before any record)."""
    return sum(r.rounds_done for r in results) / len(results) if results else 0.0


def node_state(record: NodeRecord) -> str:
    """What a node is doing, in a word: waiting for its process, starting, or its status."""
    return {"missing": "waiting", "starting": "starting"}.get(record.status, record.status)


def _f1_text(record: NodeRecord) -> str:
    """The latest global-test F1 the node recorded (round 0 is the untrained model)."""
    evaluation = final_evaluation(record, "global_test")
    return "-" if evaluation is None or not measured(evaluation) else f"{evaluation.f1:.4f}"


class LiveProgress:
    """One row per node (state, a bar of rounds done, bytes so far, last F1), redrawn in
    place while the federation runs."""

    def __init__(self, rounds: int, stream: TextIO,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rounds = rounds
        self.timing = Timing(rounds, clock)
        # started at the first look, so the lines said while the run is prepared stay plain
        self.live = Live(Table(), console=Console(file=stream), auto_refresh=False,
                         transient=True)

    def table(self, results: list[NodeRecord]) -> Table:
        self.timing.look(results)
        caption = self.timing.text(mean_rounds_done(results))
        table = Table(box=None, pad_edge=False, caption=caption, caption_justify="left")
        for column, justify in (("node", "right"), ("state", "left"), ("rounds", "left"),
                                ("", "right"), ("bytes sent", "right"),
                                ("bytes received", "right"), ("last F1", "right")):
            table.add_column(column, justify=justify)
        for r in results:
            table.add_row(str(r.node), node_state(r),
                          ProgressBar(total=self.rounds, completed=r.rounds_done, width=20),
                          f"{r.rounds_done}/{self.rounds}", f"{r.bytes_sent:,}",
                          f"{r.bytes_received:,}", _f1_text(r))
        return table

    def show(self, results: list[NodeRecord]) -> None:
        if not self.live.is_started:
            self.live.start()
        self.live.update(self.table(results), refresh=True)

    def finish(self) -> None:
        if self.live.is_started:
            self.live.stop()


class LineProgress:
    """A line when every node has started, one per round the whole federation completes,
    and one for each node that ends other than finished."""

    def __init__(self, rounds: int, stream: TextIO,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rounds = rounds
        self.stream = stream
        self.timing = Timing(rounds, clock)
        self.federation_round = -1
        self.reported_ends: set[int] = set()

    def lines(self, results: list[NodeRecord]) -> list[str]:
        """The lines this look at the nodes adds to what was printed before."""
        out = []
        for r in results:
            if r.status in ENDED and r.status != "finished" and r.node not in self.reported_ends:
                self.reported_ends.add(r.node)
                out.append(f"node {r.node} {r.status} after {r.rounds_done}/{self.rounds} "
                           "rounds")
        working = [r for r in results if r.node not in self.reported_ends]
        if not working or any(not r.rounds for r in working):
            return out
        self.timing.look(working)
        done = min(r.rounds_done for r in working)
        if done >= self.rounds and not all(r.status in ENDED for r in working):
            # the last line waits for every node's end: its goodbyes are sent after its
            # last round, and the line's bytes must be the table's total
            done = self.rounds - 1
        # Every round completed since the last look gets its line, even when the nodes
        # finished several between two looks.
        for k in range(self.federation_round + 1, done + 1):
            out.append(self._round_line(k, results))
        self.federation_round = max(self.federation_round, done)
        return out

    def _round_line(self, k: int, results: list[NodeRecord]) -> str:
        """Round k across the federation: the nodes that recorded it (one that left or
        failed since counts in the rounds it did), their mean global-test F1, and the bytes
        every node sent up to and including round k."""
        scores = [rr.global_test.f1 for r in results for rr in r.rounds
                  if rr.round == k and measured(rr.global_test)]
        present = sum(1 for r in results if any(rr.round == k for rr in r.rounds))
        mean = f"{sum(scores) / len(scores):.4f}" if scores else "-"
        sent = (sum(r.bytes_sent for r in results) if k == self.rounds else  # with goodbyes
                sum(rr.bytes_sent for r in results for rr in r.rounds if rr.round <= k))
        what = "every node started (round 0)" if k == 0 else f"round {k}/{self.rounds}"
        return f"{what}: {counted(present, 'node')}, mean F1 {mean}, {sent:,} bytes sent, " \
               f"{self.timing.text(k)}"

    def show(self, results: list[NodeRecord]) -> None:
        for line in self.lines(results):
            print(line, file=self.stream, flush=True)

    def finish(self) -> None:
        pass


def progress_html(results: list[NodeRecord], rounds: int, caption: str) -> str:
    """The live table's rows as HTML: node, state, rounds done, bytes, last F1."""
    head = "".join(f"<th>{h}</th>" for h in ("node", "state", "rounds", "bytes sent",
                                             "bytes received", "last F1"))
    rows = "".join(
        f"<tr><td>{r.node}</td><td>{html.escape(node_state(r))}</td>"
        f"<td><progress max='{rounds}' value='{r.rounds_done}'></progress> "
        f"{r.rounds_done}/{rounds}</td><td>{r.bytes_sent:,}</td><td>{r.bytes_received:,}</td>"
        f"<td>{_f1_text(r)}</td></tr>" for r in results)
    return (f"<table><caption style='caption-side: bottom; text-align: left'>"
            f"{html.escape(caption)}</caption><tr>{head}</tr>{rows}</table>")


class NotebookProgress:
    """The live table in a Jupyter notebook: one output redrawn in place (IPython's
    display handles), nothing written to the terminal."""

    def __init__(self, rounds: int, clock: Callable[[], float] = time.monotonic) -> None:
        from IPython.display import HTML, display

        self.rounds, self.html = rounds, HTML
        self.timing = Timing(rounds, clock)
        self.handle = display(HTML("starting the nodes"), display_id=True)

    def show(self, results: list[NodeRecord]) -> None:
        self.timing.look(results)
        self.handle.update(self.html(progress_html(
            results, self.rounds, self.timing.text(mean_rounds_done(results)))))

    def finish(self) -> None:
        pass


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython's ZMQ shell)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        running = shell.get_ipython()
    except AttributeError:
        return False
    return running is not None and type(running).__name__ == "ZMQInteractiveShell"


def progress_for(rounds: int, stream: TextIO | None = None) -> LiveProgress | LineProgress:
    """The live table on a terminal, plain lines anywhere else (a pipe, a file, CI)."""
    stream = stream or sys.stderr
    if Console(file=stream).is_terminal:
        return LiveProgress(rounds, stream)
    return LineProgress(rounds, stream)
