"""Where `protofed up` runs a federation's nodes: one Launcher per backend, one interface.

The command knows backends only through `launcher_for`; a new backend is a new Launcher
here (or in its own module) and a line in LAUNCHERS. A launcher's `prepare` does what has
side effects (reserving sockets, talking to an engine, probing memory, building or pushing
the image); what runs where is decided by the pure plan functions it calls (`plan_local`,
`plan_docker`), from the federation resolved once.
"""

from __future__ import annotations

import abc
import socket
from pathlib import Path
from typing import TextIO

from deploy.backends import capacity, local, shaping, sim
from deploy.backends import docker_backend as docker
from deploy.backends import image as docker_image
from deploy.backends import swarm_backend as swarm
from deploy.backends.plan import (
    Plan,
    folder_notes,
    host_data_dir,
    plan_local,
    reserve_listeners,
)
from deploy.backends.runner import Run
from deploy.ending import finish_without_launcher
from deploy.run_folder import log_tail
from node.config import user_code
from node.errors import ConfigError, ProtofedError
from node.settings import FederationConfig


class Launcher(abc.ABC):
    """Prepares, starts and, if it never starts, releases one federation on one backend."""

    # data.layout "per-node": the nodes' folders lie where the nodes run, not on the
    # launcher's disk, so `prepare` checks them there (else the launcher checks them first)
    checks_node_folders = False

    def __init__(self, config: FederationConfig) -> None:
        self.config = config
        self.memory_note = ""  # what the capacity check counted, in one line
        self.notes: list[str] = []  # what `prepare` found that measures little, to be said
        self.refuse_unrunnable()

    def refuse_unrunnable(self) -> None:
        """Refuse, before any work, a federation this backend cannot run."""

    @abc.abstractmethod
    def prepare(self, source: Path, overrides: tuple[str, ...], run_id: str,
                cache_dir: Path | None) -> Plan:
        """Reserve what the run needs on this backend and check it can hold the federation;
        the plan: where every node runs."""

    @abc.abstractmethod
    def start(self, plan: Plan) -> Run:
        """Start every node of the written plan; the run to watch, stop and remove."""

    def release(self) -> None:
        """Give back what `prepare` reserved, when the run does not start."""


class LocalLauncher(Launcher):
    """One forked process per node on this machine, each on a socket held from the plan on."""

    listeners: list[socket.socket]

    def refuse_unrunnable(self) -> None:
        import torch  # here: `import protofed` loads no torch

        if self.config.train.device == "cuda" and not torch.cuda.is_available():
            build = "a CPU build" if torch.version.cuda is None else "no CUDA device visible"
            raise ConfigError(f'train.device = "cuda": this machine\'s torch {torch.__version__} '
                              f'has {build}; set train.device = "auto" (CUDA where present) or '
                              '"cpu"')

    def prepare(self, source: Path, overrides: tuple[str, ...], run_id: str,
                cache_dir: Path | None) -> Plan:
        local.check_user_models(self.config)
        self.listeners = reserve_listeners(self.config)
        try:
            plan = plan_local(self.config, source, overrides, run_id,
                              [sock.getsockname()[1] for sock in self.listeners])
            shaping.preflight(plan.federation.shaped_links)
            # the nodes are forked from this process once it is warm: so is the probe
            local.warm_up(self.config)
            footprint = None if self.config.deploy.memory else local.probe_footprint(
                self.config)
            self.memory_note = capacity.check_memory(
                self.config, footprint, capacity.in_degrees(plan),
                capacity.available_memory(), container=False, where="this machine")
            return plan
        except BaseException:
            self.release()
            raise

    def start(self, plan: Plan) -> local.LocalRun:
        return local.start(plan, self.listeners, self.config.deploy.restarts)

    def release(self) -> None:
        for sock in getattr(self, "listeners", []):
            sock.close()


