"""The one training loop every algorithm uses: batches, step order, averaged terms."""

import torch
from torch import nn

from node.algorithms.base import NodeData
from node.algorithms.common import batches, local_sgd, round_generator
from node.config import from_dict

CONFIG = from_dict({"algorithm": "fedavg", "seed": 7,
                    "train": {"device": "cpu", "batch_size": 4, "epochs": 2}})


def node_data(samples=10):
    """Ten 3-feature samples of two classes (10 = two full batches of 4 and one of 2)."""
    x = torch.randn(samples, 3, generator=torch.Generator().manual_seed(0))
    y = torch.arange(samples) % 2
    return NodeData(train_x=x, train_y=y, test_x=x, test_y=y, global_x=x, global_y=y,
                    num_classes=2)


class Recording(torch.optim.SGD):
    """SGD that writes its zero_grad and step calls to a shared log."""

    def __init__(self, params, name, log):
        super().__init__(params, lr=0.1)
        self.name, self.log = name, log

    def zero_grad(self, set_to_none=True):
        self.log.append(("zero_grad", self.name))
        super().zero_grad(set_to_none)

    def step(self, closure=None):
        self.log.append(("step", self.name))
        return super().step(closure)


def test_terms_are_minimised_in_order_on_round_generator_batches_and_averaged():
    data, log, seen = node_data(), [], []
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)
    first.eval(), second.eval()
    a, b, c = (Recording(first.parameters(), "a", log), Recording(second.parameters(), "b", log),
               Recording([nn.Parameter(torch.zeros(1))], "c", log))

    def terms(x, y):
        seen.append((x.clone(), y.clone()))
        return {"first": first(x).square().mean(), "second": second(x).abs().mean(),
                "size": torch.tensor(float(len(y)))}

    stats = local_sgd((first, second), {"first": (a,), "second": (b, c)}, data, CONFIG,
                      node_id=1, round_=3, loss_terms=terms)
    assert first.training and second.training
    generator = round_generator(CONFIG, 1, 3)
    expected = [batch for _ in range(2)
                for batch in batches(data.train_x, data.train_y, 4, generator)]
    assert len(seen) == len(expected) == 6
    assert all(torch.equal(x, ex) and torch.equal(y, ey)
               for (x, y), (ex, ey) in zip(seen, expected, strict=True))
    per_batch = [("zero_grad", "a"), ("step", "a"),
                 ("zero_grad", "b"), ("zero_grad", "c"), ("step", "b"), ("step", "c")]
    assert log == per_batch * 6
    assert list(stats) == ["first", "second", "size"]
    assert stats["size"] == (4 + 4 + 2) * 2 / 6


def test_no_training_samples_means_no_steps_and_no_terms():
    model = nn.Linear(3, 2)
    log = []
    stats = local_sgd((model,), {"loss": (Recording(model.parameters(), "a", log),)},
                      node_data(0), CONFIG, 0, 1,
                      lambda x, y: {"loss": model(x).sum()})
    assert stats == {} and log == []
