"""Link conditions: parsing, per-edge resolution, the tc rules, and a real shaped loopback."""

import json
import os
import shutil
import subprocess

import networkx as nx
import pytest

from deploy.backends import shaping
from deploy.backends.plan import write_plan
from deploy.backends.shaping import Rule, netem_arguments, tc_commands
from node.config import from_dict
from node.errors import ConfigError, DeployError
from tests.helpers import (
    alive,
    deploy_config,
    local_plan,
    protofed,
    run_federation,
)
from topology import TopologyError
from topology.links import Link, edge_links, link, parse_loss, parse_rate, parse_time


def test_units_parse_to_bits_seconds_and_fractions():
    assert parse_rate("5mbit") == 5_000_000 and parse_rate("1gbit/s") == 10**9
    assert parse_rate("800kbit") == 800_000 and parse_rate("2.5 Mbit") == 2_500_000
    assert parse_time("50ms", "delay") == pytest.approx(0.05)
    assert parse_time("200us", "jitter") == pytest.approx(2e-4)
    assert parse_loss("1%") == pytest.approx(0.01) and parse_loss("0.5 %") == 0.005
    for bad, call in (("5mbps", parse_rate), ("fast", parse_rate), ("100bit", parse_rate)):
        with pytest.raises(ValueError, match="bandwidth"):
            call(bad)
    with pytest.raises(ValueError, match="delay '5 parsecs'"):
        parse_time("5 parsecs", "delay")
    with pytest.raises(ValueError, match="below 100%"):
        parse_loss("100%")
    with pytest.raises(ValueError, match="jitter needs a delay"):
        link({"jitter": "5ms"})


def test_each_edge_takes_default_then_graph_attributes_then_overrides():
    graph = nx.DiGraph([(0, 1), (1, 0), (1, 2), (2, 1)])
    graph.edges[1, 2]["bandwidth"] = "50mbit"  # as a GraphML edge attribute would carry it
    links = edge_links(graph, {"bandwidth": "1gbit"},
                       [(0, 1, False, {"bandwidth": "5mbit", "delay": ""}),
                        (2, 1, True, {"loss": "1%"})])
    assert links[(0, 1)] == Link(5_000_000)
    assert links[(1, 0)] == Link(10**9)  # the other way keeps the default
    assert links[(1, 2)] == Link(50_000_000, loss=0.01)  # attribute, then the both-ways loss
    assert links[(2, 1)] == Link(10**9, loss=0.01)
    with pytest.raises(TopologyError, match="link 0->2: the topology has no such edge"):
        edge_links(graph, {}, [(0, 2, False, {"bandwidth": "5mbit"})])
    graph.edges[1, 0]["delay"] = "soon"
    with pytest.raises(TopologyError, match="link 1->0: delay 'soon'"):
        edge_links(graph, {}, [])


def test_the_config_refuses_bad_links_naming_the_edge_or_key():
    base = {"nodes": 3, "topology": {"kind": "ring"}}
    with pytest.raises(ConfigError, match=r"links.edges\[0\].bandwidth '5mbps'"):
        from_dict({**base, "links": {"edges": [{"nodes": [0, 1], "bandwidth": "5mbps"}]}})
    # an edge the graph lacks: refused when the launcher resolves the federation
    from node.federation import resolve
    config = from_dict({**base, "nodes": 4, "links": {"edges": [{"nodes": [0, 2],
                                                                 "bandwidth": "5mbit"}]}})
    with pytest.raises(ConfigError, match=r"links: link 0->2: the topology has no such edge"):
        resolve(config, ["x"] * 4, ["x"] * 4)
    with pytest.raises(ConfigError, match="links.profile must be one of lan, wan, edge"):
        from_dict({**base, "links": {"profile": "moon"}})
    with pytest.raises(ConfigError, match=r"links.edges\[0\].nodes must be \[sender, receiver\]"):
        from_dict({**base, "links": {"edges": [{"nodes": [2]}]}})
    config = from_dict({**base, "links": {"profile": "edge", "delay": "20ms"}})
    assert config.links.default() == {"bandwidth": "5mbit", "delay": "20ms"}