class DockerLauncher(Launcher):
    """One container per node on the Docker engine, from the node image."""

    def refuse_unrunnable(self) -> None:
        refuse_user_code(self.config)

    def prepare(self, source: Path, overrides: tuple[str, ...], run_id: str,
                cache_dir: Path | None) -> Plan:
        config = self.config
        self.data_dir, self.cache_dir = host_data_dir(config), cache_dir
        plan = docker.plan_docker(config, source, overrides, run_id)
        self.client = docker.connect()
        info = self.client.info()
        shaping.preflight(plan.federation.shaped_links, tools=("tc", "nsenter"))
        if not self.data_dir.is_dir():
            raise ConfigError(f"data.dir {self.data_dir} is not a folder: the containers mount "
                              "it as their dataset folder (set data.dir or PROTOFED_DATA_DIR)")
        # measured after the quick checks: the probe takes a few seconds
        footprint = None if config.deploy.memory else capacity.probe(config)
        self.memory_note = docker.check_capacity(config, footprint, plan,
                                                 int(info.get("MemTotal", 0)),
                                                 int(info.get("NCPU", 0)))
        plan = capacity.with_limits(config, footprint, plan)
        self.image = config.deploy.image or docker_image.ensure_image(
            self.client, config.deploy.base_image)
        return plan

    def start(self, plan: Plan) -> docker.DockerRun:
        return docker.start(self.config, plan, self.image, self.client, self.data_dir,
                            self.cache_dir)


class SwarmLauncher(Launcher):
    """One service per node on a Docker Swarm, through its manager. Pooled data: the node
    image, with the dataset, pulled from deploy.registry by every machine. Per-node data:
    the node image alone; each node pinned to the machine that holds its folder, whose
    folder is checked there before any node starts."""

    def refuse_unrunnable(self) -> None:
        refuse_user_code(self.config)  # a dataset of the user's included
        if self.config.data.layout == "per-node":
            swarm.require_pins(self.config)

    @property
    def checks_node_folders(self) -> bool:
        return self.config.data.layout == "per-node"

    def prepare(self, source: Path, overrides: tuple[str, ...], run_id: str,
                cache_dir: Path | None) -> Plan:
        config = self.config
        per_node = config.data.layout == "per-node"
        plan = docker.plan_docker(config, source, overrides, run_id)
        if plan.federation.shaped_links:
            raise ConfigError("[links] (or the graph file's edge attributes) shape traffic on "
                              "one machine's interfaces: the swarm backend does not shape "
                              "links (use the local or docker backend)")
        data_dir = host_data_dir(config)
        if not per_node and not data_dir.is_dir():
            raise ConfigError(f"data.dir {data_dir} is not a folder: the node image gets the "
                              "dataset's files from it (set data.dir or PROTOFED_DATA_DIR)")
        self.client = swarm.connect(config.deploy.manager)
        available = swarm.machines(self.client)
        self.constraints = {spec.node_id: swarm.placement_constraints(config, available,
                                                                       spec.node_id)
                            for spec in plan.nodes}
        footprint = None if config.deploy.memory else capacity.probe(config)
        plan = capacity.with_limits(config, footprint, plan)
        self.memory_note = swarm.check_capacity(config, footprint, plan, self.client,
                                                available, self.constraints)
        node_image = config.deploy.image or docker_image.ensure_image(
            self.client, config.deploy.base_image)
        if per_node:  # no data in any image: each machine's folders, checked where they lie
            self.image = swarm.push_node_image(self.client, node_image, config)
            self.folders = swarm.check_folders(self.client, config, plan, self.image,
                                               self.constraints)
            self.notes = folder_notes([self.folders[n] for n in sorted(self.folders)],
                                      str(data_dir))
        else:
            self.image = swarm.push_image(self.client, node_image, config, data_dir)
            self.folders = {}
        return plan

    def start(self, plan: Plan) -> swarm.SwarmRun:
        return swarm.start(self.config, plan, self.image, self.client, self.constraints,
                           self.folders)


