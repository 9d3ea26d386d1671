"""Experiment report: the ProFe paper's Table II (bytes), Table III (time), the final F1
table, round 1 and collapses, Figure 2 (macro-F1 per round), comparisons with the baseline,
the targets and each paper's headline figure, from an archive of node results.

    python -m experiments.report experiments/results/paper [--out experiments/reports/paper]
        archives every finished cell into OUT/archive.jsonl.gz, then writes OUT/report.md
    python -m experiments.report experiments/reports/paper/archive.jsonl.gz
        rebuilds report.md and the plots beside the archive from the archive alone
    python -m experiments.report experiments/results/paper-int8 --into experiments/reports/paper
        adds the finished cells (and their invocation) to that report's archive, then rebuilds

Cells that differ only by seed form a group: a figure is the mean over its seeds of each
run's mean over its nodes, its spread the standard deviation across seeds, reported apart
from the spread over one run's nodes. `notes.md` in the output folder, when present, is
included verbatim.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.profile import PHASE_GROUPS, group_shares, summed
from node.record import Evaluation, NodeRecord

ARCHIVE_NAME = "archive.jsonl.gz"
STUDENT_BASELINE = ("fedavg-student", "fp32")  # the ProFe paper's baseline: the student's size
TEACHER_BASELINE = ("fedavg", "fp32")  # FedAvg on the teacher-size model, for comparison
METHOD_ORDER = ("fedavg-student", "fedavg", "profe", "fedproto", "fedproc", "fedhp", "fedpr")
# A cell whose predictions give at least this share to one class is a collapsed predictor:
# the global test sets are balanced (largest MNIST class 11%), so no working model gets near.
COLLAPSE_SHARE = 0.5
# Two groups' seed means differ within noise when the difference is at most this many times
# the larger of their standard deviations across seeds.
NOISE_FACTOR = 2.0
ROUND_ONE = 1  # the first round after local training: where a collapse first shows


@dataclass(frozen=True)
class PaperFigure:
    """A paper's own figure, in the paper's metric and on the test set it evaluates on."""

    figure: float | None  # None: the figure is not in the paper text we hold
    source: str
    metric: str  # "accuracy" or "macro-F1"
    split: str = "global_test"  # or "local_test"
    floor: bool = False  # a floor to reach; otherwise a figure to come within REACH of


# Each paper's own figure, on the partition it was measured on: (method, dataset, partition).
PAPER_FIGURES = {
    ("profe", "mnist", "iid"): PaperFigure(
        0.95, "ProFe paper, IV-A: above 95% macro-F1 on MNIST IID", "macro-F1", floor=True),
    ("profe", "mnist", "classes:0.2"): PaperFigure(
        0.80, "ProFe paper, IV-A: 80% macro-F1 on MNIST with 20% of the classes per node",
        "macro-F1", floor=True),
    ("fedavg-student", "mnist", "iid"): PaperFigure(
        0.95, "ProFe paper, Fig. 2: its FedAvg baseline is above 95% on MNIST IID", "macro-F1"),
    ("fedproto", "mnist", "iid"): PaperFigure(
        0.844, "FedHP paper, Table 1: FedProto 84.40% accuracy on MNIST IID", "accuracy"),
    ("fedproto", "mnist", "classes:0.3"): PaperFigure(
        None, "FedProto paper, IV: 20 clients, about 3 of 10 classes each, local test "
        "accuracy (its MNIST table is not in our copy of the text)",
        "accuracy", split="local_test"),
    ("fedhp", "mnist", "iid"): PaperFigure(
        0.9604, "FedHP paper, Table 1: 96.04% accuracy on MNIST IID", "accuracy"),
    ("fedpr", "mnist", "dirichlet:0.05"): PaperFigure(
        0.9462, "FedPR paper: 94.62% average accuracy on MNIST, Dir(0.05)", "accuracy"),
    ("fedpr", "fashion_mnist", "dirichlet:0.05"): PaperFigure(
        0.8605, "FedPR paper: 86.05% average accuracy on Fashion-MNIST, Dir(0.05)", "accuracy"),
    ("fedpr-weight-tenth", "mnist", "dirichlet:0.05"): PaperFigure(
        0.9462, "FedPR paper: 94.62% on MNIST, Dir(0.05); ours with the distance weight at "
        "0.1 instead of Eq. 4's 1", "accuracy"),
    ("fedavg", "mnist", "dirichlet:0.05"): PaperFigure(
        0.9157, "FedPR paper: its FedAvg baseline, 91.57% on MNIST, Dir(0.05)", "accuracy"),
    ("fedavg", "fashion_mnist", "dirichlet:0.05"): PaperFigure(
        0.7904, "FedPR paper: its FedAvg baseline, 79.04% on Fashion-MNIST, Dir(0.05)",
        "accuracy"),
}
# The CellResult field that holds each (metric, split), per node.
METRIC_FIELDS = {("macro-F1", "global_test"): "final_f1",
                 ("macro-F1", "local_test"): "final_local_f1",
                 ("accuracy", "global_test"): "final_accuracy",
                 ("accuracy", "local_test"): "final_local_accuracy"}
REACH = 0.05  # within 5 points of a paper's figure
PROFE_IID_GAP = 0.01  # ProFe within 1 point of student-size FedAvg on IID
PROFE_BYTES_SHARE = 0.60  # ProFe bytes per node at most 60% of student-size FedAvg's
COMPACT_CODEC = "int8"  # the codec below 16 bits, judged on bytes and F1 beside the baseline
COMPACT_BYTES_SHARE = 0.25  # ProFe int8: at most 25% of student-size FedAvg's bytes per node
FEDPROTO_SAVING = 0.90  # FedProto at least 90% fewer bytes than student-size FedAvg


@dataclass(frozen=True)
class ProfeTarget:
    """ProFe's macro-F1 goal on one setting, on seed means, against student-size FedAvg."""

    versus: str  # "above", "at least" or "within" (PROFE_IID_GAP) student-size FedAvg's mean
    floor: float | None = None  # ProFe's mean at least this
    bytes_share: float | None = None  # ProFe's bytes per node at most this share of FedAvg's


# The ProFe paper's settings (20 nodes) with goals of their own: (dataset, partition, nodes).
# Every other setting: within PROFE_IID_GAP of FedAvg on IID, above it otherwise.
PROFE_TARGETS = {
    ("mnist", "classes:0.2", 20): ProfeTarget("above", floor=0.80),
    ("fashion_mnist", "classes:0.2", 20): ProfeTarget("at least"),
    ("mnist", "iid", 20): ProfeTarget("within", floor=0.97, bytes_share=PROFE_BYTES_SHARE),
}

Setting = tuple[str, str, str, int]  # dataset, partition, topology, nodes


