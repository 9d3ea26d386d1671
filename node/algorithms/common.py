"""Pieces several algorithms share: model choice, batching, optimisers, payload checks."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from node.aggregation import (
    aggregate_states,
    beyond_norm_bound,
    local_prototypes,
    nearest_prototype,
    norm_reference,
    reputation_aggregate,
    state_norm,
)
from node.algorithms.base import (
    ARGMAX,
    PROTOTYPE,
    Algorithm,
    DataPlan,
    NodeData,
    Payload,
    Refusal,
)
from node.architectures import (
    DEFAULT_EMBEDDING_DIM,
    STUDENT_CNN_CHANNELS,
    TEACHER_CNN_CHANNELS,
    role_architecture,
)
from node.data.custom import build_model as custom_model
from node.data.custom import is_import_path
from node.defences import (
    class_references,
    class_weighted_mean,
    fails_validation,
    loss_to_beat,
    required_factor,
)
from node.errors import ProtocolError
from node.models import build_model
from node.settings import FederationConfig

log = logging.getLogger(__name__)

# A peer's claimed sample count weighs its update; beyond any real dataset it only poisons.
MAX_SAMPLES = 2**31 - 1

def build_role(config: FederationConfig, data: NodeData, role: str, node_id: int) -> nn.Module:
    """Build the teacher or the student that [model] (and its groups) give this node."""
    m = config.model.for_node(node_id)
    chosen = m.teacher if role == "teacher" else m.student
    if is_import_path(chosen):
        return custom_model(chosen, f"model.{role}", role=role, in_channels=data.in_channels,
                            image_size=data.image_size, num_classes=data.num_classes,
                            embedding_dim=m.embedding_dim or DEFAULT_EMBEDDING_DIM)
    arch = role_architecture(m.teacher if role == "teacher" else m.student, role,
                             config.data.dataset)
    channels = list(m.teacher_channels if role == "teacher" else m.student_channels) or None
    if channels is None and arch == "cnn":
        channels = list(TEACHER_CNN_CHANNELS if role == "teacher" else STUDENT_CNN_CHANNELS)
    return build_model(arch, in_channels=data.in_channels, image_size=data.image_size,
                       num_classes=data.num_classes,
                       embedding_dim=m.embedding_dim or DEFAULT_EMBEDDING_DIM, channels=channels,
                       key=f"model.{role}")


def new_optimizer(model: nn.Module, config: FederationConfig) -> torch.optim.Optimizer:
    """The [train] optimizer: SGD with lr, momentum and weight decay (the papers'), or Adam
    with lr, weight decay, betas and amsgrad."""
    t = config.train
    if t.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay,
                                betas=tuple(t.adam_betas), amsgrad=t.amsgrad)
    return torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum,
                           weight_decay=t.weight_decay)


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int,
            generator: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled mini-batches, reproducible through `generator`."""
    order = torch.randperm(len(x), generator=generator)
    for start in range(0, len(x), batch_size):
        index = order[start:start + batch_size].to(x.device)
        yield x[index], y[index]


def round_generator(config: FederationConfig, node_id: int, round_: int) -> torch.Generator:
    """A generator seeded by federation seed, node and round, so reruns shuffle alike."""
    return torch.Generator().manual_seed(config.seed * 1_000_003 + node_id * 10_007 + round_)


@torch.no_grad()
def embed_all(model: nn.Module, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The model's embeddings for every input, computed in eval mode."""
    model.eval()
    parts = [model(x[start:start + batch_size])[1] for start in range(0, len(x), batch_size)]
    return torch.cat(parts) if parts else x.new_zeros((0, 0))


def train_prototypes(model: nn.Module, data: NodeData,
                     batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class means of the model's embeddings over the local train set, and counts (Eq. 3)."""
    embeddings = embed_all(model, data.train_x, batch_size)
    return local_prototypes(embeddings.cpu(), data.train_y.cpu(), data.num_classes)


@torch.no_grad()
def classify(model: nn.Module, x: torch.Tensor, global_prototypes: torch.Tensor,
             known: torch.Tensor) -> dict[str, torch.Tensor]:
    """Both rules from one forward pass: the logits' argmax and the nearest known prototype.

    Before any prototype is known the prototype rule falls back to the argmax.
    """
    model.eval()
    logits, embeddings = model(x)
    argmax = logits.argmax(dim=1)
    if not bool(known.any()):
        return {ARGMAX: argmax, PROTOTYPE: argmax}
    return {ARGMAX: argmax, PROTOTYPE: nearest_prototype(embeddings, global_prototypes, known)}


def model_then_prototypes(config: FederationConfig,
                          kinds: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Exchange steps of a method sharing a model and prototypes.

    "aggregated": the model first, then prototypes recomputed on the aggregated model, so
    inference and the next round's loss use prototypes of the model they are applied to.
    "local": both at once, prototypes from the locally trained model (the papers' order).
    """
    if config.exchange.prototypes_from == "aggregated":
        return (("model",), ("prototypes",))
    return (kinds,)


def state_payload(model: nn.Module, samples: int) -> Payload:
    """A model's state dict, detached on the CPU, with its training sample count."""
    # clone: on the CPU .cpu() is the live tensor, which training would change under us
    state = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
    return Payload(tensors=state, meta={"samples": samples})


class ReadAs(Mapping[str, torch.Tensor]):
    """A checked model read lazily: each lookup reads the received tensor (a message kept in
    its wire form decodes again) in this node's dtype. Averaging then decodes one tensor of
    one peer at a time, instead of holding every neighbour's model decoded at once."""

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


def checked_state(reference: Mapping[str, torch.Tensor],
                  payload: Payload) -> tuple[Mapping[str, torch.Tensor], int, float]:
    """A received model's tensors (read lazily, see ReadAs), weight and norm, after checking
    names and shapes match ours and every value is finite."""
    tensors = {name: payload.tensors[name] for name in payload.tensors}  # read once for the
    # checks (a received message decodes on every read), freed on return
    if set(tensors) != set(reference):
        raise ProtocolError("model parameters differ from this node's model: "
                            f"{sorted(set(tensors) ^ set(reference))[:3]}")
    for name, ref in reference.items():
        if tuple(tensors[name].shape) != tuple(ref.shape):
            raise ProtocolError(f"parameter {name} has shape {tuple(tensors[name].shape)}, "
                                f"expected {tuple(ref.shape)}")
        if tensors[name].is_floating_point() and not bool(tensors[name].isfinite().all()):
            raise ProtocolError(f"parameter {name} holds NaN or infinite values")
    samples = payload.meta.get("samples", 0)
    if not 1 <= samples <= MAX_SAMPLES:
        raise ProtocolError(f"model weight 'samples' must be in 1..{MAX_SAMPLES}, got {samples}")
    return (ReadAs(payload.tensors, {name: ref.dtype for name, ref in reference.items()}),
            samples, state_norm(tensors))


# Inputs a freshly aggregated model is tried on before this node adopts it.
PROBE_SAMPLES = 32


@torch.no_grad()
def computes_finite(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether every output of `model` on `x` (logits, embeddings) is finite."""
    model.eval()
    outputs = model(x)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return all(bool(t.isfinite().all()) for t in outputs if isinstance(t, torch.Tensor))


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of `model`'s state."""
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def adopt(algorithm: Algorithm, model: nn.Module,
          aggregated: Mapping[str, torch.Tensor]) -> bool:
    """Load the aggregated state into `model` unless it computes NaN or infinities on the
    node's first training inputs (finite weights of 1e4 overflow a few layers on): then the
    model keeps the node's own state for this round, counted in the algorithm's
    `kept_own_models`. Whether it was adopted."""
    own = snapshot(model)
    model.load_state_dict(aggregated)
    if computes_finite(model, algorithm.data.train_x[:PROBE_SAMPLES]):
        algorithm.start_state = snapshot(model)
        return True
    model.load_state_dict(own)
    algorithm.start_state = own
    algorithm.kept_own_models += 1
    log.warning("node %d: the aggregated model computes NaN or infinite values: this round "
                "keeps the node's own model", algorithm.node_id)
    return False


def prototype_payload(prototypes: torch.Tensor, counts: torch.Tensor) -> Payload:
    """Only the rows of classes seen locally travel, with their ids and sample counts."""
    classes = torch.nonzero(counts > 0).flatten()
    return Payload(tensors={"prototypes": prototypes[classes].detach().cpu(),
                            "classes": classes.to(torch.int64).cpu(),
                            "counts": counts[classes].to(torch.int64).cpu()})


def weightless(payloads: Mapping[str, Payload]) -> dict[str, Payload]:
    """This node's payloads weighing (next to) nothing in aggregation, for a node joining
    late: its model counts as one sample (never a zero total), its prototypes carry no
    class. It starts from its in-neighbours' models and prototypes."""
    out = {}
    for kind, payload in payloads.items():
        tensors, meta = payload.tensors, dict(payload.meta)
        if "samples" in meta:
            meta["samples"] = 1
        if set(tensors) == {"prototypes", "classes", "counts"}:
            tensors = {"prototypes": tensors["prototypes"][:0], "classes": tensors["classes"][:0],
                       "counts": tensors["counts"][:0]}
        out[kind] = Payload(tensors, meta)
    return out


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


# A batch (x, y) -> named loss terms, from the models' forward passes.
LossTerms = Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def descend(loss: torch.Tensor, optimizers: Sequence[torch.optim.Optimizer]) -> bool:
    """One gradient step of every optimiser in `optimizers` on `loss`; none (False) when the
    loss or a gradient is NaN or infinite, so a model aggregated from a hostile neighbour's
    extreme (finite) weights cannot turn this node's model into NaN."""
    for optimizer in optimizers:
        optimizer.zero_grad()
    if not bool(torch.isfinite(loss)):
        return False
    loss.backward()
    gradients = [p.grad for optimizer in optimizers for group in optimizer.param_groups
                 for p in group["params"] if p.grad is not None]
    if gradients and not bool(torch.stack([g.isfinite().all() for g in gradients]).all()):
        for optimizer in optimizers:
            optimizer.zero_grad()
        return False
    for optimizer in optimizers:
        optimizer.step()
    return True


def local_sgd(models: Sequence[nn.Module],
              minimise: Mapping[str, Sequence[torch.optim.Optimizer]], data: NodeData,
              config: FederationConfig, node_id: int, round_: int,
              loss_terms: LossTerms) -> dict[str, float]:
    """[train] epochs of mini-batch SGD over the local train set, `models` in train mode.

    Each batch, every term named in `minimise` takes a step of its optimisers, in that
    order. Returns each term averaged over the batches ({} without training samples).
    """
    t = config.train
    generator = round_generator(config, node_id, round_)
    sums: dict[str, float] = {}
    steps = 0
    for model in models:
        model.train()
    skipped = 0
    for _ in range(t.epochs):
        for x, y in batches(data.train_x, data.train_y, t.batch_size, generator):
            terms = loss_terms(x, y)
            for key, optimizers in minimise.items():
                skipped += not descend(terms[key], optimizers)
            for key, value in terms.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach())
            steps += 1
    averages = {key: value / max(steps, 1) for key, value in sums.items()}
    if skipped:
        log.warning("node %d: round %d: %d steps skipped, their loss or gradients not finite",
                    node_id, round_, skipped)
        averages["nonfinite_steps_skipped"] = float(skipped)
    return averages


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

    @property
    def rejected(self) -> list[int]:
        """The peers some part of whose update was refused."""
        return sorted({refusal.peer for refusal in self.refusals})


def gather(own: Mapping[str, Payload], received: Mapping[int, Mapping[str, Payload]],
           node_id: int, num_classes: int = 0, dim: int = 0,
           plan: DataPlan | None = None, norm_bound: float = 0.0) -> Contributions:
    """Check every peer's update against this node's own; a bad one is left out and named.

    The model is checked when `own` has a "model" payload, the prototypes (expanded to
    [num_classes, dim]) when it has a "prototypes" one. With a data `plan`, a peer's model
    weighs what the plan gives it and its prototypes count only the classes the plan gives
    it, whatever it claims: one peer cannot outweigh the others by claiming more. A model
    with a norm beyond `norm_bound` times the reference (`norm_reference`) is refused, and
    so is each prototype beyond `norm_bound` times its class's reference
    (`node.defences.class_references`).
    """
    with_model, with_prototypes = "model" in own, "prototypes" in own
    reference = own["model"].tensors if with_model else {}
    states = [(dict(reference), own["model"].meta["samples"])] if with_model else []
    prototypes = [own_prototypes(own["prototypes"], num_classes, dim, node_id)
                  ] if with_prototypes else []

    def check(peer: int, update: Mapping[str, Payload]) -> tuple:
        model = (checked_state(reference, require_kind(update, "model")) if with_model
                 else None)
        protos = (checked_prototypes(require_kind(update, "prototypes"), num_classes, dim)
                  if with_prototypes else None)
        state, protos = planned(peer, model and model[:2], protos, plan, node_id)
        return state, protos, model and model[2]

    refusals: list[Refusal] = []
    checked = dict(_each_or_rejected(received, check, node_id, refusals))
    kept = dict(_each_or_rejected(checked, models_within_bound(state_norm(reference), checked,
                                                               norm_bound),
                                  node_id, refusals, rule="norm_bound", what="model"))
    if with_prototypes and norm_bound > 0:
        kept, refused_rows = prototypes_within_class_bounds(prototypes[0], kept, norm_bound)
        refusals += refused_rows
    for state, protos in kept.values():  # in peer order
        if with_model:
            states.append(state)
        if with_prototypes:
            prototypes.append(protos)
    for refusal in refusals:
        log.warning("node %d: %s of peer %d refused (%s): %s", node_id, refusal.what,
                    refusal.peer, refusal.rule, refusal.reason)
    return Contributions(states, prototypes, sorted(refusals, key=lambda r: r.peer),
                         list(kept))


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


def combined_state(algorithm: Algorithm,
                   update: Contributions) -> dict[str, torch.Tensor]:
    """The gathered models combined under the configured rule; "reputation" also carries
    the algorithm's trust in its neighbours on to the next round."""
    settings = algorithm.config.aggregation
    if not sum(weight for _, weight in update.states) > 0:
        return dict(update.states[0][0])  # a node without samples, every peer refused
    if settings.rule == "reputation":
        state, algorithm.trust = reputation_aggregate(update.states, update.peers,
                                                      algorithm.trust, settings.trust_memory)
        return state
    return aggregate_states(update.states, **settings.kwargs())


def _row_norms(protos: tuple[torch.Tensor, torch.Tensor]) -> list[float | None]:
    """Each class's prototype norm, None for a class without a count."""
    prototypes, counts = protos
    norms = prototypes.to(torch.float64).norm(dim=1).tolist()
    return [n if int(k) > 0 else None for n, k in zip(norms, counts.tolist(), strict=True)]


def prototypes_within_class_bounds(own: tuple[torch.Tensor, torch.Tensor],
                                   updates: dict[int, tuple], bound: float,
                                   ) -> tuple[dict[int, tuple], list[Refusal]]:
    """Each peer's prototypes with every class beyond `bound` times its class's reference
    taken out (its count set to 0), and a refusal for each class taken out."""
    having = {peer: protos for peer, (_, protos) in updates.items() if protos is not None}
    peer_norms = {peer: _row_norms(protos) for peer, protos in having.items()}
    references = class_references(_row_norms(own), list(peer_norms.values()))
    refusals, out = [], dict(updates)
    for peer, norms in peer_norms.items():
        beyond = [c for c, n in enumerate(norms)
                  if n is not None and beyond_norm_bound(n, references[c], bound)]
        if not beyond:
            continue
        prototypes, counts = having[peer]
        counts = counts.clone()
        counts[beyond] = 0
        out[peer] = (updates[peer][0], (prototypes, counts))
        refusals += [Refusal(peer, f"prototype of class {c}", "norm_bound",
                             f"norm {norms[c]:.4g}, more than {bound:g} times the class's "
                             f"reference {references[c]:.4g}") for c in beyond]
    return out, refusals


def _each_or_rejected(updates: Mapping[int, Any], check: Callable[[int, Any], tuple],
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
            refusals.append(Refusal(peer, what, rule, str(why)))


def bounded(what: str, norm: float, reference: float, bound: float) -> None:
    """ProtocolError when a peer's `norm` is beyond `bound` times the `reference`."""
    if beyond_norm_bound(norm, reference, bound):
        raise ProtocolError(f"its {what} has norm {norm:.4g}, more than {bound:g} times "
                            f"the reference {reference:.4g}")


def own_prototypes(payload: Payload, num_classes: int, dim: int,
                   node_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This node's own prototypes as a contribution: none (zero counts) when they do not
    pass the checks a peer's would, so its own broken state cannot stop the round."""
    try:
        return checked_prototypes(payload, num_classes, dim)
    except ProtocolError as exc:
        log.warning("node %d: its own prototypes left out of this round: %s", node_id, exc)
        return (torch.zeros(num_classes, dim), torch.zeros(num_classes, dtype=torch.int64))


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


# At most this many of a node's training samples validate its in-neighbours' models: each
# costs one forward pass per in-neighbour and round, and the loss is compared with the start
# of round's on the same samples.
VALIDATION_SAMPLES = 256


@torch.no_grad()
def loss_per_class(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                   batch_size: int) -> tuple[list[float], list[int]]:
    """Per class, the summed cross-entropy of `model`'s logits over the samples, and how
    many there are."""
    model.eval()
    sums = torch.zeros(num_classes, dtype=torch.float64)
    for start in range(0, len(x), batch_size):
        logits = model(x[start:start + batch_size])[0].double()
        labels = y[start:start + batch_size]
        losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        sums.index_add_(0, labels.cpu(), losses.cpu())
    return sums.tolist(), torch.bincount(y.cpu(), minlength=num_classes).tolist()


def validation_samples(algorithm: Algorithm) -> tuple[torch.Tensor, torch.Tensor]:
    """The node's training samples that validate its in-neighbours' models: all of them, or
    a seeded draw of VALIDATION_SAMPLES."""
    x, y = algorithm.data.train_x, algorithm.data.train_y
    if len(y) <= VALIDATION_SAMPLES:
        return x, y
    draw = torch.randperm(len(y), generator=round_generator(algorithm.config,
                                                            algorithm.node_id, -1))
    index = draw[:VALIDATION_SAMPLES].to(x.device)
    return x[index], y[index]


def own_round_losses(algorithm: Algorithm, model: nn.Module,
                     start: nn.Module) -> tuple[float, float]:
    """This node's loss after its round and at its start (a uniform guess's where lower:
    `node.defences.loss_to_beat`), on its local test samples (on its training samples
    without any): a peer's model is measured on samples it never
    trained on, so this node's own round is too."""
    data = algorithm.data
    x, y = (data.test_x, data.test_y) if len(data.test_y) else validation_samples(algorithm)
    classes, batch = data.num_classes, algorithm.config.train.eval_batch_size
    losses = []
    for each in (model, start):
        sums, total = loss_per_class(each, x, y, classes, batch)
        losses.append(class_weighted_mean(sums, total, [float(n) for n in total]) or 0.0)
    return losses[0], loss_to_beat(losses[1], classes)


def peer_class_weights(algorithm: Algorithm, update: Contributions, index: int) -> list[float]:
    """The class counts the data plan gives the peer at `index` of `update.peers` (those
    of its prototypes without a plan; every class alike when it sent none)."""
    peer = update.peers[index]
    plan = algorithm.data.plan
    if plan is not None and plan.counts_of(peer) is not None:
        return [float(n) for n in plan.counts_of(peer).tolist()]
    if update.prototypes:
        return [float(n) for n in update.prototypes[index + 1][1].tolist()]
    return [1.0] * algorithm.data.num_classes


def without_peers(update: Contributions, refused: Mapping[int, Refusal]) -> Contributions:
    """`update` less every part of the peers in `refused`, whose refusals join its own."""
    keep = [i for i, peer in enumerate(update.peers) if peer not in refused]
    return Contributions(
        states=update.states[:1] + [update.states[i + 1] for i in keep] if update.states else [],
        prototypes=(update.prototypes[:1] + [update.prototypes[i + 1] for i in keep]
                    if update.prototypes else []),
        refusals=sorted([*update.refusals, *refused.values()], key=lambda r: r.peer),
        peers=[update.peers[i] for i in keep])


def validated(algorithm: Algorithm, model: nn.Module | None,
              update: Contributions) -> Contributions:
    """`update` less the in-neighbours whose model fails validation on this node's data
    (`node.defences.fails_validation` against the model this node began the round with,
    or a uniform guess where that fits better: `node.defences.loss_to_beat`, asking for aggregation.validation of the cut this node's own round made:
    `node.defences.required_factor`) and, in a later prototype step of the same round,
    less those peers' prototypes. `model` is this node's travelling model, trained this
    round (None in a step without models)."""
    share = algorithm.config.aggregation.validation
    if share <= 0:
        return update
    if model is None:
        refused = {peer: Refusal(peer, "prototypes", "validation",
                                 "its model failed validation this round")
                   for peer in update.peers if peer in algorithm.distrusted}
        return without_peers(update, refused)
    x, y = validation_samples(algorithm)
    classes, batch = algorithm.data.num_classes, algorithm.config.train.eval_batch_size
    scratch = copy.deepcopy(model)
    if algorithm.start_state is not None:
        scratch.load_state_dict(algorithm.start_state)
    start_sums, total = loss_per_class(scratch, x, y, classes, batch)
    factor = required_factor(*own_round_losses(algorithm, model, scratch), share)
    refused = {}
    for index, peer in enumerate(update.peers):
        weights = peer_class_weights(algorithm, update, index)
        start = class_weighted_mean(start_sums, total, weights)
        if start is None:
            continue  # no class of the peer's here: nothing to validate it on
        start = loss_to_beat(start, classes)
        scratch.load_state_dict(dict(update.states[index + 1][0]))
        loss = class_weighted_mean(loss_per_class(scratch, x, y, classes, batch)[0], total,
                                   weights)
        if not math.isfinite(loss) or fails_validation(loss, start, factor):
            refused[peer] = Refusal(peer, "model and prototypes", "validation",
                                    f"its model's loss on this node's samples of its classes "
                                    f"is {loss:.3g}, more than {factor:.3g} x {start:.3g} (the "
                                    f"start of round's, or a uniform guess's where lower)")
    algorithm.distrusted = set(refused)
    return without_peers(update, refused)
