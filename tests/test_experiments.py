"""The experiment matrix runner's planning and the report generator, on small fixtures."""

import json
from pathlib import Path

import pytest

from experiments import report, run
from node.config import from_dict
from node.errors import ConfigError
from tests.helpers import REPO


def test_cpu_matrix_expands_into_valid_configs(tmp_path):
    matrix = run.load_matrix(REPO / "experiments" / "matrices" / "cpu.toml")
    cells = run.cells(matrix)
    assert {c.algorithm for c in cells} == {"fedavg", "profe", "fedproto", "fedproc", "fedhp",
                                           "fedpr"}
    assert len({c.key for c in cells}) == len(cells)
    for cell in cells:
        config = from_dict(run.cell_config(matrix, cell, tmp_path))
        assert config.exchange.codec == ("int16" if cell.algorithm == "profe" else "fp32")


def test_paper_matrix_has_both_fedavg_sizes_and_runs_mnist_first(tmp_path):
    matrix = run.load_matrix(REPO / "experiments" / "matrices" / "paper.toml")
    cells = run.cells(matrix)
    assert [c.dataset for c in cells[:12]] == ["mnist"] * 12
    assert [c.algorithm for c in cells[:4]] == ["profe", "fedavg-student", "fedavg", "fedproto"]
    configs = {c.algorithm: from_dict(run.cell_config(matrix, c, tmp_path)) for c in cells[:4]}
    student = configs["fedavg-student"]
    assert student.algorithm == "fedavg" and student.exchange.codec == "fp32"
    assert student.model.teacher_channels == [8, 16]  # ProFe's student CNN
    assert configs["fedavg"].model.teacher_channels == []  # the teacher-size default
    assert configs["profe"].exchange.codec == "int16" and configs["profe"].nodes == 20