@dataclass(frozen=True)
class CellResult:
    """One finished federation: its coordinates and per-node measurements."""

    key: str
    method: str  # the algorithm, or the matrix variant's name (fedavg-student)
    codec: str
    dataset: str
    partition: str
    topology: str
    nodes: int
    seed: int
    rule: str  # the prediction rule of the method's paper; F1s below are under it
    bytes_sent: tuple[int, ...]
    bytes_received: tuple[int, ...]
    elapsed: tuple[float, ...]
    final_f1: tuple[float, ...]  # global test set
    final_local_f1: tuple[float, ...]
    final_accuracy: tuple[float, ...]  # global test set
    final_local_accuracy: tuple[float, ...]
    top_class_share: tuple[float, ...]
    other_rules: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]  # rule -> (F1, share)
    round_one_f1: tuple[float, ...]  # global test, argmax, round ROUND_ONE
    round_one_share: tuple[float, ...]
    f1_per_round: tuple[float, ...]  # mean over nodes, round 0 first
    backend: str = "local"  # "sim": Table III's seconds are the simulation's virtual clock
    cpu_per_round: tuple[float, ...] = ()  # per node; empty in runs that did not record CPU
    # CPU seconds per phase (node.profile.PHASES) over the finished nodes' rounds after
    # round 0; empty in runs that did not record phases
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def row(self) -> tuple[str, str]:
        return self.method, self.codec

    @property
    def setting(self) -> Setting:
        return self.dataset, self.partition, self.topology, self.nodes


def codec_label(exchange: dict) -> str:
    """"int16", or "int16/fp32" when prototypes travel with a codec of their own."""
    model, prototypes = exchange["codec"], exchange.get("prototype_codec") or exchange["codec"]
    return model if prototypes == model else f"{model}/{prototypes}"


# ---- archive: one JSON line per cell, gzip without a timestamp (byte-stable) ----

def _config_file(run_dir: Path) -> Path:
    """The run's resolved config: federation.json (config.json in runs before it)."""
    federation = run_dir / "federation.json"
    return federation if federation.is_file() else run_dir / "config.json"


# Left out of the archive: per round, the model's sketch (node.consensus), random-looking
# base64 that gzip cannot shrink (1.2 MB a 20-node, 10-round cell) and no table here reads.
UNARCHIVED_ROUND_FIELDS = ("model_sketch",)


def _archived_node(node: dict) -> dict:
    """A node's result as archived: every field but UNARCHIVED_ROUND_FIELDS."""
    rounds = [{k: v for k, v in r.items() if k not in UNARCHIVED_ROUND_FIELDS}
              for r in node.get("rounds", [])]
    return node | {"rounds": rounds} if "rounds" in node else node


def collect_records(root: Path) -> list[dict[str, Any]]:
    """Every cell folder under `root` with a summary: its config, cell and node results
    (less UNARCHIVED_ROUND_FIELDS)."""
    records = []
    for summary_path in sorted(root.glob("*/summary.json")):
        run_dir = summary_path.parent
        cell_path = run_dir / "cell.json"
        records.append({
            "key": run_dir.name,
            "cell": json.loads(cell_path.read_text()) if cell_path.is_file() else None,
            "config": json.loads(_config_file(run_dir).read_text())["config"],
            "nodes": [_archived_node(json.loads(p.read_text())) for p in
                      sorted(run_dir.glob("node-*.json"), key=lambda p: int(p.stem[5:]))]})
    return records


def write_archive(path: Path, runs: list[dict], records: list[dict]) -> None:
    """The invocations, then one line per cell, as given; the same bytes for the same input."""
    lines = [json.dumps({"runs": runs}, sort_keys=True)]
    lines += [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))


def read_archive(path: Path) -> tuple[list[dict], list[dict]]:
    """(runs, cell records) from an archive written by `write_archive`."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    if not lines:
        raise SystemExit(f"{path}: empty archive")
    return json.loads(lines[0])["runs"], [json.loads(line) for line in lines[1:]]


def partition_label(data: dict) -> str:
    """A config's `data` table as the matrices name its partition: "iid", "classes:0.2",
    "dirichlet:0.5"."""
    if data["partition"] == "classes":
        return f"classes:{data['classes_fraction']:g}"
    if data["partition"] == "dirichlet":
        return f"dirichlet:{data['alpha']:g}"
    return data["partition"]


def _final(node: NodeRecord, split: str, rule: str | None = None) -> tuple[float, float]:
    """(F1, top-class share) of the node's last round on `split`, under `rule` or its own."""
    evaluation = getattr(node.rounds[-1], split)
    if rule is None:
        return evaluation.f1, evaluation.top_class_share
    metrics = evaluation.by_rule.get(rule, {"f1": float("nan")})
    return metrics["f1"], metrics.get("top_class_share", float("nan"))


def _final_accuracy(node: NodeRecord, split: str) -> float:
    """Accuracy of the node's last round on `split`, under its paper's rule."""
    return getattr(node.rounds[-1], split).accuracy


def argmax_view(evaluation: Evaluation) -> tuple[float, float]:
    """(F1, top-class share) under argmax: by_rule's when recorded, else the evaluation's own."""
    metrics = evaluation.by_rule.get("argmax")
    if metrics is None:
        return evaluation.f1, evaluation.top_class_share
    return metrics["f1"], metrics.get("top_class_share", float("nan"))


def _round_one(node: NodeRecord) -> tuple[float, float] | None:
    """Round ROUND_ONE's argmax (F1, top-class share) on the global test set, if recorded."""
    for record in node.rounds:
        if record.round == ROUND_ONE:
            return argmax_view(record.global_test)
    return None


def _cpu_per_round(node: NodeRecord) -> float | None:
    """CPU seconds per round after round 0 (training, exchange, aggregation, evaluation), from
    the cumulative CPU time each round records; None in runs that did not record it."""
    first, last = node.rounds[0], node.rounds[-1]
    if last.round <= first.round or last.cpu_seconds <= 0.0:
        return None
    return (last.cpu_seconds - first.cpu_seconds) / (last.round - first.round)


def parse_record(record: dict) -> CellResult | None:
    """A cell's figures, over its finished nodes; None when no node finished."""
    config = record["config"]
    nodes = [NodeRecord.from_dict(n) for n in record["nodes"]]
    finished = [n for n in nodes if n.status == "finished" and n.rounds]
    if not finished:
        return None
    method = (record.get("cell") or {}).get("algorithm", config["algorithm"])
    last = finished[0].rounds[-1].global_test
    rule = last.rule or "argmax"
    others = sorted(set(last.by_rule) - {rule})
    rounds = min(len(n.rounds) for n in finished)
    round_one = [r for r in (_round_one(n) for n in finished) if r is not None]
    cpu = [c for c in (_cpu_per_round(n) for n in finished) if c is not None]
    return CellResult(
        key=record["key"], method=method, codec=codec_label(config["exchange"]),
        dataset=config["data"]["dataset"], partition=partition_label(config["data"]),
        topology=config["topology"]["kind"], nodes=config["nodes"], seed=config["seed"],
        rule=rule,
        bytes_sent=tuple(n.bytes_sent for n in finished),
        bytes_received=tuple(n.bytes_received for n in finished),
        elapsed=tuple(n.elapsed_seconds for n in finished),
        final_f1=tuple(_final(n, "global_test")[0] for n in finished),
        final_local_f1=tuple(_final(n, "local_test")[0] for n in finished),
        final_accuracy=tuple(_final_accuracy(n, "global_test") for n in finished),
        final_local_accuracy=tuple(_final_accuracy(n, "local_test") for n in finished),
        top_class_share=tuple(_final(n, "global_test")[1] for n in finished),
        other_rules={r: (tuple(_final(n, "global_test", r)[0] for n in finished),
                         tuple(_final(n, "global_test", r)[1] for n in finished))
                     for r in others},
        round_one_f1=tuple(f1 for f1, _ in round_one),
        round_one_share=tuple(share for _, share in round_one),
        f1_per_round=tuple(statistics.fmean(n.rounds[i].global_test.f1 for n in finished)
                           for i in range(rounds)),
        backend=config.get("deploy", {}).get("backend", "local"),
        cpu_per_round=tuple(cpu) if len(cpu) == len(finished) else (),
        phases={name: spent[1] for name, spent in summed(
            [r.phases for n in finished for r in n.rounds if r.round > 0]).items()})


