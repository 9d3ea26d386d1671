"""A run's end, written from its nodes' records by whoever sees it end: the launcher that
watched it, or, when the launcher died first (SIGKILL, an out-of-memory kill), `protofed
down`, `protofed report` and `protofed.load`. Nothing in a run waits for its launcher:
the nodes run on and record themselves, and the summary, the per-round CSV and the
pictures are written from those records either way."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

from deploy.backends import local
from deploy.run_folder import (
    FEDERATION_FILE,
    RUN_FILE,
    UNKNOWN_EXIT,
    mark_dead,
    read_node_results,
)
from deploy.views.dynamics import dynamics
from deploy.views.pictures import RunFiles, write_run_files
from deploy.views.report import summarize_records
from node.federation import Federation
from node.federation import read as read_federation
from node.record import ENDED_STATUSES, NodeRecord

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"


def write_summary(run_dir: Path, federation: Federation, records: list[NodeRecord],
                  exit_codes: dict[int, int], extra: dict[str, Any] | None = None) -> dict:
    """summary.json of a run from its records and the facts the launcher resolved."""
    config = federation.config
    summary = summarize_records(records, run_dir.name, {
        "config_digest": config.digest(), "algorithm": config.algorithm,
        "topology": config.topology.kind, "rounds": config.rounds,
        "exit_codes": {str(k): v for k, v in sorted(exit_codes.items())},
        **dynamics(records, config.report.target_f1), **(extra or {})},
        exit_codes=exit_codes)
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1))
    return summary


def read_run_file(run_dir: Path) -> dict:
    """The run.json of `run_dir`, {} when it is missing or unreadable."""
    try:
        document = json.loads((run_dir / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def still_running(run_dir: Path) -> str | None:
    """Why the run in `run_dir` has not ended (its launcher or some node still runs), or
    None when it has."""
    document = read_run_file(run_dir)
    entry = document.get("launcher") or {}
    if local.launcher_alive(document):
        where = "" if entry.get("host") == socket.gethostname() else \
            f" on {entry.get('host')}"
        return f"its launcher (pid {entry.get('pid')}{where}) still watches it"
    alive = _nodes_alive(run_dir, document)
    if alive:
        return (f"{alive} still running and its launcher is gone; `protofed down "
                f"{run_dir.name}` stops them")
    return None


def _nodes_alive(run_dir: Path, document: dict) -> str:
    """Which of the run's nodes still run ("" for none), as words."""
    if document.get("backend") in ("local", "sim"):
        alive = local.live_pids(document)
        if "sim" in alive:
            return "its simulation is"
        return _are(sorted(alive, key=int))
    if document.get("backend") == "docker":
        return _containers_alive(run_dir, document)
    # a backend whose nodes this machine cannot ask (a swarm's services): the records say
    return _recorded_working(run_dir, document)


def _recorded_working(run_dir: Path, document: dict) -> str:
    """The nodes whose records say they still work, as words ("" for none)."""
    working = [r.node for r in read_node_results(run_dir, int(document.get("nodes", 0)))
               if r.status not in ENDED_STATUSES]
    return _are([str(n) for n in working], verb="may be")


def _containers_alive(run_dir: Path, document: dict) -> str:
    """The run's containers still running on this machine's engine; without an engine,
    the nodes whose records say they still work."""
    from deploy.backends import docker_backend as docker
    from node.errors import ProtofedError
    try:
        client = docker.connect()
    except ProtofedError:  # no engine answers here to ask: the records say
        return _recorded_working(run_dir, document)
    states = docker.running_runs(client).get(document.get("run_id", run_dir.name), [])
    return _are([node for node, state in states if not docker.ended([(node, state)])])


def _are(nodes: list[str], verb: str = "") -> str:
    """"node 3 is", "nodes 0, 1 are" (or `verb` instead), "" for none."""
    if not nodes:
        return ""
    if len(nodes) == 1:
        return f"node {nodes[0]} {verb or 'is'}"
    return f"nodes {', '.join(nodes)} {verb or 'are'}"


def finish_without_launcher(run_dir: Path, by: str) -> tuple[dict, RunFiles] | None:
    """Write what a dead launcher left unwritten (summary, CSV, pictures, run.json's
    status), once the run has ended; None when there is nothing to write (the summary
    exists, or the run goes on: `still_running` says why). `by`: the command doing it."""
    if (run_dir / SUMMARY_FILE).is_file() or not (run_dir / FEDERATION_FILE).is_file() \
            or not (run_dir / RUN_FILE).is_file():  # no run.json: no node of it started
        return None
    if still_running(run_dir) is not None:
        return None
    document = read_run_file(run_dir)
    federation = read_federation(run_dir / FEDERATION_FILE)
    nodes = federation.config.nodes
    recorded = {int(k): v for k, v in document.get("exit_codes", {}).items()}
    # every node has ended: one whose record still says it works died unrecorded
    ended: dict[int, int | None] = {i: recorded.get(i, UNKNOWN_EXIT) for i in range(nodes)}
    records = mark_dead(run_dir, read_node_results(run_dir, nodes), ended)
    summary = write_summary(run_dir, federation, records, recorded,
                            {"written_by": f"{by} (its launcher was gone)"})
    status = "finished" if all(r.status == "finished" for r in records) else \
        "stopped" if all(r.status in ("finished", "stopped", "left") for r in records) \
        else "failed"
    (run_dir / RUN_FILE).write_text(json.dumps({**document, "status": status}, indent=1))
    log.info("run %s: its launcher was gone; %s wrote its summary", run_dir.name, by)
    return summary, write_run_files(run_dir, records, federation.config.report.pictures)
