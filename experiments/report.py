"""Generate the experiment report from result files: the ProFe paper's Table II (bytes),
Table III (time), Figure 2 (macro-F1 per round) and the targets, in one markdown file.

    python -m experiments.report experiments/results/cpu [--out experiments/reports/cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BASELINE = ("fedavg", "fp32")
ALGORITHM_ORDER = ("fedavg", "profe", "fedproto", "fedproc", "fedhp", "fedpr")
# Macro-F1 (or accuracy) on MNIST IID as each method's paper reports it, for the targets.
PAPER_MNIST_IID = {
    "fedavg": (0.95, "ProFe paper, Fig. 2: the FedAvg baseline is above 95% on MNIST IID"),
    "profe": (0.95, "ProFe paper, IV-A: above 95% F1 on MNIST IID"),
    "fedproto": (0.84, "FedHP paper, Table 1: FedProto 84.40% accuracy on MNIST IID"),
    "fedhp": (0.96, "FedHP paper, Table 1: 96.04% accuracy on MNIST IID"),
    "fedpr": (0.946, "FedPR paper: 94.62% average accuracy on MNIST, Dir(0.05) (no IID run)"),
    "fedproc": (0.95, "no MNIST figure in the FedProc paper; held to the FedAvg level"),
}
F1_REACH = 0.05  # "within reach": at most 5 points below the paper's figure


@dataclass(frozen=True)
class CellResult:
    """One finished federation: its coordinates and per-node measurements."""

    key: str
    algorithm: str
    codec: str
    dataset: str
    partition: str
    topology: str
    nodes: int
    seed: int
    bytes_sent: tuple[int, ...]
    bytes_received: tuple[int, ...]
    elapsed: tuple[float, ...]
    final_f1: tuple[float, ...]
    f1_per_round: tuple[float, ...]  # mean over nodes, round 0 first


def codec_label(exchange: dict) -> str:
    """"int16", or "int16/fp32" when prototypes travel with a codec of their own."""
    model, prototypes = exchange["codec"], exchange.get("prototype_codec") or exchange["codec"]
    return model if prototypes == model else f"{model}/{prototypes}"


def load_results(root: Path) -> list[CellResult]:
    """Every cell folder under `root` that has a summary and node results."""
    out = []
    for summary_path in sorted(root.glob("*/summary.json")):
        run_dir = summary_path.parent
        config = json.loads((run_dir / "config.json").read_text())["config"]
        nodes = [json.loads(p.read_text()) for p in sorted(run_dir.glob("node-*.json"))]
        finished = [n for n in nodes if n.get("status") == "finished"]
        if not finished:
            continue
        data = config["data"]
        partition = data["partition"]
        if partition == "classes":
            partition = f"classes:{data['classes_fraction']:g}"
        elif partition == "dirichlet":
            partition = f"dirichlet:{data['alpha']:g}"
        rounds = min(len(n["rounds"]) for n in finished)
        out.append(CellResult(
            key=run_dir.name, algorithm=config["algorithm"], codec=codec_label(config["exchange"]),
            dataset=data["dataset"], partition=partition, topology=config["topology"]["kind"],
            nodes=config["nodes"], seed=config["seed"],
            bytes_sent=tuple(n["bytes_sent"] for n in finished),
            bytes_received=tuple(n["bytes_received"] for n in finished),
            elapsed=tuple(n["elapsed_seconds"] for n in finished),
            final_f1=tuple(n["rounds"][-1]["global_test"]["f1"] for n in finished),
            f1_per_round=tuple(statistics.fmean(n["rounds"][r]["global_test"]["f1"]
                                                for n in finished) for r in range(rounds))))
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0 for a single value)."""
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def pooled(cells: list[CellResult], field: str) -> list[float]:
    """One field's per-node values pooled over nodes and seeds."""
    return [v for cell in cells for v in getattr(cell, field)]


def label(algorithm: str, codec: str) -> str:
    return f"{algorithm} ({codec})"


def _rows(results: list[CellResult]) -> list[tuple[str, str]]:
    keys = {(r.algorithm, r.codec) for r in results}
    return sorted(keys, key=lambda k: (ALGORITHM_ORDER.index(k[0])
                                       if k[0] in ALGORITHM_ORDER else 99, k[1]))


