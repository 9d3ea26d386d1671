"""Attackers among honest nodes: each aggregation rule against each attack of the library
(experiments.attacks), per topology and data split, and the choice of the default rule.

    python -m experiments.robustness [--out experiments/reports/robustness] [--seeds 1 2 3]
        [--rules mean validated ...] [--attacks none sign_flip ...] [--topologies ring ...]
        [--splits dirichlet iid classes20] [--attackers 1 2] [--near] [--workers 2]
        [--report-only]

Every cell is a small federation in one process (node.inprocess) in which node 0 (and node
5 with two attackers, or node 1 with `--near`) holds a stolen key, so its messages pass
every check, and sends what its attack says. Each finished cell is appended to
OUT/results.jsonl, so a run can stop and go on, and several can run side by side;
OUT/robustness.md is rebuilt from that file and, where present, OUT/defence-cost.json
(experiments.bench_defence: what each rule costs) alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import node.algorithms
from experiments.attacks import ATTACKS, attacker_class
from experiments.paired_runs import paired_ratios, per_fixed_work
from experiments.processes import processor_model
from experiments.run import merge
from node.aggregation_rules import AGGREGATION_RULES
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory

log = logging.getLogger("experiments.robustness")

ATTACKERS = {1: (0,), 2: (0, 5)}  # on a ring of ten, 0 and 5 share no in-neighbour
# Two colluders side by side (keys "2x-near"): on 20% of the classes node i holds the
# classes of node i+5, so 0 and 5 are the only holders of theirs, and no honest node can
# judge them on their classes; 0 and 1 each share theirs with an honest node (5 and 6).
NEAR_ATTACKERS = (0, 1)
NEAR = "-near"
NEAR_NODES = "nodes " + " and ".join(map(str, NEAR_ATTACKERS))  # as the report names them
# At the paper's scale node i holds the classes of nodes i+5, i+10, i+15; under seed 1 nodes
# 4, 9, 14, 19 hold 3 and 9, the class-mates whose scores at the holders of 1 and 4 are
# above the held-class bar (experiments/reports/paper-held-influence): where an attacker
# that knows aggregation.held_mates would hide. Two colluders: two of those four.
PAPER_ATTACKERS = {1: (4,), 2: (4, 9)}
TARGET_GAP = 0.02  # under the default, honest F1 within this of the withheld run
CLEAN_COST = 0.01  # and at most this below `mean` when nobody attacks
# A rule replaces the default only within this CPU budget: its run's CPU at COST_NODES
# nodes fully connected at most COST_BUDGET times `mean`'s (defence-cost.json, made by
# experiments.bench_defence in the same folder).
COST_BUDGET = 1.15
COST_NODES = 100

# Ten ProFe nodes on a 10,000-image MNIST subset, 5 rounds.
BASE = {"name": "robustness", "nodes": 10, "rounds": 5, "algorithm": "profe",
        "data": {"dataset": "mnist", "subset": 10000, "download": False},
        "train": {"threads": 1},
        "timeouts": {"startup": 60, "round": 120, "absent": 10, "shutdown": 5},
        # a cell reads the last round's F1 alone: the rounds between go unevaluated and no
        # picture is drawn, which changes no byte of training nor the last F1 (tested)
        "report": {"eval_every": 10**6, "pictures": False}}
TOPOLOGIES = {"ring": {"kind": "ring"}, "6-regular": {"kind": "k_regular", "k": 6},
              "fully-connected": {"kind": "fully_connected"}}
# The defences compared: each aggregation rule alone, and validation before mean or
# clipping (aggregation.validation 0.5: a peer's model must cut the loss on this node's
# samples of the peer's classes by half the cut this node's own round made on its own).
# Every screen named in each, so that a change of default does not change a defence (and
# how many in-neighbours a node judges a round: more than any cell here has).
OFF = {"validation": 0.0, "distance": 0.0, "distance_refuse": 1.0, "influence": 0.0,
       "prototype_validation": False, "unjudged": "keep", "claim_cap": 2.0, "norm_floor": 0.0,
       "held_influence": 0.0, "held_floor": 0.4, "held_mates": False, "held_mix": "model",
       "screen_budget": "each", "witnesses": 0, "witness_memory": 0.5, "judged_per_round": 20}
DEFENCES = {**{rule: {**OFF, "rule": rule} for rule in AGGREGATION_RULES},
            "validated": {**OFF, "rule": "mean", "validation": 0.5},
            "validated_clipped": {**OFF, "rule": "clipped_mean", "validation": 0.5},
            "distance2": {**OFF, "rule": "mean", "validation": 0.5, "distance": 2.0},
            "distance3": {**OFF, "rule": "mean", "validation": 0.5, "distance": 3.0},
            "influence": {**OFF, "rule": "mean", "validation": 0.5, "distance": 2.0,
                          "influence": 1.5},
            "clipped2": {**OFF, "rule": "mean", "validation": 0.5, "distance": 2.0,
                         "distance_refuse": 1.5},
            "guarded": {**OFF, "rule": "mean", "validation": 0.5, "distance": 2.0,
                        "distance_refuse": 1.5, "prototype_validation": True,
                        "influence": 1.5},
            "guarded_wide": {**OFF, "rule": "mean", "validation": 0.5, "distance": 2.0,
                             "distance_refuse": 5.0, "prototype_validation": True,
                             "influence": 1.5}}
# guarded_wide holding out the models no screen can judge (aggregation.unjudged = "hold")
DEFENCES["held"] = {**DEFENCES["guarded_wide"], "unjudged": "hold"}
# guarded_wide weighing no claim above the median claim (aggregation.claim_cap = 1)
DEFENCES["capped"] = {**DEFENCES["guarded_wide"], "claim_cap": 1.0}
# guarded_wide leaving out prototypes below a third of the reference (aggregation.norm_floor)
DEFENCES["floored"] = {**DEFENCES["guarded_wide"], "norm_floor": 3.0}
# guarded_wide judging each peer's mix on this node's own classes too, against the others'
# spread (aggregation.held_influence)
DEFENCES["guarded_own"] = {**DEFENCES["guarded_wide"], "held_influence": 1.5}
# ... at most 3 nats: on Dirichlet 0.5 honest mixes raise a held class by more than 1.5
DEFENCES["guarded_own3"] = {**DEFENCES["guarded_wide"], "held_influence": 3.0}
# guarded_own3 whose held-class bar never falls below 1 nat (aggregation.held_floor): on
# ProFe's paper cell honest holders of a confusable class score about 0.5 there
DEFENCES["guarded_own3_floor1"] = {**DEFENCES["guarded_own3"], "held_floor": 1.0}
# guarded_own3_floor1 mixing each peer's classifier alone into this node's, on its own
# embeddings (aggregation.held_mix = "head"): one forward pass however many in-neighbours
DEFENCES["guarded_own3_head"] = {**DEFENCES["guarded_own3_floor1"], "held_mix": "head"}
# guarded_own3_floor1 whose validation and held-class screen split one budget of forward
# passes (aggregation.screen_budget = "shared"): each judges every peer on half the samples
DEFENCES["guarded_own3_shared"] = {**DEFENCES["guarded_own3_floor1"],
                                   "screen_budget": "shared"}
# guarded_own3_floor1 refusing a peer that two other in-neighbours refused in each of their
# last two rounds (aggregation.witnesses): a label flip is seen only by its real classes'
# holders
DEFENCES["witnessed"] = {**DEFENCES["guarded_own3_floor1"], "witnesses": 2}
# ... naming a peer refused twice up to six rounds apart (aggregation.witness_memory 0.9):
# an attacker that flips its labels every other round is named too
DEFENCES["witnessed_long"] = {**DEFENCES["witnessed"], "witness_memory": 0.9}
# guarded_own3 keeping a score the neighbour's class-mates share (aggregation.held_mates)
DEFENCES["guarded_mates"] = {**DEFENCES["guarded_own3"], "held_mates": True}
# The defences of the earlier choice, on Dirichlet 0.5 alone.
EARLIER = (*AGGREGATION_RULES, "validated", "validated_clipped")
# The defences the default is chosen among on every split, with and without the plan (the
# rules alone were ruled out on Dirichlet 0.5: the earlier choice below).
CANDIDATES = ("validated", "clipped2", "guarded", "guarded_wide")
SPLITS = {"dirichlet": {"partition": "dirichlet", "alpha": 0.5},
          "iid": {"partition": "iid"},
          "classes20": {"partition": "classes", "classes_fraction": 0.2},
          "paper": {"partition": "classes", "classes_fraction": 0.2}}
# ProFe's paper cell (experiments/matrices/paper-default.toml): 20 nodes, full MNIST, 10
# rounds; every class held by four nodes, where aggregation.held_mates can act.
SCALES = {"paper": {"nodes": 20, "rounds": 10, "data": {"subset": 0},
                    "timeouts": {"round": 1800}}}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One federation of the matrix; `plan` False: every node ignores the data plan
    (aggregation.use_plan = false), weighing peers by their bounded claims."""

    split: str
    attackers: int
    topology: str
    rule: str
    attack: str
    seed: int
    plan: bool = True
    near: bool = False  # two attackers: NEAR_ATTACKERS instead of ATTACKERS[2]

    @property
    def key(self) -> str:
        return (f"{self.split}/{self.attackers}x{NEAR if self.near else ''}/{self.topology}/"
                f"{self.rule}/{self.attack}/s{self.seed}" + ("" if self.plan else "/noplan"))

    @classmethod
    def parse(cls, key: str) -> Cell:
        split, attackers, topology, rule, attack, seed, *rest = key.split("/")
        near = attackers.endswith(NEAR)
        count = attackers.removesuffix(NEAR)
        if not count.endswith("x"):
            raise ValueError(f"{attackers!r} is not 1x, 2x or 2x{NEAR}")
        return cls(split, int(count[:-1]), topology, rule, attack, int(seed[1:]),
                   plan=rest != ["noplan"], near=near)

    @property
    def attacker_ids(self) -> tuple[int, ...]:
        """The nodes holding a stolen key (none when nobody attacks)."""
        if self.attack == "none":
            return ()
        if self.near:
            if self.attackers != 2 or self.split in SCALES:
                raise ValueError(f"{self.key}: the near placement is for two attackers among "
                                 "ten nodes")
            return NEAR_ATTACKERS
        return (PAPER_ATTACKERS if self.split in SCALES else ATTACKERS)[self.attackers]

    def config(self, data_dir: str):
        raw = merge(merge(BASE, SCALES.get(self.split, {})), {
            "seed": self.seed, "topology": TOPOLOGIES[self.topology],
            "aggregation": {**DEFENCES[self.rule], "use_plan": self.plan},
            "data": {**SPLITS[self.split], "dir": data_dir}})
        return from_dict({**raw, "name": self.key.replace("/", "-")}, source=self.key)


