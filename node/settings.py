"""The federation's settings as typed, frozen dataclasses: one per TOML table.

Pure data with no loader and no checks (node.config reads and validates them), so every
component, the algorithms included, can name its settings without importing the loader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from topology import BUILDERS
from topology.links import PROFILES as LINK_PROFILES

TOPOLOGY_KINDS = tuple(BUILDERS)  # "file" among them

# Allowed values owned by other modules (datasets, partitions, topologies, codecs, models,
# aggregation rules, algorithms) are read from those modules; these are the config's own.
PROTOTYPE_SOURCES = ("aggregated", "local")
BACKENDS = ("local", "docker", "swarm")
RESTARTING_BACKENDS = ("local",)  # the launcher restarts a failed node (deploy.restarts)
SHARED_NETWORK_BACKENDS = ("docker", "swarm")  # nodes on a network others may join
SECURITY = ("curve", "none")
PLACEMENTS = ("spread", "swarm")
DEVICES = ("auto", "cpu", "cuda")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class TopologyConfig:
    """Who sends to whom: a builder name and its parameters."""

    kind: str = "fully_connected"
    p: float = 0.5
    k: int = 2
    seed: int | None = None
    path: str = ""
    directed: bool = False
    # draw the random graph again every N rounds from the seed and the round (0: never;
    # epidemic and one_peer_exponential change every round unless N says otherwise)
    resample_every: int = 0


@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where its files are and how it is split among nodes."""

    dataset: str = "mnist"
    dir: str = ""
    download: bool = True
    partition: str = "iid"
    classes_fraction: float = 0.6
    alpha: float = 0.5
    subset: int = 0
    global_test_fraction: float = 0.1
    local_train_fraction: float = 0.8


@dataclass(frozen=True)
class ModelGroup:
    """Different architectures for some nodes; empty values keep the [model] setting."""

    nodes: list[int] = field(default_factory=list)
    teacher: str = ""
    student: str = ""
    teacher_channels: list[int] = field(default_factory=list)
    student_channels: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ModelConfig:
    """Teacher and student architectures ("auto" picks the paper's pair for the dataset).

    Single-model algorithms (FedAvg, FedProto, ...) train the teacher-role model.
    """

    teacher: str = "auto"
    student: str = "auto"
    teacher_channels: list[int] = field(default_factory=list)
    student_channels: list[int] = field(default_factory=list)
    embedding_dim: int = 0
    groups: list[ModelGroup] = field(default_factory=list)

    def for_node(self, node_id: int) -> ModelConfig:
        """This config with the settings of the group that lists `node_id` applied."""
        for group in self.groups:
            if node_id in group.nodes:
                changes = {name: getattr(group, name) for name in
                           ("teacher", "student", "teacher_channels", "student_channels")
                           if getattr(group, name)}
                return dataclasses.replace(self, groups=[], **changes)
        return self


@dataclass(frozen=True)
class TrainConfig:
    """Local training hyper-parameters shared by every algorithm."""

    epochs: int = 1
    batch_size: int = 64
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    amsgrad: bool = False  # Adam only
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    # 256 images through the CNN need ~25 MB of activations; 1000 needed ~100 MB in every
    # node at the same moment (evaluation follows each round everywhere at once)
    eval_batch_size: int = 256
    device: str = "auto"
    threads: int = 0


@dataclass(frozen=True)
class ExchangeConfig:
    """How tensors travel: codec for the model and for the prototypes, and which model's
    embeddings the prototypes of model-sharing methods come from."""

    codec: str = "int16"
    prototype_codec: str = ""
    prototypes_from: str = "aggregated"
    max_message_bytes: int = 0  # 0: from the model (node.runtime.message_bound)


