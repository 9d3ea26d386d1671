"""Compose files for a federation, built as data and written with PyYAML: compose.yaml for
`docker-compose up` on one host, stack.yaml for `docker stack deploy` on a Swarm (overlay
network, peers reached task to task). One service per node, stable names."""

from __future__ import annotations

from pathlib import Path

import yaml

from deploy.capacity import node_memory
from deploy.docker_backend import (
    LABEL,
    SCRATCH,
    container_command,
    container_environment,
    container_mounts,
    container_user,
    prepare_node_access,
)
from deploy.plan import Plan
from node.config import FederationConfig

COMPOSE_FILE = "compose.yaml"
STACK_FILE = "stack.yaml"
NETWORK = "federation"


def compose_document(config: FederationConfig, plan: Plan, image: str, data_dir: Path,
                     cache_dir: Path | None = None, *, swarm: bool = False) -> dict:
    """The Compose document of the planned federation; paths must be absolute."""
    services = {service_name(plan, spec.node_id): _service(config, plan, spec.node_id, image,
                                                           data_dir, cache_dir, swarm)
                for spec in plan.nodes}
    network = {"driver": "overlay" if swarm else "bridge", "internal": True,
               "labels": {LABEL: plan.run_id}}  # so `protofed down` finds and removes it
    if swarm:
        network["attachable"] = True
    return {"version": "3.8", "services": services, "networks": {NETWORK: network}}


def _service(config: FederationConfig, plan: Plan, node_id: int, image: str, data_dir: Path,
             cache_dir: Path | None, swarm: bool) -> dict:
    volumes = [{"type": "bind", "source": source, "target": target, "read_only": read_only}
               for source, target, read_only in container_mounts(plan, node_id, data_dir,
                                                                 cache_dir)]
    volumes.append({"type": "tmpfs", "target": SCRATCH})
    deploy: dict = {"restart_policy": {"condition": "none"}}
    if swarm:
        deploy["endpoint_mode"] = "dnsrr"  # peers connect to the task itself, not a VIP
    # the estimate the Docker backend's capacity check counts, unless deploy.memory says
    limits = {"memory": config.deploy.memory or f"{node_memory(config, container=True) // 2**20}m"}
    if config.deploy.cpus:
        limits["cpus"] = str(config.deploy.cpus)
    deploy["resources"] = {"limits": limits}
    name = service_name(plan, node_id)
    # The Docker backend's privileges, less the pids limit: Compose file 3.8 has no key for
    # it. A Swarm stack also ignores no-new-privileges.
    return {"image": image, "hostname": name, "command": container_command(plan, node_id),
            "user": container_user(), "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"], "read_only": True,
            "environment": container_environment(data_dir, cache_dir),
            "labels": {LABEL: plan.run_id, "protofed.node": str(node_id)},
            "networks": [NETWORK], "restart": "no", "volumes": volumes, "deploy": deploy}


def service_name(plan: Plan, node_id: int) -> str:
    """The service (and host) name of a node: the address its peers connect to."""
    return plan.nodes[node_id].address.removeprefix("tcp://").rsplit(":", 1)[0]


def render(document: dict, how: str) -> str:
    """The document as YAML text, with a first line saying how to start it."""
    return f"# Written by `protofed compose`. {how}\n" + yaml.safe_dump(
        document, sort_keys=False, default_flow_style=False)


def write_compose(config: FederationConfig, plan: Plan, image: str, data_dir: Path,
                  cache_dir: Path | None = None) -> tuple[Path, Path]:
    """Write compose.yaml and stack.yaml beside the run's federation file; their paths."""
    prepare_node_access(plan)
    compose = plan.results_dir / COMPOSE_FILE
    stack = plan.results_dir / STACK_FILE
    compose.write_text(render(compose_document(config, plan, image, data_dir, cache_dir),
                              f"One host: docker-compose -f {COMPOSE_FILE} up"))
    stack.write_text(render(compose_document(config, plan, image, data_dir, cache_dir,
                                             swarm=True),
                            f"Swarm: docker stack deploy -c {STACK_FILE} NAME"))
    return compose, stack
