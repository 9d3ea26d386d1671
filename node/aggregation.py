"""Aggregation math: weighted model averages and class prototypes, pure and non-mutating."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

import torch

from node.aggregation_rules import AGGREGATION_RULES
from node.defences import clip_scores, relative_trust, updated_trust

StateDict = Mapping[str, torch.Tensor]


def state_norm(state: StateDict) -> float:
    """The Euclidean norm of a model's floating-point tensors, taken together."""
    return float(sum(float(t.to(torch.float64).square().sum()) for t in state.values()
                     if t.is_floating_point()) ** 0.5)


def norm_reference(own_norm: float, peer_norms: Sequence[float]) -> float:
    """What peers' norms are bounded against: this node's own, or the median of all of them
    (own included) when that is larger and there are three or more. One outlier cannot move
    a median of three, and a node restarted from scratch still accepts trained neighbours."""
    if len(peer_norms) < 2:
        return own_norm
    return max(own_norm, statistics.median([own_norm, *peer_norms]))


def beyond_norm_bound(norm: float, reference: float, bound: float) -> bool:
    """Whether a peer's `norm` exceeds `bound` times the `reference` (never for bound 0 or a
    reference of 0). Norm bounding: Sun et al. 2019, "Can you really backdoor federated
    learning?": a peer's magnitude cannot outgrow what honest training gives."""
    return bound > 0 and reference > 0 and norm > bound * reference


