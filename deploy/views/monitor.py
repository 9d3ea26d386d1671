"""`protofed monitor RUN`: a read-only web page of a run, running or finished, whatever backend
wrote it. It reads the record files the nodes already write (no new port on any node) and
pushes a snapshot to the page by server-sent events at most once a second, when it changed.

Routes (all GET; nothing can be started, stopped or changed from the page):
  /                   the page (deploy/views/monitor_page: every script and style is served from
                      the installed package, nothing from elsewhere)
  /api/snapshot       the snapshot as JSON
  /api/events         the snapshot as server-sent events
  /api/log/<node>     the last lines of a node's log
  /files/<name>       the run's CSV, JSON and pictures, for download
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from deploy.run_folder import FEDERATION_FILE, RUN_FILE, RecordReader
from deploy.views.dynamics import consensus_by_round, round_means
from deploy.views.pictures import (
    CSV_NAME,
    DYNAMIC_PICTURES,
    FORMATS,
    PAYLOAD_KINDS,
    PICTURES,
    bytes_by_kind,
    round_seconds,
)
from node.errors import ConfigError
from node.record import NodeRecord, measured

PAGE = Path(__file__).resolve().parent / "monitor_page"
PUSH_EVERY = 1.0  # seconds: the page is updated at most this often
STALE_AFTER = 30.0  # seconds without a change to a working node's record, at least...
STALE_ROUNDS = 3.0  # ... or this many of the federation's median seconds per round
# what the run leaves beside the node records, in the order the page offers it
OUTPUTS = (CSV_NAME, "summary.json", FEDERATION_FILE, RUN_FILE,
           *(f"{name}.{fmt}" for name in (*PICTURES, *DYNAMIC_PICTURES) for fmt in FORMATS))
NODE_FILE = re.compile(r"node-\d+\.json")
WORKING = ("starting", "running")
HINT = ("the monitor needs starlette and uvicorn, which this environment lacks: "
        "pip install starlette uvicorn")


def check_installed() -> None:
    """ConfigError naming the packages when the monitor's are missing (before a run
    starts, not once its page is due)."""
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("starlette", "uvicorn")):
        raise ConfigError(HINT)


def run_folder(path: Path) -> tuple[Path, int]:
    """The run folder and its node count; ConfigError naming what is wrong."""
    if not path.exists():
        raise ConfigError(f"{path}: no such folder")
    if not path.is_dir():
        raise ConfigError(f"{path}: not a folder")
    federation = path / FEDERATION_FILE
    if federation.is_file():
        try:
            return path, len(json.loads(federation.read_text())["nodes"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}: {FEDERATION_FILE} cannot be read: {exc}") from None
    nodes = len(list(path.glob("node-*.json")))
    if not nodes:
        raise ConfigError(f"{path}: not a run folder (no {FEDERATION_FILE}, no node-<i>.json)")
    return path, nodes


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (this machine's processes only)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Monitor:
    """Snapshots of one run folder (pure reads of its files)."""

    def __init__(self, run_dir: Path, clock=time.time) -> None:
        self.run_dir, self.nodes = run_folder(run_dir)
        self.reader = RecordReader(self.run_dir, self.nodes)
        self.clock = clock
        self.changed_at: dict[int, tuple[tuple, float]] = {}  # node -> (version, when seen)
        self.federation = self._federation()

    def _federation(self) -> dict[str, Any]:
        try:
            return json.loads((self.run_dir / FEDERATION_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def _run_file(self) -> dict[str, Any]:
        try:
            return json.loads((self.run_dir / RUN_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def snapshot(self) -> dict[str, Any]:
        records = self.reader.read()
        now = self.clock()
        config = self.federation.get("config", {})
        run = self._run_file()
        states = self._states(records, run, now)
        # the federation's round: the slowest node still in it (a dead or departed one is not)
        done = [r.rounds[-1].round for r in records
                if r.rounds and states[r.node] in (*WORKING, "stale", "finished")]
        rounds_total = config.get("rounds") or max((r.rounds_total for r in records), default=0)
        started = min((r.started_at for r in records if r.started_at), default=None)
        ended = not any(state in (*WORKING, "stale") for state in states.values())
        last = max((x.recorded_at for r in records for x in r.rounds), default=None)
        elapsed = ((last if ended and last else now) - started) if started else None
        federation_round = min(done) if done else None
        eta = None
        if (not ended and elapsed and federation_round and rounds_total
                and federation_round < rounds_total):
            eta = elapsed / federation_round * (rounds_total - federation_round)
        return {
            "run_id": self.run_dir.name,
            "algorithm": config.get("algorithm") or next((r.algorithm for r in records
                                                          if r.algorithm), ""),
            "topology": (config.get("topology") or {}).get("kind", ""),
            "backend": run.get("backend") or (config.get("deploy") or {}).get("backend", ""),
            "run_status": run.get("status", ""),
            "rounds_total": rounds_total, "round": federation_round,
            "elapsed_s": None if elapsed is None else round(elapsed, 1),
            "eta_s": None if eta is None else round(eta, 1),
            "nodes": [self._node(r, states[r.node]) for r in records],
            "edges": self._edges(records),
            "positions": positions(self.nodes),
            "per_round": self._per_round(records, whole_through(records, states)),
            "downloads": self.downloads(),
        }

    def downloads(self) -> list[str]:
        """The run's outputs its folder has now (the node records aside)."""
        return [name for name in OUTPUTS if (self.run_dir / name).is_file()]

    def _states(self, records: list[NodeRecord], run: dict, now: float) -> dict[int, str]:
        """Each node's state: its record's status; `dead` where its process ended while the
        record says it works (exit code recorded, or a local pid gone); `stale` where a
        working node's record has not changed for a while."""
        exits = run.get("exit_codes") or {}
        pids = run.get("pids") or {}
        seconds = [round_seconds(x) for r in records for x in r.rounds if x.round > 0]
        stale_after = max(STALE_AFTER, STALE_ROUNDS * (statistics.median(seconds)
                                                        if seconds else 0.0))
        states = {}
        for record in records:
            status = record.status if record.status != "missing" else "starting"
            version = (len(record.rounds), record.status, record.rounds_done)
            seen = self.changed_at.get(record.node)
            if seen is None or seen[0] != version:
                self.changed_at[record.node] = (version, now)
            if status in WORKING:
                node = str(record.node)
                gone = node in exits or (node in pids and not _alive(int(pids[node])))
                if gone:
                    status = "dead"
                elif now - self.changed_at[record.node][1] > stale_after and run.get(
                        "status", "running") == "running":
                    status = "stale"
            states[record.node] = status
        return states

    @staticmethod
    def _node(record: NodeRecord, state: str) -> dict[str, Any]:
        last = record.rounds[-1] if record.rounds else None
        scored = next((r.global_test for r in reversed(record.rounds)
                       if measured(r.global_test)), None)  # report.eval_every
        return {"node": record.node, "state": state,
                "round": last.round if last else None,
                "f1": None if scored is None else round(scored.f1, 4),
                "accuracy": None if scored is None else round(scored.accuracy, 4),
                "bytes_sent": record.bytes_sent, "bytes_received": record.bytes_received,
                "in": len(record.in_neighbours), "out": len(record.out_neighbours),
                "machine": record.machine or "", "error": record.error or ""}

    @staticmethod
    def _edges(records: list[NodeRecord]) -> list[dict[str, Any]]:
        """Every edge that carried bytes: cumulative (every kind), models and prototypes in
        the sender's last round, and the bandwidth [links] set on it (bits/s, 0: none)."""
        edges: dict[tuple[int, int], dict[str, int]] = {}
        for record in records:
            for peer, bits in (record.in_link_bandwidth or {}).items():
                edges.setdefault((int(peer), record.node), {"bytes": 0, "last": 0})[
                    "limit"] = int(bits)
        for record in records:
            for peer, kinds in record.bytes_sent_by_peer.items():
                edge = edges.setdefault((record.node, int(peer)), {"bytes": 0, "last": 0})
                edge["bytes"] = sum(kinds.values())
            if record.rounds:
                for peer, kinds in record.rounds[-1].bytes_sent_by_peer.items():
                    edge = edges.setdefault((record.node, int(peer)), {"bytes": 0, "last": 0})
                    edge["last"] = sum(v for k, v in kinds.items() if k in PAYLOAD_KINDS)
        return [{"from": u, "to": v, "limit": 0, **values}
                for (u, v), values in sorted(edges.items())]

    @staticmethod
    def _per_round(records: list[NodeRecord], through: int | None) -> dict[str, Any]:
        """The charts' series, rounds up to `through` only (None: every round)."""
        rounds, by_kind = bytes_by_kind(records)
        whole = [i for i, r in enumerate(rounds) if through is None or r <= through]
        means = round_means(records)
        consensus = consensus_by_round(records)
        return {"rounds": [rounds[i] for i in whole],
                "mean_f1": [round(means[rounds[i]], 4) if rounds[i] in means else None
                            for i in whole],
                "f1": {str(r.node): [[x.round, round(x.global_test.f1, 4)] for x in r.rounds
                                     if (through is None or x.round <= through)
                                     and measured(x.global_test)]
                       for r in records},
                "bytes_by_kind": {kind: [values[i] for i in whole]
                                  for kind, values in by_kind.items()},
                "consensus": [consensus.get(rounds[i]) for i in whole]}

    def log_tail(self, node: int, lines: int = 40) -> str:
        path = self.run_dir / "logs" / f"node-{node}.log"
        try:
            with path.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 64 * 1024))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return f"(no log for node {node} here yet)"
        return "\n".join(text.splitlines()[-lines:])


