"""What the other in-neighbours saw: each model message names the peers whose model its
sender refused, on its own judgement, in two rounds close enough together
(aggregation.witness_memory: by default its last two rounds), and a peer that at least
aggregation.witnesses of this node's other in-neighbours name is refused this round.

Only the nodes holding a peer's real classes can see a label flip: its model claims the
classes it relabels to, and the rest hold neither and find it as ordinary as an honest
model of two classes. Its holders refuse it round after round (its labels never change);
their word carries what they see to the others. A single refusal is not passed on: early
in training, and on a class confusable with another, honest neighbours fail a screen one
round and pass the next, and on others' word such a refusal would cost the whole
federation that neighbour (on 20% of the classes, fully connected, seed 1, naming every
refusal cost a clean run 9.6 points of F1; naming only the refusals beyond the screens'
absolute margins let the label flip back in from round 3, seed 2). What is named is the
node's own judgement (`Refusal.judged`): never a model held out unjudged, nor one refused
on others' word, which would outlive its witnesses. This screen runs after every other,
so a node's own judgement of a peer comes first. A node can name anyone: one liar among
the witnesses needs an honest one beside it, so set the quorum above the number of
attackers to bear."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from torch import nn

from node.algorithms.base import Algorithm, Payload, Refusal
from node.defences import witnessed
from node.errors import ProtocolError
from node.intake.checks import Contributions

RULE = "witnessed"
META = "refused"  # the model message's list of the peers it names


def judged_refused(refusals: Iterable[Refusal]) -> set[int]:
    """The peers whose model a round's `refusals` refused on this node's own judgement."""
    return {r.peer for r in refusals if r.judged}


# A node names a peer once its remembered refusals of it (`suspicion`) reach this: two
# refusals' worth.
NAMED_AT = 1.5
FORGOTTEN = 1e-3  # a suspicion below this is dropped: what is remembered stays bounded


def suspicion(before: Mapping[int, float], judged: set[int],
              memory: float) -> dict[int, float]:
    """Each peer's remembered refusals after a round: `memory` times its suspicion
    `before`, plus one where this round refused it on this node's own judgement (`judged`).
    At memory 0.5 it reaches NAMED_AT only when refused this round and the one before
    (1 + 0.5; a streak broken by one round stays below 1 + 0.25 + 0.125 + ... < 1.5); at 0.9,
    two refusals up to six rounds apart reach it (1 + 0.9^6 = 1.53)."""
    out = {peer: memory * value for peer, value in before.items()}
    for peer in judged:
        out[peer] = out.get(peer, 0.0) + 1.0
    return {peer: value for peer, value in out.items() if value >= FORGOTTEN}


def named(suspicions: Mapping[int, float]) -> list[int]:
    """The peers a node's next model message names: suspicion at NAMED_AT or more."""
    return sorted(peer for peer, value in suspicions.items() if value >= NAMED_AT)


def after_round(before: Mapping[int, float], judged: set[int],
                memory: float) -> tuple[dict[int, float], list[int]]:
    """A node's suspicion after a round (`suspicion`) and the peers it names for it."""
    remembered = suspicion(before, judged, memory)
    return remembered, named(remembered)


def naming(payloads: Mapping[str, Payload], refused: Iterable[int]) -> dict[str, Payload]:
    """`payloads` with the model's meta naming `refused` (no model: unchanged)."""
    if "model" not in payloads:
        return dict(payloads)
    model = payloads["model"]
    return {**payloads, "model": Payload(model.tensors, {**model.meta, META: sorted(refused)})}


def checked_names(payload: Payload) -> frozenset[int]:
    """The peers a received model message names as refused (none where it names none):
    distinct node ids."""
    named = payload.meta.get(META, [])
    if (not isinstance(named, list) or not all(type(n) is int and n >= 0 for n in named)
            or len(set(named)) != len(named)):
        raise ProtocolError(f"model meta {META!r} must be distinct node ids")
    return frozenset(named)


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours that at least aggregation.witnesses of the others name as refused
    (`node.defences.witnessed`)."""
    quorum = algorithm.config.aggregation.witnesses
    return {peer: Refusal(peer, "model and prototypes", RULE,
                          f"{len(accusers)} of this node's in-neighbours (nodes "
                          f"{', '.join(map(str, accusers))}) name its model as refused on "
                          f"their own judgement, repeatedly (at least {quorum})")
            for peer, accusers in witnessed(update.named, update.peers, quorum).items()}
