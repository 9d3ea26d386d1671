"""The federation's settings as typed, frozen dataclasses: one per TOML table.

Pure data with no loader and no checks (node.config reads and validates them), so every
component, the algorithms included, can name its settings without importing the loader.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from topology import BUILDERS
from topology.links import PROFILES as LINK_PROFILES

TOPOLOGY_KINDS = tuple(BUILDERS)  # "file" among them

# Allowed values owned by other modules (datasets, partitions, topologies, codecs, models,
# aggregation rules, algorithms) are read from those modules; these are the config's own.
PROTOTYPE_SOURCES = ("aggregated", "local")
HELD_MIXES = ("model", "head")  # aggregation.held_mix
SCREEN_BUDGETS = ("each", "shared")  # aggregation.screen_budget
BACKENDS = ("local", "docker", "swarm", "sim")
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
    """Who sends to whom: a graph builder (see Topologies), or "file" for `path`'s graph.
    At most 1,000,000 directed edges (1,000 nodes fully connected; `epidemic` and
    `one_peer_exponential` count every pair): the launcher builds and writes every edge
    before anything starts, 4 s and 0.45 GB at that size."""
    p: float = 0.5
    """Edge probability of `random`; rewiring probability of `small_world`."""
    k: int = 2
    """Degree of `k_regular`, nearest neighbours of `small_world`, peers per round of
    `epidemic`."""
    seed: int | None = None
    """Seed for the random graphs; unset: the federation's `seed`."""
    path: str = ""
    """The graph file read when `kind = "file"`: .graphml, node-link .json or an edge list."""
    directed: bool = False
    """An edge-list file's edges go one way only (GraphML and node-link JSON say so
    themselves)."""
    resample_every: int = 0
    """Draw the random graph again every N rounds from the seed and the round (0: never;
    epidemic and one_peer_exponential change every round unless N says otherwise)."""
    hub: int | None = None
    """`star` only: the centre node, made a hub that holds no data and does not train: it
    aggregates what the clients drawn each round send it and sends the result to the
    clients drawn for the next round (to all in the last), which adopt it (a FedAvg,
    FedProto or FedHP server; see Topologies); unset: a star centred on node 0 that trains
    like any node."""


@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where its files are and how it is split among nodes."""

    dataset: str = "mnist"
    """A built-in dataset, or a loader of yours, "package.module:function"."""
    dir: str = ""
    """Dataset folder on the machine running `protofed`; empty: $PROTOFED_DATA_DIR, else
    ./data."""
    download: bool = True
    """The launcher tries the public download when files are missing (nodes never download)."""
    layout: str = "pooled"
    """"pooled": every node splits the pooled dataset in `dir` by the settings below (a
    simulation). "per-node": node i reads only `dir`/node-<i>/data.npz and, when present,
    `dir`/global-test/ (written by `protofed partition` or by you; see the command line
    page), knows no other node's data and weighs peers by their bounded claims. On every
    backend: each container mounts its own folder; on the swarm, `dir` is the folders' path
    on each machine and deploy.pin names each node's machine (see "Your own data")."""
    partition: str = "iid"
    """How the training samples are split among the nodes."""
    classes_fraction: float = 0.6
    """Share of the classes each node sees, under `partition = "classes"`; in (0, 1]."""
    alpha: float = 0.5
    """Dirichlet concentration, under `partition = "dirichlet"`; positive."""
    subset: int = 0
    """Use a stratified subset of this many samples (0: all); at most the dataset's size
    (refused before anything starts)."""
    global_test_fraction: float = 0.1
    """Share of the samples held out as the global test set (the paper's split); in [0, 1).
    At 0 there is none: F1 global is not measured (the table shows -), only each node's
    local split; a set under 10 images per class is warned of at start."""
    local_train_fraction: float = 0.8
    """Share of each node's samples it trains on, the rest its local test set (the paper's
    split); in (0, 1]."""


