"""Run an experiment matrix: every cell is a normal `protofed up`; finished cells are kept.

    python -m experiments.run experiments/matrices/cpu.toml [--results DIR] [--dry-run]
        [--backend sim] [--workers N]

On the sim backend (`--backend sim`) each cell is one process in virtual time, and
`--workers` cells run at once (default: one per core), each computing on its share of the
cores (deploy.cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import os
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from node.config import from_dict
from node.errors import ConfigError

log = logging.getLogger("experiments")

DEFAULT_CODECS = {"profe": "int16"}  # "auto": the paper's codec for ProFe, fp32 otherwise
MATRIX_KEYS = {"name", "algorithms", "datasets", "partitions", "topologies", "codecs", "nodes",
               "seeds", "base", "variants"}
OPTIONAL_KEYS = {"base", "variants"}


@dataclass(frozen=True)
class Cell:
    """One federation of the matrix."""

    algorithm: str  # a registered algorithm or a [variants] name
    dataset: str
    partition: str
    topology: str
    codec: str
    nodes: int
    seed: int

    @property
    def key(self) -> str:
        """A folder name that says what the cell is."""
        return "_".join([self.dataset, self.partition.replace(":", "-"), self.topology,
                         f"n{self.nodes}", self.algorithm, self.codec.replace("/", "-proto-"),
                         f"s{self.seed}"])

    def overrides(self, variants: dict | None = None) -> dict:
        """The config keys this cell sets on top of the matrix's base (and its variant)."""
        scheme, _, value = self.partition.partition(":")
        data = {"dataset": self.dataset, "partition": scheme}
        if scheme == "classes":
            data["classes_fraction"] = float(value)
        elif scheme == "dirichlet":
            data["alpha"] = float(value)
        model_codec, _, prototype_codec = self.codec.partition("/")  # "int16/fp32"
        variant = (variants or {}).get(self.algorithm, {"algorithm": self.algorithm})
        return merge(variant, {
            "name": self.key.replace(".", "p"), "nodes": self.nodes, "seed": self.seed,
            "data": data, "topology": {"kind": self.topology},
            "exchange": {"codec": model_codec, "prototype_codec": prototype_codec}})


def load_matrix(path: Path) -> dict:
    """Read and check a matrix file; every cell's config is validated before anything runs."""
    try:
        matrix = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    unknown = sorted(set(matrix) - MATRIX_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]} (known: {sorted(MATRIX_KEYS)})")
    missing = sorted(MATRIX_KEYS - set(matrix) - OPTIONAL_KEYS)
    if missing:
        raise ConfigError(f"{path}: missing key {missing[0]}")
    for name, variant in matrix.get("variants", {}).items():
        if not isinstance(variant, dict) or not isinstance(variant.get("algorithm"), str):
            raise ConfigError(f"{path}: [variants.{name}] must be a table with an algorithm key")
    return matrix


def cells(matrix: dict) -> list[Cell]:
    """Every combination of the matrix's axes, by dataset, partition and then algorithm;
    codec "auto" picks each algorithm's default."""
    out = []
    for algorithm, dataset, partition, topology, codec, nodes, seed in itertools.product(
            matrix["algorithms"], matrix["datasets"], matrix["partitions"],
            matrix["topologies"], matrix["codecs"], matrix["nodes"], matrix["seeds"]):
        if codec == "auto":
            base = matrix.get("variants", {}).get(algorithm, {}).get("algorithm", algorithm)
            codec = DEFAULT_CODECS.get(base, "fp32")
        out.append(Cell(algorithm, dataset, partition, topology, codec, nodes, seed))
    order = {axis: {value: i for i, value in enumerate(matrix[axis])}
             for axis in ("datasets", "partitions", "algorithms")}
    return sorted(out, key=lambda c: (order["datasets"][c.dataset],
                                      order["partitions"][c.partition],
                                      order["algorithms"][c.algorithm]))


