"""The FedHP paper's Table 1 (MNIST) against our runs of its protocol
(experiments/matrices/fedhp-protocol.toml): each client's accuracy on its own local test set
after the last round's fit, averaged over the clients (the hub, which holds no data, left
out), mean ± std over seeds, beside the paper's mean ± std over its 5 runs.

    python -m experiments.fedhp_protocol experiments/results/fedhp-protocol [--out DIR]
        folds every finished cell into DIR/cells.jsonl (one line a cell, a cell run again
        replacing its line), then writes DIR/fedhp-protocol.md from that file alone
    python -m experiments.fedhp_protocol --report-only [--out DIR]

DIR/local.jsonl, when present (rows of `python -m experiments.fedhp_local`: sampled clients
of a cell trained alone), adds a table of what those clients reach alone beside what the
same clients reached in the cell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from experiments.report import partition_label

DEFAULT_OUT = Path("experiments/reports/fedhp-protocol")
CELLS_NAME = "cells.jsonl"
ALONE_NAME = "local.jsonl"
PARTITIONS = ("iid", "dirichlet:0.3", "dirichlet:1")
PARTITION_LABELS = {"iid": "IID", "dirichlet:0.3": "Dir(0.3)", "dirichlet:1": "Dir(1.0)"}
ALGORITHM_LABELS = {"fedavg": "FedAvg", "fedproto": "FedProto", "fedhp": "FedHP"}
# Table 1 of the FedHP paper, MNIST: test accuracy %, mean and std over 5 runs. The Dir(1.0)
# cells of FedProto and FedHP are set apart from the table in the paper's extracted text,
# in column order after CIFAR-10's FedHP row (85.52 ± 0.68, 96.53 ± 0.10).
PAPER = {("fedavg", "iid"): (97.75, 0.25), ("fedavg", "dirichlet:0.3"): (97.61, 0.21),
         ("fedavg", "dirichlet:1"): (97.99, 0.07), ("fedproto", "iid"): (84.40, 0.67),
         ("fedproto", "dirichlet:0.3"): (85.58, 1.25), ("fedproto", "dirichlet:1"): (85.52, 0.68),
         ("fedhp", "iid"): (96.04, 0.14), ("fedhp", "dirichlet:0.3"): (96.82, 0.21),
         ("fedhp", "dirichlet:1"): (96.53, 0.10)}
TOLERANCE = 2.0  # points: within this of the paper's mean counts as reproduced
# The matrices' names for the protocol's own cells (fedhp-protocol.toml, -decentralised.toml);
# a cell of any other variant (an ablation's) gets a row of its own, named by its variant.
PROTOCOL_VARIANTS = ("fedavg-server", "fedproto-server", "fedhp-server", "fedhp")


def cell_of(run_dir: Path) -> dict | None:
    """One finished run's line: its setting and, per node, the final local accuracy and F1
    and the bytes; None for a run without a summary or with a failed node."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        config = json.loads((run_dir / "federation.json").read_text())["config"]
    except (OSError, ValueError, KeyError):
        return None
    if summary.get("failed_nodes"):
        return None
    try:  # the matrix's variant name, written beside the run by experiments.run
        variant = json.loads((run_dir / "cell.json").read_text())["algorithm"]
    except (OSError, ValueError, KeyError):
        variant = None
    return {"key": run_dir.name, "algorithm": config["algorithm"], "variant": variant,
            "partition": partition_label(config["data"]), "topology": config["topology"]["kind"],
            "hub": config["topology"].get("hub"), "seed": config["seed"],
            "rounds": config["rounds"], "participation": config.get("participation", 1.0),
            "nodes": [{"node": n["node"], "local_accuracy": n["local_accuracy"],
                       "local_f1": n["local_f1"], "bytes_sent": n["bytes_sent"],
                       "bytes_received": n["bytes_received"]} for n in summary["nodes"]]}


