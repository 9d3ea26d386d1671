"""The Swarm backend: one service per node on a Docker Swarm, driven through its manager.

Nothing comes from the launcher's disk at run time. The node image, with the dataset's
files, is pushed to `deploy.registry` and every service pulls it by digest. Each node's
secret key is a Docker secret given to its own service only; `federation.json` and the
public keys are Docker configs. A node writes its record to its output as well
(`--record-stdout`), which the manager collects wherever the task runs: the launcher
rebuilds `results/<run>/` from it, so the table, the CSV and the pictures are the other
backends'. Services, secrets, configs and the network carry the `protofed.run` label;
`down` removes them all, and the swarm removes their containers on every machine.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from deploy.backends import capacity
from deploy.backends.capacity import HEADROOM, GiB
from deploy.backends.docker_backend import (
    CONFIG_MOUNT,
    DATA_MOUNT,
    INTERFACE,
    KEYS_MOUNT,
    LABEL,
    RESULTS_MOUNT,
    SCRATCH,
    STOPPED_EXIT,
    container_command,
    container_user,
    network_name,
)
from deploy.backends.image import IMAGE_NAME
from deploy.backends.local import launcher_entry
from deploy.backends.plan import Plan, keys_dir
from deploy.backends.runner import run_status
from deploy.run_folder import FEDERATION_FILE, RUN_FILE
from node.config import FederationConfig
from node.data import IDX_FOLDERS, VERIFY_ENV, dataset_sources
from node.data.cache import CACHE_ENV
from node.data.check import parse_line
from node.data.folders import GLOBAL_TEST, FolderCheck, node_folder
from node.errors import ConfigError, DeployError
from node.federation import read as read_federation
from node.net.security import PUBLIC_FILE, secret_file
from node.record import write_json_atomically
from node.record_stream import RecordAssembler, is_record_line

log = logging.getLogger(__name__)

NODE_LABEL = "protofed.node"
# A task sees the Docker backend's paths: the config and keys come as Docker configs and
# secrets there, the dataset is in the image, and /results is a tmpfs (the record travels
# through the output).
CONFIG_TARGET = f"{CONFIG_MOUNT}/{FEDERATION_FILE}"
ENDED = {"complete", "failed", "shutdown", "rejected", "orphaned", "remove"}
STOP_GRACE_NS = 10 * 10**9
API_VERSION = "1.41"  # services, secrets and configs as used here; engines from 20.10 on


def connect(manager: str = ""):
    """A client of the swarm's manager (`manager`, else $DOCKER_HOST, else the local
    engine), or one clear error when it is not one."""
    import docker
    import docker.errors
    import requests.exceptions

    client = None
    try:
        # a fixed API version: "auto" connects in the constructor and leaks the socket
        # when the engine is not there
        client = (docker.DockerClient(base_url=manager, version=API_VERSION, timeout=120)
                  if manager else docker.from_env(version=API_VERSION, timeout=120))
        swarm = client.info().get("Swarm") or {}
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if client is not None:
            client.close()
        raise DeployError(f"cannot reach the swarm manager {manager or '(DOCKER_HOST)'}: "
                          f"{str(exc).splitlines()[0][:200]}") from None
    if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
        client.close()
        raise DeployError(f"the Docker engine at {manager or '(DOCKER_HOST)'} is not a swarm "
                          "manager: run `docker swarm init` there, or set deploy.manager")
    return client


def check_capacity(config: FederationConfig, footprint: capacity.NodeFootprint | None,
                   plan: Plan, client, available: list[tuple[str, str]],
                   constraints: dict[int, list[str]]) -> str:
    """Refuse, before anything starts, nodes that would not fit the machines they go to;
    else what each machine is to hold, in one line."""
    memory = {n.id: int(n.attrs["Description"]["Resources"].get("MemoryBytes", 0))
              for n in client.nodes.list()}
    ids = {hostname: node for node, hostname in available}
    needs: dict[str, int] = {}
    for member in plan.nodes:
        where = constraints.get(member.node_id) or []
        target = where[0].split("==")[1] if where else ""
        target = ids.get(target, target)
        needs[target] = needs.get(target, 0) + capacity.node_memory(
            config, footprint, len(member.in_neighbours), container=True)
    held = []
    for node, needed in needs.items():
        hostname = next((h for i, h in available if i == node), node) or "any machine"
        if node and memory.get(node) and needed > HEADROOM * memory[node]:
            raise DeployError(f"the nodes placed on {hostname} need {needed / GiB:.1f} GiB but "
                              f"it has {memory[node] / GiB:.1f} GiB: use fewer nodes, a "
                              "smaller deploy.memory or more machines")
        held.append(f"{needed / GiB:.2f} GiB on {hostname}")
    source = "deploy.memory" if config.deploy.memory else "measured"
    return f"memory: about {', '.join(held)} ({source})"


def machines(client) -> list[tuple[str, str]]:
    """(node id, hostname) of the swarm's ready, active machines, by hostname."""
    found = [(n.id, n.attrs["Description"]["Hostname"]) for n in client.nodes.list()
             if n.attrs["Status"]["State"] == "ready"
             and n.attrs["Spec"].get("Availability") == "active"]
    return sorted(found, key=lambda item: item[1])