def test_the_rules_are_one_htb_class_and_u32_filter_per_edge_with_netem_below():
    rules = [Rule(2, Link(5_000_000), src="127.1.0.1", dport=6001),
             Rule(3, Link(None, delay_s=0.05, jitter_s=0.005, loss=0.01), dst="10.0.0.3",
                  dport=5555)]
    assert tc_commands("lo", rules) == [
        ["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1"],
        ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit"],
        ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb", "rate", "5000000bit", "burst", "16384", "cburst", "16384"],
        ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "src", "127.1.0.1/32", "match", "ip", "dport", "6001", "0xffff", "flowid", "1:2"],
        ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:3", "htb", "rate", "100gbit"],
        ["tc", "qdisc", "add", "dev", "lo", "parent", "1:3", "handle", "3:", "netem", "delay", "50ms", "5ms", "distribution", "normal", "loss", "1%"],
        ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "dst", "10.0.0.3/32", "match", "ip", "dport", "5555", "0xffff", "flowid", "1:3"]]
    assert netem_arguments(Link(None, 0.05, 0.005, 0.01)) == [
        "delay", "50ms", "5ms", "distribution", "normal", "loss", "1%"]
    # a fast link may send 10 ms worth at once
    assert tc_commands("eth0", [Rule(2, Link(10**9))])[2][-3:] == ["1250000", "cburst",
                                                                   "1250000"]


