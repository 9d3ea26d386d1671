"""A three-engine Docker Swarm and an image registry on this one machine, for integration tests.

Engine i is its own `dockerd` in network namespace pflab<i> (address 10.199.<i>.2, hostname
pflab<i>), linked to the host by a veth pair whose host side pflabh<i> is 10.199.<i>.1, and
in a mount namespace of its own where /srv/protofed-lab-data is that machine's data folder
(`machine_data(i)` on the host): a bind mount from it sees what that machine holds and
nothing another holds (`place_folders` puts each node's folder on one machine).
Engine 0 is the swarm's manager, engines 1 and 2 its workers; a registry from Debian's
`docker-registry` listens on the host at 10.199.0.1:5000. Needs root.

    python -m tests.swarm_lab up [--no-check]   # build it (reuses a healthy lab), smoke test
    python -m tests.swarm_lab check             # the smoke test alone
    python -m tests.swarm_lab status            # JSON
    python -m tests.swarm_lab down [--purge]    # remove it; --purge also the engines' data

In a test (as root):

    @pytest.fixture(scope="session")
    def lab():
        return lab_up()   # then docker.DockerClient(base_url=lab.manager, version="auto")

The kernel has no IPVS: services need `EndpointSpec(mode="dnsrr")`; published ports (the
ingress routing mesh) and VIP addresses do not work. Images: push to lab.registry, run by
`<registry>/<repo>@sha256:...`. `down` keeps the engines' image caches unless --purge.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

ENGINES = 3
RUN = Path("/run/protofed-lab")
DATA = Path("/var/lib/protofed-lab")
STATE = RUN / "state.json"
REGISTRY_STORAGE = DATA / "registry"
# Where each engine sees its own machine's data folder (its mount namespace's bind mount).
SHARED_DATA = Path("/srv/protofed-lab-data")
REGISTRY_PID = RUN / "registry.pid"
REGISTRY_LOG = Path("/var/log/protofed-lab-registry.log")
REGISTRY_HOST = "10.199.0.1"
REGISTRY = f"{REGISTRY_HOST}:5000"
ADDRESS_POOL = "10.200.0.0/16"  # overlay subnets, away from the lab's 10.199.0.0/16
BASE_IMAGE = "protofed-base:bookworm"
HOST_ENGINE = "unix:///var/run/docker.sock"
REPO = Path(__file__).resolve().parents[1]
RULE_COMMENT = "protofed-lab"
FORWARD_RULE = ["FORWARD", "-i", "pflabh+", "-o", "pflabh+",
                "-m", "comment", "--comment", RULE_COMMENT, "-j", "ACCEPT"]
NODE_LABEL = "protofed.lab.engine"  # node label: the engine's index
SMOKE = "protofed-lab-smoke"
SMOKE_PORT = 8080
LAB_PROGRAMS = ("dockerd", "containerd", "docker-registry")  # containerd: also its shims
# Debian package -> a command it provides (present on PATH = nothing to install).
PACKAGES = {"docker.io": "dockerd", "containerd": "containerd", "runc": "runc",
            "iproute2": "ip", "iptables": "iptables", "util-linux": "nsenter",
            "docker-registry": "docker-registry"}


class LabError(RuntimeError):
    """The lab could not be brought up or checked."""


@dataclasses.dataclass
class Lab:
    """How tests reach the lab: Docker API base URLs, engine addresses, the registry."""

    manager: str
    engines: list[str]
    addresses: list[str]
    registry: str = REGISTRY
    hostnames: list[str] = dataclasses.field(default_factory=list)  # swarm nodes' hostnames
    node_ids: list[str] = dataclasses.field(default_factory=list)  # swarm node of engine i


# --- names (engine i) ------------------------------------------------------------------


def namespace(i: int) -> str:
    return f"pflab{i}"


def host_if(i: int) -> str:
    return f"pflabh{i}"


def ns_if(i: int) -> str:
    return f"pflabn{i}"


def address(i: int) -> str:
    return f"10.199.{i}.2"


def gateway(i: int) -> str:
    return f"10.199.{i}.1"


def socket_path(i: int) -> Path:
    return RUN / f"engine{i}.sock"


def base_url(i: int) -> str:
    return f"unix://{socket_path(i)}"


def pidfile(i: int) -> Path:
    return RUN / f"engine{i}.pid"


def data_root(i: int) -> Path:
    return DATA / f"engine{i}"


def machine_data(i: int) -> Path:
    """Engine i's data folder on the host; the engine sees it, alone, at SHARED_DATA."""
    return DATA / f"machine{i}-data"


