"""The experiment matrix runner's planning and the report generator, on small fixtures."""

import json
import subprocess
import sys
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


def node_record(sent, received, elapsed, f1s, rule="argmax", other=None, share=0.1,
                local=None, cpu=None):
    """A finished node: bytes, time, and per round a global/local F1 under `rule`; `share` is
    the top-class share (one for every round, or a list per round), `local` the local-test F1s
    when they differ from the global ones, `cpu` the cumulative CPU seconds per round."""
    shares = share if isinstance(share, list) else [share] * len(f1s)
    cpus = cpu or [0.0] * len(f1s)

    def split(f1, top):
        by_rule = {rule: {"accuracy": f1, "f1": f1, "top_class_share": top}}
        if other:
            by_rule[other[0]] = {"accuracy": other[1], "f1": other[1],
                                 "top_class_share": other[2]}
        return {**by_rule[rule], "rule": rule, "by_rule": by_rule}
    return {"status": "finished", "bytes_sent": sent, "bytes_received": received,
            "elapsed_seconds": elapsed,
            "rounds": [{"round": i, "global_test": split(f, top), "local_test": split(lf, top),
                        "cpu_seconds": c}
                       for i, (f, lf, top, c) in enumerate(zip(f1s, local or f1s, shares, cpus))]}


def write_cell(root, method, codec, partition, sent, received, elapsed, f1s, dataset="mnist",
               seed=1, nodes=2, node_f1s=None, backend="local", **node):
    """A finished cell of len(sent) node files; `method` may be a variant name (fedavg-student),
    `nodes` is the size its config states, `node_f1s` per node F1s in place of `f1s`,
    `backend` where it ran."""
    scheme, _, value = partition.partition(":")
    data = {"dataset": dataset, "partition": scheme, "classes_fraction": 0.6, "alpha": 0.5}
    if scheme == "classes":
        data["classes_fraction"] = float(value)
    if scheme == "dirichlet":
        data["alpha"] = float(value)
    cell = root / f"{dataset}-{method}-{codec}-{partition}-s{seed}"
    cell.mkdir()
    algorithm = method.split("-")[0]
    config = {"algorithm": algorithm, "exchange": {"codec": codec}, "data": data,
              "topology": {"kind": "fully_connected"}, "nodes": nodes, "seed": seed,
              "deploy": {"backend": backend}}
    (cell / "federation.json").write_text(json.dumps({"config": config}))
    (cell / "cell.json").write_text(json.dumps({"algorithm": method}))
    (cell / "summary.json").write_text(json.dumps({"failed_nodes": []}))
    for i in range(len(sent)):
        (cell / f"node-{i}.json").write_text(json.dumps(node_record(
            sent[i], received[i], elapsed[i], node_f1s[i] if node_f1s else f1s, **node)))


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
    # fedavg-student sent: 1 and 3 MB -> 2.000, nodes ± 1.000; teacher-size 4.000; profe 0.4 MB
    assert ("| fedavg-student (fp32) | mnist | 2.000 (1 seed; nodes ± 1.000) | baseline | "
            "↓ 50.0% |") in text
    assert ("| profe (int16) | mnist | 0.400 (1 seed; nodes ± 0.100) | ↓ 80.0% | ↓ 90.0% |"
            in text)
    assert "Produced by `cmd` on commit `abc123`." in text
    assert "6 cells in 6 groups that differ only by seed (6 with 1 seed)" in text
    assert (out / "f1_mnist.png").stat().st_size > 1000
    iid = "mnist iid, fully_connected, 2 nodes"
    classes = "mnist classes:0.2, fully_connected, 2 nodes"
    # bytes per node: profe 0.8 MB = 20% of student-size FedAvg's 4 MB, 10% of 8 MB
    assert (f"{iid}: ProFe moves 20.0% of student-size FedAvg's bytes per node (target ≤ "
            "60%); 10.0% of teacher-size FedAvg's (1 seed vs 1 seed): met") in text
    # F1 on the paper's rule with the other rule beside it; one run says "1 seed", no spread
    assert ("| profe (int16) | mnist | argmax | 0.895 (1 seed; nodes ± 0.000) | prototype: "
            "0.850 (1 seed; nodes ± 0.000) |") in text
    assert ("| fedproto (fp32) | mnist | prototype | 0.990 (1 seed; nodes ± 0.000) | argmax: "
            "0.500 (1 seed; nodes ± 0.000) |") in text
    # -0.5 points on IID: within 1 point, met; one seed each: no noise test
    assert (f"{iid}: ProFe macro-F1 0.8950 vs student-size FedAvg 0.9000 (-0.5 points, not "
            "testable with one seed; 1 seed vs 1 seed). Targets: within 1 point of FedAvg: yes; "
            "no collapsed seed (ProFe 0 of 1 seed, FedAvg 0 of 1 seed): yes. met") in text
    assert (f"| {iid} | profe (int16) | 0.895 (1 seed) | 0.900 (1 seed) | -0.5 | not testable "
            "with one seed |") in text
    # the collapsed ProFe argmax on 20% classes is flagged, never read as an F1 or a target
    assert "**collapsed** (100% of predictions in one class; F1 0.018; 1 seed)" in text
    assert ("Targets: above FedAvg: no; no collapsed seed (ProFe 1 of 1 seed, FedAvg 0 of 1 "
            "seed): no. MISSED") in text
    assert (f"| {classes} | profe (int16) | 0.018 (1 seed); collapsed in 1 of 1 seed | "
            "0.600 (1 seed) | -58.2 | not testable with one seed |") in text
    # round 1: the argmax F1 and top-class share where the collapse starts
    assert ("| profe (int16) | mnist | 0.018 | 1.000 | seed 1 (100%) of 1 | 1.000 | 1 of 1 seed |"
            in text)
    assert ("| fedproto (fp32) | mnist | 0.500 | 0.200 | none of 1 seed | 0.100 | 0 of 1 seed |"
            in text)
    # Table III names the clock; processes measure wall time
    assert ("| profe (int16) | mnist | 15.000 (1 seed; nodes ± 3.000) | wall | = 0.0% | = 0.0% |"
            in text)
    # each paper's headline: a floor missed, a collapse missed, a figure met, one far above it
    headline = text[text.index("## Each paper's headline setting"):]
    assert ("| profe | mnist | iid | macro-F1, global test | ≥ 0.9500 | ProFe paper, IV-A: above "
            "95% macro-F1 on MNIST IID | 0.8950 (1 seed) | int16, argmax, fully_connected, 2 "
            "nodes | missed by 5.5 points |") in headline
    assert "| 0.0180 (1 seed) | int16, argmax, fully_connected, 2 nodes | missed (collapsed in " \
           "1 of 1 seed) |" in headline
    assert "| fedavg-student | mnist | iid | macro-F1, global test | 0.9500 |" in headline
    assert "| 0.9000 (1 seed) | fp32, argmax, fully_connected, 2 nodes | met |" in headline
    # two-sided: FedProto far above its 84.4% accuracy (FedHP's table) is not a reproduction
    assert ("| 0.9900 (1 seed) | fp32, prototype, fully_connected, 2 nodes | missed: 14.6 points "
            "above the figure") in headline
    assert ("| fedpr | mnist | dirichlet:0.05 | accuracy, global test | 0.9462 | FedPR paper: "
            "94.62% average accuracy on MNIST, Dir(0.05) | - | - | not run |") in headline
    assert ("| fedpr | fashion_mnist | dirichlet:0.05 | accuracy, global test | 0.8605 |"
            in headline)
    assert ("| fedproto | mnist | classes:0.3 | accuracy, local test | paper figure not in the "
            "stored text |") in headline


