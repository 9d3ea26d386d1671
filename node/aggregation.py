"""Aggregation math: weighted model averages and class prototypes, pure and non-mutating."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

StateDict = Mapping[str, torch.Tensor]


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
    """
    dim = embeddings.shape[1]
    sums = torch.zeros(num_classes, dim, dtype=torch.float64)
    sums.index_add_(0, labels, embeddings.to(torch.float64))
    counts = torch.bincount(labels, minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(torch.float64)
    return means.to(embeddings.dtype), counts


def aggregate_prototypes(contributions: Sequence[tuple[torch.Tensor, torch.Tensor]]
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Global prototypes: per-class mean of node prototypes weighted by class counts (Eq. 4).

    Each contribution is (prototypes [C, D], counts [C]). Eq. 4 as printed also divides by
    |N_j|, which would shrink prototypes with the number of nodes; we use the normalised
    weighted mean sum_i |D_ij| C_i^(j) / N_j instead. Returns (prototypes, known [C] bool).
    """
    if not contributions:
        raise ValueError("aggregate_prototypes needs at least one contribution")
    shape = contributions[0][0].shape
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
