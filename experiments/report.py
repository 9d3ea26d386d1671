"""Experiment report: the ProFe paper's Table II (bytes), Table III (time), the final F1
table, Figure 2 (macro-F1 per round) and the targets, from an archive of node results.

    python -m experiments.report experiments/results/paper [--out experiments/reports/paper]
        archives every finished cell into OUT/archive.jsonl.gz, then writes OUT/report.md
    python -m experiments.report experiments/reports/paper/archive.jsonl.gz
        rebuilds report.md and the plots beside the archive from the archive alone
    python -m experiments.report experiments/results/paper-int8 --into experiments/reports/paper
        adds the finished cells (and their invocation) to that report's archive, then rebuilds

`notes.md` in the output folder, when present, is included verbatim.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.record import NodeRecord

ARCHIVE_NAME = "archive.jsonl.gz"
STUDENT_BASELINE = ("fedavg-student", "fp32")  # the ProFe paper's baseline: the student's size
TEACHER_BASELINE = ("fedavg", "fp32")  # FedAvg on the teacher-size model, for comparison
METHOD_ORDER = ("fedavg-student", "fedavg", "profe", "fedproto", "fedproc", "fedhp", "fedpr")
# A cell whose predictions give at least this share to one class is a collapsed predictor:
# the global test sets are balanced (largest MNIST class 11%), so no working model gets near.
COLLAPSE_SHARE = 0.5
# Each paper's own figure, on the partition it was measured on: (method, dataset, partition).
PAPER_FIGURES = {
    ("profe", "mnist", "iid"): (0.95, "ProFe paper, IV-A: above 95% macro-F1 on MNIST IID"),
    ("profe", "mnist", "classes:0.2"): (
        0.80, "ProFe paper, IV-A: 80% macro-F1 on MNIST with 20% of the classes per node"),
    ("fedavg-student", "mnist", "iid"): (
        0.95, "ProFe paper, Fig. 2: its FedAvg baseline is above 95% on MNIST IID"),
    ("fedproto", "mnist", "iid"): (
        0.844, "FedHP paper, Table 1: FedProto 84.40% accuracy on MNIST IID"),
    ("fedhp", "mnist", "iid"): (0.9604, "FedHP paper, Table 1: 96.04% accuracy on MNIST IID"),
    ("fedpr", "mnist", "dirichlet:0.05"): (
        0.9462, "FedPR paper: 94.62% average accuracy on MNIST, Dir(0.05)"),
}
# The ProFe targets are floors; every other figure is "within reach" two-sided.
PAPER_FLOORS = {("profe", "mnist", "iid"), ("profe", "mnist", "classes:0.2")}
REACH = 0.05  # within 5 points of a paper's figure
PROFE_IID_GAP = 0.01  # ProFe within 1 point of student-size FedAvg on IID
PROFE_BYTES_SHARE = 0.60  # ProFe bytes per node at most 60% of student-size FedAvg's
COMPACT_CODEC = "int8"  # the codec below 16 bits, judged on bytes and F1 beside the baseline
COMPACT_BYTES_SHARE = 0.25  # ProFe int8: at most 25% of student-size FedAvg's bytes per node
FEDPROTO_SAVING = 0.90  # FedProto at least 90% fewer bytes than student-size FedAvg


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
    top_class_share: tuple[float, ...]
    other_rules: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]  # rule -> (F1, share)
    f1_per_round: tuple[float, ...]  # mean over nodes, round 0 first

    @property
    def row(self) -> tuple[str, str]:
        return self.method, self.codec


def codec_label(exchange: dict) -> str:
    """"int16", or "int16/fp32" when prototypes travel with a codec of their own."""
    model, prototypes = exchange["codec"], exchange.get("prototype_codec") or exchange["codec"]
    return model if prototypes == model else f"{model}/{prototypes}"


# ---- archive: one JSON line per cell, gzip without a timestamp (byte-stable) ----

def _config_file(run_dir: Path) -> Path:
    """The run's resolved config: federation.json (config.json in runs before it)."""
    federation = run_dir / "federation.json"
    return federation if federation.is_file() else run_dir / "config.json"


