"""AdamW whose response to one corrupted gradient element is bounded (``--optimizer adamw-bounded``).

Why: a link flip of a gradient's top exponent bit gives ~1e35; in torch's AdamW its square
overflows fp32, ``exp_avg_sq`` becomes Inf and stays Inf (``beta2 * inf = inf``), and the
element's update ``m / (sqrt(v) + eps)`` is 0 for the rest of the run: a frozen weight.

What :class:`BoundedAdamW` changes (our choice of two standard mechanisms; nothing else differs
from ``torch.optim.AdamW``'s single-tensor path, so at clean gradients it computes AdamW):

1. The gradient entering the moments is made finite and bounded: NaN -> 0, +-Inf and any
   magnitude above :data:`GRAD_LIMIT` (2^63) -> +-2^63. ``(1 - beta2) * g^2 <= 2^126`` and
   ``beta2 * v + (1 - beta2) * g^2`` then stays below fp32's largest finite number (2^128), so
   the second moment never overflows. A clean gradient is never near 2^63, so this changes nothing there.
2. Per-element update clipping: the update ``m_hat / (sqrt(v_hat) + eps)`` is clipped to
   ``[-c, c]`` (``update_bound``), so one step moves an element by at most ``lr * c`` (plus the
   decoupled weight decay). The idea is the update clipping of Adafactor (Shazeer & Stern, 2018,
   "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", section 6, which clips the
   update's RMS) and of StableAdamW (Wortsman et al., 2023, "Stable and low-precision training for
   large-scale vision-language models", which scales the step by the RMS of g^2 / v); clipping each
   element to ``[-c, c]`` rather than the tensor's RMS is our choice, so that one corrupted element
   cannot change its neighbours' steps. Adam's own update is at most
   :func:`integration.train.adam_step_factor` (1.165 at betas (0.9, 0.95)) and close to 1 in
   steady training; ``c = 1`` (the default) rarely binds on clean gradients.

The state keeps torch's names (``step``, ``exp_avg``, ``exp_avg_sq``), so the frozen-weight count
(:func:`integration.train._frozen_count`) reads it unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

__all__ = ["BoundedAdamW", "GRAD_LIMIT", "UPDATE_BOUND"]

#: the largest gradient magnitude the moments take: 2^63, whose square times (1 - beta2) cannot
#: overflow fp32 (2^126 < 2^128); any finite fp32 gradient a flip can make is clamped to it
GRAD_LIMIT = float(2 ** 63)
#: default per-element update bound ``c`` (in learning rates)
UPDATE_BOUND = 1.0


class BoundedAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, torch's single-tensor order of operations) with the gradient
    clamped to :data:`GRAD_LIMIT` before the moments and the update clipped to ``[-update_bound,
    update_bound]`` per element (module docstring)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, update_bound: float = UPDATE_BOUND) -> None:
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"BoundedAdamW: lr must be a finite number >= 0, got {lr!r}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"BoundedAdamW: betas must lie in [0, 1), got {betas!r}")
        if not (math.isfinite(eps) and eps >= 0):
            raise ValueError(f"BoundedAdamW: eps must be a finite number >= 0, got {eps!r}")
        if not (isinstance(update_bound, (int, float)) and math.isfinite(update_bound) and update_bound > 0):
            raise ValueError(f"BoundedAdamW: update_bound must be a finite number > 0, got {update_bound!r}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      update_bound=float(update_bound)))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 (torch.optim.Optimizer.step)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd, c = group["lr"], group["eps"], group["weight_decay"], group["update_bound"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:  # torch.optim.AdamW's state layout (a float32 step counter on CPU)
                    st["step"] = torch.tensor(0.0, dtype=torch.float32)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                g = torch.nan_to_num(p.grad, nan=0.0, posinf=GRAD_LIMIT, neginf=-GRAD_LIMIT)
                g.clamp_(-GRAD_LIMIT, GRAD_LIMIT)
                m, v = st["exp_avg"], st["exp_avg_sq"]
                st["step"] += 1
                step = float(st["step"])
                # the order of torch.optim.adamw's _single_tensor_adamw (torch/optim/adam.py)
                p.mul_(1 - lr * wd)
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                bc1 = 1 - beta1 ** step
                bc2_sqrt = math.sqrt(1 - beta2 ** step)
                denom = (v.sqrt() / bc2_sqrt).add_(eps)
                # u * bc1 = m / denom, clipped to c * bc1; the step is lr / bc1 times it
                r = (m / denom).clamp_(-c * bc1, c * bc1)
                p.add_(r, alpha=-lr / bc1)
        return loss
