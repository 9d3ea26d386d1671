"""Pieces several algorithms share: model choice, batching, optimisers, local SGD, what a node
sends and how it adopts an aggregate (what it does with what it receives: node.intake)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from node.aggregation import local_prototypes, nearest_prototype
from node.algorithms.base import ARGMAX, PROTOTYPE, Algorithm, NodeData, Payload
from node.architectures import (
    DEFAULT_EMBEDDING_DIM,
    STUDENT_CNN_CHANNELS,
    TEACHER_CNN_CHANNELS,
    role_architecture,
)
from node.data.custom import build_model as custom_model
from node.data.custom import is_import_path
from node.finite import all_finite
from node.models import build_model
from node.optimizers import SGD, Adam, Optimizer
from node.settings import FederationConfig

log = logging.getLogger(__name__)

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


def new_optimizer(model: nn.Module, config: FederationConfig) -> Optimizer:
    """The [train] optimizer: SGD with lr, momentum and weight decay (the papers'), or Adam
    with lr, weight decay, betas and amsgrad."""
    t = config.train
    if t.optimizer == "adam":
        return Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay,
                    betas=tuple(t.adam_betas), amsgrad=t.amsgrad)
    return SGD(model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)


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


def prototypes_from_aggregate(config: FederationConfig) -> bool:
    """Whether prototypes travel after the model, recomputed on the aggregated model
    (exchange.prototypes_from = "aggregated"), rather than with it."""
    return config.exchange.prototypes_from == "aggregated"


def model_then_prototypes(config: FederationConfig,
                          kinds: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Exchange steps of a method sharing a model and prototypes.

    "aggregated": the model first, then prototypes recomputed on the aggregated model, so
    inference and the next round's loss use prototypes of the model they are applied to.
    "local": both at once, prototypes from the locally trained model (the papers' order).
    """
    if prototypes_from_aggregate(config):
        return (("model",), ("prototypes",))
    return (kinds,)


def state_payload(model: nn.Module, labels: torch.Tensor, num_classes: int) -> Payload:
    """A model's state dict, detached on the CPU, with its training sample count and the
    count of each class among them (`labels`): without a data plan, the classes a receiver
    validates the model on, known from the model's first message on."""
    # clone: on the CPU .cpu() is the live tensor, which training would change under us
    state = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
    counts = labels.bincount(minlength=num_classes).tolist()
    return Payload(tensors=state, meta={"samples": len(labels), "classes": counts})


# Inputs a freshly aggregated model is tried on before this node adopts it.
PROBE_SAMPLES = 32


@torch.no_grad()
def computes_finite(model: nn.Module, x: torch.Tensor) -> bool:
    """Whether every output of `model` on `x` (logits, embeddings) is finite."""
    model.eval()
    outputs = model(x)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return all_finite(t for t in outputs if isinstance(t, torch.Tensor))


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


def weightless(payloads: Mapping[str, Payload], samples: int = 1) -> dict[str, Payload]:
    """This node's payloads weighing (next to) nothing in aggregation, for a node joining
    late: its model counts as `samples` (1: never a zero total; 0 for a hub's client, which
    takes the hub's model), its prototypes carry no class. It starts from its
    in-neighbours' models and prototypes."""
    out = {}
    for kind, payload in payloads.items():
        tensors, meta = payload.tensors, dict(payload.meta)
        if "samples" in meta:
            meta["samples"] = samples
            meta.pop("classes", None)  # judged on every class a receiver holds
        if set(tensors) == {"prototypes", "classes", "counts"}:
            tensors = {"prototypes": tensors["prototypes"][:0], "classes": tensors["classes"][:0],
                       "counts": tensors["counts"][:0]}
        out[kind] = Payload(tensors, meta)
    return out


def speaking_for(payloads: Mapping[str, Payload], samples: int) -> dict[str, Payload]:
    """A hub's payloads with its model claiming `samples`, its clients' together (the data
    plan's count for it): it holds none itself, and a model claiming none is refused."""
    return {kind: Payload(p.tensors, {**p.meta, "samples": samples} if "samples" in p.meta
                          else dict(p.meta)) for kind, p in payloads.items()}


# A batch (x, y) -> named loss terms, from the models' forward passes.
LossTerms = Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def descend(loss: torch.Tensor, optimizers: Sequence[Optimizer]) -> bool:
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
    if not all_finite(gradients):
        for optimizer in optimizers:
            optimizer.zero_grad()
        return False
    for optimizer in optimizers:
        optimizer.step()
    return True


def local_sgd(models: Sequence[nn.Module],
              minimise: Mapping[str, Sequence[Optimizer]], data: NodeData,
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