# ---- seeds: the runs of a group differ only by seed ----

@dataclass(frozen=True)
class SeedStats:
    """One measure over the runs of a group that differ only by seed."""

    seeds: int
    mean: float  # mean over seeds of each run's mean over its nodes
    std: float  # standard deviation across seeds (statistics.stdev; 0 with one seed)
    nodes_std: float  # spread over one run's nodes (population std), averaged over seeds


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def seed_stats(runs: list[list[float]]) -> SeedStats | None:
    """Each run's mean over its nodes, then their mean and spread across runs (None if empty)."""
    runs = [values for values in runs if values]
    if not runs:
        return None
    means = [statistics.fmean(values) for values in runs]
    return SeedStats(seeds=len(runs), mean=statistics.fmean(means),
                     std=statistics.stdev(means) if len(means) > 1 else 0.0,
                     nodes_std=statistics.fmean(mean_std(values)[1] for values in runs))


def field_stats(cells: list[CellResult], field: str, scale: float = 1.0) -> SeedStats | None:
    """`seed_stats` of one per-node field of each cell, divided by `scale`."""
    return seed_stats([[v / scale for v in getattr(cell, field)] for cell in cells])


def bytes_stats(cells: list[CellResult]) -> SeedStats | None:
    """Bytes sent plus received per node, over seeds."""
    return seed_stats([[s + r for s, r in zip(c.bytes_sent, c.bytes_received)] for c in cells])


def seed_count(seeds: int) -> str:
    """"1 seed" or "3 seeds"."""
    return "1 seed" if seeds == 1 else f"{seeds} seeds"


def _across(stats: SeedStats, digits: int) -> str:
    """The mean, with its spread across seeds when there is more than one."""
    spread = f" ± {stats.std:.{digits}f}" if stats.seeds > 1 else ""
    return f"{stats.mean:.{digits}f}{spread}"


def mean_text(stats: SeedStats | None, digits: int = 3) -> str:
    """"0.812 ± 0.011" over 3 seeds, "0.812" over one, "-" over none."""
    return "-" if stats is None else _across(stats, digits)


def seeds_text(stats: SeedStats | None, digits: int = 3) -> str:
    """"0.812 ± 0.011 (3 seeds)", or "0.812 (1 seed)": one run has no spread across seeds."""
    return "-" if stats is None else f"{_across(stats, digits)} ({seed_count(stats.seeds)})"


def seed_text(stats: SeedStats | None) -> str:
    """"0.812 ± 0.011 (3 seeds; nodes ± 0.004)": across seeds, then over one run's nodes."""
    if stats is None:
        return "-"
    return (f"{_across(stats, 3)} ({seed_count(stats.seeds)}; "
            f"nodes ± {stats.nodes_std:.3f})")


def noise_verdict(ours: SeedStats, baseline: SeedStats) -> str:
    """Whether two groups' seed means differ within noise (NOISE_FACTOR × the larger std)."""
    if min(ours.seeds, baseline.seeds) < 2:
        return "not testable with one seed"
    within = abs(ours.mean - baseline.mean) <= NOISE_FACTOR * max(ours.std, baseline.std)
    return "within noise" if within else "beyond noise"


def is_collapsed(cell: CellResult) -> bool:
    """True when the run's final predictions put COLLAPSE_SHARE or more in one class."""
    return statistics.fmean(cell.top_class_share) >= COLLAPSE_SHARE


def collapsed_seeds(cells: list[CellResult]) -> int:
    """How many of a group's runs collapsed."""
    return sum(is_collapsed(cell) for cell in cells)


def collapse_text(cells: list[CellResult]) -> str:
    """"1 of 3 seeds": how many of a group's runs collapsed."""
    return f"{collapsed_seeds(cells)} of {seed_count(len(cells))}"


# ---- tables ----

def label(row: tuple[str, str]) -> str:
    return f"{row[0]} ({row[1]})"


def setting_label(setting: Setting) -> str:
    """"mnist iid, fully_connected, 20 nodes"."""
    dataset, partition, topology, nodes = setting
    return f"{dataset} {partition}, {topology}, {nodes} nodes"


def _rows(results: list[CellResult]) -> list[tuple[str, str]]:
    return sorted({r.row for r in results}, key=lambda k: (
        METHOD_ORDER.index(k[0]) if k[0] in METHOD_ORDER else 99, k))


def _settings(results: list[CellResult]) -> list[Setting]:
    return sorted({r.setting for r in results})


def _select(results: list[CellResult], row: tuple[str, str], dataset: str) -> list[CellResult]:
    return sorted((r for r in results if r.row == row and r.dataset == dataset),
                  key=lambda r: r.seed)


def _groups(results: list[CellResult]):
    """(dataset, row, its cells) for every method row that ran on each dataset, in order."""
    for dataset in sorted({r.dataset for r in results}):
        for row in _rows(results):
            chosen = _select(results, row, dataset)
            if chosen:
                yield dataset, row, chosen


def _relative(value: float, baseline: float | None, is_baseline: bool) -> str:
    if is_baseline:
        return "baseline"
    if not baseline:
        return "-"
    change = 100.0 * (value - baseline) / baseline
    arrow = "↓" if change < -0.05 else "↑" if change > 0.05 else "="
    return f"{arrow} {abs(change):.1f}%"


SEED_LEGEND = ("Each figure: mean over seeds of each run's mean over its nodes ± the standard "
               "deviation across seeds (not shown with 1 seed: one run is an anecdote), then the "
               "number of seeds and the spread over one run's nodes (population std, averaged "
               "over seeds).")


F1_LEGEND = ("`0.812 ± 0.011 (3 seeds; nodes ± 0.004)`: the mean over seeds ± the standard "
             "deviation across seeds (left out with 1 seed), the number of seeds, and the spread "
             "over one run's nodes.")


CLOCKS = {"local": "wall", "sim": "virtual"}  # what a backend's elapsed seconds measure


def clock_text(cells: list[CellResult]) -> str:
    """"wall", "virtual" (the sim's clock), or both when a group's seeds ran on both."""
    return " + ".join(sorted({CLOCKS.get(c.backend, c.backend) for c in cells}))


