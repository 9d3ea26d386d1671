"""Compose files for a federation, built as data and written with PyYAML: compose.yaml for
`docker-compose up` on one host, stack.yaml for `docker stack deploy` on a Swarm (overlay
network, peers reached task to task). One service per node, stable names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy.backends import capacity
from deploy.backends import image as node_image
from deploy.backends.docker_backend import (
    KEYS_MOUNT,
    LABEL,
    RESULTS_MOUNT,
    SCRATCH,
    container_command,
    container_environment,
    container_mounts,
    container_user,
    plan_docker,
    prepare_node_access,
)
from deploy.backends.docker_backend import connect as connect_engine
from deploy.backends.launchers import refuse_user_code
from deploy.backends.plan import (
    Plan,
    check_node_folders,
    ensure_results_dir,
    host_data_dir,
    keys_dir,
    prepare_data,
    write_plan,
)
from deploy.backends.swarm_backend import (
    CONFIG_TARGET,
    NODE_LABEL,
    node_command,
    node_environment,
    pinned_machine,
    push_image,
)
from deploy.backends.swarm_backend import connect as connect_manager
from node.config import FederationConfig
from node.errors import ConfigError
from node.net.security import PUBLIC_FILE, secret_file

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
        # service labels: `protofed status` and `down` find the run through the manager
        deploy["labels"] = {LABEL: plan.run_id, NODE_LABEL: str(node_id)}
    deploy["resources"] = {"limits": limits(config, plan, node_id)}
    name = service_name(plan, node_id)
    # The Docker backend's privileges, less the pids limit: Compose file 3.8 has no key for
    # it. A Swarm stack also ignores no-new-privileges.
    return {"image": image, "hostname": name, "command": container_command(plan, node_id),
            "user": container_user(), "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"], "read_only": True,
            "environment": container_environment(data_dir, cache_dir),
            "labels": {LABEL: plan.run_id, "protofed.node": str(node_id)},
            "networks": [NETWORK], "restart": "no", "volumes": volumes, "deploy": deploy}


def stack_document(config: FederationConfig, plan: Plan, image: str) -> dict:
    """The Swarm stack of the planned federation with no host path: `image` a registry
    reference every machine pulls (the node image with the dataset), each node's key a
    secret of its service alone, the federation file and public keys configs, results
    written to each node's output (`protofed collect` turns them into the run folder)."""
    labels = {LABEL: plan.run_id}
    keys = keys_dir(plan)
    uid, gid = container_user().split(":")
    configs = {"federation": {"file": str(plan.federation_file.resolve()), "labels": labels}}
    secrets = {}
    if keys.is_dir():
        configs["public-keys"] = {"file": str((keys / PUBLIC_FILE).resolve()), "labels": labels}
    services = {}
    for spec in plan.nodes:
        node_id = spec.node_id
        service_labels = {**labels, NODE_LABEL: str(node_id)}
        deploy = {"restart_policy": {"condition": "none"}, "endpoint_mode": "dnsrr",
                  "labels": service_labels, "resources": {"limits": limits(config, plan, node_id)}}
        pinned = pinned_machine(config, node_id)
        if pinned:
            deploy["placement"] = {"constraints": [f"node.hostname=={pinned}"]}
        service = {
            "image": image, "hostname": service_name(plan, node_id),
            "command": node_command(plan, node_id), "user": container_user(),
            "cap_drop": ["ALL"], "read_only": True,
            "environment": dict(item.split("=", 1) for item in node_environment(config)),
            "labels": service_labels, "networks": [NETWORK], "deploy": deploy,
            "volumes": [{"type": "tmpfs", "target": SCRATCH},
                        {"type": "tmpfs", "target": RESULTS_MOUNT}],
            "configs": [{"source": "federation", "target": CONFIG_TARGET, "uid": uid,
                         "gid": gid, "mode": 0o444}]}
        if keys.is_dir():
            name = f"node-{node_id}-key"
            secrets[name] = {"file": str((keys / secret_file(node_id)).resolve()),
                             "labels": service_labels}
            service["configs"].append({"source": "public-keys", "uid": uid, "gid": gid,
                                       "target": f"{KEYS_MOUNT}/{PUBLIC_FILE}", "mode": 0o444})
            service["secrets"] = [{"source": name, "target": f"{KEYS_MOUNT}/"
                                   f"{secret_file(node_id)}", "uid": uid, "gid": gid,
                                   "mode": 0o400}]
        services[service_name(plan, node_id)] = service
    network = {"driver": "overlay", "attachable": True, "labels": labels}
    document = {"version": "3.8", "services": services, "networks": {NETWORK: network},
                "configs": configs}
    if secrets:
        document["secrets"] = secrets
    return document


