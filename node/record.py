"""What a node records: one typed record per node, written by the round loop as
node-<i>.json and read back by the launcher's table and the experiment reports."""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PeerKindBytes = dict[str, dict[str, int]]  # {peer id: {message kind: bytes}}


@dataclass
class Evaluation:
    """One test set under every prediction rule; the top level is the reported `rule`."""

    accuracy: float = 0.0
    f1: float = 0.0
    top_class_share: float = 0.0
    rule: str = ""
    by_rule: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class RoundRecord:
    """One round of one node: metrics after aggregation, losses, timings, peers, bytes."""

    round: int = 0
    local_test: Evaluation = field(default_factory=Evaluation)
    global_test: Evaluation = field(default_factory=Evaluation)
    train: dict[str, float] = field(default_factory=dict)
    # train.final_fit, the last round: the statistics of the fit after the aggregation
    final_fit: dict[str, float] | None = None
    train_seconds: float = 0.0
    communication_seconds: float = 0.0
    aggregation_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    recorded_at: float = 0.0  # Unix time the round's record was made (every metric in it)
    cpu_seconds: float = 0.0  # CPU time of the node's process (all its threads) until then
    missing_peers: list[int] = field(default_factory=list)
    # participation < 1: the nodes drawn to train and send this round (the hub aside)
    participants: list[int] | None = None
    rejected_peers: list[int] = field(default_factory=list)  # some part of whose update was
    # refused; each refusal: {"peer", "what", "rule", "reason"} (node.algorithms.base.Refusal)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    # more in-neighbours arrived than aggregation.judged_per_round: those not drawn to be
    # judged this round, left out of it (model and prototypes)
    undrawn_peers: list[int] | None = None
    # "reputation": this node's trust in each in-neighbour after the round, by peer id
    trust: dict[str, float] | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    bytes_sent_by_peer: PeerKindBytes = field(default_factory=dict)
    bytes_received_by_peer: PeerKindBytes = field(default_factory=dict)
    # shaped links: {peer: {kind: seconds}} from each message's sending to its arrival
    transfer_seconds_by_peer: dict[str, dict[str, float]] | None = None
    # the exchanged model's sketch (node.consensus), base64 float32, for consensus distance
    model_sketch: str | None = None
    # {phase: [seconds, CPU seconds]} of the round (node.profile.PHASES)
    phases: dict[str, list[float]] | None = None


# The statuses a node's record ends in (a "missing" record has not started).
ENDED_STATUSES = ("finished", "failed", "stopped", "dead", "missed", "left")


@dataclass
class NodeRecord:
    """A node's whole run. Optional parts (None) are left out of the file."""

    node: int = -1  # -1: a record that does not say
    # starting, running, finished, failed, stopped, missed (back after the last round),
    # left (left for good as the scenario says);
    # dead: deploy.views.report's word for a process that ended while its file says it runs
    status: str = "missing"
    algorithm: str = ""
    config_digest: str = ""
    config_name: str = ""
    in_neighbours: list[int] = field(default_factory=list)
    out_neighbours: list[int] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)
    rounds_done: int = 0
    rounds_total: int = 0
    threads: int | None = None
    device: str | None = None
    train_samples: int | None = None
    test_samples: int | None = None
    global_test_samples: int | None = None
    started_at: float | None = None  # Unix time this node's process began
    setup_seconds: float | None = None
    handshake_seconds: float | None = None
    elapsed_seconds: float | None = None
    # bytes: counted when handed to a live connection (sent) or read and metered (received)
    bytes_sent: int = 0
    bytes_received: int = 0
    bytes_sent_by_peer: PeerKindBytes = field(default_factory=dict)
    bytes_received_by_peer: PeerKindBytes = field(default_factory=dict)
    bytes_sent_by_kind: dict[str, int] = field(default_factory=dict)
    bytes_received_by_kind: dict[str, int] = field(default_factory=dict)
    dropped_count: int = 0
    dropped_bytes: int = 0
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    dropped_by_peer: dict[str, int] = field(default_factory=dict)
    dropped_messages: list[dict[str, Any]] = field(default_factory=list)  # a bounded sample
    unreachable_peers: list[int] = field(default_factory=list)
    # CurveZMQ (node.net.gate): connections refused for a key that is not an in-neighbour's,
    # for a key opening too many connections, addresses banned for refused handshakes, and
    # incoming handshakes that failed (refusals included); absent without security
    refused_keys: int | None = None
    refused_repeats: int | None = None
    banned_addresses: int | None = None
    # rounds whose aggregated model computed NaN or infinities: the node kept its own
    kept_own_models: int = 0
    max_message_bytes: int | None = None  # the largest message accepted from a neighbour
    # [links]: each in-neighbour's link bandwidth in bits/s as configured (0: not limited)
    in_link_bandwidth: dict[str, int] | None = None
    failed_handshakes: int | None = None
    # incoming connections closed holding more unread bytes than an honest full queue
    cut_connections: int | None = None
    no_goodbye_from: list[int] | None = None
    peak_rss_bytes: int | None = None
    interface_bytes: dict[str, int] | None = None  # containers: their interface's counters
    machine: str | None = None  # the swarm machine (hostname) the node ran on
    error: str | None = None
    restarts: int | None = None
    away_rounds: list[int] | None = None  # rounds the scenario keeps this node away
    model_parameters: int | None = None  # values in the exchanged model (its sketch's source)
    rejoined_at: list[int] | None = None
    before_restart: dict[str, Any] | None = None  # totals of the earlier processes

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of node-<i>.json."""
        return self._plain_fields()

    def to_dict_without_rounds(self) -> dict[str, Any]:
        """`to_dict()` less its rounds (RecordText encodes those one by one)."""
        return self._plain_fields(skip="rounds")

    def _plain_fields(self, skip: str = "") -> dict[str, Any]:
        return {f.name: plain(value) for f in dataclasses.fields(self)
                if f.name != skip and (value := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> NodeRecord:
        """A record read back from JSON; keys this version does not know are ignored."""
        return _build(cls, raw)


def plain(value: Any) -> Any:
    """`value` with every dataclass in it turned into a dict, lists and dicts copied:
    `dataclasses.asdict` without its deep copy of every leaf (a node rewrites its record
    every round, and at 100 peers asdict took 15 ms of each write)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """`cls`'s field types, resolved once (resolving them for every round read back was
    four fifths of a report's time)."""
    return typing.get_type_hints(cls)


