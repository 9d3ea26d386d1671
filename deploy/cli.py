"""The `protofed` command: start, watch, summarise and stop federations."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from deploy.backends import capacity
from deploy.backends import compose as compose_file
from deploy.backends import docker_backend as docker
from deploy.backends import image as docker_image
from deploy.backends import swarm_backend as swarm
from deploy.backends.launchers import fleets, launcher_for, refuse_user_code
from deploy.backends.plan import (
    Plan,
    host_data_dir,
    new_run_id,
    prepare_data,
    write_plan,
)
from deploy.backends.runner import run_status, watch
from deploy.run_folder import FEDERATION_FILE, log_tail, read_node_results
from deploy.views.dynamics import dynamics
from deploy.views.monitor import check_port, serve
from deploy.views.pictures import RunFiles, write_run_files
from deploy.views.pictures import preload as preload_pictures
from deploy.views.progress import progress_for
from deploy.views.report import ROW_LIMIT, format_table, summarize_records
from deploy.views.tensorboard import TensorBoardExport, export
from node.config import load
from node.data.custom import add_search_path
from node.errors import ConfigError, ProtofedError
from node.federation import read as read_federation
from node.lifecycle import exit_now
from node.settings import BACKENDS

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
    up.add_argument("--run-id", help="name of the results folder (default <name>-<time>)")
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
    down.add_argument("run_id", nargs="?", help="the run to stop (`protofed status` lists them)")
    down.add_argument("--all", action="store_true", help="stop every running protofed run, "
                      "local ones and every one on the Docker engine (asked on a terminal)")
    down.add_argument("--results-dir", default="results", help="where runs are recorded")

    status = commands.add_parser("status", help="list running federations and their nodes")
    status.add_argument("--results-dir", default="results", help="where runs are recorded")

    logs = commands.add_parser("logs", help="print the log of one node of a run")
    logs.add_argument("run_id", help="the run's id: its results folder's name")
    logs.add_argument("node", type=int, help="the node's id, from 0")
    logs.add_argument("--tail", type=int, default=200, help="lines to show (default 200)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the node ends (Ctrl-C leaves)")
    logs.add_argument("--results-dir", default="results", help="where runs are recorded")

    compose = commands.add_parser("compose", help="write a Compose file for the federation "
                                  "(docker compose up, or docker stack deploy on a Swarm)")
    compose.add_argument("-c", "--config", required=True, help="federation TOML file")
    compose.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key")
    compose.add_argument("--run-id", help="project name and results folder")
    compose.add_argument("--image", help="node image to use instead of building one")

    collect = commands.add_parser("collect", help="fill a run folder written by `protofed "
                                  "compose` from its nodes' output on a swarm (after "
                                  "`docker stack deploy` of its stack.yaml)")
    collect.add_argument("run_id", help="the run's id: its results folder's name")
    collect.add_argument("--results-dir", default="results", help="where runs are recorded")
    collect.add_argument("--manager", default="", help="the swarm manager's Docker API "
                         "(default: $DOCKER_HOST, else the local engine)")
    collect.add_argument("--wide", action="store_true", help=WIDE_HELP)
    collect.add_argument("--all", action="store_true", dest="every", help=ALL_HELP)

    _add_run_views(commands)
    return parser


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status, "logs": cmd_logs,
                "compose": cmd_compose, "collect": cmd_collect,
                "report": cmd_report, "tensorboard": cmd_tensorboard,
                "monitor": cmd_monitor}[args.command](args)
    except ProtofedError as exc:
        print(f"protofed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:  # before any node started (e.g. while building the image)
        print("protofed: interrupted", file=sys.stderr)
        return 130


def cmd_up(args: argparse.Namespace) -> int:
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
    _warn_if_insecure(config)


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
    _say_files(files)
    if interrupted:
        return 130
    return 1 if failed or stopped else 0


def table_width(wide: bool) -> int | None:
    """How wide the end table may be: the terminal's width (or $COLUMNS); no limit with
    --wide or when the output goes to a file or a pipe."""
    if wide:
        return None
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


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


def _say_files(files: RunFiles) -> None:
    """Where the per-round CSV and the pictures are (or how to get the pictures)."""
    print(f"per-round CSV: {files.csv}", file=sys.stderr)
    if files.pictures:
        print("pictures: " + ", ".join(str(p) for p in files.pictures if p.suffix == ".png")
              + " (and .svg)", file=sys.stderr)
    else:
        print(f"protofed: {files.hint}", file=sys.stderr)


def _warn_if_insecure(config) -> None:
    """Say it loudly, once, on the terminal: nothing between the nodes is authenticated."""
    if config.deploy.security == "none":
        print('protofed: WARNING: deploy.security = "none": peers are not authenticated and '
              "traffic is plaintext; any process that reaches a node's port can pose as a "
              "node and feed it anything", file=sys.stderr)


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
        why = "; ".join(fleet.unavailable for fleet in every if fleet.unavailable)
        print("protofed: no running federation found"
              + (f" named {args.run_id}" if args.run_id else "")
              + (f" (no local run; {why})" if why else ""), file=sys.stderr)
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
    try:
        for fleet in fleets(Path(args.results_dir)):
            if fleet.logs(args.run_id, args.node, args.tail, args.follow, sys.stdout):
                return 0
    except KeyboardInterrupt:  # how one leaves --follow
        return 0
    path = Path(args.results_dir) / args.run_id / "logs" / f"node-{args.node}.log"
    raise ConfigError(f"no log for node {args.node} of run {args.run_id} ({path})")


def cmd_compose(args: argparse.Namespace) -> int:
    config = load(args.config, tuple(args.set))
    refuse_user_code(config)
    if config.deploy.security == "none" and not config.deploy.allow_insecure:
        raise ConfigError('deploy.security = "none" in a Compose file or a Swarm stack lets '
                          'anything on their network pose as a node: use "curve", or also '
                          "set deploy.allow_insecure = true")
    _warn_if_insecure(config)
    run_id = args.run_id or new_run_id(config)
    cache_dir = prepare_data(config)
    data_dir = host_data_dir(config).resolve()
    plan = docker.plan_docker(config, Path(args.config), tuple(args.set), run_id)
    # each service's memory limit: deploy.memory, else measured on one node of this config
    footprint = None if config.deploy.memory else capacity.probe(config)
    plan = capacity.with_limits(config, footprint, plan)
    engines: list = []

    def engine():  # where the image is built (and pushed from): deploy.manager, else here
        if not engines:
            engines.append(swarm.connect(config.deploy.manager) if config.deploy.manager
                           else docker.connect())
        return engines[0]
    image = args.image or config.deploy.backends.image
    if not image:
        image = docker_image.ensure_image(engine(), config.deploy.base_image)
    try:
        write_plan(plan)
    except FileExistsError:
        raise ConfigError(f"results folder {plan.results_dir} already exists: pick another "
                          "--run-id") from None
    registry_image = ""
    if config.deploy.registry:  # a stack any swarm can run: the image through the registry
        registry_image = swarm.push_image(engine(), image, config, data_dir)
    compose, stack = compose_file.write_compose(config, plan, image, data_dir, cache_dir,
                                                registry_image)
    print(compose)
    print(f"""protofed: wrote {compose} and {stack.name} for {config.nodes} nodes (image {image}).
  one host:  docker-compose -f {compose} -p {run_id} up
  swarm:     docker stack deploy -c {stack} {run_id}
  then:      protofed down {run_id}   (stops what is left, keeps the logs, removes the network)
  results:   {plan.results_dir}  (and: protofed report {plan.results_dir})""",
          file=sys.stderr)
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    run_dir = Path(args.results_dir) / args.run_id
    if not (run_dir / FEDERATION_FILE).is_file():
        raise ConfigError(f"{run_dir}: no {FEDERATION_FILE} here: collect fills the folder "
                          "`protofed compose` wrote for the run")
    plan = Plan(run_id=args.run_id, source=run_dir / FEDERATION_FILE, overrides=(),
                results_dir=run_dir.resolve(),
                federation=read_federation(run_dir / FEDERATION_FILE))
    run = swarm.attach(swarm.connect(args.manager), plan)
    exits = run.poll_exits()
    run.save_logs()
    ended = len(exits) == len(plan.nodes)
    swarm.write_run_file(run, run_status(exits, len(plan.nodes), stopping=False)
                         if ended else "running")
    if not ended:
        print(f"protofed: nodes {sorted(set(run.services) - set(exits))} are still running: "
              "their records are as of now", file=sys.stderr)
    return cmd_report(argparse.Namespace(run=str(run_dir), results_dir=args.results_dir,
                                         wide=args.wide, every=args.every))


def _run_folder(run: str, results_dir: str) -> Path:
    """A run's folder, given as a path or as an id under `results_dir`, with node results."""
    run_dir = Path(run)
    if not run_dir.is_dir() and (Path(results_dir) / run).is_dir():
        run_dir = Path(results_dir) / run
    if not run_dir.is_dir():
        tried = sorted({str(Path(run)), str(Path(results_dir) / run)})
        raise ConfigError(f"{run}: no such run folder (looked for {' and '.join(tried)})")
    if not any(run_dir.glob("node-*.json")):
        raise ConfigError(f"{run_dir}: no node-<i>.json results in this folder")
    return run_dir


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = _run_folder(args.run, args.results_dir)
    records = read_node_results(run_dir, len(list(run_dir.glob("node-*.json"))))
    target = 0.0
    if (run_dir / FEDERATION_FILE).is_file():
        target = read_federation(run_dir / FEDERATION_FILE).config.report.target_f1
    print(format_table(summarize_records(records, run_dir.name, dynamics(records, target)),
                       table_width(args.wide), args.every))
    _say_files(write_run_files(run_dir, records))
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    run_dir = Path(args.run)
    if not run_dir.exists() and (Path(args.results_dir) / args.run).is_dir():
        run_dir = Path(args.results_dir) / args.run
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


def _start_monitor(run_dir: Path, port: int) -> subprocess.Popen:
    """`protofed monitor` of this run in its own process (nothing threaded in the launcher,
    which forks nodes); stopped when `up` ends."""
    process = subprocess.Popen([sys.executable, "-m", "deploy.cli", "monitor", str(run_dir),
                                "--port", str(port)], stdin=subprocess.DEVNULL,
                               start_new_session=True)
    print(f"protofed: monitor: http://127.0.0.1:{port}/", file=sys.stderr)
    return process


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
