"""The Docker backend: one container per node on a private bridge network of the run.

Containers are named `<run>-node-<i>` and labelled `protofed.run=<run>`, peers reach each
other by container name, each node's config is mounted read-only and its results folder
writable. Everything the run created is removed at the end, on Ctrl-C and by `down`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from deploy.backends import capacity, shaping
from deploy.backends.local import launcher_entry
from deploy.backends.plan import Plan, keys_dir, node_arguments
from deploy.backends.runner import run_status
from deploy.run_folder import FEDERATION_FILE, RUN_FILE
from node.config import FederationConfig
from node.data import folders as data_folders
from node.data.cache import CACHE_ENV
from node.errors import DeployError
from node.federation import resolve
from node.net.security import PUBLIC_FILE, secret_file

log = logging.getLogger(__name__)

LABEL = "protofed.run"
CONFIG_MOUNT = "/config"
RESULTS_MOUNT = "/results"
DATA_MOUNT = "/data"
CACHE_MOUNT = "/cache"  # the decoded-array cache, when it lives outside the data folder
INTERFACE = "eth0"
KEYS_MOUNT = "/keys"
# The unprivileged user a node runs as when the launcher is root (the image has no such
# name; the node needs no home). A non-root launcher runs nodes as itself.
NODE_UID = 10001
# Processes and threads one node container may start: torch's pools, ZeroMQ's I/O and
# authentication threads and the interpreter fit well within it; a fork bomb does not.
PIDS_LIMIT = 512
STARTING_AT_ONCE = 8  # containers created and started at once
SCRATCH = "/tmp"
# The exit code of a node stopped by SIGTERM (128 + 15), recorded for one removed by `down`.
STOPPED_EXIT = 143


def connect():
    """A Docker client speaking the engine's API version, or one clear error."""
    import docker
    import docker.errors
    import requests.exceptions

    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise DeployError(
            "Docker is not available: cannot reach the engine "
            f"({str(exc).splitlines()[0][:200]}). Install docker.io and start dockerd "
            "(see docs/backends.md), or use the local backend.") from None
    return client


def network_name(run_id: str) -> str:
    return f"{run_id}-net"


def container_name(run_id: str, node_id: int) -> str:
    return f"{run_id}-node-{node_id}"


def plan_docker(config: FederationConfig, source: Path, overrides: tuple[str, ...],
                run_id: str) -> Plan:
    """Every node in its own container, listening on deploy.port, reached by name, reading
    its dataset from the data mount."""
    port = config.deploy.port
    in_containers = dataclasses.replace(config, data=dataclasses.replace(config.data,
                                                                         dir=DATA_MOUNT))
    federation = resolve(in_containers, [f"tcp://0.0.0.0:{port}"] * config.nodes,
                         [f"tcp://{container_name(run_id, i)}:{port}"
                          for i in range(config.nodes)], str(source), overrides)
    return Plan(run_id=run_id, source=source.resolve(), overrides=overrides,
                results_dir=Path(config.deploy.results_dir).resolve() / run_id,
                federation=federation)


def check_capacity(config: FederationConfig, footprint: capacity.NodeFootprint | None,
                   plan: Plan, host_memory: int, host_cpus: int) -> str:
    """Refuse a federation that cannot fit this Docker host, before anything starts; else
    what it needs, in one line."""
    if config.deploy.cpus > host_cpus:
        raise DeployError(f"deploy.cpus = {config.deploy.cpus} exceeds the Docker host's "
                          f"{host_cpus} CPUs")
    return capacity.check_memory(config, footprint, capacity.in_degrees(plan), host_memory,
                                 container=True, where="the Docker host")


@dataclass
class DockerRun:
    """The containers and network of one running federation."""

    plan: Plan
    client: object
    containers: dict[int, object] = field(default_factory=dict)
    network: object | None = None
    exit_codes: dict[int, int] = field(default_factory=dict)
    oom_killed: set[int] = field(default_factory=set)

    vanished: set[int] = field(default_factory=set)  # removed by someone else (`down`)
    stopping: bool = False  # the launcher stopped the run (Ctrl-C, timeouts.run)

    def poll_exits(self) -> dict[int, int]:
        """Exit codes of the containers that have stopped so far."""
        import docker.errors

        for node_id, container in self.containers.items():
            if node_id in self.exit_codes:
                continue
            try:
                container.reload()
            except docker.errors.NotFound:
                # `protofed down` stopped it gracefully, kept its log and removed it
                self.vanished.add(node_id)
                self.exit_codes[node_id] = STOPPED_EXIT
                continue
            state = container.attrs["State"]
            if state["Status"] in ("exited", "dead"):
                self.exit_codes[node_id] = int(state["ExitCode"])
                if state.get("OOMKilled"):
                    self.oom_killed.add(node_id)
        return dict(self.exit_codes)

    def wait(self, timeout: float) -> None:
        """Sleep between polls of the engine."""
        time.sleep(timeout)

    def save_logs(self) -> None:
        """Copy every container's output to logs/node-<i>.log (`down` already did for the
        containers it removed)."""
        save_logs({i: c for i, c in self.containers.items() if i not in self.vanished},
                  self.plan.results_dir / "logs")

    def stop(self, grace: float = 5.0) -> None:
        """Stop every container that still runs, all at once (SIGTERM, then SIGKILL)."""
        self.stopping = True
        stop_containers([c for i, c in self.containers.items() if i not in self.vanished],
                        grace)
        self.poll_exits()

    def remove(self) -> None:
        """Record how the run ended, then remove its containers and network."""
        write_run_file(self, run_status(self.exit_codes, len(self.plan.nodes), self.stopping))
        remove_run(self.client, self.plan.run_id)


