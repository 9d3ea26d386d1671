"""One federation from its config to its summary, as `protofed up` runs it (the Python API
starts `up` as a process of its own and shares only `load_config`): the backend's launcher
prepares and starts it, a progress view shows it, and its folder gets the summary, the
per-round CSV and the pictures. What it has to say goes to `say`; the caller owns the
terminal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.backends.launchers import launcher_for
from deploy.backends.plan import (
    Plan,
    check_node_folders,
    check_split,
    checked_run_id,
    ensure_results_dir,
    new_run_id,
    prepare_data,
    write_plan,
)
from deploy.backends.runner import watch
from deploy.ending import write_summary
from deploy.run_folder import mark_dead, read_node_results
from deploy.views.monitor import check_installed, check_port
from deploy.views.pictures import RunFiles, write_run_files
from deploy.views.pictures import preload as preload_pictures
from deploy.views.tensorboard import TensorBoardExport
from node.config import from_dict, load
from node.data.custom import add_search_path
from node.errors import ConfigError
from node.record import NodeRecord
from node.settings import FederationConfig
from node.wording import counted

ENDED_WELL = ("finished", "stopped", "left")


@dataclass(frozen=True)
class Outcome:
    """How a federation ended: its plan, every node's record, the summary written to its
    folder, the CSV and pictures, and whether it was interrupted or ran out of time."""

    plan: Plan
    records: list[NodeRecord]
    summary: dict[str, Any]
    files: RunFiles
    interrupted: bool
    out_of_time: bool
    exit_codes: dict[int, int]
    oom_killed: frozenset[int]

    @property
    def failed(self) -> list[int]:
        """Nodes that ended other than finished, stopped from outside or left."""
        return [n["node"] for n in self.summary["nodes"] if n["status"] not in ENDED_WELL]

    @property
    def stopped(self) -> list[int]:
        return [n["node"] for n in self.summary["nodes"] if n["status"] == "stopped"]

    @property
    def exit_code(self) -> int:
        """130 when interrupted, 1 when a node failed or was stopped, else 0."""
        if self.interrupted:
            return 130
        return 1 if self.failed or self.stopped else 0


def load_config(config: str | Path | Mapping[str, Any] | FederationConfig,
                overrides: Sequence[str] = ()) -> tuple[FederationConfig, Path]:
    """A validated config and the source it names in the run folder, from a config file's
    path, a dict shaped like the file, or a loaded config; `overrides` are `--set` strings.
    Model and data import paths are looked for beside the file (the current folder
    otherwise)."""
    if isinstance(config, FederationConfig):
        return from_dict(config.to_dict(), source="<config>", overrides=overrides), \
            Path("<config>")
    if isinstance(config, Mapping):
        add_search_path(Path.cwd())
        return from_dict(dict(config), source="<dict>", overrides=overrides), Path("<dict>")
    if not isinstance(config, (str, Path)):
        raise ConfigError(f"config: expected a file path, a dict or a loaded config, not "
                          f"{type(config).__name__}")
    add_search_path(Path(config).parent)
    return load(config, overrides), Path(config)


def insecure_warning(config: FederationConfig) -> str | None:
    """What a run without authentication must say once, or None for a secured one."""
    if config.deploy.security != "none":
        return None
    return ('deploy.security = "none": peers are not authenticated and traffic is plaintext; '
            "any process that reaches a node's port can pose as a node and feed it anything")


def launch(config: FederationConfig, source: Path, overrides: Sequence[str],
           run_id: str | None, *, say: Callable[[str], None], progress,
           tensorboard: Path | None = None, monitor_port: int | None = None,
           on_summary: Callable[[dict], None] | None = None) -> Outcome:
    """Run `config` to its end: plan, start, watch with `progress` (show/finish), then
    write the summary (handed to `on_summary` before the pictures are drawn), the CSV and
    the pictures. `tensorboard`: a folder to write TensorBoard runs into as rounds end;
    `monitor_port`: serve the monitor page on 127.0.0.1 while it runs."""
    run_id = checked_run_id(run_id) if run_id else new_run_id(config)
    overrides = tuple(overrides)
    launcher = launcher_for(config)  # refuses what its backend cannot run
    taken = ensure_results_dir(config, source, overrides) / run_id
    if taken.exists():
        raise _taken(taken)
    if monitor_port is not None:  # what the page needs, before anything is prepared
        check_installed()
        check_port("127.0.0.1", monitor_port)
    # preparing takes seconds, a minute on a loaded machine: say so before, and how long after
    began = time.monotonic()
    say(f"preparing run {run_id}: the {config.data.dataset} dataset, then what one node "
        "needs in memory")
    cache_dir = None if launcher.checks_node_folders else _prepared_data(config, say)
    plan = launcher.prepare(source, overrides, run_id, cache_dir)
    for note in launcher.notes:
        say(f"warning: {note}")
    # the tensorboard package is looked for before anything is written or started
    live = TensorBoardExport(tensorboard / run_id, config.to_dict()) if tensorboard else None
    _write_or_release(plan, launcher)
    if launcher.memory_note:
        say(launcher.memory_note)
    say(f"run {run_id}: {counted(config.nodes, config.algorithm + ' node')} "
        f"({config.deploy.backend}) on {config.topology.kind} topology, "
        f"{counted(config.rounds, 'round')}, results in {plan.results_dir} (prepared in "
        f"{time.monotonic() - began:.0f} s)")
    try:
        run = launcher.start(plan)
    except KeyboardInterrupt:  # start() stopped and recorded whatever it had started
        launcher.release()
        say("interrupted while starting the nodes")
        raise
    page = _start_monitor(plan.results_dir, monitor_port, say) \
        if monitor_port is not None else None
    try:
        interrupted, out_of_time = _watch(run, config, progress, say, live)
        records = mark_dead(plan.results_dir, read_node_results(plan.results_dir, config.nodes),
                            dict(run.exit_codes))
        if live is not None:
            live.close(records)
            say(f"TensorBoard runs: {live.folder} (tensorboard --logdir {live.folder})")
        summary = write_summary(plan.results_dir, plan.federation, records,
                                dict(run.exit_codes))
        if on_summary is not None:
            on_summary(summary)
        files = write_run_files(plan.results_dir, records, config.report.pictures)
    finally:
        if page is not None:
            page.terminate()
            page.wait()
    return Outcome(plan, records, summary, files, interrupted, out_of_time,
                   dict(run.exit_codes), frozenset(getattr(run, "oom_killed", ())))


def _prepared_data(config: FederationConfig, say: Callable[[str], None]) -> Path | None:
    """The data checked once, before any node exists: the pooled dataset fetched and split
    (its cache folder returned), or every node's own folder read (data.layout "per-node");
    what measures little said as a warning."""
    if config.data.layout == "per-node":  # each node's own folder; no pooled dataset
        cache_dir, notes = None, check_node_folders(config)
    else:
        cache_dir, notes = prepare_data(config), check_split(config)
    for note in notes:
        say(f"warning: {note}")
    return cache_dir


def _write_or_release(plan: Plan, launcher) -> None:
    """Write the run folder; on failure give back what the launcher reserved."""
    try:
        write_plan(plan)
    except (ConfigError, FileExistsError) as exc:
        launcher.release()
        if isinstance(exc, ConfigError):
            raise
        raise _taken(plan.results_dir) from None


def _taken(folder: Path) -> ConfigError:
    return ConfigError(f"results folder {folder} already exists: pick another run id "
                       "(--run-id; run_id= in Python)")


def _watch(run, config: FederationConfig, progress, say: Callable[[str], None],
           live: TensorBoardExport | None) -> tuple[bool, bool]:
    """Show progress (and write the TensorBoard runs, `live`) until every node ended;
    (interrupted, out of time). Whatever happens, the run's logs are kept and its nodes
    removed."""
    interrupted = out_of_time = False
    preload = config.report.pictures and len(os.sched_getaffinity(0)) > config.nodes
    show = _preloading(progress.show) if preload else progress.show

    def show_and_export(records) -> None:
        show(records)
        if live is not None:
            live.update(records)

    try:
        if not watch(run, show_and_export, deadline=config.timeouts.run or None):
            out_of_time = True
            progress.finish()
            say(f"timeouts.run ({config.timeouts.run:g} s) passed before every node "
                "finished: stopping the rest")
            run.stop()
    except KeyboardInterrupt:
        # A second Ctrl-C or `kill` must not cut the stop short and leave nodes running:
        # stopping takes at most the grace period, then the rest is killed.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted = True
        progress.finish()
        say("interrupted, stopping every node")
        run.stop()
    finally:
        progress.finish()
        run.save_logs()
        run.remove()
    return interrupted, out_of_time


def _preloading(show):
    """`show`, which also loads the drawing libraries once every node has recorded round 0:
    after start-up, while the nodes train, so neither start-up nor the end waits for it.
    Only where this machine has a core beyond one per node: with fewer, loading them slows
    the rounds (5 nodes on 2 cores: 0.49 to 0.52 s a round against 0.43 to 0.45 without),
    so they load at the end."""
    loaded = False

    def show_and_preload(results) -> None:
        nonlocal loaded
        show(results)
        if not loaded and results and all(r.rounds for r in results):
            loaded = True
            preload_pictures()

    return show_and_preload


def _start_monitor(run_dir: Path, port: int, say: Callable[[str], None]) -> subprocess.Popen:
    """`protofed monitor` of this run in its own process (nothing threaded in the launcher,
    which forks nodes); stopped when the run ends."""
    process = subprocess.Popen([sys.executable, "-m", "deploy.cli", "monitor", str(run_dir),
                                "--port", str(port)], stdin=subprocess.DEVNULL,
                               start_new_session=True)
    if page_answers(port, process):
        say(f"monitor: http://127.0.0.1:{port}/")
    else:
        say(f"monitor: the page did not start on port {port} (its words are above); the run "
            "goes on")
    return process


def page_answers(port: int, process: subprocess.Popen, host: str = "127.0.0.1",
                 within: float = 60.0) -> bool:
    """Whether the monitor's port accepts a connection before its process ends (or
    `within` seconds pass: a page that slow is reported as not started)."""
    deadline = time.monotonic() + within
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.1)
    return False
