"""The experiment matrix runner's planning and the report generator, on small fixtures."""

import json
from pathlib import Path

import pytest

from experiments import report, run
from node.config import from_dict

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["cpu", "paper"])
def test_shipped_matrices_expand_into_valid_configs(name, tmp_path):
    matrix = run.load_matrix(REPO / "experiments" / "matrices" / f"{name}.toml")
    cells = run.cells(matrix)
    assert {c.algorithm for c in cells} == {"fedavg", "profe", "fedproto", "fedproc", "fedhp",
                                           "fedpr"}
    assert len({c.key for c in cells}) == len(cells)
    for cell in cells:
        config = from_dict(run.cell_config(matrix, cell, tmp_path))
        assert config.exchange.codec == ("int16" if cell.algorithm == "profe" else "fp32")


def test_cell_overrides_set_the_partition_parameters():
    cell = run.Cell("profe", "mnist", "classes:0.2", "ring", "int16", 5, 3)
    data = run.cell_config({"base": {"rounds": 4, "data": {"subset": 100}}}, cell,
                           Path("/r"))["data"]
    assert data == {"subset": 100, "dataset": "mnist", "partition": "classes",
                    "classes_fraction": 0.2}
    cell = run.Cell("fedavg", "mnist", "dirichlet:0.5", "ring", "fp32", 5, 3)
    assert run.cell_config({}, cell, Path("/r"))["data"]["alpha"] == 0.5


def test_a_cell_is_done_only_with_a_summary_and_no_failed_node(tmp_path):
    assert not run.is_done(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"failed_nodes": [1]}))
    assert not run.is_done(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"failed_nodes": []}))
    assert run.is_done(tmp_path)


def write_cell(root, algorithm, codec, partition, sent, received, elapsed, f1s):
    """A finished cell: 2 nodes, per-node bytes/time, and F1 per round (same for both nodes)."""
    scheme, _, value = partition.partition(":")
    data = {"dataset": "mnist", "partition": scheme, "classes_fraction": 0.6, "alpha": 0.5}
    if scheme == "classes":
        data["classes_fraction"] = float(value)
    cell = root / f"{algorithm}-{codec}-{partition}"
    cell.mkdir()
    config = {"algorithm": algorithm, "exchange": {"codec": codec}, "data": data,
              "topology": {"kind": "fully_connected"}, "nodes": 2, "seed": 1}
    (cell / "config.json").write_text(json.dumps({"config": config}))
    (cell / "summary.json").write_text(json.dumps({"failed_nodes": []}))
    for node in range(2):
        rounds = [{"global_test": {"f1": f}} for f in f1s]
        (cell / f"node-{node}.json").write_text(json.dumps({
            "status": "finished", "bytes_sent": sent[node], "bytes_received": received[node],
            "elapsed_seconds": elapsed[node], "rounds": rounds}))


@pytest.fixture
def fixture_results(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    write_cell(root, "fedavg", "fp32", "iid", [1e6, 3e6], [2e6, 2e6], [10, 20], [0.1, 0.9])
    write_cell(root, "profe", "int16", "iid", [3e5, 5e5], [4e5, 4e5], [12, 18], [0.1, 0.89])
    write_cell(root, "fedproto", "fp32", "iid", [1e4, 1e4], [1e4, 1e4], [5, 5], [0.1, 0.5])
    write_cell(root, "fedavg", "int16", "iid", [1, 1], [1, 1], [1, 1], [0.1, 0.1])  # not the baseline
    write_cell(root, "fedavg", "fp32", "classes:0.2", [2e6, 2e6], [2e6, 2e6], [10, 10],
               [0.1, 0.6])
    write_cell(root, "profe", "int16", "classes:0.2", [8e5, 8e5], [8e5, 8e5], [10, 10],
               [0.1, 0.7])
    return root


def test_report_tables_plots_and_targets_from_a_fixture(fixture_results, tmp_path):
    path = report.write_report(fixture_results, tmp_path / "out",
                               [{"command": "cmd", "commit": "abc123"}])
    text = path.read_text()
    # fedavg sent: nodes 1 MB and 3 MB -> 2.000 ± 1.000; profe 0.3 and 0.5 -> 0.400 ± 0.100, -80%
    assert "| fedavg (fp32) | 2.000 ± 1.000 (baseline) |" in text
    assert "| profe (int16) | 0.400 ± 0.100 (↓ 80%) |" in text
    # time: fedavg 15 ± 5 s; profe 15 ± 3 s
    assert "| profe (int16) | 15.000 ± 3.000 (= 0%) |" in text
    assert "Produced by `cmd` on commit `abc123`." in text
    assert (tmp_path / "out" / "f1_mnist.png").stat().st_size > 1000
    # bytes per node (sent + received): fedavg 4 MB, profe 0.8 MB -> 80% fewer: met
    assert "mnist iid: profe moves 80.0% fewer bytes per node than FedAvg" in text
    assert "mnist iid: fedproto moves 99.5% fewer" in text
    # F1: profe 0.89 vs 0.90 on IID (-1 point, met); 0.70 vs 0.60 on classes (met)
    assert "ProFe macro-F1 0.8900 vs FedAvg 0.9000 (-1.0 points; target within 2 points" in text
    assert "(+10.0 points; target above FedAvg): met" in text
    assert "mnist iid: fedproto macro-F1 0.5000 vs paper figure 0.84" in text
    assert text.count("MISSED") == 2  # profe 0.89 and fedproto 0.50 fall short of their papers


def test_every_invocation_is_recorded(tmp_path):
    run.record_run(tmp_path, {"command": "a", "commit": "1"})
    run.record_run(tmp_path, {"command": "b", "commit": "2"})
    assert [r["command"] for r in json.loads((tmp_path / "run-info.json").read_text())] == [
        "a", "b"]


def test_report_refuses_an_empty_results_folder(tmp_path):
    with pytest.raises(SystemExit):
        report.write_report(tmp_path, tmp_path / "out")