def write_run_file(run: DockerRun, status: str) -> None:
    """run.json, as the local backend writes it: the containers instead of process ids."""
    document = {"run_id": run.plan.run_id, "backend": "docker", "status": status,
                "containers": {str(i): c.name for i, c in run.containers.items()},
                "exit_codes": {str(i): c for i, c in run.exit_codes.items()},
                "out_of_memory": sorted(run.oom_killed), "nodes": len(run.plan.nodes),
                "launcher": launcher_entry()}
    (run.plan.results_dir / RUN_FILE).write_text(json.dumps(document, indent=1))


def container_command(plan: Plan, node_id: int) -> list[str]:
    """The node's command line inside its container (Docker backend and Compose alike)."""
    return node_arguments(f"{CONFIG_MOUNT}/{FEDERATION_FILE}", node_id, RESULTS_MOUNT,
                          KEYS_MOUNT if keys_dir(plan).is_dir() else None)


def container_mounts(plan: Plan, node_id: int, data_dir: Path,
                     cache_dir: Path | None = None) -> list[tuple[str, str, bool]]:
    """(host path, container path, read-only) bind mounts of one node's container.

    A node writes only its own folder of the run (`node_folder`: its result file) and sees
    only its own secret key and the public keys, not another node's results or keys. A
    dataset cache outside the data folder (`cache_mount`) is mounted read-only at /cache.
    """
    mounts = [(str(plan.federation_file.resolve()), f"{CONFIG_MOUNT}/{FEDERATION_FILE}", True),
              (str(node_folder(plan, node_id).resolve()), RESULTS_MOUNT, False)]
    if plan.federation.config.data.layout == "per-node":  # its own data and nothing else
        own = data_folders.node_folder(data_dir, node_id)
        mounts.append((str(own.resolve()), f"{DATA_MOUNT}/{own.name}", True))
        if (data_dir / data_folders.GLOBAL_TEST).is_dir():
            mounts.append((str((data_dir / data_folders.GLOBAL_TEST).resolve()),
                           f"{DATA_MOUNT}/{data_folders.GLOBAL_TEST}", True))
    else:
        mounts.append((str(data_dir.resolve()), DATA_MOUNT, True))
    cache_home = cache_mount(data_dir, cache_dir)
    if cache_home is not None:
        mounts.append((str(cache_home), CACHE_MOUNT, True))
    keys = keys_dir(plan)
    if keys.is_dir():
        for name in (PUBLIC_FILE, secret_file(node_id)):
            mounts.append((str((keys / name).resolve()), f"{KEYS_MOUNT}/{name}", True))
    return mounts


NODE_FOLDERS = "nodes"


def node_folder(plan: Plan, node_id: int) -> Path:
    """The one folder of the run a node's container may write: nodes/<i>/."""
    return plan.results_dir / NODE_FOLDERS / str(node_id)


def prepare_node_folders(plan: Plan) -> None:
    """nodes/<i>/ for every node, and node-<i>.json in the run folder as a relative link to
    the file the node writes there, so the run folder reads as a local run's does."""
    for spec in plan.nodes:
        folder = node_folder(plan, spec.node_id)
        folder.mkdir(parents=True, exist_ok=True)
        link = plan.results_dir / f"node-{spec.node_id}.json"
        if not link.is_symlink():
            link.symlink_to(Path(NODE_FOLDERS) / str(spec.node_id) / link.name)


def cache_mount(data_dir: Path, cache_dir: Path | None) -> Path | None:
    """The host folder to mount at /cache: the fallback cache home holding `cache_dir`, or
    None when the cache sits inside the data folder (seen through /data) or there is none."""
    if cache_dir is None or cache_dir.resolve().is_relative_to(data_dir.resolve()):
        return None
    return cache_dir.resolve().parent