def fold(results: Path, cells_path: Path) -> list[dict]:
    """The cells of `cells_path` with every finished run under `results` put in (a run of
    the same key replacing its line); written back sorted by key."""
    cells = {c["key"]: c for c in read_cells(cells_path)}
    for run_dir in sorted(p.parent for p in results.glob("*/summary.json")):
        found = cell_of(run_dir)
        if found is not None:
            cells[found["key"]] = found
    ordered = [cells[key] for key in sorted(cells)]
    cells_path.parent.mkdir(parents=True, exist_ok=True)
    cells_path.write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in ordered))
    return ordered


def read_cells(path: Path) -> list[dict]:
    """The cells of a cells.jsonl (none when it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def client_accuracy(cell: dict) -> float:
    """The mean final local-test accuracy over the clients (the hub left out), in %."""
    clients = [n["local_accuracy"] for n in cell["nodes"] if n["node"] != cell["hub"]]
    return 100.0 * statistics.fmean(clients)


def is_ablation(cell: dict) -> bool:
    """Whether the cell is of a variant other than the protocol's own (an ablation's)."""
    return cell.get("variant") not in (None, *PROTOCOL_VARIANTS)


def row_name(cell: dict) -> str:
    """The table row a cell belongs to: the method, with its graph when it has no server and
    its variant when an ablation changed the protocol."""
    name = ALGORITHM_LABELS.get(cell["algorithm"], cell["algorithm"])
    if is_ablation(cell):
        name = f"{name} ({cell['variant']})"
    return name if cell["hub"] is not None else f"{name}, {cell['topology']}, no server"


def figure_text(values: list[float]) -> str:
    """mean ± std (n seeds); the std only from two seeds on."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{mean:.2f}{spread} ({len(values)} seed{'s' if len(values) > 1 else ''})"


def render(cells: list[dict]) -> str:
    """The report: Table 1 beside ours, then what each client sent and received."""
    rows: dict[str, dict[str, list[float]]] = {}
    paper_key: dict[str, str] = {}
    order = list(ALGORITHM_LABELS)  # the paper's rows: FedAvg, FedProto, FedHP

    def place(cell: dict) -> tuple:
        known = cell["algorithm"] in order
        return (cell["hub"] is None, not known,
                order.index(cell["algorithm"]) if known else 0, cell["algorithm"],
                is_ablation(cell),
                cell["seed"])
    for cell in sorted(cells, key=place):
        name = row_name(cell)
        rows.setdefault(name, {}).setdefault(cell["partition"], []).append(
            client_accuracy(cell))
        paper_key[name] = cell["algorithm"]
    lines = ["# The FedHP paper's protocol on MNIST", "",
             ("Produced by `python -m experiments.fedhp_protocol` from `cells.jsonl` "
              "(`experiments/matrices/fedhp-protocol.toml`, run as its header says). "
              "Each cell: the clients' mean accuracy (%) on their own local test sets after "
              "the last round's fit, the hub left out; mean ± std over seeds. Beside it the "
              "paper's Table 1 (mean ± std over 5 runs) and the difference of the means; "
              f"`*` marks a difference beyond {TOLERANCE:g} points."), "",
             "| method | " + " | ".join(f"{PARTITION_LABELS[p]} ours | paper | diff"
                                         for p in PARTITIONS) + " |",
             "|---|" + "---|---|---|" * len(PARTITIONS)]
    for name, by_partition in rows.items():
        parts = []
        for partition in PARTITIONS:
            ours = by_partition.get(partition, [])
            paper = PAPER.get((paper_key[name], partition))
            paper_text = f"{paper[0]:.2f} ± {paper[1]:.2f}" if paper else "-"
            if ours and paper:
                diff = statistics.fmean(ours) - paper[0]
                diff_text = f"{diff:+.2f}" + (" *" if abs(diff) > TOLERANCE else "")
            else:
                diff_text = "-"
            parts.append(f"{figure_text(ours)} | {paper_text} | {diff_text}")
        lines.append(f"| {name} | " + " | ".join(parts) + " |")
    lines += ["", ("Bytes per run (mean over the cells of a row and split): what one client "
                   "sent and received, and the hub's."), "",
              "| method | split | client sent | client received | hub sent | hub received |",
              "|---|---|---|---|---|---|"]
    for name in rows:
        for partition in PARTITIONS:
            group = [c for c in cells if row_name(c) == name and c["partition"] == partition]
            if not group:
                continue
            clients = [n for c in group for n in c["nodes"] if n["node"] != c["hub"]]
            hubs = [n for c in group for n in c["nodes"] if n["node"] == c["hub"]]

            def mean_of(nodes: list[dict], key: str) -> str:
                return f"{statistics.fmean(n[key] for n in nodes):,.0f}" if nodes else "-"
            lines.append(f"| {name} | {PARTITION_LABELS[partition]} | "
                         f"{mean_of(clients, 'bytes_sent')} | "
                         f"{mean_of(clients, 'bytes_received')} | {mean_of(hubs, 'bytes_sent')}"
                         f" | {mean_of(hubs, 'bytes_received')} |")
    return "\n".join(lines) + "\n"