def engine_log(i: int) -> Path:
    return Path(f"/var/log/protofed-lab-engine{i}.log")


def lab() -> Lab:
    """The lab's fixed coordinates (node ids are filled in once the swarm exists)."""
    return Lab(manager=base_url(0), engines=[base_url(i) for i in range(ENGINES)],
               addresses=[address(i) for i in range(ENGINES)],
               hostnames=[namespace(i) for i in range(ENGINES)])


# --- small helpers ---------------------------------------------------------------------


def sh(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command, capturing its output; raise LabError with its stderr when it fails."""
    log.debug("$ %s", shlex.join(args))
    done = subprocess.run(args, check=False, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise LabError(f"{shlex.join(args)} failed ({done.returncode}): "
                       f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def wait_for(what: str, probe, timeout: float, interval: float = 0.5):
    """Call `probe` until it returns something true; raise LabError after `timeout` s."""
    ends = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > ends:
            raise LabError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def client(url: str, timeout: int = 120):
    """A Docker SDK client of one engine, speaking its API version (20.10: 1.41)."""
    import docker

    return docker.DockerClient(base_url=url, version="auto", timeout=timeout)


def connect(url: str, timeout: int = 120) -> contextlib.closing:
    """`with connect(url) as engine:` a client closed at the end."""
    return contextlib.closing(client(url, timeout))


def answers(url: str) -> bool:
    """Whether the engine at `url` answers a ping."""
    import docker.errors
    import requests.exceptions

    try:
        with connect(url, timeout=5) as engine:
            return bool(engine.ping())
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        return False


def load_state() -> dict:
    """What this lab recorded (PIDs, iptables rules it added, ip_forward before it)."""
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def save_state(state: dict) -> None:
    """Record the lab's state under its run folder."""
    RUN.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=1))


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- processes -------------------------------------------------------------------------


def cmdline(pid: int) -> str:
    """A process's command line ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether the process runs (reaping it first when it is our exited child)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_process(pid: int, marker: str, timeout: float = 20) -> None:
    """SIGTERM the process `pid` if its command line holds `marker`; SIGKILL after timeout."""
    if not pid or not alive(pid) or marker not in cmdline(pid):
        return
    log.info("stopping %s (pid %d)", marker, pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    ends = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < ends:
        time.sleep(0.2)
    if alive(pid):
        log.warning("pid %d ignored SIGTERM for %.0f s: SIGKILL", pid, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for(f"pid {pid} to end", lambda: not alive(pid), 10, 0.1)


def lab_pids() -> list[int]:
    """Engines, their containerd and shims, and the registry that run from the lab's run
    folder: what is left when the recorded PIDs were lost."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            line = cmdline(int(entry.name))
            program = Path(line.split(" ", 1)[0]).name
            if program.startswith(LAB_PROGRAMS) and f"{RUN}/" in line:
                found.append(int(entry.name))
    return found


def read_pid(path: Path) -> int:
    """The PID in a pidfile (0 when there is none)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def spawn(args: list[str], log_path: Path) -> int:
    """Start a long-running process in its own session, output to `log_path`; its PID."""
    log.debug("$ %s &", shlex.join(args))
    with open(log_path, "wb") as out:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return process.pid


# --- prerequisites ---------------------------------------------------------------------


def installed(package: str) -> bool:
    """Whether the package's command is on PATH or dpkg has it installed."""
    if shutil.which(PACKAGES.get(package, package)):
        return True
    status = sh("dpkg-query", "-W", "-f=${Status}", package, check=False).stdout
    return status == "install ok installed"


