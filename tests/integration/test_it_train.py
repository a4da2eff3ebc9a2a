"""Training under the replay group: bit-identical at BER 0; keeps running under every guard with errors."""

import dataclasses
import math

import pytest

import torch

from integration.replay import GUARDS, ReplayConfig
from integration.sources import SourceConfig
from integration.train import TrainConfig, run_many

TINY = dict(steps=4, corpus="stdlib", n_layer=2, n_embd=32, n_head=2, block_size=16, batch_size=4,
            microbatches=2, eval_interval=100, eval_iters=1, comm_timeout_s=60.0)


def _errors(ber: float, guard: str = "none", mode: str = "endpoint", seed: int = 3) -> ReplayConfig:
    return ReplayConfig(source=SourceConfig(ber=ber, seed=seed, kind="independent"), mode=mode, guard=guard)


def _params(r):
    return torch.load(f"{r['out_dir']}/params.pt")


def _same(a, b):
    return torch.equal(_params(a), _params(b)) and a["train_loss"] == b["train_loss"]


@pytest.fixture(scope="module")
def ddp2():
    base = TrainConfig(parallel="ddp", world_size=2, **TINY)
    cfgs = [dataclasses.replace(base, wrapper=False),
            base,
            dataclasses.replace(base, replay=ReplayConfig(mode="ring"))]
    cfgs += [dataclasses.replace(base, replay=_errors(3e-4, g, mode=m))
             for g, m in zip(GUARDS, ("endpoint", "ring", "endpoint", "ring"))]
    return run_many(cfgs, timeout_s=240)


@pytest.fixture(scope="module")
def pp2():
    base = TrainConfig(parallel="pp", world_size=2, **TINY)
    cfgs = [dataclasses.replace(base, wrapper=False),
            base,
            dataclasses.replace(base, wrapper=False, schedule="1f1b"),
            dataclasses.replace(base, schedule="1f1b")]
    cfgs += [dataclasses.replace(base, schedule=s, replay=_errors(1e-3, g))
             for g, s in zip(GUARDS, ("gpipe", "1f1b", "gpipe", "1f1b"))]
    # ~0.3 flips per fp32 element: many elements take several flips, so Inf/NaN are certain
    cfgs.append(dataclasses.replace(base, replay=_errors(1e-2, "none")))
    cfgs.append(dataclasses.replace(base, schedule="1f1b", replay=ReplayConfig(mode="ring")))
    return run_many(cfgs, timeout_s=240)


def test_ddp_ber0_bit_identical_to_gloo_endpoint_and_ring(ddp2):
    plain, endpoint, ring = ddp2[:3]
    assert _same(plain, endpoint) and _same(plain, ring)
    assert endpoint["metrics"]["errors_injected"] == {} and endpoint["metrics"]["payload_bits"]["gradients"] > 0


def test_pp_ber0_bit_identical_to_gloo_gpipe_and_1f1b(pp2):
    assert _same(pp2[0], pp2[1]) and _same(pp2[2], pp2[3]) and _same(pp2[2], pp2[9])
    m = pp2[1]["metrics"]["payload_bits"]
    assert m["activations"] > 0 and m["activation_grads"] > 0


@pytest.mark.parametrize("i", range(len(GUARDS)))
def test_every_guard_keeps_training_with_errors(ddp2, pp2, i):
    guard = GUARDS[i]
    for r in (ddp2[3 + i], pp2[4 + i]):
        assert r["config"]["replay"]["guard"] == guard
        assert len(r["train_loss"]) == TINY["steps"]
        m = r["metrics"]
        assert sum(m["errors_injected"].values()) > 0
        if guard == "nan_to_zero_clamp":
            assert sum(m["guard_elements"].values()) > 0
            assert all(math.isfinite(x) for x in r["train_loss"]) and math.isfinite(r["param_norm"])
        if guard == "skip_nonfinite_step":
            assert r["skipped_steps"] == r["nonfinite_steps"] + r["overflow_steps"]
            assert math.isfinite(r["param_norm"])
        if guard == "exponent_protection":
            assert sum(m["errors_protected"].values()) > 0 and m["nonfinite_events"] == {}
            assert math.isfinite(r["param_norm"])


def test_nan_without_guard_is_reported(pp2):
    r = pp2[8]  # PP, guard none, stream BER 1e-2
    assert r["config"]["replay"]["guard"] == "none"
    assert r["nonfinite_steps"] > 0 and r["first_nonfinite_step"] is not None
    assert r["nonfinite_loss_steps"] > 0 and not math.isfinite(r["final_val_loss"])


def test_ring3_ddp_ber0_bit_identical_and_errors_diverge_replicas():
    base = TrainConfig(parallel="ddp", world_size=3, **dict(TINY, batch_size=6, eval_interval=2))
    plain, ring, noisy = run_many([dataclasses.replace(base, wrapper=False),
                                   dataclasses.replace(base, replay=ReplayConfig(mode="ring")),
                                   dataclasses.replace(base, replay=_errors(1e-4, "nan_to_zero_clamp", "ring"))],
                                  timeout_s=240)
    assert _same(plain, ring) and ring["final_divergence"] == 0.0
    assert noisy["final_divergence"] > 0.0  # all-gather hop errors make replicas differ
