"""Which in-neighbours a node judges in a round. Every screen costs forward passes or
distances per in-neighbour, so where a model travels (the screens judge models) a node
judges at most aggregation.judged_per_round of the in-neighbours whose update arrived,
drawn anew each round; the rest are left out of that round, model and prototypes alike: an
update no screen judged is not mixed in. The draw is seeded (the federation's seed, the
node, the round), so reruns draw alike; knowing it gains a sender nothing, since a drawn
update is judged like any other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from node.algorithms.common import round_generator
from node.settings import AggregationConfig

# The stream of a round's draw: apart from the round's shuffles (round_generator's round)
DRAW_STREAM = 7_919


def judges(settings: AggregationConfig) -> bool:
    """Whether any screen judges the in-neighbours' models under `settings`."""
    return (settings.validation > 0 or settings.distance > 0 or settings.influence > 0
            or settings.prototype_validation or settings.held_influence > 0)


def judged_count(settings: AggregationConfig, arrived: int, models: bool = True) -> int:
    """How many of `arrived` in-neighbours' updates a node judges and mixes in a round: all
    of them, or at most judged_per_round where a screen judges the models that travel."""
    most = settings.judged_per_round
    return min(arrived, most) if models and judges(settings) and most > 0 else arrived


def drawn(peers: Sequence[int], most: int, generator: torch.Generator) -> list[int]:
    """`most` of `peers` in a random order from `generator`, sorted; all of them where `most`
    is 0 or they are no more."""
    ordered = sorted(peers)
    if most <= 0 or len(ordered) <= most:
        return ordered
    order = torch.randperm(len(ordered), generator=generator)[:most].tolist()
    return sorted(ordered[i] for i in order)


def round_draw(config, node_id: int, round_: int, arrived: Sequence[int],
               models: bool = True) -> set[int] | None:
    """The in-neighbours node `node_id` judges in `round_` among those that `arrived`; None
    where it takes them all: no screen on, no model travelling to judge (`models` False:
    a prototype-only method), or no more arrived than judged_per_round."""
    most = judged_count(config.aggregation, len(arrived), models)
    if most == len(arrived):
        return None
    generator = round_generator(config, node_id, DRAW_STREAM * (round_ + 1))
    return set(drawn(arrived, most, generator))


def only_drawn(received: Mapping[int, object], draw: set[int] | None
               ) -> tuple[dict[int, object], list[int]]:
    """`received` less the peers outside `draw` (None: all kept), and those left out."""
    if draw is None:
        return dict(received), []
    return ({peer: update for peer, update in received.items() if peer in draw},
            sorted(peer for peer in received if peer not in draw))