def apt_install(packages: list[str]) -> None:
    """apt-get install, with one `apt-get update` when the lists are stale."""
    log.info("installing %s", " ".join(packages))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    args = ("apt-get", "install", "-y", "-q", "--no-install-recommends", *packages)
    if sh(*args, check=False, env=env).returncode != 0:
        sh("apt-get", "update", "-q", env=env)
        sh(*args, env=env)


def ensure_packages() -> None:
    """Install the Debian packages the lab needs; keep docker-registry's own service off."""
    missing = [p for p in PACKAGES if not installed(p)]
    if missing:
        apt_install(missing)
    if "docker-registry" in missing:
        disable_registry_service()


def disable_registry_service() -> None:
    """Stop and disable the system service the docker-registry package may have started:
    the lab runs its own registry process."""
    if Path("/run/systemd/system").is_dir():
        sh("systemctl", "disable", "--now", "docker-registry", check=False)
    elif Path("/etc/init.d/docker-registry").exists():
        sh("/etc/init.d/docker-registry", "stop", check=False)
        sh("update-rc.d", "docker-registry", "disable", check=False)


def registry_binary() -> str:
    """The registry's binary, as the docker-registry package lists it."""
    files = sh("dpkg", "-L", "docker-registry", check=False).stdout.split()
    binary = next((f for f in files if f.endswith("/bin/docker-registry")), None)
    binary = binary or shutil.which("docker-registry")
    if not binary:
        raise LabError("the docker-registry binary was not found (apt-get install docker-registry)")
    return binary


# --- network ---------------------------------------------------------------------------