class _WithAttackers(dict):
    """The algorithm registry with the `attackers` built as the attackers of `attack`."""

    def __init__(self, real: dict, attack: str, attackers: tuple[int, ...]) -> None:
        super().__init__(real)
        self.attack, self.attackers = attack, attackers

    def __getitem__(self, name: str):
        real = dict.__getitem__(self, name)

        def build(config, data, device, node_id):
            honest = self.attack == "none" or node_id not in self.attackers
            kind = real if honest else attacker_class(real, self.attack)
            return kind(config, data, device, node_id)
        return build


CLIPPED = "distance_clip"  # node.intake.distance's rule for a pull cut to the bound


def refusal_counts(nodes: list[dict], attackers: tuple[int, ...]) -> dict[str, Any]:
    """Refusals made by honest nodes: of honest peers' updates (also by rule) and of the
    attackers'."""
    counts: dict[str, Any] = {"honest_refused": 0, "attacker_refused": 0,
                              "honest_refused_by_rule": {}, "honest_clipped": 0,
                              "attacker_clipped": 0}
    for index, record in enumerate(nodes):
        if index in attackers:
            continue
        for round_ in record["rounds"]:
            for refusal in round_.get("refusals", []):
                if refusal["rule"] == CLIPPED:  # a layer's pull cut to the bound, kept
                    who = "attacker" if refusal["peer"] in attackers else "honest"
                    counts[f"{who}_clipped"] += 1
                    continue
                if refusal["peer"] in attackers:
                    counts["attacker_refused"] += 1
                    continue
                counts["honest_refused"] += 1
                by_rule = counts["honest_refused_by_rule"]
                by_rule[refusal["rule"]] = by_rule.get(refusal["rule"], 0) + 1
    return counts


