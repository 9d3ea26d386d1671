"""Check one node's own folder where it lies: `python -m node.data.check --root DIR --node I`.

The swarm backend runs this on the machine that holds node I's folder, before any node
starts (the launcher cannot read another machine's disk). It prints one line,
`protofed-folder-check {json}`: the node, and either what the check found (local test
samples, a global test set beside the folder) or the error naming the file; it exits 1 on
an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from node.data.folders import check_node_folder, read_manifest
from node.errors import DataError

PREFIX = "protofed-folder-check "


def parse_line(line: str) -> dict | None:
    """The report in one output line of a check, None for any other line."""
    if not line.startswith(PREFIX):
        return None
    try:
        report = json.loads(line[len(PREFIX):])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.data.check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the folder holding node-<i>/")
    parser.add_argument("--node", type=int, required=True)
    args = parser.parse_args(argv)
    root = Path(args.root)
    try:
        found = asdict(check_node_folder(root, args.node, read_manifest(root)))
    except DataError as exc:
        print(PREFIX + json.dumps({"node": args.node, "error": str(exc)}), flush=True)
        return 1
    print(PREFIX + json.dumps({"node": args.node, **found}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
