"""ProFe ablation screen: small federations in one process, one setting changed at a time.

    python -m experiments.ablation experiments/matrices/profe-ablation.toml \
        [--out experiments/reports/profe-ablation] [--only NAME ...]

Each [[settings]] entry (a small federation) runs every [[variants]] entry (config keys on
top of it; or those its `variants` list names) in memory (node.inprocess). Results go to OUT/results.json, one entry per
(setting, variant), kept across invocations so finished ones are not run again; OUT/ablation.md
is rebuilt from that file alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from experiments.report import argmax_view
from experiments.run import merge
from node.config import from_dict
from node.errors import ConfigError
from node.inprocess import memory_federation, run_in_memory
from node.record import NodeRecord

log = logging.getLogger("experiments.ablation")


def summarize(nodes: list[dict]) -> dict[str, Any]:
    """Per round: the argmax F1 and top-class share averaged over the nodes."""
    records = [NodeRecord.from_dict(n) for n in nodes]
    per_round = []
    for r in range(len(records[0].rounds)):
        views = [argmax_view(n.rounds[r].global_test) for n in records]
        per_round.append([round(sum(v[0] for v in views) / len(views), 4),
                          round(sum(v[1] for v in views) / len(views), 4)])
    last = [n.rounds[-1] for n in records]
    rules = sorted({rule for r in last for rule in r.global_test.by_rule})
    keys = sorted({key for r in last for key in r.train})
    return {"rounds": per_round, "final_f1": per_round[-1][0],
            "final_share": per_round[-1][1],
            # after the last round, mean over the nodes: F1 under every rule, the losses
            "final_by_rule": {rule: round(statistics.mean(
                r.global_test.by_rule[rule]["f1"] for r in last
                if rule in r.global_test.by_rule), 4) for rule in rules},
            "final_train": {key: round(statistics.mean(
                r.train[key] for r in last if key in r.train), 4) for key in keys}}


def run_one(setting: dict, variant: dict) -> dict[str, Any]:
    """One federation in memory; its summary and wall time."""
    config = from_dict(merge(setting["config"], variant.get("config", {})),
                       source=f"{setting['name']}/{variant['name']}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as results:
        # a busy machine may take long: the screen waits rather than fail a variant
        nodes = run_in_memory(memory_federation(config), Path(results), timeout=4 * 3600)
    return summarize(nodes) | {"seconds": round(time.monotonic() - started, 1)}


def render(matrix: dict, results: dict[str, dict], command: str) -> str:
    """The report: per setting, each variant's round-by-round argmax F1 / top-class share."""
    lines = [f"# {matrix.get('title', 'ProFe ablation')}", "",
             (f"Produced by `{command}`; rebuild from results.json with "
             "`python -m experiments.ablation MATRIX --report-only`."), "",
             matrix.get("notes", "").strip(), ""]
    for setting in matrix["settings"]:
        lines += [f"## {setting['name']}", "", setting.get("description", ""), "",
                  ("Mean over the nodes of the argmax macro-F1 / top-class share on the global "
                  "test set, after each round's aggregation (round 0: before training)."), ""]
        rounds = setting["config"].get("rounds", 3)
        header = " | ".join(f"round {r}" for r in range(1, rounds + 1))
        lines += [f"| variant | what changes | {header} |",
                  "|---|---|" + "---|" * rounds]
        for variant in variants_of(matrix, setting):
            found = results.get(f"{setting['name']}/{variant['name']}")
            if found is None:
                continue
            cells = " | ".join(_cell(f1, share) for f1, share in found["rounds"][1:])
            lines.append(f"| {variant['name']} | {variant.get('description', '')} | {cells} |")
        lines.append("")
        lines += final_columns(matrix, setting, results)
    if matrix.get("mean_over_settings"):
        lines += mean_over_settings(matrix, results)
    return "\n".join(lines).rstrip() + "\n"


def _final_value(found: dict, column: str) -> float | None:
    kind, name = column.split(":", 1)
    return found.get("final_by_rule" if kind == "rule" else "final_train", {}).get(name)


