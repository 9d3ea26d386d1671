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
from collections import Counter, defaultdict
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
REFUSERS = Path("experiments/reports/robustness/refusers.jsonl")


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


def refusers_per_round(cell: robustness.Cell) -> dict:
    """`cell` run with every honest receiver's verdicts counted: per round and peer, how many
    honest receivers judged its model and how many refused it (at intake or by a screen)."""
    attackers, screens = cell.attacker_ids, dict(intake.SCREENS)
    first = next(iter(screens))
    rounds: Counter = Counter()
    opened: dict[int, set[int]] = {}
    judged: defaultdict[int, Counter] = defaultdict(Counter)
    refused: defaultdict[int, Counter] = defaultdict(Counter)

    def opening(algorithm, model, update):
        if algorithm.node_id not in attackers:
            rounds[algorithm.node_id] += 1
            at_door = {r.peer for r in update.refusals if "model" in r.what}
            opened[algorithm.node_id] = set(update.peers)
            judged[rounds[algorithm.node_id]].update(set(update.peers) | at_door)
            refused[rounds[algorithm.node_id]].update(at_door)
        return screens[first](algorithm, model, update)

    def closing(algorithm, model, update):
        if algorithm.node_id not in attackers:
            refused[rounds[algorithm.node_id]].update(
                opened.pop(algorithm.node_id) - set(update.peers))
        return {}
    intake.SCREENS.update({first: opening, "diagnosis": closing})
    try:
        found = robustness.run_cell(cell, str(default_data_dir()))
    finally:
        intake.SCREENS.clear()
        intake.SCREENS.update(screens)
    return {"key": cell.key, "attackers": list(attackers), "f1": found.get("f1"),
            **({"crashed": found["crashed"]} if "crashed" in found else {}),
            "rounds": [{"judged": {str(p): n for p, n in sorted(judged[r].items())},
                        "refused": {str(p): n for p, n in sorted(refused[r].items())}}
                       for r in sorted(judged)]}


def refusers_line(record: dict) -> str:
    """One table row of a `refusers_per_round` record: per round, the attacker's refusers
    of its judges, and the most refusers any honest peer had (which peer)."""
    attackers = {str(a) for a in record["attackers"]}
    cells = []
    for verdicts in record["rounds"]:
        refused, judged = verdicts["refused"], verdicts["judged"]
        attacked = ", ".join(f"{refused.get(a, 0)}/{judged.get(a, 0)}" for a in sorted(attackers))
        honest = [(n, p) for p, n in refused.items() if p not in attackers]
        count, peer = max(honest, default=(0, None))
        cells.append(f"{attacked or '-'}; "
                     + (f"{count}/{judged[peer]} (node {peer})" if peer is not None else "0"))
    return f"| {record['key']} | " + " | ".join(cells) + " |"


def refusers_report(records: list[dict]) -> str:
    """refusers.md from the `refusers_per_round` records."""
    rounds = max((len(r["rounds"]) for r in records), default=0)
    head = " | ".join(f"round {r + 1}" for r in range(rounds))
    return "\n".join([
        "# Who refuses whom: the attacker beside the most-refused honest peer",
        "",
        ("Produced by `python -m experiments.diagnose_label_flip --refusers KEY [KEY ...]`; "
         "rebuild with `python -m experiments.diagnose_label_flip --report-only`."),
        "",
        ("Per round: the attacker's model refused by how many of the honest receivers that "
         "judged it (at intake or by a screen); after the semicolon, the honest peer refused "
         "by the most honest receivers that round, of how many judged it (0: no honest peer "
         "refused). A rule that refuses a peer on other receivers' word must refuse the "
         "first and keep the second."),
        "",
        f"| cell | {head} |", "|---|" + "---|" * rounds,
        *(refusers_line(r) for r in records), ""])


def parsed_cells(parser: argparse.ArgumentParser, keys: list[str],
                 any_attack: bool) -> dict[str, robustness.Cell]:
    """The cells of `keys`; a key that is no cell (or, unless `any_attack`, no label_flip
    cell) stops the command in one line."""
    cells = {}
    for key in keys:
        try:
            cells[key] = robustness.Cell.parse(key)
        except (ValueError, IndexError):
            parser.error(f"{key}: not a cell key of experiments.robustness "
                         "(split/Nx/topology/rule/attack/sSEED[/noplan])")
        if not any_attack and cells[key].attack != "label_flip":
            parser.error(f"{key}: not a label_flip cell")
    return cells


def write_refusers(cells: dict[str, robustness.Cell], out: Path) -> None:
    """Each cell's `refusers_per_round` appended to `out` (a line per cell, the last line of a
    key the one the report reads), then refusers.md rebuilt beside it."""
    for cell in cells.values():
        record = refusers_per_round(cell)
        with out.open("a") as lines:
            lines.write(json.dumps(record) + "\n")
        print(refusers_line(record), flush=True)
    write_refusers_report(out)


def refusers_records(path: Path) -> list[dict]:
    """The `refusers_per_round` records of `path`, the last of each key, sorted by key."""
    records: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        records[record["key"]] = record
    return sorted(records.values(), key=lambda r: r["key"])


def write_refusers_report(out: Path) -> None:
    """refusers.md beside `out`, from its records."""
    (out.parent / "refusers.md").write_text(refusers_report(refusers_records(out)))


def print_scores(cells: dict[str, robustness.Cell], heads: bool) -> None:
    """--scores and --head-scores: the flipper's scores beside the honest neighbours'."""
    for key, cell in cells.items():
        found = scores_under_attack(cell, unclaimed_head_scores if heads
                                    else unclaimed_held_scores)
        for who, values in found.items():
            print(key, who, json.dumps({
                "judged": len(values), "median": round(statistics.median(values), 3),
                "above 2": sum(v > 2 for v in values),
                "95th percentile": round(statistics.quantiles(values, n=20)[-1], 3),
                "largest": round(max(values), 3)}))


def print_stripped(cells: dict[str, robustness.Cell]) -> None:
    """The flipper without prototype rows beside the committed full attack and withheld run."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", help="cell keys of experiments.robustness "
                                                "(label_flip ones but with --refusers)")
    parser.add_argument("--scores", action="store_true",
                        help="the full attack, scored on each receiver's unclaimed classes")
    parser.add_argument("--head-scores", action="store_true",
                        help="the full attack, each neighbour's classifier scored on the "
                             "global prototypes of the classes it does not claim")
    parser.add_argument("--refusers", action="store_true",
                        help="per round, how many honest receivers refused each peer")
    parser.add_argument("--out", type=Path, default=REFUSERS,
                        help=f"where --refusers appends its lines (default {REFUSERS})")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild refusers.md from --out, running nothing")
    args = parser.parse_args(argv)
    if args.report_only:
        if not args.out.is_file():
            parser.error(f"{args.out}: no such file (run --refusers first)")
        write_refusers_report(args.out)
        return 0
    if not args.keys:
        parser.error("name at least one cell key")
    cells = parsed_cells(parser, args.keys, any_attack=args.refusers)
    if args.refusers:
        write_refusers(cells, args.out)
    elif args.scores or args.head_scores:
        print_scores(cells, args.head_scores)
    else:
        print_stripped(cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
