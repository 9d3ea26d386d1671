"""The round loop of one node: train, send, collect, aggregate, evaluate, record.

It knows algorithms only through their interface and peers only through `Peers`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from node.algorithms import create
from node.algorithms.base import Algorithm, DataPlan, NodeData, Payload
from node.algorithms.common import speaking_for, weightless
from node.clock import SYSTEM, Clock
from node.consensus import flat_parameters, sketch, to_text
from node.data import Dataset, default_data_dir, load_dataset
from node.data.folders import DATA_FILE, GLOBAL_TEST, node_folder, read_node, read_split
from node.data.partition import FederatedSplit, split_of
from node.federation import Federation
from node.intake import witnesses
from node.intake.drawn import only_drawn, round_draw
from node.metrics import prediction_metrics
from node.net.peers import RECEIVED, SENT, Peers
from node.net.transport import Transport
from node.profile import Profile
from node.record import (
    ENDED_STATUSES,
    Evaluation,
    NodeRecord,
    RecordText,
    RoundRecord,
    measured,
    write_text_atomically,
)
from node.record_stream import text_lines, worth_streaming
from node.settings import FederationConfig
from topology.schedule import Schedule

log = logging.getLogger(__name__)

# Per-dataset pixel mean and std used to standardise inputs (a user's dataset: its own).
NORMALIZATION = {
    "mnist": (0.1307, 0.3081),
    "fashion_mnist": (0.2860, 0.3530),
    "cifar10": (0.4734, 0.2516),
    "cifar100": (0.4782, 0.2682),
}


def torch_threads(config: FederationConfig, local_nodes: int) -> int:
    """Threads per node: [train] threads if set, else the cores shared among local nodes."""
    if config.train.threads:
        return config.train.threads
    cores = config.deploy.usable_cores()
    return max(1, cores // max(1, local_nodes))


def pick_device(config: FederationConfig) -> torch.device:
    """CUDA when asked for or available under "auto", else the CPU."""
    wanted = config.train.device
    if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def load_node_data(config: FederationConfig, node_id: int, device: torch.device) -> NodeData:
    """This node's share of the dataset, the same split in every process for the same seed
    (data.layout "per-node": its own folder, `own_node_data`)."""
    if config.data.layout == "per-node":
        return own_node_data(config, node_id, device)
    d = config.data
    root = d.dir or default_data_dir()
    # The launcher fetched the files before any node started (`deploy.backends.plan.prepare_data`):
    # nodes never download, so a federation downloads once and nodes cannot race.
    dataset = load_dataset(d.dataset, root, download=False)
    split, plan = _split_and_plan(config, dataset, str(Path(root).resolve()))
    share = split.nodes[node_id]
    global_x, global_y = _global_test_set(d.dataset, dataset, root, split.global_test, device)
    return NodeData(train_x=_images(dataset, share.train, device),
                    train_y=_labels(dataset, share.train, device),
                    test_x=_images(dataset, share.test, device),
                    test_y=_labels(dataset, share.test, device),
                    global_x=global_x, global_y=global_y, num_classes=dataset.num_classes,
                    plan=plan)


def own_node_data(config: FederationConfig, node_id: int, device: torch.device) -> NodeData:
    """The data of a node that owns it: data.dir/node-<i>/data.npz and, when present,
    data.dir/global-test/data.npz, never the pooled dataset nor another node's folder;
    no data plan (it knows no other node's data)."""
    root = Path(config.data.dir or default_data_dir())
    own = read_node(node_folder(root, node_id) / DATA_FILE)
    classes, train, test = own.num_classes, own.train, own.test
    shape = tuple(train[0].shape[1:])
    # a built-in's published pixel statistics, else this node's own (it has nothing else)
    mean, std = NORMALIZATION.get(config.data.dataset) or _pixel_stats(train[0])
    global_path = root / GLOBAL_TEST / DATA_FILE
    held_out = read_split(global_path, "", classes, shape) if global_path.is_file() else \
        (np.zeros((0, *shape), np.uint8), np.zeros(0, np.int64))

    def tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(_as_pooled(images)).to(torch.float32).div_(255.0)
        x = x.sub_(mean).div_(std)
        return x.to(device), torch.from_numpy(labels).to(device)
    (train_x, train_y), (test_x, test_y), (global_x, global_y) = (
        tensors(*pair) for pair in (train, test, held_out))
    return NodeData(train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                    global_x=global_x, global_y=global_y, num_classes=classes, plan=None)


def _as_pooled(images: np.ndarray) -> np.ndarray:
    """`images` in the memory layout the pooled dataset's rows have: one channel is a view
    of [N, H, W] (stride 0), and a row taken from it has the channel stride 1. Convolution
    kernels pick their code path by layout, so the same images in another layout train to
    other roundings (1e-8 in the first loss, 0.001 of F1 after three rounds)."""
    if images.shape[1] != 1:
        return images
    return images[:, 0][:, None][np.arange(len(images))]


def _pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and std of `images` on the 0-1 scale (std 1 for a blank set)."""
    if not images.size:
        return 0.0, 1.0
    scaled = images.astype(np.float64) / 255.0
    return float(scaled.mean()), float(scaled.std()) or 1.0


def _split_and_plan(config: FederationConfig, dataset: Dataset,
                    root: str) -> tuple[FederatedSplit, DataPlan]:
    """The federation's split and data plan, made once per process and shared read-only:
    in-process nodes would otherwise each split the whole dataset and hold every node's
    class counts (at 10,000 nodes, 8 GB of plans and minutes of splitting)."""
    d = config.data
    key = (d.dataset, root, config.nodes, config.seed, d.partition, d.classes_fraction,
           d.alpha, d.global_test_fraction, d.local_train_fraction, d.subset,
           len(dataset.labels), config.topology.hub)
    with _GLOBAL_TEST_LOCK:
        if key not in _SPLITS:
            split = split_of(config, dataset.labels, dataset.num_classes)
            _SPLITS.clear()  # one federation per process at a time: keep only its split
            _SPLITS[key] = (split, data_plan(dataset.labels, split, dataset.num_classes,
                                             config.topology.hub))
        return _SPLITS[key]


_SPLITS: dict[tuple, tuple[FederatedSplit, DataPlan]] = {}


def data_plan(labels: np.ndarray, split: FederatedSplit, num_classes: int,
              hub: int | None = None) -> DataPlan:
    """Every node's training samples and class counts, as the seeded split gives them; a
    `hub`'s are every other node's together: its model is the average of theirs."""
    counts = torch.stack([torch.bincount(torch.from_numpy(labels[share.train].astype(np.int64)),
                                         minlength=num_classes) for share in split.nodes])
    samples = [len(share.train) for share in split.nodes]
    if hub is not None:
        counts[hub], samples[hub] = counts.sum(dim=0), sum(samples)
    return DataPlan(samples=tuple(samples), class_counts=counts)


def _images(dataset: Dataset, index: np.ndarray, device: torch.device) -> torch.Tensor:
    """The indexed images as standardised float32 [n, C, H, W] (only these are converted)."""
    mean, std = dataset.normalization or NORMALIZATION[dataset.name]
    x = torch.from_numpy(dataset.images[index]).to(torch.float32).div_(255.0)
    return x.sub_(mean).div_(std).to(device)


def _labels(dataset: Dataset, index: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(dataset.labels[index]).to(torch.int64).to(device)


def _global_test_set(name: str, dataset: Dataset, root: str | Path, index: np.ndarray,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The federation's global test set, the same for every node: converted once per process
    and shared read-only (forked nodes share the launcher's copy, see
    `deploy.backends.local.warm_up`; in-process nodes share one copy)."""
    key = (name, str(Path(root).resolve()), str(device),
           hashlib.sha256(np.ascontiguousarray(index).tobytes()).hexdigest())
    with _GLOBAL_TEST_LOCK:
        if key not in _GLOBAL_TEST:
            _GLOBAL_TEST[key] = (_images(dataset, index, device),
                                 _labels(dataset, index, device))
        return _GLOBAL_TEST[key]


_GLOBAL_TEST: dict[tuple[str, ...], tuple[torch.Tensor, torch.Tensor]] = {}
_GLOBAL_TEST_LOCK = threading.Lock()


def interface_counters(name: str) -> dict[str, int] | None:
    """rx/tx byte counters of a network interface (the numbers `docker stats` reports)."""
    statistics = Path("/sys/class/net") / name / "statistics"
    try:
        return {key: int((statistics / key).read_text()) for key in ("rx_bytes", "tx_bytes")}
    except (OSError, ValueError):
        return None


@torch.no_grad()
def evaluate(algorithm: Algorithm, x: torch.Tensor, y: torch.Tensor, num_classes: int,
             batch_size: int) -> Evaluation:
    """Accuracy, macro-F1 and top-class share on one set under every prediction rule.

    The top-level figures are those of the rule the algorithm's paper reports ("rule").
    """
    rule = algorithm.reported_rule
    if len(y) == 0:
        return Evaluation(rule=rule)
    parts = [algorithm.predictions(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]
    truth = y.cpu().numpy()
    by_rule = {name: prediction_metrics(torch.cat([p[name] for p in parts]).cpu().numpy(),
                                        truth, num_classes) for name in parts[0]}
    return Evaluation(**by_rule[rule], rule=rule, by_rule=by_rule)


@dataclass
class Recorder:
    """Keeps the node's results and rewrites its JSON file after every round."""

    path: Path
    result: NodeRecord
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)  # the same moment, as Unix time
    stream: bool = False  # also write each version to standard output (record_stream)
    writes: int = 0
    encoder: RecordText = field(default_factory=RecordText)
    streamed_chars: int = 0  # the length of the last record streamed

    def write(self) -> None:
        """Atomically replace the result file, so a reader never sees half of it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        ended = self.result.status in ENDED_STATUSES
        text = self.encoder.text(self.result, fresh=ended)
        write_text_atomically(self.path, text)
        if self.stream and worth_streaming(len(text), self.streamed_chars, ended):
            sys.stdout.write("".join(line + "\n" for line in text_lines(text, self.writes)))
            sys.stdout.flush()
            self.streamed_chars = len(text)
        self.writes += 1

    def unfinished(self, digest: str) -> NodeRecord | None:
        """What an earlier process of this node wrote in this run, if it did not finish."""
        try:
            previous = NodeRecord.from_dict(json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError):
            return None
        if previous.status == "finished" or previous.config_digest != digest:
            return None
        return previous

    def fail(self, error: str, status: str = "failed") -> None:
        """Record why the node stopped: "failed", or "stopped" when asked to stop."""
        self.result.status, self.result.error = status, error
        self.write()


def prepare_process(config: FederationConfig, node_id: int, threads: int | None = None,
                    device: torch.device | None = None) -> tuple[int, torch.device]:
    """Torch threads (`threads`, else torch_threads) and the Python and numpy seeds of this
    node; its device (`device`, else pick_device's)."""
    threads = threads or torch_threads(config, config.nodes)
    torch.set_num_threads(threads)
    random.seed(config.seed + node_id)
    np.random.seed(config.seed + node_id)
    return threads, device or pick_device(config)


MESSAGE_MARGIN = 1024 * 1024  # headers and prototypes on top of the model (see message_bound)


def message_bound(config: FederationConfig, algorithm: Algorithm) -> int:
    """exchange.max_message_bytes, or for 0 twice the largest message the algorithm sends
    now at fp32 (the widest codec) plus MESSAGE_MARGIN: every node of a federation runs the
    same models, so an honest neighbour's message stays far below it, and it bounds what one
    connection can make this node hold (transport.RECEIVE_HWM messages)."""
    if config.exchange.max_message_bytes:
        return config.exchange.max_message_bytes
    largest = max((sum(4 * tensor.numel() for tensor in payload.tensors.values())
                   for payload in algorithm.payload().values()), default=0)
    return 2 * largest + MESSAGE_MARGIN


def build_node(federation: Federation, node_id: int, connect: Callable[[int], Transport],
               recorder: Recorder, clock: Clock = SYSTEM, threads: int | None = None,
               device: torch.device | None = None) -> Node:
    """Compose one node from its parts: process settings, data, algorithm, then the network
    (`connect(max_message_bytes)` opens it) and peers; `clock`: where it reads the time;
    `threads` and `device` instead of torch_threads's and pick_device's."""
    config = federation.config
    member = federation.member(node_id)
    previous = recorder.unfinished(config.digest())  # before this start overwrites it
    threads, device = prepare_process(config, node_id, threads, device)
    recorder.result = NodeRecord(
        node=node_id, status="starting", algorithm=config.algorithm,
        config_digest=config.digest(), config_name=config.name,
        in_neighbours=list(member.in_neighbours), out_neighbours=list(member.out_neighbours),
        rounds_total=config.rounds, threads=threads, device=str(device),
        started_at=recorder.started_at)
    recorder.write()
    data = load_node_data(config, node_id, device)
    algorithm = create(config.algorithm, config, data, device, node_id)
    result = recorder.result
    result.train_samples, result.test_samples = len(data.train_y), len(data.test_y)
    result.global_test_samples = len(data.global_y)
    result.setup_seconds = clock.monotonic() - recorder.started
    result.max_message_bytes = message_bound(config, algorithm)
    shaped = federation.shaped_links
    if shaped:
        result.in_link_bandwidth = {
            str(peer): (shaped[(peer, node_id)].bandwidth_bps or 0)
            if (peer, node_id) in shaped else 0 for peer in member.in_neighbours}
    schedule = federation.schedule()
    peers = Peers(node_id, connect(result.max_message_bytes), in_neighbours=member.in_neighbours,
                  out_neighbours=member.out_neighbours, rounds=config.rounds,
                  max_message_bytes=result.max_message_bytes,
                  codecs=kind_codecs(config, algorithm.kinds), stamp=bool(shaped),
                  round_in_neighbours=lambda r: schedule.in_neighbours(r, node_id),
                  left_early=schedule.left_early(), clock=clock)
    return Node(config, node_id, algorithm, peers, recorder, previous, schedule, clock)


def kind_codecs(config: FederationConfig, kinds: tuple[str, ...]) -> dict[str, str]:
    """The codec of every kind the algorithm sends: exchange.prototype_codec for prototypes
    (it defaults to the model codec), exchange.codec for everything else."""
    return {kind: config.prototype_codec if kind == "prototypes" else config.exchange.codec
            for kind in kinds}


class Node:
    """One federation member, given its parts: `run()` works."""

    def __init__(self, config: FederationConfig, node_id: int, algorithm: Algorithm,
                 peers: Peers, recorder: Recorder,
                 previous: NodeRecord | None = None, schedule: Schedule | None = None,
                 clock: Clock = SYSTEM) -> None:
        self.config = config
        self.clock = clock
        self.node_id = node_id
        self.algorithm = algorithm
        self.peers = peers
        self.recorder = recorder
        self.previous = previous  # an earlier, unfinished process's record of this node
        self.own_rounds_from = 0  # index of the first round record this process made
        # every round's graph and who takes part (static: the members' lists every round)
        self.schedule = schedule
        # where each round's time goes, phase by phase: the algorithm and the peers time
        # their own parts of it on the same profile
        self.profile = Profile(clock)
        algorithm.profile = peers.profile = self.profile

    def run(self) -> NodeRecord:
        """Train for every round and return (and write) the node's result."""
        config, node_id, peers = self.config, self.node_id, self.peers
        algorithm, data = self.algorithm, self.algorithm.data
        result = self.recorder.result
        result.machine = os.environ.get("PROTOFED_MACHINE") or None  # set on a swarm
        handshake_started = self.clock.monotonic()
        # A first start evaluates its initial model (round 0) while ZeroMQ's threads run the
        # connections' handshakes: at 100 nodes on 2 cores both take about 15 s. A process
        # started again after a crash usually rejoins later rounds and skips round 0.
        present = [self._present(r) for r in range(config.rounds + 1)]
        initial = peers.handshake(config.timeouts.startup, None if self.previous or not present[0]
                                  else (lambda: self._evaluate(algorithm, data)))
        result.handshake_seconds = self.clock.monotonic() - handshake_started
        result.status = "running"
        away = [r for r, here in enumerate(present) if not here]
        result.away_rounds = away or None
        first = 1
        if peers.joined_round:  # the others are in that round already: join at the next one
            first = peers.joined_round + 1
            self._rejoin(self.previous, first)
        elif present[0]:
            result.rounds.append(self._round_record(0, algorithm, data, peers, {}, {}, [], [],
                                                    evaluated=initial))
            self._fill_totals(peers)  # a node stopped in round 1 still adds up to its rows
        self.recorder.write()
        last_here = max(r for r, here in enumerate(present) if here)
        previous_round = first - 1
        for round_ in range(first, min(config.rounds, last_here) + 1):
            if not present[round_]:
                continue  # away as the scenario says: no training, nothing sent or heard
            peers.current_round = round_
            # after an absence the others run the rounds it missed first: wait for them too
            self._keep(self._run_round(round_, algorithm, data, peers,
                                       rounds_waited=round_ - previous_round))
            previous_round = round_
        if last_here < config.rounds:
            return self._leave(peers, last_here)
        result.no_goodbye_from = peers.goodbye(config.timeouts.shutdown)
        peers.settle_transfers()
        peers.transport.close(config.timeouts.shutdown)
        interface = os.environ.get("PROTOFED_INTERFACE")
        if interface:  # set by the container backends: this container's own interface
            result.interface_bytes = interface_counters(interface)
        result.status = "finished"
        if first > config.rounds:  # back after the last round: nothing of it is current
            log.warning("node %d: came back after the federation's last round and trained "
                        "no round: recorded as missed", node_id)
            result.status = "missed"
            result.error = "restarted after the federation's last round"
        result.elapsed_seconds = self.clock.monotonic() - self.recorder.started
        self._fill_totals(peers)
        self.recorder.write()
        return result

    def _keep(self, record: RoundRecord) -> None:
        """A finished round's record added to the node's and written (the write counts in
        the next round's profile)."""
        result = self.recorder.result
        result.rounds.append(record)
        result.rounds_done = record.round
        with self.profile.phase("record"):
            self._fill_totals(self.peers)
            self.recorder.write()
        log.info("node %d: round %d/%d done: global F1 %s, missing %s", self.node_id,
                 record.round, self.config.rounds, f"{record.global_test.f1:.4f}"
                 if measured(record.global_test) else "not evaluated", record.missing_peers)

    def _present(self, round_: int) -> bool:
        return self.schedule is None or self.schedule.present(round_, self.node_id)

    def _leave(self, peers: Peers, last_round: int) -> NodeRecord:
        """Leave the federation for good after `last_round`, as the scenario says: goodbyes
        sent (the others do not wait for this node), status "left"."""
        result = self.recorder.result
        peers.goodbye(0.0)
        peers.settle_transfers()
        peers.transport.close(self.config.timeouts.shutdown)
        result.status = "left"
        result.elapsed_seconds = self.clock.monotonic() - self.recorder.started
        self._fill_totals(peers)
        self.recorder.write()
        log.info("node %d: left the federation after round %d, as the scenario says",
                 self.node_id, last_round)
        return result

    def _rejoin(self, previous: NodeRecord | None, first: int) -> None:
        """Keep an earlier process's rounds and byte totals; note where this one joined."""
        result = self.recorder.result
        result.restarts = 1 + ((previous.restarts or 0) if previous else 0)
        result.rejoined_at = [*((previous.rejoined_at or []) if previous else []), first]
        if previous is not None:
            result.rounds = [r for r in previous.rounds if r.round < first]
            self.own_rounds_from = len(result.rounds)
            result.before_restart = {key: getattr(previous, key) for key in TOTALS}
        log.warning("node %d: rejoined the federation at round %d", self.node_id, first)

    def _run_round(self, round_: int, algorithm: Algorithm, data: NodeData,
                   peers: Peers, rounds_waited: int = 1) -> RoundRecord:
        schedule, me, hub = self.schedule, self.node_id, self.config.topology.hub
        senders = schedule.in_neighbours(round_, me) if schedule else None
        recipients = schedule.out_neighbours(round_, me) if schedule else None
        # a node joining late trains nothing in its first round: it only listens, and
        # starts from its in-neighbours' models and prototypes; so does a node not drawn
        # this round that the hub reaches (drawn for the next round, or the last round);
        # one it does not reach keeps its state
        drawn = schedule is None or schedule.takes_part(round_, me)
        joining = (schedule is not None and schedule.joining(round_, me)) or not drawn
        # a hub's client keeps what the hub last sent it until the hub sends again: it never
        # aggregates its own payloads alone
        client = hub is not None and me != hub
        started = self.clock.monotonic()
        with self.profile.phase("train"):
            train_stats = {} if joining or me == hub else algorithm.train_round(round_)
        trained = self.clock.monotonic()
        missing: set[int] = set()
        refusals: list[dict] = []
        judged: set[int] = set()  # whose model this node refused on its own judgement
        # the in-neighbours judged this round: drawn at the first step, kept for the rest
        draw: set[int] | None = None
        undrawn: set[int] = set()
        timings = {"train_seconds": trained - started, "communication_seconds": 0.0,
                   "aggregation_seconds": 0.0}
        for step, kinds in enumerate(algorithm.exchange_steps()):
            step_started = self.clock.monotonic()
            own = self._own_payloads(algorithm, kinds)
            if me != hub:  # a hub sends what it aggregated from this step's updates
                self._send(round_, kinds, own, recipients)
            received, step_missing, left_out, draw = self._collected(
                round_, kinds, peers, senders, rounds_waited, draw, first=step == 0)
            missing.update(step_missing)
            undrawn.update(left_out)
            communicated = self.clock.monotonic()
            if joining or hub in received:  # a hub's clients adopt its model
                own = weightless(own, samples=0 if hub in received else 1)
            if received or not (joining or client):
                with self.profile.phase("aggregation"):
                    step_refusals = algorithm.aggregate(own, received)
                refusals += [r.as_record() for r in step_refusals]
                judged |= witnesses.judged_refused(step_refusals)
            del received  # the neighbours' messages, before the next wait
            if me == hub:
                clients = data.plan.samples[me] if data.plan else 1
                self._send(round_, kinds, speaking_for(algorithm.served_payload(), clients),
                           recipients)
            timings["communication_seconds"] += communicated - step_started
            timings["aggregation_seconds"] += self.clock.monotonic() - communicated
        algorithm.suspicion, algorithm.refused_named = witnesses.after_round(
            algorithm.suspicion, judged, self.config.aggregation.witness_memory)
        fit = self._final_fit(round_, algorithm, data, timings)
        record = self._round_record(round_, algorithm, data, peers, train_stats, timings,
                                    sorted(missing), refusals)
        record.final_fit = fit
        record.undrawn_peers = sorted(undrawn) or None
        if schedule is not None and schedule.participation.partial:
            record.participants = sorted(schedule.chosen(round_))
        return record

    def _own_payloads(self, algorithm: Algorithm, kinds: tuple[str, ...]) -> dict[str, Payload]:
        """This node's payloads of a step's `kinds`; where aggregation.witnesses is on, its
        model names the peers it has refused repeatedly (node.intake.witnesses)."""
        own = algorithm.payloads_of(kinds)
        if self.config.aggregation.witnesses > 0:
            own = witnesses.naming(own, algorithm.refused_named)
        return own

    def _collected(self, round_: int, kinds: tuple[str, ...], peers: Peers,
                   senders: list[int] | None, rounds_waited: int,
                   draw: set[int] | None, first: bool
                   ) -> tuple[dict, set[int], list[int], set[int] | None]:
        """A step's updates that came in time, as payloads, less the in-neighbours outside
        the round's `draw` (node.intake.drawn; the `first` step of a round draws it anew);
        who was missing, who was left out, and the round's draw."""
        updates, missing = peers.collect(round_, kinds,
                                         self.config.timeouts.round * rounds_waited,
                                         self.config.timeouts.absent, senders)
        received = {peer: {kind: Payload(m.tensors, m.meta) for kind, m in by_kind.items()}
                    for peer, by_kind in updates.items()}
        if first:
            draw = round_draw(self.config, self.node_id, round_, sorted(received),
                              models=self.algorithm.travelling_model() is not None)
        received, left_out = only_drawn(received, draw)
        return received, set(missing), left_out, draw

    def _final_fit(self, round_: int, algorithm: Algorithm, data: NodeData,
                   timings: dict) -> dict[str, float] | None:
        """train.final_fit: one more local round after the last aggregation, on a node with
        training data (not a hub), before the last evaluation; its statistics."""
        if not (self.config.train.final_fit and round_ == self.config.rounds
                and len(data.train_y)):
            return None
        started = self.clock.monotonic()
        with self.profile.phase("train"):
            stats = algorithm.train_round(round_ + 1)  # a shuffle of its own
        timings["train_seconds"] += self.clock.monotonic() - started
        return stats

    def _send(self, round_: int, kinds: tuple[str, ...], payloads: dict[str, Payload],
              recipients: list[int] | None) -> None:
        """This step's `payloads` to the round's out-neighbours (`recipients`, else all)."""
        everyone = self.peers.out_neighbours if recipients is None else recipients
        for kind in kinds:
            for payload, to in self.algorithm.addressed(kind, payloads[kind], everyone):
                self.peers.broadcast(round_, kind, payload.tensors, payload.meta, to)

    def _round_record(self, round_: int, algorithm: Algorithm, data: NodeData, peers: Peers,
                      train_stats: dict, timings: dict, missing: list[int],
                      refusals: list[dict],
                      evaluated: tuple[Evaluation, Evaluation, float] | None = None,
                      ) -> RoundRecord:
        """The round's record: `evaluated` (local, global, seconds) if the model was
        evaluated already, else evaluated now where report.eval_every asks (unmeasured
        evaluations, else)."""
        local, global_, seconds = evaluated or (
            self._evaluate(algorithm, data) if self._evaluates(round_)
            else (Evaluation(), Evaluation(), 0.0))
        with self.profile.phase("record"):
            sketch = self._model_sketch(algorithm)
        record = RoundRecord(
            round=round_, local_test=local, global_test=global_, train=train_stats, **timings,
            evaluation_seconds=seconds, recorded_at=self.clock.time(),
            cpu_seconds=self.clock.cpu(), missing_peers=missing,
            rejected_peers=sorted({r["peer"] for r in refusals}), refusals=refusals,
            trust={str(peer): value for peer, value in sorted(algorithm.trust.items())} or None,
            model_sketch=sketch, phases=self.profile.take())
        _count_round_bytes(record, peers)
        return record

    def _evaluates(self, round_: int) -> bool:
        """Whether round `round_` evaluates the model: every report.eval_every rounds, and
        the federation's last round and a node's last before it leaves or goes away."""
        return (round_ % self.config.report.eval_every == 0 or round_ >= self.config.rounds
                or not self._present(round_ + 1))

    def _model_sketch(self, algorithm: Algorithm) -> str | None:
        """The sketch of the model this node exchanges, for the consensus distance (None
        for an algorithm that exchanges no model, or with [report] consensus_sketch = 0)."""
        size = self.config.report.consensus_sketch
        model = algorithm.payloads_of(("model",)).get("model") if size else None
        if model is None:
            return None
        vector = flat_parameters(model.tensors)
        self.recorder.result.model_parameters = len(vector)
        return to_text(sketch(vector, size, self.config.seed))

    def _evaluate(self, algorithm: Algorithm,
                  data: NodeData) -> tuple[Evaluation, Evaluation, float]:
        """The model on the node's local test set and on the global one; the seconds it took."""
        batch, started = self.config.train.eval_batch_size, self.clock.monotonic()
        with self.profile.phase("evaluation_local"):
            local = evaluate(algorithm, data.test_x, data.test_y, data.num_classes, batch)
        with self.profile.phase("evaluation_global"):
            global_ = evaluate(algorithm, data.global_x, data.global_y, data.num_classes,
                               batch)
        return local, global_, self.clock.monotonic() - started

    def _fill_totals(self, peers: Peers) -> None:
        meter = peers.meter
        result = self.recorder.result
        # messages metered after their round's record was made (the goodbyes after the last
        # round, an ack to a late hello) join it, so the rounds add up to the totals; a
        # record is counted when made, and again only when its round's counts change
        changed = meter.take_changed()
        for record in result.rounds[self.own_rounds_from:]:
            if record.round in changed:
                _count_round_bytes(record, peers)
        result.bytes_sent, result.bytes_received = meter.total(SENT), meter.total(RECEIVED)
        result.bytes_sent_by_peer = meter.breakdown(SENT)
        result.bytes_received_by_peer = meter.breakdown(RECEIVED)
        result.bytes_sent_by_kind = {k: meter.total(SENT, kind=k) for k in KINDS}
        result.bytes_received_by_kind = {k: meter.total(RECEIVED, kind=k) for k in KINDS}
        result.unreachable_peers = sorted(peers.unreachable_seen)
        result.kept_own_models = self.algorithm.kept_own_models
        for key, count in peers.transport.security_counts().items():
            setattr(result, key, count)
        # the whole process's peak, so in-process federations share one figure
        result.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        for key, value in meter.drop_record().items():
            setattr(result, key, value)
        for key, earlier in (result.before_restart or {}).items():
            setattr(result, key, add_counts(getattr(result, key), earlier))


def _count_round_bytes(record: RoundRecord, peers: Peers) -> None:
    """The round's bytes as metered so far, in total and by peer and kind."""
    meter, round_ = peers.meter, record.round
    record.bytes_sent = meter.total(SENT, round_=round_)
    record.bytes_received = meter.total(RECEIVED, round_=round_)
    record.bytes_sent_by_peer = meter.breakdown(SENT, round_)
    record.bytes_received_by_peer = meter.breakdown(RECEIVED, round_)
    if peers.stamp:
        record.transfer_seconds_by_peer = meter.transfers(round_)


KINDS = ("model", "prototypes", "control")

# Result totals an earlier process of a restarted node counted, added to the new ones.
TOTALS = ("bytes_sent", "bytes_received", "bytes_sent_by_peer", "bytes_received_by_peer",
          "bytes_sent_by_kind", "bytes_received_by_kind", "dropped_count", "dropped_bytes")


def add_counts(current: Any, earlier: Any) -> Any:
    """current + earlier for ints and (nested) dicts of ints; anything else stays current."""
    if isinstance(current, int) and isinstance(earlier, int):
        return current + earlier
    if isinstance(current, dict) and isinstance(earlier, dict):
        # a key only one process counted (a peer only the earlier one sent to) is kept whole
        return {key: add_counts(current[key], earlier[key])
                if key in current and key in earlier else current.get(key, earlier.get(key))
                for key in current.keys() | earlier.keys()}
    return current