def test_delay_on_a_kernel_without_netem_is_refused_naming_the_module(monkeypatch):
    monkeypatch.setattr(shaping, "netem_available", lambda: False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    with pytest.raises(DeployError, match=r"links 0->1\), which need the kernel module "
                                          r"sch_netem \(CONFIG_NET_SCH_NETEM\)"):
        shaping.preflight({(0, 1): Link(None, delay_s=0.05), (1, 0): Link(5_000_000)})
    shaping.preflight({(0, 1): Link(5_000_000)})  # bandwidth alone needs no netem
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(DeployError, match="needs root"):
        shaping.preflight({(0, 1): Link(5_000_000)})


def _can_shape():
    return os.geteuid() == 0 and shutil.which("tc") is not None


def lo_qdisc():
    return subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.integration
@pytest.mark.skipif(not _can_shape(), reason="shaping needs root and tc")
def test_a_shaped_edge_carries_its_bandwidth_and_the_others_are_untouched(tmp_path, data_dir):
    """3 local FedAvg nodes; only 0->1 is limited to 5 Mbit/s. The model is 1.8 MB at fp32:
    a transfer after an idle spell passes HTB's burst and its last loopback packet (64 KB)
    at once, which reads 9% fast on a 0.86 MB model and about 4% on this one."""
    extra = ('[model]\nteacher_channels = [32, 64]\n'
             '[[links.edges]]\nnodes = [0, 1]\nbandwidth = "5mbit"\n')
    done, _, nodes = run_federation(tmp_path, data_dir, "shaped", algorithm="fedavg",
                                    codec="fp32", rounds=2, extra=extra)
    assert done.returncode == 0, done.stderr[-2000:]
    receiver = nodes[1]
    rates = {}
    for peer in ("0", "2"):
        # a transfer is timed unless data came after it before it was read (then untimed)
        rates[peer] = [8 * r["bytes_received_by_peer"][peer]["model"]
                       / r["transfer_seconds_by_peer"][peer]["model"]
                       for r in receiver["rounds"][1:]
                       if "model" in r["transfer_seconds_by_peer"].get(peer, {})]
    assert rates["0"] and all(4.5e6 <= rate <= 5.5e6 for rate in rates["0"]), rates  # ±10%
    assert rates["2"] and all(rate > 50e6 for rate in rates["2"]), rates  # unshaped
    assert receiver["in_link_bandwidth"] == {"0": 5_000_000, "2": 0}
    table = protofed("report", tmp_path / "results" / "shaped", "--wide")
    assert " of 5 (from 0)" in table.stdout, table.stdout  # achieved beside configured
    run = json.loads((tmp_path / "results" / "shaped" / "run.json").read_text())
    assert run["shaped_device"] == ""  # the rules shaped the run (the rates) and are gone
    assert "htb" not in lo_qdisc()


@pytest.mark.skipif(not _can_shape(), reason="shaping needs root and tc")
def test_the_end_of_a_run_and_down_remove_the_rules_from_lo(tmp_path):
    """A run's end (normal, Ctrl-C or a failed start all call LocalRun.remove) and `down` of
    a run whose launcher was killed: both take the rules off lo (real tc, no federation)."""
    from deploy.backends import local
    from deploy.backends.launchers import LocalFleet
    rule = [Rule(2, Link(5_000_000), src="127.1.0.1", dport=6001)]
    plan = local_plan(tmp_path, deploy_config(tmp_path, deploy={"security": "none"}))
    write_plan(plan)
    shaping.apply("lo", rule)
    try:
        run = local.LocalRun(plan, shaped_device="lo")
        assert "htb" in lo_qdisc()
        run.remove()
        assert "htb" not in lo_qdisc()
        assert json.loads((plan.results_dir / "run.json").read_text())["shaped_device"] == ""
        # a launcher killed with SIGKILL: its run.json still names lo, a node still lives
        shaping.apply("lo", rule)
        # a node as the killed launcher left it: in its own session, no longer our child
        pid = int(subprocess.run(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True).stdout)
        (plan.results_dir / "run.json").write_text(json.dumps({
            "run_id": plan.run_id, "backend": "local", "status": "running",
            "pids": {"0": pid}, "start_times": {}, "shaped_device": "lo"}))
        assert LocalFleet(plan.results_dir.parent).stop(plan.run_id)
        assert not alive(pid)
        assert "htb" not in lo_qdisc()
    finally:
        shaping.clear("lo")


def test_the_table_shows_the_slowest_in_links_achieved_rate_beside_its_setting():
    from deploy.views.report import in_link_rates, slowest_in_link
    from node.record import NodeRecord, RoundRecord

    rounds = [RoundRecord(round=r, bytes_received_by_peer={"0": {"model": 625_000},
                                                           "2": {"model": 625_000}},
                          transfer_seconds_by_peer={"0": {"model": 1.0}, "2": {"model": 0.01}})
              for r in (1, 2)]
    record = NodeRecord(node=1, rounds=rounds, in_link_bandwidth={"0": 5_000_000, "2": 0})
    rates = in_link_rates(record)
    assert rates == {"0": {"configured": 5e6, "achieved": 5e6},
                     "2": {"configured": 0.0, "achieved": 5e8}}
    assert slowest_in_link(rates) == "5.00 of 5 (from 0)"
    assert slowest_in_link({"3": {"configured": 0.0, "achieved": 0.0}}) == \
        "untimed of unlimited (from 3)"
    assert in_link_rates(NodeRecord(node=1)) is None


def test_a_graph_file_carries_its_links_and_links_overrides_them(tmp_path):
    graph = tmp_path / "g.graphml"
    graph.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
        ' <key id="bw" for="edge" attr.name="bandwidth" attr.type="string"/>\n'
        ' <graph edgedefault="undirected">\n'
        '  <node id="0"/><node id="1"/><node id="2"/>\n'
        '  <edge source="0" target="1"><data key="bw">5mbit</data></edge>\n'
        '  <edge source="1" target="2"/><edge source="2" target="0"/>\n'
        ' </graph>\n</graphml>\n')
    from node.federation import read, resolve

    def shaped_links(config):
        return resolve(config, ["x"] * config.nodes, ["x"] * config.nodes).shaped_links
    topology = {"kind": "file", "path": str(graph)}
    assert shaped_links(from_dict({"nodes": 3, "topology": topology})) == {
        (0, 1): Link(5_000_000), (1, 0): Link(5_000_000)}  # undirected: both ways
    config = from_dict({"nodes": 3, "topology": topology, "links": {
        "edges": [{"nodes": [1, 0], "bandwidth": "1mbit"}]}})
    assert shaped_links(config) == {(0, 1): Link(5_000_000), (1, 0): Link(1_000_000)}
    assert shaped_links(from_dict({"nodes": 3})) == {}  # nothing set: nothing shaped
    # the federation file carries them: read back with the graph file gone, the same links
    written = resolve(config, ["tcp://a:1"] * 3, ["tcp://a:1"] * 3).write(tmp_path / "f.json")
    graph.unlink()
    assert read(written).shaped_links == {(0, 1): Link(5_000_000), (1, 0): Link(1_000_000)}
    assert read(written).edges == ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))
    graph.write_text("")  # a graph file that is no graph
    with pytest.raises(ConfigError, match=r"topology \(file"):
        shaped_links(from_dict({"nodes": 3, "topology": topology}))


