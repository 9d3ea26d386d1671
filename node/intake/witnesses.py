"""What the other in-neighbours saw: each model message names the peers whose model its
sender refused, on its own judgement, in each of its last two rounds, and a peer that at
least aggregation.witnesses of this node's other in-neighbours name is refused this round.

Only the nodes holding a peer's real classes can see a label flip: its model claims the
classes it relabels to, and the rest hold neither and find it as ordinary as an honest
model of two classes. Its holders refuse it round after round (its labels never change);
their word carries what they see to the others. A single refusal is not passed on: early
in training, and on a class confusable with another, honest neighbours fail a screen one
round and pass the next, and on others' word such a refusal would cost the whole
federation that neighbour (on 20% of the classes, fully connected, seed 1, naming every
refusal cost a clean run 9.6 points of F1; naming only the refusals beyond the screens'
absolute margins let the label flip back in from round 3, seed 2). What is named is the node's own judgement
(`Refusal.judged`): never a model held out unjudged, nor one refused on others' word,
which would outlive its witnesses. This screen runs after every other, so a node's own
judgement of a peer comes first. A node can name anyone: one liar among the witnesses
needs an honest one beside it, so set the quorum above the number of attackers to bear."""

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


def repeated(judged: set[int], judged_before: set[int]) -> list[int]:
    """What a node's next model message names: the peers it refused on its own judgement
    in this round (`judged`) and in the one before."""
    return sorted(judged & judged_before)


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
    """The in-neighbours at least aggregation.witnesses of the others name as refused in
    their last round (`node.defences.witnessed`)."""
    quorum = algorithm.config.aggregation.witnesses
    return {peer: Refusal(peer, "model and prototypes", RULE,
                          f"{len(accusers)} of this node's in-neighbours (nodes "
                          f"{', '.join(map(str, accusers))}) refused its model in their last "
                          f"round (at least {quorum})")
            for peer, accusers in witnessed(update.named, update.peers, quorum).items()}
