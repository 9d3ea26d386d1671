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