def container_environment(data_dir: Path, cache_dir: Path | None = None) -> dict[str, str]:
    """Environment of every node container."""
    environment = {"PROTOFED_INTERFACE": INTERFACE, "HOME": SCRATCH}
    if cache_mount(data_dir, cache_dir) is not None:
        environment[CACHE_ENV] = CACHE_MOUNT
    return environment


def container_user() -> str:
    """uid:gid a node runs as: the launcher's own, or NODE_UID when the launcher is root."""
    if os.getuid() == 0:
        return f"{NODE_UID}:{NODE_UID}"
    return f"{os.getuid()}:{os.getgid()}"


def prepare_node_access(plan: Plan) -> None:
    """Make each node's folder of the run (`prepare_node_folders`) and, when the launcher is
    root, hand it and the node's secret key to the node user (a non-root launcher's nodes
    run as itself)."""
    prepare_node_folders(plan)
    if os.getuid() != 0:
        return
    for spec in plan.nodes:
        os.chown(node_folder(plan, spec.node_id), NODE_UID, NODE_UID)
    keys = keys_dir(plan)
    if keys.is_dir():
        for spec in plan.nodes:
            os.chown(keys / secret_file(spec.node_id), NODE_UID, NODE_UID)


def hardening() -> dict:
    """Docker SDK run() settings every node container gets (Compose writes the same)."""
    return {"user": container_user(), "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"], "read_only": True,
            "pids_limit": PIDS_LIMIT}


def start(config: FederationConfig, plan: Plan, image: str, client,
          data_dir: Path, cache_dir: Path | None = None) -> DockerRun:
    """Create the network and one container per node; on any failure remove all of it."""
    import docker.errors

    run_id = plan.run_id
    taken = [c.name for c in client.containers.list(all=True, ignore_removed=True)
             if c.name.startswith(f"{run_id}-node-")]
    if taken or client.networks.list(names=[network_name(run_id)]):
        raise DeployError(f"names of run {run_id} are already in use "
                          f"({', '.join(taken) or network_name(run_id)}): pick another "
                          f"--run-id or `protofed down {run_id}`")
    prepare_node_access(plan)
    run = DockerRun(plan, client)
    try:
        run.network = client.networks.create(network_name(run_id), driver="bridge",
                                             internal=True, labels={LABEL: run_id})
        # the engine takes about 0.4 s to create and start one container: a few at once
        nodes = [spec.node_id for spec in plan.nodes]
        with ThreadPoolExecutor(max_workers=STARTING_AT_ONCE) as pool:
            run.containers.update(zip(nodes, pool.map(
                lambda node: _run_container(config, plan, node, image, client, data_dir,
                                            cache_dir), nodes)))
        shaping.shape_containers(plan.federation, run.containers, network_name(run_id),
                                 INTERFACE)
    except docker.errors.APIError as exc:
        remove_run(client, run_id)
        raise DeployError(f"starting run {run_id} failed: {exc.explanation or exc}") from None
    except BaseException:
        remove_run(client, run_id)
        raise
    write_run_file(run, "running")
    return run


def _run_container(config: FederationConfig, plan: Plan, node: int, image: str, client,
                   data_dir: Path, cache_dir: Path | None):
    """Create and start node `node`'s container."""
    run_id = plan.run_id
    return client.containers.run(
        image, name=container_name(run_id, node), detach=True,
        command=container_command(plan, node),
        network=network_name(run_id), hostname=container_name(run_id, node),
        labels={LABEL: run_id, "protofed.node": str(node)},
        environment=container_environment(data_dir, cache_dir),
        volumes={source: {"bind": target, "mode": "ro" if read_only else "rw"}
                 for source, target, read_only in container_mounts(
                     plan, node, data_dir, cache_dir)},
        tmpfs={SCRATCH: "size=256m"},
        **hardening(),
        nano_cpus=int(config.deploy.cpus * 1e9) or None,
        mem_limit=plan.memory_limits.get(node))  # see deploy.backends.capacity


def stop_containers(containers: list, grace: float) -> None:
    """SIGTERM every container at once, wait up to `grace` seconds for all of them, then
    SIGKILL those still running (one after another, `docker stop` took grace each)."""
    import docker.errors

    def state(container) -> str:
        try:
            container.reload()
            return container.status
        except docker.errors.NotFound:
            return "removed"

    for container in containers:
        try:
            container.kill(signal="SIGTERM")
        except docker.errors.APIError:  # not running, or already gone
            pass
    deadline = time.monotonic() + grace
    running = [c for c in containers if state(c) == "running"]
    while running and time.monotonic() < deadline:
        time.sleep(0.2)
        running = [c for c in running if state(c) == "running"]
    for container in running:
        log.warning("%s did not stop within %.0f s: killed", container.name, grace)
        try:
            container.kill()
            container.wait(timeout=30)
        except (docker.errors.APIError, OSError):
            pass