def whole_through(records: list[NodeRecord], states: dict[int, str]) -> int | None:
    """The last round every working node has reported or is away for (-1: none yet; None:
    no node works any more, so every round is as whole as it will be). A later round drawn
    now would show only the nodes that reported it: a drop that is no drop."""
    reached = [reported_through(r) for r in records if states[r.node] in WORKING]
    return min(reached) if reached else None


def reported_through(record: NodeRecord) -> int:
    """The node's last round, and after it the rounds the scenario keeps it away."""
    last = record.rounds[-1].round if record.rounds else -1
    away = set(record.away_rounds or ())
    while last + 1 in away:
        last += 1
    return last


def positions(nodes: int) -> dict[str, list[float]]:
    """Node positions on a circle: networkx's circular_layout, as the topology picture."""
    return {str(i): [round(math.cos(2 * math.pi * i / nodes), 4),
                     round(math.sin(2 * math.pi * i / nodes), 4)] for i in range(nodes)}


def app(monitor: Monitor):
    """The Starlette application serving `monitor`'s run."""
    try:
        from starlette.applications import Starlette
        from starlette.responses import (
            FileResponse,
            JSONResponse,
            PlainTextResponse,
            StreamingResponse,
        )
        from starlette.routing import Route
    except ImportError:
        raise ConfigError(HINT) from None

    async def page(request):
        return FileResponse(PAGE / "index.html", media_type="text/html")

    async def static(request):
        name = request.path_params["name"]
        if name not in {p.name for p in PAGE.iterdir()}:
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(PAGE / name)

    async def snapshot(request):
        return JSONResponse(monitor.snapshot())

    async def events(request):
        async def stream():
            last = None
            while not await request.is_disconnected():
                text = json.dumps(monitor.snapshot())
                if text != last:
                    last = text
                    yield f"data: {text}\n\n"
                await asyncio.sleep(PUSH_EVERY)
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def log(request):
        node = request.path_params["node"]
        if not 0 <= node < monitor.nodes:
            return PlainTextResponse("no such node", status_code=404)
        return PlainTextResponse(monitor.log_tail(node))

    async def files(request):
        name = request.path_params["name"]
        path = monitor.run_dir / name
        if not (name in OUTPUTS or NODE_FILE.fullmatch(name)) or not path.is_file():
            return PlainTextResponse("not found", status_code=404)
        return FileResponse(path, filename=name)

    return Starlette(routes=[
        Route("/", page), Route("/static/{name}", static),
        Route("/api/snapshot", snapshot), Route("/api/events", events),
        Route("/api/log/{node:int}", log), Route("/files/{name}", files)])


def check_port(host: str, port: int) -> None:
    """ConfigError when `port` on `host` cannot be bound (in use, or not an address here)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                              + (" (the port is in use: pick another with --port)"
                                 if exc.errno == 98 else "")) from None


def serve(run_dir: Path, host: str, port: int, ready=None) -> None:
    """Serve the page of `run_dir` until interrupted."""
    monitor = Monitor(run_dir)
    application = app(monitor)
    check_port(host, port)
    import uvicorn

    config = uvicorn.Config(application, host=host, port=port, log_level="warning",
                            lifespan="off")
    server = uvicorn.Server(config)

    async def serve_then_say() -> None:  # `ready` once the page answers, not before
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started and ready is not None:
            ready()
        await task

    asyncio.run(serve_then_say())
