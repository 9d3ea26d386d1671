"""Graphs in containers on a real engine: a user's graph file, an edge shaped to its
bandwidth, a hub star with half the clients drawn per round (skipped without an engine,
failed under CI)."""

import subprocess

import pytest

from tests import helpers
from tests.docker_support import protofed, write_config

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("docker-federations")


def test_an_edge_list_graph_file_runs_in_containers(client, node_image, workdir, data_dir,
                                                    tmp_path):
    """A user's own graph file, outside anything the containers mount: the nodes read the
    federation file, never the graph file."""
    graph = helpers.write_graph_file(tmp_path / "own-graphs" / "g6.edges")
    config = write_config(workdir, data_dir, "dk-edge-list", algorithm="fedavg", nodes=6,
                          topology="file", topology_extra=f'path = "{graph}"')
    done = protofed("up", "-c", config, "--run-id", "dk-edge-list")
    assert done.returncode == 0, done.stderr[-2000:]
    _, nodes = helpers.read_results(workdir / "results" / "dk-edge-list")
    assert [n["status"] for n in nodes] == ["finished"] * 6
    for node in nodes:
        assert node["in_neighbours"] == helpers.neighbours_in(helpers.SIX_EDGES, node["node"])


def test_a_shaped_edge_between_containers_carries_its_bandwidth(client, node_image, workdir,
                                                                data_dir, tmp_path):
    """The local shaping test's federation on the Docker backend, from a GraphML file of six
    nodes whose edge 0-1 carries bandwidth 5mbit: only 0<->1 at 5 Mbit/s, shaped inside
    the sender's container (whose capabilities stay dropped)."""
    graph = helpers.write_graph_file(tmp_path / "g6.graphml", bandwidths={(0, 1): "5mbit"})
    extra = '[model]\nteacher_channels = [32, 64]\n'
    config = write_config(workdir, data_dir, "docker-shaped", algorithm="fedavg", codec="fp32",
                          rounds=2, extra=extra, nodes=6, topology="file",
                          topology_extra=f'path = "{graph}"')
    done = protofed("up", "-c", config, "--run-id", "docker-shaped")
    assert done.returncode == 0, done.stderr[-2000:]
    _, nodes = helpers.read_results(workdir / "results" / "docker-shaped")
    assert [n["status"] for n in nodes] == ["finished"] * 6
    assert nodes[1]["in_neighbours"] == [0, 2]
    rates = {}
    for peer in ("0", "2"):
        rates[peer] = [8 * r["bytes_received_by_peer"][peer]["model"]
                       / r["transfer_seconds_by_peer"][peer]["model"]
                       for r in nodes[1]["rounds"][1:]
                       if "model" in r["transfer_seconds_by_peer"].get(peer, {})]
    assert rates["0"] and all(4.5e6 <= rate <= 5.5e6 for rate in rates["0"]), rates
    # unshaped: well above the shaped link's bound (its own rate is the loaded CPU's: one
    # transfer read 35 Mbit/s while the suite ran beside two experiments)
    assert rates["2"] and all(rate > 2 * 5.5e6 for rate in rates["2"]), rates
    # the rules lived in the containers' namespaces: no interface of the host has any
    host = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True, check=True)
    assert "htb" not in host.stdout, host.stdout


def test_a_hub_star_at_half_participation_runs_in_containers(client, node_image, workdir,
                                                             data_dir):
    """A hub (node 0, no data) and four FedAvg clients, two drawn per round: the containers
    derive the same chosen set from the federation file, only the drawn clients train and
    send, nobody waits for the others, and each link's bytes match at both ends."""
    config = write_config(workdir, data_dir, "dk-hub", algorithm="fedavg", nodes=5, rounds=3,
                          topology="star", topology_extra="hub = 0")
    done = protofed("up", "-c", config, "--run-id", "dk-hub", "--set", "participation=0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    _, nodes = helpers.read_results(workdir / "results" / "dk-hub")
    assert [n["status"] for n in nodes] == ["finished"] * 5
    assert nodes[0]["train_samples"] == 0
    helpers.assert_hub_rounds_drawn(nodes, rounds=3, drawn=2)
    by_id = {n["node"]: n for n in nodes}
    for sender in nodes:
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            assert by_id[int(peer)]["bytes_received_by_peer"][str(sender["node"])] == kinds
