"""What a node holding a stolen key can send: the attack library of the robustness report.

An attack makes an algorithm class into its attacker (`attacker_class`): it trains and
aggregates like an honest node, so it keeps an honest model and sees what its in-neighbours
send, and it lies in what it sends. Its messages pass every check a node makes of a
neighbour's messages (it holds a real key); what it sends is what the attack says:

- model attacks, each with about the norm of an honest model (made to pass the norm bound):
  sign_flip (its model negated), ipm (its update reversed: Xie et al. 2020's inner product
  manipulation with epsilon 1), alie (its model minus one coordinate-wise standard deviation
  of the models it received: "a little is enough", Baruch et al. 2019), gaussian (a random
  model with its model's norm), adaptive (its update reversed as far as the aggregation
  rule's settings let it through: the norm bound, the clipping radius estimated on what
  the attacker sees (so that clipping cuts nothing and trust never falls) and validation,
  its loss on its own classes, on its own data, kept just inside the ratio);
  class_erasure (knows validation, which measures a model on its sender's classes: its
  honest model with the classifier's bias lowered for the classes it holds least, so that
  receivers' averages stop predicting them, as far as the norm bound, the clipping radius
  and its own loss under validation let it); erasure_lie (class_erasure whose model
  claims none of the classes it erases, so that receivers validate it only on the classes
  it leaves intact: a class list that lies, where nodes take claims, aggregation.use_plan
  = false);
- made for receivers that share no class with the sender (validation measures a model on
  its sender's classes only): class_shift (its honest model with the classifier lifted on
  the classes it holds, the bias and each row along its embeddings' mean, so every input
  reads as one of its classes, as far as every limit lets it: the norm bound, the distance
  screen's per-layer bound estimated from what it received, validation, and the influence
  screen's bound estimated on its own data and global prototypes), targeted_flip (its model
  negated, sent only to the receivers that share none of its classes; the others get its
  honest model), shift_and_lie (class_shift claiming LIE times its samples and class
  counts: a lie that counts where nodes weigh claims, aggregation.use_plan = false),
  mates_shift (class_shift that knows aggregation.held_mates: for each receiver, the
  largest shift whose held-class score, as it estimates it with the receiver's last model
  and the global prototypes of the receiver's claimed classes, stays inside the bar, or
  within MATE_FACTOR times its class-mates' lower median score where that is above the
  bar; each receiver gets its own model);
- data attacks: label_flip (trains on labels c -> C-1-c, so its model and prototypes lie
  together), body_flip (label_flip sending, on its flipped body, the mean classifier of the
  models it received last round (its start's in round 1) fitted to the global prototypes
  it knows, each to its own class: knows the prototype screens, which measure a peer's
  classifier on the global prototypes, where that fits better than a receiver's own start;
  the flip lives in the embedding, which only a holder of the classes can measure),
  flip_every_other (label_flip in odd rounds, honest in even ones: knows
  aggregation.witnesses, which at the least witness_memory names a peer refused two
  rounds running), free_rider
  (never trains; sends its first model every round);
- prototype attacks, counts honest: proto_flip (each prototype negated), proto_swap (each
  class sent the prototype of the next class it has);
- norm-bound probes: protozero (zero prototypes at the largest counts), protosmall
  (protozero that knows aggregation.norm_floor: each row its prototypes' mean direction, just
  above the floor its own prototypes estimate; zeros where there is no floor), scaled_model
  (model times 10), bounded_poison (every value 1e4, every count 2^31-1);
- accuser: an honest model whose message names every other node as refused
  (aggregation.witnesses: beside one honest witness it makes a quorum of two against
  anyone);
- withheld: not an attack but its ceiling, every update refused at the door.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from node.aggregation import clipping_radius
from node.algorithms.base import Algorithm, Payload
from node.defences import (
    LOSS_FLOOR,
    SPREAD_QUORUM,
    class_excess_scores,
    class_weighted_mean,
    loss_to_beat,
    mates_cover,
    required_factor,
    spread_bar,
)
from node.intake import MAX_SAMPLES
from node.intake.distance import layer_distances
from node.intake.samples import loss_per_class

POISON = 1e4  # bounded_poison's value: within every bound a message is checked against
SCALE = 10.0  # scaled_model's boost
ALIE_Z = 1.0  # alie's standard deviations
IPM_EPSILON = 1.0  # ipm: the update reversed at its own length
ADAPTIVE_STEPS = (8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.125, 0.0)  # reversal lengths, longest first
EDGE = 0.95  # the adaptive attacker stays this fraction inside the radius it estimates
HEAD_FIT_STEPS, HEAD_FIT_RATE = 20, 0.05  # body_flip's gradient steps on the prototypes

ERASURE_SHIFTS = (64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0)  # class_erasure's bias shifts
SHIFTS = (64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25)  # class_shift's bias shifts
LIE = 100  # shift_and_lie claims this many times its samples and class counts
MODEL_ATTACKS = ("sign_flip", "ipm", "alie", "gaussian", "adaptive", "class_erasure",
                 "class_shift", "targeted_flip", "shift_and_lie", "erasure_lie", "mates_shift",
                 "body_flip")
PROTOTYPE_ATTACKS = ("proto_flip", "proto_swap")
PROBES = ("protozero", "protosmall", "scaled_model", "bounded_poison")
FLOOR_EDGE = 1.05  # protosmall's rows this many times the floor it estimates
ATTACKS = ("none", "withheld", *MODEL_ATTACKS, "label_flip", "flip_every_other",
           "free_rider", *PROTOTYPE_ATTACKS, *PROBES, "accuser")


def flat(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """A state's floating-point tensors as one float64 vector, in the state's order."""
    return torch.cat([t.detach().to(torch.float64).flatten() for t in state.values()
                      if t.is_floating_point()])


def unflat(vector: torch.Tensor, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`vector` laid back into the floating-point tensors of `like` (others kept)."""
    out, offset = {}, 0
    for name, tensor in like.items():
        if tensor.is_floating_point():
            out[name] = vector[offset:offset + tensor.numel()].view_as(tensor).to(tensor.dtype)
            offset += tensor.numel()
        else:
            out[name] = tensor
    return out