def make_network() -> None:
    """Namespaces pflab0..2, their veth pairs and routes, forwarding between them."""
    existing = sh("ip", "netns", "list").stdout.split()
    for i in range(ENGINES):
        ns = namespace(i)
        if ns not in existing:
            sh("ip", "netns", "add", ns)
        if sh("ip", "link", "show", host_if(i), check=False).returncode != 0:
            sh("ip", "link", "add", host_if(i), "type", "veth", "peer", "name", ns_if(i),
               "netns", ns)
            sh("ip", "addr", "add", f"{gateway(i)}/24", "dev", host_if(i))
            sh("ip", "link", "set", host_if(i), "up")
            sh("ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", ns_if(i))
            sh("ip", "-n", ns, "link", "set", ns_if(i), "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "route", "add", "default", "via", gateway(i))
    allow_forwarding()


def allow_forwarding() -> None:
    """ip_forward on, and one FORWARD rule between the pflabh* veths, both recorded."""
    state = load_state()
    forward = Path("/proc/sys/net/ipv4/ip_forward")
    state.setdefault("ip_forward_before", forward.read_text().strip())
    forward.write_text("1\n")
    if sh("iptables", "-C", *FORWARD_RULE, check=False).returncode != 0:
        sh("iptables", "-I", FORWARD_RULE[0], "1", *FORWARD_RULE[1:])
        state.setdefault("rules", []).append(FORWARD_RULE)
    save_state(state)


def remove_network(state: dict) -> None:
    """Delete the namespaces, veths and iptables rules the lab made; restore ip_forward."""
    for i, exists in enumerate(lab_namespaces()):
        if exists:
            sh("ip", "netns", "del", namespace(i), check=False)
        if sh("ip", "link", "show", host_if(i), check=False).returncode == 0:
            sh("ip", "link", "del", host_if(i), check=False)
    for rule in lab_rules(state):
        log.info("iptables -D %s", shlex.join(rule))
        sh("iptables", "-D", *rule, check=False)
    if state.get("ip_forward_before") == "0":
        Path("/proc/sys/net/ipv4/ip_forward").write_text("0\n")


def lab_rules(state: dict) -> list[list[str]]:
    """The FORWARD rules the lab added: those recorded, and any carrying its comment."""
    rules = [list(rule) for rule in state.get("rules", [])]
    listing = sh("iptables", "-S", "FORWARD", check=False).stdout.splitlines()
    for line in listing:
        if line.startswith("-A ") and f"--comment {RULE_COMMENT}" in line:
            rule = shlex.split(line)[1:]
            if rule not in rules:
                rules.append(rule)
    return [rule for rule in rules if sh("iptables", "-C", *rule, check=False).returncode == 0]


# --- engines ---------------------------------------------------------------------------


def engine_command(i: int) -> list[str]:
    """dockerd in the engine's network namespace, its own UTS namespace (hostname pflab<i>,
    so swarm nodes differ by hostname) and its own mount namespace (its machine's data
    folder at SHARED_DATA); its config file is the lab's own."""
    mount = f"mount --bind {shlex.quote(str(machine_data(i)))} {shlex.quote(str(SHARED_DATA))}"
    return ["unshare", "--mount", "--propagation", "slave", "sh", "-c",
            f'{mount} && exec "$@"', "engine",
            "nsenter", f"--net=/var/run/netns/{namespace(i)}", f"--uts={RUN / f'uts{i}'}",
            "dockerd", "--data-root", str(data_root(i)), "--exec-root", str(RUN / f"exec{i}"),
            "-H", base_url(i), "--pidfile", str(pidfile(i)), "--bridge", "none",
            "--iptables=false", "--insecure-registry", REGISTRY,
            "--config-file", str(RUN / f"daemon{i}.json")]


def start_engine(i: int) -> int:
    """Start engine i (unless it answers already); its PID."""
    pid = read_pid(pidfile(i))
    if alive(pid) and answers(base_url(i)) and sees_own_data(pid, i):
        return pid
    data_root(i).mkdir(parents=True, exist_ok=True)
    machine_data(i).mkdir(parents=True, exist_ok=True)
    SHARED_DATA.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(data_root(i) / "swarm", ignore_errors=True)  # a stale swarm: start afresh
    (RUN / f"daemon{i}.json").write_text("{}\n")
    uts = RUN / f"uts{i}"
    if not uts.exists():
        uts.touch()
        sh("unshare", f"--uts={uts}", "hostname", namespace(i))
    log.info("starting engine %d in %s (%s)", i, namespace(i), address(i))
    return spawn(engine_command(i), engine_log(i))


def sees_own_data(pid: int, i: int) -> bool:
    """Whether engine i (process `pid`) sees its machine's data folder at SHARED_DATA."""
    try:
        seen, own = os.stat(f"/proc/{pid}/root{SHARED_DATA}"), os.stat(machine_data(i))
    except OSError:
        return False
    return (seen.st_dev, seen.st_ino) == (own.st_dev, own.st_ino)


def place_folders(name: str, source: Path, machine_of: dict[int, int]) -> Path:
    """A partition's folders (`protofed partition` output in `source`) laid out as machines
    that own their data: node k's folder on machine `machine_of[k]` only, the manifest and
    the global test set (public) on every machine, under SHARED_DATA/`name` as each engine
    sees it; that path (the config's data.dir)."""
    for i in range(ENGINES):
        folder = machine_data(i) / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for entry in sorted(source.iterdir()):
            node = entry.name.removeprefix("node-")
            if node.isdigit() and machine_of.get(int(node)) != i:
                continue  # another machine's node
            copy = shutil.copytree if entry.is_dir() else shutil.copy2
            copy(entry, folder / entry.name)
        for path in [folder, *folder.rglob("*")]:  # the node user reads them
            path.chmod(0o755 if path.is_dir() else 0o644)
    return SHARED_DATA / name


def wait_engine(i: int, pid: int) -> None:
    """Wait until engine i answers `docker info`; raise with its log when it died."""
    def ready() -> bool:
        if not alive(pid):
            raise LabError(f"engine {i} exited:\n{tail(engine_log(i))}")
        return answers(base_url(i))

    wait_for(f"engine {i} to answer", ready, 60, 0.3)


def start_engines() -> None:
    """All engines started, answering, PIDs recorded."""
    RUN.mkdir(parents=True, exist_ok=True)
    pids = {i: start_engine(i) for i in range(ENGINES)}
    for i, pid in pids.items():
        wait_engine(i, pid)
    state = load_state()
    state["engines"] = {str(i): pid for i, pid in pids.items()}
    save_state(state)


def ensure_base_image() -> None:
    """The manager engine has protofed-base:bookworm: from the host engine, else built."""
    import docker.errors

    with connect(base_url(0)) as manager:
        try:
            manager.images.get(BASE_IMAGE)
            return
        except docker.errors.ImageNotFound:
            pass
    if host_has_base_image():
        log.info("loading %s from the host engine into engine 0", BASE_IMAGE)
        transfer_image(HOST_ENGINE, base_url(0), BASE_IMAGE)
        return
    log.info("building %s into engine 0 (debootstrap, a few minutes)", BASE_IMAGE)
    if not installed("debootstrap"):
        apt_install(["debootstrap"])
    sh("bash", str(REPO / "deploy" / "backends" / "make-base-image.sh"), BASE_IMAGE,
       env={**os.environ, "DOCKER_HOST": base_url(0)})


def host_has_base_image() -> bool:
    """Whether the host's own engine runs and holds the base image."""
    if not Path(HOST_ENGINE.removeprefix("unix://")).exists() or not answers(HOST_ENGINE):
        return False
    with connect(HOST_ENGINE) as host:
        return bool(host.images.list(name=BASE_IMAGE))


def transfer_image(source: str, target: str, image: str) -> None:
    """`docker -H source save image | docker -H target load`."""
    docker_cli = shutil.which("docker") or "docker"
    save = subprocess.Popen([docker_cli, "-H", source, "save", image], stdout=subprocess.PIPE)
    load = subprocess.run([docker_cli, "-H", target, "load"], check=False, stdin=save.stdout,
                          capture_output=True, text=True)
    save.stdout.close()
    if save.wait() != 0 or load.returncode != 0:
        raise LabError(f"moving {image} from {source} to {target} failed: {load.stderr}")


# --- registry --------------------------------------------------------------------------

REGISTRY_CONFIG = f"""\
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: {REGISTRY_STORAGE}
  delete:
    enabled: true
http:
  addr: {REGISTRY}
"""


def registry_answers() -> bool:
    """Whether GET /v2/ on the registry answers 200."""
    try:
        with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=3) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def start_registry() -> None:
    """Our own registry process on 10.199.0.1:5000, PID recorded."""
    if alive(read_pid(REGISTRY_PID)) and registry_answers():
        return
    REGISTRY_STORAGE.mkdir(parents=True, exist_ok=True)
    config = RUN / "registry.yml"
    config.write_text(REGISTRY_CONFIG)
    log.info("starting the registry on %s", REGISTRY)
    pid = spawn([registry_binary(), "serve", str(config)], REGISTRY_LOG)
    REGISTRY_PID.write_text(f"{pid}\n")

    def ready() -> bool:
        if not alive(pid):
            raise LabError(f"the registry exited:\n{tail(REGISTRY_LOG)}")
        return registry_answers()

    wait_for("the registry to answer", ready, 30, 0.2)