@dataclass(frozen=True)
class AggregationConfig:
    """How models and prototypes from in-neighbours are combined (see node.aggregation)."""

    rule: str = "mean"
    trim_fraction: float = 0.2
    # a peer's model, or a prototype of it, with a norm above norm_bound times this node's
    # own (its model; its largest prototype) is left out under every rule (0: never)
    norm_bound: float = 3.0
    # "reputation": how much of a neighbour's trust is its history (the rest: this round)
    trust_memory: float = 0.5
    # a peer's model must cut the loss on this node's samples of the peer's classes, from the
    # model this node began the round with, by this share of the cut this node's own round
    # made on its own samples; else it is refused with the peer's prototypes (0: never)
    validation: float = 0.5

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the aggregation functions."""
        return {"rule": self.rule, "trim_fraction": self.trim_fraction}


@dataclass(frozen=True)
class TimeoutConfig:
    """Seconds to wait for peers at start-up, in each round and at shutdown; `absent`: for
    a neighbour that missed the previous round (a lost connection is not waited for);
    `run`: for the whole run, after which `protofed up` stops what is left (0 = never)."""

    startup: float = 60.0
    round: float = 300.0
    shutdown: float = 10.0
    absent: float = 5.0
    run: float = 86400.0


@dataclass(frozen=True)
class DeployConfig:
    """Where and how the nodes run."""

    backend: str = "local"
    host: str = "127.0.0.1"
    base_port: int = 0
    results_dir: str = "results"
    cores: int = 0
    image: str = ""
    base_image: str = "python:3.11-slim"
    cpus: float = 0.0
    memory: str = ""
    port: int = 5555
    security: str = "curve"
    # security = "none" on Docker or a Swarm needs this too: the network there may be shared
    allow_insecure: bool = False
    restarts: int = 0
    # swarm backend: the manager's Docker API ("" = $DOCKER_HOST, else the local engine),
    # the registry every machine pulls the node image from, and where nodes run ("spread":
    # node i on the i-th machine in turn; "swarm": wherever the scheduler puts it), with
    # `pin[i]` a machine's hostname for node i ("" = by placement)
    manager: str = ""
    registry: str = ""
    placement: str = "spread"
    pin: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LinkEdge:
    """Conditions for one directed edge (nodes = [sender, receiver]), or both ways."""

    nodes: list[int] = field(default_factory=list)
    both_ways: bool = False
    bandwidth: str = ""
    delay: str = ""
    jitter: str = ""
    loss: str = ""


@dataclass(frozen=True)
class LinksConfig:
    """Link conditions (topology.links): a profile and defaults for every edge, then the
    graph's edge attributes, then `edges`; empty values leave a condition off."""

    profile: str = ""
    bandwidth: str = ""
    delay: str = ""
    jitter: str = ""
    loss: str = ""
    edges: list[LinkEdge] = field(default_factory=list)

    def default(self) -> dict[str, str]:
        """The conditions every edge starts from: the profile's, then this table's."""
        own = {k: getattr(self, k) for k in ("bandwidth", "delay", "jitter", "loss")
               if getattr(self, k)}
        return {**LINK_PROFILES.get(self.profile, {}), **own}

    def overrides(self) -> list[tuple[int, int, bool, dict[str, str]]]:
        return [(e.nodes[0], e.nodes[1], e.both_ways,
                 {k: getattr(e, k) for k in ("bandwidth", "delay", "jitter", "loss")})
                for e in self.edges if len(e.nodes) == 2]

    @property
    def configured(self) -> bool:
        return bool(self.default()) or bool(self.edges)


@dataclass(frozen=True)
class ScenarioEvent:
    """What happens at the start of one round: nodes that leave, come back or join late,
    undirected edges [u, v] that go down or come back up."""

    round: int = 0
    leave: list[int] = field(default_factory=list)
    back: list[int] = field(default_factory=list)
    join: list[int] = field(default_factory=list)
    edge_down: list[list[int]] = field(default_factory=list)
    edge_up: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class ScenarioConfig:
    """Churn by round: events here, or in a TOML file of [[events]] (read at the entrance)."""

    file: str = ""
    events: list[ScenarioEvent] = field(default_factory=list)


@dataclass(frozen=True)
class ReportConfig:
    """What the run reports beyond bytes and F1."""

    # the federation's mean F1 to reach: rounds, seconds and bytes until it first does (0: off)
    target_f1: float = 0.0
    # values per round of each node's sketch of its model, for the consensus distance
    # (0: none; at least the model's size: the model itself, exact)
    consensus_sketch: int = 1024


@dataclass(frozen=True)
class FederationConfig:
    """A whole federation, as one TOML file describes it."""

    name: str = "federation"
    nodes: int = 5
    rounds: int = 3
    seed: int = 42
    algorithm: str = "profe"
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    exchange: ExchangeConfig = field(default_factory=ExchangeConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    timeouts: TimeoutConfig = field(default_factory=TimeoutConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    links: LinksConfig = field(default_factory=LinksConfig)
    scenario: ScenarioConfig = field(default_factory=ScenarioConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    # each algorithm's own table ([fedhp], ...) by algorithm name, as its module declares it
    # (node.config fills in every registered algorithm's table)
    methods: dict[str, Any] = field(default_factory=dict)

    @property
    def prototype_codec(self) -> str:
        """The codec for prototypes: its own setting, else the model codec."""
        return self.exchange.prototype_codec or self.exchange.codec

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of every value, defaults included, shaped like the TOML file."""
        document = dataclasses.asdict(self)
        document.update(document.pop("methods"))
        return document

    def digest(self) -> str:
        """A short hash of every value, to tell runs of the same config apart from others."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
