"""The local backend: one node process per node on this machine, watched until done."""

from __future__ import annotations

import gc
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from deploy.backends import shaping
from deploy.backends.plan import Plan, host_data_dir, keys_dir, node_arguments
from deploy.backends.runner import run_status
from deploy.run_folder import RUN_FILE
from node.config import FederationConfig, user_code
from node.data.custom import check_models
from node.lifecycle import MISSED_EXIT, exit_now

if TYPE_CHECKING:
    from deploy.backends.capacity import NodeFootprint

log = logging.getLogger(__name__)

# Exits a restart cannot help or was not wanted for: success, a config error (2), a node
# back after the last round (MISSED_EXIT), and a
# stop asked for with SIGINT or SIGTERM (the node exits 128 + signal; -signal if it could not).
NO_RESTART_EXITS = frozenset({0, 2, MISSED_EXIT, 128 + signal.SIGINT, 128 + signal.SIGTERM,
                              -signal.SIGINT, -signal.SIGTERM})
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (they arrive when the block ends) for steps that must not
    be cut in two: reaping a node and keeping its status, forking a node and keeping its
    pid. (The launcher has one thread, so the mask covers every delivery.)"""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class ForkedNode:
    """A node process forked from the launcher: the part of subprocess.Popen a run uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once the process has ended."""
        if self.returncode is None:
            # Ctrl-C between reaping the child and keeping its status would lose the status
            # for good: hold the stop signals until both are done.
            with stop_signals_held():
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:  # reaped elsewhere: its status is gone
                    self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"node process {self.pid}", timeout)
            wait_for_exit([self], 0.05)
        return self.returncode


@dataclass
class LocalRun:
    """Running node processes of one federation."""

    plan: Plan
    processes: dict[int, subprocess.Popen | ForkedNode] = field(default_factory=dict)
    exit_codes: dict[int, int] = field(default_factory=dict)
    restarts_left: int = 0  # per node: deploy.restarts
    restarts: dict[int, int] = field(default_factory=dict)
    launch: Callable[[int], subprocess.Popen | ForkedNode] | None = None
    listeners: list[socket.socket] = field(default_factory=list)  # kept for restarts
    start_times: dict[int, int | None] = field(default_factory=dict)  # a pid's identity
    stopping: bool = False
    shaped_device: str = ""  # where [links] rules were installed (removed with the run)

    def poll_exits(self) -> dict[int, int]:
        """Exit codes of the node processes that have ended for good so far; a node that
        crashed is started again while it has restarts left (see NO_RESTART_EXITS)."""
        for node_id, process in self.processes.items():
            code = process.poll()
            if code is None or node_id in self.exit_codes:
                continue
            if (code not in NO_RESTART_EXITS and not self.stopping and self.launch
                    and self.restarts.get(node_id, 0) < self.restarts_left):
                self.restarts[node_id] = self.restarts.get(node_id, 0) + 1
                log.warning("node %d exited with %d: starting it again (restart %d of %d)",
                            node_id, code, self.restarts[node_id], self.restarts_left)
                self.started(node_id)
                write_run_file(self, "running")
                continue
            self.exit_codes[node_id] = code
        return dict(self.exit_codes)

    def started(self, node_id: int) -> None:
        """Start node `node_id` and keep its process: a Ctrl-C cannot come in between,
        so every node started is one the run stops."""
        with stop_signals_held():
            self.processes[node_id] = self.launch(node_id)
            self.start_times[node_id] = start_time(self.processes[node_id].pid)

    def wait(self, timeout: float) -> None:
        """Sleep until a node process exits or `timeout` seconds pass."""
        live = [p for i, p in self.processes.items() if i not in self.exit_codes]
        wait_for_exit(live, timeout)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM every live node, then SIGKILL whatever is left after `grace` seconds."""
        self.stopping = True
        stop(self, grace)

    def save_logs(self) -> None:
        """Node processes write their logs straight into logs/: nothing to collect."""

    def remove(self) -> None:
        """Record the run as ended and release the nodes' listening sockets."""
        if self.shaped_device:  # before the run file, which then no longer names it
            shaping.clear(self.shaped_device)
            self.shaped_device = ""
        write_run_file(self, run_status(self.exit_codes, len(self.processes), self.stopping))
        for listener in self.listeners:
            listener.close()