def delete_from_registry(repository: str, digest: str) -> None:
    """Delete one manifest from the registry (its blobs stay until the storage goes)."""
    request = urllib.request.Request(f"http://{REGISTRY}/v2/{repository}/manifests/{digest}",
                                     method="DELETE")
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except (OSError, urllib.error.URLError) as exc:
        log.warning("deleting %s@%s from the registry failed: %s", repository, digest, exc)


# --- swarm -----------------------------------------------------------------------------


def swarm_state(url: str) -> dict:
    """The engine's `info()["Swarm"]` ({} when it does not answer)."""
    try:
        with connect(url, timeout=10) as engine:
            return engine.info().get("Swarm") or {}
    except Exception:  # noqa: BLE001 - an engine that does not answer is in no swarm
        return {}


def make_swarm() -> None:
    """Engine 0 initialises the swarm, engines 1 and 2 join as workers, nodes labelled."""
    with connect(base_url(0)) as manager:
        if swarm_state(base_url(0)).get("LocalNodeState") != "active":
            log.info("swarm init on engine 0 (%s)", address(0))
            manager.swarm.init(advertise_addr=address(0), listen_addr=f"{address(0)}:2377",
                               default_addr_pool=[ADDRESS_POOL], subnet_size=24)
        manager.swarm.reload()
        token = manager.swarm.attrs["JoinTokens"]["Worker"]
        for i in range(1, ENGINES):
            if swarm_state(base_url(i)).get("LocalNodeState") != "active":
                log.info("engine %d joins as a worker", i)
                with connect(base_url(i)) as worker:
                    worker.swarm.join(remote_addrs=[f"{address(0)}:2377"], join_token=token,
                                      listen_addr=f"{address(i)}:2377",
                                      advertise_addr=address(i))
        wait_for("3 swarm nodes ready", lambda: ready_nodes(manager) == ENGINES, 90, 1)
        label_nodes(manager)