def run_cell(cell: Cell, data_dir: str) -> dict:
    """One federation: every node's final global F1, the refusals and its wall time."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    config = cell.config(data_dir)
    attackers = cell.attacker_ids
    registry = node.algorithms.ALGORITHMS
    node.algorithms.ALGORITHMS = _WithAttackers(registry, cell.attack, attackers)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as results:
            nodes = run_in_memory(memory_federation(config), Path(results), timeout=4 * 3600)
    except Exception as exc:  # noqa: BLE001 - a node that crashed is this cell's finding
        log.error("%s: a node crashed: %s: %s", cell.key, type(exc).__name__, exc)
        return {"key": cell.key, "crashed": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started, 1)}
    finally:
        node.algorithms.ALGORITHMS = registry
    return {"key": cell.key,
            "f1": [round(n["rounds"][-1]["global_test"]["f1"], 4) for n in nodes],
            "status": [n["status"] for n in nodes],
            **refusal_counts(nodes, attackers),
            "kept_own_models": sum(n.get("kept_own_models", 0) for n in nodes),
            "machine": machine(), "seconds": round(time.monotonic() - started, 1)}


def read_results(path: Path) -> dict[str, dict]:
    """The cells of a results.jsonl, the last line of each key winning."""
    results: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                cell = json.loads(line)
                results[cell["key"]] = cell
    return results


def honest_f1(results: dict, cell: Cell) -> float | None:
    """The honest nodes' mean final F1 in `cell`, None while missing or crashed."""
    found = results.get(cell.key)
    if found is None or "crashed" in found:
        return None
    attackers = cell.attacker_ids
    return statistics.fmean(f for i, f in enumerate(found["f1"]) if i not in attackers)


def gap(results: dict, cell: Cell) -> float | None:
    """Honest F1 under the attack minus under the withheld run of the same rule and seed."""
    attacked = honest_f1(results, cell)
    ceiling = honest_f1(results, dataclasses.replace(cell, attack="withheld"))
    return None if attacked is None or ceiling is None else attacked - ceiling


def clean_cost(results: dict, cell: Cell) -> float | None:
    """Clean F1 of `mean` minus clean F1 under the cell's rule, same split and seed."""
    clean = dataclasses.replace(cell, attack="none")
    ruled = honest_f1(results, clean)
    base = honest_f1(results, dataclasses.replace(clean, rule="mean"))
    return None if ruled is None or base is None else base - ruled


def _mean_std(values: list[float], scale: float = 1.0, signed: bool = False) -> str:
    if not values:
        return "-"
    text = f"{statistics.fmean(values) * scale:+.1f}" if signed else \
        f"{statistics.fmean(values) * scale:.3f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values) * scale:.1f}" if signed else \
            f" ± {statistics.stdev(values) * scale:.3f}"
    return text


def _honest_refused(results: dict, group: list[Cell]) -> int:
    """The honest updates refused in the finished cells of `group`, summed."""
    return sum(results[c.key].get("honest_refused", 0) for c in group
               if c.key in results and "crashed" not in results[c.key])


def _in_order(values: set[str], order: list[str]) -> list[str]:
    return [v for v in order if v in values] + sorted(values - set(order))


