"""Time and memory for one node to have its data, as a container node and as a forked node.

    python -m experiments.bench_data [--tree PATH] [--repeat 5]

Node 0 of a 20-node FedAvg federation on a 50,000-image MNIST subset (the lifecycle
bench's setting) loads its share with `node.runtime.load_node_data`, in a fresh process:
- own: the process loads the pooled dataset itself, as each Docker container does;
- fork: a launcher warms up (`deploy.backends.local.warm_up`), then forks the node, as `protofed up`
  does locally;
- per-node: the process reads its own folder alone (data.layout "per-node", the folders
  `protofed partition` writes for the same config, made once into a temporary folder).
Reported: seconds to loaded data, what loading added to the node process's memory
(/proc/self/smaps_rollup: RSS, PSS, private dirty = pages only this process holds and
must keep, private clean), and the process's peak resident memory after loading (VmHWM,
torch's import included). `--tree` runs another checkout's code (for a before/after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import json, os, sys, time
from pathlib import Path
import torch
from node.config import from_dict
from node.runtime import load_node_data

def rollup():
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":")
        fields[key] = int(value.split()[0]) * 1024
    return fields

layout = {"layout": "per-node", "dir": sys.argv[3]} if sys.argv[1] == "per-node" else {}
config = from_dict({"nodes": 20, "algorithm": "fedavg",
                    "data": {"dataset": "mnist", "dir": sys.argv[2], "download": False,
                             "subset": 50000, **layout}})
torch.set_num_threads(1)

def node(out):
    before = rollup()
    started = time.perf_counter()
    share = load_node_data(config, 0, torch.device("cpu"))
    seconds = time.perf_counter() - started
    after = rollup()
    keys = ("Rss", "Pss", "Private_Dirty", "Private_Clean")
    peak = next(int(line.split()[1]) * 1024 for line in
                Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
    os.write(out, json.dumps({"seconds": seconds, "train": len(share.train_y), "peak": peak,
                              **{k: after[k] - before[k] for k in keys}}).encode())

if sys.argv[1] in ("own", "per-node"):
    node(1)
else:
    from deploy.backends.local import warm_up
    warm_up(config)  # what `protofed up` loads before it forks the nodes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        node(write)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    print(os.read(read, 4096).decode())
"""


def probe(mode: str, tree: Path, data_dir: str, folders: str = "") -> dict:
    """One fresh process loading node 0's data in `mode`."""
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE, mode, data_dir, folders], cwd=tree,
                            env=environment, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def partitioned(data_dir: str, out: Path) -> str:
    """The probe's federation written as one folder per node into `out` (`protofed
    partition`); that folder."""
    from deploy.partition import partition
    from node.config import from_dict
    config = from_dict({"nodes": 20, "algorithm": "fedavg",
                        "data": {"dataset": "mnist", "dir": data_dir, "download": False,
                                 "subset": 50000}})
    partition(config, out, lambda line: None)
    return str(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose code runs")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
    probe("own", args.tree, data_dir)  # builds the cache if the tree has one; warms the page cache
    print(f"tree {args.tree}, data {data_dir}, median of {args.repeat}")
    print("| mode | seconds to loaded data | RSS added (MB) | PSS added (MB) | "
          "private dirty added (MB) | private clean added (MB) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        folders = partitioned(data_dir, Path(scratch) / "parts")
        for mode in ("own", "fork", "per-node"):
            runs = [probe(mode, args.tree, data_dir, folders) for _ in range(args.repeat)]

            def median(key: str, runs: list[dict] = runs) -> float:
                return statistics.median(r[key] for r in runs)

            print(f"| {mode} | {median('seconds'):.3f} | {median('Rss') / 1e6:.1f} | "
                  f"{median('Pss') / 1e6:.1f} | {median('Private_Dirty') / 1e6:.1f} | "
                  f"{median('Private_Clean') / 1e6:.1f} | {median('peak') / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