def ready_nodes(manager) -> int:
    """How many swarm nodes the manager sees ready."""
    return sum(n.attrs["Status"]["State"] == "ready" for n in manager.nodes.list())


def node_ids() -> list[str]:
    """Swarm node id of each engine, in engine order."""
    return [swarm_state(base_url(i)).get("NodeID", "") for i in range(ENGINES)]


def label_nodes(manager) -> None:
    """Label each swarm node `protofed.lab.engine=<i>` (placement: node.labels...)."""
    for i, node_id in enumerate(node_ids()):
        node = manager.nodes.get(node_id)
        spec = node.attrs["Spec"]
        if spec.get("Labels", {}).get(NODE_LABEL) != str(i):
            spec.setdefault("Labels", {})[NODE_LABEL] = str(i)
            node.update(spec)


def clear_swarm(url: str, manager: bool) -> None:
    """Best effort: the manager's services, secrets, configs and swarm networks; then this
    engine's containers; then `swarm leave --force`."""
    try:
        with connect(url, timeout=30) as engine:
            if manager:
                for kind in (engine.services, engine.secrets, engine.configs):
                    for item in kind.list():
                        item.remove()
                for network in engine.networks.list():
                    if network.attrs.get("Scope") == "swarm" and network.name != "ingress":
                        network.remove()
            for container in engine.containers.list(all=True, ignore_removed=True):
                container.remove(force=True)
            engine.swarm.leave(force=True)
    except Exception as exc:  # noqa: BLE001 - teardown goes on whatever is left
        log.debug("clearing %s: %s", url, exc)


# --- up, down, status ------------------------------------------------------------------


def lab_status() -> dict:
    """Where each part of the lab stands, and `healthy` when all of it is up."""
    netns = lab_namespaces()
    engines = []
    for i in range(ENGINES):
        swarm = swarm_state(base_url(i))
        engines.append({"url": base_url(i), "pid": read_pid(pidfile(i)),
                        "namespace": netns[i], "answers": bool(swarm),
                        "own_data": sees_own_data(read_pid(pidfile(i)), i),
                        "swarm": swarm.get("LocalNodeState", ""),
                        "manager": bool(swarm.get("ControlAvailable")),
                        "node_id": swarm.get("NodeID", "")})
    ready = 0
    if engines[0]["manager"]:
        try:
            with connect(base_url(0), timeout=10) as manager:
                ready = ready_nodes(manager)
        except Exception as exc:  # noqa: BLE001 - reported as 0 nodes ready
            log.debug("listing the swarm's nodes: %s", exc)
    registry = {"address": REGISTRY, "pid": read_pid(REGISTRY_PID),
                "answers": registry_answers()}
    healthy = (all(e["answers"] and e["swarm"] == "active" and e["own_data"]
                   for e in engines)
               and engines[0]["manager"] and ready == ENGINES and registry["answers"])
    return {"healthy": healthy, "engines": engines, "nodes_ready": ready, "registry": registry,
            "forward_rules": [shlex.join(r) for r in lab_rules(load_state())]}


def lab_namespaces() -> list[bool]:
    """Whether each of the lab's network namespaces exists."""
    existing = sh("ip", "netns", "list", check=False).stdout.split()
    return [namespace(i) in existing for i in range(ENGINES)]


def lab_up(check: bool = False) -> Lab:
    """Bring the lab up (reusing it when it is up and healthy); run the smoke test if
    `check`. Returns the Lab."""
    require_root()
    started = time.monotonic()
    ensure_packages()
    if lab_status()["healthy"]:
        log.info("the lab is already up")
    else:
        if RUN.exists() or any(lab_namespaces()):
            log.info("clearing a lab left partly up")
            lab_down()
        make_network()
        start_registry()
        start_engines()
        ensure_base_image()
        make_swarm()
        log.info("lab up in %.1f s", time.monotonic() - started)
    result = lab()
    result.node_ids = node_ids()
    if check:
        smoke_test(result)
    return result


