"""The swarm backend's decisions, without a swarm: placement, the data image's context, each
task's command and environment, and a node's record rebuilt from its output."""

import io
import json
import tarfile

import pytest

from deploy.backends.docker_backend import plan_docker
from deploy.backends.plan import write_plan
from deploy.backends.swarm_backend import (
    SwarmRun,
    _Output,
    data_context,
    node_command,
    node_environment,
    placement_constraints,
)
from node.config import from_dict
from node.errors import ConfigError, DeployError
from node.record_stream import record_lines
from tests.helpers import deploy_config

MACHINES = [("id-a", "engine-a"), ("id-b", "engine-b"), ("id-c", "engine-c")]


def swarm_config(tmp_path, nodes=5, **deploy):
    return deploy_config(tmp_path, nodes=nodes, deploy={"backend": "swarm",
                                                        "registry": "10.0.0.1:5000", **deploy})


def test_spread_puts_node_i_on_the_ith_machine_in_turn_and_a_pin_overrides(tmp_path):
    config = swarm_config(tmp_path, pin=["", "", "", "engine-a"])
    assert [placement_constraints(config, MACHINES, i) for i in range(5)] == [
        ["node.id==id-a"], ["node.id==id-b"], ["node.id==id-c"], ["node.hostname==engine-a"],
        ["node.id==id-b"]]
    anywhere = swarm_config(tmp_path, placement="swarm")
    assert placement_constraints(anywhere, MACHINES, 2) == []


def test_a_pin_to_a_machine_the_swarm_lacks_is_refused(tmp_path):
    config = swarm_config(tmp_path, pin=["engine-z"])
    with pytest.raises(DeployError, match=r"deploy.pin\[0\] = 'engine-z' is not a ready"):
        placement_constraints(config, MACHINES, 0)


def test_the_swarm_backend_needs_a_registry_and_a_known_placement(tmp_path):
    with pytest.raises(ConfigError, match="deploy.registry"):
        from_dict({"nodes": 3, "deploy": {"backend": "swarm"}})
    with pytest.raises(ConfigError, match="deploy.placement"):
        swarm_config(tmp_path, placement="random")
    with pytest.raises(ConfigError, match="deploy.pin"):
        swarm_config(tmp_path, nodes=2, pin=["a", "b", "c"])


def test_the_data_image_is_the_node_image_with_the_dataset_files_at_data(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(b"labels")
    with tarfile.open(fileobj=io.BytesIO(data_context(
            "protofed-node:abc", [raw / "t10k-labels-idx1-ubyte.gz"], tmp_path))) as context:
        assert context.extractfile("Dockerfile").read() == (
            b"FROM protofed-node:abc\nCOPY data /data\n")
        member = context.getmember("data/MNIST/raw/t10k-labels-idx1-ubyte.gz")
        assert context.extractfile(member).read() == b"labels" and member.mode == 0o444


def test_a_task_reads_its_config_and_keys_from_the_swarm_and_writes_its_record_out(tmp_path):
    config = swarm_config(tmp_path, nodes=3)
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-1")
    write_plan(plan)
    assert node_command(plan, 2) == ["--federation", "/config/federation.json", "--node-id",
                                     "2", "--results", "/results", "--keys", "/keys",
                                     "--record-stdout"]
    environment = node_environment(config)
    assert "PROTOFED_MACHINE={{.Node.Hostname}}" in environment
    assert "PROTOFED_VERIFY_DATA=1" in environment  # the image's dataset is checked
    assert plan.nodes[1].address == "tcp://run-1-node-1:5555"  # the service's name


def test_a_nodes_output_becomes_its_record_file_and_its_log_without_the_record(tmp_path):
    config = swarm_config(tmp_path, nodes=2)
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-1")
    plan.results_dir.mkdir(parents=True)
    run, output = SwarmRun(plan, client=None), _Output()
    document = {"node": 1, "status": "finished", "rounds_done": 3}
    for line in ["node-1 INFO node: round 3/3 done", *record_lines(document, 4, 10)]:
        run._take(1, line, output)
    assert json.loads((plan.results_dir / "node-1.json").read_text()) == document
    assert output.lines == ["node-1 INFO node: round 3/3 done"]


def test_only_a_bind_mount_at_results_names_a_run_folder():
    """A swarm task's /results is a tmpfs with an empty source, which once read as the
    current folder: `down` wrote its logs into ./logs."""
    from types import SimpleNamespace

    from deploy.backends.docker_backend import results_folder

    def container(*mounts):
        return SimpleNamespace(attrs={"Mounts": list(mounts)})
    tmpfs = {"Type": "tmpfs", "Source": "", "Destination": "/results"}
    bind = {"Type": "bind", "Source": "/runs/r1/nodes/2", "Destination": "/results"}
    assert results_folder(container(tmpfs)) is None
    assert str(results_folder(container(bind))) == "/runs/r1"


def test_a_graph_file_whose_edges_carry_bandwidth_is_refused_before_the_swarm_is_asked(
        tmp_path, monkeypatch):
    """The swarm shapes no links: a graph file's bandwidth is refused in one line, from the
    resolved federation, before any engine is reached."""
    from deploy.backends import launchers
    from tests.helpers import write_graph_file

    monkeypatch.setattr(launchers.swarm, "connect", lambda *a: pytest.fail("reached"))
    graph = write_graph_file(tmp_path / "g6.graphml", bandwidths={(0, 1): "5mbit"})
    config = deploy_config(tmp_path, nodes=6, deploy={"backend": "swarm",
                                                      "registry": "10.0.0.1:5000"},
                           topology={"kind": "file", "path": str(graph)})
    with pytest.raises(ConfigError, match="swarm backend does not shape links"):
        launchers.SwarmLauncher(config).prepare(tmp_path / "c.toml", (), "r", None)