@dataclass(frozen=True)
class ModelGroup:
    """Different architectures for some nodes; empty values keep the [model] setting."""

    nodes: list[int] = field(default_factory=list)
    """The node ids this group's architectures are for (required; no node in two groups)."""
    teacher: str = ""
    """The teacher-role architecture of these nodes; empty: [model]'s."""
    student: str = ""
    """The student architecture of these nodes; empty: [model]'s."""
    teacher_channels: list[int] = field(default_factory=list)
    """The teacher's widths for these nodes; empty: [model]'s."""
    student_channels: list[int] = field(default_factory=list)
    """The student's widths for these nodes; empty: [model]'s."""


@dataclass(frozen=True)
class ModelConfig:
    """Teacher and student architectures ("auto" picks the paper's pair for the dataset).

    Single-model algorithms (FedAvg, FedProto, ...) train the teacher-role model.
    """

    teacher: str = "auto"
    """A built-in architecture or a factory of yours, "package.module:function"; "auto": the
    CNN pair for (Fashion-)MNIST and datasets of yours, ResNet18/8 for CIFAR-10, ResNet32/18
    for CIFAR-100."""
    student: str = "auto"
    """The student's architecture, as for `teacher`."""
    teacher_channels: list[int] = field(default_factory=list)
    """Conv widths (CNN) or stage widths (ResNet) of the teacher; empty: the defaults in
    node/models.py."""
    student_channels: list[int] = field(default_factory=list)
    """The student's widths, as for `teacher_channels` (the default student CNN: half the
    teacher's)."""
    embedding_dim: int = 0
    """Size of the embedding (first linear layer) that prototypes live in; 0: the default."""
    groups: list[ModelGroup] = field(default_factory=list)
    """Other architectures for some nodes (prototype-only methods such as FedProto): see
    [[model.groups]]."""

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
    """Local epochs per round."""
    final_fit: bool = False
    """After the last round's aggregation, every node with training data trains one more
    local round on it before the last evaluation (the personalised FL of FedHP's protocol:
    the clients fit the global model they received); it sends nothing."""
    batch_size: int = 64
    """Training batch size."""
    optimizer: str = "sgd"
    """"sgd" (the papers': lr, momentum, weight decay) or "adam" (lr, weight decay,
    adam_betas, amsgrad); FedHP keeps its own pair (SGD for the backbone, Adam for the
    prototypes)."""
    lr: float = 0.01
    """Learning rate."""
    momentum: float = 0.9
    """SGD momentum; in [0, 1)."""
    weight_decay: float = 0.0
    """Weight decay (L2 penalty)."""
    amsgrad: bool = False
    """Adam's amsgrad variant (Adam only)."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """Adam's two betas, each in [0, 1)."""
    # 256 images through the CNN need ~25 MB of activations; 1000 needed ~100 MB in every
    # node at the same moment (evaluation follows each round everywhere at once)
    eval_batch_size: int = 256
    """Batch size for evaluation and prototypes (memory: every node evaluates at the same
    moment)."""
    device: str = "auto"
    """Where nodes train: "auto" (CUDA if present), "cpu" or "cuda"."""
    threads: int = 0
    """Torch threads per node; 0: the cores shared among the local nodes, so they do not
    oversubscribe the machine."""


@dataclass(frozen=True)
class ExchangeConfig:
    """How tensors travel: codec for the model and for the prototypes, and which model's
    embeddings the prototypes of model-sharing methods come from."""

    codec: str = "int16"
    """Codec for the model that travels (the student's, for ProFe)."""
    prototype_codec: str = ""
    """Codec for prototypes; empty: `codec`."""
    prototypes_from: str = "aggregated"
    """ProFe/FedPR: prototypes from the aggregated model in a second exchange step, or "local"
    (the papers' order)."""
    max_message_bytes: int = 0
    """Largest frame and message accepted from a neighbour; 0: twice the largest message of
    the node's algorithm at fp32, plus 1 MiB (node.runtime.message_bound); else >= 1024."""


