"""Honest updates the norm bounds refuse in the dynamic report's non-IID federations: every
ProFe cell of experiments.dynamic (20 nodes, 20% of the classes each, five topologies, MNIST
and Fashion-MNIST), nobody attacking, each refusal counted by rule and what it refused.

    python -m experiments.prototype_bounds [--seeds 1 2 3] [--workers 2] [--report-only]

Each finished cell is appended to OUT/results.jsonl; OUT/prototype-bounds.md is rebuilt from
that file alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
import time
from pathlib import Path

from experiments import dynamic
from experiments.robustness import CLIPPED, read_results
from node.inprocess import memory_federation, run_in_memory

OUT = Path("experiments/reports/prototype-bounds")
METHOD = "ProFe int16"
MAX_EXAMPLES = 50  # refusals kept with their reasons, per cell


def run_cell(dataset: str, topology: str, seed: int, data_dir: str) -> dict:
    """One of the dynamic report's ProFe federations: its refusals by rule and what."""
    config = dynamic.config_for(dataset, topology, METHOD, seed, data_dir)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        nodes = run_in_memory(memory_federation(config), Path(tmp), timeout=3600)
    counts: dict[str, int] = {}
    clipped = 0
    examples: list[dict] = []
    for record in nodes:
        for round_ in record["rounds"]:
            for refusal in round_.get("refusals", []):
                if refusal["rule"] == CLIPPED:  # kept, its pull cut: not a refusal
                    clipped += 1
                    continue
                kind = "prototype" if refusal["what"].startswith("prototype") else refusal["what"]
                key = f"{refusal['rule']}: {kind}"
                counts[key] = counts.get(key, 0) + 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append({"node": record["node"], "round": round_["round"],
                                     **refusal})
    return {"key": f"{dataset}/{topology}/s{seed}", "refusals": counts, "examples": examples,
            "clipped": clipped,
            "rounds": config.rounds, "nodes": config.nodes,
            "f1": round(sum(n["rounds"][-1]["global_test"]["f1"] for n in nodes) / len(nodes), 4),
            "seconds": round(time.monotonic() - started, 1)}


def render(results: dict[str, dict]) -> str:
    """Per cell the refusals, by rule and what."""
    lines = ["# Honest updates refused by the norm bounds, dynamic report's non-IID cells", "",
             ("Produced by `python -m experiments.prototype_bounds`; rebuild from results.jsonl "
             "with `--report-only`. Every cell is one ProFe (int16) federation of "
             "`experiments.dynamic` (20 nodes, 8 rounds, 12,000 images, 20% of the classes "
             "per node), nobody attacking: every refusal is of an honest update. Models "
             "the distance screen kept with their pull cut to its bound are counted apart "
             "(clipped, kept): they are not refusals."), "",
             "| dataset | topology | seed | refusals | clipped, kept | mean final F1 |",
             "|---|---|---|---|---|---|"]
    for key in sorted(results):
        cell = results[key]
        dataset, topology, seed = key.split("/")
        refused = ", ".join(f"{what} {n}" for what, n in sorted(cell["refusals"].items()))
        lines.append(f"| {dataset} | {topology} | {seed[1:]} | {refused or 0} | "
                     f"{cell.get('clipped', '-')} | {cell['f1']} |")
    total = sum(sum(c["refusals"].values()) for c in results.values())
    lines += ["", f"Total refusals over {len(results)} cells: {total}.", ""]
    refused = [(key, e) for key in sorted(results) for e in results[key]["examples"]]
    if refused:
        lines += ["## Each refusal, with its reason", "",
                  "| cell | round | node | peer | what | reason |", "|---|---|---|---|---|---|"]
        lines += [f"| {key} | {e['round']} | {e['node']} | {e['peer']} | {e['what']} | "
                  f"{e['reason']} |" for key, e in refused]
        kept = sum(len(results[k]["examples"]) for k in results)
        if kept < total:
            lines += ["", (f"(The first {kept} of {total}: a cell keeps its first "
                           "refusals with their reasons.)")]
        lines += ["", *why(refused)]
    return "\n".join(lines) + "\n"


def why(refused: list[tuple[str, dict]]) -> list[str]:
    """Why the listed honest refusals happened, from their rules and rounds."""
    rounds = sorted({e["round"] for _, e in refused})
    lines = ["## Why", "", "Refusals listed by round: " + ", ".join(
        f"round {r}: {sum(e['round'] == r for _, e in refused)}" for r in rounds) + "."]
    bounded = {e["round"] for _, e in refused if e["rule"] == "norm_bound"}
    if bounded == {1}:
        lines += ["", ("Every `norm_bound` refusal listed is in round 1, before the first "
                       "aggregation: each node's student has then been trained from the "
                       "shared initial weights on its own two classes only, so the scale of "
                       "its embeddings is its own. A prototype of a class the receiver lacks "
                       "and fewer than three of its in-neighbours hold is bounded against the "
                       "median over the contributors of each one's median prototype norm "
                       "(`node.defences.class_references`), and a neighbour whose embeddings "
                       "grew 3 to 5 times larger than the others' in that first round is "
                       "beyond it. From round 2 on every student starts from an aggregate, "
                       "and no honest prototype is beyond the bound.")]
    if any(e["rule"] == "validation" for _, e in refused):
        lines += ["", ("The `validation` refusals (validation is on by default) are of models "
                       "whose round did not cut the loss on the receiver's samples of their "
                       "classes by the bar the receiver's own round set; the prototypes of a "
                       "refused model go with it.")]
    if any(e["rule"] == "influence" for _, e in refused):
        lines += ["", ("The `influence` refusals (from round 2, the first with global "
                       "prototypes) are of models that, averaged with the receiver's own, "
                       "raise its loss on the global prototype of a class it lacks more than "
                       "the screen's margin beyond the class's median in-neighbour; the "
                       "prototypes of a refused model go with it.")]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.prototype_bounds",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the results")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds")
    parser.add_argument("--workers", type=int, default=1, help="cells run at once")
    parser.add_argument("--data-dir", default="", help="dataset folder (default: "
                        "$PROTOFED_DATA_DIR or ./data)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.jsonl"
    if not args.report_only:
        from node.data import default_data_dir
        data_dir = args.data_dir or str(default_data_dir())
        done = read_results(store)
        todo = [(d, t, s) for s in args.seeds for d in dynamic.DATASETS
                for t in dynamic.TOPOLOGIES if f"{d}/{t}/s{s}" not in done]
        with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
            futures = [pool.submit(run_cell, *cell, data_dir) for cell in todo]
            for finished, future in enumerate(concurrent.futures.as_completed(futures), 1):
                found = future.result()
                with store.open("a") as file:
                    file.write(json.dumps(found, sort_keys=True) + "\n")
                print(f"[{finished}/{len(todo)}] {found['key']}: {found['refusals']} "
                      f"({found['seconds']:.0f} s)", file=sys.stderr, flush=True)
    (args.out / "prototype-bounds.md").write_text(render(read_results(store)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
