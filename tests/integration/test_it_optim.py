"""``--optimizer adamw-bounded`` (:class:`integration.optim.BoundedAdamW`) against torch's AdamW:
one gradient element flipped to 3.4e35 freezes it in AdamW (``exp_avg_sq`` Inf, later updates 0),
not in the bounded one; on clean gradients both compute the same steps."""

import pytest
import torch

from integration.optim import BoundedAdamW
from integration.train import adam_step_factor

LR, BETAS = 1e-3, (0.9, 0.95)
SPIKE = 3.4e35  # a gradient of ~1e-3 with its top exponent bit flipped (fp32)


def _run(opt_cls, grads, **kw):
    p = torch.nn.Parameter(torch.zeros(len(grads[0])))
    opt = opt_cls([p], lr=LR, betas=BETAS, weight_decay=0.0, **kw)
    trail = []
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        trail.append(p.detach().clone())
    return trail, opt.state[p]


def test_one_flipped_gradient_freezes_adamw_not_the_bounded_one():
    clean = [1e-3, -2e-3, 5e-4]
    grads = [[1e-3, SPIKE, -2e-3, 5e-4]] + [[clean[0], 1e-3, *clean[1:]]] * 5
    plain, st = _run(torch.optim.AdamW, grads, foreach=False)
    assert torch.isinf(st["exp_avg_sq"][1])
    assert all(t[1] == plain[0][1] for t in plain[1:])  # frozen: the element never moves again
    bounded, st_b = _run(BoundedAdamW, grads)
    assert torch.isfinite(st_b["exp_avg_sq"]).all() and torch.isfinite(st_b["exp_avg"]).all()
    moves = [abs(float(bounded[0][1]))] + [abs(float(b[1] - a[1])) for a, b in zip(bounded, bounded[1:])]
    assert max(moves) <= LR * 1.0 * (1 + 2 ** -20)  # lr x c (c = 1), up to one fp32 rounding
    assert all(m > 0 for m in moves[1:])  # it keeps moving on the clean steps after the spike
    # the neighbours' steps are the plain AdamW's (the clip is per element)
    for a, b in zip(plain, bounded):
        torch.testing.assert_close(b[[0, 2, 3]], a[[0, 2, 3]], rtol=0, atol=1e-9)


def test_an_inf_or_nan_gradient_leaves_the_state_finite():
    bounded, st = _run(BoundedAdamW, [[float("inf"), float("nan"), -float("inf")], [1e-3, 1e-3, 1e-3]])
    assert torch.isfinite(st["exp_avg_sq"]).all() and torch.isfinite(bounded[-1]).all()


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_on_clean_gradients_it_is_torch_adamw(wd):
    """20 steps of random gradients on a 1000-element matrix: the same weights as torch's AdamW,
    to rounding. The bound c = 2 is above Adam's own largest step (``adam_step_factor``: 1.165 at
    these betas), so the clip never binds and the two differ only in rounding: torch's ``addcdiv_``
    rounds ``p - lr/bc1 * m/denom`` once, ours rounds the quotient ``m/denom`` first (one fp32
    rounding of a step <= 1.165 lr: <= 2^-24 x 1.165 lr per step), so after n steps the weights
    differ by at most n x (that + one ulp of the weight)."""
    assert adam_step_factor(*BETAS) < 2.0
    gen = torch.Generator().manual_seed(7)
    w0 = torch.randn(40, 25, generator=gen) * 0.1
    grads = [torch.randn(40, 25, generator=gen) * 1e-2 for _ in range(20)]
    pa, pb = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    oa = torch.optim.AdamW([pa], lr=LR, betas=BETAS, weight_decay=wd, foreach=False)
    ob = BoundedAdamW([pb], lr=LR, betas=BETAS, weight_decay=wd, update_bound=2.0)
    for n, g in enumerate(grads, 1):
        pa.grad, pb.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
        ulp = torch.finfo(torch.float32).eps * float(pa.detach().abs().max())
        torch.testing.assert_close(pb.detach(), pa.detach(), rtol=0, atol=n * (2 ** -24 * 1.165 * LR + ulp))
    for k in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(ob.state[pb][k], oa.state[pa][k])  # the moments are computed exactly alike


def test_bad_update_bound_is_refused():
    p = torch.nn.Parameter(torch.zeros(1))
    for c in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="update_bound"):
            BoundedAdamW([p], update_bound=c)


def test_the_update_is_clipped_to_c_learning_rates():
    """Adam's first step is ``g / (|g| + eps)`` ~ 1 learning rate per element; with c = 0.25 every
    element moves exactly 0.25 lr (to rounding), the spike's too."""
    bounded, _ = _run(BoundedAdamW, [[1e-3, SPIKE, -2e-3, 5e-4]], update_bound=0.25)
    torch.testing.assert_close(bounded[0].abs(), torch.full((4,), 0.25 * LR), rtol=2 ** -20, atol=0)