def _build(cls: type, raw: dict[str, Any]) -> Any:
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value, hint = raw[f.name], hints[f.name]
        if hint is Evaluation and isinstance(value, dict):
            value = _build(Evaluation, value)
        elif f.name == "rounds" and isinstance(value, list):
            value = [_build(RoundRecord, r) for r in value if isinstance(r, dict)]
        values[f.name] = value
    return cls(**values)


def measured(evaluation: Evaluation) -> bool:
    """Whether a test set was measured: not in a round left unevaluated (report.eval_every),
    nor on a test set with no image."""
    return bool(evaluation.by_rule)


def final_evaluation(record: NodeRecord, split: str) -> Evaluation | None:
    """The last recorded round's `split` ("local_test" or "global_test"), if any."""
    return getattr(record.rounds[-1], split) if record.rounds else None


def to_json(document: Any) -> str:
    """`document` as node-<i>.json holds it: sorted keys, compact (with an indent json
    encodes in Python, 5 times slower; `python -m json.tool FILE` shows it indented)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    """Replace `path` with `document` as JSON through a temporary file, so a reader never
    sees half of it."""
    write_text_atomically(path, to_json(document))


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` through a temporary file, so a reader never sees half."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


@dataclass
class RecordText:
    """A node's record as `to_json` writes it, each round encoded once and again only when
    its record was recounted (new byte dicts; nothing else of a round changes once kept): a
    node rewrites its record every round, and encoding every round again grew with the run
    (experiments/reports/long-run)."""

    # per position in the rounds: the record, its byte dicts when encoded, its text
    _rounds: list[tuple[RoundRecord, tuple, str]] = field(default_factory=list)

    def text(self, record: NodeRecord, fresh: bool = False) -> str:
        """`to_json(record.to_dict())`, from the cached rounds where they still hold; with
        `fresh` every round encoded again (a node's last record: whole whatever it held)."""
        if fresh:
            self._rounds.clear()
        texts = [self._round_text(i, r) for i, r in enumerate(record.rounds)]
        del self._rounds[len(record.rounds):]
        header = record.to_dict_without_rounds()
        before = to_json({k: v for k, v in header.items() if k < "rounds"})[1:-1]
        after = to_json({k: v for k, v in header.items() if k > "rounds"})[1:-1]
        parts = [before, '"rounds":[' + ",".join(texts) + "]", after]
        return "{" + ",".join(part for part in parts if part) + "}"

    def _round_text(self, index: int, round_: RoundRecord) -> str:
        counted = (round_.bytes_sent, round_.bytes_received, round_.bytes_sent_by_peer,
                   round_.bytes_received_by_peer, round_.transfer_seconds_by_peer)
        if index < len(self._rounds):
            kept, kept_counted, text = self._rounds[index]
            if kept is round_ and all(a is b for a, b in zip(counted, kept_counted)):
                return text
        text = to_json(plain(round_))
        entry = (round_, counted, text)
        if index < len(self._rounds):
            self._rounds[index] = entry
        else:
            self._rounds.append(entry)
        return text