def placement_constraints(config: FederationConfig, available: list[tuple[str, str]],
                          node_id: int) -> list[str]:
    """Where node `node_id` may run: its pinned machine, else (placement "spread") the
    machine whose turn it is, else anywhere."""
    pinned = pinned_machine(config, node_id)
    if pinned:
        if pinned not in {hostname for _, hostname in available}:
            raise DeployError(f"deploy.pin[{node_id}] = {pinned!r} is not a ready machine of "
                              f"the swarm ({', '.join(h for _, h in available)})")
        return [f"node.hostname=={pinned}"]
    if config.deploy.placement == "spread" and available:
        return [f"node.id=={available[node_id % len(available)][0]}"]
    return []


def pinned_machine(config: FederationConfig, node_id: int) -> str:
    """The hostname deploy.pin names for node `node_id` ("" when none)."""
    return config.deploy.pin[node_id] if node_id < len(config.deploy.pin) else ""


def latest_task(tasks: list[dict]) -> dict:
    """A service's newest task (a replicated service of one replica has one at a time)."""
    return max(tasks, key=lambda task: task.get("CreatedAt", ""))


def data_context(node_image: str, files: list[Path], data_dir: Path) -> bytes:
    """A build context: the node image with the dataset's files at /data, as they lie under
    `data_dir`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        dockerfile = f"FROM {node_image}\nCOPY data {DATA_MOUNT}\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for path in files:
            member = tar.gettarinfo(str(path), arcname="data/" + str(
                path.resolve().relative_to(data_dir.resolve())))
            member.uid = member.gid = 0
            member.mode = 0o444
            with path.open("rb") as stream:
                tar.addfile(member, stream)
    return buffer.getvalue()


def data_image_tag(node_image_id: str, files: list[Path]) -> str:
    """A tag naming the node image and the dataset's files (their names and sizes)."""
    digest = hashlib.sha256(node_image_id.encode())
    for path in files:
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
    return digest.hexdigest()[:12]


def push_image(client, node_image: str, config: FederationConfig, data_dir: Path) -> str:
    """Build the node image with this config's dataset, push it to deploy.registry; the
    reference every service pulls: `registry/protofed-node-data@sha256:...`."""
    import docker.errors

    files = dataset_sources(config.data.dataset, data_dir)
    repository = f"{config.deploy.registry}/{IMAGE_NAME}-data"
    tag = data_image_tag(client.images.get(node_image).id, files)
    try:
        client.images.get(f"{repository}:{tag}")
    except docker.errors.ImageNotFound:
        log.info("building %s:%s with %d dataset files", repository, tag, len(files))
        client.images.build(fileobj=io.BytesIO(data_context(node_image, files, data_dir)),
                            custom_context=True, tag=f"{repository}:{tag}", rm=True,
                            pull=False, network_mode="none")
    return pushed(client, repository, tag, config.deploy.registry)


