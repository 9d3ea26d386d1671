"""The samples a node judges its in-neighbours' models on, and the losses it measures there:
its own data is the only ground truth it has (FLTrust's root set: here, the node's own)."""

from __future__ import annotations

import torch
from torch import nn

from node.algorithms.base import Algorithm
from node.algorithms.common import round_generator
from node.defences import class_weighted_mean, loss_to_beat

# At most this many of a node's training samples validate its in-neighbours' models: each
# costs one forward pass per in-neighbour and round, and the loss is compared with the start
# of round's on the same samples.
VALIDATION_SAMPLES = 256
# What one round's validation may cost: forward passes of a sample through a peer's model,
# shared among the in-neighbours judged (VALIDATION_SAMPLES each up to 9 of them), so the
# cost does not grow with the in-degree; never fewer than MIN_VALIDATION_SAMPLES a peer.
# Every peer and the start of round are measured on the same samples, so what a smaller
# draw adds to the loss affects them alike and the comparison stays paired.
VALIDATION_BUDGET = 9 * VALIDATION_SAMPLES
MIN_VALIDATION_SAMPLES = 64
# The seeded draws: of the training samples (validation_samples) and of the local test set
# (own_test_samples); round_generator's round argument, below any round's.
VALIDATION_DRAW, OWN_TEST_DRAW = -1, -2


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


def samples_per_peer(peers: int) -> int:
    """How many samples validate each of `peers` models: VALIDATION_BUDGET shared among them,
    between MIN_VALIDATION_SAMPLES and VALIDATION_SAMPLES."""
    return max(MIN_VALIDATION_SAMPLES,
               min(VALIDATION_SAMPLES, VALIDATION_BUDGET // max(peers, 1)))


def budget_shares(aggregation) -> int:
    """How many screens split VALIDATION_BUDGET, each judging every peer on its samples: 2
    where aggregation.screen_budget is "shared" and both validation and the held-class
    screen mixing whole models run, else 1 (each spends it all)."""
    both = (aggregation.validation > 0 and aggregation.held_influence > 0
            and aggregation.held_mix == "model")
    return 2 if both and aggregation.screen_budget == "shared" else 1


def validation_samples(algorithm: Algorithm,
                       peers: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The node's training samples that validate its in-neighbours' models (`peers` of them
    this round): all of them, or the first `samples_per_peer` of a seeded draw (a smaller
    draw is the start of the larger one), for `peers` times the screens sharing the budget
    (`budget_shares`)."""
    data = algorithm.data
    wanted = samples_per_peer(peers * budget_shares(algorithm.config.aggregation))
    return _first_drawn(algorithm, data.train_x, data.train_y, wanted, VALIDATION_DRAW)


def own_test_samples(algorithm: Algorithm) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples this node measures its own round's cut on: its local test set, or the
    first VALIDATION_BUDGET of a seeded draw of a larger one, so validation's cost does not
    grow with the node's data; without a local test set, its validation samples. That cut
    sets the bar for every peer, so it gets as many samples as all the peers together."""
    data = algorithm.data
    if not len(data.test_y):
        return validation_samples(algorithm)
    return _first_drawn(algorithm, data.test_x, data.test_y, VALIDATION_BUDGET, OWN_TEST_DRAW)


def _first_drawn(algorithm: Algorithm, x: torch.Tensor, y: torch.Tensor, wanted: int,
                 stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`x`, `y` whole when they hold at most `wanted` samples, else the first `wanted` of a
    permutation seeded by the federation, the node and `stream` (the same every round)."""
    if len(y) <= wanted:
        return x, y
    draw = torch.randperm(len(y), generator=round_generator(algorithm.config,
                                                            algorithm.node_id, stream))
    index = draw[:wanted].to(x.device)
    return x[index], y[index]


def own_round_losses(algorithm: Algorithm, model: nn.Module,
                     start: nn.Module) -> tuple[float, float]:
    """This node's loss after its round and at its start (a uniform guess's where lower:
    `node.defences.loss_to_beat`), on its local test samples (`own_test_samples`): a
    peer's model is measured on samples it never trained on, so this node's own round is
    too."""
    data = algorithm.data
    x, y = own_test_samples(algorithm)
    classes, batch = data.num_classes, algorithm.config.train.eval_batch_size
    losses = []
    for each in (model, start):
        sums, total = loss_per_class(each, x, y, classes, batch)
        losses.append(class_weighted_mean(sums, total, [float(n) for n in total]) or 0.0)
    return losses[0], loss_to_beat(losses[1], classes)
