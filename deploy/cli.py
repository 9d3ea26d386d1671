"""The `protofed` command: start, watch, summarise and stop federations."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import signal
import sys
from pathlib import Path

from deploy.backends import compose as compose_file
from deploy.backends import swarm_backend as swarm
from deploy.backends.launchers import fleets
from deploy.backends.plan import checked_run_id, new_run_id
from deploy.ending import finish_without_launcher, still_running
from deploy.partition import partition
from deploy.run_folder import FEDERATION_FILE, read_node_results
from deploy.terminal import say_files, table_width, warn_if_insecure
from deploy.up import up
from deploy.views.dynamics import dynamics
from deploy.views.monitor import serve
from deploy.views.pictures import write_run_files
from deploy.views.report import ROW_LIMIT, format_table, summarize_records
from deploy.views.tensorboard import export
from node.config import load
from node.errors import ConfigError, ProtofedError
from node.federation import read as read_federation
from node.lifecycle import exit_now
from node.settings import BACKENDS
from node.wording import counted

log = logging.getLogger("protofed")


def _version() -> str:
    """The installed package's version."""
    try:
        return importlib.metadata.version("protofed")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


ALL_HELP = (f"the end table with a row for every node (default: beyond {ROW_LIMIT} nodes, "
            "the best and worst and any that did not finish)")
WIDE_HELP = ("the end table with every column, however wide (default: the columns that "
             "fit the terminal)")


MONITOR_PORT = 8765


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="protofed", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"protofed {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start a federation and wait for it to finish")
    up.add_argument("-c", "--config", required=True, help="federation TOML file")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key for this run, e.g. --set topology.kind=ring")
    up.add_argument("--backend", choices=BACKENDS, help="overrides deploy.backend")
    up.add_argument("--run-id", type=_run_id, help="name of the results folder (default <name>-<time>)")
    up.add_argument("--wide", action="store_true", help=WIDE_HELP)
    up.add_argument("--all", action="store_true", dest="every", help=ALL_HELP)
    up.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard runs (one per "
                    "node) under DIR/<run-id> as the rounds come in")
    up.add_argument("--monitor", action="store_true", help="serve the live page of the run "
                    "(see `protofed monitor`) while it runs")
    up.add_argument("--port", type=int, default=MONITOR_PORT, help="the page's port "
                    f"(default {MONITOR_PORT})")

    down = commands.add_parser("down", help="stop running federations (local, docker and "
                               "swarm)")
    down.add_argument("run_id", nargs="?", type=_run_id, help="the run to stop (`protofed status` lists them)")
    down.add_argument("--all", action="store_true", help="stop every running protofed run, "
                      "local ones and every one on the Docker engine (asked on a terminal)")
    down.add_argument("--results-dir", default="results", help="where runs are recorded")

    status = commands.add_parser("status", help="list running federations and their nodes")
    status.add_argument("--results-dir", default="results", help="where runs are recorded")

    logs = commands.add_parser("logs", help="print the log of one node of a run")
    logs.add_argument("run", help="the run: its results folder, or its id under --results-dir")
    logs.add_argument("node", type=int, help="the node's id, from 0")
    logs.add_argument("--tail", type=int, default=200, help="lines to show (default 200)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the node ends (Ctrl-C leaves)")
    logs.add_argument("--results-dir", default="results", help="where runs are recorded")

    _add_deployment_files(commands)
    _add_run_views(commands)
    return parser


def _add_deployment_files(commands) -> None:
    """The commands that write what a deployment runs from: Compose files, a split on
    disk, and a composed run's folder filled from its swarm."""
    compose = commands.add_parser("compose", help="write a Compose file for the federation "
                                  "(docker compose up, or docker stack deploy on a Swarm)")
    compose.add_argument("-c", "--config", required=True, help="federation TOML file")
    compose.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key")
    compose.add_argument("--run-id", type=_run_id, help="project name and results folder")
    compose.add_argument("--image", help="node image to use instead of building one")

    collect = commands.add_parser("collect", help="fill a run folder written by `protofed "
                                  "compose` from its nodes' output on a swarm (after "
                                  "`docker stack deploy` of its stack.yaml)")
    collect.add_argument("run_id", type=_run_id, help="the run's id: its results folder's name")
    collect.add_argument("--results-dir", default="results", help="where runs are recorded")
    collect.add_argument("--manager", default="", help="the swarm manager's Docker API "
                         "(default: $DOCKER_HOST, else the local engine)")
    collect.add_argument("--wide", action="store_true", help=WIDE_HELP)
    collect.add_argument("--all", action="store_true", dest="every", help=ALL_HELP)

    split = commands.add_parser("partition", help="write a config's split as one folder "
                                "per node (its training and local test samples) and a "
                                "manifest; again with the same config and folder: nothing")
    split.add_argument("-c", "--config", required=True, help="federation TOML file")
    split.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key")
    split.add_argument("--out", required=True, help="the folder to write")