def pushed(client, repository: str, tag: str, registry: str) -> str:
    """Push `repository:tag` to `registry`; the reference every service pulls by digest."""
    digest = None
    for line in client.images.push(repository, tag=tag, stream=True, decode=True):
        if line.get("error"):
            raise DeployError(f"pushing {repository}:{tag} to {registry} failed: "
                              f"{line['error']}")
        digest = (line.get("aux") or {}).get("Digest") or digest
    if not digest:
        raise DeployError(f"the registry {registry} did not return a digest for "
                          f"{repository}:{tag}")
    return f"{repository}@{digest}"


def push_node_image(client, node_image: str, config: FederationConfig) -> str:
    """The node image alone, with no dataset, pushed to deploy.registry (data.layout
    "per-node": each machine holds its nodes' folders); the reference services pull."""
    image = client.images.get(node_image)
    repository = f"{config.deploy.registry}/{IMAGE_NAME}"
    tag = image.id.split(":")[-1][:12]
    image.tag(repository, tag)
    return pushed(client, repository, tag, config.deploy.registry)


def require_pins(config: FederationConfig) -> None:
    """data.layout "per-node" on a swarm: every node pinned (deploy.pin) to the machine
    that holds its folder, at data.dir there."""
    unpinned = [node for node in range(config.nodes) if not pinned_machine(config, node)]
    if unpinned:
        raise ConfigError('data.layout = "per-node" on the swarm: deploy.pin must name, for '
                          "every node, the machine that holds its folder (nodes without "
                          f"one: {', '.join(map(str, unpinned[:5]))}"
                          f"{', ...' if len(unpinned) > 5 else ''})")
    if not config.data.dir:
        raise ConfigError('data.layout = "per-node" on the swarm: set data.dir, the folder '
                          "of the nodes' folders on each machine (the same path on all)")


# A folder check that has not ended by then is stopped and named.
CHECK_SECONDS = 300


def check_folders(client, config: FederationConfig, plan: Plan, image: str,
                  constraints: dict[int, list[str]]) -> dict[int, FolderCheck]:
    """Every node's folder checked on the machine it is pinned to, before any node starts:
    one short task per node (`python -m node.data.check`, no network, data.dir read-only);
    one line naming the node, the machine and the file for the first that fails."""
    from docker.types import Mount, RestartPolicy

    labels = {LABEL: plan.run_id}
    checks = {}
    try:
        for spec in plan.nodes:
            node = spec.node_id
            checks[node] = client.services.create(
                image, name=f"{plan.run_id}-check-{node}", labels=labels,
                command=["python", "-m", "node.data.check", "--root", DATA_MOUNT,
                         "--node", str(node)],
                user=container_user(), restart_policy=RestartPolicy(condition="none"),
                constraints=constraints.get(node, []), cap_drop=["ALL"], read_only=True,
                mounts=[Mount(DATA_MOUNT, config.data.dir, type="bind", read_only=True)])
        return _checked_folders(config, checks)
    finally:
        for service in checks.values():
            try:
                service.remove()
            except Exception as exc:  # noqa: BLE001 - `down` removes what is left
                log.debug("could not remove %s: %s", service.name, exc)


def _checked_folders(config: FederationConfig,
                     checks: dict[int, object]) -> dict[int, FolderCheck]:
    """What each node's check task reported, once all ended; DeployError for the first
    node whose folder failed or whose task could not run."""
    ends = time.monotonic() + CHECK_SECONDS
    states: dict[int, dict] = {}
    while len(states) < len(checks):
        for node, service in checks.items():
            tasks = service.tasks()
            if node not in states and tasks and latest_task(tasks)["Status"]["State"] in ENDED:
                states[node] = latest_task(tasks)["Status"]
        if len(states) < len(checks):
            if time.monotonic() > ends:
                late = sorted(set(checks) - set(states))
                raise DeployError(f"the check of node {late[0]}'s folder did not end in "
                                  f"{CHECK_SECONDS} s on {pinned_machine(config, late[0])}")
            time.sleep(0.5)
    found = {}
    for node, service in sorted(checks.items()):
        where = pinned_machine(config, node)
        reports = [parse_line(line) for line in _lines(service.logs(stdout=True, stderr=True))]
        report = next((r for r in reports if r is not None), None)
        if report is None:
            raise DeployError(f"node {node}: its folder could not be checked on {where}: "
                              f"{states[node].get('Err') or 'the check said nothing'} "
                              f"(data.dir {config.data.dir} there)")
        if "error" in report:  # named by its path on the machine, not in the task
            error = str(report["error"]).replace(f"{DATA_MOUNT}/", f"{config.data.dir}/")
            raise DeployError(f"{error} (on {where})")
        found[node] = FolderCheck(bool(report.get("has_test")),
                                  bool(report.get("global_test")))
    return found


