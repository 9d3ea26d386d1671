"""Which nodes take part in each round: a seeded draw from the federation's seed and the
round alone, so every node (and every backend) derives the same set with nothing exchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Mixed into the draw's seed so the chosen sets do not repeat the random graphs' draws
# (topology.schedule.derived_seed of the seed and the draw alone).
SALT = 0x70617274  # "part"


def chosen_count(fraction: float, candidates: int) -> int:
    """How many of `candidates` take part: fraction x candidates rounded (halves up), at
    least 1."""
    return min(candidates, max(1, math.floor(fraction * candidates + 0.5)))


def chosen(candidates: Sequence[int], fraction: float, seed: int, round_: int) -> frozenset[int]:
    """The nodes of `candidates` that train and send in round `round_`: all of them at
    fraction 1, else chosen_count of them drawn without replacement."""
    pool = sorted(candidates)
    if fraction >= 1.0 or not pool:
        return frozenset(pool)
    generator = np.random.default_rng(np.random.SeedSequence([int(seed), int(round_), SALT]))
    picked = generator.choice(len(pool), chosen_count(fraction, len(pool)), replace=False)
    return frozenset(pool[int(i)] for i in picked)


@dataclass(frozen=True)
class Participation:
    """Who takes part in each round: `fraction` of the nodes other than the `hub`, drawn
    from `seed` and the round; the hub (a node without data: it aggregates and sends back)
    takes part in every round."""

    fraction: float = 1.0
    seed: int = 0
    hub: int | None = None

    @property
    def partial(self) -> bool:
        """Whether some rounds leave nodes out."""
        return self.fraction < 1.0

    def chosen(self, nodes: int, round_: int) -> frozenset[int]:
        """The nodes other than the hub that train and send in round `round_` (all in round 0,
        which exchanges nothing)."""
        clients = [i for i in range(nodes) if i != self.hub]
        return chosen(clients, self.fraction if round_ else 1.0, self.seed, round_)


EVERYONE = Participation()  # every node, every round, and no hub
