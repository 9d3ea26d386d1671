"""A whole federation in one process: every node in its own thread on one MemoryHub.

The same round loop, algorithms and peers as over ZeroMQ, without sockets or processes:
fast and deterministic, for tests and quick experiments.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from node.config import FederationConfig
from node.data import default_data_dir, ensure_dataset
from node.federation import Federation, resolve
from node.net.transport import MemoryHub
from node.record import NodeRecord
from node.runtime import Recorder, build_node


def memory_federation(config: FederationConfig) -> Federation:
    """`config` resolved with in-memory addresses (node i is memory://i)."""
    addresses = [f"memory://{i}" for i in range(config.nodes)]
    return resolve(config, addresses, addresses)


def run_in_memory(federation: Federation, results_dir: Path,
                  timeout: float = 600.0) -> list[dict[str, Any]]:
    """Run every node to the end and return their results as node-<i>.json holds them.

    A node that raises makes the whole call raise, after the others stopped.
    """
    data = federation.config.data
    # the nodes never download: the dataset is fetched (if allowed) once, here
    ensure_dataset(data.dataset, data.dir or default_data_dir(), data.download)
    hub = MemoryHub()
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def work(node_id: int) -> None:
        member = federation.member(node_id)
        transport = hub.transport(node_id, list(member.out_neighbours))
        recorder = Recorder(Path(results_dir) / f"node-{node_id}.json", NodeRecord(node=node_id))
        try:
            node = build_node(federation, node_id, lambda _bound: transport, recorder)
            results[node_id] = node.run().to_dict()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            recorder.fail(f"{type(exc).__name__}: {exc}")
            transport.close(0)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m.node_id,), daemon=True)
               for m in federation.members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    if errors:
        raise errors[0]
    if len(results) != len(federation.members):
        raise TimeoutError(f"nodes {sorted(set(range(len(federation.members))) - set(results))} "
                           f"did not finish within {timeout:g} s")
    return [results[i] for i in range(len(federation.members))]
