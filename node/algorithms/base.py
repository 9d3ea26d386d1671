"""The contract every learning algorithm fulfils; the round loop knows nothing more."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from node.profile import Profile
from node.settings import FederationConfig


@dataclass(frozen=True)
class Payload:
    """What travels for one message kind: named tensors and integer metadata (integers or
    lists of them)."""

    tensors: Mapping[str, torch.Tensor]  # received ones decode each time they are read
    meta: dict[str, int | list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """Part of an in-neighbour's update left out of aggregation: whose, what ("model",
    "prototypes", "prototype of class 3"), the rule that refused it and why; `judged`: by
    this node's own measure of it (not held out unjudged, not on others' word: what
    node.intake.witnesses names once it repeats)."""

    peer: int
    what: str
    rule: str
    reason: str
    judged: bool = False

    def as_record(self) -> dict[str, Any]:
        """The refusal as a node record stores it."""
        return {"peer": self.peer, "what": self.what, "rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class DataPlan:
    """What the federation's seeded split gives every node, known to all of them: training
    samples [nodes] and class counts [nodes, C]. Aggregation weighs peers by these, not by
    what a peer claims."""

    samples: tuple[int, ...]
    class_counts: torch.Tensor

    def counts_of(self, node: int) -> torch.Tensor | None:
        """Node `node`'s planned class counts, None for a node outside the plan."""
        return self.class_counts[node] if 0 <= node < len(self.samples) else None


@dataclass(frozen=True)
class NodeData:
    """One node's tensors: local train/test shares and the federation's global test set."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    global_x: torch.Tensor
    global_y: torch.Tensor
    num_classes: int
    plan: DataPlan | None = None  # None: weights are what peers claim (synthetic data only)

    @property
    def in_channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_x.shape[-1])


Updates = Mapping[int, Mapping[str, Payload]]

ARGMAX = "argmax"  # the class of the model's largest logit
PROTOTYPE = "prototype"  # the class of the nearest global prototype


class Algorithm(abc.ABC):
    """Local training, what to send, how to aggregate, how to predict.

    Args:
        config: the validated federation config.
        data: this node's data.
        device: where tensors and models live.
        node_id: this node's id, for per-node randomness.
    """

    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]  # the payload kinds sent every round, e.g. ("model",)
    reported_rule: ClassVar[str] = ARGMAX  # the prediction rule the algorithm's paper reports
    # The dataclass of the algorithm's own config table, [<name>] (None: it has none). It
    # may define problems() -> [(key, message)] for values out of range. node.algorithms'
    # CATALOGUE names the same class and presets for the config, without torch.
    settings_class: ClassVar[type | None] = None
    # Named sets of defaults, {preset: {table: {key: value}}}, chosen by `preset` in the
    # algorithm's own table; what the file sets wins over the preset.
    presets: ClassVar[dict[str, dict[str, dict[str, Any]]]] = {}

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        self.config = config
        self.data = data
        self.device = device
        self.node_id = node_id
        self.kept_own_models = 0  # aggregates not adopted: they computed NaN (common.adopt)
        self.trust: dict[int, float] = {}  # in-neighbours' trust ("reputation" rule)
        self.distrusted: dict[int, str] = {}  # whose model a screen refused this round, by which
        # its own refusals of each peer, remembered, and the peers they make its model
        # message name where aggregation.witnesses is on (node.intake.witnesses)
        self.suspicion: dict[int, float] = {}
        self.refused_named: list[int] = []
        # the travelling model as this round's training began: what validation measures a
        # peer's model against (node.intake.validation); set by create() and each adoption
        self.start_state: dict[str, torch.Tensor] | None = None
        # the node's profile of its rounds once it runs (node.runtime), timing the phases
        # an algorithm owns (the teacher, the screens); a profile of its own until then
        self.profile = Profile()
        # each in-neighbour's per-layer distance from this node's model, measured by the
        # distance screen for its clipping in the same round (node.intake.distance)
        self.layer_distances: dict[int, dict[str, float]] = {}

    def travelling_model(self) -> Any:
        """The model sent to in-neighbours and averaged (an nn.Module), None when only
        prototypes travel."""
        return None

    @property
    def settings(self) -> Any:
        """This algorithm's own config table, validated at the entrance."""
        return self.config.methods[self.name]

    @abc.abstractmethod
    def train_round(self, round_: int) -> dict[str, float]:
        """Train locally for one round; return scalar statistics (losses, weights)."""

    def exchange_steps(self) -> tuple[tuple[str, ...], ...]:
        """The kinds sent in each exchange step of a round, in order; each kind once a round.

        Each step is send, collect, aggregate; a later step's payload may depend on what
        the earlier steps aggregated.
        """
        return (self.kinds,)

    @abc.abstractmethod
    def payload(self) -> dict[str, Payload]:
        """What this node would send to its out-neighbours now, by kind."""

    def payloads_of(self, kinds: Sequence[str]) -> dict[str, Payload]:
        """The payloads of `kinds` only (an algorithm whose payloads cost a pass over data
        builds just those)."""
        return {kind: payload for kind, payload in self.payload().items() if kind in kinds}

    def served_payload(self) -> dict[str, Payload]:
        """What a hub (topology.hub) sends its clients after aggregating their updates, by
        kind; by default what it would send now (a model's aggregate is its model)."""
        return self.payload()

    def addressed(self, kind: str, payload: Payload,
                  recipients: Sequence[int]) -> list[tuple[Payload, Sequence[int]]]:
        """Who gets which payload of `kind`: an honest node sends every recipient the same
        (one encoding, one message); a node may address recipients apart (what a node
        holding a stolen key can do, so the attack library uses it)."""
        return [(payload, recipients)]

    @abc.abstractmethod
    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        """Combine this node's payload with the in-neighbours' that arrived (by peer id).

        `own` holds the kinds of one exchange step. Returns what was left out of the
        in-neighbours' updates, and why.
        """

    @abc.abstractmethod
    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Class predictions for a batch of inputs under every rule the algorithm has."""

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Class predictions under the rule the algorithm's paper reports."""
        return self.predictions(x)[self.reported_rule]