def node_command(plan: Plan, node_id: int) -> list[str]:
    """The node's arguments inside its task: a container's, writing its record to its
    output too (the image's entrypoint runs them: a service's "command" would replace it)."""
    return [*container_command(plan, node_id), "--record-stdout"]


def node_environment(config: FederationConfig) -> list[str]:
    """Environment of every node task; the machine's name comes from the swarm's template."""
    environment = [f"PROTOFED_INTERFACE={INTERFACE}", f"HOME={SCRATCH}",
                   f"{CACHE_ENV}={SCRATCH}/cache", "PROTOFED_MACHINE={{.Node.Hostname}}"]
    # the image's dataset files checked before use (published md5s exist for these only)
    if config.data.layout == "pooled" and config.data.dataset in IDX_FOLDERS:
        environment.append(f"{VERIFY_ENV}=1")
    return environment


@dataclass
class _Output:
    """One node's output as it arrives: its log lines and its newest record."""

    lines: list[str] = field(default_factory=list)
    record: RecordAssembler = field(default_factory=RecordAssembler)


@dataclass
class SwarmRun:
    """The services, secrets, configs and network of one federation on a swarm."""

    plan: Plan
    client: object
    services: dict[int, object] = field(default_factory=dict)
    exit_codes: dict[int, int] = field(default_factory=dict)
    machines: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    stopping: bool = False
    outputs: dict[int, _Output] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def follow(self) -> None:
        """Read every node's output as it comes (threads), writing its record on arrival."""
        for node_id, service in self.services.items():
            self.outputs[node_id] = _Output()
            threading.Thread(target=self._follow, args=(node_id, service), daemon=True,
                             name=f"protofed-swarm-log-{node_id}").start()

    def _follow(self, node_id: int, service) -> None:
        try:
            stream = service.logs(stdout=True, stderr=True, follow=True)
            for line in _lines(stream):
                self._take(node_id, line, self.outputs[node_id])
        except Exception as exc:  # noqa: BLE001 - the final read in save_logs still comes
            log.debug("node %d: following its output stopped: %s", node_id, exc)

    def _take(self, node_id: int, line: str, output: _Output) -> None:
        if not is_record_line(line):
            output.lines.append(line)
        elif output.record.feed(line):
            with self._lock:
                write_record(self.plan.results_dir, node_id, output.record.latest)

    def poll_exits(self) -> dict[int, int]:
        """Exit codes of the nodes whose task has ended."""
        import docker.errors

        for node_id, service in self.services.items():
            if node_id in self.exit_codes:
                continue
            try:
                tasks = service.tasks()
            except docker.errors.NotFound:  # `protofed down` removed it
                self.exit_codes[node_id] = STOPPED_EXIT
                continue
            if not tasks:
                if self.stopping:  # scaled to 0 before its task was seen to end
                    self.exit_codes[node_id] = STOPPED_EXIT
                continue
            task = latest_task(tasks)
            status = task.get("Status", {})
            if task.get("NodeID"):
                self.machines.setdefault(node_id, task["NodeID"])
            if status.get("State") in ENDED:
                code = status.get("ContainerStatus", {}).get("ExitCode")
                self.exit_codes[node_id] = int(code) if code is not None else (
                    0 if status.get("State") == "complete" else 1)
                if status.get("Err"):
                    self.errors[node_id] = status["Err"]
        return dict(self.exit_codes)

    def wait(self, timeout: float) -> None:
        time.sleep(timeout)

    def save_logs(self) -> None:
        """Every node's whole output, read once more from the manager: logs/node-<i>.log and
        its final record."""
        folder = self.plan.results_dir / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        for node_id, service in self.services.items():
            output = _Output()
            try:
                for line in _lines(service.logs(stdout=True, stderr=True)):
                    self._take(node_id, line, output)
            except Exception as exc:  # noqa: BLE001 - one node's log is not worth the run
                output.lines.append(f"(its output could not be read: {exc})")
            if node_id in self.errors:
                output.lines.append(f"swarm: {self.errors[node_id]}")
            (folder / f"node-{node_id}.log").write_text("\n".join(output.lines) + "\n")

    def stop(self, grace: float = 5.0) -> None:
        """Ask every node's task to stop (SIGTERM, then SIGKILL after the grace)."""
        self.poll_exits()  # what ended on its own keeps its exit code
        self.stopping = True
        for node_id, service in self.services.items():
            if node_id not in self.exit_codes:
                try:
                    service.scale(0)
                except Exception as exc:  # noqa: BLE001 - removal follows in any case
                    log.warning("node %d: could not stop its service: %s", node_id, exc)
        ends = time.monotonic() + grace + 10
        while time.monotonic() < ends and len(self.poll_exits()) < len(self.services):
            time.sleep(0.5)

    def remove(self) -> None:
        """Record how the run ended, then remove everything it created on the swarm."""
        write_run_file(self, run_status(self.exit_codes, len(self.plan.nodes), self.stopping))
        remove_run(self.client, self.plan.run_id)


