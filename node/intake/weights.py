"""The weight a peer's update carries: what the federation's data plan gives it, or, for a
node without the plan (aggregation.use_plan = false, or nodes that own their data), what it
claims, bounded (node.defences.bounded_claims)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch

from node.algorithms.base import DataPlan
from node.defences import CLAIM_FACTOR, bounded_claims, bounded_class_claims
from node.errors import ProtocolError

log = logging.getLogger(__name__)


def planned(peer: int, state: tuple | None, protos: tuple | None, plan: DataPlan | None,
            node_id: int) -> tuple:
    """A checked update with the weights the data plan gives `peer` in place of its claims
    (unchanged without a plan); ProtocolError for a peer the plan does not know."""
    if plan is None:
        return state, protos
    planned_counts = plan.counts_of(peer)
    if planned_counts is None:
        raise ProtocolError(f"peer {peer} is not one of the federation's "
                            f"{len(plan.samples)} nodes")
    if state is not None:
        if state[1] != plan.samples[peer]:
            log.info("node %d: peer %d claims %d samples, the data plan gives it %d: the "
                     "plan's count is used", node_id, peer, state[1], plan.samples[peer])
        state = (state[0], plan.samples[peer])
    if protos is not None:
        prototypes, counts = protos
        if not torch.equal(counts, planned_counts.to(counts.dtype)):
            log.info("node %d: peer %d's class counts differ from the data plan's: the "
                     "plan's are used", node_id, peer)
        # a class the plan does not give the peer carries no weight (and no row)
        protos = (prototypes, torch.where(counts > 0, planned_counts.to(counts.dtype), 0))
    return state, protos


def claimed(own_samples: int | None, own_counts: torch.Tensor | None,
            checked: Mapping[int, tuple], cap: float = CLAIM_FACTOR) -> dict[int, tuple]:
    """Checked (state, prototypes, norm) updates with each claimed sample count and class
    count bounded at `cap` times the median of the others' claims and this node's own
    (without a plan, what a peer says it holds is all there is to weigh it by)."""
    peers = sorted(checked)
    out = {peer: list(checked[peer]) for peer in peers}
    with_states = [p for p in peers if checked[p][0] is not None]
    if own_samples is not None and with_states:
        capped = bounded_claims(float(own_samples),
                                [float(checked[p][0][1]) for p in with_states], cap)
        for peer, weight in zip(with_states, capped, strict=True):
            out[peer][0] = (checked[peer][0][0], int(weight))
    with_protos = [p for p in peers if checked[p][1] is not None]
    if own_counts is not None and with_protos:
        rows = bounded_class_claims(own_counts.tolist(),
                                    [checked[p][1][1].tolist() for p in with_protos], cap)
        for peer, row in zip(with_protos, rows, strict=True):
            prototypes, counts = checked[peer][1]
            out[peer][1] = (prototypes, torch.tensor(row, dtype=counts.dtype))
    return {peer: tuple(update) for peer, update in out.items()}