def wait_for_exit(processes: list[subprocess.Popen], timeout: float) -> None:
    """Block until one of `processes` exits (Linux pidfds) or `timeout` seconds pass."""
    descriptors = []
    try:
        for process in processes:
            try:
                descriptors.append(os.pidfd_open(process.pid))
            except ProcessLookupError:  # already gone: nothing to wait for
                return
        if descriptors:
            select.select(descriptors, [], [], timeout)
        else:
            time.sleep(timeout)
    except (AttributeError, OSError):  # no pidfd_open on this system: just sleep
        time.sleep(timeout)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def warm_up(config: FederationConfig) -> None:
    """Import and load, once, what every node needs, so forked nodes share it.

    Torch, the algorithms, the transport, the optimizer machinery (torch imports its
    compiler stack the first time an optimizer is built), the dataset (mapped from its
    cache, which `deploy.backends.plan.prepare_data` made) and the global test set as tensors: each
    forked node starts with them in memory, shared copy-on-write or through the page cache.
    """
    import torch

    from deploy.backends.capacity import warm_torch
    from node.runtime import load_node_data

    warm_torch()
    # Maps the dataset and converts the global test set, which every node evaluates on,
    # once for all the nodes (node 0's own share is dropped again).
    # Nodes on a GPU convert their own copy there instead.
    if config.train.device != "cuda":
        # On one thread: a launcher that started torch's OpenMP pool would fork nodes whose
        # first parallel operation never returns.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            load_node_data(config, 0, torch.device("cpu"))
        finally:
            torch.set_num_threads(threads)
    else:
        from node.data import load_dataset

        load_dataset(config.data.dataset, host_data_dir(config), download=False)
    # Forked nodes share this process's pages until one writes to them, and a full garbage
    # collection writes to every object it traverses: in a node it copied 70 MiB of them.
    # Frozen objects are never traversed again (the gc module's advice for fork without exec).
    gc.collect()
    gc.freeze()


