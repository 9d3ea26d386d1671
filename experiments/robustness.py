"""One attacker among honest nodes: each aggregation rule against each attack, per topology.

    python -m experiments.robustness [--out experiments/reports/robustness] [--seeds 1 2 3]
        [--rules mean median ...] [--attacks none protozero ...] [--topologies ring ...]
        [--report-only]

Every cell is a small federation in one process (node.inprocess) in which node 0 is the
attacker: it holds a stolen key, so its messages pass every check, and it sends what its
attack says. Results go to OUT/results.json, one entry per (topology, rule, attack, seed),
kept across invocations so finished cells are not run again; OUT/robustness.md is rebuilt
from that file alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import node.algorithms
from experiments.run import merge
from node.aggregation import AGGREGATION_RULES
from node.algorithms.base import Algorithm, Payload
from node.algorithms.common import MAX_SAMPLES
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory

log = logging.getLogger("experiments.robustness")

ATTACKER = 0
POISON = 1e4  # within every bound a message is checked against
SCALE = 10.0  # the scaled-model attack's boost
HIT = 0.02  # an honest node is hit when its F1 falls more than this below the clean run's

# Ten ProFe nodes on a 10,000-image MNIST subset split by Dirichlet(0.5), 5 rounds.
BASE = {"name": "robustness", "nodes": 10, "rounds": 5, "algorithm": "profe",
        "data": {"dataset": "mnist", "subset": 10000, "partition": "dirichlet", "alpha": 0.5,
                 "download": False},
        "train": {"threads": 1},
        "timeouts": {"startup": 60, "round": 60, "absent": 10, "shutdown": 5}}
TOPOLOGIES = {"ring": {"kind": "ring"}, "6-regular": {"kind": "k_regular", "k": 6},
              "fully-connected": {"kind": "fully_connected"}}


def _poisoned(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """Every float tensor POISON; the sample count and class counts claimed at the maximum."""
    out = {}
    for kind, payload in payloads.items():
        tensors = {k: torch.full_like(v, POISON) if v.is_floating_point() else v
                   for k, v in payload.tensors.items()}
        if "counts" in tensors:
            tensors["counts"] = torch.full_like(tensors["counts"], MAX_SAMPLES)
        meta = {**payload.meta, **({"samples": MAX_SAMPLES} if "samples" in payload.meta
                                   else {})}
        out[kind] = Payload(tensors, meta)
    return out


def _protozero(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """Prototypes of zeros for every class, claimed with the largest counts."""
    out = dict(payloads)
    if "prototypes" in payloads:
        classes = torch.arange(algorithm.data.num_classes)
        dim = payloads["prototypes"].tensors["prototypes"].shape[1]
        out["prototypes"] = Payload({"prototypes": torch.zeros(len(classes), dim),
                                     "classes": classes,
                                     "counts": torch.full((len(classes),), MAX_SAMPLES)})
    return out


def _scaled(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """The model's float tensors multiplied by SCALE."""
    out = dict(payloads)
    if "model" in payloads:
        model = payloads["model"]
        out["model"] = Payload({k: v * SCALE if v.is_floating_point() else v
                                for k, v in model.tensors.items()}, dict(model.meta))
    return out