def collect_records(root: Path) -> list[dict[str, Any]]:
    """Every cell folder under `root` with a summary: its config, cell and node results."""
    records = []
    for summary_path in sorted(root.glob("*/summary.json")):
        run_dir = summary_path.parent
        cell_path = run_dir / "cell.json"
        records.append({
            "key": run_dir.name,
            "cell": json.loads(cell_path.read_text()) if cell_path.is_file() else None,
            "config": json.loads(_config_file(run_dir).read_text())["config"],
            "nodes": [json.loads(p.read_text()) for p in
                      sorted(run_dir.glob("node-*.json"), key=lambda p: int(p.stem[5:]))]})
    return records


def write_archive(path: Path, runs: list[dict], records: list[dict]) -> None:
    """The invocations, then one line per cell; lossless, and the same bytes for the same input."""
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


def _partition(data: dict) -> str:
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
    return CellResult(
        key=record["key"], method=method, codec=codec_label(config["exchange"]),
        dataset=config["data"]["dataset"], partition=_partition(config["data"]),
        topology=config["topology"]["kind"], nodes=config["nodes"], seed=config["seed"],
        rule=rule,
        bytes_sent=tuple(n.bytes_sent for n in finished),
        bytes_received=tuple(n.bytes_received for n in finished),
        elapsed=tuple(n.elapsed_seconds for n in finished),
        final_f1=tuple(_final(n, "global_test")[0] for n in finished),
        final_local_f1=tuple(_final(n, "local_test")[0] for n in finished),
        top_class_share=tuple(_final(n, "global_test")[1] for n in finished),
        other_rules={r: (tuple(_final(n, "global_test", r)[0] for n in finished),
                         tuple(_final(n, "global_test", r)[1] for n in finished))
                     for r in others},
        f1_per_round=tuple(statistics.fmean(n.rounds[i].global_test.f1 for n in finished)
                           for i in range(rounds)))


# ---- tables ----

def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def pooled(cells: list[CellResult], field: str) -> list[float]:
    """One field's per-node values pooled over nodes and seeds."""
    return [v for cell in cells for v in getattr(cell, field)]


def label(row: tuple[str, str]) -> str:
    return f"{row[0]} ({row[1]})"


def _rows(results: list[CellResult]) -> list[tuple[str, str]]:
    return sorted({r.row for r in results}, key=lambda k: (
        METHOD_ORDER.index(k[0]) if k[0] in METHOD_ORDER else 99, k))


def _select(results: list[CellResult], row: tuple[str, str], dataset: str) -> list[CellResult]:
    return [r for r in results if r.row == row and r.dataset == dataset]


def _relative(value: float, baseline: float | None, is_baseline: bool) -> str:
    if is_baseline:
        return "baseline"
    if not baseline:
        return "-"
    change = 100.0 * (value - baseline) / baseline
    arrow = "↓" if change < -0.05 else "↑" if change > 0.05 else "="
    return f"{arrow} {abs(change):.1f}%"


def metric_table(results: list[CellResult], field: str, scale: float, unit: str) -> str:
    """Mean ± std over nodes and seeds per method and dataset, beside both FedAvg baselines."""
    lines = [(f"| method (codec) | dataset | {unit} | vs FedAvg student-size | "
             "vs FedAvg teacher-size |"), "|---|---|---|---|---|"]
    for dataset in sorted({r.dataset for r in results}):
        baselines = []
        for base in (STUDENT_BASELINE, TEACHER_BASELINE):
            chosen = _select(results, base, dataset)
            baselines.append(mean_std([v / scale for v in pooled(chosen, field)])[0]
                             if chosen else None)
        for row in _rows(results):
            chosen = _select(results, row, dataset)
            if not chosen:
                continue
            mean, std = mean_std([v / scale for v in pooled(chosen, field)])
            vs = [_relative(mean, b, row == base)
                  for b, base in zip(baselines, (STUDENT_BASELINE, TEACHER_BASELINE))]
            lines.append(f"| {label(row)} | {dataset} | {mean:.3f} ± {std:.3f} | "
                         f"{vs[0]} | {vs[1]} |")
    return "\n".join(lines)


def _f1_text(f1s: list[float], shares: list[float]) -> str:
    """"0.951 ± 0.002", or the collapse flag instead of an F1 that means nothing."""
    share = statistics.fmean(shares) if shares else float("nan")
    mean, std = mean_std(f1s)
    if share >= COLLAPSE_SHARE:
        return f"**collapsed** ({100 * share:.0f}% of predictions in one class; F1 {mean:.3f})"
    return f"{mean:.3f} ± {std:.3f}"