def _mean_text(values: list[float]) -> str:
    """"0.183 ± 0.154" over the finite values, naming how many were not finite."""
    finite = [v for v in values if math.isfinite(v)]
    if not values:
        return "–"
    if not finite:
        return "not finite"
    text = f"{statistics.fmean(finite):.3f}"
    if len(finite) > 1:
        text += f" ± {statistics.stdev(finite):.3f}"
    dropped = len(values) - len(finite)
    return text + (f" ({dropped} of {len(values)} not finite)" if dropped else "")


def mean_over_settings(matrix: dict, results: dict[str, dict]) -> list[str]:
    """Each variant's `final` figures as a mean over the settings (± the standard deviation
    across them), for matrices whose settings differ only by seed."""
    columns = matrix.get("final", [])
    settings = matrix["settings"]
    if not columns:
        return []
    lines = [f"## Mean over the {len(settings)} settings", "",
             ("Each variant's figures after the last round (as in the tables above), the mean "
              "over the settings ± the standard deviation across them."), "",
             "| variant | " + " | ".join(c.split(":", 1)[1] for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for variant in matrix["variants"]:
        found = [results[key] for setting in settings
                 if (key := f"{setting['name']}/{variant['name']}") in results]
        if not found:
            continue
        values = [[_final_value(f, c) for f in found] for c in columns]
        cells = [_mean_text([v for v in column if v is not None]) for column in values]
        lines.append(f"| {variant['name']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def final_columns(matrix: dict, setting: dict, results: dict[str, dict]) -> list[str]:
    """The table of the matrix's `final` figures after the last round, if it names any:
    "rule:NAME" (F1 under that prediction rule) or "train:KEY" (a training statistic)."""
    columns = matrix.get("final", [])
    if not columns:
        return []
    meaning = {"rule": "F1 under that prediction rule", "train": "the round's training "
               "statistic, a mean over its batches"}
    lines = ["After the last round, mean over the nodes: " + "; ".join(
                 f"{c.split(':', 1)[1]} ({meaning[c.split(':', 1)[0]]})" for c in columns)
             + ".", "",
             "| variant | " + " | ".join(c.split(":", 1)[1] for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for variant in variants_of(matrix, setting):
        found = results.get(f"{setting['name']}/{variant['name']}")
        if found is None:
            continue
        values = []
        for column in columns:
            value = _final_value(found, column)
            values.append("–" if value is None else f"{value:.3f}")
        lines.append(f"| {variant['name']} | " + " | ".join(values) + " |")
    return [*lines, ""]


def _cell(f1: float, share: float) -> str:
    text = f"{f1:.3f} / {share:.2f}"
    return f"**{text}**" if share >= 0.5 else text  # one class for half the predictions


def variants_of(matrix: dict, setting: dict) -> list[dict]:
    """The variants a setting runs: all, or those its `variants` list names."""
    names = setting.get("variants")
    return [v for v in matrix["variants"] if names is None or v["name"] in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.ablation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("matrix", type=Path, help="ablation TOML file")
    parser.add_argument("--out", type=Path, default=Path("experiments/reports/profe-ablation"))
    parser.add_argument("--only", nargs="*", default=[], help="variant names to run")
    parser.add_argument("--report-only", action="store_true", help="rebuild ablation.md only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    matrix = tomllib.loads(args.matrix.read_text())
    results_path = args.out / "results.json"
    saved = json.loads(results_path.read_text()) if results_path.is_file() else {}
    results, command = saved.get("results", {}), saved.get("command", "")
    if not args.report_only:
        command = f"python -m experiments.ablation {args.matrix}"
        args.out.mkdir(parents=True, exist_ok=True)
        for setting in matrix["settings"]:
            for variant in variants_of(matrix, setting):
                key = f"{setting['name']}/{variant['name']}"
                if key in results or (args.only and variant["name"] not in args.only):
                    continue
                try:
                    results[key] = run_one(setting, variant)
                except ConfigError as exc:
                    print(f"ablation: {exc}", file=sys.stderr)
                    return 2
                f1s = " ".join(f"{f:.3f}/{s:.2f}" for f, s in results[key]["rounds"])
                print(f"{key}: {f1s} ({results[key]['seconds']:.0f} s)", flush=True)
                results_path.write_text(json.dumps({"command": command, "results": results},
                                                   indent=1, sort_keys=True) + "\n")
    (args.out / "ablation.md").write_text(render(matrix, results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