class SimLauncher(Launcher):
    """Every node a thread of one process on this machine, in virtual time."""

    def refuse_unrunnable(self) -> None:
        if self.config.train.device == "cuda":
            raise ConfigError('train.device = "cuda": the sim backend measures each node\'s '
                              "compute as its thread's CPU time, so it runs nodes on the CPU "
                              '(use "auto" or "cpu")')

    def prepare(self, source: Path, overrides: tuple[str, ...], run_id: str,
                cache_dir: Path | None) -> Plan:
        config = self.config
        local.check_user_models(config)
        plan = sim.plan_sim(config, source, overrides, run_id)
        # the sim process is forked from this one once it is warm: so is the probe
        local.warm_up(config)
        footprint = None if config.deploy.memory else local.probe_footprint(config, threads=True)
        workers = config.deploy.usable_cores()
        self.memory_note = capacity.check_sim_memory(
            config, footprint, capacity.in_degrees(plan), capacity.available_memory(), workers)
        self.memory_note += (f"; {workers} nodes compute at once (deploy.cores); seconds in "
                             "the records are virtual")
        return plan

    def start(self, plan: Plan) -> sim.SimRun:
        return sim.start(plan)


def refuse_user_code(config: FederationConfig) -> None:
    """Containers run the node image, which holds no module of the user's."""
    for key, value in user_code(config):
        raise ConfigError(f"{key} = {value!r} names a Python module of yours, which the node "
                          "image does not contain: run it with the local backend")


LAUNCHERS: dict[str, type[Launcher]] = {"local": LocalLauncher, "docker": DockerLauncher,
                                         "swarm": SwarmLauncher, "sim": SimLauncher}


def launcher_for(config: FederationConfig) -> Launcher:
    """The launcher of `deploy.backend`, having refused what that backend cannot run."""
    return LAUNCHERS[config.deploy.backend](config)


class Fleet(abc.ABC):
    """The runs one backend has going (on this machine, or on its engine): what `status`,
    `down` and `logs` ask every backend."""

    name: str
    unavailable = ""  # why this backend could not be asked ("" when it could)

    @abc.abstractmethod
    def runs(self) -> list[str]:
        """The ids of its runs that still have nodes."""

    @abc.abstractmethod
    def describe(self) -> list[str]:
        """One status line per run."""

    @abc.abstractmethod
    def stop(self, run_id: str) -> str | None:
        """Stop a run's nodes; what was done, or None when this backend has no such run."""

    @abc.abstractmethod
    def logs(self, run_id: str, node: int, tail: int, follow: bool,
             out: TextIO) -> bool:
        """Write a node's output to `out` (and, with `follow`, what it writes until it ends);
        False when this backend cannot show it."""


class LocalFleet(Fleet):
    """Local runs: the run.json files under the results folder whose processes live."""

    name = "local"

    def __init__(self, results_root: Path) -> None:
        self.results_root = results_root

    def _running(self) -> list[dict]:
        return local.running_runs(self.results_root)

    def runs(self) -> list[str]:
        return [run["run_id"] for run in self._running()]

    def describe(self) -> list[str]:
        return [(f"{run['run_id']}  sim  {run['nodes']} nodes in process {run['alive']['sim']}"
                 if run["backend"] == "sim" else
                 f"{run['run_id']}  local  nodes alive: "
                 f"{', '.join(sorted(run['alive'], key=int))}")
                + ("" if local.launcher_alive(run) else
                   f"  (its launcher is gone: `protofed down {run['run_id']}` stops it)")
                for run in self._running()]

    def stop(self, run_id: str) -> str | None:
        for run in self._running():
            if run["run_id"] == run_id:
                local.stop_pids(run["alive"], run.get("start_times"))
                if run.get("shaped_device"):  # the launcher did not live to remove it
                    shaping.clear(run["shaped_device"])
                return (f"stopped {run_id} ({len(run['alive'])} node processes)"
                        + _finished_here(Path(run["dir"])))
        return None

    def logs(self, run_id: str, node: int, tail: int, follow: bool, out: TextIO) -> bool:
        run_dir = self.results_root / run_id
        if not (run_dir / "logs" / f"node-{node}.log").is_file():
            return False
        if not follow:
            out.write(log_tail(run_dir, node, tail) + "\n")
            return True
        local.follow_file(run_dir / "logs" / f"node-{node}.log", tail,
                          lambda: local.node_alive(self.results_root, run_id, node), out)
        return True