def _withheld(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """A sample count and class counts of 0, which every check refuses: each update is
    rejected at the door, so the neighbours go on without this node, as a perfect defence
    would leave them (its own round goes on: its own prototypes are left out, its model
    weighs nothing)."""
    out = {}
    for kind, payload in payloads.items():
        tensors = dict(payload.tensors)
        if "counts" in tensors:
            tensors["counts"] = torch.zeros_like(tensors["counts"])
        out[kind] = Payload(tensors, {**payload.meta, **({"samples": 0} if "samples" in
                                                           payload.meta else {})})
    return out


def attacker_class(base: type[Algorithm], attack: str) -> type[Algorithm]:
    """`base` as the attacker of `attack` runs it."""
    senders: dict[str, Callable[[Algorithm, dict[str, Payload]], dict[str, Payload]]] = {
        "bounded_poison": _poisoned, "protozero": _protozero, "scaled_model": _scaled,
        "withheld": _withheld}
    if attack in senders:
        send = senders[attack]

        class Sender(base):  # type: ignore[misc, valid-type]
            def payload(self) -> dict[str, Payload]:
                return send(self, super().payload())
        return Sender
    if attack == "label_flip":
        class Shuffled(base):  # type: ignore[misc, valid-type]
            def __init__(self, config, data, device, node_id):
                order = torch.randperm(len(data.train_y),
                                       generator=torch.Generator().manual_seed(node_id))
                super().__init__(config, dataclasses.replace(
                    data, train_y=data.train_y[order.to(data.train_y.device)]), device, node_id)
        return Shuffled
    if attack == "free_rider":
        class FreeRider(base):  # type: ignore[misc, valid-type]
            stale: dict[str, Payload] | None = None

            def train_round(self, round_: int) -> dict[str, float]:
                return {}  # never trains

            def payload(self) -> dict[str, Payload]:
                if self.stale is None:  # its first payload, sent again every round
                    self.stale = copy.deepcopy(super().payload())
                return self.stale
        return FreeRider
    raise ValueError(f"unknown attack {attack!r}")


ATTACKS = ("none", "withheld", "protozero", "scaled_model", "bounded_poison", "label_flip",
           "free_rider")


class _WithAttacker(dict):
    """The algorithm registry with node ATTACKER built as the attacker of `attack`."""

    def __init__(self, real: dict, attack: str) -> None:
        super().__init__(real)
        self.attack = attack

    def __getitem__(self, name: str):
        real = dict.__getitem__(self, name)
        attack = self.attack

        def build(config, data, device, node_id):
            kind = real if attack == "none" or node_id != ATTACKER else attacker_class(
                real, attack)
            return kind(config, data, device, node_id)
        return build


def run_cell(topology: str, rule: str, attack: str, seed: int, data_dir: str) -> dict:
    """One federation: every node's final global F1 and its wall time."""
    raw = merge(BASE, {"seed": seed, "topology": TOPOLOGIES[topology],
                       "aggregation": {"rule": rule}, "data": {"dir": data_dir}})
    config = from_dict({**raw, "name": f"{topology}-{rule}-{attack}-s{seed}"},
                       source=f"{topology}/{rule}/{attack}/s{seed}")
    registry = node.algorithms.ALGORITHMS
    node.algorithms.ALGORITHMS = _WithAttacker(registry, attack)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as results:
            nodes = run_in_memory(memory_federation(config), Path(results), timeout=4 * 3600)
    except Exception as exc:  # noqa: BLE001 - a node that crashed is this cell's finding
        log.error("%s: a node crashed: %s: %s", config.name, type(exc).__name__, exc)
        return {"crashed": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        node.algorithms.ALGORITHMS = registry
    return {"f1": [round(n["rounds"][-1]["global_test"]["f1"], 4) for n in nodes],
            "status": [n["status"] for n in nodes],
            "kept_own_models": sum(n.get("kept_own_models", 0) for n in nodes),
            "seconds": round(time.monotonic() - started, 1)}


def cell_key(topology: str, rule: str, attack: str, seed: int) -> str:
    return f"{topology}/{rule}/{attack}/s{seed}"


def honest_effect(results: dict, topology: str, rule: str, attack: str,
                  seed: int) -> tuple[float, int] | None:
    """(mean final F1 of the honest nodes, how many of them fell more than HIT below their
    clean run under the same rule), or None while a cell is missing."""
    attacked = results.get(cell_key(topology, rule, attack, seed))
    clean = results.get(cell_key(topology, rule, "none", seed))
    if attacked is None or clean is None or "crashed" in attacked or "crashed" in clean:
        return None
    honest = [i for i in range(len(attacked["f1"])) if i != ATTACKER]
    hit = sum(attacked["f1"][i] < clean["f1"][i] - HIT for i in honest)
    return statistics.fmean(attacked["f1"][i] for i in honest), hit


def render(results: dict, command: str) -> str:
    """Per topology: rules down, attacks across; honest F1 mean ± std over seeds and the
    nodes hit (summed over seeds)."""
    seeds = sorted({int(key.rsplit("/s", 1)[1]) for key in results})
    produced = (f"Produced by `{command}`; rebuild from results.json with "
                "`python -m experiments.robustness --report-only`.")
    setup = ("Ten ProFe nodes, MNIST (10,000-image subset, Dirichlet 0.5 split), 5 rounds, "
             "defaults otherwise (among them aggregation.norm_bound = 3: under every rule a "
             "peer's model or prototypes with a norm beyond 3 times the reference are "
             "rejected); node 0 is the attacker (a stolen key: its messages pass "
             "every check). Cells: the honest nodes' mean final global F1 (argmax), mean ± "
             f"std over seeds {', '.join(map(str, seeds))}, then how many honest nodes "
             f"(of 9 per seed, summed over seeds) ended more than {HIT:g} below their own "
             "clean run under the same rule. Attacks: protozero (zero prototypes for every "
             "class at the largest counts), scaled_model (its model times "
             f"{SCALE:g}), bounded_poison (every value {POISON:g}, every count 2^31-1), "
             "label_flip (it trains on shuffled labels), free_rider (never trains, sends "
             "its first model every round). withheld is not an attack but the best any "
             "defence can do: every update of node 0 is rejected at the door, so the "
             "others train without its data.")
    lines = ["# Robustness: one attacker among ten ProFe nodes", "", produced, "", setup, ""]
    for topology in [t for t in TOPOLOGIES if any(k.startswith(f"{t}/") for k in results)]:
        lines += [f"## {topology}", "", "| rule | " + " | ".join(ATTACKS) + " |",
                  "|---|" + "---|" * len(ATTACKS)]
        for rule in AGGREGATION_RULES:
            cells = []
            for attack in ATTACKS:
                crashed = sum("crashed" in results.get(cell_key(topology, rule, attack, s), {})
                              for s in seeds)
                effects = [e for s in seeds
                           if (e := honest_effect(results, topology, rule, attack, s))]
                if crashed or not effects:
                    cells.append(f"a node crashed ({crashed} of {len(seeds)} seeds)"
                                 if crashed else "-")
                    continue
                f1s = [f1 for f1, _ in effects]
                spread = f" ± {statistics.stdev(f1s):.3f}" if len(f1s) > 1 else ""
                hit = "" if attack == "none" else f" ({sum(h for _, h in effects)} hit)"
                cells.append(f"{statistics.fmean(f1s):.3f}{spread}{hit}")
            lines.append(f"| {rule} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.robustness",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="experiments/reports/robustness",
                        help="folder of results.json and robustness.md")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds")
    parser.add_argument("--rules", nargs="+", default=list(AGGREGATION_RULES),
                        choices=AGGREGATION_RULES, help="aggregation rules")
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=ATTACKS,
                        help="attacks (none: the clean run every attack is compared with)")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES),
                        choices=list(TOPOLOGIES), help="topologies")
    parser.add_argument("--data-dir", default="", help="dataset folder (default: "
                        "$PROTOFED_DATA_DIR or ./data)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild robustness.md from results.json, run nothing")
    args = parser.parse_args(argv)
    # the attacks make nodes skip steps and reject updates by design: only errors here
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results: dict[str, Any] = json.loads(store.read_text()) if store.is_file() else {}
    command = "python -m experiments.robustness"
    if not args.report_only:
        from node.data import default_data_dir
        data_dir = args.data_dir or str(default_data_dir())
        cells = [(t, r, a, s) for s in args.seeds for t in args.topologies
                 for r in args.rules for a in args.attacks]
        todo = [c for c in cells if cell_key(*c) not in results]
        print(f"{len(cells) - len(todo)} of {len(cells)} cells done; running {len(todo)}",
              file=sys.stderr)
        for done, cell in enumerate(todo, 1):
            results[cell_key(*cell)] = run_cell(*cell, data_dir)
            store.write_text(json.dumps(results, indent=1, sort_keys=True))
            found = results[cell_key(*cell)]
            outcome = (f"CRASHED: {found['crashed']}" if "crashed" in found else
                       f"honest mean F1 {statistics.fmean(found['f1'][1:]):.4f}")
            print(f"[{done}/{len(todo)}] {cell_key(*cell)}: {outcome} "
                  f"({found['seconds']:.0f} s)", file=sys.stderr, flush=True)
    (out / "robustness.md").write_text(render(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
