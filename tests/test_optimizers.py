"""node.optimizers against torch.optim: the same parameters, bit for bit, step after step."""

import pytest
import torch
from torch import nn

from node.optimizers import SGD, Adam


def _twins():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    twin = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    twin.load_state_dict(model.state_dict())
    return model, twin


def _steps(model, optimizer, frozen_after=2):
    generator = torch.Generator().manual_seed(5)
    for step in range(6):
        x = torch.randn(8, 5, generator=generator)
        y = torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if step >= frozen_after:  # a parameter without a gradient is left as it is
            model[0].bias.grad = None
        optimizer.step()


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 1e-4), (0.5, 0.0)])
def test_sgd_steps_as_torch_optim_does_bit_for_bit(momentum, weight_decay):
    model, twin = _twins()
    _steps(model, SGD(model.parameters(), lr=0.1, momentum=momentum,
                      weight_decay=weight_decay))
    _steps(twin, torch.optim.SGD(twin.parameters(), lr=0.1, momentum=momentum,
                                 weight_decay=weight_decay))
    for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("amsgrad,weight_decay", [(False, 0.0), (True, 1e-4), (True, 0.0)])
def test_adam_steps_as_torch_optim_does_bit_for_bit(amsgrad, weight_decay):
    model, twin = _twins()
    kwargs = {"lr": 0.01, "betas": (0.851436, 0.999689), "weight_decay": weight_decay,
              "amsgrad": amsgrad}
    _steps(model, Adam(model.parameters(), **kwargs))
    _steps(twin, torch.optim.Adam(twin.parameters(), **kwargs))
    for mine, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_one_sgd_step_by_hand():
    # w = 2, grad 0.5, weight decay 0.1: g = 0.5 + 0.2 = 0.7; buffer 0.7; w = 2 - 0.1 x 0.7
    w = torch.tensor([2.0], requires_grad=True)
    optimizer = SGD([w], lr=0.1, momentum=0.9, weight_decay=0.1)
    (0.5 * w).sum().backward()
    optimizer.step()
    assert w.item() == pytest.approx(1.93)
    # second step: g = 0.5 + 0.193 = 0.693; buffer 0.9 x 0.7 + 0.693 = 1.323
    optimizer.zero_grad()
    (0.5 * w).sum().backward()
    optimizer.step()
    assert w.item() == pytest.approx(1.93 - 0.1323)