def metric_table(results: list[CellResult], field: str, scale: float, unit: str,
                 clocked: bool = False) -> str:
    """Seed means per method and dataset, beside both FedAvg baselines' seed means; `clocked`
    (times) adds which clock measured them and compares only figures of the same clock."""
    clock_head, clock_rule = (" clock |", "---|") if clocked else ("", "")
    lines = [(f"| method (codec) | dataset | {unit} |{clock_head} vs FedAvg student-size | "
             "vs FedAvg teacher-size |"), f"|---|---|---|{clock_rule}---|---|"]
    for dataset in sorted({r.dataset for r in results}):
        bases = (STUDENT_BASELINE, TEACHER_BASELINE)
        base_cells = [_select(results, base, dataset) for base in bases]
        baselines = [field_stats(cells, field, scale) for cells in base_cells]
        for row in _rows(results):
            cells = _select(results, row, dataset)
            stats = field_stats(cells, field, scale)
            if stats is None:
                continue
            clock = clock_text(cells)
            vs = [_relative(stats.mean, b.mean if b and not (clocked and clock_text(bc) != clock)
                            else None, row == base)
                  for b, bc, base in zip(baselines, base_cells, bases)]
            clock_cell = f" {clock} |" if clocked else ""
            lines.append(f"| {label(row)} | {dataset} | {seed_text(stats)} |{clock_cell} {vs[0]} | "
                         f"{vs[1]} |")
    return "\n".join(lines)


def _f1_text(f1s: list[list[float]], shares: list[list[float]]) -> str:
    """Seed figures, or the collapse flag instead of an F1 that means nothing."""
    stats = seed_stats(f1s)
    if stats is None:
        return "-"
    run_shares = [statistics.fmean(s) for s in shares if s]
    collapsed = sum(share >= COLLAPSE_SHARE for share in run_shares)
    if run_shares and collapsed == len(run_shares):
        return (f"**collapsed** ({100 * statistics.fmean(run_shares):.0f}% of predictions in "
                f"one class; F1 {stats.mean:.3f}; {seed_count(len(run_shares))})")
    flag = f"; **collapsed in {collapsed} of {seed_count(len(run_shares))}**" if collapsed else ""
    return seed_text(stats) + flag


def f1_table(results: list[CellResult]) -> str:
    """Final macro-F1 under each paper's rule, the other rule beside it, and the local test."""
    lines = [F1_LEGEND, "",
             ("| method (codec) | dataset | paper's rule | global F1, paper's rule | "
              "global F1, other rule | local-test F1, paper's rule |"), "|---|---|---|---|---|---|"]
    for dataset, row, chosen in _groups(results):
        main = _f1_text([list(c.final_f1) for c in chosen],
                        [list(c.top_class_share) for c in chosen])
        others = []
        for rule in sorted({r for c in chosen for r in c.other_rules}):
            runs = [c.other_rules[rule] for c in chosen if rule in c.other_rules]
            text = _f1_text([list(f) for f, _ in runs], [list(s) for _, s in runs])
            others.append(f"{rule}: {text}")
        local = seed_text(field_stats(chosen, "final_local_f1"))
        lines.append(f"| {label(row)} | {dataset} | {chosen[0].rule} | {main} | "
                     f"{'; '.join(others) or '-'} | {local} |")
    return "\n".join(lines)


def round_one_collapses(cells: list[CellResult]) -> str:
    """"seeds 1 (100%), 3 (58%) of 3": the runs whose round-1 top-class share (mean over
    nodes) reaches COLLAPSE_SHARE, with that share; "none of 3 seeds" when none does."""
    over = [(c.seed, statistics.fmean(c.round_one_share)) for c in cells
            if c.round_one_share and statistics.fmean(c.round_one_share) >= COLLAPSE_SHARE]
    if not over:
        return f"none of {seed_count(len(cells))}"
    named = ", ".join(f"{seed} ({100 * share:.0f}%)" for seed, share in over)
    return f"{'seed' if len(over) == 1 else 'seeds'} {named} of {len(cells)}"


def round_one_table(results: list[CellResult]) -> str:
    """Round 1's argmax F1 and top-class share over seeds, the seeds over the collapse
    threshold in round 1, and how many seeds ended collapsed."""
    lines = [(f"Round {ROUND_ONE} (after the first local training and aggregation), global test, "
              "argmax, mean over seeds (± across seeds with more than one), beside the final "
              f"top-class share under the paper's rule. A run is collapsed when that final share "
              f"is {100 * COLLAPSE_SHARE:.0f}% or more; the seeds whose round-{ROUND_ONE} share "
              "already reaches it are named with that share."), "",
             (f"| method (codec) | dataset | round-{ROUND_ONE} F1 | round-{ROUND_ONE} top-class "
              f"share | seeds ≥ {100 * COLLAPSE_SHARE:.0f}% in round {ROUND_ONE} | final "
              "top-class share | seeds collapsed |"), "|---|---|---|---|---|---|---|"]
    for dataset, row, chosen in _groups(results):
        lines.append(f"| {label(row)} | {dataset} | "
                     f"{mean_text(field_stats(chosen, 'round_one_f1'))} | "
                     f"{mean_text(field_stats(chosen, 'round_one_share'))} | "
                     f"{round_one_collapses(chosen)} | "
                     f"{mean_text(field_stats(chosen, 'top_class_share'))} | "
                     f"{collapse_text(chosen)} |")
    return "\n".join(lines)


def _f1_with_collapses(cells: list[CellResult]) -> str:
    """"0.745 (1 seed)", with how many seeds collapsed when any did."""
    text = seeds_text(field_stats(cells, "final_f1"))
    return text + (f"; collapsed in {collapse_text(cells)}" if collapsed_seeds(cells) else "")


def comparisons(results: list[CellResult]) -> list[str]:
    """Every method's final macro-F1 minus student-size FedAvg's, per setting, with the verdict."""
    lines = [("Final macro-F1 (global test, each paper's rule) of every method minus that of "
              f"FedAvg on the student-size model ({STUDENT_BASELINE[1]}), on seed means. The "
              "difference is **within noise** when its size is at most "
              f"{NOISE_FACTOR:g} × the larger of the two standard deviations across seeds, "
              "**beyond noise** when larger; with fewer than 2 seeds in either group it is **not "
              "testable with one seed**."), "",
             ("| setting | method (codec) | macro-F1 | student-size FedAvg | difference (points) "
              "| verdict |"), "|---|---|---|---|---|---|"]
    rows = 0
    for setting in _settings(results):
        group = [r for r in results if r.setting == setting]
        student = _select(group, STUDENT_BASELINE, setting[0])
        if not student:
            continue
        baseline = field_stats(student, "final_f1")
        for row in _rows(group):
            if row == STUDENT_BASELINE:
                continue
            cells = _select(group, row, setting[0])
            ours = field_stats(cells, "final_f1")
            rows += 1
            lines.append(f"| {setting_label(setting)} | {label(row)} | "
                         f"{_f1_with_collapses(cells)} | {_f1_with_collapses(student)} | "
                         f"{100 * (ours.mean - baseline.mean):+.1f} | "
                         f"{noise_verdict(ours, baseline)} |")
    return lines if rows else lines[:2] + ["No setting has a student-size FedAvg baseline."]