def lab_down(purge: bool = False) -> None:
    """Remove everything the lab made, from any partial state; `purge` also removes the
    engines' data roots (their image caches)."""
    require_root()
    started = time.monotonic()
    state = load_state()
    for i in range(ENGINES):
        if answers(base_url(i)):
            clear_swarm(base_url(i), manager=i == 0)
    stop_lab_processes(state)
    unmount_lab()
    remove_network(state)
    shutil.rmtree(RUN, ignore_errors=True)
    for i in range(ENGINES):
        shutil.rmtree(data_root(i) / "swarm", ignore_errors=True)
    shutil.rmtree(REGISTRY_STORAGE, ignore_errors=True)
    if purge:
        log.info("purging %s and the lab's logs", DATA)
        shutil.rmtree(DATA, ignore_errors=True)
        for path in [REGISTRY_LOG, *(engine_log(i) for i in range(ENGINES))]:
            path.unlink(missing_ok=True)
    log.info("lab down in %.1f s", time.monotonic() - started)


def stop_lab_processes(state: dict) -> None:
    """Engines (recorded PIDs and pidfiles), the registry, then anything else left that
    runs from the lab's run folder (containerd, shims)."""
    pids = {int(p) for p in state.get("engines", {}).values()}
    pids |= {read_pid(pidfile(i)) for i in range(ENGINES)}
    for pid in sorted(pids - {0}):
        stop_process(pid, "dockerd")
    stop_process(read_pid(REGISTRY_PID), "docker-registry", timeout=5)
    for pid in lab_pids():
        stop_process(pid, str(RUN), timeout=5)


def unmount_lab() -> None:
    """Unmount what the engines left mounted under the lab's folders (deepest first)."""
    prefixes = (f"{RUN}/", f"{DATA}/")
    mounts = [line.split()[1].encode().decode("unicode_escape")
              for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(prefixes)), key=len, reverse=True):
        sh("umount", "-l", point, check=False)


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the swarm lab needs root (namespaces, iptables, dockerd)")


# --- smoke test ------------------------------------------------------------------------


def smoke_test(target: Lab) -> None:
    """Push an image, run it on every engine by digest on an attachable overlay network,
    check a task on engine 1 reaches the one on engine 2 by name; remove it all."""
    if not lab_status()["healthy"]:
        raise LabError("the lab is not up: python -m tests.swarm_lab up")
    started = time.monotonic()
    repository = f"{target.registry}/{SMOKE}"
    engines = [client(url) for url in target.engines]
    try:
        digest = push_smoke_image(engines[0], repository)
        try:
            run_smoke_service(engines, f"{repository}:1@{digest}", digest)
        finally:
            remove_smoke(engines, repository, digest)
    finally:
        for engine in engines:
            engine.close()
    log.info("smoke test passed in %.1f s", time.monotonic() - started)


def push_smoke_image(manager, repository: str) -> str:
    """Tag the base image as repository:1, push it, and return its registry digest."""
    manager.images.get(BASE_IMAGE).tag(repository, "1")
    log.info("pushing %s:1", repository)
    for line in manager.images.push(repository, tag="1", stream=True, decode=True):
        if line.get("error"):
            raise LabError(f"push failed: {line['error']}")
    digest = manager.api.inspect_distribution(f"{repository}:1")["Descriptor"]["digest"]
    log.info("registry digest %s", digest)
    return digest


def run_smoke_service(engines: list, image: str, digest: str) -> None:
    """A global service (one task per engine) serving TCP on an overlay network; checks."""
    from docker.types import EndpointSpec, RestartPolicy, ServiceMode

    manager = engines[0]
    manager.networks.create(SMOKE, driver="overlay", attachable=True)
    serve = ["timeout", "120", "python3", "-m", "http.server", "--bind", "0.0.0.0",
             str(SMOKE_PORT)]
    manager.services.create(
        image, name=SMOKE, command=serve, mode=ServiceMode("global"), networks=[SMOKE],
        endpoint_spec=EndpointSpec(mode="dnsrr"), restart_policy=RestartPolicy(condition="none"),
        stop_grace_period=10**9)
    containers = wait_for("a running smoke task on every engine",
                          lambda: smoke_containers(engines), 180, 1)
    for i, container in enumerate(containers):
        check_by_digest(engines[i], container, digest)
        log.info("engine %d runs %s by digest", i, container.name)
    check_reach(containers[1], containers[2].name)