def _relative(value: float, baseline: float | None) -> str:
    if not baseline:
        return ""
    change = round(100.0 * (value - baseline) / baseline)
    return f" ({'↓' if change < 0 else '↑' if change > 0 else '='} {abs(change)}%)"


def metric_table(results: list[CellResult], field: str, scale: float, unit: str,
                 relative: bool = True) -> str:
    """Rows = algorithm (codec), columns = datasets; mean ± std over nodes and seeds."""
    datasets = sorted({r.dataset for r in results})
    lines = [f"| algorithm | {' | '.join(datasets)} |", "|---|" + "---|" * len(datasets)]
    for algorithm, codec in _rows(results):
        cells = []
        for dataset in datasets:
            chosen = [r for r in results if (r.algorithm, r.codec, r.dataset) ==
                      (algorithm, codec, dataset)]
            base = [r for r in results if (r.algorithm, r.codec, r.dataset) ==
                    (*BASELINE, dataset)]
            if not chosen:
                cells.append("-")
                continue
            mean, std = mean_std([v / scale for v in pooled(chosen, field)])
            base_mean = mean_std([v / scale for v in pooled(base, field)])[0] if base else None
            if not relative:
                note = ""
            elif (algorithm, codec) == BASELINE:
                note = " (baseline)"
            else:
                note = _relative(mean, base_mean)
            cells.append(f"{mean:.3f} ± {std:.3f}{note}")
        lines.append(f"| {label(algorithm, codec)} | {' | '.join(cells)} |")
    return f"({unit})\n\n" + "\n".join(lines)


def plot_f1(results: list[CellResult], out_dir: Path) -> list[Path]:
    """Figure 2: macro-F1 per round, a line per algorithm, a panel per partition; per dataset."""
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
            for algorithm, codec in rows:
                cells = [r for r in results if (r.dataset, r.partition, r.algorithm, r.codec) ==
                         (dataset, partition, algorithm, codec)]
                if not cells:
                    continue
                rounds = min(len(c.f1_per_round) for c in cells)
                curve = [statistics.fmean(c.f1_per_round[i] for c in cells)
                         for i in range(rounds)]
                axis.plot(range(rounds), curve, marker="o", markersize=3,
                          color=colours[(algorithm, codec)], label=label(algorithm, codec))
            axis.set_title(f"{dataset}, {partition}")
            axis.set_xlabel("round")
            axis.grid(alpha=0.3)
        axes[0][0].set_ylabel("macro-F1 (global test)")
        axes[0][0].set_ylim(0.0, 1.0)
        handles = {h.get_label(): h for axis in axes[0] for h in axis.get_lines()}
        axes[0][-1].legend(handles.values(), handles.keys(), fontsize=7, loc="lower right")
        figure.tight_layout()
        path = out_dir / f"f1_{dataset}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    return paths


# The codec each method is judged with in the targets: the paper's int16 for ProFe, fp32 else.
TARGET_CODECS = {"profe": "int16"}


def _target_cells(group: list[CellResult], algorithm: str) -> list[CellResult]:
    codec = TARGET_CODECS.get(algorithm, "fp32")
    return [r for r in group if (r.algorithm, r.codec) == (algorithm, codec)]


def _bytes_per_node(group: list[CellResult], algorithm: str) -> float | None:
    """Mean bytes sent plus received per node by one algorithm, or None if it did not run."""
    cells = _target_cells(group, algorithm)
    if not cells:
        return None
    return statistics.fmean(sent + received for c in cells
                            for sent, received in zip(c.bytes_sent, c.bytes_received))


def _f1(group: list[CellResult], algorithm: str) -> float | None:
    """Mean final macro-F1 of one algorithm over nodes and seeds, or None."""
    cells = _target_cells(group, algorithm)
    return statistics.fmean(pooled(cells, "final_f1")) if cells else None


