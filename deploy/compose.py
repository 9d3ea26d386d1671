"""A Compose file for a federation: `docker compose up` on one host, `docker stack deploy`
on a Swarm (set PROTOFED_NETWORK_DRIVER=overlay). One service per node, stable names."""

from __future__ import annotations

import json
from pathlib import Path

from deploy.docker_backend import (
    INTERFACE,
    SCRATCH,
    container_command,
    container_mounts,
    container_user,
    grant_node_access,
    hidden_paths,
)
from deploy.plan import Plan
from node.config import FederationConfig


def compose_document(config: FederationConfig, plan: Plan, image: str, data_dir: Path) -> str:
    """The Compose file text (YAML) for the planned federation; paths must be absolute."""
    lines = [
        "# Written by `protofed compose`. One host:  docker compose up   (or docker-compose up)",
        "# Swarm:  PROTOFED_NETWORK_DRIVER=overlay docker stack deploy -c compose.yaml NAME",
        'version: "3.8"',
        "services:",
    ]
    for spec in plan.nodes:
        name = service_name(plan, spec.node_id)
        command = container_command(plan, spec.node_id)
        lines += [
            f"  {name}:",
            f"    image: {_quote(image)}",
            f"    hostname: {name}",
            f"    command: {json.dumps(command)}",
            # The Docker backend's privileges, less the pids limit: Compose file 3.8 has
            # no key for it. A Swarm stack also ignores no-new-privileges.
            f"    user: {_quote(container_user())}",
            "    cap_drop: [ALL]",
            "    security_opt: [no-new-privileges:true]",
            "    read_only: true",
            "    environment:",
            f"      PROTOFED_INTERFACE: {INTERFACE}",
            f"      HOME: {SCRATCH}",
            (f'    labels: {{"protofed.run": {_quote(plan.run_id)}, '
             f'"protofed.node": "{spec.node_id}"}}'),
            "    networks: [federation]",
            '    restart: "no"',
            "    volumes:",
        ]
        for source, target, read_only in container_mounts(plan, spec.node_id, data_dir):
            lines += [
                "      - type: bind",
                f"        source: {_quote(source)}",
                f"        target: {target}",
                f"        read_only: {'true' if read_only else 'false'}",
            ]
        for target in [SCRATCH, *hidden_paths(plan)]:
            lines += ["      - type: tmpfs", f"        target: {target}"]
        lines += [
            "    deploy:",
            "      endpoint_mode: dnsrr",  # peers connect to the task itself, not a VIP
            "      restart_policy: {condition: none}",
        ]
        limits = []
        if config.deploy.cpus:
            limits.append(f'cpus: "{config.deploy.cpus}"')
        if config.deploy.memory:
            limits.append(f"memory: {config.deploy.memory}")
        if limits:
            lines.append(f"      resources: {{limits: {{{', '.join(limits)}}}}}")
    lines += [
        "networks:",
        "  federation:",
        "    driver: ${PROTOFED_NETWORK_DRIVER:-bridge}",
        "    internal: true",
        "    attachable: true",
        "",
    ]
    return "\n".join(lines)


def service_name(plan: Plan, node_id: int) -> str:
    """The service (and host) name of a node: the address its peers connect to."""
    return plan.nodes[node_id].address.removeprefix("tcp://").rsplit(":", 1)[0]


def _quote(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML scalar


def write_compose(config: FederationConfig, plan: Plan, image: str, data_dir: Path) -> Path:
    """Write compose.yaml beside the run's federation file; return its path."""
    grant_node_access(plan)
    path = plan.results_dir / "compose.yaml"
    path.write_text(compose_document(config, plan, image, data_dir))
    return path