def _add_run_views(commands) -> None:
    """The commands that look at a run: report, monitor, tensorboard."""
    report = commands.add_parser("report", help="print the table of a run and write its "
                                 "per-round CSV and pictures again")
    report.add_argument("run", help="a run's folder, or its id under --results-dir")
    report.add_argument("--results-dir", default="results", help="where runs are recorded")
    report.add_argument("--wide", action="store_true", help=WIDE_HELP)
    report.add_argument("--all", action="store_true", dest="every", help=ALL_HELP)

    monitor = commands.add_parser("monitor", help="serve a read-only live page of a run, "
                                  "running or finished, on 127.0.0.1")
    monitor.add_argument("run", help="a run's folder, or its id under --results-dir")
    monitor.add_argument("--port", type=int, default=MONITOR_PORT,
                         help=f"port (default {MONITOR_PORT})")
    monitor.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                         "127.0.0.1; another one lets other machines read the page)")
    monitor.add_argument("--results-dir", default="results", help="where runs are recorded")

    board = commands.add_parser("tensorboard", help="write a run's records as TensorBoard "
                                "runs, one per node (then: tensorboard --logdir DIR)")
    board.add_argument("run", help="a run's folder, or its id under --results-dir")
    board.add_argument("out", metavar="DIR", help="folder for the TensorBoard runs")
    board.add_argument("--results-dir", default="results", help="where runs are recorded")


