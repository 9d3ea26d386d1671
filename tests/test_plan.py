"""Planning without starting anything: the resolved federation every backend hands its
nodes, the one node command line, and what the run folder holds before a node starts."""

import json

import pytest

from deploy.backends.docker_backend import DATA_MOUNT, container_command, plan_docker
from deploy.backends.plan import keys_dir, node_arguments, plan_local, write_plan
from deploy.run_folder import FEDERATION_FILE
from node.config import from_dict
from node.errors import ConfigError
from node.federation import read, resolve
from tests.helpers import deploy_config, local_plan


def ring_of_four(tmp_path, **values):
    """Four nodes on a ring, results under tmp_path."""
    return deploy_config(tmp_path, nodes=4, topology={"kind": "ring"}, **values)


def test_a_local_plan_gives_each_node_its_port_and_its_ring_neighbours(tmp_path):
    plan = local_plan(tmp_path, ring_of_four(tmp_path), first_port=7000)
    assert [m.address for m in plan.nodes] == [f"tcp://127.0.0.1:{7000 + i}" for i in range(4)]
    assert [m.bind for m in plan.nodes] == [m.address for m in plan.nodes]
    assert plan.nodes[0].in_neighbours == (1, 3) and plan.nodes[0].out_neighbours == (1, 3)
    assert plan.federation_file == plan.results_dir / FEDERATION_FILE


def test_a_directed_graph_keeps_who_sends_to_whom(tmp_path):
    edges = tmp_path / "g.edgelist"
    edges.write_text("0 1\n1 2\n2 0\n")
    federation = resolve(from_dict({"nodes": 3, "topology": {"kind": "file", "path": str(edges),
                                                             "directed": True}}),
                         ["a"] * 3, ["a"] * 3)
    assert [(m.in_neighbours, m.out_neighbours) for m in federation.members] == [
        ((2,), (1,)), ((0,), (2,)), ((1,), (0,))]


def test_a_graph_that_cannot_be_built_is_a_config_error_naming_the_topology(tmp_path):
    edges = tmp_path / "split.edgelist"
    edges.write_text("0 1\n2 3\n")
    broken = from_dict({"nodes": 4, "topology": {"kind": "file", "path": str(edges)}})
    with pytest.raises(ConfigError, match=r"c.toml: \[topology\].*connected"):
        plan_local(broken, tmp_path / "c.toml", (), "run-1", [1, 2, 3, 4])


def test_the_federation_file_reads_back_as_written(tmp_path):
    plan = plan_local(ring_of_four(tmp_path, seed=9), tmp_path / "c.toml", ("seed=9",),
                      "run-1", [7000, 7001, 7002, 7003])
    path = write_plan(plan)
    again = read(path)
    assert again.config == plan.federation.config
    assert again.members == plan.federation.members
    document = json.loads(path.read_text())
    assert document["overrides"] == ["seed=9"] and document["digest"] == again.config.digest()
    assert keys_dir(plan).is_dir() and (plan.results_dir / "logs").is_dir()
    with pytest.raises(FileExistsError):  # a run folder is never written over
        write_plan(plan)


@pytest.mark.parametrize("damage, field", [
    (lambda d: d.update(format=99), "format"),
    (lambda d: d["nodes"].pop(), "nodes must list"),
    (lambda d: d["nodes"][1].update(out=[1]), r"nodes\[1\]\.out"),
    (lambda d: d["nodes"][2].update(id=5), r"nodes\[2\]"),
    (lambda d: d["nodes"][0].update(address=""), r"nodes\[0\]\.address"),
    (lambda d: d["config"].update(nodes="four"), "nodes"),
])
def test_a_damaged_federation_file_is_refused_naming_the_field(tmp_path, damage, field):
    plan = local_plan(tmp_path, ring_of_four(tmp_path))
    document = json.loads(write_plan(plan).read_text())
    damage(document)
    plan.federation_file.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=field):
        read(plan.federation_file)


def test_every_backend_starts_a_node_with_the_same_arguments(tmp_path):
    local = node_arguments("/r/federation.json", 2, "/r", "/r/keys", listen_fd=7)
    assert local == ["--federation", "/r/federation.json", "--node-id", "2", "--results", "/r",
                     "--keys", "/r/keys", "--listen-fd", "7"]
    plan = plan_docker(ring_of_four(tmp_path), tmp_path / "c.toml", (), "run-1")
    write_plan(plan)
    assert container_command(plan, 2) == node_arguments(
        "/config/federation.json", 2, "/results", "/keys")


def test_containers_are_reached_by_name_and_read_data_from_their_mount(tmp_path):
    plan = plan_docker(ring_of_four(tmp_path, deploy={"port": 6000}), tmp_path / "c.toml", (),
                       "run-1")
    assert [m.address for m in plan.nodes] == [f"tcp://run-1-node-{i}:6000" for i in range(4)]
    assert {m.bind for m in plan.nodes} == {"tcp://0.0.0.0:6000"}
    assert plan.federation.config.data.dir == DATA_MOUNT
