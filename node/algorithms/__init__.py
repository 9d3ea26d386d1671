"""Learning algorithms behind one interface, picked by name. CATALOGUE holds what the config
needs (each one's table and presets) without torch; a class loads, with torch, on first use."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from node.algorithms.settings import (
    PROFE_PRESETS,
    FedHPSettings,
    FedProcSettings,
    FedProtoSettings,
    FedPRSettings,
    ProFeSettings,
)

if TYPE_CHECKING:
    import torch

    from node.algorithms.base import Algorithm, NodeData


@dataclass(frozen=True)
class Entry:
    """An algorithm's own config table (None: it has none) and its presets,
    {preset: {table: {key: value}}}, chosen by `preset` in that table."""

    settings_class: type | None = None
    presets: Mapping[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


# Adding an algorithm: its module, its settings in node.algorithms.settings, a line here and
# one in `_classes`.
CATALOGUE: dict[str, Entry] = {
    "profe": Entry(ProFeSettings, PROFE_PRESETS),
    "fedavg": Entry(),
    "fedproto": Entry(FedProtoSettings),
    "fedproc": Entry(FedProcSettings),
    "fedhp": Entry(FedHPSettings),
    "fedpr": Entry(FedPRSettings),
}


@cache
def _classes() -> dict[str, type[Algorithm]]:
    from node.algorithms.fedavg import FedAvg
    from node.algorithms.fedhp import FedHP
    from node.algorithms.fedpr import FedPR
    from node.algorithms.fedproc import FedProc
    from node.algorithms.fedproto import FedProto
    from node.algorithms.profe import ProFe

    return {cls.name: cls for cls in (ProFe, FedAvg, FedProto, FedProc, FedHP, FedPR)}


def algorithm_class(name: str) -> type[Algorithm]:
    """The class of algorithm `name` (KeyError if it is not in CATALOGUE); imports torch."""
    if name not in CATALOGUE:
        raise KeyError(name)
    return _classes()[name]


class _Classes(Mapping):
    """Algorithm classes by name, in CATALOGUE's order; a lookup imports them."""

    def __getitem__(self, name: str) -> type[Algorithm]:
        return algorithm_class(name)

    def __contains__(self, name: object) -> bool:
        return name in CATALOGUE

    def __iter__(self) -> Iterator[str]:
        return iter(CATALOGUE)

    def __len__(self) -> int:
        return len(CATALOGUE)


ALGORITHMS: Mapping[str, type[Algorithm]] = _Classes()

# Construction draws initial weights from torch's global generator; nodes sharing one
# process (in-process federations) must not interleave those draws.
_CONSTRUCTION = threading.Lock()


def create(name: str, config, data: NodeData, device: torch.device, node_id: int) -> Algorithm:
    """Algorithm `name` for one node; every node of a federation starts from the same
    weights, drawn from config.seed."""
    import torch

    with _CONSTRUCTION:
        torch.manual_seed(config.seed)
        algorithm = ALGORITHMS[name](config, data, device, node_id)
    from node.algorithms.common import snapshot

    model = algorithm.travelling_model()
    if model is not None:
        algorithm.start_state = snapshot(model)
    return algorithm