def smoke_containers(engines: list) -> list:
    """The running smoke container of each engine; [] unless every engine has one."""
    filters = {"label": f"com.docker.swarm.service.name={SMOKE}", "status": "running"}
    found = [engine.containers.list(ignore_removed=True, filters=filters) for engine in engines]
    return [c[0] for c in found] if all(len(c) == 1 for c in found) else []


def check_by_digest(engine, container, digest: str) -> None:
    """The container runs the image its engine pulled by `digest`."""
    reference = container.attrs["Config"]["Image"]
    repo_digests = engine.images.get(container.attrs["Image"]).attrs.get("RepoDigests") or []
    if not reference.endswith(f"@{digest}") or not any(
            d.endswith(f"@{digest}") for d in repo_digests):
        raise LabError(f"{container.name} runs {reference} ({repo_digests}), not @{digest}")


def check_reach(source, target_name: str) -> None:
    """From `source`, connect to `target_name` (a task), then to every address the service's
    name resolves to (dnsrr: one per task, 3)."""
    probe = ("import socket, sys, time\n"
             "def connect(host):\n"
             "    for attempt in range(30):\n"
             "        try:\n"
             f"            return socket.create_connection((host, {SMOKE_PORT}), 3).close()\n"
             "        except OSError as exc:\n"
             "            error = exc\n"
             "            time.sleep(0.5)\n"
             "    sys.exit(f'no connection to {host}: {error}')\n"
             f"connect('{target_name}')\n"
             f"peers = {{a[4][0] for a in socket.getaddrinfo('{SMOKE}', {SMOKE_PORT})}}\n"
             "assert len(peers) == 3, peers\n"
             "for peer in peers:\n"
             "    connect(peer)\n")
    code, output = source.exec_run(["python3", "-c", probe])
    if code != 0:
        raise LabError(f"{source.name} could not reach {target_name}: {output.decode()}")
    log.info("%s reached %s and the 3 tasks of %s over the overlay network",
             source.name, target_name, SMOKE)


def remove_smoke(engines: list, repository: str, digest: str) -> None:
    """Remove the smoke service, its network, its image on every engine and the registry."""
    import docker.errors

    manager = engines[0]
    for service in manager.services.list(filters={"name": SMOKE}):
        service.remove()
    label = {"label": f"com.docker.swarm.service.name={SMOKE}"}
    wait_for("the smoke containers to go",
             lambda: not any(e.containers.list(all=True, ignore_removed=True, filters=label) for e in engines), 60)
    for network in manager.networks.list(names=[SMOKE]):
        network.remove()
    with contextlib.suppress(docker.errors.ImageNotFound):
        manager.images.remove(f"{repository}:1")  # an untag: the base image stays
    for worker in engines[1:]:
        with contextlib.suppress(docker.errors.ImageNotFound):
            worker.images.remove(worker.images.get(f"{repository}@{digest}").id, force=True)
    delete_from_registry(SMOKE, digest)


# --- command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.swarm_lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every command")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="bring the lab up and run the smoke test")
    up.add_argument("--no-check", action="store_true", help="skip the smoke test")
    commands.add_parser("check", help="run the smoke test on the lab that is up")
    commands.add_parser("status", help="print the lab's state as JSON")
    down = commands.add_parser("down", help="remove the lab")
    down.add_argument("--purge", action="store_true", help="also remove the engines' data")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("urllib3", "docker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if args.command == "up":
            print(json.dumps(dataclasses.asdict(lab_up(check=not args.no_check)), indent=1))
        elif args.command == "check":
            smoke_test(lab())
        elif args.command == "status":
            print(json.dumps(lab_status(), indent=1))
        else:
            lab_down(purge=args.purge)
    except LabError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