def with_head(trained: torch.Tensor, head: torch.Tensor, like: Mapping[str, torch.Tensor],
              prefix: str = "classifier.") -> torch.Tensor:
    """`trained` (flat, as `like`'s state) with the entries of the tensors under `prefix`
    taken from `head` (flat alike)."""
    mask = flat({name: torch.full_like(t, float(name.startswith(prefix)))
                 for name, t in like.items()}).bool()
    return torch.where(mask, head, trained)


def fitted_head(head: nn.Module, tensors: Mapping[str, torch.Tensor], prototypes: torch.Tensor,
                known: torch.Tensor, steps: int = HEAD_FIT_STEPS,
                rate: float = HEAD_FIT_RATE) -> dict[str, torch.Tensor]:
    """`head` computing with `tensors`, moved by `steps` of gradient descent on its
    cross-entropy over each known prototype labelled with its class."""
    params = {name: t.detach().clone().float().requires_grad_(True)
              for name, t in tensors.items()}
    device = next(iter(params.values())).device
    known = known.to(device)
    inputs = prototypes.to(device)[known].detach().float()
    labels = torch.arange(len(known), device=device)[known]
    optimizer = torch.optim.SGD(list(params.values()), lr=rate)
    for _ in range(steps):
        optimizer.zero_grad()
        logits = torch.func.functional_call(head, params, (inputs,))
        nn.functional.cross_entropy(logits, labels).backward()
        optimizer.step()
    return {name: p.detach().to(tensors[name].dtype) for name, p in params.items()}


def body_flipped(algorithm: Algorithm, start: torch.Tensor, trained: torch.Tensor,
                 seen: Sequence[torch.Tensor]) -> torch.Tensor:
    """body_flip's model: `trained` (its flipped body) with the classifier of the mean of
    the models received (the start's before any) fitted to the global prototypes the
    attacker knows; `trained` itself for a model without a classifier."""
    from node.intake.influence import head_prefix, head_state, root_prototypes

    model = shared_model(algorithm)
    prefix = head_prefix(model)
    if prefix is None:
        return trained
    like = model.state_dict()
    state = unflat(torch.stack(list(seen)).mean(dim=0) if seen else start, like)
    prototypes, known = root_prototypes(algorithm)
    if prototypes is not None and known is not None and bool(known.any()):
        fitted = fitted_head(model.classifier, head_state(state, prefix), prototypes, known)
        state = {**state, **{prefix + name: t for name, t in fitted.items()}}
    return with_head(trained, flat(state), like, prefix)


def reversed_update(start: torch.Tensor, trained: torch.Tensor, length: float) -> torch.Tensor:
    """The model `length` times the local update away from `start`, backwards."""
    return start - length * (trained - start)


def alie(trained: torch.Tensor, seen: Sequence[torch.Tensor], z: float = ALIE_Z) -> torch.Tensor:
    """`trained` minus z coordinate-wise standard deviations of the models seen (itself
    included); `trained` itself before it has seen any."""
    if not seen:
        return trained.clone()
    return trained - z * torch.stack([trained, *seen]).std(dim=0)