def save_logs(containers: dict[int, object], folder: Path) -> None:
    """Each container's output as folder/node-<i>.log."""
    import docker.errors

    folder.mkdir(parents=True, exist_ok=True)
    for node_id, container in containers.items():
        try:
            (folder / f"node-{node_id}.log").write_bytes(
                container.logs(stdout=True, stderr=True))
        except docker.errors.APIError as exc:
            if exc.status_code in (404, 409):  # gone, or being removed by `protofed down`
                log.debug("node %d's container is gone: its log was kept by whoever "
                          "removed it", node_id)
            else:
                log.warning("cannot read the log of node %d: %s", node_id, exc)
        except Exception as exc:  # noqa: BLE001 - a lost log must not stop the cleanup
            log.warning("cannot read the log of node %d: %s", node_id, exc)


def results_folder(container) -> Path | None:
    """The run folder of a node container (its /results mount is nodes/<i>/ in it)."""
    for mount in container.attrs.get("Mounts", []):
        # a bind mount only: a tmpfs at /results (a swarm task's) has no folder here, and
        # its empty source read as the current folder
        if mount.get("Destination") == RESULTS_MOUNT and mount.get("Type") == "bind":
            source = Path(mount["Source"])
            return source.parent.parent if source.parent.name == NODE_FOLDERS else source
    return None


SWARM_TASK = "com.docker.swarm.service.id"  # a container a swarm service owns


def run_containers(client, run_id: str) -> list:
    """A run's containers, any state, but not a swarm service's tasks (the swarm fleet
    stops those through their services); one removed while listing is left out."""
    return [c for c in client.containers.list(all=True, ignore_removed=True,
                                              filters={"label": f"{LABEL}={run_id}"})
            if SWARM_TASK not in c.labels]


def run_folder_of(client, run_id: str) -> Path | None:
    """The results folder of a run's containers on this engine, None if none has one."""
    return next((f for f in map(results_folder, run_containers(client, run_id))
                 if f is not None and f.is_dir()), None)


def down_run(client, run_id: str, grace: float = 5.0) -> tuple[int, int]:
    """Stop a run's containers gracefully (all at once), keep their logs beside their
    results, then remove the containers and networks; how many of each went."""
    containers = run_containers(client, run_id)
    stop_containers(containers, grace)
    by_node = {int(c.labels.get("protofed.node", -1)): c for c in containers}
    folder = next((f for f in map(results_folder, containers) if f is not None), None)
    if folder is not None and folder.is_dir():
        save_logs(by_node, folder / "logs")
    # The run's `protofed up` may remove what it sees exit before we get to it: count the
    # containers found running, not only those still here to remove.
    _, networks = remove_run(client, run_id)
    return len(containers), networks


def remove_run(client, run_id: str) -> tuple[int, int]:
    """Force-remove a run's containers and networks; return how many of each went."""
    import docker.errors

    containers = run_containers(client, run_id)
    for container in containers:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # another `down` is removing it right now
            log.debug("removing %s: %s", container.name, exc)
    networks = client.networks.list(filters={"label": f"{LABEL}={run_id}"})
    for network in networks:
        try:
            network.remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            log.debug("removing network %s: %s", network.name, exc)
    return len(containers), len(networks)


def ended(states: list[tuple[str, str]]) -> bool:
    """Whether every container of a run (as listed by `running_runs`) has exited."""
    return all(state not in ("running", "created", "restarting") for _, state in states)


def running_runs(client) -> dict[str, list[tuple[str, str]]]:
    """Federations with containers on this engine: run id -> (node, container state), in
    node order."""
    runs: dict[str, list[tuple[str, str]]] = {}
    for container in client.containers.list(all=True, ignore_removed=True,
                                            filters={"label": LABEL}):
        if SWARM_TASK in container.labels:  # the swarm fleet's
            continue
        runs.setdefault(container.labels[LABEL], []).append(
            (container.labels.get("protofed.node", "?"), container.status))
    return {run: sorted(states, key=lambda s: int(s[0]) if s[0].isdigit() else -1)
            for run, states in sorted(runs.items())}


def container_logs(client, run_id: str, node_id: int, tail: int = 200,
                   follow: bool = False) -> Iterator[str]:
    """The last lines of one node container's output, then, with `follow`, what it writes
    until it exits. Found by its labels, so Compose's and the Swarm's names work too."""
    found = [c for c in run_containers(client, run_id)
             if c.labels.get("protofed.node") == str(node_id)]
    if not found:
        raise DeployError(f"run {run_id} has no container for node {node_id}")
    if not follow:
        yield found[0].logs(tail=tail).decode(errors="replace")
        return
    for chunk in found[0].logs(tail=tail, stream=True, follow=True):
        yield chunk.decode(errors="replace")