@dataclass(frozen=True)
class AggregationConfig:
    """How models and prototypes from in-neighbours are combined (see node.aggregation)."""

    rule: str = "mean"
    """How in-neighbours' models and prototypes are combined (see Robust aggregation)."""
    trim_fraction: float = 0.2
    """Share cut from each end under "trimmed_mean"; in [0, 0.5)."""
    norm_bound: float = 3.0
    """A peer's model, or a prototype of it, with a norm above this many times this node's
    own (its model; its largest prototype) is left out under every rule (0: never; else >= 1)."""
    norm_floor: float = 0.0
    """A peer's prototype of a class with a norm below the reference divided by this factor
    is left out (the reference: the median over this node and its in-neighbours of each
    one's median prototype norm, one vote each); 0: no floor; else >= 1."""
    trust_memory: float = 0.5
    """Under "reputation", the share of an in-neighbour's trust kept from earlier rounds each
    round (the rest: this round); in [0, 1)."""
    validation: float = 0.5
    """A peer's model must cut the loss on this node's samples of the peer's classes, from the
    model this node began the round with, by this share of the cut this node's own round made
    on its own samples; else it is refused with its prototypes that round (0: never); in
    [0, 1]."""
    distance: float = 2.0
    """Per layer, a peer's pull beyond this many times the median in-neighbour's distance
    from this node's model (this node's own, 0, among them) is clipped to it (0: never;
    else > 1)."""
    distance_refuse: float = 5.0
    """A peer beyond distance_refuse x distance times that median in some layer is refused
    with its prototypes that round; in [1, 10] (1: every peer beyond the bound refused,
    none clipped)."""
    prototype_validation: bool = True
    """A peer's model is also measured by its classifier on the global prototype of each of
    the peer's classes this node lacks, and refused with its prototypes that round where it
    fits them worse than the model this node began the round with (or a uniform guess)."""
    influence: float = 1.5
    """A peer's model averaged with this node's own (at their weights) may raise the loss on
    one class this node can measure (its own samples; the classifier on the global prototype
    of a class it lacks) at most this many nats beyond the class's median in-neighbour's;
    else it is refused with its prototypes that round (0: never); in [0, 100]."""
    held_influence: float = 3.0
    """A peer's model averaged with this node's own (at their weights) may raise the loss on
    this node's samples of one class it holds beyond the class's median in-neighbour's by at
    most the in-neighbours' spread (their median score plus 8 median absolute deviations,
    never below held_floor; with fewer than four in-neighbours, no spread) and never by more
    than this many nats; else it is refused with its prototypes that round (0: never); in
    [0, 100]."""
    held_floor: float = 1.0
    """The least bar of held_influence, in nats, however alike the in-neighbours' scores.
    On ProFe's paper cell an honest holder of a class confusable with one of this node's
    scores about 0.5 once the federation agrees: a floor of 1 keeps it; in [0, 100]."""
    held_mix: str = "model"
    """What of a peer's model the held_influence screen mixes into this node's: "model" (all
    of it: one forward pass per in-neighbour) or "head" (its classifier alone, on this
    node's own embeddings of the samples: one forward pass however many in-neighbours; a
    model without a `classifier` is mixed whole)."""
    screen_budget: str = "shared"
    """How validation and the held_influence screen (mixing whole models) share the forward
    passes a round may spend on judging in-neighbours (256 samples a peer, 2,304 in all):
    "each" spends that budget on each of them, "shared" splits it between the two (each
    judges every peer on half as many samples, at least 64), so that both cost what
    validation alone does."""
    held_mates: bool = False
    """Where held_influence is on, a peer above its bar is kept when at least two other
    in-neighbours claiming one of its classes score above the bar too (their lower median)
    and its score is at most twice theirs: honest holders of a class confusable with one
    of this node's raise the loss on it alike."""
    witnesses: int = 0
    """A peer whose model at least this many of this node's other in-neighbours refused, on
    their own judgement, repeatedly (witness_memory; each model message names them) is
    refused with its prototypes this round; 0: never. A node holding none of a peer's
    real classes cannot see its label flip; the holders do. Any node can name anyone: set
    it above the number of attackers the federation must bear."""
    witness_memory: float = 0.5
    """How long a node remembers its own refusals of a peer before naming it: each round
    it multiplies what it remembers by this and adds 1 for a refusal, and names the peer
    at 1.5. 0.5: refused this round and the last; 0.9: two refusals up to six rounds apart
    (an attacker that misbehaves every other round is named too); in [0.5, 1)."""
    judged_per_round: int = 20
    """Where any screen is on and a model travels (the screens judge models), a node judges
    and aggregates at most this many of the in-neighbours whose update arrived, drawn anew
    each round (seeded by the federation's seed, the node and the round); the others are
    left out of that round, model and prototypes (`undrawn_peers` in the round's record).
    Judging costs forward passes per in-neighbour, so a round's cost stops growing with the
    in-degree beyond it (20: the ProFe paper's 20 nodes fully connected judge all 19).
    0: all."""
    unjudged: str = "keep"
    """A peer's model that no screen can judge this round (it claims no class this node
    holds, and no global prototype of a class this node lacks is known yet: round 1):
    "hold" leaves it out of the round's mix (its prototypes kept), "keep" mixes it in,
    bounded by the norm bound and the distance clip alone."""
    claim_cap: float = 2.0
    """Without the plan (use_plan = false), a peer's claimed sample count, and each class
    count it claims, weighs at most this many times the median claim of this round (this
    node's own among them); in [1, 100]."""
    use_plan: bool = True
    """Weigh peers by the federation's data plan (each node's samples and classes, known to
    every node of a simulation); false: by what each peer claims, bounded against the other
    claims, as a node that owns its data has to."""

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the aggregation functions."""
        return {"rule": self.rule, "trim_fraction": self.trim_fraction}


@dataclass(frozen=True)
class TimeoutConfig:
    """Seconds to wait for peers at start-up, in each round and at shutdown; `absent`: for
    a neighbour that missed the previous round (a lost connection is not waited for);
    `run`: for the whole run, after which `protofed up` stops what is left (0 = never)."""

    startup: float = 60.0
    """Seconds to wait for all neighbours at start-up (then an error naming the missing ones)."""
    round: float = 300.0
    """Seconds to wait for in-neighbours each round before aggregating without them."""
    shutdown: float = 10.0
    """Seconds to wait for neighbours' goodbyes and to deliver the last messages."""
    absent: float = 5.0
    """Seconds to wait each round for an in-neighbour that missed the previous one (0 to
    `round`)."""
    run: float = 86400.0
    """Seconds `protofed up` lets the whole run take before it stops every node still
    running (0: no limit)."""