def limits(config: FederationConfig, plan: Plan, node_id: int) -> dict[str, str]:
    """A service's resource limits: deploy.memory, else its memory limit from the plan
    (measured, see deploy.backends.capacity), and deploy.cpus."""
    found = {"memory": config.deploy.memory or f"{plan.memory_limits[node_id] // 2**20}m"}
    if config.deploy.cpus:
        found["cpus"] = str(config.deploy.cpus)
    return found


def service_name(plan: Plan, node_id: int) -> str:
    """The service (and host) name of a node: the address its peers connect to."""
    return plan.nodes[node_id].address.removeprefix("tcp://").rsplit(":", 1)[0]


def render(document: dict, how: str) -> str:
    """The document as YAML text, with a first line saying how to start it."""
    return f"# Written by `protofed compose`. {how}\n" + yaml.safe_dump(
        document, sort_keys=False, default_flow_style=False)


def write_compose(config: FederationConfig, plan: Plan, image: str, data_dir: Path,
                  cache_dir: Path | None = None, registry_image: str = "") -> tuple[Path, Path]:
    """Write compose.yaml and stack.yaml beside the run's federation file; their paths.
    With `registry_image` (deploy.registry set) the stack mounts no host path and runs on
    any swarm; without, it bind-mounts this machine's folders (a one-machine swarm)."""
    prepare_node_access(plan)
    compose = plan.results_dir / COMPOSE_FILE
    stack = plan.results_dir / STACK_FILE
    compose.write_text(render(compose_document(config, plan, image, data_dir, cache_dir),
                              f"One host: docker-compose -f {COMPOSE_FILE} up"))
    if registry_image:
        stack.write_text(render(stack_document(config, plan, registry_image),
                                f"Any swarm: docker stack deploy -c {STACK_FILE} "
                                f"{plan.run_id}, then protofed collect {plan.run_id}"))
    else:
        stack.write_text(render(compose_document(config, plan, image, data_dir, cache_dir,
                                                 swarm=True),
                                f"One-machine swarm (it mounts this machine's folders; set "
                                f"deploy.registry for any swarm): docker stack deploy -c "
                                f"{STACK_FILE} NAME"))
    return compose, stack


@dataclass(frozen=True)
class ComposedRun:
    """What `compose_run` wrote: the two files, the image they run, the run's folder."""

    compose: Path
    stack: Path
    image: str
    results_dir: Path


def compose_run(config: FederationConfig, source: Path, overrides: tuple[str, ...],
                run_id: str, image: str = "") -> ComposedRun:
    """The run folder and Compose files of a federation: its dataset prepared, one node's
    memory measured (unless deploy.memory), the node image built (unless `image`) and, with
    deploy.registry, pushed with the dataset for any swarm."""
    refuse_user_code(config)
    per_node = config.data.layout == "per-node"
    if per_node and config.deploy.registry:
        raise ConfigError('data.layout = "per-node" with deploy.registry: a stack for any '
                          "swarm would have to place each service on the engine holding its "
                          "node's folder; run it with `protofed up` on the swarm backend "
                          "(deploy.pin names each node's machine), or leave deploy.registry "
                          "unset for one host (each service mounts its own folder)")
    if config.deploy.security == "none" and not config.deploy.allow_insecure:
        raise ConfigError('deploy.security = "none" in a Compose file or a Swarm stack lets '
                          'anything on their network pose as a node: use "curve", or also '
                          "set deploy.allow_insecure = true")
    ensure_results_dir(config, source, overrides)
    if per_node:  # each service mounts its node's folder: no pooled dataset, none cached
        check_node_folders(config)
    cache_dir = None if per_node else prepare_data(config)
    data_dir = host_data_dir(config).resolve()
    plan = plan_docker(config, source, overrides, run_id)
    footprint = None if config.deploy.memory else capacity.probe(config)
    plan = capacity.with_limits(config, footprint, plan)
    engines: list = []

    def engine():  # where the image is built (and pushed from): deploy.manager, else here
        if not engines:
            engines.append(connect_manager(config.deploy.manager) if config.deploy.manager
                           else connect_engine())
        return engines[0]
    image = image or node_image.ensure_image(engine(), config.deploy.base_image)
    try:
        write_plan(plan)
    except FileExistsError:
        raise ConfigError(f"results folder {plan.results_dir} already exists: pick another "
                          "--run-id") from None
    registry_image = ""
    if config.deploy.registry:  # a stack any swarm can run: the image through the registry
        registry_image = push_image(engine(), image, config, data_dir)
    compose, stack = write_compose(config, plan, image, data_dir, cache_dir, registry_image)
    return ComposedRun(compose, stack, image, plan.results_dir)