def targets(results: list[CellResult]) -> list[str]:
    """The issue's targets, each read from the results with its verdict."""
    lines = ["Each method is judged at its default codec (ProFe int16, the others fp32)."]
    for dataset in sorted({r.dataset for r in results}):
        for partition in sorted({r.partition for r in results if r.dataset == dataset}):
            group = [r for r in results if (r.dataset, r.partition) == (dataset, partition)]

            base_bytes, base_f1 = _bytes_per_node(group, "fedavg"), _f1(group, "fedavg")
            if base_bytes is None:
                continue
            where = f"{dataset} {partition}"
            for algorithm, needed in (("profe", 0.60), ("fedproto", 0.90)):
                moved = _bytes_per_node(group, algorithm)
                if moved is not None:
                    saving = 1.0 - moved / base_bytes
                    lines.append(f"- {where}: {algorithm} moves {100 * saving:.1f}% fewer bytes "
                                 f"per node than FedAvg (target ≥ {100 * needed:.0f}%): "
                                 f"{'met' if saving >= needed else 'MISSED'}")
            profe_f1 = _f1(group, "profe")
            if profe_f1 is not None and base_f1 is not None:
                gap = profe_f1 - base_f1
                if partition == "iid":
                    verdict = "met" if gap >= -0.02 else "MISSED"
                    goal = "within 2 points of FedAvg"
                else:
                    verdict = "met" if gap > 0 else "MISSED"
                    goal = "above FedAvg"
                lines.append(f"- {where}: ProFe macro-F1 {profe_f1:.4f} vs FedAvg "
                             f"{base_f1:.4f} ({100 * gap:+.1f} points; target {goal}): {verdict}")
    mnist_iid = [r for r in results if (r.dataset, r.partition) == ("mnist", "iid")]
    for algorithm, (figure, source) in PAPER_MNIST_IID.items():
        cells = _target_cells(mnist_iid, algorithm)
        if cells:
            value = statistics.fmean(pooled(cells, "final_f1"))
            verdict = "met" if value >= figure - F1_REACH else "MISSED"
            lines.append(f"- mnist iid: {algorithm} macro-F1 {value:.4f} vs paper figure "
                         f"{figure:.2f} ({source}); within {100 * F1_REACH:.0f} points: {verdict}")
    return lines


def write_report(root: Path, out_dir: Path, runs: list[dict] | None = None,
                 notes: str = "") -> Path:
    """Write report.md and the plots into `out_dir`; return the report's path."""
    results = load_results(root)
    if not results:
        raise SystemExit(f"no finished cells under {root}")
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = plot_f1(results, out_dir)
    sections = [f"# Experiment report: {root.name}", ""]
    for run in runs or []:
        cells = f" ({len(run['cells'])} cells)" if run.get("cells") else ""
        sections += [f"Produced by `{run['command']}` on commit `{run['commit']}`{cells}.", ""]
    if notes:
        sections += [notes, ""]
    groups = defaultdict(list)
    for r in results:
        groups[(r.partition, r.topology, r.nodes)].append(r)
    sections += [("Every number is read from the node result files of the runs; mean ± std "
                  "over nodes and seeds; percentages relative to FedAvg (fp32) on the same "
                  f"dataset and partition. {len(results)} cells."), ""]
    for (partition, topology, nodes), group in sorted(groups.items()):
        where = f"{partition}, {topology}, {nodes} nodes"
        sections += [
            f"## {where}", "",
            "### Table II: bytes received per node", "",
            metric_table(group, "bytes_received", 1e6, "MB"), "",
            "### Table II: bytes sent per node", "",
            metric_table(group, "bytes_sent", 1e6, "MB"), "",
            "### Table III: elapsed time per node", "",
            metric_table(group, "elapsed", 1.0, "seconds"), "",
            "### Final macro-F1 on the global test set", "",
            metric_table(group, "final_f1", 1.0, "macro-F1", relative=False), "",
        ]
    sections += ["## Figure 2: macro-F1 per round", ""]
    sections += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    sections += ["## Targets", ""] + targets(results) + [""]
    path = out_dir / "report.md"
    path.write_text("\n".join(sections))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__)
    parser.add_argument("results", type=Path, help="experiments/results/<matrix>")
    parser.add_argument("--out", type=Path, help="default experiments/reports/<matrix>")
    parser.add_argument("--command", default="", help="the command that produced the results")
    parser.add_argument("--notes", type=Path, help="a markdown file to include verbatim")
    args = parser.parse_args(argv)
    info_path = args.results / "run-info.json"
    runs = json.loads(info_path.read_text()) if info_path.is_file() else []
    if args.command or not runs:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
        runs = [{"command": args.command, "commit": commit}]
    notes = args.notes.read_text() if args.notes else ""
    path = write_report(args.results, args.out or Path("experiments/reports") / args.results.name,
                        runs, notes)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