def plot_f1(results: list[CellResult], out_dir: Path) -> list[Path]:
    """Figure 2: macro-F1 per round under each paper's rule, a panel per partition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(results)
    palette = plt.get_cmap("tab20" if len(rows) > 10 else "tab10")
    colours = {row: palette(i) for i, row in enumerate(rows)}  # one colour per method everywhere
    paths = []
    for dataset in sorted({r.dataset for r in results}):
        partitions = sorted({r.partition for r in results if r.dataset == dataset})
        figure, axes = plt.subplots(1, len(partitions), figsize=(4.2 * len(partitions), 3.6),
                                    squeeze=False, sharey=True)
        for axis, partition in zip(axes[0], partitions):
            for row in rows:
                cells = [r for r in results if (r.dataset, r.partition, r.row) ==
                         (dataset, partition, row)]
                if not cells:
                    continue
                rounds = min(len(c.f1_per_round) for c in cells)
                curve = [statistics.fmean(c.f1_per_round[i] for c in cells)
                         for i in range(rounds)]
                axis.plot(range(rounds), curve, marker="o", markersize=3, color=colours[row],
                          label=f"{label(row)}, {cells[0].rule}")
            axis.set_title(f"{dataset}, {partition}")
            axis.set_xlabel("round")
            axis.grid(alpha=0.3)
        axes[0][0].set_ylabel("macro-F1, global test (paper's rule)")
        axes[0][0].set_ylim(0.0, 1.0)
        handles = {h.get_label(): h for axis in axes[0] for h in axis.get_lines()}
        axes[0][-1].legend(handles.values(), handles.keys(), fontsize=7, loc="lower right")
        figure.tight_layout()
        path = out_dir / f"f1_{dataset}.png"
        figure.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(figure)
        paths.append(path)
    return paths




# ---- targets ----

TARGET_CODECS = {"profe": "int16"}  # each method is judged at its paper's codec


def _target_cells(group: list[CellResult], method: str) -> list[CellResult]:
    codec = TARGET_CODECS.get(method, "fp32")
    return sorted((r for r in group if r.row == (method, codec)), key=lambda r: r.seed)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _seeds_beside(ours: list[CellResult], baseline: list[CellResult]) -> str:
    """"1 seed vs 3 seeds"."""
    return f"{seed_count(len(ours))} vs {seed_count(len(baseline))}"


def profe_target(setting: Setting) -> ProfeTarget:
    """The setting's own ProFe goal, else within a point of FedAvg on IID and above it off."""
    dataset, partition, _, nodes = setting
    default = ProfeTarget("within" if partition == "iid" else "above")
    return PROFE_TARGETS.get((dataset, partition, nodes), default)


def _versus_goal(versus: str, gap: float) -> tuple[str, bool]:
    """The comparison with student-size FedAvg's mean and whether `gap` meets it."""
    if versus == "within":
        return f"within {100 * PROFE_IID_GAP:.0f} point of FedAvg", abs(gap) <= PROFE_IID_GAP
    if versus == "at least":
        return "at least FedAvg", gap >= 0
    return "above FedAvg", gap > 0


def f1_target(where: str, name: str, cells: list[CellResult], student: list[CellResult],
              target: ProfeTarget) -> str:
    """One macro-F1 target on seed means: the figures, each goal met or not, the verdict."""
    ours, baseline = field_stats(cells, "final_f1"), field_stats(student, "final_f1")
    gap = ours.mean - baseline.mean
    goals = []
    if target.floor is not None:
        goals.append((f"mean ≥ {target.floor:.2f}", ours.mean >= target.floor))
    goals.append(_versus_goal(target.versus, gap))
    if target.bytes_share is not None:
        share = _bytes_share(cells, student)
        bytes_goal = (f"bytes per node {100 * share:.1f}% of FedAvg's, ≤ "
                      f"{100 * target.bytes_share:.0f}%")
        goals.append((bytes_goal, share <= target.bytes_share))
    collapse_goal = (f"no collapsed seed ({name} {collapse_text(cells)}, FedAvg "
                     f"{collapse_text(student)})")
    goals.append((collapse_goal, not collapsed_seeds(cells) and not collapsed_seeds(student)))
    checks = "; ".join(f"{goal}: {'yes' if ok else 'no'}" for goal, ok in goals)
    return (f"- {where}: {name} macro-F1 {ours.mean:.4f} vs student-size FedAvg "
            f"{baseline.mean:.4f} ({100 * gap:+.1f} points, {noise_verdict(ours, baseline)}; "
            f"{_seeds_beside(cells, student)}). Targets: {checks}. "
            f"{_verdict(all(ok for _, ok in goals))}")


def _bytes_share(cells: list[CellResult], baseline: list[CellResult]) -> float:
    """Seed-mean bytes per node of `cells` as a share of `baseline`'s."""
    return bytes_stats(cells).mean / bytes_stats(baseline).mean


def targets(results: list[CellResult]) -> list[str]:
    """Every target, like for like (same setting), on seed means, each with its verdict."""
    lines = [("Each method is judged at its paper's codec (ProFe int16, the others fp32) against "
              "FedAvg on the student-size model at fp32 (the ProFe paper's baseline); the "
              "teacher-size FedAvg is shown beside it. Figures are means over seeds (each run's "
              "mean over its nodes) and every line says how many seeds it rests on; a target "
              "that reads a group with a collapsed seed is missed.")]
    for setting in _settings(results):
        group = [r for r in results if r.setting == setting]
        where = setting_label(setting)
        student = _target_cells(group, STUDENT_BASELINE[0])
        teacher = _target_cells(group, TEACHER_BASELINE[0])
        profe = _target_cells(group, "profe")
        fedproto = _target_cells(group, "fedproto")
        if student and profe:
            share = _bytes_share(profe, student)
            beside = (f"; {100 * _bytes_share(profe, teacher):.1f}% of teacher-size FedAvg's"
                      if teacher else "")
            lines.append(f"- {where}: ProFe moves {100 * share:.1f}% of student-size FedAvg's "
                         f"bytes per node (target ≤ {100 * PROFE_BYTES_SHARE:.0f}%){beside} "
                         f"({_seeds_beside(profe, student)}): "
                         f"{_verdict(share <= PROFE_BYTES_SHARE)}")
        if student and fedproto:
            saving = 1.0 - _bytes_share(fedproto, student)
            lines.append(f"- {where}: FedProto moves {100 * saving:.1f}% fewer bytes per node "
                         f"than student-size FedAvg (target ≥ {100 * FEDPROTO_SAVING:.0f}%; "
                         f"{_seeds_beside(fedproto, student)}): "
                         f"{_verdict(saving >= FEDPROTO_SAVING)}")
        if student and profe:
            lines.append(f1_target(where, "ProFe", profe, student, profe_target(setting)))
        lines += _compact_targets(where, group, student, setting[1])
    return lines