class DockerFleet(Fleet):
    """Container runs on the Docker engine, found by their labels (Compose and Swarm too);
    no engine is no error: local runs need none."""

    name = "docker"

    def __init__(self) -> None:
        try:
            self.client = docker.connect()
        except ProtofedError as exc:
            self.client, self.unavailable = None, str(exc)

    def _running(self) -> dict[str, list[tuple[str, str]]]:
        return docker.running_runs(self.client) if self.client is not None else {}

    def runs(self) -> list[str]:
        return list(self._running())

    def describe(self) -> list[str]:
        lines = []
        for run_id, states in self._running().items():
            if docker.ended(states):  # e.g. after `docker-compose up` returned
                lines.append(f"{run_id}  docker  ended, every container exited "
                             f"(`protofed down {run_id}` removes them)")
            else:
                lines.append(f"{run_id}  docker  "
                             + "; ".join(f"{node}: {state}" for node, state in states))
        return lines

    def stop(self, run_id: str) -> str | None:
        if self.client is None:
            return None
        folder = docker.run_folder_of(self.client, run_id)
        containers, networks = docker.down_run(self.client, run_id)
        if not (containers or networks):
            return None
        return (f"stopped and removed {run_id} ({containers} containers, {networks} "
                "networks; their logs are in its results folder)"
                + (_finished_here(folder) if folder is not None else ""))

    def logs(self, run_id: str, node: int, tail: int, follow: bool, out: TextIO) -> bool:
        if not self._running().get(run_id):
            return False
        for chunk in docker.container_logs(self.client, run_id, node, tail, follow=follow):
            out.write(chunk)
            out.flush()
        return True


class SwarmFleet(Fleet):
    """Service runs on the swarm whose manager is $DOCKER_HOST (or the local engine); no
    manager is no error. First among the fleets: a swarm run's containers on the manager
    are its services' to stop, not the Docker fleet's."""

    name = "swarm"

    def __init__(self) -> None:
        try:
            self.client = swarm.connect()
        except ProtofedError:  # no engine (the Docker fleet says so) or not a manager
            self.client = None

    def _running(self) -> dict[str, list[tuple[str, str]]]:
        return swarm.running_runs(self.client) if self.client is not None else {}

    def runs(self) -> list[str]:
        return list(self._running())

    def describe(self) -> list[str]:
        return [f"{run_id}  swarm  " + "; ".join(f"{node}: {state}" for node, state in states)
                for run_id, states in self._running().items()]

    def stop(self, run_id: str) -> str | None:
        if self.client is None or run_id not in self._running():
            return None
        removed = swarm.remove_run(self.client, run_id)
        return (f"stopped and removed {run_id} on the swarm ("
                + ", ".join(f"{count} {kind}" for kind, count in removed.items()) + ")")

    def logs(self, run_id: str, node: int, tail: int, follow: bool, out: TextIO) -> bool:
        if self.client is None or run_id not in self._running():
            return False
        for line in swarm.service_logs(self.client, run_id, node, tail, follow):
            out.write(line)
            out.flush()
        return True


def _finished_here(run_dir: Path) -> str:
    """Words for `down` when its launcher was gone and `down` wrote the run's summary."""
    if finish_without_launcher(run_dir, "protofed down") is None:
        return ""
    return f"; its launcher was gone: wrote {run_dir / 'summary.json'}"


def fleets(results_root: Path) -> list[Fleet]:
    """Every backend's runs: the swarm's services, containers (a container's output is the
    fuller log), then local processes."""
    return [SwarmFleet(), DockerFleet(), LocalFleet(results_root)]