@dataclass(frozen=True)
class DeployConfig:
    """Where and how the nodes run."""

    backend: str = "local"
    """Where nodes run: "local" processes, "docker" containers, "swarm" services on a Docker
    Swarm, or "sim": every node in one process, in virtual time (see [sim]); `protofed up
    --backend` overrides it."""
    host: str = "127.0.0.1"
    """The address local nodes listen on."""
    base_port: int = 0
    """Local nodes listen on `base_port + i`; 0: free ports. The launcher binds each port and
    hands the listening socket to its node, so no other process can take it in between."""
    results_dir: str = "results"
    """Where runs are written."""
    cores: int = 0
    """Cores to share among local nodes, or on the sim backend the nodes computing at once
    (0: all available)."""
    image: str = ""
    """docker: the node image to use; empty: build `protofed-node:<content hash>`."""
    base_image: str = "python:3.11-slim"
    """docker: base of the node image when it is on this machine or can be pulled; otherwise
    the local Debian base (`protofed-base:bookworm`, made once with debootstrap)."""
    cpus: float = 0.0
    """CPUs per node: a container's limit (0: no limit)."""
    memory: str = ""
    """Memory per node, like "512m" or "1g": a container's limit (empty: 1.5 times the
    measured estimate), and what the capacity check counts per node on every backend
    instead of measuring one."""
    port: int = 5555
    """docker: the port each node listens on inside its container."""
    security: str = "curve"
    """"curve": authenticated, encrypted peers with a fresh keypair per node per run; "none":
    plaintext, peers identified by what they claim (a warning on the terminal and in every
    node's log)."""
    allow_insecure: bool = False
    """Must be true as well for `security = "none"` on Docker or a Swarm (and in `protofed
    compose` files): the network there may be shared."""
    restarts: int = 0
    """local: how many times the launcher starts a crashed node again (it rejoins at the
    federation's next round)."""
    manager: str = ""
    """swarm: the manager's Docker API; empty: $DOCKER_HOST, else the local engine."""
    registry: str = ""
    """swarm: "host:port" of the registry every machine pulls the node image from (required
    there; with `protofed compose`, a stack with no host path)."""
    placement: str = "spread"
    """swarm: "spread" (node i on the i-th machine in turn) or "swarm" (wherever the scheduler
    puts it)."""
    pin: list[str] = field(default_factory=list)
    """swarm: `pin[i]` a machine's hostname for node i ("": by placement); with data.layout
    "per-node", every node's: the machine that holds its folder."""

    def usable_cores(self) -> int:
        """`cores`, else every core this process may run on."""
        return self.cores or len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class LinkEdge:
    """Conditions for one directed edge (nodes = [sender, receiver]), or both ways."""

    nodes: list[int] = field(default_factory=list)
    """The edge as [sender, receiver] (required)."""
    both_ways: bool = False
    """The conditions hold for [receiver, sender] too."""
    bandwidth: str = ""
    """This edge's bandwidth; empty: the default (see Link conditions)."""
    delay: str = ""
    """This edge's delay; empty: the default."""
    jitter: str = ""
    """This edge's delay jitter; empty: the default."""
    loss: str = ""
    """This edge's packet loss; empty: the default."""