def render_alone(cells: list[dict], alone: list[dict]) -> str:
    """The clients trained alone (`experiments.fedhp_local` rows) beside the same clients'
    accuracy in their cell (when it is archived): what the exchange adds, paired by client."""
    if not alone:
        return ""
    by_key = {c["key"]: {n["node"]: n["local_accuracy"] for n in c["nodes"]} for c in cells}
    lines = ["", ("The same protocol without the exchange (`python -m experiments.fedhp_local`, "
                  "rows in `local.jsonl`): clients sampled evenly from a cell, each trained "
                  "alone with the cell's trainer, data, draws and seeds (the rounds it is "
                  "drawn for and the last fit), then scored on its local test set; beside "
                  "it the same clients in the cell as it ran, and the paired difference "
                  "(mean ± std over the clients): what the exchange adds, and for a row "
                  "with a change, what it adds less what the change adds alone."), "",
             "| cell | change alone | clients | alone % | in the cell % | cell - alone |",
             "|---|---|---|---|---|---|"]
    for row in alone:
        accuracies = [100.0 * n["accuracy"] for n in row["nodes"]]
        in_cell = by_key.get(row["key"], {})
        paired = [(100.0 * in_cell[n["node"]], 100.0 * n["accuracy"]) for n in row["nodes"]
                  if in_cell.get(n["node"]) is not None]
        cell_text, adds_text = "-", "-"
        if len(paired) == len(accuracies):
            cell_text = f"{statistics.fmean(c for c, _ in paired):.2f}"
            gains = [c - a for c, a in paired]
            spread = f" ± {statistics.stdev(gains):.2f}" if len(gains) > 1 else ""
            adds_text = f"{statistics.fmean(gains):+.2f}{spread}"
        change = ", ".join(f"`{s}`" for s in row["settings"]) or "none"
        lines.append(f"| {row['key']} | {change} | {len(accuracies)} | "
                     f"{statistics.fmean(accuracies):.2f} | {cell_text} | {adds_text} |")
    return "\n".join(lines) + "\n"


REPORT_NAME = "fedhp-protocol.md"


def write_report(out: Path) -> str:
    """Rewrite OUT/fedhp-protocol.md from OUT/cells.jsonl (OUT/notes.md after it); its path."""
    path = out / REPORT_NAME
    notes = out / "notes.md"
    cells = read_cells(out / CELLS_NAME)
    text = render(cells) + render_alone(cells, read_cells(out / ALONE_NAME))
    if notes.is_file():
        text += "\n" + notes.read_text()
    path.write_text(text)
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.fedhp_protocol",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="?", help="experiments/results/<matrix>")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the report's folder")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from cells.jsonl alone")
    args = parser.parse_args(argv)
    if not args.report_only:
        if args.results is None or not args.results.is_dir():
            print(f"experiments: {args.results}: no such results folder", file=sys.stderr)
            return 2
        fold(args.results, args.out / CELLS_NAME)
    print(write_report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
