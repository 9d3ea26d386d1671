"""TensorBoard export: the event files, read back with TensorBoard's own reader, hold what
the node records hold."""

import dataclasses
import json

import pytest

from deploy.views.tensorboard import TensorBoardExport, export, hyperparameters, scalars
from node.record import NodeRecord
from tests.helpers import mnist_config, run_in_process

tensorboard = pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)
from tensorboard.plugins.hparams import plugin_data_pb2


def read(folder):
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


@pytest.fixture(scope="module")
def finished(data_dir, tmp_path_factory):
    config = mnist_config(data_dir, 600, name="tb", nodes=3, rounds=2, algorithm="profe",
                          train={"device": "cpu"})
    results = run_in_process(config, tmp_path_factory.mktemp("tb-run"))
    return config, [NodeRecord.from_dict(r) for r in results]


def test_event_files_read_back_equal_the_node_records_after_a_second_export(finished,
                                                                            tmp_path):
    config, records = finished
    export(records, config.to_dict(), tmp_path)
    export(records, config.to_dict(), tmp_path)  # again: each point once, not twice
    for node in records:
        events = read(tmp_path / f"node-{node.node}")
        for tag in scalars(node.rounds[-1]):
            written = [(e.step, e.value) for e in events.Scalars(tag)]
            expected = [(r.round, scalars(r)[tag]) for r in node.rounds if tag in scalars(r)]
            assert [s for s, _ in written] == [s for s, _ in expected], tag
            assert [v for _, v in written] == pytest.approx([v for _, v in expected],
                                                            rel=1e-6), tag
        tags = events.Tags()["scalars"]
        assert {"f1/global", "accuracy/local", "bytes/sent", "bytes/received"} <= set(tags)
        assert any(t.startswith("train/") for t in tags)
        assert any(t.startswith("bytes_received_from/peer_") for t in tags)
        text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
        assert json.loads(text.strip("`\n")) == json.loads(json.dumps(config.to_dict()))
        hparams = read(tmp_path / f"node-{node.node}" / "hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(
            hparams.PluginTagToContent("hparams")["_hparams_/session_start_info"])
        assert start.session_start_info.hparams["nodes"].number_value == 3
        assert start.session_start_info.hparams["algorithm"].string_value == "profe"


def test_live_export_writes_only_new_rounds(finished, tmp_path):
    config, records = finished
    live = TensorBoardExport(tmp_path, config.to_dict())
    partial = [dataclasses.replace(r, rounds=r.rounds[:1]) for r in records]
    live.update(partial)
    assert [e.step for e in read(tmp_path / "node-0").Scalars("f1/global")] == [0]
    live.update(records)
    live.update(records)  # nothing new: nothing written twice
    live.close(records)
    assert [e.step for e in read(tmp_path / "node-0").Scalars("f1/global")] == [0, 1, 2]


def test_hyperparameters_are_flat_values():
    assert hyperparameters({"nodes": 3, "train": {"lr": 0.1, "betas": [0.9, 0.99]}}) == {
        "nodes": 3, "train.lr": 0.1, "train.betas": "[0.9, 0.99]"}
