"""What every update from a neighbour must pass before any defence looks at it: the kinds
it must hold, names, shapes, finite values and bounded counts (a ProtocolError names what
failed), and the bundle of what passed (Contributions)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from node.aggregation import state_norm
from node.algorithms.base import Payload, Refusal
from node.errors import ProtocolError

log = logging.getLogger(__name__)

# A peer's claimed sample count weighs its update; beyond any real dataset it only poisons.
MAX_SAMPLES = 2**31 - 1


# The decoded models of one round's in-neighbours are kept, read once, while together they
# fit in this many bytes: every screen and the average then read them without decoding
# again. Beyond it (large models, many neighbours), each read decodes again (ReadAs): 100
# nodes on one machine, fully connected, would otherwise each hold 99 decoded models beside
# their wire forms (41 MiB a node for the quick example's model; docs/experiments.md, the
# scale report: the wire form was kept to bring that federation's peak down).
DECODED_BUDGET = 16 * 2**20


def keeps_decoded(peers: int, model_bytes: int) -> bool:
    """Whether a node keeps `peers` decoded models of `model_bytes` each for its screens
    (they fit DECODED_BUDGET together) rather than decoding again at each read."""
    return peers * model_bytes <= DECODED_BUDGET


class ReadAs(Mapping[str, torch.Tensor]):
    """A checked model read in this node's dtype: from the tensors the checks decoded
    (within DECODED_BUDGET), or lazily, each lookup reading the received tensor (a message
    kept in its wire form decodes again), so that averaging decodes one tensor of one peer
    at a time instead of holding every neighbour's model decoded at once."""

    __slots__ = ("_dtypes", "_tensors")

    def __init__(self, tensors: Mapping[str, torch.Tensor],
                 dtypes: Mapping[str, torch.dtype]) -> None:
        self._tensors, self._dtypes = tensors, dtypes

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._tensors[name].to(self._dtypes[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._dtypes)

    def __len__(self) -> int:
        return len(self._dtypes)


def state_bytes(state: Mapping[str, torch.Tensor]) -> int:
    """The bytes a model's tensors take in memory."""
    return sum(t.numel() * t.element_size() for t in state.values())


def checked_state(reference: Mapping[str, torch.Tensor], payload: Payload,
                  keep_decoded: bool = False) -> tuple[Mapping[str, torch.Tensor], int, float]:
    """A received model's tensors, weight and norm, after checking names and shapes match
    ours and every value is finite. The tensors are the ones decoded for the checks where
    `keep_decoded`, else read lazily (ReadAs)."""
    tensors = {name: payload.tensors[name] for name in payload.tensors}  # read once for the
    # checks (a received message decodes on every read)
    if set(tensors) != set(reference):
        raise ProtocolError("model parameters differ from this node's model: "
                            f"{sorted(set(tensors) ^ set(reference))[:3]}")
    for name, ref in reference.items():
        if tuple(tensors[name].shape) != tuple(ref.shape):
            raise ProtocolError(f"parameter {name} has shape {tuple(tensors[name].shape)}, "
                                f"expected {tuple(ref.shape)}")
    norm = state_norm(tensors)
    if not math.isfinite(norm):  # one pass: a NaN or an infinity makes the norm one too
        for name, t in tensors.items():
            if t.is_floating_point() and not bool(t.isfinite().all()):
                raise ProtocolError(f"parameter {name} holds NaN or infinite values")
        raise ProtocolError("model values too large to square: its norm overflows")
    samples = payload.meta.get("samples", 0)
    if not 1 <= samples <= MAX_SAMPLES:
        raise ProtocolError(f"model weight 'samples' must be in 1..{MAX_SAMPLES}, got {samples}")
    dtypes = {name: ref.dtype for name, ref in reference.items()}
    return (ReadAs(tensors if keep_decoded else payload.tensors, dtypes), samples, norm)


def checked_class_claim(payload: Payload, samples: int, classes: int) -> list[int] | None:
    """The class counts a received model claims to be trained on ("classes" in its meta: one
    count per class, summing to its sample count), None where it claims none or this node
    has no class count to hold it to (`classes` 0)."""
    claim = payload.meta.get("classes")
    if claim is None or classes <= 0:
        return None
    if (not isinstance(claim, list) or len(claim) != classes
            or not all(type(n) is int and 0 <= n <= MAX_SAMPLES for n in claim)):
        raise ProtocolError(f"model class counts 'classes' must be {classes} counts in "
                            f"0..{MAX_SAMPLES}")
    if sum(claim) != samples:
        raise ProtocolError(f"model class counts sum to {sum(claim)}, its sample count is "
                            f"{samples}")
    return list(claim)


def checked_prototypes(payload: Payload, num_classes: int,
                       dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expand a received prototype payload to dense (prototypes [C, D], counts [C])."""
    t = dict(payload.tensors)
    if set(t) != {"prototypes", "classes", "counts"}:
        raise ProtocolError(f"prototype payload has tensors {sorted(t)}")
    protos, classes, counts = t["prototypes"], t["classes"], t["counts"]
    k = classes.shape[0] if classes.dim() == 1 else -1
    if (k < 0 or tuple(protos.shape) != (k, dim) or tuple(counts.shape) != (k,)
            or classes.dtype != torch.int64 or counts.dtype != torch.int64
            or not protos.is_floating_point()):
        raise ProtocolError(f"prototype payload shapes {tuple(protos.shape)}, "
                            f"{tuple(classes.shape)}, {tuple(counts.shape)} do not fit "
                            f"{num_classes} classes of dimension {dim}")
    if not bool(protos.isfinite().all()):
        raise ProtocolError("prototypes hold NaN or infinite values")
    if k and (int(classes.min()) < 0 or int(classes.max()) >= num_classes
              or len(set(classes.tolist())) != k or int(counts.min()) < 1
              or int(counts.max()) > MAX_SAMPLES):
        raise ProtocolError("prototype classes out of range or repeated, or counts outside "
                            f"1..{MAX_SAMPLES}")
    dense = torch.zeros(num_classes, dim, dtype=torch.float32)
    dense_counts = torch.zeros(num_classes, dtype=torch.int64)
    dense[classes] = protos.to(torch.float32)
    dense_counts[classes] = counts.to(torch.int64)
    return dense, dense_counts


def require_kind(update: Mapping[str, Payload], kind: str) -> Payload:
    """The peer's payload of `kind`, or ProtocolError when the peer did not send one."""
    if kind not in update:
        raise ProtocolError(f"no {kind!r} payload (got {sorted(update)})")
    return update[kind]


@dataclass(frozen=True)
class Contributions:
    """This node's payload and every in-neighbour's that passed the checks, own first, and
    what was refused."""

    states: list[tuple[Mapping[str, torch.Tensor], int]]
    prototypes: list[tuple[torch.Tensor, torch.Tensor]]
    refusals: list[Refusal]
    peers: list[int]  # whose states follow this node's own, in order
    # without a plan, each peer's class counts as it claimed them, before they were bounded
    # for weighing: which of its classes it is judged on is its to say, not how much it
    # counts (a liar gains nothing: it could claim only the classes it fits either way)
    claims: Mapping[int, list[int]] = field(default_factory=dict)
    # where aggregation.witnesses is on, the peers each peer's model message names as
    # refused by its sender (node.intake.witnesses)
    named: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def rejected(self) -> list[int]:
        """The peers some part of whose update was refused."""
        return sorted({refusal.peer for refusal in self.refusals})


def without_peers(update: Contributions, refused: Mapping[int, Refusal]) -> Contributions:
    """`update` less every part of the peers in `refused`, whose refusals join its own."""
    keep = [i for i, peer in enumerate(update.peers) if peer not in refused]
    return Contributions(
        states=update.states[:1] + [update.states[i + 1] for i in keep] if update.states else [],
        prototypes=(update.prototypes[:1] + [update.prototypes[i + 1] for i in keep]
                    if update.prototypes else []),
        refusals=sorted([*update.refusals, *refused.values()], key=lambda r: r.peer),
        peers=[update.peers[i] for i in keep],
        claims={p: c for p, c in update.claims.items() if p not in refused},
        named={p: n for p, n in update.named.items() if p not in refused})


def each_or_refused(updates: Mapping[int, Any], check: Callable[[int, Any], tuple],
                      node_id: int, refusals: list[Refusal],
                      rule: str = "checks", what: str = "update",
                      ) -> Iterator[tuple[int, tuple]]:
    """(peer, check(peer, update)) for each peer in order; a peer whose check raises has
    `what` refused under `rule` (nothing a peer sends may stop the round)."""
    for peer, update in sorted(updates.items()):
        try:
            yield peer, check(peer, update)
        except Exception as exc:  # noqa: BLE001 - nothing a peer sends may stop the round
            why = exc if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
            refusals.append(Refusal(peer, what, rule, str(why), judged=True))


def own_prototypes(payload: Payload, num_classes: int, dim: int,
                   node_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This node's own prototypes as a contribution: none (zero counts) when they do not
    pass the checks a peer's would, so its own broken state cannot stop the round."""
    try:
        return checked_prototypes(payload, num_classes, dim)
    except ProtocolError as exc:
        log.warning("node %d: its own prototypes left out of this round: %s", node_id, exc)
        return (torch.zeros(num_classes, dim), torch.zeros(num_classes, dtype=torch.int64))
