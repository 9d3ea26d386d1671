"""A whole federation in virtual time in this process: every node the real round loop on a
thread of its own, its network and clock from node.sim.engine.

    python -m node.sim --federation FILE --results DIR

Each node writes node-<i>.json as a node process does; seconds in them are virtual.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import torch

from node.federation import Federation
from node.record import NodeRecord
from node.runtime import Recorder, build_node
from node.sim.allocator import share_arenas
from node.sim.engine import Engine, SimClock, SimStopped, SimTransport
from node.sim.wire import Wire
from topology.links import parse_rate

log = logging.getLogger("node")
STOPPED = "stopped by signal"  # as a node process records it


def engine_for(federation: Federation, epoch: float | None = None,
               workers: int = 0) -> Engine:
    """The virtual clocks and wire of `federation`: its links, uplinks and slowdowns;
    `workers` nodes compute at once (0: deploy.cores, else this machine's cores)."""
    config = federation.config
    uplink = parse_rate(config.links.uplink) if config.links.uplink else None
    wire = Wire(federation.shaped_links, config.seed,
                {i: uplink for i in range(config.nodes)} if uplink else None)
    factors = config.sim.node_slowdowns or [1.0] * config.nodes
    return Engine(config.nodes, wire, epoch=time.time() if epoch is None else epoch,
                  workers=workers or config.deploy.usable_cores(),
                  slowdowns=[config.sim.slowdown * f for f in factors])


def simulate(federation: Federation, results_dir: Path, engine: Engine | None = None,
             ) -> list[dict[str, Any]]:
    """Run every node to its end in virtual time; their records as node-<i>.json holds
    them. A node that fails is recorded "failed" and leaves; the others go on."""
    engine = engine or engine_for(federation)
    torch.set_num_threads(1)  # each node's compute on its own thread: its CPU time
    share_arenas(engine.workers)
    results: dict[int, dict[str, Any]] = {}

    def work(node_id: int) -> None:
        engine.begin(node_id)
        member = federation.member(node_id)
        transport = SimTransport(engine, node_id, list(member.out_neighbours))
        recorder = Recorder(Path(results_dir) / f"node-{node_id}.json",
                            NodeRecord(node=node_id), started=0.0, started_at=engine.epoch)
        try:
            # the clock is the thread's CPU time: on the CPU, one torch thread
            node = build_node(federation, node_id, lambda _bound: transport, recorder,
                              clock=SimClock(engine, node_id), threads=1,
                              device=torch.device("cpu"))
            results[node_id] = node.run().to_dict()
        except SimStopped:
            recorder.fail(STOPPED, status="stopped")
            results[node_id] = recorder.result.to_dict()
        except Exception as exc:  # recorded; the federation goes on
            log.exception("node %d failed", node_id)
            recorder.fail(f"{type(exc).__name__}: {exc}")
            results[node_id] = recorder.result.to_dict()
        finally:
            transport.close(0)

    threads = [threading.Thread(target=work, args=(m.node_id,), name=f"node-{m.node_id}",
                                daemon=True) for m in federation.members]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # a timed join, so the main thread still takes signals
            thread.join(0.5)
    return [results[i] for i in range(len(federation.members))]
