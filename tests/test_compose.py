"""The Compose file, read back without Docker: one service per node running the Docker
backend's node command with its mounts, on the run's internal network."""

import json

import pytest

from deploy.compose import compose_document
from deploy.docker_backend import (
    SCRATCH,
    container_command,
    container_mounts,
    hidden_paths,
    plan_docker,
)
from deploy.plan import write_plan
from tests.helpers import deploy_config


def read_block_yaml(text):
    """The block mappings and sequences of a YAML document, scalars left as their text
    (the subset compose_document writes); a line out of place raises ValueError.

    PyYAML is not a dependency; `docker-compose config` checks the file where it is
    installed (test_hardening.py).
    """
    lines = [line for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]

    def indent(line):
        return len(line) - len(line.lstrip(" "))

    def block(i, depth):
        if lines[i].lstrip().startswith("- "):
            items = []
            while i < len(lines) and indent(lines[i]) == depth and lines[i].lstrip()[:2] == "- ":
                lines[i] = " " * (depth + 2) + lines[i][depth + 2:]  # the item's first key
                item, i = block(i, depth + 2)
                items.append(item)
            return items, i
        mapping = {}
        while i < len(lines) and indent(lines[i]) >= depth:
            if indent(lines[i]) != depth:
                raise ValueError(f"indented {indent(lines[i])}, not {depth}: {lines[i]!r}")
            key, colon, value = lines[i].strip().partition(":")
            if not colon or key in mapping:
                raise ValueError(f"not a new key: {lines[i]!r}")
            i += 1
            if value.strip():
                mapping[key] = value.strip()
            elif i < len(lines) and indent(lines[i]) > depth:
                mapping[key], i = block(i, indent(lines[i]))
            else:
                raise ValueError(f"{key} has no value")
        return mapping, i

    document, end = block(0, 0)
    if end != len(lines):
        raise ValueError(f"left over from {lines[end]!r}")
    return document


def test_the_reader_refuses_a_line_out_of_place():
    with pytest.raises(ValueError, match="indented 3"):
        read_block_yaml("services:\n  a:\n    image: x\n   hostname: a\n")


@pytest.fixture
def planned(tmp_path):
    """Three nodes planned for Docker with limits and keys, the run folder written:
    (config, plan, data folder)."""
    config = deploy_config(tmp_path, deploy={"port": 6000, "memory": "1g", "cpus": 1.5})
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-1")
    write_plan(plan)
    data = tmp_path / "data"
    data.mkdir()
    return config, plan, data


def test_each_service_runs_its_nodes_container_command_with_its_mounts(planned):
    config, plan, data = planned
    document = read_block_yaml(compose_document(config, plan, "img:1", data))
    services = document["services"]
    assert list(services) == [f"run-1-node-{i}" for i in range(3)]
    for node_id, (name, service) in enumerate(services.items()):
        assert plan.nodes[node_id].address == f"tcp://{name}:6000"  # what its peers dial
        assert service["hostname"] == name and json.loads(service["image"]) == "img:1"
        assert json.loads(service["command"]) == container_command(plan, node_id)
        binds = [(json.loads(v["source"]), v["target"], v["read_only"] == "true")
                 for v in service["volumes"] if v["type"] == "bind"]
        assert binds == container_mounts(plan, node_id, data)
        tmpfs = [v["target"] for v in service["volumes"] if v["type"] == "tmpfs"]
        assert tmpfs == [SCRATCH, *hidden_paths(plan)]
        assert json.loads(service["labels"]) == {"protofed.run": "run-1",
                                                 "protofed.node": str(node_id)}
        assert service["networks"] == "[federation]"
        assert service["deploy"]["resources"] == '{limits: {cpus: "1.5", memory: 1g}}'
    assert document["networks"]["federation"]["internal"] == "true"


def test_without_limits_or_keys_a_service_has_neither(tmp_path):
    config = deploy_config(tmp_path, nodes=2, deploy={"security": "none"})
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-2")
    write_plan(plan)
    services = read_block_yaml(compose_document(config, plan, "img:1", tmp_path))["services"]
    for node_id, service in enumerate(services.values()):
        assert "resources" not in service["deploy"]
        assert "--keys" not in json.loads(service["command"])
        assert [v["target"] for v in service["volumes"]] == [
            "/config/federation.json", "/results", "/data", SCRATCH]
        assert json.loads(service["command"]) == container_command(plan, node_id)
