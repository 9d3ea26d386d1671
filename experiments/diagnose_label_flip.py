"""Which channel of the label flip does the damage: a robustness cell run again with the
flipper's prototype rows stripped (it sends its flipped model and no prototype), beside the
committed cells of the same key with the full attack and with the attacker withheld.

    python -m experiments.diagnose_label_flip \
        classes20/1x/fully-connected/guarded_wide/label_flip/s1/noplan [more keys]

Prints, per key, the honest nodes' mean final global F1 of the three runs. With --scores
the full attack runs instead, and every receiver also scores each in-neighbour that its
screens kept on the receiver's own classes the neighbour does not claim (mixed in at its
weight, its excess loss against the other in-neighbours': `class_excess_scores`); the
scores of the flipper and of the honest neighbours are printed. With --head-scores the
full attack runs and every receiver scores each in-neighbour's own classifier, unmixed, on
the receiver's global prototypes of the classes the neighbour does not claim: per class its
loss beyond the median of the other in-neighbours that do not claim it, the neighbour's
largest (`largest_excess`).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch

from experiments import attacks, robustness
from node import intake
from node.algorithms.base import Payload
from node.data import default_data_dir
from node.defences import class_excess_scores, mixing_share
from node.intake.influence import (
    head_prefix,
    head_state,
    mixed,
    prototype_losses,
    root_prototypes,
)
from node.intake.samples import loss_per_class, validation_samples

RESULTS = Path("experiments/reports/robustness/results.jsonl")


def without_prototypes(base: type, attack: str) -> type:
    """The attacker of `attack`; for label_flip, one whose prototype payload has no row."""
    attacker = attacks.attacker_class(base, attack)
    if attack != "label_flip":
        return attacker

    class ModelOnly(attacker):  # type: ignore[misc, valid-type]
        def payload(self) -> dict[str, Payload]:
            out = dict(super().payload())
            sent = out["prototypes"]
            none = torch.zeros(0, dtype=torch.int64)
            out["prototypes"] = Payload(tensors={"prototypes": sent.tensors["prototypes"][:0],
                                                 "classes": none, "counts": none},
                                        meta=sent.meta)
            return out
    return ModelOnly


def honest_mean(row: dict, attackers: tuple[int, ...]) -> float:
    """The honest nodes' mean final global F1 of a results row."""
    return statistics.fmean(f for i, f in enumerate(row["f1"]) if i not in attackers)


def unclaimed_held_scores(algorithm, model, update) -> list[float | None]:
    """Per in-neighbour of `update`: its model mixed with this node's at its weight, the
    excess loss on this node's samples of each class it holds and the neighbour does not
    claim, scored against the other in-neighbours' (`class_excess_scores`)."""
    x, y = validation_samples(algorithm, len(update.peers))
    classes = algorithm.data.num_classes
    batch = algorithm.config.train.eval_batch_size
    sums, total = loss_per_class(model, x, y, classes, batch)
    own = [s / n if n else None for s, n in zip(sums, total, strict=True)]
    own_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    own_weight = float(update.states[0][1])
    scratch, rows = copy.deepcopy(model), []
    for index, peer in enumerate(update.peers):
        state, weight = update.states[index + 1]
        scratch.load_state_dict(mixed(own_state, state, mixing_share(own_weight, float(weight))))
        losses = loss_per_class(scratch, x, y, classes, batch)[0]
        claim = update.claims.get(peer)
        rows.append([None if own[c] is None or (claim is not None and claim[c] > 0)
                     else losses[c] / total[c] - own[c] for c in range(classes)])
    return class_excess_scores(rows)


def largest_excess(rows: list[list[float | None]]) -> list[float | None]:
    """Per row (an in-neighbour's loss per class, None where not measured), its largest
    excess over the median of the other rows' losses on the same class, counting only
    classes at least two other rows measured (None where there is none)."""
    out: list[float | None] = []
    for index, row in enumerate(rows):
        excesses = []
        for c, loss in enumerate(row):
            others = [r[c] for i, r in enumerate(rows) if i != index and r[c] is not None]
            if loss is not None and len(others) >= 2:
                excesses.append(loss - statistics.median(others))
        out.append(max(excesses) if excesses else None)
    return out


