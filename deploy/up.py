"""`protofed up`: one federation from its config to its end table. The backend's launcher
prepares and starts it (deploy.backends); the views show it while it runs and once it ended
(deploy.views)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

from deploy.backends.launchers import launcher_for
from deploy.backends.plan import new_run_id, prepare_data, write_plan
from deploy.backends.runner import watch
from deploy.run_folder import log_tail, read_node_results
from deploy.terminal import say_files, table_width, warn_if_insecure
from deploy.views.dynamics import dynamics
from deploy.views.monitor import check_port
from deploy.views.pictures import preload as preload_pictures
from deploy.views.pictures import write_run_files
from deploy.views.progress import progress_for
from deploy.views.report import format_table, summarize_records
from deploy.views.tensorboard import TensorBoardExport
from node.config import load
from node.data.custom import add_search_path
from node.errors import ConfigError


def up(args: argparse.Namespace) -> int:
    """`protofed up` with its parsed arguments; the exit code."""
    _stop_on_signals()
    overrides = tuple(args.set) + ((f"deploy.backend={args.backend}",) if args.backend else ())
    add_search_path(Path(args.config).parent)  # where model and data import paths are found
    config = load(args.config, overrides)
    run_id = args.run_id or new_run_id(config)
    _say_what_the_config_means(config)
    launcher = launcher_for(config)  # refuses what its backend cannot run
    cache_dir = prepare_data(config)  # once per federation, before any node exists
    plan = launcher.prepare(Path(args.config), overrides, run_id, cache_dir)
    # the tensorboard package is looked for before anything is written or started
    live = TensorBoardExport(Path(args.tensorboard) / run_id, config.to_dict()
                             ) if args.tensorboard else None
    if args.monitor:
        check_port("127.0.0.1", args.port)  # a busy port stops `up` before any node starts
    _write_or_release(plan, launcher)
    if launcher.memory_note:
        print(f"protofed: {launcher.memory_note}", file=sys.stderr)
    print(f"protofed: run {run_id}: {config.nodes} {config.algorithm} nodes "
          f"({config.deploy.backend}) on {config.topology.kind} topology, {config.rounds} "
          f"rounds, results in {plan.results_dir}", file=sys.stderr)
    try:
        run = launcher.start(plan)
    except KeyboardInterrupt:  # start() stopped and recorded whatever it had started
        launcher.release()
        print("protofed: interrupted while starting the nodes", file=sys.stderr)
        return 130
    page = _start_monitor(plan.results_dir, args.port) if args.monitor else None
    try:
        interrupted, out_of_time = _watch(run, config, live)
        return _conclude(plan, config, run, args, interrupted, out_of_time, live)
    finally:
        if page is not None:
            page.terminate()
            page.wait()


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


def _write_or_release(plan, launcher) -> None:
    """Write the run folder; on failure give back what the launcher reserved."""
    try:
        write_plan(plan)
    except (ConfigError, FileExistsError) as exc:
        launcher.release()
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"results folder {plan.results_dir} already exists: pick another "
                          "--run-id") from None


def _watch(run, config, live: TensorBoardExport | None = None) -> tuple[bool, bool]:
    """Show progress (and write the TensorBoard runs, `live`) until every node ended;
    (interrupted, out of time). Whatever happens, the run's logs are kept and its nodes
    removed."""
    progress = progress_for(config.rounds)
    interrupted = out_of_time = False
    show = _preloading(progress.show)

    def show_and_export(records) -> None:
        show(records)
        if live is not None:
            live.update(records)

    try:
        if not watch(run, show_and_export, deadline=config.timeouts.run or None):
            out_of_time = True
            progress.finish()
            print(f"protofed: timeouts.run ({config.timeouts.run:g} s) passed before every "
                  "node finished: stopping the rest", file=sys.stderr)
            run.stop()
    except KeyboardInterrupt:
        # A second Ctrl-C or `kill` must not cut the stop short and leave nodes running:
        # stopping takes at most the grace period, then the rest is killed.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted = True
        progress.finish()
        print("protofed: interrupted, stopping every node", file=sys.stderr)
        run.stop()
    finally:
        progress.finish()
        run.save_logs()
        run.remove()
    return interrupted, out_of_time


def _conclude(plan, config, run, args: argparse.Namespace, interrupted: bool,
              out_of_time: bool, live: TensorBoardExport | None = None) -> int:
    """The summary, the table, the files, what went wrong; the exit code."""
    records = read_node_results(plan.results_dir, config.nodes)
    if live is not None:
        live.close(records)
        print(f"protofed: TensorBoard runs: {live.folder} (tensorboard --logdir "
              f"{live.folder})", file=sys.stderr)
    summary = _write_summary(plan, config, run, records)
    # the table first, then the pictures
    print(format_table(summary, table_width(args.wide), args.every), flush=True)
    files = write_run_files(plan.results_dir, records)
    stopped = [n["node"] for n in summary["nodes"] if n["status"] == "stopped"]
    if stopped and not (interrupted or out_of_time):
        print(f"protofed: run {plan.run_id}: {len(stopped)} of {config.nodes} nodes were "
              "stopped from outside (`protofed down`, or a signal sent to them)",
              file=sys.stderr)
    # a stopped node was asked to stop (said above): only a failure gets its log's tail
    failed = [n for n in summary["nodes"] if n["status"] not in ("finished", "stopped", "left")]
    for row in [] if interrupted else failed:
        node_id = row["node"]
        why = " (killed: out of memory)" if node_id in getattr(run, "oom_killed", ()) else ""
        print(f"\nnode {node_id} did not finish (exit code {run.exit_codes.get(node_id)}"
              f"{why}, status {row['status']}); last lines of its log:", file=sys.stderr)
        print(log_tail(plan.results_dir, node_id), file=sys.stderr)
    print(f"\nresults: {plan.results_dir}", file=sys.stderr)
    say_files(files)
    if interrupted:
        return 130
    return 1 if failed or stopped else 0


def _preloading(show):
    """`show`, which also loads the drawing libraries once every node has recorded round 0:
    after start-up, while the nodes train, so neither start-up nor the end waits for it."""
    loaded = False

    def show_and_preload(results) -> None:
        nonlocal loaded
        show(results)
        if not loaded and results and all(r.rounds for r in results):
            loaded = True
            preload_pictures()

    return show_and_preload


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _write_summary(plan, config, run, records) -> dict:
    summary = summarize_records(records, plan.run_id, {
        "config_digest": plan.federation.config.digest(), "algorithm": config.algorithm,
        "topology": config.topology.kind, "rounds": config.rounds,
        "exit_codes": {str(k): v for k, v in sorted(run.exit_codes.items())},
        **dynamics(records, config.report.target_f1)},
        exit_codes=dict(run.exit_codes))
    (plan.results_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _start_monitor(run_dir: Path, port: int) -> subprocess.Popen:
    """`protofed monitor` of this run in its own process (nothing threaded in the launcher,
    which forks nodes); stopped when `up` ends."""
    process = subprocess.Popen([sys.executable, "-m", "deploy.cli", "monitor", str(run_dir),
                                "--port", str(port)], stdin=subprocess.DEVNULL,
                               start_new_session=True)
    print(f"protofed: monitor: http://127.0.0.1:{port}/", file=sys.stderr)
    return process
