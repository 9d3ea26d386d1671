"""`protofed up`: one federation from its config to its end table on the terminal. The run
itself is deploy.launch's; this module owns what the terminal
shows: the live progress, the table, the files and what went wrong."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from deploy.launch import Outcome, launch, load_config
from deploy.run_folder import log_tail
from deploy.terminal import outlive_the_terminal, say_files, table_width, warn_if_insecure
from deploy.views.progress import progress_for
from deploy.views.report import format_table


def up(args: argparse.Namespace) -> int:
    """`protofed up` with its parsed arguments; the exit code."""
    _stop_on_signals()
    outlive_the_terminal()
    overrides = tuple(args.set) + ((f"deploy.backend={args.backend}",) if args.backend else ())
    config, source = load_config(args.config, overrides)
    _say_what_the_config_means(config)

    def print_table(summary: dict) -> None:  # the table first, then the pictures
        print(format_table(summary, table_width(args.wide), args.every), flush=True)

    try:
        outcome = launch(config, source, overrides, args.run_id, say=_say,
                         progress=progress_for(config.rounds),
                         tensorboard=Path(args.tensorboard) if args.tensorboard else None,
                         monitor_port=args.port if args.monitor else None,
                         on_summary=print_table)
    except KeyboardInterrupt:  # while starting: launch stopped what it had started
        return 130
    _conclude(outcome, config.nodes)
    return outcome.exit_code


def _stop_on_signals() -> None:
    """Ctrl-C and `kill` stop the run, from the first moment: a shell starts background
    commands with SIGINT ignored, and Python then never raises Ctrl-C by itself; before a
    node starts they end the launcher through main()'s KeyboardInterrupt."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def _say_what_the_config_means(config) -> None:
    """One line for a federation that will not federate, one for one that is not secured."""
    if config.nodes == 1:
        print("protofed: nodes = 1: a single node trains on its own and exchanges nothing",
              file=sys.stderr)
    warn_if_insecure(config)


def _say(line: str) -> None:
    print(f"protofed: {line}", file=sys.stderr, flush=True)


def _conclude(outcome: Outcome, nodes: int) -> None:
    """What went wrong, and where the results are."""
    stopped = outcome.stopped
    if stopped and not (outcome.interrupted or outcome.out_of_time):
        _say(f"run {outcome.plan.run_id}: {len(stopped)} of {nodes} nodes were stopped from "
             "outside (`protofed down`, or a signal sent to them)")
    # a stopped node was asked to stop (said above): only a failure gets its log's tail
    for node_id in [] if outcome.interrupted else outcome.failed:
        row = outcome.summary["nodes"][node_id]
        why = " (killed: out of memory)" if node_id in outcome.oom_killed else ""
        print(f"\nnode {node_id} did not finish (exit code {outcome.exit_codes.get(node_id)}"
              f"{why}, status {row['status']}); last lines of its log:", file=sys.stderr)
        print(log_tail(outcome.plan.results_dir, node_id), file=sys.stderr)
    print(f"\nresults: {outcome.plan.results_dir}", file=sys.stderr)
    say_files(outcome.files)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
