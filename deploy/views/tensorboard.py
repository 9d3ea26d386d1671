"""TensorBoard export of a run: one TensorBoard run per node (a folder `node-<i>`), with per
round the node's F1 and accuracy (global and local test), its training losses, the bytes it
sent and received (in all and per peer), and the config as text and as hyperparameters.

Written from the node records alone, so it serves every backend, live (`protofed up
--tensorboard DIR`: new rounds are written and flushed as the records show them) or after
the run (`protofed tensorboard RUN DIR`). Needs the `tensorboard` package
(`pip install tensorboard`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from node.errors import ConfigError
from node.record import NodeRecord, RoundRecord, measured

HINT = ("TensorBoard export needs the tensorboard package, which this environment lacks: "
        "pip install tensorboard")


def scalars(record: RoundRecord) -> dict[str, float]:
    """Every scalar a round adds to its node's TensorBoard run, by tag."""
    out = {"bytes/sent": float(record.bytes_sent),
           "bytes/received": float(record.bytes_received)}
    for name, evaluation in (("global", record.global_test), ("local", record.local_test)):
        if measured(evaluation):  # not in a round left unevaluated (report.eval_every)
            out |= {f"f1/{name}": evaluation.f1, f"accuracy/{name}": evaluation.accuracy}
    out.update({f"train/{name}": float(value) for name, value in record.train.items()})
    for direction, by_peer in (("sent_to", record.bytes_sent_by_peer),
                               ("received_from", record.bytes_received_by_peer)):
        out.update({f"bytes_{direction}/peer_{peer}": float(sum(kinds.values()))
                    for peer, kinds in by_peer.items()})
    return out


def hyperparameters(config: dict[str, Any]) -> dict[str, Any]:
    """The config flattened to `table.key` values TensorBoard takes (lists as text)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix.rstrip(".")] = value
        else:
            flat[prefix.rstrip(".")] = json.dumps(value)

    walk("", config)
    return flat


class TensorBoardExport:
    """Writes the rounds it has not written yet of each node, one TensorBoard run per node."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(HINT) from None
        self.folder = Path(folder)
        self.config = config
        self._writer_class = SummaryWriter
        self._writers: dict[int, Any] = {}
        self._written: dict[int, int] = {}  # node -> rounds written

    def _writer(self, node: int) -> Any:
        if node not in self._writers:
            writer = self._writer_class(log_dir=str(self.folder / f"node-{node}"))
            writer.add_text("config", "```\n" + json.dumps(self.config, indent=1) + "\n```")
            self._writers[node] = writer
        return self._writers[node]

    def update(self, records: list[NodeRecord]) -> None:
        """Write the rounds that appeared since the last update, and flush them."""
        for node in records:
            new = node.rounds[self._written.get(node.node, 0):]
            if not new:
                continue
            writer = self._writer(node.node)
            for record in new:
                for tag, value in scalars(record).items():
                    writer.add_scalar(tag, value, record.round)
            writer.flush()
            self._written[node.node] = len(node.rounds)

    def close(self, records: list[NodeRecord]) -> None:
        """The last rounds, then each node's hyperparameters beside its final F1."""
        self.update(records)
        for node in records:
            if node.rounds:
                last = node.rounds[-1]
                self._writer(node.node).add_hparams(
                    hyperparameters(self.config),
                    {"final/f1_global": last.global_test.f1,
                     "final/accuracy_global": last.global_test.accuracy},
                    run_name="hparams")
        for writer in self._writers.values():
            writer.close()


def export(records: list[NodeRecord], config: dict[str, Any], folder: Path) -> Path:
    """A finished run's records as TensorBoard runs under `folder`, in place of the event
    files an earlier export left there (TensorBoard reads every file of a run: a second
    export would draw each point twice)."""
    writer = TensorBoardExport(folder, config)
    for earlier in Path(folder).glob("node-*/**/events.out.tfevents.*"):
        earlier.unlink()
    writer.close(records)
    return folder
