"""Pure planning: which nodes run where, with which addresses, before anything starts."""

from __future__ import annotations

import datetime
import json
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from deploy.run_folder import FEDERATION_FILE
from node.config import blame_overrides
from node.data import default_data_dir, ensure_dataset
from node.errors import ConfigError
from node.federation import Federation, Member, resolve
from node.net.security import generate_keys, write_keys
from node.settings import FederationConfig


@dataclass(frozen=True)
class Plan:
    """A federation ready to start: its run id, where its results go, the resolved
    federation every node receives, and the config file and overrides it came from."""

    run_id: str
    source: Path
    overrides: tuple[str, ...]
    results_dir: Path
    federation: Federation
    # each node container's memory limit in bytes (deploy.backends.capacity), set by its launcher
    memory_limits: dict[int, int] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[Member, ...]:
        return self.federation.members

    @property
    def federation_file(self) -> Path:
        return self.results_dir / FEDERATION_FILE


def checked_run_id(run_id: str) -> str:
    """`run_id` if it names one folder inside the results folder: letters, digits, '-', '_'
    and '.', not starting with '.', at most 200 characters; else a ConfigError."""
    if not (run_id and len(run_id) <= 200 and run_id[0] != "."
            and all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in run_id)):
        raise ConfigError(f"run id must be letters, digits, '-', '_' or '.', not starting with "
                          f"'.', at most 200 characters (it names a folder inside the results "
                          f"folder), got {run_id!r}")
    return run_id


def new_run_id(config: FederationConfig, now: datetime.datetime | None = None) -> str:
    """`<name>-<UTC timestamp>`, unique per second and sortable."""
    now = now or datetime.datetime.now(datetime.UTC)
    return f"{config.name}-{now:%Y%m%d-%H%M%S}"


def plan_local(config: FederationConfig, source: Path, overrides: tuple[str, ...],
               run_id: str, ports: list[int]) -> Plan:
    """Every node on `deploy.host`, node i on ports[i]."""
    if len(ports) != config.nodes:
        raise ConfigError(f"need {config.nodes} ports, got {len(ports)}")
    addresses = [f"tcp://{config.deploy.host}:{port}" for port in ports]
    federation = resolve(config, addresses, addresses, str(source), overrides)
    if federation.shaped_links:  # told apart by the sender's address: each node its own
        federation = federation.with_sources([loopback_source(i) for i in range(config.nodes)])
    return Plan(run_id=run_id, source=source.resolve(), overrides=overrides,
                results_dir=Path(config.deploy.results_dir) / run_id, federation=federation)


def loopback_source(node_id: int) -> str:
    """Node `node_id`'s own loopback address (127.1.0.1, 127.1.0.2, ...; all of 127/8 is
    this machine's)."""
    number = node_id + 1
    return f"127.1.{number // 256}.{number % 256}"


def host_data_dir(config: FederationConfig) -> Path:
    """The run's dataset folder on this machine: data.dir, else $PROTOFED_DATA_DIR, else
    ./data (absolute, so messages name the real place)."""
    return Path(config.data.dir or default_data_dir()).absolute()


def prepare_data(config: FederationConfig) -> Path | None:
    """Find, or download and verify, the run's dataset and build its decoded-array cache on
    this machine, once, before any node starts; a missing file is reported with this
    machine's paths. Nodes then only load (download=False). The cache folder, if any."""
    return ensure_dataset(config.data.dataset, host_data_dir(config), config.data.download)


def check_split(config: FederationConfig) -> list[str]:
    """The federation's split made here, once, before any node starts: what cannot be split
    stops the run in one line (DataError), what measures little is returned to be said."""
    from node.data import load_dataset
    from node.data.partition import split_of, split_warnings
    dataset = load_dataset(config.data.dataset, host_data_dir(config), download=False)
    split = split_of(config, dataset.labels, dataset.num_classes)
    return split_warnings(split, dataset.num_classes, config.data.local_train_fraction)


def check_node_folders(config: FederationConfig) -> list[str]:
    """data.layout "per-node": every node's folder read once here, before any node starts:
    a missing or bad file, or counts that disagree with the folder's manifest, stop the run
    in one line naming the node and the file; what measures little is returned to be said."""
    from node.data.folders import check_node_folder, read_manifest
    root = host_data_dir(config)
    manifest = read_manifest(root)
    found = [check_node_folder(root, node, manifest) for node in range(config.nodes)]
    return folder_notes(found, str(root))


def folder_notes(found: list, root: str) -> list[str]:
    """What the checks of the nodes' folders (`node.data.folders.FolderCheck`, by node)
    found that measures little, one line each."""
    from node.data.folders import GLOBAL_TEST
    notes = []
    without = [node for node, check in enumerate(found) if not check.global_test]
    if len(without) == len(found):
        notes.append(f"no global test set ({root}/{GLOBAL_TEST} is absent): F1 global is "
                     "not measured, only each node's local test split")
    elif without:
        notes.append(f"nodes {', '.join(map(str, without))} have no global test set beside "
                     f"their folder ({root}/{GLOBAL_TEST}): their F1 global is not measured")
    no_test = [node for node, check in enumerate(found) if not check.has_test]
    if no_test:
        notes.append(f"{len(no_test)} of {len(found)} nodes have no local test images: "
                     "their local F1 is not measured")
    return notes


def node_arguments(federation_file: str, node_id: int, results: str, keys: str | None,
                   listen_fd: int | None = None) -> list[str]:
    """The arguments of `python -m node` for one node, on every backend."""
    arguments = ["--federation", federation_file, "--node-id", str(node_id),
                 "--results", results]
    if keys is not None:
        arguments += ["--keys", keys]
    if listen_fd is not None:
        arguments += ["--listen-fd", str(listen_fd)]
    return arguments


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


def ensure_results_dir(config: FederationConfig, source: Path,
                       overrides: tuple[str, ...] = ()) -> Path:
    """deploy.results_dir, checked before anything else is prepared: a place that cannot
    hold the run's folder (a file, under /proc, read-only) is a config error naming the
    file or --set option that gave it, not a traceback once the nodes are planned. Nothing
    is left behind: the check writes and removes a scratch folder in the nearest existing
    folder on the way."""
    folder = Path(config.deploy.results_dir)
    existing = next((p for p in (folder.absolute(), *folder.absolute().parents)
                     if p.exists()), Path("/"))
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, f"{existing} is not a folder")
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as exc:
        error = ConfigError(f"{source}: deploy.results_dir {str(folder)!r}: cannot hold the "
                            f"run's folder: {exc.strerror or exc}")
        raise blame_overrides(error, str(source), overrides) from None
    return folder


def write_plan(plan: Plan) -> Path:
    """Create the run directory with the federation file and, unless security is off, a
    fresh keypair per node; return the federation file's path."""
    try:
        plan.results_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise
    except OSError as exc:
        raise ConfigError(f"deploy.results_dir: cannot create the run's folder "
                          f"{plan.results_dir}: {exc.strerror or exc}") from None
    (plan.results_dir / "logs").mkdir()
    if plan.federation.config.deploy.security == "curve":
        write_keys(keys_dir(plan), generate_keys(len(plan.nodes)))
    document = {**plan.federation.to_dict(), "source": str(plan.source),
                "overrides": list(plan.overrides)}
    plan.federation_file.write_text(json.dumps(document, indent=1))
    return plan.federation_file