def verdicts(results: dict, cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """Per rule: the worst mean gap to withheld over attacks x topologies (one attacker,
    Dirichlet), the worst mean clean cost over splits x topologies, crashes, cells seen."""
    out: dict[str, dict[str, Any]] = {}
    rules = _in_order({c.rule for c in cells} & set(EARLIER), list(DEFENCES))
    for rule in rules:
        worst_gap, worst_cost = (0.0, "-"), (0.0, "-")
        mine = [c for c in cells if c.rule == rule]
        groups: dict[tuple, list[float]] = {}
        for c in mine:
            if c.attackers == 1 and c.split == "dirichlet" and c.plan and c.attack not in (
                    "none", "withheld"):
                g = gap(results, c)
                if g is not None:
                    groups.setdefault(("gap", c.topology, c.attack), []).append(g)
            if c.attack == "none" and rule != "mean":
                cost = clean_cost(results, c)
                if cost is not None:
                    groups.setdefault(("cost", c.topology, c.split), []).append(cost)
        for (kind, where, what), values in groups.items():
            mean = statistics.fmean(values)
            if kind == "gap" and mean < worst_gap[0]:
                worst_gap = (mean, f"{what} on {where}")
            if kind == "cost" and mean > worst_cost[0]:
                worst_cost = (mean, f"{what} on {where}")
        out[rule] = {"worst_gap": worst_gap, "worst_cost": worst_cost,
                     "crashed": sum("crashed" in results.get(c.key, {}) for c in mine),
                     "done": sum(c.key in results for c in mine), "cells": len(mine)}
    return out


def worst_loss(found: dict[str, Any]) -> float:
    """A rule's worst loss, in F1: the larger of its worst gap below the withheld run and
    its worst clean cost against `mean`."""
    return max(-found["worst_gap"][0], found["worst_cost"][0])


def chosen_default(found: dict[str, dict[str, Any]]) -> str | None:
    """Among the rules that crash nowhere, the one with the smallest worst loss; None when
    every rule crashed somewhere."""
    sound = [rule for rule, v in found.items() if v["crashed"] == 0]
    return min(sound, key=lambda rule: worst_loss(found[rule]), default=None)


def one_attacker_values(results: dict, cells: list[Cell], rules: Sequence[str]
                        ) -> dict[str, dict[tuple, list[float]]]:
    """Per rule, its one-attacker values by group: ("gap", split, topology, plan, attack)
    the gaps to the withheld run, ("cost", split, topology, plan, "") the clean costs."""
    groups: dict[str, dict[tuple, list[float]]] = {rule: {} for rule in rules}
    for c in cells:
        if c.rule not in groups or c.attackers != 1 or c.attack == "withheld":
            continue
        if c.attack == "none":
            value, key = clean_cost(results, c), ("cost", c.split, c.topology, c.plan, "")
        else:
            value, key = gap(results, c), ("gap", c.split, c.topology, c.plan, c.attack)
        if value is not None:
            groups[c.rule].setdefault(key, []).append(value)
    return groups


def shared_verdicts(results: dict, cells: list[Cell], candidates: Sequence[str] = CANDIDATES
                    ) -> dict[str, dict[str, Any]]:
    """Per candidate rule, its worst mean gap to withheld (one attacker) and its worst mean
    clean cost, over the groups (split, topology, attack, plan; means over seeds) that
    every candidate has measured: like against like."""
    rules = [rule for rule in candidates if any(c.rule == rule for c in cells)]
    groups = one_attacker_values(results, cells, rules)
    shared = set.intersection(*(set(g) for g in groups.values())) if groups else set()
    out = {}
    for rule in rules:
        mine = [c for c in cells if c.rule == rule]
        worst_gap, worst_cost = _worst(groups[rule], shared)
        own_gap, own_cost = _worst(groups[rule], set(groups[rule]))
        out[rule] = {"worst_gap": worst_gap, "worst_cost": worst_cost,
                     "own_gap": own_gap, "own_cost": own_cost,
                     "crashed": sum("crashed" in results.get(c.key, {}) for c in mine),
                     "groups": len(shared), "own_groups": len(groups[rule]),
                     "own_keys": frozenset(groups[rule]),
                     "done": sum(c.key in results for c in mine), "cells": len(mine)}
    return out


def _worst(groups: dict[tuple, list[float]], keys: set[tuple]
           ) -> tuple[tuple[float, str], tuple[float, str]]:
    """The worst mean gap to withheld and the worst mean clean cost over `keys` of `groups`,
    each with where it was."""
    worst_gap, worst_cost = (0.0, "-"), (0.0, "-")
    for key in sorted(keys):
        kind, split, topology, plan, attack = key
        mean = statistics.fmean(groups[key])
        where = _where(split, topology, plan, attack)
        if kind == "gap" and mean < worst_gap[0]:
            worst_gap = (mean, where)
        if kind == "cost" and mean > worst_cost[0]:
            worst_cost = (mean, where)
    return worst_gap, worst_cost


def cpu_against_mean(runs: list[dict], nodes: int = COST_NODES) -> dict[str, float]:
    """Per defence, its CPU against `mean`'s at `nodes` from defence-cost.json's runs: the
    median of the interleaved pairs' ratios per unit of fixed work (`mean` 1)."""
    plain = {"mean": 1.0} if any(r["nodes"] == nodes and r["defence"] == "mean"
                                 for r in runs) else {}
    return plain | {defence: statistics.median(ratios)
                    for (size, defence), ratios in paired_ratios(runs, per_fixed_work).items()
                    if size == nodes and ratios}


def replacement_verdict(default: dict[str, Any], other: dict[str, Any],
                        cost: float | None) -> str:
    """Whether a rule would replace the default: no crash, every group the default has
    measured at ten nodes measured too, a smaller worst loss over the groups both measured,
    and a measured CPU within COST_BUDGET times `mean`'s."""
    if other["crashed"]:
        return "no: a cell crashed"
    required = {key for key in default["own_keys"]
                if key[1] != "paper"}  # (kind, split, topology, plan, attack)
    if missing := len(required - other["own_keys"]):
        return f"no: {missing} of the default's {len(required)} groups not measured"
    if worst_loss(other) >= worst_loss(default):
        return "no: not a smaller worst loss"
    if cost is None:
        return f"no: a smaller worst loss, its CPU not measured at {COST_NODES} nodes"
    if cost > COST_BUDGET:
        return f"no: a smaller worst loss, its CPU {cost:.2f}x `mean`'s"
    return "**yes**"


def _replacement_pairs(results: dict, cells: list[Cell], default: str
                       ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per other rule sharing a group with the default, both rules' verdicts over the
    groups both have measured."""
    rules = sorted({c.rule for c in cells} - {default})
    pairs = {rule: shared_verdicts(results, cells, (default, rule)) for rule in rules}
    return {rule: found for rule, found in pairs.items()
            if len(found) == 2 and found[rule]["groups"]}


def replacement(results: dict, cells: list[Cell], default: str, costs: dict[str, float]
                ) -> str | None:
    """The rule that replaces the default by replacement_verdict (the smallest worst loss
    among those that would), or None."""
    pairs = _replacement_pairs(results, cells, default)
    replacing = [rule for rule, found in pairs.items()
                 if replacement_verdict(found[default], found[rule], costs.get(rule))
                 == "**yes**"]
    return min(replacing, key=lambda rule: (worst_loss(pairs[rule][rule]), rule),
               default=None)


def default_chain(results: dict, cells: list[Cell], costs: dict[str, float]) -> list[str]:
    """The rule chosen among the candidates, then each rule that replaced the one before
    it; the last is today's default (node.settings.AggregationConfig)."""
    chain = [chosen] if (chosen := chosen_default(shared_verdicts(results, cells))) else []
    while chain and (after := replacement(results, cells, chain[-1], costs)) not in (
            None, *chain):
        chain.append(after)
    return chain


def _replacement_summary(results: dict, cells: list[Cell], default: str,
                         costs: dict[str, float]) -> list[str]:
    pairs = _replacement_pairs(results, cells, default)
    if not pairs:
        return []
    lines = [f"## Would another rule replace `{default}`?", "",
             (f"Rule: a rule replaces the default where it crashes nowhere, has measured every "
              f"group the default has at ten nodes (split, graph, attack, with or without the "
              f"plan), its worst loss over the groups both have measured is smaller than the "
              f"default's there, and its "
              f"CPU at {COST_NODES} nodes fully connected is at most {COST_BUDGET:g} times "
              f"`mean`'s (defence-cost.md: the median of interleaved pairs per unit of fixed "
              f"work; the default's: {_cost_text(costs.get(default))}). A rule whose CPU is "
              f"not measured there does not replace it."), "",
             ("| rule | groups shared | its worst loss (points) | where | the default's there "
              "| where | CPU x `mean` | replaces the default |"),
             "|---|---|---|---|---|---|---|---|"]
    for rule in sorted(pairs, key=lambda rule: worst_loss(pairs[rule][rule])):
        mine, theirs = pairs[rule][rule], pairs[rule][default]
        lines.append(f"| {rule} | {mine['groups']} | {_loss_and_where(mine)} | "
                     f"{_loss_and_where(theirs)} | {_cost_text(costs.get(rule))} | "
                     f"{replacement_verdict(theirs, mine, costs.get(rule))} |")
    return [*lines, ""]


def colluder_gaps(results: dict, cells: list[Cell]) -> dict[str, dict[tuple, float]]:
    """Per rule, its mean gap to the withheld run (over seeds) in each group of two-attacker
    cells: (split, attackers near, topology, plan, attack)."""
    groups: dict[str, dict[tuple, list[float]]] = {}
    for c in cells:
        if c.attackers == 2 and c.attack not in ("none", "withheld"):
            value = gap(results, c)
            if value is not None:
                key = (c.split, c.near, c.topology, c.plan, c.attack)
                groups.setdefault(c.rule, {}).setdefault(key, []).append(value)
    return {rule: {key: statistics.fmean(values) for key, values in found.items()}
            for rule, found in groups.items()}


def _where(split: str, topology: str, plan: bool, attack: str = "", near: bool = False
           ) -> str:
    """A group as the report names it: "label_flip on classes20, ring, no plan"."""
    return (f"{attack + ' on ' if attack else ''}{split}, {topology}"
            + (f", {NEAR_NODES}" if near else "") + ("" if plan else ", no plan"))


def default_groups(results: dict, cells: list[Cell], rule: str
                   ) -> dict[tuple[str, str, bool], dict[str, float]]:
    """Per (split, graph, plan) at ten nodes with one attacker, `rule`'s mean gap to the
    withheld run per attack and its mean clean cost ("none"), each a mean over seeds."""
    groups: dict[tuple[str, str, bool], dict[str, float]] = {}
    for (kind, split, topology, plan, attack), values in one_attacker_values(
            results, cells, [rule])[rule].items():
        if split != "paper":
            groups.setdefault((split, topology, plan), {})[
                attack if kind == "gap" else "none"] = statistics.fmean(values)
    return groups


def _default_summary(results: dict, cells: list[Cell], default: str) -> list[str]:
    found = default_groups(results, cells, default)
    if not found:
        return []
    lines = [f"## Today's default, `{default}`, group by group", "",
             ("One attacker, ten nodes, means over seeds: per split, graph and plan, how "
              "many attacks were measured, the worst gap to the withheld run, every attack "
              f"beyond {TARGET_GAP * 100:g} points, and the clean cost against `mean`."), "",
             ("| split | graph | plan | attacks | worst gap (points) | beyond the target "
              "| clean cost (points) |"), "|---|---|---|---|---|---|---|"]
    for split, topology, plan in sorted(found, key=lambda k: (
            list(SPLITS).index(k[0]), list(TOPOLOGIES).index(k[1]), not k[2])):
        gaps = {a: v for a, v in found[(split, topology, plan)].items() if a != "none"}
        cost = found[(split, topology, plan)].get("none")
        worst = min(gaps, key=lambda a: (gaps[a], a)) if gaps else None
        beyond = ", ".join(f"{a} {gaps[a] * 100:+.1f}" for a in sorted(
            gaps, key=lambda a: (gaps[a], a)) if gaps[a] < -TARGET_GAP) or "none"
        lines.append(f"| {split} | {topology} | {'yes' if plan else 'no'} | {len(gaps)} | "
                     + ("-" if worst is None else f"{gaps[worst] * 100 + 0.0:+.1f} ({worst})")
                     + f" | {beyond} | "
                     + ("-" if cost is None else f"{cost * 100 + 0.0:+.1f}") + " |")
    return [*lines, ""]


def _colluders_summary(results: dict, cells: list[Cell], default: str | None) -> list[str]:
    found = colluder_gaps(results, cells)
    if not found:
        return []
    lines = ["## Two colluders: each rule's worst gap", "",
             ("Over the groups of two-attacker cells each rule has measured (split, where the "
              "attackers are, graph, attack, with or without the plan; the gap to the "
              "withheld run a mean over seeds): its worst, and how many are within "
              f"{TARGET_GAP * 100:g} points; beside it the default's gap in the same group."),
             "", ("| rule | groups | within target | worst gap (points) | where | the "
                  "default's there |"), "|---|---|---|---|---|---|"]
    ours = found.get(default, {})
    for rule in _in_order(set(found), list(DEFENCES)):
        gaps = found[rule]
        worst = min(gaps, key=lambda key: (gaps[key], key))
        within = sum(value >= -TARGET_GAP for value in gaps.values())
        theirs = "-" if worst not in ours else f"{ours[worst] * 100 + 0.0:+.1f}"
        split, near, topology, plan, attack = worst
        lines.append(f"| {rule} | {len(gaps)} | {within} | {gaps[worst] * 100 + 0.0:+.1f} | "
                     f"{_where(split, topology, plan, attack, near)} | {theirs} |")
    return [*lines, ""]


def _loss_and_where(found: dict[str, Any]) -> str:
    """A rule's worst loss in points and where it was, as two table cells."""
    gap, cost = found["worst_gap"], found["worst_cost"]
    where = gap[1] if -gap[0] >= cost[0] else cost[1]
    return f"{worst_loss(found) * 100 + 0.0:.1f} | {where}"  # + 0.0: no "-0.0"


def _cost_text(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.2f}x"


def _candidates_summary(found: dict[str, dict[str, Any]]) -> list[str]:
    if not found:
        return []
    groups = next(iter(found.values()))["groups"]
    lines = ["## The default, chosen by rule, on every split", "",
             ("Rule: among the candidates (" + ", ".join(f"`{r}`" for r in found) + ") that "
              "crash nowhere, the one with the smallest worst loss: the larger of its worst "
              "gap below the withheld run and its worst clean cost against `mean` (each a "
              "mean over seeds), over the groups (split, graph, attack, with or without the "
              f"plan) every candidate has measured: {groups} here. The targets: a gap within "
              f"{TARGET_GAP * 100:g} points and a cost of at most {CLEAN_COST * 100:g} point."),
             "",
             ("| rule | worst gap to withheld (points) | where | worst clean cost (points) "
              "| where | worst loss | cells crashed | cells run |"),
             "|---|---|---|---|---|---|---|---|"]
    for rule, v in found.items():
        lines.append(f"| {rule} | {v['worst_gap'][0] * 100:+.1f} | {v['worst_gap'][1]} | "
                     f"{v['worst_cost'][0] * 100:+.1f} | {v['worst_cost'][1]} | "
                     f"{worst_loss(v) * 100:.1f} | {v['crashed']} | {v['done']} |")
    lines += ["", "Each candidate over every group it has measured (not all alike):", "",
              ("| rule | groups | worst gap to withheld (points) | where | worst clean cost "
               "(points) | where |"), "|---|---|---|---|---|---|"]
    for rule, v in found.items():
        lines.append(f"| {rule} | {v['own_groups']} | {v['own_gap'][0] * 100:+.1f} | "
                     f"{v['own_gap'][1]} | {v['own_cost'][0] * 100:+.1f} | {v['own_cost'][1]} |")
    choice = chosen_default(found)
    if choice is None:
        return [*lines, "", "Chosen: none (every candidate crashed somewhere).", ""]
    met = (found[choice]["worst_gap"][0] >= -TARGET_GAP
           and found[choice]["worst_cost"][0] <= CLEAN_COST)
    return [*lines, "", (f"Chosen: **{choice}**; it {'meets' if met else 'does not meet'} "
                         "both targets on the groups measured."), ""]


def _summary(results: dict, cells: list[Cell]) -> list[str]:
    found = verdicts(results, cells)
    lines = ["## The earlier choice, on Dirichlet 0.5", "",
             ("Rule: among the rules that crash nowhere, the one with the smallest worst loss: "
              "the larger of its worst gap below the withheld run (mean over seeds; one "
              "attacker, Dirichlet 0.5; over every attack and topology) and its worst clean "
              "cost against `mean` (mean over seeds; every split and topology). The targets: "
              f"a gap within {TARGET_GAP * 100:g} points and a cost of at most "
              f"{CLEAN_COST * 100:g} point."), "",
             ("| rule | worst gap to withheld (points) | where | worst clean cost (points) "
              "| where | worst loss | cells crashed | cells run |"),
             "|---|---|---|---|---|---|---|---|"]
    for rule, v in found.items():
        lines.append(f"| {rule} | {v['worst_gap'][0] * 100:+.1f} | {v['worst_gap'][1]} | "
                     f"{v['worst_cost'][0] * 100:+.1f} | {v['worst_cost'][1]} | "
                     f"{worst_loss(v) * 100:.1f} | {v['crashed']} | "
                     f"{v['done']} of {v['cells']} |")
    choice = chosen_default(found)
    if choice is None:
        return [*lines, "", "Chosen: none (every rule crashed somewhere).", ""]
    met = (found[choice]["worst_gap"][0] >= -TARGET_GAP
           and found[choice]["worst_cost"][0] <= CLEAN_COST)
    lines += ["", (f"Chosen: **{choice}**; it {'meets' if met else 'does not meet'} both "
              "targets on the cells run."), ""]
    return lines


def _attack_table(results: dict, cells: list[Cell], split: str, attackers: int,
                  topology: str, near: bool = False) -> list[str]:
    mine = [c for c in cells if c.split == split and c.attackers == attackers
            and c.topology == topology and c.near == near]
    attacks = _in_order({c.attack for c in mine if c.attack != "none"}, list(ATTACKS))
    rules = _in_order({c.rule for c in mine if c.attack != "none"}, list(DEFENCES))
    lines = ["| rule | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
    for rule in rules:
        row = []
        for attack in attacks:
            group = [c for c in mine if c.rule == rule and c.attack == attack]
            crashed = sum("crashed" in results.get(c.key, {}) for c in group)
            f1s = [f for c in group if (f := honest_f1(results, c)) is not None]
            gaps = [g for c in group if (g := gap(results, c)) is not None]
            refused = _honest_refused(results, group)
            if crashed:
                row.append(f"a node crashed ({crashed} of {len(group)} seeds)")
                continue
            text = _mean_std(f1s)
            if attack != "withheld" and gaps:
                text += f" ({_mean_std(gaps, 100, signed=True)})"
            row.append(text + (f" [{refused} honest refused]" if refused else ""))
        lines.append(f"| {rule} | " + " | ".join(row) + " |")
    return lines + [""]


def _clean_table(results: dict, cells: list[Cell]) -> list[str]:
    clean = [c for c in cells if c.attack == "none" and c.attackers == 1]
    splits = _in_order({c.split for c in clean}, list(SPLITS))
    topologies = _in_order({c.topology for c in clean}, list(TOPOLOGIES))
    plans = sorted({c.plan for c in clean}, reverse=True)
    columns = [(s, t, p) for p in plans for s in splits for t in topologies
               if any(c.split == s and c.topology == t and c.plan == p for c in clean)]
    lines = ["| rule | " + " | ".join(f"{s}, {t}" + ("" if p else ", no plan")
                                      for s, t, p in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for rule in _in_order({c.rule for c in clean}, list(DEFENCES)):
        row = []
        for split, topology, plan in columns:
            group = [c for c in clean if c.rule == rule and c.split == split
                     and c.topology == topology and c.plan == plan]
            f1s = [f for c in group if (f := honest_f1(results, c)) is not None]
            costs = [k for c in group if (k := clean_cost(results, c)) is not None]
            refused = _honest_refused(results, group)
            text = _mean_std(f1s)
            if rule != "mean" and costs:
                text += f" (cost {_mean_std(costs, 100, signed=True)})"
            row.append(text + (f" [{refused} refused]" if refused else ""))
        lines.append(f"| {rule} | " + " | ".join(row) + " |")
    return lines + [""]


def render(results: dict, command: str, cost_runs: list[dict] | None = None) -> str:
    """The report: the default's choice, whether another rule would replace it (`cost_runs`:
    defence-cost.json's runs), then the tables, from the cells in `results`."""
    cells = [Cell.parse(key) for key in results]
    seeds = sorted({c.seed for c in cells})
    produced = (f"Produced by `{command}`; rebuild from results.jsonl (and defence-cost.json) "
                "with `python -m experiments.robustness --report-only`.")
    setup = ("Ten ProFe nodes, MNIST (10,000-image subset), 5 rounds, defaults otherwise "
             "(among them aggregation.norm_bound = 3). The defences: each aggregation rule "
             "alone (aggregation.validation = 0), `validated` (validation 0.5, then `mean`), "
             "`validated_clipped` (validation 0.5, then `clipped_mean`), `distance2` and "
             "`distance3` (validation 0.5 and the per-layer distance screen refusing beyond "
             "aggregation.distance 2 or 3, then `mean`), `influence` (`distance2` and the "
             "influence screen, aggregation.influence 1.5), `clipped2` (validation 0.5, "
             "each layer's pull clipped at 2 times the median in-neighbour's and the peer "
             "refused beyond 3: aggregation.distance 2, distance_refuse 1.5), `guarded` "
             "(`clipped2` with prototype validation and the influence screen at 1.5) and "
             "`guarded_wide` (`guarded` refusing beyond 10 times the median: distance_refuse "
             "5; the default chosen among the candidates) and `held` (`guarded_wide` holding out of the round a model "
             "no screen can judge: aggregation.unjudged = \"hold\") and `capped` "
             "(`guarded_wide` weighing no claim above the median claim: "
             "aggregation.claim_cap = 1) and `floored` (`guarded_wide` leaving out each "
             "prototype below a third of the reference, the median of each contributor's "
             "median prototype norm: aggregation.norm_floor = 3) and `guarded_own` "
             "(`guarded_wide` judging each peer's mix on the node's own classes against the "
             "other in-neighbours' spread: aggregation.held_influence 1.5; `guarded_own3` "
             "at most 3 nats; `guarded_own3_floor1` its bar never below 1 nat: "
             "aggregation.held_floor 1; `guarded_own3_head` that one mixing each peer's "
             "classifier alone, on the node's own embeddings: aggregation.held_mix = "
             "\"head\"; `guarded_own3_shared` that one splitting one budget of forward passes "
             "between validation and the held-class screen, each judging every peer on half "
             "the samples: aggregation.screen_budget = \"shared\"; `witnessed` that one "
             "refusing a peer that two other "
             "in-neighbours refused, on their own judgement, in each of their last two "
             "rounds: aggregation.witnesses 2; `witnessed_long` naming a peer refused twice up "
             "to six rounds apart: aggregation.witness_memory 0.9) and "
             "`guarded_mates` (`guarded_own3` keeping a score "
             "that two or more of the neighbour's class-mates share: aggregation.held_mates). "
             "Sections "
             "marked \"no plan\" ran with aggregation.use_plan = false: every node weighs "
             "its peers by their bounded claims. "
             "With one attacker node 0 holds a "
             "stolen key, with two nodes 0 and 5 (nodes 0 and 1 where a section says so: "
             "on 20% of the classes 0 and 5 hold the same two classes, which no honest node "
             "holds, and 0 and 1 share theirs with nodes 5 and 6); their messages pass every "
             "check. Sections "
             "marked \"paper\" ran ProFe's paper cell instead (20 nodes, full MNIST, 20% of "
             "the classes, 10 rounds: every class held by four nodes), the attacker node 4, "
             "with two 4 and 9: under seed 1 they hold 3 and 9 with nodes 14 and 19, the "
             "class-mates that aggregation.held_mates exempts at the holders of 1 and 4 "
             "(where an attacker that knows it would hide). Attacks: "
             "see `experiments/attacks.py`. Cells: the honest nodes' mean final global F1 "
             f"(argmax), mean ± std over seeds ({', '.join(map(str, seeds))}); in brackets, "
             "the paired gap in points to the withheld run of the same rule and seed (the "
             "ceiling: every update of the attackers refused at the door), mean ± std over "
             "seeds; then how many updates (or prototype rows) of honest peers the honest "
             "nodes refused, summed over seeds.")
    lines = ["# Robustness: attackers among ten ProFe nodes", "", produced, "", setup, ""]
    lines += _candidates_summary(shared_verdicts(results, cells))
    costs = cpu_against_mean(cost_runs or [])
    chain = default_chain(results, cells, costs)
    for default in chain:
        lines += _replacement_summary(results, cells, default, costs)
    if len(chain) > 1:
        lines += [f"Today's default: **{chain[-1]}** (" + ", then ".join(
            f"`{rule}`" for rule in chain) + ", each replacing the one before by the rule "
            "above; node.settings' defaults are its settings, tested).", ""]
    if chain:
        lines += _default_summary(results, cells, chain[-1])
    lines += _colluders_summary(results, cells, chain[-1] if chain else None)
    lines += _summary(results, cells)
    sections = {(c.split, c.attackers, c.near, c.plan) for c in cells if c.attack != "none"}
    for split, attackers, near, plan in sorted(
            sections, key=lambda k: (list(SPLITS).index(k[0]), k[1], k[2], not k[3])):
        for topology in _in_order({c.topology for c in cells if c.split == split
                                   and c.attackers == attackers and c.near == near
                                   and c.plan == plan and c.attack != "none"},
                                  list(TOPOLOGIES)):
            lines += [f"## {_attackers_title(attackers, near)}, {split}, {topology}"
                      + ("" if plan else ", no plan"), ""]
            lines += _attack_table(results, [c for c in cells if c.plan == plan], split,
                                   attackers, topology, near)
    if any(c.attack == "none" for c in cells):
        lines += ["## Nobody attacks: what each rule costs", "",
                  ("Clean F1 per split and topology; in brackets, points below `mean` (paired "
                  "by seed); then the honest updates refused."), ""]
        lines += _clean_table(results, cells)
    return "\n".join(lines).rstrip() + "\n"


def _attackers_title(attackers: int, near: bool) -> str:
    """How a section names its attackers."""
    if attackers == 1:
        return "one attacker"
    return f"{attackers} colluding attackers" + (f" ({NEAR_NODES})" if near else "")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.robustness",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="experiments/reports/robustness",
                        help="folder of results.jsonl and robustness.md")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds")
    parser.add_argument("--rules", nargs="+", default=list(DEFENCES),
                        choices=list(DEFENCES), help="aggregation rules")
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=ATTACKS,
                        help="attacks (none: the clean run; withheld: the ceiling)")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES),
                        choices=list(TOPOLOGIES), help="topologies")
    parser.add_argument("--splits", nargs="+", default=["dirichlet"], choices=list(SPLITS),
                        help="data splits")
    parser.add_argument("--attackers", type=int, nargs="+", default=[1], choices=[1, 2],
                        help="how many attackers")
    parser.add_argument("--near", action="store_true",
                        help=f"two attackers are nodes {NEAR_ATTACKERS[0]} and "
                        f"{NEAR_ATTACKERS[1]} (keys 2x{NEAR}), not "
                        f"{ATTACKERS[2][0]} and {ATTACKERS[2][1]}")
    parser.add_argument("--plans", nargs="+", default=["plan"], choices=["plan", "noplan"],
                        help="with the data plan, or every node ignoring it "
                        "(aggregation.use_plan = false)")
    parser.add_argument("--keys", default="", help="a file of cell keys, one a line, run "
                        "in its order instead of the product of the options above")
    parser.add_argument("--workers", type=int, default=1, help="cells run at once")
    parser.add_argument("--data-dir", default="", help="dataset folder (default: "
                        "$PROTOFED_DATA_DIR or ./data)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild robustness.md from results.jsonl (and defence-cost.json), "
                        "run nothing")
    return parser


def _listed_cells(path: Path) -> list[Cell]:
    """The cells named one key a line in `path`, in its order (blank lines and # skipped)."""
    cells = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            try:
                cell = Cell.parse(line.strip())
                cell.config("")  # an unknown split, topology or rule fails here
                _ = cell.attacker_ids  # and attackers placed where they cannot be
            except (ValueError, KeyError) as exc:
                raise SystemExit(f"{path}:{number}: not a cell key: {line.strip()!r} ({exc})")
            if cell.attack not in ATTACKS:
                raise SystemExit(f"{path}:{number}: unknown attack {cell.attack!r} in "
                                 f"{line.strip()!r}")
            cells.append(cell)
    return cells


def _product_cells(args: argparse.Namespace) -> list[Cell]:
    """The cells of the options' product; SystemExit where attackers cannot be placed."""
    cells = [Cell(split, n, topology, rule, attack, seed, plan=plan == "plan",
                  near=args.near and n == 2)
             for seed in args.seeds for plan in args.plans
             for split in args.splits for n in args.attackers
             for topology in args.topologies for rule in args.rules
             for attack in args.attacks if not (attack == "none" and n > 1)]
    for cell in cells:
        try:
            _ = cell.attacker_ids
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    return cells


def machine() -> str:
    """What ran a cell, so rows from different machines are never paired unknowingly: the
    processor's model too, since the same code and seed end up to 0.003 of F1 apart on two
    processors (their float kernels differ)."""
    import platform

    import torch
    return (f"{platform.machine()}, {processor_model()}, {os.cpu_count()} cpus, "
            f"torch {torch.__version__}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.jsonl"
    if not args.report_only:
        from node.data import default_data_dir
        data_dir = args.data_dir or str(default_data_dir())
        done = read_results(store)
        cells = _listed_cells(Path(args.keys)) if args.keys else _product_cells(args)
        todo = [c for c in cells if c.key not in done]
        print(f"{len(cells) - len(todo)} of {len(cells)} cells done; running {len(todo)}",
              file=sys.stderr)
        with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
            futures = [pool.submit(run_cell, cell, data_dir) for cell in todo]
            for finished, future in enumerate(concurrent.futures.as_completed(futures), 1):
                found = future.result()
                with store.open("a") as file:
                    file.write(json.dumps(found, sort_keys=True) + "\n")
                outcome = (f"CRASHED: {found['crashed']}" if "crashed" in found else
                           f"F1 {statistics.fmean(found['f1']):.4f}, honest refused "
                           f"{found['honest_refused']}, attacker refused "
                           f"{found['attacker_refused']}")
                print(f"[{finished}/{len(todo)}] {found['key']}: {outcome} "
                      f"({found['seconds']:.0f} s)", file=sys.stderr, flush=True)
    command = "python -m experiments.robustness"
    costs = out / "defence-cost.json"  # experiments.bench_defence's runs, where present
    cost_runs = json.loads(costs.read_text()) if costs.is_file() else []
    (out / "robustness.md").write_text(render(read_results(store), command, cost_runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