def _lines(stream) -> Iterator[str]:
    """Text lines from a Docker log stream of byte chunks."""
    pending = b""
    for chunk in stream:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


def write_record(results_dir: Path, node_id: int, document: dict | None) -> None:
    """node-<i>.json from a node's streamed record, as the node writes it."""
    if document is not None:
        write_json_atomically(results_dir / f"node-{node_id}.json", document)


def write_run_file(run: SwarmRun, status: str) -> None:
    """run.json: the backend, the services, where each node ran, exit codes, how it ended."""
    hostnames = dict(machine_names(run.client))
    document = {"run_id": run.plan.run_id, "backend": "swarm", "status": status,
                "services": {str(i): s.name for i, s in run.services.items()},
                "machines": {str(i): hostnames.get(m, m) for i, m in run.machines.items()},
                "exit_codes": {str(i): c for i, c in sorted(run.exit_codes.items())},
                "errors": {str(i): e for i, e in sorted(run.errors.items())},
                "nodes": len(run.plan.nodes), "launcher": launcher_entry()}
    (run.plan.results_dir / RUN_FILE).write_text(json.dumps(document, indent=1))


def machine_names(client) -> list[tuple[str, str]]:
    """(node id, hostname) of every machine the swarm knows."""
    try:
        return [(n.id, n.attrs["Description"]["Hostname"]) for n in client.nodes.list()]
    except Exception:  # noqa: BLE001 - names are a courtesy in run.json
        return []


def start(config: FederationConfig, plan: Plan, image: str, client,
          constraints: dict[int, list[str]],
          folders: dict[int, FolderCheck] | None = None) -> SwarmRun:
    """Create the run's network, configs, secrets and one service per node (placed by
    `constraints`; data.layout "per-node": each mounting its own folder of the machine it
    runs on, and the global test set where `folders` found one); on any failure remove all
    of it."""
    import docker.errors

    run_id = plan.run_id
    if client.services.list(filters={"label": f"{LABEL}={run_id}"}):
        raise DeployError(f"run {run_id} already has services on this swarm: pick another "
                          f"--run-id or `protofed down {run_id}`")
    run = SwarmRun(plan, client)
    try:
        network = client.networks.create(network_name(run_id), driver="overlay",
                                         attachable=True, labels={LABEL: run_id})
        shared = _shared_files(client, plan)
        for spec in plan.nodes:
            run.services[spec.node_id] = _service(
                client, config, plan, spec.node_id, image, network.id, shared,
                constraints.get(spec.node_id, []), (folders or {}).get(spec.node_id))
    except docker.errors.APIError as exc:
        remove_run(client, run_id)
        raise DeployError(f"starting run {run_id} on the swarm failed: "
                          f"{exc.explanation or exc}") from None
    except BaseException:
        remove_run(client, run_id)
        raise
    run.follow()
    write_run_file(run, "running")
    return run