@dataclass(frozen=True)
class LinksConfig:
    """Link conditions (topology.links): a profile and defaults for every edge, then the
    graph's edge attributes, then `edges`; empty values leave a condition off."""

    profile: str = ""
    """Named conditions every edge starts from (empty: none)."""
    bandwidth: str = ""
    """Every edge's bandwidth (see Link conditions); empty: not shaped."""
    delay: str = ""
    """Every edge's delay; empty: none."""
    jitter: str = ""
    """Every edge's delay jitter; empty: none."""
    loss: str = ""
    """Every edge's packet loss; empty: none."""
    uplink: str = ""
    """sim backend: each node's uplink, shared equally by the copies of one broadcast (a
    bandwidth like "10mbit"); empty: each copy only as fast as its edge."""
    edges: list[LinkEdge] = field(default_factory=list)
    """One edge's conditions (or a pair's): see [[links.edges]]."""

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
class SimConfig:
    """The sim backend's virtual time: how a node's measured compute maps to virtual
    seconds (network time follows [links])."""

    slowdown: float = 1.0
    """Virtual seconds per CPU second of every node's compute (1: each node a core of this
    machine; 5: ten nodes sharing two cores); positive."""
    node_slowdowns: list[float] = field(default_factory=list)
    """Per node, a factor on `slowdown` (heterogeneous devices: 4 is a node four times
    slower); empty: 1 for every node, else one positive number per node."""


@dataclass(frozen=True)
class ScenarioEvent:
    """What happens at the start of one round: nodes that leave, come back or join late,
    undirected edges [u, v] that go down or come back up."""

    round: int = 0
    """The round at whose start the event happens."""
    leave: list[int] = field(default_factory=list)
    """Nodes that leave."""
    back: list[int] = field(default_factory=list)
    """Nodes that come back after leaving."""
    join: list[int] = field(default_factory=list)
    """Nodes that join for the first time (absent until then)."""
    edge_down: list[list[int]] = field(default_factory=list)
    """Undirected edges [u, v] that go down."""
    edge_up: list[list[int]] = field(default_factory=list)
    """Undirected edges [u, v] that come back up."""