def test_a_bad_condition_in_a_graph_file_is_refused_naming_the_edge(tmp_path):
    from node.federation import resolve
    graph = tmp_path / "g.edges"
    graph.write_text("0 1 bandwidth=5parsecs\n1 2\n2 0\n")
    config = from_dict({"nodes": 3, "topology": {"kind": "file", "path": str(graph)}})
    with pytest.raises(ConfigError, match=r"link 0->1: bandwidth '5parsecs'"):
        resolve(config, ["x"] * 3, ["x"] * 3)
    graph.write_text("0 1 bandwith=5mbit\n1 2\n2 0\n")  # a misspelt condition
    with pytest.raises(ConfigError, match=r"line 1: .* got 'bandwith=5mbit'"):
        resolve(config, ["x"] * 3, ["x"] * 3)
    graph.write_text("0 1 bandwidth=5mbit delay=10ms\n1 2\n2 0\n")
    assert resolve(config, ["x"] * 3, ["x"] * 3).shaped_links[(1, 0)] == Link(5_000_000, 0.01)


def test_a_bad_links_value_is_refused_when_the_config_is_loaded():
    with pytest.raises(ConfigError, match=r"links.bandwidth '5 parsecs'"):
        from_dict({"nodes": 3, "links": {"bandwidth": "5 parsecs"}})
    with pytest.raises(ConfigError, match=r"links.edges\[0\].delay 'soon'"):
        from_dict({"nodes": 3, "links": {"edges": [{"nodes": [0, 1], "delay": "soon"}]}})


@pytest.mark.skipif(not _can_shape() or shaping.netem_available(),
                    reason="needs root, tc and a kernel without netem")
def test_up_with_a_delay_on_a_kernel_without_netem_stops_before_any_node_starts(tmp_path):
    from tests.helpers import REPO
    done = protofed("up", "-c", REPO / "examples" / "quick.toml", "--set", "links.delay=50ms",
                    "--set", f"deploy.results_dir={tmp_path}", timeout=120)
    assert done.returncode == 1, done.stderr
    assert "sch_netem (CONFIG_NET_SCH_NETEM)" in done.stderr
    assert done.stderr.count("sch_netem") == 1  # one message
    assert not any(tmp_path.iterdir())  # nothing was planned or started


@pytest.mark.integration
@pytest.mark.skipif(not _can_shape(), reason="shaping needs root and tc")
@pytest.mark.skipif(_can_shape() and not shaping.netem_available(),
                    reason="this kernel has no netem (sch_netem, CONFIG_NET_SCH_NETEM): delay, "
                           "jitter and loss cannot be shaped here")
def test_a_delayed_edge_takes_its_delay_and_the_others_do_not(tmp_path, data_dir):
    """Where the kernel has netem: 0->1 delayed by 300 ms (each packet, so a transfer takes
    at least that long), the other edges not."""
    extra = '[[links.edges]]\nnodes = [0, 1]\ndelay = "300ms"\n'
    done, _, nodes = run_federation(tmp_path, data_dir, "delayed", algorithm="fedavg",
                                    codec="fp32", rounds=2, extra=extra)
    assert done.returncode == 0, done.stderr[-2000:]
    timed = {peer: [r["transfer_seconds_by_peer"][peer]["model"]
                    for r in nodes[1]["rounds"][1:]
                    if "model" in r["transfer_seconds_by_peer"].get(peer, {})]
             for peer in ("0", "2")}
    assert timed["0"] and min(timed["0"]) >= 0.3, timed
    assert timed["2"] and max(timed["2"]) < 0.3, timed
    assert "htb" not in lo_qdisc()