def _run_id(text: str) -> str:
    """An argparse type: a run id that names one folder inside the results folder."""
    try:
        return checked_run_id(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        code = {"up": up, "down": cmd_down, "status": cmd_status, "logs": cmd_logs,
                "compose": cmd_compose, "collect": cmd_collect,
                "report": cmd_report, "tensorboard": cmd_tensorboard,
                "partition": cmd_partition,
                "monitor": cmd_monitor}[args.command](args)
        sys.stdout.flush()  # a reader gone away shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader of stdout went away (`protofed report RUN | head`): stop quietly, as
        # Unix tools do, and let nothing more reach the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except ProtofedError as exc:
        print(f"protofed: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:  # before any node started (e.g. while building the image)
        print("protofed: interrupted", file=sys.stderr)
        return 130


def cmd_down(args: argparse.Namespace) -> int:
    every = fleets(Path(args.results_dir))
    if args.run_id:
        wanted = [args.run_id]
    else:
        wanted = sorted({run_id for fleet in every for run_id in fleet.runs()})
        if wanted and not args.all and not _confirm_stop_all(wanted):
            return 2
    done = [message for run_id in wanted for fleet in every
            if (message := fleet.stop(run_id)) is not None]
    for message in done:
        print(f"protofed: {message}")
    if not done:
        unasked = [fleet.name for fleet in every if fleet.unavailable]
        print("protofed: no running federation found"
              + (f" named {args.run_id}" if args.run_id else "")
              + (f" (not asked: {', '.join(unasked)}, which has no engine here)"
                 if unasked else ""), file=sys.stderr)
        return 1 if args.run_id else 0
    return 0


def _confirm_stop_all(names: list[str]) -> bool:
    """Whether a bare `down` may stop every run in `names`: asked on a terminal, refused
    elsewhere (a script must say --all), because other people's runs may be among them."""
    listed = ", ".join(names)
    if not sys.stdin.isatty():
        print(f"protofed: down without a run id would stop every running federation "
              f"({listed}): name one (`protofed down RUN`) or pass --all", file=sys.stderr)
        return False
    try:
        answer = input(f"stop every running federation ({listed})? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("protofed: nothing stopped", file=sys.stderr)
    return False


def cmd_status(args: argparse.Namespace) -> int:
    lines = [line for fleet in fleets(Path(args.results_dir)) for line in fleet.describe()]
    print("\n".join(lines) if lines else "no running federations")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    results_dir, run_id = _run_of(args.run, args.results_dir)
    try:
        for fleet in fleets(results_dir):
            if fleet.logs(run_id, args.node, args.tail, args.follow, sys.stdout):
                return 0
    except KeyboardInterrupt:  # how one leaves --follow
        return 0
    path = results_dir / run_id / "logs" / f"node-{args.node}.log"
    raise ConfigError(f"no log for node {args.node} of run {run_id} ({path})")


def _run_of(run: str, results_dir: str) -> tuple[Path, str]:
    """(results folder, run id) of a run given as its folder or as an id under
    `results_dir` (`_located`); an id alone where no folder exists yet (a container's run)."""
    folder = _located(run, results_dir)
    if folder is not None:
        return folder.resolve().parent, folder.resolve().name
    return Path(results_dir), checked_run_id(run)


def _located(run: str, results_dir: str) -> Path | None:
    """A run's folder, given as a path or as an id under `results_dir` (the path first);
    None where neither is a folder. Every command that names a run reads it so."""
    for folder in (Path(run), Path(results_dir) / run):
        if folder.is_dir():
            return folder
    return None


def cmd_partition(args: argparse.Namespace) -> int:
    config = load(args.config, tuple(args.set))
    out = Path(args.out)
    if partition(config, out, lambda line: print(f"protofed: {line}", file=sys.stderr)):
        print(f"protofed: wrote {counted(config.nodes, 'node folder')} and "
              f"{out / 'manifest.json'}", file=sys.stderr)
    else:
        print(f"protofed: {out} already holds this split: nothing written", file=sys.stderr)
    return 0


def cmd_compose(args: argparse.Namespace) -> int:
    config = load(args.config, tuple(args.set))
    run_id = args.run_id or new_run_id(config)
    written = compose_file.compose_run(config, Path(args.config), tuple(args.set), run_id,
                                       args.image or config.deploy.image)
    warn_if_insecure(config)  # after compose_run, which refuses "none" unless allowed
    compose, stack, image, folder = (written.compose, written.stack, written.image,
                                     written.results_dir)
    print(compose)
    print(f"""protofed: wrote {compose} and {stack.name} for {counted(config.nodes, 'node')} (image {image}).
  one host:  docker-compose -f {compose} -p {run_id} up
  swarm:     docker stack deploy -c {stack} {run_id}
  then:      protofed down {run_id}   (stops what is left, keeps the logs, removes the network)
  results:   {folder}  (and: protofed report {folder})""", file=sys.stderr)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    run_dir = Path(args.results_dir) / args.run_id
    still_running = swarm.collect(run_dir, args.manager)
    if still_running:
        print(f"protofed: nodes {still_running} are still running: their records are as of "
              "now", file=sys.stderr)
    return cmd_report(argparse.Namespace(run=str(run_dir), results_dir=args.results_dir,
                                         wide=args.wide, every=args.every))


def _run_folder(run: str, results_dir: str) -> Path:
    """A run's folder, given as a path or as an id under `results_dir`, with node results."""
    run_dir = _located(run, results_dir)
    if run_dir is None:
        tried = sorted({str(Path(run)), str(Path(results_dir) / run)})
        raise ConfigError(f"{run}: no such run folder (looked for {' and '.join(tried)})")
    if not any(run_dir.glob("node-*.json")):
        raise ConfigError(f"{run_dir}: no node-<i>.json results in this folder")
    return run_dir


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = _run_folder(args.run, args.results_dir)
    ended = finish_without_launcher(run_dir, "protofed report")
    if ended is not None:
        summary, files = ended
        print(f"protofed: run {run_dir.name}: its launcher was gone; wrote "
              f"{run_dir / 'summary.json'} from the nodes' records", file=sys.stderr)
        print(format_table(summary, table_width(args.wide), args.every))
        say_files(files)
        return 0
    if not (run_dir / "summary.json").is_file() and (why := still_running(run_dir)):
        print(f"protofed: run {run_dir.name} has not ended: {why}. The table is as of now.",
              file=sys.stderr)
    records = read_node_results(run_dir, len(list(run_dir.glob("node-*.json"))))
    target = 0.0
    if (run_dir / FEDERATION_FILE).is_file():
        target = read_federation(run_dir / FEDERATION_FILE).config.report.target_f1
    print(format_table(summarize_records(records, run_dir.name, dynamics(records, target)),
                       table_width(args.wide), args.every))
    say_files(write_run_files(run_dir, records))
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    run_dir = _located(args.run, args.results_dir) or Path(args.run)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"protofed: warning: the page listens on {args.host}: anyone who reaches that "
              "address can read this run (the page has no login); an SSH port forward to "
              "127.0.0.1 keeps it private", file=sys.stderr)
    address = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{args.port}/"
    try:
        serve(run_dir, args.host, args.port,
              ready=lambda: print(f"protofed: monitor of {run_dir}: {address}",
                                  file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    run_dir = _run_folder(args.run, args.results_dir)
    records = read_node_results(run_dir, len(list(run_dir.glob("node-*.json"))))
    if not (run_dir / FEDERATION_FILE).is_file():
        raise ConfigError(f"{run_dir}: no {FEDERATION_FILE} here: not a run folder")
    config = read_federation(run_dir / FEDERATION_FILE).config
    folder = export(records, config.to_dict(), Path(args.out) / run_dir.name)
    print(f"protofed: TensorBoard runs of {len(records)} nodes: {folder} (tensorboard "
          f"--logdir {folder})", file=sys.stderr)
    return 0


def run() -> None:
    """The `protofed` command: main(), then exit without the interpreter's teardown."""
    exit_now(main())


if __name__ == "__main__":
    run()