def _owner() -> dict[str, object]:
    """uid and gid of the node user, as Docker's secret and config references want them."""
    uid, gid = container_user().split(":")
    return {"uid": uid, "gid": gid}


def _shared_files(client, plan: Plan) -> list:
    """The configs every node gets: the federation file and (with keys) the public keys."""
    from docker.types import ConfigReference

    labels = {LABEL: plan.run_id}
    federation = client.configs.create(name=f"{plan.run_id}-federation", labels=labels,
                                       data=plan.federation_file.read_bytes())
    shared = [ConfigReference(federation.id, federation.name, filename=CONFIG_TARGET,
                              mode=0o444, **_owner())]
    keys = keys_dir(plan)
    if keys.is_dir():
        public = client.configs.create(name=f"{plan.run_id}-public-keys", labels=labels,
                                       data=(keys / PUBLIC_FILE).read_bytes())
        shared.append(ConfigReference(public.id, public.name, mode=0o444, **_owner(),
                                      filename=f"{KEYS_MOUNT}/{PUBLIC_FILE}"))
    return shared


def data_mounts(config: FederationConfig, node_id: int,
                folder: FolderCheck | None) -> list[tuple[str, str]]:
    """(path on the machine, path in the task) read-only mounts of a node's own data
    (data.layout "per-node"): its folder, and the global test set where it lies beside it;
    none for pooled data (it is in the image)."""
    if config.data.layout != "per-node":
        return []
    root = Path(config.data.dir)
    own = node_folder(root, node_id)
    mounts = [(str(own), f"{DATA_MOUNT}/{own.name}")]
    if folder is not None and folder.global_test:
        mounts.append((str(root / GLOBAL_TEST), f"{DATA_MOUNT}/{GLOBAL_TEST}"))
    return mounts


def _service(client, config: FederationConfig, plan: Plan, node_id: int, image: str,
             network: str, shared: list, constraints: list[str],
             folder: FolderCheck | None = None):
    """Node `node_id`'s service, with its own key as a secret only it gets."""
    from docker.types import EndpointSpec, Mount, Resources, RestartPolicy, SecretReference

    name = f"{plan.run_id}-node-{node_id}"
    labels = {LABEL: plan.run_id, NODE_LABEL: str(node_id)}
    secrets = []
    keys = keys_dir(plan)
    if keys.is_dir():
        secret = client.secrets.create(name=f"{name}-key", labels=labels,
                                       data=(keys / secret_file(node_id)).read_bytes())
        secrets.append(SecretReference(secret.id, secret.name, mode=0o400, **_owner(),
                                       filename=f"{KEYS_MOUNT}/{secret_file(node_id)}"))
    return client.services.create(
        image, name=name, hostname=name, args=node_command(plan, node_id),
        env=node_environment(config), user=container_user(), labels=labels,
        container_labels=labels, networks=[network], endpoint_spec=EndpointSpec(mode="dnsrr"),
        restart_policy=RestartPolicy(condition="none"),
        resources=Resources(mem_limit=plan.memory_limits.get(node_id),
                            cpu_limit=int(config.deploy.cpus * 1e9) or None),
        constraints=constraints, configs=shared, secrets=secrets, cap_drop=["ALL"],
        read_only=True, mounts=[Mount(SCRATCH, None, type="tmpfs"),
                                Mount(RESULTS_MOUNT, None, type="tmpfs"),
                                *(Mount(target, source, type="bind", read_only=True)
                                  for source, target in data_mounts(config, node_id, folder))],
        stop_grace_period=STOP_GRACE_NS)