def unclaimed_head_scores(algorithm, model, update) -> list[float | None]:
    """Per in-neighbour of `update`: its own classifier on this node's global prototypes of
    the classes it does not claim, scored by `largest_excess` against the others'."""
    prototypes, known = root_prototypes(algorithm)
    prefix = head_prefix(model)
    if prototypes is None or known is None or prefix is None or not bool(known.any()):
        return [None] * len(update.peers)
    rows = []
    for index, peer in enumerate(update.peers):
        losses = prototype_losses(model, prototypes, known,
                                  head_state(update.states[index + 1][0], prefix))
        claim = update.claims.get(peer)
        rows.append([None if claim is not None and claim[c] > 0 else loss
                     for c, loss in enumerate(losses)])
    return largest_excess(rows)


def scores_under_attack(cell: robustness.Cell,
                        scorer=unclaimed_held_scores) -> dict[str, list[float]]:
    """The full attack, with every receiver's `scorer` scores of the neighbours its screens
    before influence kept: {"attacker": [...], "honest": [...]}."""
    found: dict[str, list[float]] = {"attacker": [], "honest": []}
    influence = intake.SCREENS["influence"]
    attackers = cell.attacker_ids

    def scoring(algorithm, model, update):
        for peer, score in zip(update.peers, scorer(algorithm, model, update), strict=True):
            if score is not None:
                found["attacker" if peer in attackers else "honest"].append(score)
        return influence(algorithm, model, update)
    intake.SCREENS["influence"] = scoring
    try:
        robustness.run_cell(cell, str(default_data_dir()))
    finally:
        intake.SCREENS["influence"] = influence
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="+", help="label_flip cell keys of experiments.robustness")
    parser.add_argument("--scores", action="store_true",
                        help="the full attack, scored on each receiver's unclaimed classes")
    parser.add_argument("--head-scores", action="store_true",
                        help="the full attack, each neighbour's classifier scored on the "
                             "global prototypes of the classes it does not claim")
    args = parser.parse_args(argv)
    cells = {}
    for key in args.keys:
        try:
            cells[key] = robustness.Cell.parse(key)
        except (ValueError, IndexError):
            parser.error(f"{key}: not a cell key of experiments.robustness "
                         "(split/Nx/topology/rule/attack/sSEED[/noplan])")
        if cells[key].attack != "label_flip":
            parser.error(f"{key}: not a label_flip cell")
    if args.scores or args.head_scores:
        for key, cell in cells.items():
            found = scores_under_attack(cell, unclaimed_head_scores if args.head_scores
                                        else unclaimed_held_scores)
            for who, values in found.items():
                print(key, who, json.dumps({
                    "judged": len(values), "median": round(statistics.median(values), 3),
                    "above 2": sum(v > 2 for v in values),
                    "95th percentile": round(statistics.quantiles(values, n=20)[-1], 3),
                    "largest": round(max(values), 3)}))
        return 0
    committed = {}
    for line in RESULTS.read_text().splitlines():
        row = json.loads(line)
        committed[row["key"]] = row  # the last row of a key is the one the report reads
    robustness.attacker_class = without_prototypes
    for key, cell in cells.items():
        stripped = honest_mean(robustness.run_cell(cell, str(default_data_dir())),
                               cell.attacker_ids)
        figures = {"model only": f"{stripped:.4f}"}
        for name, attack in (("full attack", "label_flip"), ("withheld", "withheld")):
            row = committed.get(key.replace("/label_flip/", f"/{attack}/"))
            figures[name] = f"{honest_mean(row, cell.attacker_ids):.4f}" if row else "not run"
        print(key, json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
