"""Pure planning: which nodes run where, with which addresses, before anything starts."""

from __future__ import annotations

import datetime
import json
import socket
from dataclasses import dataclass
from pathlib import Path

from node.config import FederationConfig, build_graph
from node.errors import ConfigError
from node.security import generate_keys, write_keys
from topology import in_neighbours, out_neighbours


@dataclass(frozen=True)
class NodeSpec:
    """One node of a planned federation."""

    node_id: int
    bind: str
    address: str
    in_neighbours: tuple[int, ...]
    out_neighbours: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """A federation ready to start: its run id, files and nodes."""

    run_id: str
    config_path: Path
    overrides: tuple[str, ...]
    results_dir: Path
    nodes: tuple[NodeSpec, ...]

    def peers_document(self) -> dict:
        """The peers file every node reads: where each node binds and is reached."""
        return {"bind": {str(n.node_id): n.bind for n in self.nodes},
                "connect": {str(n.node_id): n.address for n in self.nodes}}


def new_run_id(config: FederationConfig, now: datetime.datetime | None = None) -> str:
    """`<name>-<UTC timestamp>`, unique per second and sortable."""
    now = now or datetime.datetime.now(datetime.UTC)
    return f"{config.name}-{now:%Y%m%d-%H%M%S}"


def plan_local(config: FederationConfig, config_path: Path, overrides: tuple[str, ...],
               run_id: str, ports: list[int]) -> Plan:
    """Every node on `deploy.host`, node i on ports[i]."""
    if len(ports) != config.nodes:
        raise ConfigError(f"need {config.nodes} ports, got {len(ports)}")
    graph = build_graph(config)
    host = config.deploy.host
    specs = tuple(
        NodeSpec(node_id=i, bind=f"tcp://{host}:{port}", address=f"tcp://{host}:{port}",
                 in_neighbours=tuple(in_neighbours(graph, i)),
                 out_neighbours=tuple(out_neighbours(graph, i)))
        for i, port in enumerate(ports))
    results = Path(config.deploy.results_dir) / run_id
    return Plan(run_id=run_id, config_path=config_path.resolve(), overrides=overrides,
                results_dir=results, nodes=specs)


def reserve_listeners(config: FederationConfig) -> list[socket.socket]:
    """One bound, listening TCP socket per node (deploy.base_port + i, or any free port),
    held by the launcher and handed to the node process, which listens on it as is."""
    listeners: list[socket.socket] = []
    try:
        for i in range(config.nodes):
            port = config.deploy.base_port + i if config.deploy.base_port else 0
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listeners.append(sock)
            sock.bind((config.deploy.host, port))
            sock.listen(128)
    except OSError as exc:
        for sock in listeners:
            sock.close()
        where = f"port {config.deploy.base_port + len(listeners) - 1}" \
            if config.deploy.base_port else "a free port"
        raise ConfigError(f"deploy.host {config.deploy.host!r}: cannot bind {where}: "
                          f"{exc}") from None
    return listeners


KEYS_DIR = "keys"


def keys_dir(plan: Plan) -> Path:
    """Where a run's CurveZMQ keys live (owner-only files)."""
    return plan.results_dir / KEYS_DIR


def write_plan(plan: Plan, config: FederationConfig) -> Path:
    """Create the run directory with the peers file, the resolved config and, unless
    security is off, a fresh keypair per node; return the peers file's path."""
    plan.results_dir.mkdir(parents=True, exist_ok=False)
    (plan.results_dir / "logs").mkdir()
    if config.deploy.security == "curve":
        write_keys(keys_dir(plan), generate_keys(len(plan.nodes)))
    peers = plan.results_dir / "peers.json"
    peers.write_text(json.dumps(plan.peers_document(), indent=1))
    (plan.results_dir / "config.json").write_text(json.dumps(
        {"source": str(plan.config_path), "overrides": list(plan.overrides),
         "digest": config.digest(), "config": config.to_dict()}, indent=1))
    return peers