def coordinate_median(stacked: torch.Tensor) -> torch.Tensor:
    """Element-wise median over dim 0; the mean of the two middle values for an even count."""
    ordered = stacked.sort(dim=0).values
    k = ordered.shape[0]
    if k % 2:
        return ordered[k // 2]
    return (ordered[k // 2 - 1] + ordered[k // 2]) / 2


def trim_count(k: int, trim_fraction: float) -> int:
    """How many of k values a trimmed mean drops from each end: floor(trim * k), and at
    least one from k = 3 on when trimming is asked for (a node on a ring has itself and two
    in-neighbours, where floor(0.2 * 3) = 0 would trim nothing); never all of them."""
    least = 1 if trim_fraction > 0 and k >= 3 else 0
    return min(max(int(trim_fraction * k), least), (k - 1) // 2)


def trimmed_mean(stacked: torch.Tensor, trim_fraction: float) -> torch.Tensor:
    """Element-wise mean over dim 0 after dropping the `trim_count` largest and smallest."""
    k = stacked.shape[0]
    cut = trim_count(k, trim_fraction)
    return stacked.sort(dim=0).values[cut:k - cut].mean(dim=0)


def clipping_radius(distances: torch.Tensor) -> float:
    """The upper median of the distances: at least half of them lie within it. With this
    node's own (0) and one in-neighbour's, that neighbour's distance: nothing is clipped
    where there is nothing to compare with (the lower median's mean of the two halved it)."""
    return float(distances.sort().values[len(distances) // 2])


def clipped_deviations(vectors: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    """Each row moved towards `center` so that its distance is at most the clipping radius
    (`clipping_radius`) of the rows' distances (centered clipping)."""
    deviations = vectors - center
    norms = deviations.norm(dim=1)
    radius = clipping_radius(norms)
    scale = torch.where(norms > radius, radius / norms.clamp(min=1e-30), torch.ones_like(norms))
    return center + deviations * scale.unsqueeze(1)


def _weighted(stacked: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (stacked * (weights / weights.sum()).unsqueeze(1)).sum(dim=0)


def _clipped_mean(stacked: torch.Tensor, weights: torch.Tensor, trim_fraction: float,
                  center: torch.Tensor | None) -> torch.Tensor:
    center = coordinate_median(stacked) if center is None else center
    return _weighted(clipped_deviations(stacked, center), weights)


# Each rule of AGGREGATION_RULES: (stacked, weights, trim_fraction, center) -> combined.
COMBINERS: dict[str, Callable[[torch.Tensor, torch.Tensor, float, torch.Tensor | None],
                              torch.Tensor]] = {
    "mean": lambda stacked, weights, _trim, _center: _weighted(stacked, weights),
    "median": lambda stacked, _weights, _trim, _center: coordinate_median(stacked),
    "trimmed_mean": lambda stacked, _weights, trim, _center: trimmed_mean(stacked, trim),
    "clipped_mean": _clipped_mean,
    "reputation": _clipped_mean,  # its weights carry the trust (reputation_aggregate)
}


def robust_combine(stacked: torch.Tensor, weights: torch.Tensor, rule: str,
                   trim_fraction: float, center: torch.Tensor | None = None) -> torch.Tensor:
    """Combine k flattened contributions [k, n] (float64) into one [n] under `rule`.

    `weights` serve "mean" and "clipped_mean"; the clipping center is `center`, else the
    coordinate median.
    """
    if rule not in COMBINERS:
        raise ValueError(f"unknown aggregation rule {rule!r}, expected one of "
                         f"{AGGREGATION_RULES}")
    return COMBINERS[rule](stacked, weights, trim_fraction, center)


def _flattened(states: Sequence[tuple[StateDict, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The states' floating-point tensors as rows [k, n] (float64), and their weights."""
    first = states[0][0]
    names = [n for n, t in first.items() if t.is_floating_point()]
    flat = torch.stack([torch.cat([state[n].to(torch.float64).flatten() for n in names])
                        for state, _ in states])
    return flat, torch.tensor([float(w) for _, w in states], dtype=torch.float64)


def _unflattened(combined: torch.Tensor, first: StateDict) -> dict[str, torch.Tensor]:
    """`combined` laid into the floating-point tensors of `first` (others copied)."""
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, reference in first.items():
        if not reference.is_floating_point():
            out[name] = reference.clone()
            continue
        size = reference.numel()
        out[name] = combined[offset:offset + size].view_as(reference).to(reference.dtype)
        offset += size
    return out


def aggregate_states(states: Sequence[tuple[StateDict, float]], rule: str = "mean",
                     trim_fraction: float = 0.2) -> dict[str, torch.Tensor]:
    """Models combined under `rule`; "mean" is `weighted_mean`, bit for bit.

    The first state is this node's own: it is the center "clipped_mean" clips towards.
    """
    if rule == "mean":
        return weighted_mean(states)
    flat, weights = _flattened(states)
    combined = robust_combine(flat, weights, rule, trim_fraction, center=flat[0])
    return _unflattened(combined, states[0][0])


def reputation_aggregate(states: Sequence[tuple[StateDict, float]], peers: Sequence[int],
                         trust: Mapping[int, float], memory: float,
                         ) -> tuple[dict[str, torch.Tensor], dict[int, float]]:
    """Self-centred clipping with each in-neighbour's weight times its trust, and the trust
    after this round (node.defences.updated_trust).

    `states` are this node's own first, then those of `peers` in order. A neighbour's score
    this round is the share of its pull the clipping keeps (node.defences.clip_scores);
    its weight is its trust relative to the most trusted in-neighbour's
    (node.defences.relative_trust). One whose model is far beyond the others' every round
    keeps little weight however long it stays, while honest neighbours that take turns
    being the farthest keep theirs.
    """
    flat, weights = _flattened(states)
    distances = (flat - flat[0]).norm(dim=1)
    scores = clip_scores(distances[1:].tolist(), clipping_radius(distances))
    trust = updated_trust(trust, dict(zip(peers, scores, strict=True)), memory)
    weights = weights * torch.tensor([1.0, *relative_trust(trust, peers)], dtype=torch.float64)
    combined = _clipped_mean(flat, weights, 0.0, flat[0])
    return _unflattened(combined, states[0][0]), trust


def weighted_mean(states: Sequence[tuple[StateDict, float]]) -> dict[str, torch.Tensor]:
    """Sample-weighted average of state dicts; integer buffers are taken from the first state."""
    if not states:
        raise ValueError("weighted_mean needs at least one state")
    total = float(sum(weight for _, weight in states))
    if total <= 0.0:
        raise ValueError("weighted_mean needs a positive total weight")
    first = states[0][0]
    averaged: dict[str, torch.Tensor] = {}
    for name, reference in first.items():
        if not reference.is_floating_point():
            averaged[name] = reference.clone()  # e.g. BatchNorm's num_batches_tracked
            continue
        acc = torch.zeros_like(reference, dtype=torch.float64)
        for state, weight in states:
            acc += state[name].to(torch.float64) * (weight / total)
        averaged[name] = acc.to(reference.dtype)
    return averaged


def local_prototypes(embeddings: torch.Tensor, labels: torch.Tensor,
                     num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class mean embedding and class counts over local data (Eq. 3).

    Returns (prototypes [C, D], counts [C]); rows of absent classes are zero with count 0.
    An embedding holding NaN or infinities (a model overflowing on that input) is left out,
    so prototypes are always finite.
    """
    finite = embeddings.isfinite().all(dim=1)
    if not bool(finite.all()):
        embeddings, labels = embeddings[finite], labels[finite]
    dim = embeddings.shape[1]
    sums = torch.zeros(num_classes, dim, dtype=torch.float64)
    sums.index_add_(0, labels, embeddings.to(torch.float64))
    counts = torch.bincount(labels, minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(torch.float64)
    return means.to(embeddings.dtype), counts


def class_totals(contributions: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Per class, the samples behind (prototypes, counts) contributions: the counts summed."""
    return torch.stack([counts.to(torch.int64) for _, counts in contributions]).sum(dim=0)


def aggregate_prototypes(contributions: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         rule: str = "mean", trim_fraction: float = 0.2,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Global prototypes: per-class mean of node prototypes weighted by class counts (Eq. 4).

    Each contribution is (prototypes [C, D], counts [C]). Eq. 4 as printed also divides by
    |N_j|, which would shrink prototypes with the number of nodes; we use the normalised
    weighted mean sum_i |D_ij| C_i^(j) / N_j instead. Another `rule` combines, per class,
    the contributions that have the class (the first, this node's own, is the clipping
    center when it has it). Returns (prototypes, known [C] bool).
    """
    if not contributions:
        raise ValueError("aggregate_prototypes needs at least one contribution")
    shape = contributions[0][0].shape
    if rule != "mean":
        means = torch.zeros(shape, dtype=torch.float64)
        known = torch.zeros(shape[0], dtype=torch.bool)
        for cls in range(shape[0]):
            having = [(p[cls].to(torch.float64), float(c[cls])) for p, c in contributions
                      if c[cls] > 0]
            if not having:
                continue
            center = having[0][0] if contributions[0][1][cls] > 0 else None
            means[cls] = robust_combine(torch.stack([p for p, _ in having]),
                                        torch.tensor([w for _, w in having], dtype=torch.float64),
                                        rule, trim_fraction, center=center)
            known[cls] = True
        return means.to(contributions[0][0].dtype), known
    sums = torch.zeros(shape, dtype=torch.float64)
    totals = torch.zeros(shape[0], dtype=torch.float64)
    for prototypes, counts in contributions:
        weights = counts.to(torch.float64)
        sums += prototypes.to(torch.float64) * weights.unsqueeze(1)
        totals += weights
    known = totals > 0
    means = sums / totals.clamp(min=1e-12).unsqueeze(1)
    means[~known] = 0.0
    return means.to(contributions[0][0].dtype), known


def nearest_prototype(embeddings: torch.Tensor, prototypes: torch.Tensor,
                      known: torch.Tensor) -> torch.Tensor:
    """argmin_j ||f_1(x) - C_bar^(j)||_2 over the classes that have a prototype (Eq. 5)."""
    distances = torch.cdist(embeddings.to(torch.float32), prototypes.to(torch.float32))
    distances[:, ~known] = float("inf")
    return distances.argmin(dim=1)