def test_a_variant_without_an_algorithm_is_refused(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text((REPO / "experiments" / "matrices" / "paper.toml").read_text()
                    + "\n[variants.broken]\nrounds = 2\n")
    with pytest.raises(ConfigError, match="variants.broken"):
        run.load_matrix(path)


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


def node_record(sent, received, elapsed, f1s, rule="argmax", other=None, share=0.1):
    """A finished node: bytes, time, and per round a global/local F1 under `rule`."""
    def split(f1):
        by_rule = {rule: {"accuracy": f1, "f1": f1, "top_class_share": share}}
        if other:
            by_rule[other[0]] = {"accuracy": other[1], "f1": other[1],
                                 "top_class_share": other[2]}
        return {**by_rule[rule], "rule": rule, "by_rule": by_rule}
    return {"status": "finished", "bytes_sent": sent, "bytes_received": received,
            "elapsed_seconds": elapsed,
            "rounds": [{"global_test": split(f), "local_test": split(f)} for f in f1s]}


def write_cell(root, method, codec, partition, sent, received, elapsed, f1s, **node):
    """A finished cell of 2 nodes; `method` may be a variant name (fedavg-student)."""
    scheme, _, value = partition.partition(":")
    data = {"dataset": "mnist", "partition": scheme, "classes_fraction": 0.6, "alpha": 0.5}
    if scheme == "classes":
        data["classes_fraction"] = float(value)
    cell = root / f"{method}-{codec}-{partition}"
    cell.mkdir()
    algorithm = method.split("-")[0]
    config = {"algorithm": algorithm, "exchange": {"codec": codec}, "data": data,
              "topology": {"kind": "fully_connected"}, "nodes": 2, "seed": 1}
    (cell / "federation.json").write_text(json.dumps({"config": config}))
    (cell / "cell.json").write_text(json.dumps({"algorithm": method}))
    (cell / "summary.json").write_text(json.dumps({"failed_nodes": []}))
    for i in range(2):
        (cell / f"node-{i}.json").write_text(json.dumps(
            node_record(sent[i], received[i], elapsed[i], f1s, **node)))


@pytest.fixture
def fixture_results(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    write_cell(root, "fedavg-student", "fp32", "iid", [1e6, 3e6], [2e6, 2e6], [10, 20],
               [0.1, 0.9])
    write_cell(root, "fedavg", "fp32", "iid", [2e6, 6e6], [4e6, 4e6], [10, 20], [0.1, 0.95])
    write_cell(root, "profe", "int16", "iid", [3e5, 5e5], [4e5, 4e5], [12, 18], [0.1, 0.895],
               other=("prototype", 0.85, 0.12))
    write_cell(root, "fedproto", "fp32", "iid", [1e4, 1e4], [1e4, 1e4], [5, 5], [0.1, 0.99],
               rule="prototype", other=("argmax", 0.5, 0.2))
    write_cell(root, "fedavg-student", "fp32", "classes:0.2", [2e6, 2e6], [2e6, 2e6], [10, 10],
               [0.1, 0.6])
    write_cell(root, "profe", "int16", "classes:0.2", [8e5, 8e5], [8e5, 8e5], [10, 10],
               [0.1, 0.018], other=("prototype", 0.7, 0.15), share=1.0)
    (root / "run-info.json").write_text(json.dumps([{"command": "cmd", "commit": "abc123"}]))
    return root


def test_report_tables_plots_and_targets_from_a_fixture(fixture_results, tmp_path):
    out = tmp_path / "fixture"
    archive = report.archive_results(fixture_results, out)
    text = report.write_report(archive, out).read_text()
    # fedavg-student sent: 1 and 3 MB -> 2.000 ± 1.000; teacher-size 4.000; profe 0.4 MB
    assert "| fedavg-student (fp32) | mnist | 2.000 ± 1.000 | baseline | ↓ 50.0% |" in text
    assert "| profe (int16) | mnist | 0.400 ± 0.100 | ↓ 80.0% | ↓ 90.0% |" in text
    assert "Produced by `cmd` on commit `abc123`." in text
    assert (out / "f1_mnist.png").stat().st_size > 1000
    # bytes per node: profe 0.8 MB = 20% of student-size FedAvg's 4 MB, 10% of 8 MB
    assert ("mnist iid: ProFe moves 20.0% of student-size FedAvg's bytes per node (target ≤ "
            "60%); 10.0% of teacher-size FedAvg's: met") in text
    # F1 on the paper's rule with the other rule beside it
    assert "| profe (int16) | mnist | argmax | 0.895 ± 0.000 | prototype: 0.850 ± 0.000 |" in text
    assert "| fedproto (fp32) | mnist | prototype | 0.990 ± 0.000 | argmax: 0.500 ± 0.000 |" in text
    # -0.5 points on IID: within 1 point, met
    assert "ProFe macro-F1 0.8950 vs student-size FedAvg 0.9000 (-0.5 points; target within 1 " \
           "point): met" in text
    # the collapsed ProFe argmax on 20% classes is flagged, never read as an F1 or a target
    assert "**collapsed** (100% of predictions in one class; F1 0.018)" in text
    assert "target above FedAvg): MISSED (a collapsed predictor)" in text
    assert "mnist classes:0.2: profe macro-F1 0.0180 (argmax) vs ProFe paper" in text
    assert "MISSED (a collapsed predictor)" in text
    # two-sided: FedProto far above its paper's 84.4% is reported as such
    assert "fedproto macro-F1 0.9900 (prototype)" in text
    assert "ABOVE the paper's figure by 14.6 points" in text
    assert "fedpr paper figure 0.946 (FedPR paper: 94.62% average accuracy on MNIST, Dir(0.05))" \
           ": no such cell in these results" in text
    # ProFe IID 0.895 is below its paper's floor of 0.95
    assert "(target ≥ 0.950): MISSED by 5.5 points" in text


def test_int8_cells_join_a_report_and_are_judged_on_bytes_and_f1(fixture_results, tmp_path):
    out = tmp_path / "fixture"
    report.archive_results(fixture_results, out)
    extra = tmp_path / "int8"
    extra.mkdir()
    write_cell(extra, "profe", "int8", "iid", [3e5, 7e5], [2e5, 2e5], [12, 18], [0.1, 0.905])
    (extra / "run-info.json").write_text(json.dumps([{"command": "cmd8", "commit": "def456"}]))
    assert report.main([str(extra), "--into", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "Produced by `cmd` on commit `abc123`." in text
    assert "Produced by `cmd8` on commit `def456`." in text
    assert "| profe (int16) | mnist | 0.400 ± 0.100 |" in text  # the earlier cells stay
    # profe int8: (0.3+0.2 + 0.7+0.2)/2 = 0.7 MB per node = 17.5% of FedAvg's 4 MB
    assert ("mnist iid: ProFe (int8) moves 17.5% of student-size FedAvg's bytes per node "
            "(target ≤ 25%): met") in text
    assert ("mnist iid: ProFe (int8) macro-F1 0.9050 vs student-size FedAvg 0.9000 (+0.5 "
            "points; target within 1 point): met") in text
    assert not (extra / ".archive").exists()
    # adding the same cells again replaces them rather than doubling them
    assert report.main([str(extra), "--into", str(out)]) == 0
    assert (out / "report.md").read_text() == text


def test_the_report_regenerates_byte_for_byte_from_its_archive(fixture_results, tmp_path):
    first = tmp_path / "a" / "fixture"
    archive = report.archive_results(fixture_results, first)
    (first / "notes.md").write_text("Some notes.\n")
    text = report.write_report(archive, first).read_text()
    again = tmp_path / "b" / "fixture"
    again.mkdir(parents=True)
    (again / "notes.md").write_text("Some notes.\n")
    (again / report.ARCHIVE_NAME).write_bytes(archive.read_bytes())
    assert report.main([str(again / report.ARCHIVE_NAME)]) == 0
    assert (again / "report.md").read_text() == text
    assert "Some notes." in text
    # the archive itself is byte-stable
    report.archive_results(fixture_results, tmp_path / "c")
    assert (tmp_path / "c" / report.ARCHIVE_NAME).read_bytes() == archive.read_bytes()


@pytest.mark.parametrize("archive", sorted((REPO / "experiments" / "reports").glob(
    f"*/{report.ARCHIVE_NAME}")), ids=lambda p: p.parent.name)
def test_committed_reports_equal_what_their_archives_regenerate(archive, tmp_path):
    out = tmp_path / archive.parent.name
    out.mkdir()
    notes = archive.parent / "notes.md"
    if notes.is_file():
        (out / "notes.md").write_text(notes.read_text())
    regenerated = report.write_report(archive, out).read_text()
    assert regenerated == (archive.parent / "report.md").read_text()


def test_every_report_folder_has_its_archive():
    for path in (REPO / "experiments" / "reports").glob("*/report.md"):
        assert (path.parent / report.ARCHIVE_NAME).is_file(), path.parent


def test_every_invocation_is_recorded(tmp_path):
    run.record_run(tmp_path, {"command": "a", "commit": "1"})
    run.record_run(tmp_path, {"command": "b", "commit": "2"})
    assert [r["command"] for r in json.loads((tmp_path / "run-info.json").read_text())] == [
        "a", "b"]


def test_report_refuses_an_empty_results_folder(tmp_path):
    with pytest.raises(SystemExit):
        report.archive_results(tmp_path, tmp_path / "out")
    assert report.main([str(tmp_path / "nothing-here")]) == 2


def test_the_loopback_benchmark_moves_each_codecs_payload_and_derives_its_break_even():
    from experiments import bench_zmq

    rows = bench_zmq.measure(elements=20_000, repeats=1)
    assert rows["fp32"]["payload_bytes"] == 80_000 and rows["int16"]["payload_bytes"] == 40_000
    assert all(row["plain_s"] > 0 and row["curve_s"] > 0 for row in rows.values())
    int16, fp32 = rows["int16"], rows["fp32"]
    if int16["codec_s"] > fp32["codec_s"]:  # saved bytes over extra seconds, in MB/s
        assert int16["break_even_mb_per_s"] == pytest.approx(
            40_000 / (int16["codec_s"] - fp32["codec_s"]) / 1e6, abs=0.1)
    else:
        assert int16["break_even_mb_per_s"] is None  # no slower than fp32: any link
