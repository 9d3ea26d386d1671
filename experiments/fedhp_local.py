"""The FedHP-protocol cell without its exchange: what a client's own data gives.

Each sampled client of a protocol cell (`experiments/matrices/fedhp-protocol.toml`) trains
alone, with the cell's trainer, data, draws and seeds: the rounds it is drawn for plus the
last fit, then its local test set is scored as the cell scores it. Nothing is sent or
received, so the figure is what the exchange adds to (or takes from) the cell's client
accuracy; a variant (`--set train.batch_size=10`) changes one setting of the cell.

    python -m experiments.fedhp_local --algorithm fedhp-server --partition iid --seed 1 \
        --clients 10 [--set KEY=VALUE ...] [--out experiments/reports/fedhp-protocol/local.jsonl]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

from experiments.run import Cell, cell_config, load_matrix
from node import config as config_module
from node.algorithms import create
from node.errors import ConfigError
from node.runtime import evaluate, load_node_data
from node.topology_settings import participation
from topology.participation import Participation

MATRIX = Path("experiments/matrices/fedhp-protocol.toml")
OUT = Path("experiments/reports/fedhp-protocol/local.jsonl")

log = logging.getLogger("experiments.fedhp_local")


def sampled_clients(nodes: int, hub: int, count: int) -> list[int]:
    """`count` clients spread evenly over the federation's, the hub left out."""
    clients = [i for i in range(nodes) if i != hub]
    step = max(1, len(clients) // max(1, count))
    return clients[::step][:count]


def drawn_rounds(participation: Participation, nodes: int, rounds: int, client: int
                 ) -> list[int]:
    """The rounds 1..rounds in which `client` is drawn to train (as the cell's schedule)."""
    return [r for r in range(1, rounds + 1) if client in participation.chosen(nodes, r)]


def cell_federation(algorithm: str, partition: str, seed: int, settings: list[str],
                    matrix_path: Path = MATRIX):
    """The cell's validated config, with the `settings` overrides applied; ConfigError
    naming what is not a cell of the matrix."""
    matrix = load_matrix(matrix_path)
    for axis, value in (("algorithms", algorithm), ("partitions", partition),
                        ("seeds", seed)):
        if value not in matrix[axis]:
            raise ConfigError(f"{matrix_path}: {value!r} is not one of its {axis} "
                              f"{matrix[axis]}")
    cell = Cell(algorithm, matrix["datasets"][0], partition, matrix["topologies"][0],
                matrix["codecs"][0], matrix["nodes"][0], seed)
    raw = cell_config(matrix, cell, Path("unused"), backend="sim")
    return cell.key, config_module.from_dict(raw, source=str(matrix_path), overrides=settings)


def train_alone(config, client: int) -> dict:
    """One client through the cell's rounds with nothing exchanged: its local test scores."""
    device = torch.device("cpu")
    data = load_node_data(config, client, device)
    trainer = create(config.algorithm, config, data, device, client)
    rounds = drawn_rounds(participation(config), config.nodes, config.rounds, client)
    for round_ in rounds:
        trainer.train_round(round_)
    if config.train.final_fit:
        trainer.train_round(config.rounds + 1)  # the runtime's last fit, its own shuffle
    scored = evaluate(trainer, data.test_x, data.test_y, data.num_classes,
                      config.train.eval_batch_size)
    return {"node": client, "rounds_trained": len(rounds) + int(config.train.final_fit),
            "accuracy": scored.accuracy, "f1": scored.f1,
            "by_rule": {rule: figures["accuracy"] for rule, figures in scored.by_rule.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="fedhp-server", help="the matrix's algorithm")
    parser.add_argument("--partition", default="iid")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=10, help="clients sampled evenly")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="one change to the cell (repeatable)")
    parser.add_argument("--matrix", type=Path, default=MATRIX)
    parser.add_argument("--out", type=Path, default=OUT, help="rows appended here")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(args.threads)
    try:
        key, config = cell_federation(args.algorithm, args.partition, args.seed,
                                      args.settings, args.matrix)
    except ConfigError as exc:
        print(f"experiments.fedhp_local: {exc}", file=sys.stderr)
        return 2
    clients = sampled_clients(config.nodes, config.topology.hub, args.clients)
    started, rows = time.monotonic(), []
    for done, client in enumerate(clients, 1):
        rows.append(train_alone(config, client))
        print(f"{key} {' '.join(args.settings) or '(as the cell)'}: client {client} "
              f"{rows[-1]['accuracy']:.4f} ({done}/{len(clients)}, "
              f"{time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    line = {"key": key, "algorithm": args.algorithm, "partition": args.partition,
            "seed": args.seed, "settings": sorted(args.settings), "nodes": rows,
            "seconds": round(time.monotonic() - started, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
    mean = sum(r["accuracy"] for r in rows) / len(rows)
    print(f"{key} {' '.join(args.settings) or '(as the cell)'}: mean {100 * mean:.2f}% over "
          f"{len(rows)} clients alone -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