def merge(base: dict, extra: dict) -> dict:
    """`base` with `extra`'s tables merged in, key by key."""
    merged = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def cell_config(matrix: dict, cell: Cell, results_root: Path, backend: str = "local",
                cores: int = 0) -> dict:
    """The full federation config of one cell, results under `results_root`; on the sim
    backend computing on `cores` cores (0: all)."""
    config = merge(matrix.get("base", {}), cell.overrides(matrix.get("variants")))
    deploy = {"results_dir": str(results_root), "backend": backend}
    if cores:
        deploy["cores"] = cores
    return merge(config, {"deploy": deploy})


def is_done(run_dir: Path) -> bool:
    """A cell counts as done once its summary exists with every node finished."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return not summary.get("failed_nodes")


def run_cell(matrix: dict, cell: Cell, results_root: Path, backend: str = "local",
             cores: int = 0) -> int:
    """Run one cell as a normal federation; a half-finished earlier attempt is replaced."""
    run_dir = results_root / cell.key
    if run_dir.exists():
        failed = run_dir.with_name(run_dir.name + f".failed-{int(time.time())}")
        run_dir.rename(failed)
        log.warning("%s: an unfinished earlier run was moved to %s", cell.key, failed.name)
    config_path = results_root / "configs" / f"{cell.key}.json"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(cell_config(matrix, cell, results_root, backend, cores),
                                      indent=1))
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "up", "-c", str(config_path),
                           "--run-id", cell.key], capture_output=True, text=True, check=False)
    if run_dir.is_dir():  # what the report calls this cell, variants included
        (run_dir / "cell.json").write_text(json.dumps(dataclasses.asdict(cell), indent=1))
    (results_root / "logs").mkdir(exist_ok=True)
    (results_root / "logs" / f"{cell.key}.txt").write_text(done.stdout + done.stderr)
    return done.returncode


def record_run(results_root: Path, run: dict) -> None:
    """Append one invocation (command, commit, cells) to the folder's run-info.json."""
    path = results_root / "run-info.json"
    try:
        runs = json.loads(path.read_text())
    except (OSError, ValueError):
        runs = []
    path.write_text(json.dumps([*runs, run], indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.run", description=__doc__)
    parser.add_argument("matrix", type=Path, help="matrix TOML file")
    parser.add_argument("--results", type=Path, help="default experiments/results/<name>")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and stop")
    parser.add_argument("--backend", choices=("local", "sim"), default="local",
                        help="where each cell runs (sim: virtual time, several cells at once)")
    parser.add_argument("--workers", type=int, default=0,
                        help="sim: cells at once (default: one per core)")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    workers = 1 if args.backend == "local" else max(1, args.workers or cores)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        matrix = load_matrix(args.matrix)
        results_root = (args.results or Path("experiments/results") / matrix["name"]).resolve()
        todo = cells(matrix)
        for cell in todo:  # a bad cell stops the matrix before anything runs
            from_dict(cell_config(matrix, cell, results_root, args.backend),
                      source=f"cell {cell.key}")
    except ConfigError as exc:
        print(f"experiments: {exc}", file=sys.stderr)
        return 2
    pending = [c for c in todo if not is_done(results_root / c.key)]
    print(f"{len(todo)} cells, {len(todo) - len(pending)} already done, {len(pending)} to run "
          f"-> {results_root}", file=sys.stderr)
    if args.dry_run:
        print("\n".join(c.key for c in pending))
        return 0
    results_root.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    record_run(results_root, {"command": "python -m experiments.run "
                                         + " ".join(argv or sys.argv[1:]),
                              "commit": commit, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "cells": [c.key for c in pending]})
    share = max(1, cores // workers) if args.backend == "sim" else 0
    ended = iter(range(1, len(pending) + 1))

    def one(cell: Cell) -> int:
        started = time.monotonic()
        code = run_cell(matrix, cell, results_root, args.backend, share)
        print(f"[{next(ended)}/{len(pending)}] {cell.key}: "
              f"{'ok' if code == 0 else f'exit {code}'} in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
        return code

    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(one, pending))
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