def is_collapsed(cells: list[CellResult]) -> bool:
    """True when the cells' reported predictions put COLLAPSE_SHARE or more in one class."""
    shares = pooled(cells, "top_class_share")
    return bool(shares) and statistics.fmean(shares) >= COLLAPSE_SHARE


def f1_table(results: list[CellResult]) -> str:
    """Final macro-F1 under each paper's rule, the other rule beside it, and the local test."""
    lines = [("| method (codec) | dataset | paper's rule | global F1, paper's rule | "
             "global F1, other rule | local-test F1, paper's rule |"), "|---|---|---|---|---|---|"]
    for dataset in sorted({r.dataset for r in results}):
        for row in _rows(results):
            chosen = _select(results, row, dataset)
            if not chosen:
                continue
            main = _f1_text(pooled(chosen, "final_f1"), pooled(chosen, "top_class_share"))
            others = []
            for rule in sorted({r for c in chosen for r in c.other_rules}):
                f1s = [v for c in chosen for v in c.other_rules.get(rule, ((), ()))[0]]
                shares = [v for c in chosen for v in c.other_rules.get(rule, ((), ()))[1]]
                others.append(f"{rule}: {_f1_text(f1s, shares)}")
            local_mean, local_std = mean_std(pooled(chosen, "final_local_f1"))
            lines.append(f"| {label(row)} | {dataset} | {chosen[0].rule} | {main} | "
                         f"{'; '.join(others) or '-'} | {local_mean:.3f} ± {local_std:.3f} |")
    return "\n".join(lines)


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
    return [r for r in group if r.row == (method, codec)]


def _bytes_per_node(cells: list[CellResult]) -> float:
    """Mean bytes sent plus received per node."""
    return statistics.fmean(s + r for c in cells for s, r in zip(c.bytes_sent, c.bytes_received))


def _f1(cells: list[CellResult]) -> float:
    return statistics.fmean(pooled(cells, "final_f1"))


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def targets(results: list[CellResult]) -> list[str]:
    """Every target, like for like (same dataset and partition), each with its verdict."""
    lines = [("Each method is judged at its paper's codec (ProFe int16, the others fp32) against "
             "FedAvg on the student-size model at fp32 (the ProFe paper's baseline); the "
             "teacher-size FedAvg is shown beside it. A collapsed cell never meets a target.")]
    for dataset in sorted({r.dataset for r in results}):
        for partition in sorted({r.partition for r in results if r.dataset == dataset}):
            group = [r for r in results if (r.dataset, r.partition) == (dataset, partition)]
            where = f"{dataset} {partition}"
            student = _target_cells(group, STUDENT_BASELINE[0])
            teacher = _target_cells(group, TEACHER_BASELINE[0])
            profe = _target_cells(group, "profe")
            fedproto = _target_cells(group, "fedproto")
            if student and profe:
                share = _bytes_per_node(profe) / _bytes_per_node(student)
                beside = (f"; {100 * _bytes_per_node(profe) / _bytes_per_node(teacher):.1f}% "
                          "of teacher-size FedAvg's" if teacher else "")
                lines.append(f"- {where}: ProFe moves {100 * share:.1f}% of student-size "
                             f"FedAvg's bytes per node (target ≤ {100 * PROFE_BYTES_SHARE:.0f}%)"
                             f"{beside}: {_verdict(share <= PROFE_BYTES_SHARE)}")
            if student and fedproto:
                saving = 1.0 - _bytes_per_node(fedproto) / _bytes_per_node(student)
                lines.append(f"- {where}: FedProto moves {100 * saving:.1f}% fewer bytes per "
                             f"node than student-size FedAvg (target ≥ "
                             f"{100 * FEDPROTO_SAVING:.0f}%): {_verdict(saving >= FEDPROTO_SAVING)}")
            if student and profe:
                gap = _f1(profe) - _f1(student)
                collapsed = is_collapsed(profe) or is_collapsed(student)
                if partition == "iid":
                    ok = abs(gap) <= PROFE_IID_GAP
                    goal = f"within {100 * PROFE_IID_GAP:.0f} point"
                else:
                    ok = gap > 0
                    goal = "above FedAvg"
                lines.append(f"- {where}: ProFe macro-F1 {_f1(profe):.4f} vs student-size "
                             f"FedAvg {_f1(student):.4f} ({100 * gap:+.1f} points; target "
                             f"{goal}): {_verdict(ok and not collapsed)}"
                             f"{' (a collapsed predictor)' if collapsed else ''}")
            lines += _compact_targets(where, group, student, partition)
    for (method, dataset, partition), (figure, source) in PAPER_FIGURES.items():
        cells = _target_cells([r for r in results if (r.dataset, r.partition) ==
                               (dataset, partition)], method)
        where = f"{dataset} {partition}"
        if not cells:
            lines.append(f"- {where}: {method} paper figure {figure:.3f} ({source}): no such "
                         "cell in these results, so not compared")
            continue
        value, gap = _f1(cells), _f1(cells) - figure
        if is_collapsed(cells):
            verdict = "MISSED (a collapsed predictor)"
        elif (method, dataset, partition) in PAPER_FLOORS:
            verdict = "met" if gap >= 0 else f"MISSED by {100 * -gap:.1f} points"
        elif gap > REACH:
            verdict = (f"ABOVE the paper's figure by {100 * gap:.1f} points: not a reproduction "
                       "of it (different setting or metric)")
        else:
            verdict = ("met" if gap >= -REACH
                       else f"MISSED by {100 * (-gap - REACH):.1f} points beyond the reach")
        goal = (f"≥ {figure:.3f}" if (method, dataset, partition) in PAPER_FLOORS
                else f"within {100 * REACH:.0f} points of {figure:.3f}")
        lines.append(f"- {where}: {method} macro-F1 {value:.4f} ({cells[0].rule}) vs {source} "
                     f"(target {goal}): {verdict}")
    return lines