def probe_footprint(config: FederationConfig, threads: bool = False) -> NodeFootprint:
    """Measure node 0 of `config` in a process forked from this warm one, as nodes are
    (with `threads`, more nodes on threads beside it, as the sim backend runs them)."""
    from deploy.backends.capacity import NodeFootprint, measure_footprint, probe_failure

    readable, writable = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: it never returns from here
        try:
            os.close(readable)
            try:
                answer = asdict(measure_footprint(config, forked=True, threads=threads))
            except BaseException as exc:  # noqa: BLE001 - reported to the launcher
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(writable, json.dumps(answer).encode())
        finally:
            exit_now(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as pipe:
        answer = json.loads(pipe.read() or b'{"error": "the probe ended without a word"}')
    os.waitpid(pid, 0)
    if "error" in answer:
        raise probe_failure(answer["error"])
    return NodeFootprint(**answer)


def check_user_models(config: FederationConfig) -> int:
    """Build every model given by import path once, on the dataset's shape, before any node
    starts: a model that breaks the contract is a config error, not N crashed nodes."""
    if not any(key.startswith("model.") for key, _ in user_code(config)):
        return 0
    from node.data import load_dataset

    # prepared (fetched, cached or loaded) already by `deploy.backends.plan.prepare_data`
    dataset = load_dataset(config.data.dataset, host_data_dir(config), download=False)
    _, channels, size, _ = dataset.images.shape
    return check_models(config, channels, size, dataset.num_classes)


def fork_node(plan: Plan, node_id: int, listeners: list[socket.socket],
              gate: tuple[int, int] | None = None) -> ForkedNode:
    """Start one node as a fork of this (warm) process, in its own session, its output
    in logs/node-<i>.log, listening on the socket the launcher bound for it. With a `gate`
    (a pipe's read and write ends) the node waits until the launcher closes the write end."""
    log_path = plan.results_dir / "logs" / f"node-{node_id}.log"
    keys = str(keys_dir(plan)) if keys_dir(plan).is_dir() else None
    arguments = node_arguments(str(plan.federation_file), node_id, str(plan.results_dir),
                               keys, listeners[node_id].fileno())
    sys.stdout.flush()
    sys.stderr.flush()
    # The child must not run the launcher's Ctrl-C handler (it would stop the run from
    # inside a node): the stop signals wait until it has the default ones.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return ForkedNode(pid)
    code = 1
    try:  # the child: it never returns from here
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if gate:  # in its own group already, so a stop while it waits reaches it
            os.close(gate[1])  # its copy of the write end would keep the gate shut forever
            os.read(gate[0], 1)  # returns (end of file) once the launcher closes its own
            os.close(gate[0])
        write_output_to(log_path)
        for other, listener in enumerate(listeners):
            if other != node_id:
                listener.close()
        logging.root.handlers.clear()  # the node sets up its own logging
        from node.__main__ import main as node_main

        code = node_main(arguments)
    except BaseException:  # noqa: BLE001 - a child must never run the launcher's code
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)


def write_output_to(log_path: Path) -> None:
    """In a forked child: standard output and error appended to `log_path`, no input."""
    output = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)


def start(plan: Plan, listeners: list[socket.socket], restarts: int = 0) -> LocalRun:
    """Start every node, each in its own session with its log file, each on the listening
    socket the launcher bound for it (so its port cannot be taken). Nodes are forked from
    this process after `warm_up`, all of them before any runs: each forked node would
    otherwise compete for the CPU with this process while it forks the next (100 nodes on 2
    cores reached round 0 72 s after launch without the gate, 60 s with it). The run keeps
    the sockets, so a node started again listens on the same port."""
    gate = os.pipe()

    def launch(node_id: int) -> ForkedNode:
        return fork_node(plan, node_id, listeners, gate if gate[1] >= 0 else None)

    run = LocalRun(plan, restarts_left=restarts, launch=launch, listeners=list(listeners))
    try:
        run.shaped_device = shaping.shape_loopback(plan.federation)
        for spec in plan.nodes:
            run.started(spec.node_id)
    except BaseException:  # a failed fork, or Ctrl-C halfway: stop the nodes already started
        with stop_signals_held():  # a second Ctrl-C waits until they are stopped
            run.stop()
            run.remove()
        raise
    finally:
        os.close(gate[1])  # every node goes on
        os.close(gate[0])
        gate = (-1, -1)  # a node started again later does not wait
    write_run_file(run, "running")
    return run


def write_run_file(run: LocalRun, status: str) -> None:
    """Record pids and status so `protofed down` and `status` can find the run."""
    document = {"run_id": run.plan.run_id, "backend": "local", "status": status,
                "pids": {str(i): p.pid for i, p in run.processes.items()},
                "start_times": {str(i): t for i, t in run.start_times.items()},
                "exit_codes": {str(i): c for i, c in run.exit_codes.items()},
                "restarts": {str(i): n for i, n in run.restarts.items()},
                "nodes": len(run.plan.nodes), "shaped_device": run.shaped_device,
                "launcher": launcher_entry()}
    (run.plan.results_dir / RUN_FILE).write_text(json.dumps(document, indent=1))


def stop(run: LocalRun, grace: float = 5.0) -> None:
    """Stop this launcher's node processes and record their exit codes."""
    by_pid = {process.pid: process for process in run.processes.values()}
    terminate_groups(list(by_pid), lambda pid: by_pid[pid].poll() is None, grace)
    for node_id, process in run.processes.items():
        process.wait()
        run.exit_codes.setdefault(node_id, process.returncode)


