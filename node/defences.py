"""What a node holds against its in-neighbours' updates, decided from numbers alone: norm
references and floors, trust, the bars of validation and of the influence screens, claim
caps, distance scores and the witnesses' quorum. Pure and torch-free; node.intake measures
the losses, norms and distances these judge (with node.aggregation)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence

# A class needs this many contributors (own included) before their median is its reference:
# one outlier cannot move a median of three.
MEDIAN_QUORUM = 3


def contributor_median(rows: Sequence[Sequence[float]]) -> float:
    """The median over contributors of each one's median value (`rows[i]`: contributor i's
    values, empty rows skipped; 0 when none has any). One vote each: a peer sending ten rows
    moves it no more than one sending two, where a median over every row follows the ten."""
    medians = [statistics.median(row) for row in rows if row]
    return statistics.median(medians) if medians else 0.0


def class_references(own: Sequence[float | None],
                     peers: Sequence[Sequence[float | None]]) -> list[float]:
    """Per class, the norm a peer's prototype of that class is bounded against.

    `own[c]` is this node's prototype norm of class c (None when it has no such class),
    `peers[p][c]` the same for each peer. The reference of class c is the larger of this
    node's own norm and the median over every contributor of c (three or more); this
    node's own alone below three; for a class this node does not have and fewer than three
    contributors have, `floor_reference` (one vote per contributor: a peer sending rows of
    every class must not outvote the two or four honest rows of a ring's neighbourhood).
    Honest non-IID prototypes differ by class, so one norm for all classes refused them.
    """
    overall = floor_reference(own, peers)
    references = []
    for c, mine in enumerate(own):
        having = [n for n in [mine, *(row[c] for row in peers)] if n is not None]
        if len(having) >= MEDIAN_QUORUM:
            references.append(max(mine or 0.0, statistics.median(having)))
        else:
            references.append(mine if mine is not None else overall)
    return references


def floor_reference(own: Sequence[float | None],
                    peers: Sequence[Sequence[float | None]]) -> float:
    """The median over this node (`own`) and each peer (`peers[p]`) of its median prototype
    norm (`contributor_median`; None: no such class): the norm a prototype is floored
    against, and the bound's reference of a class too few contributors have."""
    return contributor_median([[n for n in row if n is not None] for row in [own, *peers]])


def below_norm_floor(norm: float, reference: float, floor: float) -> bool:
    """True when `norm` is below `reference` / `floor` (never with `floor` 0 or a reference
    of 0)."""
    return floor > 0 and reference > 0 and norm * floor < reference


def clip_scores(distances: Sequence[float], radius: float) -> list[float]:
    """Per in-neighbour, the share of its pull that self-centred clipping keeps: 1 within
    `radius` of this node's model, radius / distance beyond."""
    return [1.0 if d <= radius else radius / d for d in distances]


def updated_trust(trust: Mapping[int, float], scores: Mapping[int, float],
                  memory: float) -> dict[int, float]:
    """Each scored neighbour's trust after this round: `memory` of what it was (1 for a
    neighbour not seen before) plus the rest of this round's score. Neighbours not scored
    this round keep theirs."""
    return {**trust, **{peer: memory * trust.get(peer, 1.0) + (1 - memory) * score
                        for peer, score in scores.items()}}


def relative_trust(trust: Mapping[int, float], peers: Sequence[int]) -> list[float]:
    """Each of `peers`' trust divided by the largest among them: what matters is how a
    neighbour compares with the others this round (on a ring two honest neighbours take
    turns being the farther one, and neither should lose weight for it)."""
    top = max((trust[peer] for peer in peers), default=0.0)
    return [trust[peer] / top if top > 0 else 1.0 for peer in peers]



# A fit this close to the data is not judged by how much closer this node's own model is.
LOSS_FLOOR = 0.1


def class_weighted_mean(sums: Sequence[float], total: Sequence[int],
                        weights: Sequence[float]) -> float | None:
    """The mean per sample of each class (`sums[c] / total[c]`), classes weighed by
    `weights[c]` (the peer's sample count of c), over the classes with samples here and
    weight from the peer; None when none has both."""
    shared = [c for c in range(len(total)) if total[c] > 0 and weights[c] > 0]
    if not shared:
        return None
    weight = sum(weights[c] for c in shared)
    return sum(weights[c] * sums[c] / total[c] for c in shared) / weight


def prototype_class_loss(losses: Sequence[float | None],
                         weights: Sequence[float]) -> float | None:
    """The mean of per-class `losses` (a classifier's on each class's global prototype; None:
    no prototype) over the classes with weight (the peer's sample count of each), weighed
    by it; None when no class has both."""
    shared = [c for c, (loss, w) in enumerate(zip(losses, weights, strict=True))
              if loss is not None and w > 0]
    if not shared:
        return None
    return sum(weights[c] * losses[c] for c in shared) / sum(weights[c] for c in shared)


def loss_to_beat(start_loss: float, classes: int) -> float:
    """The fit an update must improve on: the start of round's loss, or ln(`classes`) (the
    cross-entropy of a uniform guess) where the start fits worse than guessing. After a
    round of non-IID averaging the start can be confidently wrong on a peer's classes (a
    loss of 3 on 10 classes), and an update that knows nothing (a random or zeroed model,
    a uniform guess) would otherwise pass as a cut of a quarter."""
    return min(start_loss, math.log(classes)) if classes > 1 else start_loss


def required_factor(own_loss: float, own_start_loss: float, share: float) -> float:
    """The most a peer's loss may be, as a fraction of the start of round's: 1 - `share` x
    the cut this node's own round made in the loss on its own held-out samples (1 when it
    made none). The same training recipe (model, learning rate, epochs) made both rounds,
    so this node's own cut says how far one honest round goes, in any setting."""
    if not own_start_loss > 0:
        return 1.0
    return 1.0 - share * max(0.0, 1.0 - own_loss / own_start_loss)


def fails_validation(loss: float, start_loss: float, factor: float) -> bool:
    """Whether a peer's model fits this node's samples of the peer's own classes worse than
    `factor` times the model this node began the round with: its cross-entropy above
    max(factor x start_loss, LOSS_FLOOR). An honest update descends its sender's loss on
    its classes, so to first order the loss falls below the start's; a reversed one
    (loss(x - u) ~ loss(x) + |g.u|), a sign-flipped, random, untrained or label-flipped
    model does not fall. The factor below 1 (`required_factor`) asks for a fall: from a
    random start every near-uniform model, junk included, fits about as badly as the
    start."""
    return loss > max(factor * start_loss, LOSS_FLOOR)


def class_excess_scores(excess: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per in-neighbour, the most its excess loss on one class exceeds that class's
    reference: the median over this node (0: its own model, mixed with nothing) and every
    in-neighbour measured on the class, or 0 where that median is negative. `excess[p][c]`
    is the loss on class c of this node's model mixed with peer p's, minus its own model's
    (None: class c not measured);
    None for a peer measured on no class.

    Judging a neighbour against the others, not against an absolute bar, is what holds on
    disjoint classes: there every honest neighbour's model raises this node's loss on the
    classes it lacks, and only one that raises it far beyond theirs is out of line (UBAR,
    Guo et al. 2021, stage 2; here relative, as BALANCE (Fang et al. 2024) bounds a
    neighbour by its distance relative to this node's own)."""
    classes = max((len(row) for row in excess), default=0)
    references = []
    for c in range(classes):
        measured = [row[c] for row in excess if row[c] is not None]
        # never below 0: a neighbour that leaves a class as this node's own model has it
        # does no harm there, however much the others' mixes improve it
        references.append(max(0.0, statistics.median([0.0, *measured])) if measured else None)
    scores: list[float | None] = []
    for row in excess:
        over = [row[c] - references[c] for c in range(classes)
                if row[c] is not None and references[c] is not None]
        scores.append(max(over) if over else None)
    return scores


# The held-class influence bar sits this many median absolute deviations above the median
# score (and never below aggregation.held_floor).
HELD_SPREAD = 8.0
# The spread of fewer scores than this says nothing (a ring's two in-neighbours: one
# honest neighbour of other classes is as far from the other as an attacker): `margin`.
SPREAD_QUORUM = 4


def spread_bar(scores: Sequence[float | None], margin: float, floor: float,
               spread: float = HELD_SPREAD) -> float:
    """The score above which an in-neighbour is out of line with the others: the median of
    this node's own (0) and every score, plus `spread` median absolute deviations, never
    below `floor` nor above `margin`; `margin` alone with fewer than SPREAD_QUORUM scores.
    Early in training honest mixes move this node's classes by anything from 0 to several
    nats (the spread is wide: `margin` binds); once the federation agrees they move them
    alike, and one that moves them by a multiple of the others' spread stands out however
    small the absolute amount (a robust z-score: one attacker among the scores barely moves
    a median or a MAD). Where every honest mix changes a class alike (a spread of 0), the
    floor keeps noise just above it from refusing anyone."""
    measured = [s for s in scores if s is not None]
    if len(measured) < SPREAD_QUORUM:
        return margin
    values = [0.0, *measured]
    centre = statistics.median(values)
    deviation = statistics.median([abs(v - centre) for v in values])
    return min(margin, max(floor, centre + spread * deviation))


# A neighbour is measured against its class-mates only where it has at least this many:
# two, so that a class held by four keeps its exemption when one holder is gone (a dropout,
# or a neighbour refused at the door: under three, ProFe's paper cell lost 7.3 points).
MATE_QUORUM = 2
# ... and kept only while its score is at most this many times their lower median score.
MATE_FACTOR = 2.0


def mates_cover(mates: Sequence[float], bar: float, quorum: int = MATE_QUORUM,
                factor: float = MATE_FACTOR) -> float | None:
    """The score up to which a neighbour's class-mates cover it: `factor` times the lower
    median of their scores `mates`, where there are at least `quorum` and that median is
    above `bar`; None where they cover nothing."""
    if len(mates) < quorum:
        return None
    centre = statistics.median_low(mates)
    return factor * centre if centre > bar else None


def shared_with_mates(scores: Sequence[float | None], classes: Sequence[set[int]],
                      bar: float, quorum: int = MATE_QUORUM,
                      factor: float = MATE_FACTOR) -> set[int]:
    """The indices of the scores above `bar` that the scorer's class-mates share: at least
    `quorum` others claiming one of its classes, whose lower median score is above `bar`
    too, and its own score at most `factor` times that. There the class moves this node's
    loss, not the neighbour (a model that learned 9s and never saw a 4 reads this node's
    4s as 9s, and so does every honest holder of 9). A neighbour with fewer class-mates,
    a liar claiming every class (its mates' median is the federation's, under the bar), or
    one far beyond its mates is not covered. The lower median of m mates is an honest
    mate's score or below it while fewer than m // 2 + 1 of them collude: of two
    colluders, each is one of the other's two or more mates, so one honest mate above the
    bar is needed."""
    covered = set()
    for i, score in enumerate(scores):
        if score is None or score <= bar:
            continue
        mates = [other for k, other in enumerate(scores)
                 if k != i and other is not None and classes[k] & classes[i]]
        cover = mates_cover(mates, bar, quorum, factor)
        if cover is not None and score <= cover:
            covered.add(i)
    return covered


def mixing_share(own_weight: float, peer_weight: float) -> float:
    """The share a peer's model takes when this node averages it with its own alone, each
    at its weight: what the peer would do to this node, magnified from its share among all
    in-neighbours (a tenth on ten) so that one round's damage shows above the noise."""
    total = own_weight + peer_weight
    return peer_weight / total if total > 0 else 0.5


# A claimed weight is bounded by this many times the median claim (own included).
CLAIM_FACTOR = 2.0


def bounded_claims(own: float, claims: Sequence[float],
                   factor: float = CLAIM_FACTOR) -> list[float]:
    """Each claim capped at `factor` times the median of every claim and this node's own:
    without a data plan, a neighbour's sample count is what it says, and one that says
    2^31 would otherwise outweigh everyone. Honest counts within `factor` of the median
    keep their weight."""
    if not claims:
        return []
    cap = factor * statistics.median([own, *claims])
    return [min(claim, cap) for claim in claims]


def bounded_class_claims(own: Sequence[int], peers: Sequence[Sequence[int]],
                         factor: float = CLAIM_FACTOR) -> list[list[int]]:
    """Each peer's claimed class counts, each capped at `factor` times the median count of
    that class over every contributor of it (this node included; three or more), else
    `factor` times `contributor_median` of the counts claimed (one vote per contributor: a
    peer claiming every class at the largest count moves it no more than one honest peer):
    a lone liar cannot move a median of three."""
    overall = contributor_median([[n for n in row if n > 0] for row in [own, *peers]])
    caps = []
    for c in range(len(own)):
        having = [n for n in [own[c], *(row[c] for row in peers)] if n > 0]
        caps.append(factor * (statistics.median(having) if len(having) >= MEDIAN_QUORUM
                              else overall))
    return [[int(min(n, cap)) for n, cap in zip(row, caps, strict=True)] for row in peers]


def layer_distance_scores(distances: Sequence[Mapping[str, float]]) -> list[float]:
    """Each in-neighbour's largest `distance_scores` over the model's layers: `distances[p]`
    maps a layer to peer p's distance from this node's model in it. Per layer, because an
    update that spends its whole budget in one layer (a classifier's rows lifted along the
    embedding lift a class's logit on every input) is near in the whole model and far in
    that layer; measured per layer, no neighbour pulls any layer much further than the
    median one does."""
    layers = sorted({layer for row in distances for layer in row})
    scores = [0.0] * len(distances)
    for layer in layers:
        column = distance_scores([row.get(layer, 0.0) for row in distances])
        scores = [max(a, b) for a, b in zip(scores, column, strict=True)]
    return scores


def layer_clip_factors(distances: Sequence[Mapping[str, float]],
                       bound: float) -> list[dict[str, float]]:
    """Per in-neighbour and layer, the share of its deviation from this node's model kept so
    that it is at most `bound` times the layer's median distance (this node's own 0 among
    them): 1 within, bound x median / distance beyond (self-centred clipping, He et al.
    2022, per layer, with a radius relative to the in-neighbours')."""
    layers = sorted({layer for row in distances for layer in row})
    factors: list[dict[str, float]] = [{} for _ in distances]
    for layer in layers:
        column = distance_scores([row.get(layer, 0.0) for row in distances])
        for row, score in zip(factors, column, strict=True):
            row[layer] = 1.0 if score <= bound else bound / score
    return factors


def distance_scores(distances: Sequence[float]) -> list[float]:
    """Each in-neighbour's distance from this node's model over the reference: the median
    of this node's own (0) and every in-neighbour's. Own included, one far model among two
    in-neighbours (a ring) is measured against the nearer one, not against itself; an
    honest update moves a model as far as one round of local training does, a sign-flipped,
    random or heavily shifted one far beyond (UBAR's first stage, Guo et al. 2021; BALANCE,
    Fang et al. 2024, bounds the same distance against the node's own norm)."""
    reference = statistics.median([0.0, *distances]) if distances else 0.0
    return [d / reference if reference > 0 else (0.0 if d == 0 else math.inf)
            for d in distances]


def witnessed(accusations: Mapping[int, Collection[int]], peers: Sequence[int],
              quorum: int) -> dict[int, list[int]]:
    """Each of `peers` that at least `quorum` of the other `peers` accuse (`accusations`:
    sender -> the peers its message names), with its accusers. A peer's word on itself
    does not count, nor the word of a sender outside `peers`."""
    if quorum <= 0:
        return {}
    among = set(peers)
    out = {}
    for peer in peers:
        accusers = sorted(s for s, named in accusations.items()
                          if s in among and s != peer and peer in named)
        if len(accusers) >= quorum:
            out[peer] = accusers
    return out