def _compact_targets(where: str, group: list[CellResult], student: list[CellResult],
                     partition: str) -> list[str]:
    """ProFe at the codec below 16 bits: bytes and, on IID, F1 against student-size FedAvg."""
    compact = [r for r in group if r.row == ("profe", COMPACT_CODEC)]
    if not (student and compact):
        return []
    share = _bytes_per_node(compact) / _bytes_per_node(student)
    lines = [(f"- {where}: ProFe ({COMPACT_CODEC}) moves {100 * share:.1f}% of student-size "
              f"FedAvg's bytes per node (target ≤ {100 * COMPACT_BYTES_SHARE:.0f}%): "
              f"{_verdict(share <= COMPACT_BYTES_SHARE)}")]
    if partition == "iid":
        gap = _f1(compact) - _f1(student)
        collapsed = is_collapsed(compact) or is_collapsed(student)
        lines.append(f"- {where}: ProFe ({COMPACT_CODEC}) macro-F1 {_f1(compact):.4f} vs "
                     f"student-size FedAvg {_f1(student):.4f} ({100 * gap:+.1f} points; target "
                     f"within {100 * PROFE_IID_GAP:.0f} point): "
                     f"{_verdict(abs(gap) <= PROFE_IID_GAP and not collapsed)}")
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
    sections += [
        ("Every number is read from the node result files of the runs, archived beside this "
        f"report; mean ± std over nodes and seeds. {len(results)} cells. F1 figures use the "
        "prediction rule each method's paper reports (argmax of the logits for ProFe, FedAvg "
        "and FedProc; nearest prototype for FedProto, FedHP and FedPR); the other rule is shown "
        f"beside it. A cell where {100 * COLLAPSE_SHARE:.0f}% or more of the predictions fall "
        "in one class is flagged **collapsed** instead of being read as an F1."), ""]
    groups = defaultdict(list)
    for r in results:
        groups[(r.partition, r.topology, r.nodes)].append(r)
    for (partition, topology, nodes), group in sorted(groups.items()):
        sections += [
            f"## {partition}, {topology}, {nodes} nodes", "",
            "### Table II: bytes received per node", "",
            metric_table(group, "bytes_received", 1e6, "MB"), "",
            "### Table II: bytes sent per node", "",
            metric_table(group, "bytes_sent", 1e6, "MB"), "",
            "### Table III: elapsed time per node", "",
            metric_table(group, "elapsed", 1.0, "seconds"), "",
            "### Final macro-F1", "",
            f1_table(group), "",
        ]
    sections += ["## Figure 2: macro-F1 per round (global test, each paper's rule)", ""]
    sections += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    sections += ["## Targets", ""] + targets(results) + [""]
    return "\n".join(sections)


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
