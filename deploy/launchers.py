"""Where `protofed up` runs a federation's nodes: one Launcher per backend, one interface.

The command knows backends only through `launcher_for`; a new backend is a new Launcher
here (or in its own module) and a line in LAUNCHERS.
"""

from __future__ import annotations

import abc
import socket
from pathlib import Path

from deploy import docker_backend as docker
from deploy import image as docker_image
from deploy import local
from deploy.plan import Plan, host_data_dir, plan_local, reserve_listeners
from node.config import FederationConfig, user_code
from node.errors import ConfigError


class Launcher(abc.ABC):
    """Plans, starts and, if it never starts, releases one federation on one backend."""

    def __init__(self, config: FederationConfig) -> None:
        self.config = config
        self.refuse_unrunnable()

    def refuse_unrunnable(self) -> None:
        """Refuse, before any work, a federation this backend cannot run."""

    @abc.abstractmethod
    def plan(self, source: Path, overrides: tuple[str, ...], run_id: str,
             cache_dir: Path | None) -> Plan:
        """Check this machine can hold the federation, then where every node will run."""

    @abc.abstractmethod
    def start(self, plan: Plan) -> local.LocalRun | docker.DockerRun:
        """Start every node of the written plan; the run to watch, stop and remove."""

    def release(self) -> None:
        """Give back what `plan` reserved, when the run does not start."""


class LocalLauncher(Launcher):
    """One forked process per node on this machine, each on a socket held from the plan on."""

    listeners: list[socket.socket]

    def plan(self, source: Path, overrides: tuple[str, ...], run_id: str,
             cache_dir: Path | None) -> Plan:
        local.check_capacity(self.config, local.available_memory())
        local.check_user_models(self.config)
        self.listeners = reserve_listeners(self.config)
        try:
            return plan_local(self.config, source, overrides, run_id,
                              [sock.getsockname()[1] for sock in self.listeners])
        except BaseException:
            self.release()
            raise

    def start(self, plan: Plan) -> local.LocalRun:
        local.warm_up(plan.federation.config)
        return local.start(plan, self.listeners, self.config.deploy.restarts)

    def release(self) -> None:
        for sock in getattr(self, "listeners", []):
            sock.close()


class DockerLauncher(Launcher):
    """One container per node on the Docker engine, from the node image."""

    def refuse_unrunnable(self) -> None:
        refuse_user_code(self.config)

    def plan(self, source: Path, overrides: tuple[str, ...], run_id: str,
             cache_dir: Path | None) -> Plan:
        config = self.config
        self.data_dir, self.cache_dir = host_data_dir(config), cache_dir
        plan = docker.plan_docker(config, source, overrides, run_id)
        self.client = docker.connect()
        info = self.client.info()
        docker.check_capacity(config, int(info.get("MemTotal", 0)), int(info.get("NCPU", 0)))
        if not self.data_dir.is_dir():
            raise ConfigError(f"data.dir {self.data_dir} is not a folder: the containers mount "
                              "it as their dataset folder (set data.dir or PROTOFED_DATA_DIR)")
        self.image = config.deploy.image or docker_image.ensure_image(
            self.client, config.deploy.base_image)
        return plan

    def start(self, plan: Plan) -> docker.DockerRun:
        return docker.start(self.config, plan, self.image, self.client, self.data_dir,
                            self.cache_dir)


def refuse_user_code(config: FederationConfig) -> None:
    """Containers run the node image, which holds no module of the user's."""
    for key, value in user_code(config):
        raise ConfigError(f"{key} = {value!r} names a Python module of yours, which the node "
                          "image does not contain: run it with the local backend")


LAUNCHERS: dict[str, type[Launcher]] = {"local": LocalLauncher, "docker": DockerLauncher}


def launcher_for(config: FederationConfig) -> Launcher:
    """The launcher of `deploy.backend`, having refused what that backend cannot run."""
    return LAUNCHERS[config.deploy.backend](config)