def test_round_one_names_the_seeds_over_the_collapse_threshold(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    for seed, first in ((1, 0.9), (2, 0.3), (3, 0.5)):
        write_cell(root, "profe", "int16", "classes:0.2", [1, 1], [1, 1], [1, 1], [0.1, 0.5, 0.9],
                   seed=seed, share=[1.0, first, 0.12])
    out = tmp_path / "r"
    text = report.write_report(report.archive_results(root, out), out).read_text()
    # round-1 shares 0.9, 0.3, 0.5: seeds 1 and 3 reach 50%; none ends collapsed
    assert ("| profe (int16) | mnist | 0.500 ± 0.000 | 0.567 ± 0.306 | seeds 1 (90%), 3 (50%) of "
            "3 | 0.120 ± 0.000 | 0 of 3 seeds |") in text


def test_table_three_compares_only_times_of_the_same_clock(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    write_cell(root, "fedavg-student", "fp32", "iid", [1, 1], [1, 1], [10, 10], [0.1, 0.9])
    write_cell(root, "fedavg", "fp32", "iid", [1, 1], [1, 1], [20, 20], [0.1, 0.9],
               backend="sim")
    write_cell(root, "profe", "int16", "iid", [1, 1], [1, 1], [30, 30], [0.1, 0.9],
               backend="sim")
    out = tmp_path / "r"
    text = report.write_report(report.archive_results(root, out), out).read_text()
    # sim ProFe against sim teacher-size FedAvg: 30 / 20 = +50%; against wall-clock FedAvg: -
    assert "| profe (int16) | mnist | 30.000 (1 seed; nodes ± 0.000) | virtual | - | ↑ 50.0% |" \
        in text
    assert ("| fedavg-student (fp32) | mnist | 10.000 (1 seed; nodes ± 0.000) | wall | baseline "
            "| - |") in text


def test_headroom_judges_profe_against_its_twin_with_cpu_per_round(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    # 1/4 student: ProFe 0.90/0.92/0.91 (mean 0.91, std 0.01) vs twin 0.80/0.81/0.79 (0.80,
    # 0.01): +11.0 points > 2 x 0.01, above beyond noise; 1/8: 0.5/0.6/0.7 vs 0.55: within
    for seed, (ours, twin) in enumerate(((0.90, 0.80), (0.92, 0.81), (0.91, 0.79)), start=1):
        write_cell(root, "profe-quarter", "int16", "classes:0.2", [1, 1], [1, 1], [1, 1],
                   [0.1, ours], seed=seed, backend="sim", cpu=[1.0, 3.0 + seed])
        write_cell(root, "profe-quarter-no-distillation", "int16", "classes:0.2", [1, 1],
                   [1, 1], [1, 1], [0.1, twin], seed=seed, backend="sim", cpu=[1.0, 2.0])
    for seed, (ours, twin) in enumerate(((0.5, 0.55), (0.6, 0.55), (0.7, 0.55)), start=1):
        write_cell(root, "profe-eighth", "int16", "classes:0.2", [1, 1], [1, 1], [1, 1],
                   [0.1, ours], seed=seed)
        write_cell(root, "profe-eighth-no-distillation", "int16", "classes:0.2", [1, 1], [1, 1],
                   [1, 1], [0.1, twin], seed=seed)
    write_cell(root, "fedavg-quarter", "fp32", "classes:0.2", [1, 1], [1, 1], [1, 1], [0.1, 0.7],
               backend="sim", cpu=[0.5, 1.0])
    out = tmp_path / "r"
    text = report.write_report(report.archive_results(root, out), out).read_text()
    # CPU per round: ProFe seeds (4-1), (5-1), (6-1) -> 4.00 ± 1.00; twin 1.00; FedAvg 0.50
    assert ("| 1/4 (4, 8) | mnist | classes:0.2 | 0.910 ± 0.010 (3 seeds) | 0.800 ± 0.010 (3 "
            "seeds) | +11.0 | above, beyond noise | 3 of 3 | 0.700 (1 seed) | 4.00 ± 1.00 (sim) | "
            "1.00 ± 0.00 (sim) | 0.50 (sim) |") in text
    assert ("| 1/8 (2, 4) | mnist | classes:0.2 | 0.600 ± 0.100 (3 seeds) | 0.550 ± 0.000 (3 "
            "seeds) | +5.0 | within noise | 2 of 3 | - | - | - | - |") in text
    assert ("- Student 1/4: ProFe against its no-distillation twin: above, beyond noise on mnist "
            "classes:0.2.") in text
    assert "- Student 1/8: ProFe against its no-distillation twin: within noise on mnist" in text


def test_headroom_rows_name_the_widths_their_matrix_runs(tmp_path):
    from node.architectures import STUDENT_CNN_CHANNELS
    configs = {}
    for name in ("paper-seeds-baseline.toml", "headroom.toml", "teacher-seeds.toml"):
        matrix = run.load_matrix(REPO / "experiments" / "matrices" / name)
        configs |= {c.algorithm: from_dict(run.cell_config(matrix, c, tmp_path))
                    for c in run.cells(matrix)}
    for row in report.HEADROOM_ROWS:
        if row.profe == "profe":
            continue  # the default ProFe's cells come from the `paper` matrices
        unscreened = "unscreened" in row.profe
        for variant in (row.profe, row.twin):
            settings = configs[variant].aggregation
            assert (settings.validation == 0.0 and settings.norm_bound == 0.0
                    and settings.distance == 0.0) == unscreened, variant
            channels = configs[variant].model.student_channels or STUDENT_CNN_CHANNELS
            assert tuple(channels) == row.channels, variant
        assert configs[row.twin].methods["profe"].alpha_s == 0.0
        assert configs[row.profe].methods["profe"].alpha_s > 0.0
        assert tuple(configs[row.fedavg].model.teacher_channels) == row.channels


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
    # the earlier cells stay
    assert "| profe (int16) | mnist | 0.400 (1 seed; nodes ± 0.100) |" in text
    # profe int8: (0.3+0.2 + 0.7+0.2)/2 = 0.7 MB per node = 17.5% of FedAvg's 4 MB
    assert ("mnist iid, fully_connected, 2 nodes: ProFe (int8) moves 17.5% of student-size "
            "FedAvg's bytes per node (target ≤ 25%; 1 seed vs 1 seed): met") in text
    assert ("mnist iid, fully_connected, 2 nodes: ProFe (int8) macro-F1 0.9050 vs student-size "
            "FedAvg 0.9000 (+0.5 points, not testable with one seed; 1 seed vs 1 seed). "
            "Targets: within 1 point of FedAvg: yes;") in text
    assert not (extra / ".archive").exists()
    # adding the same cells again replaces them rather than doubling them
    assert report.main([str(extra), "--into", str(out)]) == 0
    assert (out / "report.md").read_text() == text


def test_seed_statistics_and_the_noise_rule_by_hand():
    stats = report.seed_stats([[0.89, 0.91], [0.92, 0.92], [0.94, 0.94]])
    assert stats.seeds == 3
    assert stats.mean == pytest.approx(0.92)  # run means 0.90, 0.92, 0.94
    assert stats.std == pytest.approx(0.02)  # statistics.stdev across the 3 runs
    assert stats.nodes_std == pytest.approx(0.01 / 3)  # node spreads 0.01, 0, 0
    one = report.seed_stats([[0.5, 0.7]])
    assert (one.seeds, one.mean, one.std) == (1, pytest.approx(0.6), 0.0)
    assert report.seed_text(one) == "0.600 (1 seed; nodes ± 0.100)"
    assert report.seed_text(stats) == "0.920 ± 0.020 (3 seeds; nodes ± 0.003)"
    # within noise: |difference| <= 2 x the larger std (binary-exact numbers: the edge counts)
    a = report.SeedStats(seeds=3, mean=0.5, std=0.125, nodes_std=0.0)
    b = report.SeedStats(seeds=2, mean=0.75, std=0.0, nodes_std=0.0)
    assert report.noise_verdict(a, b) == "within noise"
    assert report.noise_verdict(a, report.SeedStats(3, 0.875, 0.0, 0.0)) == "beyond noise"
    assert report.noise_verdict(a, one) == "not testable with one seed"


@pytest.fixture
def three_seeds(tmp_path):
    """MNIST IID, 3 seeds of student-size FedAvg, ProFe and teacher-size FedAvg."""
    root = tmp_path / "results"
    root.mkdir()
    for seed, student, profe in ((1, 0.90, 0.926), (2, 0.92, 0.946), (3, 0.94, 0.906)):
        write_cell(root, "fedavg-student", "fp32", "iid", [4e6, 4e6], [4e6, 4e6], [10, 10],
                   [0.1, student], seed=seed)
        write_cell(root, "profe", "int16", "iid", [seed * 1e5] * 2, [seed * 1e5] * 2, [10, 10],
                   [], seed=seed, node_f1s=[[0.1, profe - 0.01], [0.1, profe + 0.01]])
        write_cell(root, "fedavg", "fp32", "iid", [8e6, 8e6], [8e6, 8e6], [10, 10], [0.1, 0.99],
                   seed=seed)
    return root


def test_three_seeds_give_the_spread_across_seeds_and_the_noise_verdict(three_seeds, tmp_path):
    out = tmp_path / "seeds"
    text = report.write_report(report.archive_results(three_seeds, out), out).read_text()
    assert "9 cells in 3 groups that differ only by seed (3 with 3 seeds)" in text
    # ProFe run means 0.926, 0.946, 0.906: mean 0.926, stdev 0.020; each run's nodes ± 0.010
    assert "| profe (int16) | mnist | argmax | 0.926 ± 0.020 (3 seeds; nodes ± 0.010) |" in text
    assert "| fedavg-student (fp32) | mnist | argmax | 0.920 ± 0.020 (3 seeds; nodes ± 0.000) |" \
        in text
    # bytes: run means 0.1, 0.2, 0.3 MB sent per node -> 0.200 ± 0.100, 5% of FedAvg's 4 MB
    assert ("| profe (int16) | mnist | 0.200 ± 0.100 (3 seeds; nodes ± 0.000) | ↓ 95.0% |"
            in text)
    # +0.6 points <= 2 x 0.020: within noise; teacher-size +7.0 > 2 x 0.020: beyond noise
    setting = "mnist iid, fully_connected, 2 nodes"
    assert (f"| {setting} | profe (int16) | 0.926 ± 0.020 (3 seeds) | 0.920 ± 0.020 (3 seeds) | "
            "+0.6 | within noise |") in text
    assert (f"| {setting} | fedavg (fp32) | 0.990 ± 0.000 (3 seeds) | 0.920 ± 0.020 (3 seeds) | "
            "+7.0 | beyond noise |") in text
    assert (f"{setting}: ProFe macro-F1 0.9260 vs student-size FedAvg 0.9200 (+0.6 points, "
            "within noise; 3 seeds vs 3 seeds). Targets: within 1 point of FedAvg: yes;") in text
    assert "(1 seed" not in text and "of 1 seed" not in text


@pytest.mark.parametrize("collapsed", [True, False])
def test_a_collapsed_seed_fails_the_mnist_classes_target(tmp_path, collapsed):
    root = tmp_path / "results"
    root.mkdir()
    for seed in (1, 2, 3):
        final = 1.0 if collapsed and seed == 3 else 0.1
        write_cell(root, "fedavg-student", "fp32", "classes:0.2", [4e6, 4e6], [4e6, 4e6],
                   [10, 10], [0.1, 0.3, 0.80], seed=seed, nodes=20)
        write_cell(root, "profe", "int16", "classes:0.2", [2e6, 2e6], [2e6, 2e6], [10, 10],
                   [0.1, 0.02, 0.85], seed=seed, nodes=20, share=[0.1, 1.0, final])
    out = tmp_path / "classes"
    text = report.write_report(report.archive_results(root, out), out).read_text()
    verdict = "no. MISSED" if collapsed else "yes. met"
    assert ("mnist classes:0.2, fully_connected, 20 nodes: ProFe macro-F1 0.8500 vs student-size "
            "FedAvg 0.8000 (+5.0 points, beyond noise; 3 seeds vs 3 seeds). Targets: mean ≥ "
            "0.80: yes; above FedAvg: yes; no collapsed seed (ProFe "
            f"{1 if collapsed else 0} of 3 seeds, FedAvg 0 of 3 seeds): {verdict}") in text
    # round 1 shows the collapse in every seed; the final share in one seed only
    final_share = "0.400 ± 0.520" if collapsed else "0.100 ± 0.000"
    assert (f"| profe (int16) | mnist | 0.020 ± 0.000 | 1.000 ± 0.000 | seeds 1 (100%), 2 "
            f"(100%), 3 (100%) of 3 | {final_share} | {1 if collapsed else 0} of 3 seeds |") in text
    if collapsed:
        assert "0.850 ± 0.000 (3 seeds; nodes ± 0.000); **collapsed in 1 of 3 seeds**" in text
        assert "| missed (collapsed in 1 of 3 seeds) |" in text
    else:
        assert ("| profe | mnist | classes:0.2 | macro-F1, global test | ≥ 0.8000 | ProFe paper, "
                "IV-A: 80% macro-F1 on MNIST with 20% of the classes per node | 0.8500 ± "
                "0.0000 (3 seeds) | int16, argmax, fully_connected, 20 nodes | met |") in text


def test_the_fedproto_headline_reads_local_accuracy_and_has_no_figure(fixture_results, tmp_path):
    write_cell(fixture_results, "fedproto", "fp32", "classes:0.3", [1e4, 1e4], [1e4, 1e4],
               [5, 5], [0.1, 0.3], local=[0.5, 0.97], rule="prototype")
    out = tmp_path / "fixture"
    text = report.write_report(report.archive_results(fixture_results, out), out).read_text()
    assert ("| fedproto | mnist | classes:0.3 | accuracy, local test | paper figure not in the "
            "stored text | FedProto paper, IV: 20 clients, about 3 of 10 classes each, local "
            "test accuracy (its MNIST table is not in our copy of the text) | 0.9700 (1 seed) | fp32, prototype, fully_connected, 2 nodes | no figure |"
            ) in text
    assert report.profe_target(("fashion_mnist", "classes:0.2", "ring", 20)).versus == "at least"


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


@pytest.mark.parametrize("report, matrix", [("profe-ablation", "profe-ablation"),
                                             ("scale/few-images", "few-images"),
                                             ("fedpr-ablation", "fedpr-ablation")])
def test_the_committed_ablation_table_is_what_its_results_regenerate(tmp_path, report, matrix):
    from experiments import ablation
    folder = REPO / "experiments" / "reports" / report
    matrix = REPO / "experiments" / "matrices" / f"{matrix}.toml"
    out = tmp_path / "ablation"
    out.mkdir()
    (out / "results.json").write_bytes((folder / "results.json").read_bytes())
    assert ablation.main([str(matrix), "--out", str(out), "--report-only"]) == 0
    assert (out / "ablation.md").read_text() == (folder / "ablation.md").read_text()


def test_an_ablation_summary_averages_the_nodes_round_by_round():
    from experiments import ablation

    def node(f1s, shares):
        return {"rounds": [{"global_test": {"f1": 0.0, "top_class_share": 0.0, "by_rule": {
            "argmax": {"f1": f, "top_class_share": s}}}} for f, s in zip(f1s, shares)]}

    summary = ablation.summarize([node([0.1, 0.5], [1.0, 0.2]), node([0.3, 0.7], [0.6, 0.4])])
    assert summary["rounds"] == [[0.2, 0.8], [0.6, 0.3]]
    assert (summary["final_f1"], summary["final_share"]) == (0.6, 0.3)
    assert ablation._cell(0.2, 0.8) == "**0.200 / 0.80**"


def test_an_ablation_averages_its_final_figures_over_settings_that_differ_by_seed():
    from experiments import ablation

    matrix = {"final": ["rule:argmax", "train:loss"],
              "settings": [{"name": "s1"}, {"name": "s2"}, {"name": "s3"}],
              "variants": [{"name": "a"}, {"name": "b"}]}
    results = {f"s{i}/a": {"final_by_rule": {"argmax": f1}, "final_train": {"loss": loss}}
               for i, (f1, loss) in enumerate(((0.1, 1.0), (0.2, float("nan")), (0.6, 3.0)),
                                              start=1)}
    results["s1/b"] = {"final_by_rule": {"argmax": 0.5}, "final_train": {}}
    lines = ablation.mean_over_settings(matrix, results)
    # argmax 0.1, 0.2, 0.6: mean 0.3, stdev sqrt(((-.2)^2 + (-.1)^2 + .3^2) / 2) = 0.265
    assert "| a | 0.300 ± 0.265 | 2.000 ± 1.414 (1 of 3 not finite) |" in lines
    assert "| b | 0.500 | – |" in lines  # not recorded
    assert lines[0] == "## Mean over the 3 settings"


def assert_regenerated(module, name: str, files: tuple[str, ...], tmp_path,
                       data: str = "results.json", more_data: tuple[str, ...] = ()) -> None:
    """`module --report-only` rebuilds the committed `files` of reports/<name> byte for
    byte from the committed `data` (and `more_data`) alone."""
    import shutil

    folder = REPO / "experiments" / "reports" / name
    out = tmp_path / name
    out.mkdir()
    for path in (data, *more_data):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / path, out / path)
    assert module.main(["--out", str(out), "--report-only"]) == 0
    for file in files:
        assert (out / file).read_bytes() == (folder / file).read_bytes(), file


def test_the_committed_robustness_report_is_what_its_results_regenerate(tmp_path):
    from experiments import robustness
    assert_regenerated(robustness, "robustness", ("robustness.md",), tmp_path,
                       data="results.jsonl", more_data=("defence-cost.json",))


def test_the_nodes_default_defence_is_the_one_the_robustness_report_chooses():
    # the report's rule picks the default; node.settings must hold exactly its settings
    from experiments import robustness
    from node.settings import AggregationConfig
    folder = REPO / "experiments" / "reports" / "robustness"
    results = robustness.read_results(folder / "results.jsonl")
    costs = json.loads((folder / "defence-cost.json").read_text())
    cells = [robustness.Cell.parse(key) for key in results]
    chain = robustness.default_chain(results, cells, robustness.cpu_against_mean(costs))
    assert chain == ["guarded_wide", "guarded_own3_shared"]
    defaults = AggregationConfig()
    assert {key: getattr(defaults, key) for key in robustness.DEFENCES[chain[-1]]} == \
        robustness.DEFENCES[chain[-1]]


def test_the_committed_prototype_bounds_report_is_what_its_results_regenerate(tmp_path):
    from experiments import prototype_bounds
    assert_regenerated(prototype_bounds, "prototype-bounds", ("prototype-bounds.md",),
                       tmp_path, data="results.jsonl")


def test_robustness_measures_each_rule_against_its_withheld_run_and_mean_clean():
    from experiments import robustness
    key = "dirichlet/1x/ring/{}/{}/s1"
    results = {key.format(rule, attack): {"key": key.format(rule, attack), "f1": f1}
               for rule, attack, f1 in [
                   ("mean", "none", [0.5, 0.8, 0.8, 0.8]),
                   ("mean", "withheld", [0.1, 0.7, 0.7, 0.7]),
                   ("mean", "sign_flip", [0.1, 0.3, 0.4, 0.5]),
                   ("reputation", "none", [0.5, 0.79, 0.79, 0.79]),
                   ("reputation", "withheld", [0.1, 0.7, 0.7, 0.7]),
                   ("reputation", "sign_flip", [0.1, 0.69, 0.69, 0.69])]}
    results[key.format("mean", "ipm")] = {"key": key.format("mean", "ipm"),
                                         "crashed": "ValueError: x"}
    cell = robustness.Cell.parse(key.format("reputation", "sign_flip"))
    # node 0 is the attacker: the honest mean leaves it out; the clean run counts everyone
    assert robustness.honest_f1(results, cell) == pytest.approx(0.69)
    assert robustness.gap(results, cell) == pytest.approx(-0.01)
    assert robustness.clean_cost(results, cell) == pytest.approx(0.0075)  # all 4 nodes
    found = robustness.verdicts(results, [robustness.Cell.parse(k) for k in results])
    assert found["mean"]["worst_gap"] == (pytest.approx(-0.3), "sign_flip on ring")
    assert found["mean"]["crashed"] == 1
    assert robustness.worst_loss(found["reputation"]) == pytest.approx(0.01)
    assert robustness.chosen_default(found) == "reputation"  # mean crashed once
    table = robustness.render(results, "cmd")
    assert "a node crashed (1 of 1 seeds)" in table
    assert "Chosen: **reputation**; it meets both targets" in table
    # group by group: the gap per attack and the clean cost, means over seeds
    groups = robustness.default_groups(results, [robustness.Cell.parse(k) for k in results],
                                       "mean")
    assert groups == {("dirichlet", "ring", True): {"none": 0.0, "sign_flip": pytest.approx(-0.3)}}


def test_a_paper_cell_is_profes_paper_setting_with_its_attacker_among_the_class_mates():
    from experiments import robustness
    cell = robustness.Cell.parse("paper/2x/fully-connected/guarded_mates/mates_shift/s1/noplan")
    config = cell.config("/data")
    assert (config.nodes, config.rounds, config.data.subset) == (20, 10, 0)
    assert (config.data.partition, config.data.classes_fraction) == ("classes", 0.2)
    assert config.aggregation.held_mates and not config.aggregation.use_plan
    assert cell.attacker_ids == (4, 9)
    assert robustness.Cell.parse("paper/1x/ring/mean/none/s1").attacker_ids == ()
    small = robustness.Cell.parse("classes20/1x/ring/mean/sign_flip/s1")
    assert (small.config("/data").nodes, small.attacker_ids) == (10, (0,))
    # the honest mean leaves node 4 out, not node 0
    results = {cell.key: {"key": cell.key, "f1": [0.5] * 4 + [0.0] + [0.5] * 4
                          + [0.0] + [0.5] * 10}}
    assert robustness.honest_f1(results, cell) == pytest.approx(0.5)


def test_two_near_attackers_are_nodes_0_and_1_in_sections_of_their_own(tmp_path):
    from experiments import robustness
    key = "classes20/2x-near/fully-connected/{}/label_flip/s1/noplan"
    near = robustness.Cell.parse(key.format("mean"))
    assert (near.key, near.attackers, near.near, near.plan) == (key.format("mean"), 2, True,
                                                                False)
    assert near.attacker_ids == (0, 1)
    apart = robustness.Cell.parse(key.replace("-near", "").format("mean"))
    assert (apart.near, apart.attacker_ids) == (False, (0, 5))
    # the honest mean leaves out the cell's own attackers
    results = {near.key: {"key": near.key, "f1": [0.0, 0.0] + [0.5] * 8},
               apart.key: {"key": apart.key, "f1": [0.0] + [0.5] * 4 + [0.0] + [0.5] * 4}}
    assert robustness.honest_f1(results, near) == robustness.honest_f1(results, apart) == 0.5
    report = robustness.render(results, "cmd")
    assert "## 2 colluding attackers (nodes 0 and 1), classes20, fully-connected, no plan" in (
        report)
    assert "## 2 colluding attackers, classes20, fully-connected, no plan" in report
    with pytest.raises(SystemExit, match="near placement is for two attackers among ten"):
        robustness.main(["--splits", "paper", "--attackers", "2", "--near", "--out",
                         str(tmp_path), "--attacks", "sign_flip", "--rules", "mean"])


def test_two_colluders_worst_gaps_are_per_rule_and_group_with_the_defaults_beside():
    from experiments import robustness
    key = "classes20/2x{}/fully-connected/{}/{}/s{}"

    def honest(value):  # the attackers (nodes 0 and 5) at 0
        return [0.0] + [value] * 4 + [0.0] + [value] * 4

    def near(value):  # nodes 0 and 1
        return [0.0, 0.0] + [value] * 8

    results = {}
    for seed, (withheld, flip) in enumerate([(0.50, 0.40), (0.60, 0.56)], 1):
        for rule, drop in (("guarded_wide", 0.0), ("mean", 0.05)):
            results[key.format("", rule, "withheld", seed)] = {"f1": honest(withheld)}
            results[key.format("", rule, "label_flip", seed)] = {"f1": honest(flip - drop)}
    results[key.format("-near", "mean", "withheld", 1)] = {"f1": near(0.5)}
    results[key.format("-near", "mean", "sign_flip", 1)] = {"f1": near(0.49)}
    results[key.format("", "mean", "none", 1)] = {"f1": honest(0.7)}  # not a gap
    cells = [robustness.Cell.parse(k) for k in results]
    found = robustness.colluder_gaps(results, cells)
    flip = ("classes20", False, "fully-connected", True, "label_flip")
    sign = ("classes20", True, "fully-connected", True, "sign_flip")
    assert found["guarded_wide"] == {flip: pytest.approx((-0.10 - 0.04) / 2)}
    assert found["mean"] == {flip: pytest.approx((-0.15 - 0.09) / 2),
                             sign: pytest.approx(-0.01)}
    lines = robustness._colluders_summary(results, cells, "guarded_wide")
    assert ("| mean | 2 | 1 | -12.0 | label_flip on classes20, fully-connected | -7.0 |"
            in lines)
    assert ("| guarded_wide | 1 | 0 | -7.0 | label_flip on classes20, fully-connected | -7.0 |"
            in lines)
    assert robustness._colluders_summary({}, [], "guarded_wide") == []


def test_the_default_is_chosen_among_the_candidates_on_the_groups_all_of_them_measured():
    from experiments import robustness
    key = "classes20/1x/ring/{}/{}/s1{}"
    rows = [("validated", "none", "", [0.5, 0.8, 0.8, 0.8]),
            ("validated", "withheld", "", [0.1, 0.7, 0.7, 0.7]),
            ("validated", "class_shift", "", [0.9, 0.2, 0.2, 0.2]),
            ("validated", "sign_flip", "/noplan", [0.1, 0.1, 0.1, 0.1]),  # no twin
            ("guarded", "none", "", [0.5, 0.78, 0.78, 0.78]),
            ("guarded", "withheld", "", [0.1, 0.7, 0.7, 0.7]),
            ("guarded", "class_shift", "", [0.9, 0.68, 0.68, 0.68]),
            ("mean", "none", "", [0.5, 0.8, 0.8, 0.8])]
    results = {key.format(rule, attack, plan): {"key": key.format(rule, attack, plan),
                                                "f1": f1}
               for rule, attack, plan, f1 in rows}
    cells = [robustness.Cell.parse(k) for k in results]
    assert not robustness.Cell.parse(key.format("validated", "sign_flip", "/noplan")).plan
    found = robustness.shared_verdicts(results, cells)
    # class_shift: validated 0.2 - 0.7 = -0.5, guarded 0.68 - 0.7 = -0.02; clean cost
    # against mean (all four nodes: 0.725): 0 and 0.015. The no-plan sign flip has no
    # guarded twin and is left out.
    assert found["validated"]["worst_gap"] == (pytest.approx(-0.5), "class_shift on classes20, ring")
    assert found["guarded"]["worst_gap"][0] == pytest.approx(-0.02)
    assert found["guarded"]["worst_cost"][0] == pytest.approx(0.015)
    assert found["guarded"]["groups"] == 2
    # over its own groups the no-plan sign flip counts for validated: 0.1 - 0 (no withheld
    # twin there: not measured), so its own worst stays the class shift
    assert found["validated"]["own_groups"] == 2
    assert found["guarded"]["own_gap"] == found["guarded"]["worst_gap"]
    assert robustness.chosen_default(found) == "guarded"
    assert "Chosen: **guarded**; it does not meet both targets" in robustness.render(
        results, "cmd")


def test_a_rule_replaces_the_default_only_with_a_smaller_worst_loss_and_cpu_in_budget():
    from experiments import robustness

    paper = ("gap", "paper", "fully-connected", True, "label_flip")
    groups = frozenset({("gap", "classes20", "ring", True, "label_flip"),
                        ("cost", "classes20", "ring", True, ""), paper})

    def found(gap, cost, crashed=0, keys=groups):
        return {"worst_gap": (gap, "g"), "worst_cost": (cost, "c"), "crashed": crashed,
                "own_keys": keys}
    default = found(-0.11, 0.011)  # worst loss 0.11
    better = found(-0.086, 0.007, keys=groups - {paper})  # the paper's scale: not required
    verdict = robustness.replacement_verdict
    assert verdict(default, better, 1.10) == "**yes**"
    assert verdict(default, better, 1.15) == "**yes**"  # at the budget
    assert verdict(default, better, 1.34) == "no: a smaller worst loss, its CPU 1.34x `mean`'s"
    assert "not measured" in verdict(default, better, None)  # unmeasured never passes
    assert verdict(default, found(-0.11, 0.0), 1.0) == "no: not a smaller worst loss"
    assert verdict(default, found(-0.01, 0.0, crashed=1), 1.0) == "no: a cell crashed"
    partial = found(-0.01, 0.0, keys=frozenset({paper}))
    assert verdict(default, partial, 1.0) == "no: 2 of the default's 2 groups not measured"


def test_a_rules_cpu_against_mean_is_the_median_of_its_pairs_per_unit_of_fixed_work():
    from experiments import robustness

    def run(nodes, defence, repeat, cpu, fixed):
        return {"nodes": nodes, "defence": defence, "repeat": repeat, "cpu_seconds": cpu,
                "rounds_measured": 10, "phase_cpu_seconds": {"train": fixed}}
    runs = [run(100, "mean", 0, 10.0, 5.0), run(100, "guarded_wide", 0, 13.0, 6.0),
            run(100, "mean", 1, 12.0, 6.0), run(100, "guarded_wide", 1, 11.0, 5.0),
            run(100, "mean", 2, 10.0, 5.0), run(100, "guarded_wide", 2, 12.0, 5.0),
            run(10, "mean", 0, 1.0, 1.0), run(10, "guarded_wide", 0, 9.0, 1.0)]
    # per unit of fixed work: mean 2, 2, 2; the default 13/6, 11/5, 12/5 -> ratios
    # 1.0833, 1.1, 1.2: the median 1.1; the 10-node pair is another size
    assert robustness.cpu_against_mean(runs) == {"mean": 1.0,
                                                 "guarded_wide": pytest.approx(1.1)}
    assert robustness.cpu_against_mean(runs, nodes=10) == {"mean": 1.0,
                                                           "guarded_wide": pytest.approx(9.0)}
    assert robustness.cpu_against_mean([]) == {}


def test_the_report_says_whether_another_rule_replaces_the_default():
    from experiments import robustness
    key = "classes20/1x/ring/{}/{}/s1"
    rows = [("mean", "none", [0.5, 0.8, 0.8, 0.8]),
            ("guarded_wide", "none", [0.5, 0.8, 0.8, 0.8]),
            ("guarded_wide", "withheld", [0.1, 0.7, 0.7, 0.7]),
            ("guarded_wide", "label_flip", [0.9, 0.6, 0.6, 0.6]),  # -0.1
            ("cheap", "none", [0.5, 0.8, 0.8, 0.8]),
            ("cheap", "withheld", [0.1, 0.7, 0.7, 0.7]),
            ("cheap", "label_flip", [0.9, 0.68, 0.68, 0.68]),  # -0.02
            ("dear", "none", [0.5, 0.8, 0.8, 0.8]),
            ("dear", "withheld", [0.1, 0.7, 0.7, 0.7]),
            ("dear", "label_flip", [0.9, 0.69, 0.69, 0.69]),  # -0.01
            ("partial", "withheld", [0.1, 0.7, 0.7, 0.7]),  # no clean run
            ("partial", "label_flip", [0.9, 0.7, 0.7, 0.7])]
    results = {key.format(rule, attack): {"key": key.format(rule, attack), "f1": f1}
               for rule, attack, f1 in rows}

    def run(defence, repeat, cpu):
        return {"nodes": 100, "defence": defence, "repeat": repeat, "cpu_seconds": cpu,
                "rounds_measured": 1, "phase_cpu_seconds": {"train": 1.0}}
    costs = [run("mean", 0, 1.0), run("guarded_wide", 0, 1.1), run("cheap", 0, 1.12),
             run("dear", 0, 1.5)]
    report = robustness.render(results, "cmd", costs)
    assert "## Would another rule replace `guarded_wide`?" in report
    assert "the default's: 1.10x" in report
    assert "| cheap | 2 | 2.0 | label_flip on classes20, ring | 10.0 |" in report
    assert "| partial | 1 | 0.0 |" in report and "no: 1 of the default's 2 groups" in report
    assert report.count("**yes**") == 1 and "| 1.12x | **yes** |" in report
    assert "| 1.50x | no: a smaller worst loss, its CPU 1.50x `mean`'s |" in report
    # mean shares only the clean group (no withheld run) and has no attack cell
    assert "| mean | 1 | 0.0 | - | 0.0 | - | 1.00x | no: 1 of the default's 2 groups" in report


def test_a_defences_cost_is_the_aggregation_step_beside_the_rounds_cpu_after_round_1():
    import types

    from experiments import bench_defence, paired_runs

    def record(cpu, aggregation):
        # each round's phases: validation 0.1 CPU s, train the rest of the aggregation's
        return types.SimpleNamespace(rounds=[
            types.SimpleNamespace(round=r, cpu_seconds=c, aggregation_seconds=a,
                                  phases={"validation": [9.0, 0.1], "train": [9.0, a]})
            for r, (c, a) in enumerate(zip(cpu, aggregation, strict=True))])
    # round 0 and round 1 (start-up, warm-up) are not measured: rounds 2 and 3 are
    records = [record([1.0, 3.0, 4.0, 5.5], [0.0, 0.9, 0.2, 0.4]),
               record([1.0, 3.0, 4.2, 5.2], [0.0, 0.9, 0.3, 0.1])]
    found = bench_defence.per_round(records)
    # CPU: (1.0 + 1.5) + (1.2 + 1.0) = 4.7; phases of the four rounds: validation 4 x 0.1,
    # train 0.2 + 0.4 + 0.3 + 0.1 = 1.0
    assert found == {"aggregation_seconds": pytest.approx(0.25),
                     "round_cpu_seconds": pytest.approx(1.1), "rounds_measured": 4,
                     "cpu_seconds": pytest.approx(4.7),
                     "phase_cpu_seconds": {"train": pytest.approx(1.0),
                                           "validation": pytest.approx(0.4)}}
    # the phase table: 4.7 / 4 = 1.175 a node-round, 4.7 / 2.35 = 2x `mean`'s; of the
    # phases' 1.4 s, validation 0.4 (29%) and train 1.0 (71%)
    cell = {"nodes": 10, "defence": "guarded_wide", **found}
    plain = {"nodes": 10, "defence": "mean", **found, "cpu_seconds": 2.35}
    table = bench_defence.phase_lines([cell, plain], {10: plain},
                                      paired_runs.paired_ratios([cell, plain]))
    assert table[-1].startswith(
        "| 10 | `guarded_wide` | 1 | 1.175 | 2.00x | 2.00 | - | - | 29% | 0% |")
    assert "| 71% |" in table[-1] and table[-1].endswith("| 0% |")
    settings = bench_defence.overrides(10, 3, "distance2", "/r")
    assert "aggregation.distance=2.0" in settings and "aggregation.influence=0.0" in settings


def test_a_defences_cpu_against_means_is_the_median_of_its_interleaved_pairs():
    from experiments import bench_defence, paired_runs

    def run(defence, repeat, cpu, aggregation=0.1):
        return {"nodes": 100, "defence": defence, "repeat": repeat, "cpu_seconds": cpu,
                "rounds_measured": 10, "aggregation_seconds": aggregation,
                "round_cpu_seconds": cpu / 10, "refusals": 0, "mean_f1": 0.5,
                "drawn_per_node_round": 20, "phase_cpu_seconds": {"train": cpu / 2}}
    # `mean` drifts 10 -> 20 -> 12 CPU s between repeats; the default runs beside it at
    # 11, 20 and 15: paired ratios 1.1, 1.0, 1.25, median 1.1 (the unpaired medians would
    # read 15 / 12 = 1.25)
    runs = [run("mean", 0, 10.0), run("guarded_wide", 0, 11.0),
            run("guarded_wide", 1, 20.0), run("mean", 1, 20.0),
            run("mean", 2, 12.0), run("guarded_wide", 2, 15.0, aggregation=0.4)]
    ratios = paired_runs.paired_ratios(runs)
    assert ratios == {(100, "guarded_wide"): [pytest.approx(1.1), pytest.approx(1.0),
                                              pytest.approx(1.25)]}
    pooled = {c["defence"]: c for c in bench_defence.pooled(runs)}
    # medians over the runs: CPU per node-round 1.5 (1.1, 2.0, 1.5), aggregation 0.1;
    # phases summed over the runs: 23.0 of train
    assert pooled["guarded_wide"]["per_node_round"] == pytest.approx(1.5)
    assert pooled["guarded_wide"]["aggregation_seconds"] == pytest.approx(0.1)
    assert pooled["guarded_wide"]["runs"] == 3
    assert pooled["guarded_wide"]["phase_cpu_seconds"] == {"train": pytest.approx(23.0)}
    # per unit of fixed work (train is fixed: half of each run's CPU), every run reads 2,
    # so every pair 1.0
    calibrated = paired_runs.paired_ratios(runs, paired_runs.per_fixed_work)
    assert calibrated == {(100, "guarded_wide"): [pytest.approx(1.0)] * 3}
    row = bench_defence.phase_lines([pooled["guarded_wide"]], {}, ratios, calibrated)[-1]
    assert row.startswith("| 100 | `guarded_wide` | 3 | 1.500 | 1.10x | 1.10, 1.00, 1.25 | "
                          "1.00x | 1.00, 1.00, 1.00 |")
    # the default's run on a host twice as slow: 20 CPU s, its fixed work (train) doubled
    # to 10 too, reads 2 as `mean`'s 10 of which 5 train
    slow = [run("mean", 0, 10.0), {**run("guarded_wide", 0, 20.0),
                                   "phase_cpu_seconds": {"train": 10.0, "validation": 5.0}}]
    assert paired_runs.paired_ratios(slow, paired_runs.per_fixed_work) == {
        (100, "guarded_wide"): [pytest.approx(1.0)]}
    # the order run: the defences in turn, reversed every other repeat
    assert list(bench_defence.schedule([10], ["mean", "guarded_wide"], 3)) == [
        (10, 0, "mean"), (10, 0, "guarded_wide"), (10, 1, "guarded_wide"),
        (10, 1, "mean"), (10, 2, "mean"), (10, 2, "guarded_wide")]


def test_the_committed_defence_cost_report_is_what_its_results_regenerate(tmp_path):
    from experiments import bench_defence
    assert_regenerated(bench_defence, "robustness", ("defence-cost.md",), tmp_path,
                       data="defence-cost.json")


def test_network_report_reads_time_to_target_and_f1_at_budget_from_the_node_curves():
    from experiments import network
    # two nodes: (round, cumulative seconds, F1); the federation's curve is their mean
    cell = {"curves": [[[0, 0.0, 0.1], [1, 4.0, 0.7], [2, 8.0, 0.85], [3, 12.0, 0.9]],
                       [[0, 0.0, 0.1], [1, 6.0, 0.8], [2, 10.0, 0.83], [3, 14.0, 0.9]]]}
    assert network.federation_curve(cell) == [(0, 0.0, 0.1), (1, 5.0, 0.75),
                                              (2, 9.0, 0.84), (3, 13.0, 0.9)]
    assert network.time_to_target(cell, 0.8) == 9.0
    assert network.time_to_target(cell, 0.95) is None
    assert network.f1_at_budget(cell, 10.0) == 0.84
    assert network.f1_at_budget(cell, 1.0) == 0.1
    slow = {"curves": [[[0, 0.0, 0.1], [1, 20.0, 0.85]]]}
    grouped = {("fc", "5mbit", "a"): [cell], ("fc", "5mbit", "b"): [slow]}
    assert network.first_to_target(grouped, "fc", ["5mbit"]) == [
        "- 5mbit: a first (9.0 s), then b (20.0 s, +122%).", ""]


def test_the_committed_network_report_is_rebuilt_byte_for_byte_from_its_archive(tmp_path):
    from experiments import network
    folder = REPO / "experiments" / "reports" / "network"
    for name in ("results.json", "sim.json"):  # the measured cells, and the simulated ones
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    assert network.main(["--out", str(tmp_path), "--report-only"]) == 0
    assert (tmp_path / "network.md").read_bytes() == (folder / "network.md").read_bytes()



def test_the_committed_teacher_cost_report_is_what_its_results_regenerate(tmp_path):
    from experiments import bench_teacher
    assert_regenerated(bench_teacher, "teacher-cost", ("teacher.md",), tmp_path,
                       data="teacher.json")


def test_a_scale_cells_phases_are_its_node_rounds_after_round_0_grouped():
    from experiments import scale

    def node(in_neighbours, rounds):
        return {"in_neighbours": in_neighbours, "rounds": [
            {"phases": {"train": [9.0, 5.0]}},  # round 0: not counted
            *({"phases": phases, "undrawn_peers": undrawn} for phases, undrawn in rounds)]}
    records = [node([1, 2, 3], [({"train": [1, 0.6], "validation": [1, 0.2]}, [2]),
                                ({"train": [1, 0.4], "decode": [1, 0.1]}, None)]),
               node([0, 2, 3], [({"evaluation_global": [1, 0.3], "aggregation": [1, 0.4]},
                                 [3])])]
    found = scale.round_phases(records)
    # three node-rounds; taken: 3 - 1, 3 - 0, 3 - 1 in-neighbours
    assert found == {"node_rounds": 3, "in_neighbours_taken": pytest.approx(7 / 3, abs=0.01),
                     "phase_cpu_seconds": {"aggregation": 0.4, "decode": 0.1,
                                           "evaluation_global": 0.3, "train": 1.0,
                                           "validation": 0.2}}
    line = scale.phase_line({"nodes": 100, "in_degree": 3, **found})
    # 2.0 CPU s over 3 node-rounds; training 1.0 of 2.0, evaluation 0.3, screens 0.2,
    # aggregation 0.4, messages 0.1, other 0
    assert line == ("- 100 nodes: 0.667 CPU s a node-round, taking up 2.33 of its 3 "
                    "in-neighbours a round: training 50%, evaluation 15%, screens 10%, "
                    "aggregation 20%, messages 5%, other 0%")
    assert scale.phase_line({"nodes": 5, "in_degree": 4}) is None  # measured before phases


def test_a_scale_cell_measured_again_keeps_every_earlier_measurement():
    from experiments import scale
    results = {"cells": {"fully_connected/5": {"cpu_seconds": 3.0}},
               "superseded": {"fully_connected/5": {"cpu_seconds": 9.0, "why": "first"},
                              "fully_connected/5#1": {"cpu_seconds": 12.0, "why": "zeroth"}}}
    scale.supersede(results, "fully_connected/5", "second")
    assert results["cells"] == {}
    assert results["superseded"] == {
        "fully_connected/5": {"cpu_seconds": 3.0, "why": "second"},
        "fully_connected/5#1": {"cpu_seconds": 12.0, "why": "zeroth"},
        "fully_connected/5#2": {"cpu_seconds": 9.0, "why": "first"}}
    fresh = {"cells": {"k_regular/5": {"cpu_seconds": 1.0}}}
    scale.supersede(fresh, "k_regular/5", "why")
    assert fresh["superseded"] == {"k_regular/5": {"cpu_seconds": 1.0, "why": "why"}}


def test_the_development_docs_scale_table_is_the_committed_scale_results():
    from experiments import scale
    results = json.loads((REPO / "experiments" / "reports" / "scale" / "results.json")
                         .read_text())
    assert scale.docs_table(results) in (REPO / "docs" / "experiments.md").read_text(), \
        "docs/experiments.md's scale table: paste experiments.scale.docs_table's output"


def test_the_committed_scale_report_is_what_its_results_regenerate(tmp_path):
    from experiments import scale
    assert_regenerated(scale, "scale", ("scale.md", "scale.svg"), tmp_path,
                       more_data=("few-images/results.json",))


def test_the_committed_dynamic_report_is_what_its_results_regenerate(tmp_path):
    from experiments import dynamic
    assert_regenerated(dynamic, "dynamic", ("dynamic.md", "dynamic.svg"), tmp_path)


def test_the_committed_decentralizepy_side_by_side_is_what_its_results_regenerate(tmp_path):
    from experiments import versus_decentralizepy
    assert_regenerated(versus_decentralizepy, "versus-decentralizepy", ("table.md",), tmp_path)


def test_the_docs_side_by_side_is_the_committed_reports():
    from experiments import versus_decentralizepy
    results = json.loads((versus_decentralizepy.OUT / "results.json").read_text())
    page = (REPO / "docs" / "experiments.md").read_text()
    assert versus_decentralizepy.docs_table(results) in page, \
        "docs/experiments.md's decentralizepy table: paste versus_decentralizepy.docs_table"
    assert versus_decentralizepy.round_budget(results) in page
    assert versus_decentralizepy.without_pictures(results) in page
    assert versus_decentralizepy.bare_floor(results) in page


def test_the_side_by_side_without_decentralizepy_says_how_to_install_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "experiments.versus_decentralizepy",
                           "--decentralizepy-python", str(tmp_path / "no-python"),
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "install" in done.stderr


def test_the_committed_cli_start_up_table_is_what_its_results_regenerate():
    from experiments import bench_cli_startup

    folder = bench_cli_startup.OUT
    results = json.loads((folder / "results.json").read_text())
    assert {"before", "after"} <= set(results)
    assert (folder / "table.md").read_text() == bench_cli_startup.table(results)


def test_the_committed_long_run_table_is_what_its_results_regenerate(tmp_path):
    from experiments import bench_long_run

    folder = bench_long_run.OUT
    results = json.loads((folder / "results.json").read_text())
    assert {"before", "after"} <= set(results["labels"])
    assert (folder / "table.md").read_text() == bench_long_run.table(results)
    # the blocks come from a phases.csv: per node-round means over each block of 100 rounds
    phases = tmp_path / "phases.csv"
    rows = ["node,round,phase,seconds,cpu_seconds", "0,0,record,1,9.0"]
    rows += [f"{n},{r},{p},0,{c}" for n in (0, 1) for r in (1, 2, 101)
             for p, c in (("train", 0.004), ("record", 0.001 * r))]
    phases.write_text("\n".join(rows) + "\n")
    assert bench_long_run.blocks(phases) == [
        {"rounds": "1-100", "round": 5.5, "train": 4.0, "record": 1.5},
        {"rounds": "101-200", "round": 105.0, "train": 4.0, "record": 101.0}]


def test_the_diagnosis_reads_argmax_accuracy_of_a_logits_and_embedding_model():
    import math

    import torch

    from experiments.diagnose_profe import accuracy

    class Fixed(torch.nn.Module):
        def forward(self, x):
            return x, x  # the inputs are the logits

    logits = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    # argmax 0, 1, 0, 1 against labels 0, 1, 1, 1: 3 of 4
    assert accuracy(Fixed(), logits, torch.tensor([0, 1, 1, 1])) == 0.75
    assert math.isnan(accuracy(Fixed(), logits[:0], torch.tensor([], dtype=torch.long)))


def test_the_archive_leaves_out_the_model_sketches_and_keeps_the_rest(fixture_results, tmp_path):
    node = fixture_results / "mnist-profe-int16-iid-s1" / "node-0.json"
    record = json.loads(node.read_text())
    record["rounds"][1]["model_sketch"] = "QUJD" * 100
    node.write_text(json.dumps(record))
    _, records = report.read_archive(report.archive_results(fixture_results, tmp_path / "a"))
    archived = next(r for r in records if r["key"] == "mnist-profe-int16-iid-s1")["nodes"][0]
    assert "model_sketch" not in archived["rounds"][1]
    del record["rounds"][1]["model_sketch"]
    assert archived == record


def test_robustness_runs_the_cells_a_key_file_lists_in_order_and_names_a_bad_line(tmp_path):
    from experiments import robustness
    keys = tmp_path / "keys.txt"
    keys.write_text("# first the ceiling\niid/1x/ring/guarded_wide/withheld/s2/noplan\n\n"
                    "classes20/1x/6-regular/mean/none/s1\n")
    assert [c.key for c in robustness._listed_cells(keys)] == [
        "iid/1x/ring/guarded_wide/withheld/s2/noplan", "classes20/1x/6-regular/mean/none/s1"]
    for bad in ("iid/1x/ring/medain/none/s1", "iid/1x/ring/mean/nosuch/s1", "iid/ring",
                "iid/2y/ring/mean/none/s1", "paper/2x-near/ring/mean/sign_flip/s1"):
        keys.write_text(f"iid/1x/ring/mean/none/s1\n{bad}\n")
        with pytest.raises(SystemExit, match=f"keys.txt:2: .*{bad}"):
            robustness._listed_cells(keys)


def test_the_phase_table_groups_a_cells_cpu_by_phase():
    """A cell with phases: each group's share of its CPU seconds, and the share that is not
    training; a cell without phases (older archives) has no row."""
    import dataclasses

    archive = REPO / "experiments" / "reports" / "paper-default" / report.ARCHIVE_NAME
    _, records = report.read_archive(archive)
    cell = report.parse_record(records[0])
    hand = dataclasses.replace(cell, key="k", phases={"train": 3.0, "teacher": 1.0,
                                                      "validation": 2.0, "wait": 0.5,
                                                      "evaluation_global": 1.5, "other": 2.0},
                               final_f1=(0.5, 0.5), f1_per_round=(0.1, 0.2, 0.3))
    # 10 s over 2 nodes x 2 rounds: 2.5 s a node-round; training 40%, not training 60%
    assert report.phase_table([hand])[2] == (
        "| k | 2.50 | 40% | 15% | 20% | 0% | 5% | 20% | **60%** |")
    assert report.phase_table([dataclasses.replace(hand, phases={})]) == []
    assert cell.phases and sum(cell.phases.values()) > 0


def _protocol_cell(algorithm, seed, accuracies, hub=0, partition="iid"):
    nodes = [{"node": 0, "local_accuracy": 0.0, "local_f1": 0.0, "bytes_sent": 900,
              "bytes_received": 300}] if hub == 0 else []
    nodes += [{"node": i + 1, "local_accuracy": a, "local_f1": a, "bytes_sent": 100,
               "bytes_received": 300} for i, a in enumerate(accuracies)]
    return {"key": f"{algorithm}-{partition}-s{seed}", "algorithm": algorithm, "hub": hub,
            "partition": partition, "topology": "star" if hub == 0 else "fully_connected",
            "seed": seed, "rounds": 150, "participation": 0.1, "nodes": nodes}


def test_the_fedhp_protocol_table_sets_the_clients_mean_accuracy_beside_the_papers():
    from experiments.fedhp_protocol import render
    cells = [_protocol_cell("fedavg", 1, [0.97, 0.99]), _protocol_cell("fedavg", 2, [0.96, 0.96]),
             _protocol_cell("fedproto", 1, [0.80, 0.82]),
             _protocol_cell("fedhp", 1, [0.95, 0.97], hub=None)]
    ablation = {**_protocol_cell("fedhp", 1, [0.94, 0.96]), "key": "fedhp-b10",
                "variant": "fedhp-server-b10"}
    table = render(cells + [ablation, {**_protocol_cell("fedhp", 2, [0.90, 0.92]),
                                       "variant": "fedhp-server"}])
    # the ablation's cell in a row of its own, beside the paper's FedHP figure
    assert "| FedHP (fedhp-server-b10) | 95.00 (1 seed) | 96.04 ± 0.14 | -1.04 |" in table
    assert "| FedHP | 91.00 (1 seed) | 96.04 ± 0.14 | -5.04 * |" in table
    # FedAvg: clients 98.0 and 96.0 (the hub's 0 left out): 97.00 ± sqrt(2) = 1.41, 0.75
    # below the paper's 97.75; FedProto one seed, 81.00, 3.40 below 84.40: beyond 2 points
    assert "| FedAvg | 97.00 ± 1.41 (2 seeds) | 97.75 ± 0.25 | -0.75 | - | 97.61 ± 0.21 | -" \
        in table
    assert "| FedProto | 81.00 (1 seed) | 84.40 ± 0.67 | -3.40 * |" in table
    assert "| FedHP, fully_connected, no server | 96.00 (1 seed) | 96.04 ± 0.14 | -0.04 |" in table
    assert "| FedAvg | IID | 100 | 300 | 900 | 300 |" in table
    rows = [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| Fed")]
    assert rows[:5] == ["| FedAvg", "| FedProto", "| FedHP", "| FedHP (fedhp-server-b10)",
                        "| FedHP, fully_connected, no server"]


def test_the_alone_table_pairs_each_client_with_itself_in_the_cell():
    from experiments.fedhp_protocol import render_alone
    cell = _protocol_cell("fedhp", 1, [0.90, 0.96, 0.93])  # clients 1, 2, 3
    alone = [{"key": cell["key"], "settings": ["train.batch_size=10"],
              "nodes": [{"node": 1, "accuracy": 0.91}, {"node": 3, "accuracy": 0.90}]},
             {"key": "not-archived", "settings": [], "nodes": [{"node": 1, "accuracy": 0.5}]}]
    table = render_alone([cell], alone)
    # clients 1 and 3: alone 91 and 90 (90.50), in the cell 90 and 93 (91.50); the cell
    # less alone: -1 and +3: +1.00 ± sqrt(8) = 2.83
    assert (f"| {cell['key']} | `train.batch_size=10` | 2 | 90.50 | 91.50 | +1.00 ± 2.83 |"
            in table)
    assert "| not-archived | none | 1 | 50.00 | - | - |" in table
    assert render_alone([cell], []) == ""


def test_the_committed_fedhp_protocol_report_is_what_its_cells_regenerate():
    from experiments.fedhp_protocol import (
        ALONE_NAME,
        CELLS_NAME,
        DEFAULT_OUT,
        REPORT_NAME,
        read_cells,
        render,
        render_alone,
    )
    folder = REPO / DEFAULT_OUT
    cells = read_cells(folder / CELLS_NAME)
    assert cells, "no cells committed"
    expected = render(cells) + render_alone(cells, read_cells(folder / ALONE_NAME))
    assert (folder / REPORT_NAME).read_text().startswith(expected)


def test_a_protocol_client_trained_alone_trains_the_rounds_it_is_drawn_for_and_the_last_fit():
    from experiments.fedhp_local import cell_federation, drawn_rounds, sampled_clients, train_alone
    from node.topology_settings import participation
    assert sampled_clients(101, 0, 4) == [1, 26, 51, 76]
    _, config = cell_federation("fedhp-server", "iid", 1, ["rounds=3", "train.epochs=1"])
    draws = participation(config)
    # 10 of the 100 clients a round: client 1 in rounds 1, 2 and 9 of the first 12 (seed 1)
    assert drawn_rounds(draws, 101, 12, 1) == [1, 2, 9] == [r for r in range(1, 13)
                                                         if 1 in draws.chosen(101, r)]
    row = train_alone(config, 1)
    assert row["rounds_trained"] == len([1, 2]) + 1  # rounds 1 and 2 of 3, the last fit
    assert set(row["by_rule"]) == {"prototype"} and 0.0 < row["accuracy"] <= 1.0


def test_clients_alone_refuse_what_is_not_a_cell_in_one_line(tmp_path, capsys):
    from experiments.fedhp_local import main
    out = tmp_path / "local.jsonl"
    for argv, named in ((["--partition", "dirichlet:0.7"], "'dirichlet:0.7' is not one of"),
                        (["--seed", "9"], "9 is not one of its seeds"),
                        (["--set", "fedhp.spce=x"], "--set fedhp.spce: unknown key 'spce'")):
        assert main([*argv, "--out", str(out)]) == 2
        assert named in capsys.readouterr().err
    assert not out.exists()


def test_sign_flip_p_counts_sign_assignments_by_hand():
    # differences 1, 2, 3 (mean 2): of the 8 sign assignments only +++ and --- reach |mean| 2
    assert report.sign_flip_p([1.0, 2.0, 3.0]) == 2 / 8
    # 1, -1, 2: observed |sum| 2; sums of the 8: 2, 0, 4, -2, 2, ... -> |sum| >= 2 in 6 of 8
    # (+1-1+2=2, -1-1+2=0, +1+1+2=4, -1+1+2=2, +1-1-2=-2, -1-1-2=-4, +1+1-2=0, -1+1-2=-2)
    assert report.sign_flip_p([1.0, -1.0, 2.0]) == 6 / 8
    with pytest.raises(ValueError, match="1 to 20"):
        report.sign_flip_p([])


def test_paired_test_by_hand():
    # differences 1, 2, 3: mean 2, sample std 1, t = 2 / (1 / sqrt 3) = 3.464
    test = report.paired_test([1.0, 2.0, 3.0])
    assert (test.seeds, test.above, test.mean, test.std, test.p) == (3, 3, 2.0, 1.0, 0.25)
    assert test.t == pytest.approx(2 * 3 ** 0.5)
    assert report.paired_test([0.5]) is None
    assert report.paired_test([0.2, 0.2]).t == float("inf")


def test_paired_table_tests_profe_against_its_twin_over_six_seeds(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    # 1/4 student, six seeds, ProFe above its twin by 0.01 .. 0.06 points of F1 (mean 0.035,
    # sample std 0.018708): t = 0.035 / (0.018708 / sqrt 6) = 4.583; only the all-plus and
    # all-minus of the 64 sign assignments reach |mean| 0.035: p = 2 / 64 = 0.0312
    for seed in range(1, 7):
        write_cell(root, "profe-quarter", "int16", "classes:0.2", [1, 1], [1, 1], [1, 1],
                   [0.1, 0.5 + seed / 100], seed=seed)
        write_cell(root, "profe-quarter-no-distillation", "int16", "classes:0.2", [1, 1],
                   [1, 1], [1, 1], [0.1, 0.5], seed=seed)
    # 1/8 student, three seeds only: no paired row
    for seed in range(1, 4):
        write_cell(root, "profe-eighth", "int16", "classes:0.2", [1, 1], [1, 1], [1, 1],
                   [0.1, 0.6], seed=seed)
        write_cell(root, "profe-eighth-no-distillation", "int16", "classes:0.2", [1, 1], [1, 1],
                   [1, 1], [0.1, 0.5], seed=seed)
    out = tmp_path / "r"
    text = report.write_report(report.archive_results(root, out), out).read_text()
    assert ("| 1/4 | mnist | classes:0.2 | 6 | 6 of 6 | +3.50 | 1.87 | 4.58 (5) | 0.0312 | "
            "ProFe above |") in text
    assert "| 1/8 | mnist | classes:0.2 | 3 |" not in text
