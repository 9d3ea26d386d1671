"""The Compose files, read back with PyYAML without Docker: one service per node running the
Docker backend's node command with its mounts, on the run's internal, labelled network;
the Swarm's settings only in the stack file."""

import pytest
import yaml

from deploy.backends.capacity import MiB, NodeFootprint, with_limits
from deploy.backends.compose import compose_document, write_compose
from deploy.backends.docker_backend import (
    SCRATCH,
    container_command,
    container_mounts,
    plan_docker,
)
from deploy.backends.plan import write_plan
from tests.helpers import deploy_config


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


def written(config, plan, data):
    """Both files as written, read back: (compose document, stack document)."""
    compose, stack = write_compose(config, plan, "img:1", data)
    assert compose.read_text().startswith("# Written by `protofed compose`. One host: ")
    return yaml.safe_load(compose.read_text()), yaml.safe_load(stack.read_text())


def test_each_service_runs_its_nodes_container_command_with_its_mounts(planned):
    config, plan, data = planned
    document, _ = written(config, plan, data)
    services = document["services"]
    assert list(services) == [f"run-1-node-{i}" for i in range(3)]
    for node_id, (name, service) in enumerate(services.items()):
        assert plan.nodes[node_id].address == f"tcp://{name}:6000"  # what its peers dial
        assert service["hostname"] == name and service["image"] == "img:1"
        assert service["command"] == container_command(plan, node_id)
        binds = [(v["source"], v["target"], v["read_only"])
                 for v in service["volumes"] if v["type"] == "bind"]
        assert binds == container_mounts(plan, node_id, data)
        tmpfs = [v["target"] for v in service["volumes"] if v["type"] == "tmpfs"]
        assert tmpfs == [SCRATCH]
        assert service["labels"] == {"protofed.run": "run-1", "protofed.node": str(node_id)}
        assert service["networks"] == ["federation"] and service["restart"] == "no"
        assert service["deploy"]["resources"] == {"limits": {"cpus": "1.5", "memory": "1g"}}
    network = document["networks"]["federation"]
    assert network["internal"] is True and network["driver"] == "bridge"
    assert network["labels"] == {"protofed.run": "run-1"}  # `protofed down` removes it


def test_only_the_stack_file_has_what_docker_compose_ignores(planned):
    """docker-compose warns once per service that endpoint_mode is ignored: only the
    stack file, for `docker stack deploy`, carries it, on an overlay network."""
    compose, stack = written(*planned)
    assert all("endpoint_mode" not in s["deploy"] for s in compose["services"].values())
    assert all(s["deploy"]["endpoint_mode"] == "dnsrr" for s in stack["services"].values())
    assert stack["networks"]["federation"]["driver"] == "overlay"
    assert stack["services"] == {name: {**service, "deploy": {
        **service["deploy"], "endpoint_mode": "dnsrr", "labels": service["labels"]}}
        for name, service in compose["services"].items()}


def test_awkward_paths_survive_the_round_trip(tmp_path):
    """Quoting is the YAML library's: a data folder with spaces, a colon, '#' and quotes."""
    folder = tmp_path / "my data: #1 'x' \"y\""
    folder.mkdir()
    config = deploy_config(tmp_path, nodes=2, deploy={"memory": "1g"})
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-3")
    write_plan(plan)
    compose, _ = written(config, plan, folder)
    sources = [v["source"] for v in compose["services"]["run-3-node-0"]["volumes"]
               if v["type"] == "bind"]
    assert str(folder.resolve()) in sources


def test_without_keys_a_service_has_none_and_its_memory_is_the_estimate(tmp_path):
    config = deploy_config(tmp_path, nodes=2, deploy={"security": "none"})
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-2")
    write_plan(plan)
    measured = NodeFootprint(runtime=200 * MiB, shared=300 * MiB, peak=400 * MiB,
                             per_neighbour=2 * MiB)
    plan = with_limits(config, measured, plan)
    services = compose_document(config, plan, "img:1", tmp_path)["services"]
    for node_id, service in enumerate(services.values()):
        # no deploy.memory: 1.5 x the measured peak and one neighbour's messages, not unlimited
        assert service["deploy"]["resources"] == {"limits": {"memory": "603m"}}
        assert "--keys" not in service["command"]
        assert [v["target"] for v in service["volumes"]] == [
            "/config/federation.json", "/results", "/data", SCRATCH]
        assert service["command"] == container_command(plan, node_id)


def test_each_node_writes_its_own_folder_seen_from_the_run_folder_by_a_link(planned):
    """A container may write only nodes/<i>/; node-<i>.json in the run folder is a relative
    link to the file it writes there, so the run folder reads like a local run's."""
    config, plan, data = planned
    written(config, plan, data)
    for node in range(3):
        link = plan.results_dir / f"node-{node}.json"
        assert link.is_symlink() and str(link.readlink()) == f"nodes/{node}/node-{node}.json"
        (plan.results_dir / "nodes" / str(node) / f"node-{node}.json").write_text("{}")
        assert link.read_text() == "{}"
