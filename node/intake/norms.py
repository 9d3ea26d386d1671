"""Norm bounds: a peer's model, or a prototype of a class, far larger than this node's own
or the median of what arrived is refused (Sun et al. 2019: a poisoned update's magnitude
cannot outgrow what honest training gives)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from node.aggregation import beyond_norm_bound, norm_reference
from node.algorithms.base import Refusal
from node.defences import below_norm_floor, class_references, floor_reference
from node.errors import ProtocolError


def models_within_bound(own_norm: float, checked: Mapping[int, tuple],
                        bound: float) -> Callable[[int, tuple], tuple]:
    """A check of one checked (state, prototypes, model norm) update: ProtocolError when
    its model's norm is beyond `bound` times the reference (`norm_reference`), else the
    (state, prototypes) pair."""
    norms = [norm for _, _, norm in checked.values() if norm is not None]
    reference = norm_reference(own_norm, norms)

    def within(peer: int, update: tuple) -> tuple:
        state, protos, norm = update
        if norm is not None:
            bounded("model", norm, reference, bound)
        return state, protos
    return within


def _row_norms(protos: tuple[torch.Tensor, torch.Tensor]) -> list[float | None]:
    """Each class's prototype norm, None for a class without a count."""
    prototypes, counts = protos
    norms = prototypes.to(torch.float64).norm(dim=1).tolist()
    return [n if int(k) > 0 else None for n, k in zip(norms, counts.tolist(), strict=True)]


def _rows_taken_out(updates: dict[int, tuple], peer_norms: dict[int, list[float | None]],
                    rule: str, reason_of: Callable[[float, int], str | None],
                    ) -> tuple[dict[int, tuple], list[Refusal]]:
    """`updates` with each class whose norm `reason_of(norm, class)` gives a reason for taken
    out (its count set to 0), and a refusal under `rule` for each class taken out."""
    refusals, out = [], dict(updates)
    for peer, norms in peer_norms.items():
        reasons = {c: why for c, n in enumerate(norms)
                   if n is not None and (why := reason_of(n, c)) is not None}
        if not reasons:
            continue
        state, (prototypes, counts) = updates[peer]
        counts = counts.clone()
        counts[list(reasons)] = 0
        out[peer] = (state, (prototypes, counts))
        refusals += [Refusal(peer, f"prototype of class {c}", rule, why)
                     for c, why in reasons.items()]
    return out, refusals


def _peer_row_norms(updates: dict[int, tuple]) -> dict[int, list[float | None]]:
    """Each peer with prototypes: its `_row_norms`."""
    return {peer: _row_norms(protos) for peer, (_, protos) in updates.items()
            if protos is not None}


def prototypes_within_class_bounds(own: tuple[torch.Tensor, torch.Tensor],
                                   updates: dict[int, tuple], bound: float,
                                   ) -> tuple[dict[int, tuple], list[Refusal]]:
    """Each peer's prototypes with every class beyond `bound` times its class's reference
    taken out (its count set to 0), and a refusal for each class taken out."""
    peer_norms = _peer_row_norms(updates)
    references = class_references(_row_norms(own), list(peer_norms.values()))
    return _rows_taken_out(
        updates, peer_norms, "norm_bound",
        lambda n, c: (f"norm {n:.4g}, more than {bound:g} times the class's reference "
                      f"{references[c]:.4g}") if beyond_norm_bound(n, references[c], bound)
        else None)


def prototypes_above_floor(own: tuple[torch.Tensor, torch.Tensor],
                           updates: dict[int, tuple], floor: float,
                           ) -> tuple[dict[int, tuple], list[Refusal]]:
    """Each peer's prototypes with every class below the floor (`floor_reference` divided
    by `floor`) taken out (its count set to 0), and a refusal for each class taken out: a
    zeroed or shrunken prototype, at the counts its sender claims, pulls the class's
    global prototype towards 0 and the embeddings ProFe trains towards it."""
    peer_norms = _peer_row_norms(updates)
    reference = floor_reference(_row_norms(own), list(peer_norms.values()))
    return _rows_taken_out(
        updates, peer_norms, "norm_floor",
        lambda n, _c: (f"norm {n:.4g}, less than the reference {reference:.4g} over "
                       f"{floor:g}") if below_norm_floor(n, reference, floor) else None)


def prototypes_within_norms(own: tuple[torch.Tensor, torch.Tensor],
                            updates: dict[int, tuple], bound: float, floor: float,
                            ) -> tuple[dict[int, tuple], list[Refusal]]:
    """`prototypes_above_floor` (with a `floor`), then `prototypes_within_class_bounds` on
    what is left (with a `bound`): the bound's references without the floored rows."""
    refusals: list[Refusal] = []
    if floor > 0:
        updates, refused = prototypes_above_floor(own, updates, floor)
        refusals += refused
    if bound > 0:
        updates, refused = prototypes_within_class_bounds(own, updates, bound)
        refusals += refused
    return updates, refusals


def bounded(what: str, norm: float, reference: float, bound: float) -> None:
    """ProtocolError when a peer's `norm` is beyond `bound` times the `reference`."""
    if beyond_norm_bound(norm, reference, bound):
        raise ProtocolError(f"its {what} has norm {norm:.4g}, more than {bound:g} times "
                            f"the reference {reference:.4g}")