@dataclass(frozen=True)
class ScenarioConfig:
    """Churn by round: events here, or in a TOML file of [[events]] (read at the entrance)."""

    file: str = ""
    """A TOML file of [[events]] (see Churn), read when the config is loaded; not with
    `events`."""
    events: list[ScenarioEvent] = field(default_factory=list)
    """Churn by round (see Churn): see [[scenario.events]]."""


@dataclass(frozen=True)
class ReportConfig:
    """What the run reports beyond bytes and F1."""

    target_f1: float = 0.0
    """The federation's mean F1 to reach: rounds, seconds and bytes until it first does
    (0: not reported); in [0, 1]."""
    consensus_sketch: int = 1024
    """Values per round of each node's sketch of its model, for the consensus distance
    (0: none; at least the model's size: the model itself, exact)."""
    eval_every: int = 1
    """Evaluate each node on its test sets every this many rounds; round 0 and a node's
    last round always. A round between has no F1 (blank in rounds.csv, left out of the
    pictures and of the round's mean F1)."""
    pictures: bool = True
    """Draw the run's pictures (PNG and SVG) when it ends; false: rounds.csv and
    phases.csv only, and `protofed report RUN` draws them later (about 2 s of CPU a run
    saved: for sweeps of many runs)."""


@dataclass(frozen=True)
class FederationConfig:
    """A whole federation, as one TOML file describes it."""

    name: str = "federation"
    """Run name, the prefix of the run id: letters, digits, '-' or '_'."""
    nodes: int = 5
    """Number of nodes, in 1..10,000 (1 runs, with a note that a single node exchanges
    nothing; each node is a process or thread with its own record and data, and 10,000 is
    the most measured)."""
    rounds: int = 3
    """Federated rounds; in 1..10,000 (each round is kept in every node's record)."""
    seed: int = 42
    """Seed for partitions, initial weights, shuffling and random graphs."""
    algorithm: str = "profe"
    """The learning algorithm; its own settings are in its table ([profe], [fedhp], ...)."""
    participation: float = 1.0
    """Share of the nodes (the hub aside) that train and send each round, in (0, 1]: the
    same round(participation x N) nodes, at least 1, drawn on every node from `seed` and
    the round; the others keep their state, send nothing and are not waited for (see
    Topologies). 1: every node, every round."""
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    """[topology]: who sends to whom."""
    data: DataConfig = field(default_factory=DataConfig)
    """[data]: the dataset and how it is split."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """[model]: the architectures."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """[train]: local training."""
    exchange: ExchangeConfig = field(default_factory=ExchangeConfig)
    """[exchange]: how tensors travel."""
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    """[aggregation]: how what arrives is combined."""
    timeouts: TimeoutConfig = field(default_factory=TimeoutConfig)
    """[timeouts]: how long to wait."""
    deploy: DeployConfig = field(default_factory=DeployConfig)
    """[deploy]: where and how the nodes run."""
    links: LinksConfig = field(default_factory=LinksConfig)
    """[links]: emulated link conditions."""
    sim: SimConfig = field(default_factory=SimConfig)
    """[sim]: the sim backend's virtual time."""
    scenario: ScenarioConfig = field(default_factory=ScenarioConfig)
    """[scenario]: churn by round."""
    report: ReportConfig = field(default_factory=ReportConfig)
    """[report]: what the run reports beyond bytes and F1."""
    methods: dict[str, Any] = field(default_factory=dict)
    """Each algorithm's own table ([fedhp], ...) by algorithm name, as its module declares it
    (node.config fills in every registered algorithm's table)."""

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
