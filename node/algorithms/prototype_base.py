"""What ProFe, FedPR and FedProto share: class prototypes, local ones sent and global ones
combined from the in-neighbours' (Eq. 3 and 4 of ProFe; the same means in the others)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from node.aggregation import aggregate_prototypes, class_totals
from node.algorithms.base import Algorithm, Payload, Refusal, Updates
from node.algorithms.common import (
    adopt,
    model_then_prototypes,
    prototype_payload,
    prototypes_from_aggregate,
    state_payload,
    train_prototypes,
)
from node.intake import combined_state, gathered, screened


class PrototypeAlgorithm(Algorithm):
    """An algorithm whose nodes keep local and global class prototypes."""

    def keep_prototypes(self, dim: int) -> None:
        """Start with prototypes of dimension `dim`: none local, none global known yet."""
        classes = self.data.num_classes
        self.dim = dim
        self.global_prototypes = torch.zeros(classes, dim, device=self.device)
        self.known = torch.zeros(classes, dtype=torch.bool, device=self.device)
        self._local = (torch.zeros(classes, dim), torch.zeros(classes, dtype=torch.int64))
        self._local_from: nn.Module | None = None  # whose embeddings the next read takes
        self.global_counts = torch.zeros(classes, dtype=torch.int64)  # the samples behind them

    def refresh_local_prototypes(self, model: nn.Module, deferred: bool = False) -> None:
        """From now on the local prototypes are the class means of `model`'s embeddings over
        the local train set (kept as they were on a node without training samples).

        `deferred`: computed when first read, so that prototypes an aggregate's replace
        before anything reads them (exchange.prototypes_from = "aggregated") cost no pass
        over the train set; `model` must not change before the read."""
        if len(self.data.train_y):
            model.eval()  # as the pass leaves it, whenever it runs
            self._local_from = model
            if not deferred:
                self._settled_local()

    def _settled_local(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The local prototypes and their counts, computed now if a refresh asked for them."""
        if self._local_from is not None:
            model, self._local_from = self._local_from, None
            self._local = train_prototypes(model, self.data, self.config.train.eval_batch_size)
        return self._local

    @property
    def local_prototypes(self) -> torch.Tensor:
        """The local prototypes (Eq. 3), one row per class (zeros for unseen classes)."""
        return self._settled_local()[0]

    @property
    def local_counts(self) -> torch.Tensor:
        """The local train samples of each class behind the local prototypes."""
        return self._settled_local()[1]

    def local_prototype_payload(self) -> Payload:
        """The local prototypes as they travel: the rows of locally seen classes."""
        return prototype_payload(self.local_prototypes, self.local_counts)

    def combine(self, contributions: Sequence[tuple[torch.Tensor, torch.Tensor]],
                **rule: object) -> tuple[torch.Tensor, torch.Tensor]:
        """How the method combines prototypes into global ones (default: ProFe's Eq. 4)."""
        return aggregate_prototypes(contributions, **rule)

    def combine_prototypes(self, contributions: Sequence[tuple[torch.Tensor, torch.Tensor]]
                           ) -> None:
        """The global prototypes from this node's and its in-neighbours' contributions,
        under the configured aggregation rule."""
        prototypes, known = self.combine(contributions, **self.config.aggregation.kwargs())
        self.global_prototypes = prototypes.to(self.device)
        self.known = known.to(self.device)
        self.global_counts = class_totals(contributions)


class ModelAndPrototypes(PrototypeAlgorithm):
    """A prototype algorithm whose nodes also share a model: it travels first and the
    prototypes are recomputed on the aggregate, or both at once (exchange.prototypes_from)."""

    kinds = ("model", "prototypes")

    @property
    @abc.abstractmethod
    def shared_model(self) -> nn.Module:
        """The model that travels and is averaged."""

    def travelling_model(self) -> nn.Module:
        return self.shared_model

    def payload(self) -> dict[str, Payload]:
        return self._built(self.kinds)

    def payloads_of(self, kinds: Sequence[str]) -> dict[str, Payload]:
        if type(self).payload is not ModelAndPrototypes.payload:
            # a subclass that rewrites payload() (an attack, a variant) sends its rewrite
            return super().payloads_of(kinds)
        # only what is asked: the model step of "aggregated" reads no local prototypes
        return self._built(kinds)

    def _built(self, kinds: Sequence[str]) -> dict[str, Payload]:
        build = {"model": lambda: state_payload(self.shared_model, self.data.train_y,
                                                self.data.num_classes),
                 "prototypes": self.local_prototype_payload}
        return {kind: build[kind]() for kind in self.kinds if kind in kinds}

    def exchange_steps(self) -> tuple[tuple[str, ...], ...]:
        return model_then_prototypes(self.config, self.kinds)

    def prototypes_replaced(self) -> bool:
        """Whether the prototypes of the trained model are replaced by the aggregate's before
        they travel (exchange.prototypes_from = "aggregated")."""
        return prototypes_from_aggregate(self.config)

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        update = gathered(self, own, received, self.data.num_classes, self.dim)
        update = screened(self, self.shared_model if "model" in own else None, update)
        if "model" in own:
            state = combined_state(self, update)
            adopt(self, self.shared_model, state)
            if self.prototypes_replaced():
                self.refresh_local_prototypes(self.shared_model)
        if "prototypes" in own:
            self.combine_prototypes(update.prototypes)
        return update.refusals