def terminate_groups(pids: list[int], alive: Callable[[int], bool], grace: float) -> None:
    """The one stop routine: SIGTERM each live node's process group, then SIGKILL the
    groups of those still alive after `grace` seconds."""
    live = [pid for pid in pids if alive(pid)]
    for pid in live:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(pid) for pid in live):
        time.sleep(0.05)
    for pid in live:
        if alive(pid):
            _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def follow_file(path: Path, tail: int, running: Callable[[], bool], out: TextIO,
                poll: float = 0.5) -> None:
    """Write the last `tail` lines of `path` to `out`, then what is appended to it, until
    `running()` says the writer has ended and nothing more came."""
    with open(path, errors="replace") as handle:
        out.write("".join(handle.readlines()[-tail:]) if tail > 0 else "")
        out.flush()
        while True:
            alive = running()  # asked before reading: what it wrote before ending is read
            more = handle.read()
            if more:
                out.write(more)
                out.flush()
            elif not alive:
                return
            else:
                time.sleep(poll)


def node_alive(results_root: Path, run_id: str, node_id: int) -> bool:
    """Whether node `node_id` of local run `run_id` still runs (of a sim run: whether the
    simulation does)."""
    return any(run["run_id"] == run_id and (str(node_id) in run["alive"] or "sim" in run["alive"])
               for run in running_runs(results_root))


def running_runs(results_root: Path) -> list[dict]:
    """Run files under `results_root` whose processes are still alive."""
    found = []
    for run_file in sorted(results_root.glob(f"*/{RUN_FILE}")):
        try:
            document = json.loads(run_file.read_text())
        except (OSError, ValueError):
            continue
        if document.get("backend") not in ("local", "sim"):  # sim: one process, every node
            continue
        alive = live_pids(document)
        if alive:
            found.append({**document, "alive": alive, "dir": str(run_file.parent)})
    return found


def live_pids(document: dict) -> dict[str, int]:
    """The processes a run.json lists ({node or "sim": pid}) that still run."""
    starts = document.get("start_times", {})
    return {key: pid for key, pid in document.get("pids", {}).items()
            if _alive(pid, starts.get(key))}


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name ([] if unreadable): state first."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks after boot): with the pid, its identity."""
    return _started(_stat(pid))


def _started(fields: list[str]) -> int | None:
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _alive(pid: int, started: int | None) -> bool:
    """The process runs (an exited one its parent has not reaped yet does not) and, when
    its start time was recorded, is the same process (a recycled pid belongs to a process
    that started later)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)
    if fields[:1] == ["Z"]:
        return False
    return started is None or _started(fields) in (started, None)


def launcher_entry() -> dict:
    """Who watches a run, for its run.json: this process's pid, start time and host, so
    that `down`, `report` and `load` can tell whether the launcher still lives."""
    return {"pid": os.getpid(), "start_time": start_time(os.getpid()),
            "host": socket.gethostname()}


def launcher_alive(document: dict) -> bool:
    """Whether the launcher a run.json names still runs: a run.json of another host's
    launcher counts as alive (nothing here can tell); one that names none, as gone."""
    entry = document.get("launcher") or {}
    if "pid" not in entry:
        return False
    if entry.get("host") != socket.gethostname():
        return True
    return _alive(entry["pid"], entry.get("start_time"))


def stop_pids(pids: dict[str, int], start_times: dict[str, int] | None = None,
              grace: float = 5.0) -> None:
    """Stop the node processes of a run found on disk (used by `protofed down`)."""
    starts = {pid: (start_times or {}).get(i) for i, pid in pids.items()}
    terminate_groups(list(starts), lambda pid: _alive(pid, starts[pid]), grace)