def _compact_targets(where: str, group: list[CellResult], student: list[CellResult],
                     partition: str) -> list[str]:
    """ProFe at the codec below 16 bits: bytes and, on IID, F1 against student-size FedAvg."""
    compact = sorted((r for r in group if r.row == ("profe", COMPACT_CODEC)), key=lambda r: r.seed)
    if not (student and compact):
        return []
    share = _bytes_share(compact, student)
    lines = [(f"- {where}: ProFe ({COMPACT_CODEC}) moves {100 * share:.1f}% of student-size "
              f"FedAvg's bytes per node (target ≤ {100 * COMPACT_BYTES_SHARE:.0f}%; "
              f"{_seeds_beside(compact, student)}): {_verdict(share <= COMPACT_BYTES_SHARE)}")]
    if partition == "iid":
        lines.append(f1_target(where, f"ProFe ({COMPACT_CODEC})", compact, student,
                               ProfeTarget("within")))
    return lines


# ---- distillation headroom ----

@dataclass(frozen=True)
class HeadroomRow:
    """ProFe with one student width beside its no-distillation twin and FedAvg of its size."""

    student: str  # the student's share of the teacher's widths, e.g. "1/4"
    channels: tuple[int, int]  # the student's convolution widths (the teacher's: 16, 32)
    profe: str  # the matrix variants' names
    twin: str  # alpha_s = 0: the teacher never trains
    fedavg: str


# experiments/matrices/headroom.toml and headroom-half.toml; the 1/2 student's 20%-classes
# cells come from `paper`, `paper-ablation` and `paper-seeds`. The "no screen" rows are
# experiments/matrices/teacher-seeds.toml: ten seeds on one code version, the paper's
# intake (no screen, no norm bound), beside the same FedAvg.
HEADROOM_ROWS = (
    HeadroomRow("1/2", (8, 16), "profe", "profe-no-distillation", "fedavg-student"),
    HeadroomRow("1/4", (4, 8), "profe-quarter", "profe-quarter-no-distillation",
                "fedavg-quarter"),
    HeadroomRow("1/8", (2, 4), "profe-eighth", "profe-eighth-no-distillation", "fedavg-eighth"),
    HeadroomRow("1/2, no screen", (8, 16), "profe-unscreened",
                "profe-unscreened-no-distillation", "fedavg-student"),
    HeadroomRow("1/4, no screen", (4, 8), "profe-quarter-unscreened",
                "profe-quarter-unscreened-no-distillation", "fedavg-quarter"),
)


def _method_cells(group: list[CellResult], method: str) -> list[CellResult]:
    return sorted((r for r in group if r.method == method), key=lambda r: r.seed)


def cpu_text(cells: list[CellResult]) -> str:
    """Seed-mean CPU seconds per node and round, with the backend that measured them."""
    stats = field_stats([c for c in cells if c.cpu_per_round], "cpu_per_round")
    if stats is None:
        return "-"
    return f"{mean_text(stats, 2)} ({'+'.join(sorted({c.backend for c in cells}))})"


def distillation_verdict(profe: SeedStats, twin: SeedStats) -> str:
    """"above, beyond noise", "below, beyond noise", "within noise" or not testable."""
    verdict = noise_verdict(profe, twin)
    if verdict != "beyond noise":
        return verdict
    return f"{'above' if profe.mean > twin.mean else 'below'}, beyond noise"


def seeds_above(ours: list[CellResult], theirs: list[CellResult]) -> str:
    """"2 of 3": in how many shared seeds (same partition and initial models) the first
    group's final macro-F1, mean over nodes, is above the second's."""
    differences = paired_differences(ours, theirs)
    return f"{sum(d > 0 for d in differences)} of {len(differences)}"


@dataclass(frozen=True)
class PairedTest:
    """ProFe minus its twin over the seeds both ran: a paired test of the mean difference."""

    seeds: int
    above: int  # seeds in which the difference is positive
    mean: float  # mean of the per-seed differences
    std: float  # their sample standard deviation
    t: float  # mean / (std / sqrt(seeds)): Student's paired t, seeds - 1 degrees of freedom
    p: float  # exact two-sided sign-flip (permutation) p-value


def paired_differences(ours: list[CellResult], theirs: list[CellResult]) -> list[float]:
    """Per shared seed (the same partition and initial models), the first group's final
    macro-F1 minus the second's, each a mean over the run's nodes; in seed order."""
    theirs_by_seed = {c.seed: statistics.fmean(c.final_f1) for c in theirs}
    return [statistics.fmean(c.final_f1) - theirs_by_seed[c.seed]
            for c in sorted(ours, key=lambda c: c.seed) if c.seed in theirs_by_seed]


def sign_flip_p(differences: list[float]) -> float:
    """Exact two-sided p-value of the paired permutation test: the share of the 2^n sign
    assignments whose mean is at least as far from 0 as the observed one (n <= 20)."""
    n = len(differences)
    if not 0 < n <= 20:
        raise ValueError(f"sign_flip_p takes 1 to 20 differences, got {n}")
    observed = abs(sum(differences)) - 1e-12  # ties count as at least as extreme
    extreme = sum(abs(sum(d if mask >> i & 1 else -d for i, d in enumerate(differences)))
                  >= observed for mask in range(1 << n))
    return extreme / (1 << n)


def paired_test(differences: list[float]) -> PairedTest | None:
    """The paired t statistic and the exact sign-flip p-value (None under 2 seeds)."""
    if len(differences) < 2:
        return None
    mean, std = statistics.fmean(differences), statistics.stdev(differences)
    if std > 0:
        t = mean / (std / math.sqrt(len(differences)))
    else:  # every seed moved by the same amount: t is unbounded, or undefined at 0
        t = math.copysign(math.inf, mean) if mean else math.nan
    return PairedTest(seeds=len(differences), above=sum(d > 0 for d in differences),
                      mean=mean, std=std, t=t, p=sign_flip_p(differences))


# The level below which the paired test calls a difference beyond chance, and the fewest
# seeds at which the exact sign-flip p-value can fall below it (its floor is 2 / 2^n: 0.031
# at 6 seeds, 0.0625 at 5).
PAIRED_ALPHA = 0.05
PAIRED_MIN_SEEDS = 6