def gaussian(trained: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A standard normal vector scaled to the norm of `trained`."""
    noise = torch.randn(trained.shape, generator=generator, dtype=torch.float64)
    return noise * (trained.norm() / noise.norm().clamp(min=1e-30))


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the adaptive attacker estimates the receivers accept (None: no such limit)."""

    norm: float | None  # the largest norm the norm bound lets through
    distance: float | None  # the clipping radius: farther is clipped to it (and distrusted)
    loss: float | None = None  # the largest loss on its classes validation accepts
    influence: float | None = None  # the largest influence score the influence screen accepts
    layers: Mapping[str, float] | None = None  # per layer, how far from its model it may go
    like: Mapping[str, torch.Tensor] | None = None  # the state a flat model lays into


def first_inside(candidates: Iterable[torch.Tensor], trained: torch.Tensor, limits: Limits,
                 loss: Callable[[torch.Tensor], float] | None = None,
                 influence: Callable[[torch.Tensor], float] | None = None) -> torch.Tensor:
    """The first candidate inside every limit (`loss` scores a model on the attacker's own
    classes, `influence` estimates the influence screen's score); the trained model itself
    when none is."""
    for sent in candidates:
        if limits.norm is not None and float(sent.norm()) > limits.norm:
            continue
        if limits.distance is not None and float((sent - trained).norm()) > limits.distance:
            continue
        if limits.layers is not None and limits.like is not None and any(
                gap > limits.layers.get(layer, math.inf) for layer, gap in
                layer_distances(unflat(trained, limits.like), unflat(sent, limits.like)).items()):
            continue
        if limits.loss is not None and loss is not None and loss(sent) > limits.loss:
            continue
        if (limits.influence is not None and influence is not None
                and influence(sent) > limits.influence):
            continue
        return sent
    return trained.clone()


def adaptive(start: torch.Tensor, trained: torch.Tensor, limits: Limits,
             loss: Callable[[torch.Tensor], float] | None = None) -> torch.Tensor:
    """The longest reversal of the local update (ADAPTIVE_STEPS) that stays inside every
    limit; the trained model itself when none does."""
    return first_inside((reversed_update(start, trained, length) for length in ADAPTIVE_STEPS),
                        trained, limits, loss)


def estimated_limits(algorithm: Algorithm, trained: torch.Tensor,
                     previous: torch.Tensor | None, seen: Sequence[torch.Tensor]) -> Limits:
    """The receivers' limits as the attacker reads them from the aggregation settings and
    estimates them from its own models and last round's received ones: half the norm bound
    against its own norm; the clipping radius as the upper median distance (its own zero
    among them) between its model and those it received; under the distance screen, how far
    from its honest model it may go in each layer so that a receiver as far from that model
    as the median in-neighbour (d, in that layer) still finds it within the bound k x d
    (sqrt(k^2 - 1) x d, the change orthogonal to the gap); the influence screens' bound,
    just inside (the held-class screen's floor where that screen is on)."""
    settings = algorithm.config.aggregation
    # half the bound: a receiver bounds against its own norm, which may be smaller
    norm = settings.norm_bound / 2 * float(trained.norm()) if settings.norm_bound else None
    known = bool(seen) and previous is not None
    gaps = torch.stack([torch.zeros(()), *((m - previous).norm() for m in seen)]) if known \
        else None
    clips = settings.rule in ("clipped_mean", "reputation") and known
    distance = EDGE * clipping_radius(gaps) if clips else None
    layers = None
    like = shared_model(algorithm).state_dict()
    if getattr(settings, "distance", 0) > 0 and known:
        apart = [layer_distances(unflat(previous, like), unflat(m, like)) for m in seen]
        layers = {layer: EDGE * (settings.distance ** 2 - 1) ** 0.5
                  * statistics.median([0.0, *(row[layer] for row in apart)])
                  for layer in apart[0]}
    bars = [settings.influence] if getattr(settings, "influence", 0) > 0 else []
    if getattr(settings, "held_influence", 0) > 0:
        # the receivers' own classes are judged against the others' spread, which it
        # cannot see: what always passes is the bar's floor (its proxy for a receiver's
        # classes: the global prototypes of the classes it lacks); where its own in-degree
        # says the receivers have too few in-neighbours for a spread (a ring), the margin
        few = len(seen) < SPREAD_QUORUM
        bars.append(settings.held_influence if few else min(settings.held_influence,
                                                            settings.held_floor))
    influence = EDGE * min(bars) if bars else None
    return Limits(norm, distance, influence=influence, layers=layers, like=like)


def erased(trained: torch.Tensor, like: Mapping[str, torch.Tensor], classes: Sequence[int],
           shift: float) -> torch.Tensor:
    """`trained` with the classifier's bias of `classes` lowered by `shift`."""
    state = unflat(trained, like)
    bias = state["classifier.bias"].clone()
    bias[list(classes)] -= shift
    return flat({**state, "classifier.bias": bias})


def lowered_classes(sent_bias: torch.Tensor, honest_bias: torch.Tensor) -> list[int]:
    """The classes whose classifier bias the sent model lowered from the honest one."""
    return [c for c, (sent, honest) in enumerate(zip(sent_bias.tolist(), honest_bias.tolist(),
                                                     strict=True)) if sent < honest]


def claim_without(counts: Sequence[int], hidden: Sequence[int]) -> list[int]:
    """Class counts that claim none of the `hidden` classes and still add up to the sample
    count (their samples claimed as the largest other class's), so the claim passes every
    check; the honest counts when every class held would be hidden."""
    kept = [c for c, n in enumerate(counts) if n > 0 and c not in hidden]
    if not kept:
        return list(counts)
    claim = [0 if c in hidden else n for c, n in enumerate(counts)]
    claim[max(kept, key=lambda c: counts[c])] += sum(counts) - sum(claim)
    return claim


def erasure_candidates(counts: Sequence[int]) -> list[tuple[tuple[int, ...], float]]:
    """(classes, shift) pairs, most damage (classes x shift) first: the classes held
    least, up to half of them."""
    least = sorted(range(len(counts)), key=lambda c: (counts[c], c))
    pairs = [(tuple(least[:m]), shift) for m in range(1, len(counts) // 2 + 1)
             for shift in ERASURE_SHIFTS]
    return sorted(pairs, key=lambda pair: -len(pair[0]) * pair[1])


def class_erasure(trained: torch.Tensor, like: Mapping[str, torch.Tensor],
                  counts: Sequence[int], limits: Limits,
                  loss: Callable[[torch.Tensor], float] | None) -> torch.Tensor:
    """The most damaging erasure (`erasure_candidates`) inside every limit; the trained
    model itself when none is."""
    return first_inside((erased(trained, like, classes, shift)
                         for classes, shift in erasure_candidates(counts)),
                        trained, limits, loss)


def shifted(trained: torch.Tensor, like: Mapping[str, torch.Tensor], counts: Sequence[int],
            shift: float, direction: torch.Tensor | None = None) -> torch.Tensor:
    """`trained` with the classifier raised on the classes the sender holds: the bias by
    `shift`, and each of their weight rows by `shift` along `direction` (the unit mean of
    its embeddings), which lifts their logit by about `shift` x the embedding's length on
    every input. They fit better than in an honest model, and every other class is pushed
    down in whoever averages it."""
    state = unflat(trained, like)
    held = [c for c, n in enumerate(counts) if n > 0]
    bias = state["classifier.bias"].clone()
    bias[held] += shift
    weight = state["classifier.weight"].clone()
    if direction is not None:
        weight[held] += shift * direction.to(weight.dtype)
    return flat({**state, "classifier.bias": bias, "classifier.weight": weight})


def mean_direction(algorithm: Algorithm) -> torch.Tensor | None:
    """The unit mean of the attacker's local prototypes (its embeddings' mean direction),
    None without prototypes."""
    prototypes = getattr(algorithm, "local_prototypes", None)
    counts = getattr(algorithm, "local_counts", None)
    if prototypes is None or counts is None or not bool((counts > 0).any()):
        return None
    mean = prototypes[counts > 0].to(torch.float64).mean(dim=0)
    return mean / mean.norm().clamp(min=1e-12)


def class_shift(trained: torch.Tensor, like: Mapping[str, torch.Tensor], counts: Sequence[int],
                limits: Limits, loss: Callable[[torch.Tensor], float] | None,
                influence: Callable[[torch.Tensor], float] | None = None,
                direction: torch.Tensor | None = None) -> torch.Tensor:
    """The largest shift (SHIFTS) inside every limit; the trained model itself when none is."""
    return first_inside((shifted(trained, like, counts, shift, direction) for shift in SHIFTS),
                        trained, limits, loss, influence)


def own_influence(algorithm: Algorithm, trained: torch.Tensor) -> Callable[[torch.Tensor], float]:
    """What the influence screen would score a model at, as the attacker estimates it from
    where it stands: its honest model in a receiver's place, mixed half and half with the
    model, measured on the global prototypes it knows of the classes it lacks, against a
    median in-neighbour that changes nothing."""
    from node.intake.influence import class_losses, root_prototypes

    scratch = copy.deepcopy(shared_model(algorithm))
    like = scratch.state_dict()
    data = algorithm.data
    prototypes, known = root_prototypes(algorithm)

    def losses(vector: torch.Tensor) -> list[float | None]:
        scratch.load_state_dict(unflat(vector, like))
        return class_losses(scratch, data.train_y, data.num_classes, prototypes, known)
    base = losses(trained)

    def score(vector: torch.Tensor) -> float:
        mixed = losses(trained + 0.5 * (vector - trained))
        over = [a - b for a, b in zip(mixed, base, strict=True) if a is not None and b is not None]
        return max(over, default=0.0)
    return score


def own_class_loss(algorithm: Algorithm) -> Callable[[torch.Tensor], float]:
    """A model's (flat) loss on the attacker's own training data, its classes weighed by
    their counts: what validating receivers measure on theirs."""
    scratch = copy.deepcopy(shared_model(algorithm))
    data = algorithm.data
    like = scratch.state_dict()

    def score(vector: torch.Tensor) -> float:
        scratch.load_state_dict(unflat(vector, like))
        sums, total = loss_per_class(scratch, data.train_x, data.train_y, data.num_classes,
                                     algorithm.config.train.eval_batch_size)
        return class_weighted_mean(sums, total, [float(n) for n in total]) or 0.0
    return score


def excess_row(losses: Callable[[torch.Tensor], list[float | None]], receiver: torch.Tensor,
               base: Sequence[float | None], model: torch.Tensor, classes: set[int],
               share: float = 0.5) -> list[float | None]:
    """Per class in `classes`, the loss (`losses`) of `receiver` mixed with `model` at
    `share` minus `base` (the receiver's own); None for every other class."""
    mixed = losses(receiver + share * (model - receiver))
    return [None if c not in classes or a is None or b is None else a - b
            for c, (a, b) in enumerate(zip(mixed, base, strict=True))]


def mates_bar(scores: Sequence[float | None], mates: Sequence[int], margin: float,
              floor: float) -> float:
    """The highest held-class score a receiver keeps under aggregation.held_mates: the
    spread bar (`node.defences.spread_bar`), or where higher the cover of the scored
    `mates` (indices into `scores`; `node.defences.mates_cover`, as `shared_with_mates`
    applies it)."""
    bar = spread_bar(scores, margin, floor)
    cover = mates_cover([scores[i] for i in mates if scores[i] is not None], bar)
    return bar if cover is None else max(bar, cover)


@dataclasses.dataclass(frozen=True)
class StandIn:
    """A receiver as the attacker knows it: the model it sent last round and its claimed
    classes."""

    model: torch.Tensor
    classes: frozenset[int]


def mates_shifts(losses: Callable[[torch.Tensor], list[float | None]],
                 candidates: Sequence[torch.Tensor], own: frozenset[int],
                 stand_ins: Mapping[int, StandIn], margin: float, influence: float,
                 floor: float) -> dict[int, torch.Tensor | None]:
    """Per receiver, the first of `candidates` (largest shift first) whose estimated scores
    pass at that receiver: on its claimed classes, under `mates_bar` among the others'
    scores (its class-mates: those claiming one of `own`); on the classes it lacks, within
    the influence screen's `influence` of the others (0: no such screen); None where none
    does. `margin` and `floor`: the receivers' held_influence and held_floor."""
    chosen: dict[int, torch.Tensor | None] = {}
    for receiver, stand_in in stand_ins.items():
        others = [s for peer, s in stand_ins.items() if peer != receiver]
        mates = [i for i, s in enumerate(others) if s.classes & own]
        base = losses(stand_in.model)
        lacked = frozenset(range(len(base))) - stand_in.classes
        rows = {kind: [excess_row(losses, stand_in.model, base, s.model, classes)
                       for s in others]
                for kind, classes in (("held", stand_in.classes), ("lacked", lacked))}
        chosen[receiver] = None
        for sent in candidates:
            held = class_excess_scores([*rows["held"], excess_row(
                losses, stand_in.model, base, sent, stand_in.classes)])
            if held[-1] is not None and held[-1] > EDGE * mates_bar(held, mates, margin,
                                                                     floor):
                continue
            if influence > 0:
                lack = class_excess_scores([*rows["lacked"], excess_row(
                    losses, stand_in.model, base, sent, lacked)])
                if lack[-1] is not None and lack[-1] > EDGE * influence:
                    continue
            chosen[receiver] = sent
            break
    return chosen


def prototype_loss_of(algorithm: Algorithm) -> Callable[[torch.Tensor], list[float | None]]:
    """A (flat) model's classifier loss on each global prototype the attacker knows."""
    from node.intake.influence import head_prefix, head_state, prototype_losses

    model = shared_model(algorithm)
    like, prefix = model.state_dict(), head_prefix(model)
    prototypes, known = getattr(algorithm, "global_prototypes", None), getattr(
        algorithm, "known", None)

    def losses(vector: torch.Tensor) -> list[float | None]:
        if prefix is None:
            return []
        return prototype_losses(model, prototypes, known,
                                head_state(unflat(vector, like), prefix))
    return losses


def shared_model(algorithm: Algorithm) -> nn.Module:
    """The model an algorithm sends (ProFe's student, FedAvg's model)."""
    return getattr(algorithm, "shared_model", None) or algorithm.model


def model_attacker(base: type[Algorithm], attack: str) -> type[Algorithm]:
    """`base` sending, in place of its model, what the model attack `attack` makes of it."""

    class ModelAttacker(base):  # type: ignore[misc, valid-type]
        poison: torch.Tensor | None = None
        seen: tuple[torch.Tensor, ...] = ()
        previous: torch.Tensor | None = None
        stand_ins: dict[int, StandIn] = {}  # noqa: RUF012 - replaced, never mutated
        addressed_poisons: dict[int, torch.Tensor] = {}  # noqa: RUF012 - replaced too

        def train_round(self, round_: int) -> dict[str, float]:
            model = shared_model(self)
            start = flat(model.state_dict())
            stats = super().train_round(round_)
            trained = flat(model.state_dict())
            self.poison = self.craft(round_, start, trained)
            return stats

        def craft(self, round_: int, start: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
            if attack in ("sign_flip", "targeted_flip"):
                return -trained
            if attack == "body_flip":
                return body_flipped(self, start, trained, self.seen)
            if attack == "ipm":
                return reversed_update(start, trained, IPM_EPSILON)
            if attack == "alie":
                return alie(trained, self.seen)
            if attack == "gaussian":
                return gaussian(trained, torch.Generator().manual_seed(
                    self.config.seed * 1_009 + self.node_id * 101 + round_))
            limits = estimated_limits(self, trained, self.previous, self.seen)
            share = self.config.aggregation.validation
            loss = own_class_loss(self) if share > 0 else None
            if loss is not None:
                # just inside: receivers measure on their samples, which may fit it worse
                beat = loss_to_beat(loss(start), self.data.num_classes)
                factor = required_factor(loss(trained), beat, share)
                limits = dataclasses.replace(limits, loss=EDGE * max(factor * beat, LOSS_FLOOR))
            counts = torch.bincount(self.data.train_y.cpu(),
                                    minlength=self.data.num_classes).tolist()
            if attack in ("class_erasure", "erasure_lie"):
                return class_erasure(trained, shared_model(self).state_dict(), counts, limits,
                                     loss)
            if attack in ("class_shift", "shift_and_lie", "mates_shift"):
                judge = own_influence(self, trained) if limits.influence else None
                poison = class_shift(trained, shared_model(self).state_dict(), counts,
                                     limits, loss, judge, mean_direction(self))
                if attack == "mates_shift":
                    self.addressed_poisons = self.per_receiver(trained, counts, limits, loss)
                return poison
            return adaptive(start, trained, limits, loss)

        def per_receiver(self, trained, counts, limits, loss) -> dict[int, torch.Tensor]:
            """mates_shift: each receiver known from last round gets the largest shift
            inside the limits it estimates there (class_shift's model elsewhere)."""
            settings = self.config.aggregation
            if not self.stand_ins or settings.held_influence <= 0:
                return {}
            like = shared_model(self).state_dict()
            direction = mean_direction(self)
            outside = dataclasses.replace(limits, influence=None)
            candidates = [sent for sent in (shifted(trained, like, counts, shift, direction)
                                            for shift in SHIFTS)
                          if first_inside([sent], trained, outside, loss) is sent]
            own = frozenset(c for c, n in enumerate(counts) if n > 0)
            chosen = mates_shifts(prototype_loss_of(self), [*candidates, trained], own,
                                  self.stand_ins, settings.held_influence,
                                  getattr(settings, "influence", 0.0), settings.held_floor)
            # where nothing passes, what is likeliest kept: its honest model
            return {peer: trained if sent is None else sent for peer, sent in chosen.items()}

        def payload(self) -> dict[str, Payload]:
            out = super().payload()
            if attack == "shift_and_lie":
                out = inflated(out)
            if "model" in out and self.poison is not None and attack != "targeted_flip":
                model = out["model"]
                sent = unflat(self.poison, model.tensors)
                meta = dict(model.meta)
                if attack == "erasure_lie" and "classes" in meta:
                    meta["classes"] = claim_without(meta["classes"], lowered_classes(
                        sent["classifier.bias"], model.tensors["classifier.bias"]))
                out["model"] = Payload(sent, meta)
            return out

        def addressed(self, kind, payload, recipients):
            if attack == "mates_shift" and kind == "model" and self.addressed_poisons:
                return self.each_its_own(payload, recipients)
            if attack != "targeted_flip" or kind != "model" or self.poison is None:
                return super().addressed(kind, payload, recipients)
            # the flipped model only to those that cannot validate it on a shared class
            apart = [r for r in recipients if not shares_a_class(self.data, self.node_id, r)]
            together = [r for r in recipients if r not in apart]
            flipped = Payload(unflat(self.poison, payload.tensors), dict(payload.meta))
            return [(flipped, apart), (payload, together)]

        def each_its_own(self, payload, recipients):
            """mates_shift's models: a receiver with its own crafted model gets it."""
            groups: dict[int, tuple[Payload, list]] = {}
            for recipient in recipients:
                vector = self.addressed_poisons.get(recipient)
                sent = payload if vector is None else Payload(
                    unflat(vector, payload.tensors), dict(payload.meta))
                groups.setdefault(id(sent) if vector is None else id(vector),
                                  (sent, []))[1].append(recipient)
            return list(groups.values())

        def aggregate(self, own, received):
            models = [flat(update["model"].tensors) for update in received.values()
                      if "model" in update]
            if models and "model" in own:
                self.seen, self.previous = tuple(models), flat(own["model"].tensors)
                self.stand_ins = {peer: StandIn(flat(update["model"].tensors), frozenset(
                    c for c, n in enumerate(update["model"].meta.get("classes", ())) if n > 0))
                    for peer, update in received.items() if "model" in update}
            return super().aggregate(own, received)
    return ModelAttacker


def shares_a_class(data, sender: int, recipient: int) -> bool:
    """Whether the data plan gives `recipient` a class `sender` holds (True without a plan:
    an attacker that knows nothing of its neighbours' data)."""
    plan = data.plan
    if plan is None or plan.counts_of(recipient) is None:
        return True
    return bool(((plan.counts_of(sender) > 0) & (plan.counts_of(recipient) > 0)).any())


def inflated(payloads: dict[str, Payload]) -> dict[str, Payload]:
    """The payloads claiming LIE times the samples and class counts they hold."""
    out = dict(payloads)
    if "model" in out:
        meta = dict(out["model"].meta)
        if "classes" in meta:  # a lie the model's own checks cannot see: its counts agree
            meta["classes"] = [min(n * LIE, MAX_SAMPLES // len(meta["classes"]))
                               for n in meta["classes"]]
            meta["samples"] = sum(meta["classes"])
        else:
            meta["samples"] = min(meta["samples"] * LIE, MAX_SAMPLES)
        out["model"] = Payload(out["model"].tensors, meta)
    if "prototypes" in out:
        tensors = dict(out["prototypes"].tensors)
        tensors["counts"] = (tensors["counts"] * LIE).clamp(max=MAX_SAMPLES)
        out["prototypes"] = Payload(tensors, dict(out["prototypes"].meta))
    return out


def _prototypes_replaced(payloads: dict[str, Payload],
                         change: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Payload]:
    """The payloads with the sent prototype rows changed by `change`, counts as they were."""
    if "prototypes" not in payloads:
        return payloads
    tensors = dict(payloads["prototypes"].tensors)
    tensors["prototypes"] = change(tensors["prototypes"])
    return {**payloads, "prototypes": Payload(tensors, dict(payloads["prototypes"].meta))}


def _poisoned(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """Every float tensor POISON; the sample count and class counts claimed at the maximum."""
    out = {}
    for kind, payload in payloads.items():
        tensors = {k: torch.full_like(v, POISON) if v.is_floating_point() else v
                   for k, v in payload.tensors.items()}
        if "counts" in tensors:
            tensors["counts"] = torch.full_like(tensors["counts"], MAX_SAMPLES)
        meta = dict(payload.meta)
        if "samples" in meta:
            meta["samples"] = MAX_SAMPLES
        if "classes" in meta:  # the most each class may claim with the total in bounds
            meta["classes"] = [MAX_SAMPLES // len(meta["classes"])] * len(meta["classes"])
            meta["samples"] = sum(meta["classes"])
        out[kind] = Payload(tensors, meta)
    return out


def _protozero(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """Prototypes of zeros for every class, claimed with the largest counts."""
    out = dict(payloads)
    if "prototypes" in payloads:
        classes = torch.arange(algorithm.data.num_classes)
        dim = payloads["prototypes"].tensors["prototypes"].shape[1]
        out["prototypes"] = Payload({"prototypes": torch.zeros(len(classes), dim),
                                     "classes": classes,
                                     "counts": torch.full((len(classes),), MAX_SAMPLES)})
    return out


def _protosmall(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """`_protozero` that knows the floor: every class's row the mean direction of its own
    prototypes at FLOOR_EDGE x (their median norm / aggregation.norm_floor), its own median
    standing for the receivers' reference; zeros where nodes set no floor."""
    floor = algorithm.config.aggregation.norm_floor
    out = _protozero(algorithm, payloads)
    if "prototypes" not in payloads or floor <= 0:
        return out
    own = payloads["prototypes"].tensors["prototypes"].to(torch.float64)
    if not len(own):
        return out
    direction = own.mean(dim=0)
    length = FLOOR_EDGE * statistics.median(own.norm(dim=1).tolist()) / floor
    row = (direction / max(float(direction.norm()), 1e-12) * length).to(torch.float32)
    tensors = dict(out["prototypes"].tensors)
    tensors["prototypes"] = row.expand_as(tensors["prototypes"]).clone()
    out["prototypes"] = Payload(tensors, dict(out["prototypes"].meta))
    return out


def _scaled(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """The model's float tensors multiplied by SCALE."""
    out = dict(payloads)
    if "model" in payloads:
        model = payloads["model"]
        out["model"] = Payload({k: v * SCALE if v.is_floating_point() else v
                                for k, v in model.tensors.items()}, dict(model.meta))
    return out


def _withheld(algorithm: Algorithm, payloads: dict[str, Payload]) -> dict[str, Payload]:
    """A sample count and class counts of 0, which every check refuses: each update is
    refused at the door, so the neighbours go on without this node, as a perfect defence
    would leave them."""
    out = {}
    for kind, payload in payloads.items():
        tensors = dict(payload.tensors)
        if "counts" in tensors:
            tensors["counts"] = torch.zeros_like(tensors["counts"])
        out[kind] = Payload(tensors, {**payload.meta, **({"samples": 0} if "samples" in
                                                           payload.meta else {})})
    return out


SENDERS: dict[str, Callable[[Algorithm, dict[str, Payload]], dict[str, Payload]]] = {
    "bounded_poison": _poisoned, "protozero": _protozero, "protosmall": _protosmall,
    "scaled_model": _scaled,
    "withheld": _withheld,
    "proto_flip": lambda _a, p: _prototypes_replaced(p, lambda rows: -rows),
    "proto_swap": lambda _a, p: _prototypes_replaced(p, lambda rows: rows.roll(1, dims=0)),
}


def flipped_labels(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Each label c as C-1-c."""
    return num_classes - 1 - labels


def label_flipper(base: type[Algorithm]) -> type[Algorithm]:
    """`base` training on labels c -> C-1-c."""
    class Flipped(base):  # type: ignore[misc, valid-type]
        def __init__(self, config, data, device, node_id):
            super().__init__(config, dataclasses.replace(
                data, train_y=flipped_labels(data.train_y, data.num_classes)),
                device, node_id)
    return Flipped


def attacker_class(base: type[Algorithm], attack: str) -> type[Algorithm]:
    """`base` as the attacker of `attack` runs it."""
    if attack == "body_flip":
        return model_attacker(label_flipper(base), attack)
    if attack in MODEL_ATTACKS:
        return model_attacker(base, attack)
    if attack in SENDERS:
        send = SENDERS[attack]

        class Sender(base):  # type: ignore[misc, valid-type]
            def payload(self) -> dict[str, Payload]:
                return send(self, super().payload())
        return Sender
    if attack == "label_flip":
        return label_flipper(base)
    if attack == "flip_every_other":
        class FlippedEveryOther(base):  # type: ignore[misc, valid-type]
            def __init__(self, config, data, device, node_id):
                super().__init__(config, data, device, node_id)
                self.honest_data = data
                self.flipped_data = dataclasses.replace(
                    data, train_y=flipped_labels(data.train_y, data.num_classes))

            def train_round(self, round_: int) -> dict[str, float]:
                self.data = self.honest_data if round_ % 2 == 0 else self.flipped_data
                return super().train_round(round_)
        return FlippedEveryOther
    if attack == "accuser":
        class Accuser(base):  # type: ignore[misc, valid-type]
            @property
            def refused_named(self) -> list[int]:  # what its model message names
                return [n for n in range(self.config.nodes) if n != self.node_id]

            @refused_named.setter
            def refused_named(self, _named: list[int]) -> None:
                pass  # what it really refused
        return Accuser
    if attack == "free_rider":
        class FreeRider(base):  # type: ignore[misc, valid-type]
            stale: dict[str, Payload] | None = None

            def train_round(self, round_: int) -> dict[str, float]:
                return {}  # never trains

            def payload(self) -> dict[str, Payload]:
                if self.stale is None:  # its first payload, sent again every round
                    self.stale = copy.deepcopy(super().payload())
                return self.stale
        return FreeRider
    raise ValueError(f"unknown attack {attack!r}, expected one of {ATTACKS}")
