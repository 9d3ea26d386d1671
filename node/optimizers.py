"""SGD (momentum, L2 weight decay) and Adam (amsgrad, L2 weight decay), computed as
torch.optim computes them for one tensor at a time, operation for operation (so bit for
bit), without torch.optim's compiler hooks: building or stepping a torch.optim optimizer
imports torch's compiler stack (torch._dynamo), about 2 s of CPU and 100 MB in every
process that trains, for a compiler a node never uses."""

from __future__ import annotations

from collections.abc import Iterable

import torch


class _OneGroup:
    """One group of parameters and its settings, kept as torch.optim keeps them (read and
    set through param_groups)."""

    def __init__(self, params: Iterable[torch.Tensor], **settings: object) -> None:
        self.param_groups = [{"params": list(params), **settings}]

    def zero_grad(self) -> None:
        """Drop every gradient (torch.optim's default, set_to_none)."""
        for param in self.param_groups[0]["params"]:
            param.grad = None


class SGD(_OneGroup):
    """torch.optim.SGD without dampening or Nesterov: the momentum buffer starts as the
    first gradient (with weight decay added), then buf = momentum x buf + gradient."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.buffers: dict[int, torch.Tensor] = {}

    @torch.no_grad()
    def step(self) -> None:
        """One step of every parameter that has a gradient."""
        group = self.param_groups[0]
        lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
        for index, param in enumerate(group["params"]):
            if param.grad is None:
                continue
            grad = param.grad
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            if momentum != 0:
                buffer = self.buffers.get(index)
                if buffer is None:
                    buffer = self.buffers[index] = grad.detach().clone()
                else:
                    buffer.mul_(momentum).add_(grad, alpha=1)
                grad = buffer
            param.add_(grad, alpha=-lr)


class Adam(_OneGroup):
    """torch.optim.Adam (Kingma and Ba 2015) with L2 weight decay added to the gradient and,
    with `amsgrad`, the running maximum of the second moment (Reddi et al. 2018)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False) -> None:
        super().__init__(params, lr=lr, betas=(float(betas[0]), float(betas[1])), eps=eps,
                         weight_decay=weight_decay, amsgrad=amsgrad)
        self.state: dict[int, dict] = {}

    @torch.no_grad()
    def step(self) -> None:
        """One step of every parameter that has a gradient."""
        group = self.param_groups[0]
        (beta1, beta2), lr, eps = group["betas"], group["lr"], group["eps"]
        weight_decay, amsgrad = group["weight_decay"], group["amsgrad"]
        for index, param in enumerate(group["params"]):
            if param.grad is None:
                continue
            state = self.state.get(index)
            if state is None:
                zeros = [torch.zeros_like(param, memory_format=torch.preserve_format)
                         for _ in range(3 if amsgrad else 2)]
                state = self.state[index] = {"step": torch.tensor(0.0), "moments": zeros}
            # torch keeps the step as a float32 tensor and reads it back as a Python float
            state["step"] += 1
            step = state["step"].item()
            exp_avg, exp_avg_sq, *largest = state["moments"]
            grad = param.grad
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            correction2_sqrt = (1 - beta2 ** step) ** 0.5
            if amsgrad:
                torch.maximum(largest[0], exp_avg_sq, out=largest[0])
                denominator = (largest[0].sqrt() / correction2_sqrt).add_(eps)
            else:
                denominator = (exp_avg_sq.sqrt() / correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denominator, value=-step_size)


Optimizer = SGD | Adam  # what new_optimizer builds and local training steps
