"""A node that stops during round 1 reports the bytes of round 0 in its totals, so its
per-round rows still add up to them (the record written after round 0 carries totals)."""

import json

import pytest

from node.algorithms.fedavg import FedAvg
from tests.helpers import mnist_config, run_in_process


def test_a_node_stopped_in_round_one_has_round_zeros_totals(data_dir, tmp_path, monkeypatch):
    def stop(self, round_):
        raise KeyboardInterrupt  # what a stop signal raises in the round loop

    monkeypatch.setattr(FedAvg, "train_round", stop)
    config = mnist_config(data_dir, 600, name="early", nodes=2, rounds=2, algorithm="fedavg",
                          train={"device": "cpu"})
    with pytest.raises(KeyboardInterrupt):
        run_in_process(config, tmp_path)
    for node in (0, 1):
        record = json.loads((tmp_path / f"node-{node}.json").read_text())
        assert [r["round"] for r in record["rounds"]] == [0]
        rows = record["rounds"][0]
        assert rows["bytes_sent"] > 0
        assert record["bytes_sent"] == rows["bytes_sent"]
        assert record["bytes_received"] == rows["bytes_received"]


def test_a_node_back_after_the_last_round_is_missed_not_finished(data_dir, tmp_path,
                                                                monkeypatch):
    """A restart that finds the federation past its last round trains nothing: it is
    `missed`, left out of the means, and its process exits with MISSED_EXIT (not restarted,
    and the run is incomplete)."""
    from deploy.backends import local
    from deploy.views.report import summarize
    from node.lifecycle import MISSED_EXIT
    from node.net.peers import Peers

    real = Peers.handshake

    def late(self, timeout, while_waiting=None):
        done = real(self, timeout, while_waiting)
        if self.node_id == 1:
            self.joined_round = self.rounds  # the others are in their last round already
        return done

    monkeypatch.setattr(Peers, "handshake", late)
    config = mnist_config(data_dir, 600, name="late", nodes=2, rounds=1, algorithm="fedavg",
                          train={"device": "cpu"}, timeouts={"round": 2, "absent": 1})
    results = run_in_process(config, tmp_path)
    assert [r["status"] for r in results] == ["finished", "missed"]
    assert "last round" in results[1]["error"]
    summary = summarize(tmp_path, "late", 2)
    assert summary["failed_nodes"] == [1]
    assert summary["mean_global_f1"] == results[0]["rounds"][-1]["global_test"]["f1"]
    assert MISSED_EXIT in local.NO_RESTART_EXITS
    assert local.run_status({0: 0, 1: MISSED_EXIT}, 2, stopping=False) == "failed"