def paired_table(results: list[CellResult]) -> list[str]:
    """Per student width and setting with at least PAIRED_MIN_SEEDS shared seeds: ProFe
    minus its twin, paired by seed, with its t statistic and exact permutation p-value."""
    rows = []
    for row in HEADROOM_ROWS:
        for setting in _settings(results):
            group = [r for r in results if r.setting == setting]
            test = paired_test(paired_differences(_method_cells(group, row.profe),
                                                  _method_cells(group, row.twin)))
            if test is None or test.seeds < PAIRED_MIN_SEEDS:
                continue
            verdict = (("ProFe above" if test.mean > 0 else "ProFe below")
                       if test.p < PAIRED_ALPHA else "no difference shown")
            rows.append(f"| {row.student} | {setting[0]} | {setting[1]} | {test.seeds} | "
                        f"{test.above} of {test.seeds} | {100 * test.mean:+.2f} | "
                        f"{100 * test.std:.2f} | {test.t:.2f} ({test.seeds - 1}) | "
                        f"{test.p:.4f} | {verdict} |")
    if not rows:
        return []
    return [(f"Paired over seeds (settings with at least {PAIRED_MIN_SEEDS} seeds of both): "
             "each seed's ProFe minus its twin's final macro-F1 (means over nodes, points). "
             "t is Student's paired t (degrees of freedom in brackets); p is the exact "
             "two-sided sign-flip permutation p-value over all 2^n sign assignments of the "
             f"differences; a difference is called beyond chance when p < {PAIRED_ALPHA:g}."),
            "", ("| student | dataset | partition | seeds | seeds above | mean difference | "
                 "std of differences | t (df) | p | verdict |"),
            "|---|---|---|---|---|---|---|---|---|---|", *rows]