def attach(client, plan: Plan) -> SwarmRun:
    """The run of `plan` as the swarm has it (deployed by `protofed up` or by hand from a
    stack file): its services by node; DeployError when it has none there."""
    run = SwarmRun(plan, client)
    for service in client.services.list(filters={"label": f"{LABEL}={plan.run_id}"}):
        node = (service.attrs["Spec"].get("Labels") or {}).get(NODE_LABEL, "")
        if node.isdigit():
            run.services[int(node)] = service
    if not run.services:
        raise DeployError(f"the swarm has no services of run {plan.run_id}")
    return run


def collect(run_dir: Path, manager: str = "") -> list[int]:
    """Fill the folder `protofed compose` wrote for a run deployed as a stack from its
    services' output on the swarm (records, logs, run.json); the nodes still running."""
    if not (run_dir / FEDERATION_FILE).is_file():
        raise ConfigError(f"{run_dir}: no {FEDERATION_FILE} here: collect fills the folder "
                          "`protofed compose` wrote for the run")
    plan = Plan(run_id=run_dir.name, source=run_dir / FEDERATION_FILE, overrides=(),
                results_dir=run_dir.resolve(),
                federation=read_federation(run_dir / FEDERATION_FILE))
    run = attach(connect(manager), plan)
    exits = run.poll_exits()
    run.save_logs()
    ended = len(exits) == len(plan.nodes)
    write_run_file(run, run_status(exits, len(plan.nodes), stopping=False) if ended
                   else "running")
    return sorted(set(run.services) - set(exits))


def remove_run(client, run_id: str) -> dict[str, int]:
    """Remove the run's services, then its secrets, configs and network; how many of each.
    The swarm removes the services' containers on every machine."""
    import docker.errors

    selector = {"label": f"{LABEL}={run_id}"}
    removed = {"services": 0, "secrets": 0, "configs": 0, "networks": 0}
    for service in client.services.list(filters=selector):
        try:
            service.remove()
            removed["services"] += 1
        except docker.errors.NotFound:
            pass
    for kind in ("secrets", "configs", "networks"):
        for item in _with_label(getattr(client, kind).list(), run_id):
            ends = time.monotonic() + 60
            while True:  # tasks on the machines may hold it a little longer
                try:
                    item.remove()
                    removed[kind] += 1
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as exc:
                    if time.monotonic() > ends:
                        log.warning("could not remove %s %s: %s", kind[:-1], item.name, exc)
                        break
                    time.sleep(0.5)
    # a swarm removes an overlay network in the background: `down` returns when it is gone
    ends = time.monotonic() + 60
    while _with_label(client.networks.list(), run_id) and time.monotonic() < ends:
        time.sleep(0.5)
    return removed


def _with_label(items: list, run_id: str) -> list:
    return [i for i in items if (i.attrs.get("Spec", {}).get("Labels")
                                 or i.attrs.get("Labels") or {}).get(LABEL) == run_id]


def running_runs(client) -> dict[str, list[tuple[str, str]]]:
    """Runs with services on the swarm: run id -> (node, state of its task) pairs."""
    runs: dict[str, list[tuple[str, str]]] = {}
    for service in client.services.list(filters={"label": LABEL}):
        labels = service.attrs["Spec"].get("Labels") or {}
        tasks = service.tasks()
        state = latest_task(tasks)["Status"]["State"] if tasks else "pending"
        runs.setdefault(labels[LABEL], []).append((labels.get(NODE_LABEL, "?"), state))
    return {run: sorted(states, key=lambda s: int(s[0]) if s[0].isdigit() else -1)
            for run, states in runs.items()}


def service_logs(client, run_id: str, node_id: int, tail: int, follow: bool):
    """A node's output lines (its record left out) from the manager."""
    services = client.services.list(filters={"label": f"{LABEL}={run_id}",
                                             "name": f"{run_id}-node-{node_id}"})
    if not services:
        return
    stream = services[0].logs(stdout=True, stderr=True, follow=follow,
                              tail=tail if tail else "all")
    for line in _lines(stream):
        if not is_record_line(line):
            yield line + "\n"
