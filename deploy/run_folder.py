"""A run's folder, the one thing both wings share: the backends write it, the views read it.

Its files: `federation.json` (the resolved federation every node runs), `run.json` (how
the launcher ran it), `node-<i>.json` (each node's record), `logs/node-<i>.log`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from node.record import NodeRecord, write_json_atomically

FEDERATION_FILE = "federation.json"
RUN_FILE = "run.json"


def read_node_results(results_dir: Path, nodes: int) -> list[NodeRecord]:
    """Every node's record; a node that wrote none (or garbage) gets a 'missing' one."""
    return RecordReader(results_dir, nodes).read()


class RecordReader:
    """Reads every node's record again and again, parsing only the files that changed since
    the last read: a watcher reading 100 records of 3 rounds every half second spent most
    of a core on it."""

    def __init__(self, results_dir: Path, nodes: int) -> None:
        self.results_dir, self.nodes = results_dir, nodes
        self._seen: dict[int, tuple[tuple[int, int, int], NodeRecord]] = {}

    def read(self) -> list[NodeRecord]:
        return [self._record(node_id) for node_id in range(self.nodes)]

    def _record(self, node_id: int) -> NodeRecord:
        path = self.results_dir / f"node-{node_id}.json"
        try:
            stat = path.stat()
            # nodes replace their file (a rename): a new version is a new inode
            version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if node_id in self._seen and self._seen[node_id][0] == version:
                return self._seen[node_id][1]
            record = NodeRecord.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError):
            # not there yet, or half written by something other than a node (nodes replace
            # their file whole): the last whole version until it is whole again
            return self._seen[node_id][1] if node_id in self._seen else NodeRecord(node=node_id)
        self._seen[node_id] = (version, record)
        return record


UNKNOWN_EXIT = None  # a node that ended while nobody waited for it (its launcher was gone)


def mark_dead(results_dir: Path, records: list[NodeRecord],
              exit_codes: dict[int, int | None]) -> list[NodeRecord]:
    """The records again, where a node's process ended while its own record still says it
    was working (killed: SIGKILL, out of memory) rewritten as "dead" with its exit code
    (UNKNOWN_EXIT: ended, code unknown), in its file too: the record is the node's
    account, and it can no longer give one."""
    marked = []
    for record in records:
        if record.node in exit_codes and record.status in ("starting", "running"):
            code = exit_codes[record.node]
            how = ("exit code unknown: its launcher was gone" if code is UNKNOWN_EXIT else
                   f"killed by signal {-code}" if code < 0 else f"exit code {code}")
            record = dataclasses.replace(record, status="dead", error=record.error or (
                f"its process ended ({how}) without recording an end"))
            write_json_atomically(results_dir / f"node-{record.node}.json", record.to_dict())
        marked.append(record)
    return marked


def log_tail(results_dir: Path, node_id: int, lines: int = 15) -> str:
    """The last lines of a node's log, for reporting a failure."""
    path = results_dir / "logs" / f"node-{node_id}.log"
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