def headroom_table(results: list[CellResult]) -> list[str]:
    """ProFe minus its no-distillation twin per student width and setting, FedAvg of the
    student's size beside them, the CPU each costs per round, and a verdict per width."""
    lines = [("ProFe (int16) at each student width beside its no-distillation twin (alpha_s = "
              "0: the teacher never trains, the rest of ProFe unchanged) and FedAvg (fp32) of a "
              "model the student's size; the teacher is always 16, 32 channels. Final macro-F1, "
              "argmax, global test; the difference is judged as in the comparisons below "
              f"(beyond noise: more than {NOISE_FACTOR:g} × the larger standard deviation "
              "across seeds); \"seeds above\" counts the seeds (the same partition and "
              "initial models for both) in which ProFe ends above its twin. CPU: seconds per "
              "node and round after round 0 (training, exchange, "
              "aggregation, evaluation), from the CPU time the records hold: a sim node's "
              "thread, a local node's process; runs before the records held it show -."), "",
             ("| student | dataset | partition | ProFe | no distillation | difference (points) "
              "| verdict | seeds above | FedAvg, student's size | CPU s/round: ProFe | no "
              "distillation | FedAvg |"), "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts: dict[str, list[str]] = defaultdict(list)
    for row in HEADROOM_ROWS:
        for setting in _settings(results):
            group = [r for r in results if r.setting == setting]
            profe, twin = _method_cells(group, row.profe), _method_cells(group, row.twin)
            if not (profe and twin):
                continue
            fedavg = _method_cells(group, row.fedavg)
            ours, theirs = field_stats(profe, "final_f1"), field_stats(twin, "final_f1")
            verdict = distillation_verdict(ours, theirs)
            verdicts[row.student].append(f"{verdict} on {setting[0]} {setting[1]}")
            width = f"{row.student} ({row.channels[0]}, {row.channels[1]})"
            lines.append(f"| {width} | {setting[0]} | {setting[1]} | {seeds_text(ours)} | "
                         f"{seeds_text(theirs)} | {100 * (ours.mean - theirs.mean):+.1f} | "
                         f"{verdict} | {seeds_above(profe, twin)} | "
                         f"{seeds_text(field_stats(fedavg, 'final_f1'))} | "
                         f"{cpu_text(profe)} | {cpu_text(twin)} | {cpu_text(fedavg)} |")
    if not verdicts:
        return lines[:2] + ["No setting holds ProFe beside its no-distillation twin."]
    lines.append("")
    for row in HEADROOM_ROWS:
        if verdicts[row.student]:
            lines.append(f"- Student {row.student}: ProFe against its no-distillation twin: "
                         f"{'; '.join(verdicts[row.student])}.")
    paired = paired_table(results)
    return lines + ([""] + paired if paired else [])


# ---- each paper's headline setting ----

def headline_verdict(paper: PaperFigure, cells: list[CellResult]) -> str:
    """"met", "missed …", "not run" (no such cell) or "no figure" (none in the paper text)."""
    if not cells:
        return "not run"
    if paper.figure is None:
        return "no figure"
    if paper.split == "global_test" and collapsed_seeds(cells):
        return f"missed (collapsed in {collapse_text(cells)})"
    gap = field_stats(cells, METRIC_FIELDS[(paper.metric, paper.split)]).mean - paper.figure
    if paper.floor:
        return "met" if gap >= 0 else f"missed by {100 * -gap:.1f} points"
    if abs(gap) <= REACH:
        return "met"
    if gap > 0:
        return (f"missed: {100 * gap:.1f} points above the figure (a different setting or "
                "metric)")
    return f"missed: {100 * -gap:.1f} points below the figure"


def _headline_row(key: tuple[str, str, str], paper: PaperFigure,
                  cells: list[CellResult]) -> str:
    """One table row: the paper's figure and source, ours over seeds, the verdict."""
    method, dataset, partition = key
    split = paper.split.replace("_", " ")
    if paper.figure is None:
        figure = "paper figure not in the stored text"
    else:
        figure = f"{'≥ ' if paper.floor else ''}{paper.figure:.4f}"
    if cells:
        ours = seeds_text(field_stats(cells, METRIC_FIELDS[(paper.metric, paper.split)]), 4)
        first = cells[0]
        run = f"{first.codec}, {first.rule}, {first.topology}, {first.nodes} nodes"
    else:
        ours, run = "-", "-"
    return (f"| {method} | {dataset} | {partition} | {paper.metric}, {split} | {figure} | "
            f"{paper.source} | {ours} | {run} | {headline_verdict(paper, cells)} |")


def headline_table(results: list[CellResult]) -> list[str]:
    """One row per paper figure (one per setting we ran it in), in the paper's own metric."""
    lines = [("Each paper's own figure in its own metric and test set (ProFe: macro-F1; FedPR, "
              "FedHP and FedProto: accuracy; FedProto's own paper on local test sets), beside "
              "ours under the method's paper's codec and prediction rule, as the mean over seeds "
              f"± the standard deviation across them. **met**: within {100 * REACH:.0f} points "
              "of the figure, or at or above it where the figure is a floor; a run collapsed on "
              "the global test set is missed; **not run**: no such cell in these results; **no "
              "figure**: the paper's figure is not in the text we hold."), "",
             ("| method | dataset | partition | metric | paper | source | ours | our run | "
              "verdict |"), "|---|---|---|---|---|---|---|---|---|"]
    for key, paper in PAPER_FIGURES.items():
        method, dataset, partition = key
        chosen = _target_cells([r for r in results if (r.dataset, r.partition) ==
                                (dataset, partition)], method)
        settings = _settings(chosen)
        if not settings:
            lines.append(_headline_row(key, paper, []))
        for setting in settings:
            lines.append(_headline_row(key, paper, [r for r in chosen if r.setting == setting]))
    return lines


# ---- the report ----

def render(results: list[CellResult], runs: list[dict], notes: str, plots: list[Path],
           title: str) -> str:
    """The report's markdown: a pure function of the cells, the invocations and the notes."""
    sections = [f"# Experiment report: {title}", ""]
    for run in runs:
        cells = f" ({len(run['cells'])} cells)" if run.get("cells") else ""
        sections += [f"Produced by `{run['command']}` on commit `{run['commit']}`{cells}.", ""]
    sections += [(f"Regenerate this file from the committed archive: `python -m experiments.report "
                 f"experiments/reports/{title}/{ARCHIVE_NAME}`."), ""]
    if notes:
        sections += [notes.rstrip(), ""]
    groups = Counter((r.row, r.setting) for r in results)
    seeds = "; ".join(f"{count} with {seed_count(size)}"
                      for size, count in sorted(Counter(groups.values()).items()))
    sections += [
        ("Every number is read from the node result files of the runs, archived beside this "
         f"report. {len(results)} cells in {len(groups)} groups that differ only by seed "
         f"({seeds}). {SEED_LEGEND} F1 figures use the "
         "prediction rule each method's paper reports (argmax of the logits for ProFe, FedAvg "
         "and FedProc; nearest prototype for FedProto, FedHP and FedPR); the other rule is shown "
         f"beside it. A cell where {100 * COLLAPSE_SHARE:.0f}% or more of the predictions fall "
         "in one class is flagged **collapsed** instead of being read as an F1."), ""]
    by_section = defaultdict(list)
    for r in results:
        by_section[(r.partition, r.topology, r.nodes)].append(r)
    for (partition, topology, nodes), group in sorted(by_section.items()):
        sections += [
            f"## {partition}, {topology}, {nodes} nodes", "",
            "### Table II: bytes received per node", "",
            metric_table(group, "bytes_received", 1e6, "MB"), "",
            "### Table II: bytes sent per node", "",
            metric_table(group, "bytes_sent", 1e6, "MB"), "",
            "### Table III: elapsed time per node", "",
            ("Wall: seconds on this machine's clock, with every node of the cell sharing its 2 "
             "cores; virtual: the simulation's clock (`--backend sim`: each node's measured "
             "compute plus the wire's modelled transfers). Only figures of the same clock are "
             "compared."), "",
            metric_table(group, "elapsed", 1.0, "seconds", clocked=True), "",
            "### Final macro-F1", "",
            f1_table(group), "",
            f"### Round {ROUND_ONE} and collapses", "",
            round_one_table(group), "",
        ]
    sections += ["## Figure 2: macro-F1 per round (global test, each paper's rule)", ""]
    sections += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    sections += ["## Distillation headroom: ProFe against its no-distillation twin", ""]
    sections += headroom_table(results) + [""]
    sections += ["## Comparisons with the baseline", ""] + comparisons(results) + [""]
    sections += ["## Targets", ""] + targets(results) + [""]
    sections += ["## Each paper's headline setting", ""] + headline_table(results) + [""]
    profiled = phase_table(results)
    if profiled:
        sections += ["## Where a node-round's CPU went", ""] + profiled + [""]
    return "\n".join(sections)


def phase_table(results: list[CellResult]) -> list[str]:
    """Per cell that recorded phases: CPU seconds per node-round and each group's share of
    them (rounds after round 0; node.profile), the share that is not training last."""
    rows = []
    for cell in sorted((c for c in results if c.phases), key=lambda c: c.key):
        shares = group_shares(cell.phases)
        if not shares:
            continue
        total = sum(cell.phases.values())
        node_rounds = len(cell.final_f1) * (len(cell.f1_per_round) - 1)
        rows.append(f"| {cell.key} | {total / max(node_rounds, 1):.2f} | "
                    + " | ".join(f"{shares[g]:.0%}" for g in PHASE_GROUPS)
                    + f" | {shares['other']:.0%} | **{1.0 - shares['training']:.0%}** |")
    if not rows:
        return []
    header = ("| cell | CPU s per node-round | "
              + " | ".join(PHASE_GROUPS) + " | other | not training |")
    return [header, "|---|---|" + "---|" * (len(PHASE_GROUPS) + 2), *rows, "",
            ("Groups of `node.profile.PHASES`: training (train, teacher), evaluation (both "
            "test sets), screens (distance, validation, prototype validation, influence), "
            "aggregation (the rest of it), messages (encode, decode, wait).")]


def write_report(archive: Path, out_dir: Path) -> Path:
    """Write report.md and the plots into `out_dir` from an archive; return the report path."""
    runs, records = read_archive(archive)
    results = [c for c in (parse_record(r) for r in records) if c is not None]
    if not results:
        raise SystemExit(f"{archive}: no finished cells")
    out_dir.mkdir(parents=True, exist_ok=True)
    notes_path = out_dir / "notes.md"
    notes = notes_path.read_text() if notes_path.is_file() else ""
    plots = plot_f1(results, out_dir)
    path = out_dir / "report.md"
    path.write_text(render(results, runs, notes, plots, out_dir.name))
    return path


def archive_results(results_root: Path, out_dir: Path, command: str = "") -> Path:
    """Archive every finished cell under `results_root` (with its run-info) into `out_dir`."""
    records = [r for r in collect_records(results_root) if parse_record(r) is not None]
    if not records:
        raise SystemExit(f"no finished cells under {results_root}")
    info_path = results_root / "run-info.json"
    runs = json.loads(info_path.read_text()) if info_path.is_file() else []
    if command or not runs:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
        runs = [{"command": command, "commit": commit}]
    archive = out_dir / ARCHIVE_NAME
    write_archive(archive, runs, records)
    return archive


def add_to_archive(results_root: Path, archive: Path, command: str = "") -> Path:
    """Add the finished cells under `results_root` to an existing archive (a cell of the same
    key is replaced) together with the invocations that produced them."""
    runs, records = read_archive(archive)
    added = archive_results(results_root, results_root / ".archive", command)
    new_runs, new_records = read_archive(added)
    keys = {r["key"] for r in new_records}
    records = [r for r in records if r["key"] not in keys] + new_records
    write_archive(archive, runs + [r for r in new_runs if r not in runs], records)
    added.unlink()
    added.parent.rmdir()
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path,
                        help=f"experiments/results/<matrix>, or a report's {ARCHIVE_NAME}")
    parser.add_argument("--out", type=Path, help="default experiments/reports/<matrix>, or the "
                                                 "archive's folder")
    parser.add_argument("--command", default="", help="the command that produced the results")
    parser.add_argument("--into", type=Path, help="a report folder whose archive the results "
                                                  "are added to")
    args = parser.parse_args(argv)
    if args.into is not None:
        if not args.source.is_dir() or not (args.into / ARCHIVE_NAME).is_file():
            print(f"experiments: --into needs a results folder and a report folder with "
                  f"{ARCHIVE_NAME} ({args.source}, {args.into})", file=sys.stderr)
            return 2
        archive = add_to_archive(args.source, args.into / ARCHIVE_NAME, args.command)
        print(write_report(archive, args.into))
        return 0
    if args.source.is_file():
        archive = args.source
        out = args.out or archive.parent
    elif args.source.is_dir():
        out = args.out or Path("experiments/reports") / args.source.name
        archive = archive_results(args.source, out, args.command)
    else:
        print(f"experiments: {args.source}: no such results folder or archive", file=sys.stderr)
        return 2
    print(write_report(archive, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
